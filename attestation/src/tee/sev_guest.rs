//! The `/dev/sev-guest` character device (linux/sev-guest.h), for kernels without configfs-tsm.
//!
//! SNP_GET_EXT_REPORT asks the PSP for a report and the host for its certificate table; if the host offers no
//! table (or refuses), SNP_GET_REPORT gets the report alone. The response is MSG_REPORT_RSP of the SEV-SNP ABI:
//! status (u32), report size (u32), 24 reserved bytes, then the ATTESTATION_REPORT. The ioctls are issued
//! directly rather than through the `sev` crate because the evidence needs the report's exact bytes and the
//! host's certificate table must be parsed with bounds checks ([`super::certtable`]).

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

/// The `/dev/sev-guest` backend.
#[derive(Debug, Clone)]
pub struct SevGuestDevice {
    path: PathBuf,
    vmpl: u32,
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
        Ok(SevGuestDevice {
            path: path.to_owned(),
            vmpl: 0,
        })
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
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|source| TeeError::Io {
                op: "open",
                path: self.path.clone(),
                source,
            })?;
        let mut resp = Box::new(SnpReportResp { data: [0u8; 4000] });
        let data = SnpReportReq {
            user_data: *report_data,
            vmpl: self.vmpl,
            rsvd: [0; 28],
        };
        let mut guest_req = SnpGuestRequestIoctl {
            msg_version: MSG_VERSION,
            ..Default::default()
        };
        guest_req.resp_data = (&mut *resp as *mut SnpReportResp) as u64;
        let fd = file.as_raw_fd();
        let (result, name, certs_len) = match certs {
            Some(buf) => {
                let mut ext = SnpExtReportReq {
                    data,
                    certs_address: buf.as_mut_slice().as_mut_ptr() as u64,
                    certs_len: u32::try_from(buf.len).unwrap_or(u32::MAX),
                };
                guest_req.req_data = (&mut ext as *mut SnpExtReportReq) as u64;
                // SAFETY: `guest_req` points at `ext` and `resp`, and `ext` at `buf`, all alive and of the sizes
                // the kernel's structures have; the kernel writes only within them.
                #[allow(unsafe_code)]
                let r = unsafe { ioctls::snp_get_ext_report(fd, &mut guest_req) };
                (r, "SNP_GET_EXT_REPORT", ext.certs_len)
            }
            None => {
                let mut data = data;
                guest_req.req_data = (&mut data as *mut SnpReportReq) as u64;
                // SAFETY: `guest_req` points at `data` and `resp`, alive and of the kernel's sizes.
                #[allow(unsafe_code)]
                let r = unsafe { ioctls::snp_get_report(fd, &mut guest_req) };
                (r, "SNP_GET_REPORT", 0)
            }
        };
        *certs_len_out = certs_len;
        if let Err(errno) = result {
            return Err(TeeError::Ioctl {
                device: self.path.clone(),
                request: name,
                errno,
                fw_error: (guest_req.exitinfo2 & 0xffff_ffff) as u32,
                vmm_error: (guest_req.exitinfo2 >> 32) as u32,
            });
        }
        let report = parse_report_response(&resp.data).map_err(|detail| TeeError::Malformed {
            source_name: format!("{} {name}", self.path.display()),
            detail,
        })?;
        Ok(report)
    }
}

/// Extracts the report from MSG_REPORT_RSP (status, size, reserved, report).
pub(crate) fn parse_report_response(data: &[u8]) -> Result<Vec<u8>, String> {
    let word = |o: usize| {
        data.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let status = word(0).ok_or("response shorter than its header")?;
    let size = word(4).ok_or("response shorter than its header")? as usize;
    if status != 0 {
        return Err(format!("firmware status {status:#x}"));
    }
    if size < crate::snp::REPORT_LEN {
        return Err(format!(
            "report size {size} is below {}",
            crate::snp::REPORT_LEN
        ));
    }
    data.get(RSP_REPORT_OFFSET..RSP_REPORT_OFFSET + size)
        .map(|r| r.to_vec())
        .ok_or_else(|| {
            format!(
                "report size {size} does not fit in the {}-byte response",
                data.len()
            )
        })
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
            .contains("status"));
        rsp[0] = 0;
        rsp[4..8].copy_from_slice(&5000u32.to_le_bytes());
        assert!(parse_report_response(&rsp)
            .expect_err("size")
            .contains("does not fit"));
        assert!(parse_report_response(&rsp[..3]).is_err());
    }
}
