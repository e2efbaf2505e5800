//! The `/dev/sev-guest` character device (linux/sev-guest.h), for kernels without configfs-tsm.
//!
//! SNP_GET_EXT_REPORT asks the PSP for a report and the host for its certificate table; if the host offers no
//! table (or refuses), SNP_GET_REPORT gets the report alone. The response is MSG_REPORT_RSP of the SEV-SNP ABI:
//! status (u32), report size (u32), 24 reserved bytes, then the ATTESTATION_REPORT. The ioctls are issued
//! directly rather than through the `sev` crate because the evidence needs the report's exact bytes and the
//! host's certificate table must be parsed with bounds checks ([`super::certtable`]); the `sev` crate's guest
//! `Firmware::get_ext_report` parses the report into a struct and drops the bytes the signature covers.
//! The two ioctls sit behind [`SevGuestIoctl`], so the retry and fallback logic is tested against a fake.

use super::certtable::{certs_in_evidence_order, parse_cert_table};
use super::{RawEvidence, Tee, TeeError};
use crate::evidence::TeeLabel;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The device path.
pub const DEFAULT_SEV_GUEST_DEVICE: &str = "/dev/sev-guest";

/// `struct snp_guest_request_ioctl`.
#[repr(C)]
#[derive(Default)]
struct SnpGuestRequestIoctl {
    msg_version: u8,
    req_data: u64,
    resp_data: u64,
    /// `exitinfo2`: firmware error in the low 32 bits, VMM error in the high 32 bits.
    exitinfo2: u64,
}

/// `struct snp_report_req`.
#[repr(C)]
struct SnpReportReq {
    user_data: [u8; 64],
    vmpl: u32,
    rsvd: [u8; 28],
}

/// `struct snp_report_resp`.
#[repr(C)]
struct SnpReportResp {
    data: [u8; 4000],
}

/// `struct snp_ext_report_req`.
#[repr(C)]
struct SnpExtReportReq {
    data: SnpReportReq,
    certs_address: u64,
    certs_len: u32,
}

#[allow(unsafe_code)]
mod ioctls {
    use super::SnpGuestRequestIoctl;
    nix::ioctl_readwrite!(snp_get_report, b'S', 0x0, SnpGuestRequestIoctl);
    nix::ioctl_readwrite!(snp_get_ext_report, b'S', 0x2, SnpGuestRequestIoctl);
}

/// VMM error meaning "certificate buffer too small" (`certs_len` then holds the size needed).
const SNP_GUEST_VMM_ERR_INVALID_LEN: u32 = 1;

/// Page size the certificate buffer must be aligned to and sized in.
const PAGE: usize = 4096;

/// Largest certificate buffer accepted from the host.
const MAX_CERTS_LEN: usize = 1024 * 1024;

/// Message version of the guest request.
const MSG_VERSION: u8 = 1;

/// Offset of the report inside MSG_REPORT_RSP.
const RSP_REPORT_OFFSET: usize = 0x20;

/// A page-aligned, zeroed buffer (the kernel requires page alignment for the certificate area).
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + PAGE];
        let addr = storage.as_ptr() as usize;
        let start = (PAGE - addr % PAGE) % PAGE;
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

/// A failed guest-request ioctl: the errno and `exitinfo2` (firmware error low 32 bits, VMM error high).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoctlError {
    /// The errno.
    pub errno: nix::errno::Errno,
    /// `exitinfo2` of the request.
    pub exitinfo2: u64,
}

/// The guest-request ioctls of `/dev/sev-guest`; [`DevSevGuest`] issues them, tests stand in a fake.
pub trait SevGuestIoctl: Send + Sync + std::fmt::Debug {
    /// SNP_GET_REPORT: MSG_REPORT_RSP for `user_data` at `vmpl` into `resp`.
    fn get_report(
        &self,
        user_data: &[u8; 64],
        vmpl: u32,
        resp: &mut [u8; 4000],
    ) -> Result<(), IoctlError>;
    /// SNP_GET_EXT_REPORT: as [`Self::get_report`], and the host's certificate table into `certs` (page
    /// aligned, a whole number of pages); `certs_len` holds the buffer's length on entry and the length the
    /// host wrote or needs on return.
    fn get_ext_report(
        &self,
        user_data: &[u8; 64],
        vmpl: u32,
        resp: &mut [u8; 4000],
        certs: &mut [u8],
        certs_len: &mut u32,
    ) -> Result<(), IoctlError>;
}

/// The real device.
#[derive(Debug, Clone)]
pub struct DevSevGuest {
    path: PathBuf,
}

impl DevSevGuest {
    fn open(&self) -> Result<std::fs::File, IoctlError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| IoctlError {
                errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                exitinfo2: 0,
            })
    }
}

impl SevGuestIoctl for DevSevGuest {
    fn get_report(
        &self,
        user_data: &[u8; 64],
        vmpl: u32,
        resp: &mut [u8; 4000],
    ) -> Result<(), IoctlError> {
        let file = self.open()?;
        let mut data = SnpReportReq {
            user_data: *user_data,
            vmpl,
            rsvd: [0; 28],
        };
        let mut out = Box::new(SnpReportResp { data: [0u8; 4000] });
        let mut guest_req = SnpGuestRequestIoctl {
            msg_version: MSG_VERSION,
            req_data: (&mut data as *mut SnpReportReq) as u64,
            resp_data: (&mut *out as *mut SnpReportResp) as u64,
            exitinfo2: 0,
        };
        // SAFETY: `guest_req` points at `data` and `out`, alive and of the kernel's sizes.
        #[allow(unsafe_code)]
        let r = unsafe { ioctls::snp_get_report(file.as_raw_fd(), &mut guest_req) };
        r.map_err(|errno| IoctlError {
            errno,
            exitinfo2: guest_req.exitinfo2,
        })?;
        resp.copy_from_slice(&out.data);
        Ok(())
    }

    fn get_ext_report(
        &self,
        user_data: &[u8; 64],
        vmpl: u32,
        resp: &mut [u8; 4000],
        certs: &mut [u8],
        certs_len: &mut u32,
    ) -> Result<(), IoctlError> {
        let file = self.open()?;
        let mut ext = SnpExtReportReq {
            data: SnpReportReq {
                user_data: *user_data,
                vmpl,
                rsvd: [0; 28],
            },
            certs_address: certs.as_mut_ptr() as u64,
            certs_len: *certs_len,
        };
        let mut out = Box::new(SnpReportResp { data: [0u8; 4000] });
        let mut guest_req = SnpGuestRequestIoctl {
            msg_version: MSG_VERSION,
            req_data: (&mut ext as *mut SnpExtReportReq) as u64,
            resp_data: (&mut *out as *mut SnpReportResp) as u64,
            exitinfo2: 0,
        };
        // SAFETY: `guest_req` points at `ext` and `out`, and `ext` at `certs` (of `certs_len` bytes), all alive
        // and of the sizes the kernel's structures have; the kernel writes only within them.
        #[allow(unsafe_code)]
        let r = unsafe { ioctls::snp_get_ext_report(file.as_raw_fd(), &mut guest_req) };
        *certs_len = ext.certs_len;
        r.map_err(|errno| IoctlError {
            errno,
            exitinfo2: guest_req.exitinfo2,
        })?;
        resp.copy_from_slice(&out.data);
        Ok(())
    }
}

/// The `/dev/sev-guest` backend.
#[derive(Debug, Clone)]
pub struct SevGuestDevice {
    path: PathBuf,
    vmpl: u32,
    ioctl: std::sync::Arc<dyn SevGuestIoctl>,
}

impl SevGuestDevice {
    /// Uses the device at `path` (checked to exist), requesting VMPL 0 reports.
    pub fn open(path: &Path) -> Result<SevGuestDevice, TeeError> {
        if !path.exists() {
            return Err(TeeError::NotPresent(format!(
                "{} does not exist",
                path.display()
            )));
        }
        Ok(SevGuestDevice::with_ioctl(
            path,
            std::sync::Arc::new(DevSevGuest {
                path: path.to_owned(),
            }),
        ))
    }

    /// The backend over `ioctl` (tests use a fake); `path` names the device in errors.
    pub fn with_ioctl(path: &Path, ioctl: std::sync::Arc<dyn SevGuestIoctl>) -> SevGuestDevice {
        SevGuestDevice {
            path: path.to_owned(),
            vmpl: 0,
            ioctl,
        }
    }

    /// Requests reports at `vmpl` (0..=3).
    pub fn with_vmpl(mut self, vmpl: u32) -> Result<SevGuestDevice, TeeError> {
        if vmpl > 3 {
            return Err(TeeError::Unsupported(format!("VMPL {vmpl} is above 3")));
        }
        self.vmpl = vmpl;
        Ok(self)
    }

    /// One guest request; with `certs`, an extended one whose `certs_len` (the table size the host needs or
    /// wrote) is stored in `certs_len_out`.
    fn request(
        &self,
        report_data: &[u8; 64],
        certs: Option<&mut AlignedBuf>,
        certs_len_out: &mut u32,
    ) -> Result<Vec<u8>, TeeError> {
        let mut resp = Box::new([0u8; 4000]);
        let (result, name) = match certs {
            Some(buf) => {
                let mut len = u32::try_from(buf.len).unwrap_or(u32::MAX);
                let r = self.ioctl.get_ext_report(
                    report_data,
                    self.vmpl,
                    &mut resp,
                    buf.as_mut_slice(),
                    &mut len,
                );
                *certs_len_out = len;
                (r, "SNP_GET_EXT_REPORT")
            }
            None => {
                *certs_len_out = 0;
                (
                    self.ioctl.get_report(report_data, self.vmpl, &mut resp),
                    "SNP_GET_REPORT",
                )
            }
        };
        if let Err(e) = result {
            return Err(TeeError::Ioctl {
                device: self.path.clone(),
                request: name,
                errno: e.errno,
                fw_error: (e.exitinfo2 & 0xffff_ffff) as u32,
                vmm_error: (e.exitinfo2 >> 32) as u32,
            });
        }
        let report = parse_report_response(&resp[..]).map_err(|e| TeeError::Malformed {
            source_name: format!("{} {name}", self.path.display()),
            detail: e.to_string(),
        })?;
        Ok(report)
    }
}

/// What is wrong with an MSG_REPORT_RSP ([`parse_report_response`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReportResponseError {
    /// Fewer bytes than STATUS and REPORT_SIZE.
    #[error("response shorter than its header")]
    ShortHeader,
    /// The firmware's status is not success.
    #[error("firmware status {0:#x}")]
    Status(u32),
    /// REPORT_SIZE is below an attestation report's length.
    #[error("report size {0} is below {len}", len = crate::snp::REPORT_LEN)]
    ReportTooSmall(usize),
    /// REPORT_SIZE runs past the response.
    #[error("report size {size} does not fit in the {response}-byte response")]
    ReportDoesNotFit {
        /// REPORT_SIZE.
        size: usize,
        /// The response's length.
        response: usize,
    },
}

/// Extracts the report from MSG_REPORT_RSP (status, size, reserved, report).
pub(crate) fn parse_report_response(data: &[u8]) -> Result<Vec<u8>, ReportResponseError> {
    let mut r = crate::wire::Reader::new("MSG_REPORT_RSP", data);
    let header = |_| ReportResponseError::ShortHeader;
    let status = r.u32_le("STATUS").map_err(header)?;
    let size = r.u32_le("REPORT_SIZE").map_err(header)? as usize;
    if status != 0 {
        return Err(ReportResponseError::Status(status));
    }
    if size < crate::snp::REPORT_LEN {
        return Err(ReportResponseError::ReportTooSmall(size));
    }
    // The reserved bytes up to the report are not interpreted; what follows the report is the buffer's slack.
    let fits = |_| ReportResponseError::ReportDoesNotFit {
        size,
        response: data.len(),
    };
    r.take("reserved", RSP_REPORT_OFFSET - r.offset())
        .map_err(fits)?;
    r.take("REPORT", size).map(<[u8]>::to_vec).map_err(fits)
}

impl Tee for SevGuestDevice {
    fn label(&self) -> TeeLabel {
        TeeLabel::SevSnp
    }

    fn get_report(&self, report_data: &[u8; 64]) -> Result<RawEvidence, TeeError> {
        let mut buf = AlignedBuf::new(4 * PAGE);
        let mut needed = 0u32;
        let (report, table) = match self.request(report_data, Some(&mut buf), &mut needed) {
            Ok(report) => (report, buf.as_slice().to_vec()),
            Err(TeeError::Ioctl {
                vmm_error: SNP_GUEST_VMM_ERR_INVALID_LEN,
                ..
            }) => {
                // The host's table is larger than our buffer; certs_len now holds the size it needs.
                let len = (needed as usize).div_ceil(PAGE) * PAGE;
                if len == 0 || len > MAX_CERTS_LEN {
                    return Err(TeeError::Malformed {
                        source_name: self.path.display().to_string(),
                        detail: format!("host asks for a {needed}-byte certificate buffer (limit {MAX_CERTS_LEN})"),
                    });
                }
                let mut big = AlignedBuf::new(len);
                let report = self.request(report_data, Some(&mut big), &mut needed)?;
                (report, big.as_slice().to_vec())
            }
            // Hosts without extended-report support: the report alone.
            Err(TeeError::Ioctl { .. }) => {
                (self.request(report_data, None, &mut needed)?, Vec::new())
            }
            Err(e) => return Err(e),
        };
        if report.get(0x50..0x90) != Some(&report_data[..]) {
            return Err(TeeError::Malformed {
                source_name: self.path.display().to_string(),
                detail: "the report's REPORT_DATA is not the data requested".into(),
            });
        }
        let certs = certs_in_evidence_order(&parse_cert_table(&table)?);
        Ok(RawEvidence {
            report,
            certs,
            collateral: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_kernel() {
        assert_eq!(std::mem::size_of::<SnpGuestRequestIoctl>(), 32);
        assert_eq!(std::mem::size_of::<SnpReportReq>(), 96);
        assert_eq!(std::mem::size_of::<SnpReportResp>(), 4000);
        assert_eq!(std::mem::size_of::<SnpExtReportReq>(), 112);
    }

    #[test]
    fn aligned_buffer_is_page_aligned() {
        let mut b = AlignedBuf::new(2 * PAGE);
        assert_eq!(b.as_mut_slice().as_ptr() as usize % PAGE, 0);
        assert_eq!(b.as_slice().len(), 2 * PAGE);
    }

    use crate::tee::certtable::{build_cert_table, CertKind, CertTableEntry};
    use std::sync::Mutex;

    /// A fake PSP and host: answers with a report over the user data, the host's table when the buffer is
    /// large enough (else EIO with the VMM's "invalid length" and the size needed), or ENOTTY for hosts
    /// without extended reports.
    #[derive(Debug)]
    struct FakeSev {
        table: Vec<u8>,
        ext: bool,
        errno: Option<nix::errno::Errno>,
        calls: Mutex<Vec<(&'static str, usize)>>,
    }

    impl FakeSev {
        fn response(user_data: &[u8; 64], resp: &mut [u8; 4000]) {
            resp.fill(0);
            resp[4..8].copy_from_slice(&(crate::snp::REPORT_LEN as u32).to_le_bytes());
            resp[0x20] = 2; // version
            resp[0x20 + 0x50..0x20 + 0x90].copy_from_slice(user_data);
        }
    }

    impl SevGuestIoctl for FakeSev {
        fn get_report(
            &self,
            user_data: &[u8; 64],
            _vmpl: u32,
            resp: &mut [u8; 4000],
        ) -> Result<(), IoctlError> {
            self.calls.lock().expect("lock").push(("report", 0));
            if let Some(errno) = self.errno {
                return Err(IoctlError {
                    errno,
                    exitinfo2: 0,
                });
            }
            FakeSev::response(user_data, resp);
            Ok(())
        }

        fn get_ext_report(
            &self,
            user_data: &[u8; 64],
            _vmpl: u32,
            resp: &mut [u8; 4000],
            certs: &mut [u8],
            certs_len: &mut u32,
        ) -> Result<(), IoctlError> {
            self.calls.lock().expect("lock").push(("ext", certs.len()));
            assert_eq!(
                certs.as_ptr() as usize % PAGE,
                0,
                "the kernel needs a page-aligned buffer"
            );
            assert_eq!(*certs_len as usize, certs.len());
            if let Some(errno) = self.errno {
                return Err(IoctlError {
                    errno,
                    exitinfo2: 0,
                });
            }
            if !self.ext {
                return Err(IoctlError {
                    errno: nix::errno::Errno::ENOTTY,
                    exitinfo2: 0,
                });
            }
            if certs.len() < self.table.len() {
                *certs_len = self.table.len() as u32;
                return Err(IoctlError {
                    errno: nix::errno::Errno::EIO,
                    exitinfo2: u64::from(SNP_GUEST_VMM_ERR_INVALID_LEN) << 32,
                });
            }
            certs[..self.table.len()].copy_from_slice(&self.table);
            *certs_len = self.table.len() as u32;
            FakeSev::response(user_data, resp);
            Ok(())
        }
    }

    fn fake(
        table: Vec<u8>,
        ext: bool,
        errno: Option<nix::errno::Errno>,
    ) -> std::sync::Arc<FakeSev> {
        std::sync::Arc::new(FakeSev {
            table,
            ext,
            errno,
            calls: Mutex::new(Vec::new()),
        })
    }

    fn table(vcek_len: usize) -> Vec<u8> {
        build_cert_table(&[
            CertTableEntry {
                kind: CertKind::Ark,
                data: vec![3; 900],
            },
            CertTableEntry {
                kind: CertKind::Vcek,
                data: vec![1; vcek_len],
            },
            CertTableEntry {
                kind: CertKind::Ask,
                data: vec![2; 1000],
            },
        ])
    }

    #[test]
    fn extended_report_with_the_hosts_certificates() {
        let f = fake(table(1200), true, None);
        let dev = SevGuestDevice::with_ioctl(Path::new("/dev/sev-guest"), f.clone());
        let rd = [7u8; 64];
        let raw = dev.get_report(&rd).expect("report");
        assert_eq!(&raw.report[0x50..0x90], &rd[..]);
        // Evidence order: VCEK, ASK, ARK, whatever the table's order.
        assert_eq!(raw.certs, vec![vec![1; 1200], vec![2; 1000], vec![3; 900]]);
        assert_eq!(
            f.calls.lock().expect("lock").as_slice(),
            &[("ext", 4 * PAGE)]
        );
    }

    #[test]
    fn a_larger_table_is_fetched_with_the_size_the_host_asks_for() {
        let f = fake(table(5 * PAGE), true, None);
        let dev = SevGuestDevice::with_ioctl(Path::new("/dev/sev-guest"), f.clone());
        let raw = dev.get_report(&[1u8; 64]).expect("report");
        assert_eq!(raw.certs[0].len(), 5 * PAGE);
        let calls = f.calls.lock().expect("lock").clone();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[1].0, "ext");
        assert!(
            calls[1].1 >= 5 * PAGE + 2000 && calls[1].1 % PAGE == 0,
            "{calls:?}"
        );
    }

    #[test]
    fn hosts_without_extended_reports_give_the_report_alone() {
        let f = fake(Vec::new(), false, None);
        let dev = SevGuestDevice::with_ioctl(Path::new("/dev/sev-guest"), f.clone());
        let raw = dev.get_report(&[9u8; 64]).expect("report");
        assert!(raw.certs.is_empty());
        let calls: Vec<&str> = f.calls.lock().expect("lock").iter().map(|c| c.0).collect();
        assert_eq!(calls, ["ext", "report"]);
    }

    #[test]
    fn enodev_is_named_with_the_device_and_request() {
        let f = fake(Vec::new(), true, Some(nix::errno::Errno::ENODEV));
        let dev = SevGuestDevice::with_ioctl(Path::new("/dev/sev-guest"), f);
        let e = dev.get_report(&[0u8; 64]).expect_err("enodev");
        let text = e.to_string();
        assert!(text.contains("SNP_GET_REPORT on /dev/sev-guest"), "{text}");
        assert!(matches!(
            e,
            TeeError::Ioctl {
                errno: nix::errno::Errno::ENODEV,
                ..
            }
        ));
    }

    #[test]
    fn report_response_parsing() {
        let mut rsp = vec![0u8; 4000];
        rsp[4..8].copy_from_slice(&(crate::snp::REPORT_LEN as u32).to_le_bytes());
        rsp[0x20] = 5;
        let r = parse_report_response(&rsp).expect("ok");
        assert_eq!(r.len(), crate::snp::REPORT_LEN);
        assert_eq!(r[0], 5);
        rsp[0] = 0x16;
        assert!(parse_report_response(&rsp)
            .expect_err("status")
            .to_string()
            .contains("status"));
        rsp[0] = 0;
        rsp[4..8].copy_from_slice(&5000u32.to_le_bytes());
        assert!(parse_report_response(&rsp)
            .expect_err("size")
            .to_string()
            .contains("does not fit"));
        assert!(parse_report_response(&rsp[..3]).is_err());
    }
}
