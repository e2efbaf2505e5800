//! The `/dev/tdx_guest` character device (linux/tdx-guest.h): TDX_CMD_GET_REPORT0 for the TDREPORT.
//!
//! A TDREPORT is MAC'd for the local platform only; a remote verifier needs a quote, which the Quoting Enclave
//! makes from it. Upstream kernels expose quote generation only through configfs-tsm (the old GET_QUOTE ioctl
//! never landed upstream), so this device is not a [`super::Tee`]: it serves local checks and diagnostics.

use super::TeeError;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The device path.
pub const DEFAULT_TDX_GUEST_DEVICE: &str = "/dev/tdx_guest";

/// Length of a TDREPORT_STRUCT.
pub const TDREPORT_LEN: usize = 1024;

/// `struct tdx_report_req`.
#[repr(C)]
struct TdxReportReq {
    reportdata: [u8; 64],
    tdreport: [u8; TDREPORT_LEN],
}

#[allow(unsafe_code)]
mod ioctls {
    use super::TdxReportReq;
    nix::ioctl_readwrite!(tdx_cmd_get_report0, b'T', 1, TdxReportReq);
}

/// The `/dev/tdx_guest` device.
#[derive(Debug, Clone)]
pub struct TdxGuestDevice {
    path: PathBuf,
}

impl TdxGuestDevice {
    /// Uses the device at `path` (checked to exist).
    pub fn open(path: &Path) -> Result<TdxGuestDevice, TeeError> {
        if !path.exists() {
            return Err(TeeError::NotPresent(format!(
                "{} does not exist",
                path.display()
            )));
        }
        Ok(TdxGuestDevice {
            path: path.to_owned(),
        })
    }

    /// The TDREPORT whose REPORTDATA is `report_data` (TDX_CMD_GET_REPORT0).
    pub fn get_tdreport(
        &self,
        report_data: &[u8; 64],
    ) -> Result<Box<[u8; TDREPORT_LEN]>, TeeError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|source| TeeError::Io {
                op: "open",
                path: self.path.clone(),
                source,
            })?;
        let mut req = Box::new(TdxReportReq {
            reportdata: *report_data,
            tdreport: [0u8; TDREPORT_LEN],
        });
        // SAFETY: `req` is a live `struct tdx_report_req` of the kernel's size; the kernel writes only within it.
        #[allow(unsafe_code)]
        let r = unsafe { ioctls::tdx_cmd_get_report0(file.as_raw_fd(), &mut *req) };
        r.map_err(|errno| TeeError::Ioctl {
            device: self.path.clone(),
            request: "TDX_CMD_GET_REPORT0",
            errno,
            fw_error: 0,
            vmm_error: 0,
        })?;
        Ok(Box::new(req.tdreport))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_size_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<TdxReportReq>(), 1088);
    }

    #[test]
    fn missing_device_is_not_present() {
        let err = TdxGuestDevice::open(Path::new("/nonexistent/tdx_guest")).expect_err("absent");
        assert!(matches!(err, TeeError::NotPresent(_)));
    }
}
