//! The `Tee` trait and its backends: configfs-tsm, /dev/sev-guest, /dev/tdx_guest, and sim.
//!
//! A backend turns 64 bytes of report data into hardware evidence (an SNP report or a TDX quote) plus the
//! certificates and collateral the platform hands out with it. [`detect`] picks the backend of the machine.

pub mod certtable;
pub mod configfs;
pub mod sev_guest;
pub mod tdx_guest;

use crate::evidence::{Collateral, TeeLabel};
use std::path::PathBuf;

pub use certtable::{parse_cert_table, CertKind, CertTableEntry, CertTableError};
pub use configfs::{ConfigfsOps, ConfigfsTsm, RealFs, DEFAULT_TSM_REPORT_ROOT};
pub use sev_guest::{SevGuestDevice, DEFAULT_SEV_GUEST_DEVICE};
pub use tdx_guest::{TdxGuestDevice, DEFAULT_TDX_GUEST_DEVICE, TDREPORT_LEN};

/// What a backend returns: the report or quote, and the certificates and collateral that came with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawEvidence {
    /// SNP ATTESTATION_REPORT or TDX quote, exactly as produced.
    pub report: Vec<u8>,
    /// DER certificates in evidence order: VCEK|VLEK, ASK|ASVK, ARK for SNP (empty when the host gave none).
    pub certs: Vec<Vec<u8>>,
    /// Collateral, when the backend has any.
    pub collateral: Option<Collateral>,
}

/// Why a backend could not produce evidence.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TeeError {
    /// No attestation interface is present on this machine.
    #[error("no attestation interface found: {0}")]
    NotPresent(String),
    /// A file or device operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`mkdir`, `write`, `read`, `open`, ...).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A guest-request ioctl failed.
    #[error(
        "{request} on {device}: {errno} (firmware error {fw_error:#x}, VMM error {vmm_error:#x})"
    )]
    Ioctl {
        /// The device.
        device: PathBuf,
        /// The request name (`SNP_GET_EXT_REPORT`, ...).
        request: &'static str,
        /// The errno.
        errno: nix::errno::Errno,
        /// Firmware error code from `exitinfo2` (low 32 bits).
        fw_error: u32,
        /// VMM error code from `exitinfo2` (high 32 bits).
        vmm_error: u32,
    },
    /// Another writer changed the configfs-tsm report while we read it, on every attempt.
    #[error("configfs-tsm report {path}: generation changed while reading, {attempts} attempts")]
    GenerationChanged {
        /// The report directory.
        path: PathBuf,
        /// Attempts made.
        attempts: u32,
    },
    /// The backend answered with something that is not a report.
    #[error("malformed response from {source_name}: {detail}")]
    Malformed {
        /// The interface that answered.
        source_name: String,
        /// What is wrong.
        detail: String,
    },
    /// The certificate table that came with the report is malformed.
    #[error("certificate table: {0}")]
    CertTable(#[from] CertTableError),
    /// The request is not possible with this backend or configuration.
    #[error("{0}")]
    Unsupported(String),
    /// The sim backend failed.
    #[error("sim: {0}")]
    Sim(String),
}

/// A trusted execution environment that can produce a signed report over 64 bytes of report data.
pub trait Tee: Send + Sync {
    /// The label evidence from this backend carries.
    fn label(&self) -> TeeLabel;
    /// Produces a report (or quote) whose report data is `report_data`, with its certificates and collateral.
    fn get_report(&self, report_data: &[u8; 64]) -> Result<RawEvidence, TeeError>;
}

/// The REPORT_DATA (SNP) or REPORTDATA (TDX quote) carried by `report`, if it parses far enough to find it.
pub fn report_data_of(label: TeeLabel, report: &[u8]) -> Option<[u8; 64]> {
    if label.is_snp() {
        report.get(0x50..0x90).and_then(|b| b.try_into().ok())
    } else {
        crate::tdx::Quote::parse(report)
            .ok()
            .map(|q| q.td().report_data)
    }
}

/// Picks the attestation interface of this machine: configfs-tsm first, then `/dev/sev-guest`.
///
/// `/dev/tdx_guest` alone gives only a TDREPORT, which no remote party can verify; current kernels hand out
/// TDX quotes through configfs-tsm only, so a TDX guest without it is reported as an error saying so.
pub fn detect() -> Result<Box<dyn Tee>, TeeError> {
    detect_at(
        std::path::Path::new(DEFAULT_TSM_REPORT_ROOT),
        std::path::Path::new(DEFAULT_SEV_GUEST_DEVICE),
        std::path::Path::new(DEFAULT_TDX_GUEST_DEVICE),
    )
}

/// [`detect`] with the paths given (for tests and unusual mounts).
pub fn detect_at(
    tsm_root: &std::path::Path,
    sev_guest: &std::path::Path,
    tdx_guest: &std::path::Path,
) -> Result<Box<dyn Tee>, TeeError> {
    let tsm_err = match ConfigfsTsm::open(tsm_root) {
        Ok(t) => return Ok(Box::new(t)),
        Err(e) => e,
    };
    if sev_guest.exists() {
        return Ok(Box::new(SevGuestDevice::open(sev_guest)?));
    }
    if tdx_guest.exists() {
        return Err(TeeError::NotPresent(format!(
            "{} is present but TDX quotes need configfs-tsm ({}: {tsm_err}); mount configfs at /sys/kernel/config \
             on a kernel with CONFIG_TSM_REPORTS",
            tdx_guest.display(),
            tsm_root.display()
        )));
    }
    Err(TeeError::NotPresent(format!(
        "neither configfs-tsm ({}: {tsm_err}) nor {} nor {} is present; this is not an SEV-SNP or TDX guest \
         (use the sim backend outside one)",
        tsm_root.display(),
        sev_guest.display(),
        tdx_guest.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_reports_nothing_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = detect_at(
            &dir.path().join("tsm"),
            &dir.path().join("sev-guest"),
            &dir.path().join("tdx_guest"),
        )
        .err()
        .expect("nothing present");
        let text = err.to_string();
        assert!(text.contains("neither configfs-tsm"), "{text}");
        assert!(text.contains("sev-guest"), "{text}");
    }

    #[test]
    fn detect_explains_tdx_without_configfs() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("tdx_guest"), b"").expect("touch");
        let err = detect_at(
            &dir.path().join("tsm"),
            &dir.path().join("sev-guest"),
            &dir.path().join("tdx_guest"),
        )
        .err()
        .expect("tdx without configfs");
        assert!(
            err.to_string().contains("TDX quotes need configfs-tsm"),
            "{err}"
        );
    }
}
