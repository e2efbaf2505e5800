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

/// Offset of REPORTDATA in a TDREPORT_STRUCT (inside REPORTMACSTRUCT: type 8, reserved 12, CPUSVN 16,
/// TEE_TCB_INFO_HASH 48, TEE_INFO_HASH 48, then REPORTDATA 64).
pub const TDREPORT_REPORTDATA_OFFSET: usize = 128;

/// TDX_CMD_GET_REPORT0 of `/dev/tdx_guest`; [`DevTdxGuest`] issues it, tests stand in a fake.
pub trait TdxGuestIoctl: Send + Sync + std::fmt::Debug {
    /// The TDREPORT over `reportdata` into `tdreport`.
    fn get_report0(
        &self,
        reportdata: &[u8; 64],
        tdreport: &mut [u8; TDREPORT_LEN],
    ) -> Result<(), nix::errno::Errno>;
}

/// The real device.
#[derive(Debug, Clone)]
pub struct DevTdxGuest {
    path: PathBuf,
}

impl TdxGuestIoctl for DevTdxGuest {
    fn get_report0(
        &self,
        reportdata: &[u8; 64],
        tdreport: &mut [u8; TDREPORT_LEN],
    ) -> Result<(), nix::errno::Errno> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let mut req = Box::new(TdxReportReq {
            reportdata: *reportdata,
            tdreport: [0u8; TDREPORT_LEN],
        });
        // SAFETY: `req` is a live `struct tdx_report_req` of the kernel's size; the kernel writes only within it.
        #[allow(unsafe_code)]
        let r = unsafe { ioctls::tdx_cmd_get_report0(file.as_raw_fd(), &mut *req) };
        r?;
        tdreport.copy_from_slice(&req.tdreport);
        Ok(())
    }
}

/// The `/dev/tdx_guest` device.
#[derive(Debug, Clone)]
pub struct TdxGuestDevice {
    path: PathBuf,
    ioctl: std::sync::Arc<dyn TdxGuestIoctl>,
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
        Ok(TdxGuestDevice::with_ioctl(
            path,
            std::sync::Arc::new(DevTdxGuest {
                path: path.to_owned(),
            }),
        ))
    }

    /// The device over `ioctl` (tests use a fake); `path` names it in errors.
    pub fn with_ioctl(path: &Path, ioctl: std::sync::Arc<dyn TdxGuestIoctl>) -> TdxGuestDevice {
        TdxGuestDevice {
            path: path.to_owned(),
            ioctl,
        }
    }

    /// The TDREPORT whose REPORTDATA is `report_data` (TDX_CMD_GET_REPORT0), checked to carry it.
    pub fn get_tdreport(
        &self,
        report_data: &[u8; 64],
    ) -> Result<Box<[u8; TDREPORT_LEN]>, TeeError> {
        let mut out = Box::new([0u8; TDREPORT_LEN]);
        self.ioctl
            .get_report0(report_data, &mut out)
            .map_err(|errno| TeeError::Ioctl {
                device: self.path.clone(),
                request: "TDX_CMD_GET_REPORT0",
                errno,
                fw_error: 0,
                vmm_error: 0,
            })?;
        if out[TDREPORT_REPORTDATA_OFFSET..TDREPORT_REPORTDATA_OFFSET + 64] != report_data[..] {
            return Err(TeeError::Malformed {
                source_name: self.path.display().to_string(),
                detail: "the TDREPORT's REPORTDATA is not the data requested".into(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_size_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<TdxReportReq>(), 1088);
    }

    #[derive(Debug)]
    struct FakeTdx {
        flip: bool,
        errno: Option<nix::errno::Errno>,
    }

    impl TdxGuestIoctl for FakeTdx {
        fn get_report0(
            &self,
            reportdata: &[u8; 64],
            tdreport: &mut [u8; TDREPORT_LEN],
        ) -> Result<(), nix::errno::Errno> {
            if let Some(e) = self.errno {
                return Err(e);
            }
            tdreport[0] = 0x81;
            tdreport[TDREPORT_REPORTDATA_OFFSET..TDREPORT_REPORTDATA_OFFSET + 64]
                .copy_from_slice(reportdata);
            if self.flip {
                tdreport[TDREPORT_REPORTDATA_OFFSET] ^= 1;
            }
            Ok(())
        }
    }

    #[test]
    fn tdreport_through_a_fake_device() {
        let p = Path::new("/dev/tdx_guest");
        let ok = TdxGuestDevice::with_ioctl(
            p,
            std::sync::Arc::new(FakeTdx {
                flip: false,
                errno: None,
            }),
        );
        let r = ok.get_tdreport(&[5u8; 64]).expect("tdreport");
        assert_eq!(
            &r[TDREPORT_REPORTDATA_OFFSET..TDREPORT_REPORTDATA_OFFSET + 64],
            &[5u8; 64][..]
        );
        let bad = TdxGuestDevice::with_ioctl(
            p,
            std::sync::Arc::new(FakeTdx {
                flip: true,
                errno: None,
            }),
        );
        assert!(bad
            .get_tdreport(&[5u8; 64])
            .expect_err("other data")
            .to_string()
            .contains("REPORTDATA is not the data requested"));
        let nodev = TdxGuestDevice::with_ioctl(
            p,
            std::sync::Arc::new(FakeTdx {
                flip: false,
                errno: Some(nix::errno::Errno::ENODEV),
            }),
        );
        let e = nodev.get_tdreport(&[0u8; 64]).expect_err("enodev");
        assert!(
            e.to_string()
                .contains("TDX_CMD_GET_REPORT0 on /dev/tdx_guest"),
            "{e}"
        );
    }

    #[test]
    fn missing_device_is_not_present() {
        let err = TdxGuestDevice::open(Path::new("/nonexistent/tdx_guest")).expect_err("absent");
        assert!(matches!(err, TeeError::NotPresent(_)));
    }
}
