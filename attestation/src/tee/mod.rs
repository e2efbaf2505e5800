//! The `Tee` trait and its backends: configfs-tsm, /dev/sev-guest, /dev/tdx_guest, and sim.
//!
//! A backend turns 64 bytes of report data into hardware evidence (an SNP report or a TDX quote) plus the
//! certificates and collateral the platform hands out with it. [`detect`] picks the backend of the machine.

pub mod certtable;
pub mod configfs;
pub mod rtmr;
pub mod sev_guest;
pub mod tdx_guest;

use crate::evidence::{Collateral, TeeLabel};
use std::path::PathBuf;

pub use certtable::{parse_cert_table, CertKind, CertTableEntry, CertTableError};
pub use configfs::{ConfigfsOps, ConfigfsTsm, RealFs, DEFAULT_TSM_REPORT_ROOT};
pub use sev_guest::{
    DevSevGuest, IoctlError, SevGuestDevice, SevGuestIoctl, DEFAULT_SEV_GUEST_DEVICE,
};
pub use tdx_guest::{
    DevTdxGuest, TdxGuestDevice, TdxGuestIoctl, DEFAULT_TDX_GUEST_DEVICE, TDREPORT_LEN,
};

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
        let mut r = crate::wire::Reader::new("attestation report", report);
        r.take("fields before REPORT_DATA", 0x50).ok()?;
        r.array("REPORT_DATA").ok()
    } else {
        crate::tdx::Quote::parse(report)
            .ok()
            .map(|q| q.td().report_data)
    }
}

/// What [`select_at`] found.
pub enum Selected {
    /// A hardware backend, and which interface it is.
    Hardware(Box<dyn Tee>, &'static str),
    /// No attestation interface answers here: not an SEV-SNP or TDX guest (each reason, in order).
    NotATee(Vec<String>),
}

impl std::fmt::Debug for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selected::Hardware(t, name) => write!(f, "Hardware({name}, {:?})", t.label()),
            Selected::NotATee(why) => f.debug_tuple("NotATee").field(why).finish(),
        }
    }
}

/// Whether an errno means "this interface exists but this is not its TEE" (ENODEV from a driver bound to no
/// hardware, ENXIO/ENOTTY from configfs-tsm without a provider, ENOENT from a node that went away).
pub fn not_this_tee(errno: Option<i32>) -> bool {
    matches!(
        errno,
        Some(libc::ENODEV) | Some(libc::ENXIO) | Some(libc::ENOTTY) | Some(libc::ENOENT)
    )
}

fn tee_errno(e: &TeeError) -> Option<i32> {
    match e {
        TeeError::Io { source, .. } => source.raw_os_error(),
        TeeError::Ioctl { errno, .. } => Some(*errno as i32),
        _ => None,
    }
}

/// Picks the attestation interface: configfs-tsm (`tsm_root`), then `/dev/sev-guest`, then `/dev/tdx_guest`;
/// an interface that is absent or answers ENODEV-like errors is "not this TEE" and the next is tried.
///
/// `/dev/tdx_guest` alone gives only a TDREPORT, which no remote party can verify: upstream kernels hand out
/// TDX quotes through configfs-tsm only, so a TD without it is an error saying so (never the sim).
pub fn select_at(
    tsm_root: &std::path::Path,
    sev_guest: &std::path::Path,
    tdx_guest: &std::path::Path,
) -> Result<Selected, TeeError> {
    select_with(
        || ConfigfsTsm::open(tsm_root),
        sev_guest,
        || SevGuestDevice::open(sev_guest),
        tdx_guest,
        || TdxGuestDevice::open(tdx_guest),
    )
}

/// [`select_at`] with the backends' constructors given (tests stand in fakes of each interface).
pub fn select_with(
    configfs: impl FnOnce() -> Result<ConfigfsTsm, TeeError>,
    sev_guest: &std::path::Path,
    sev: impl FnOnce() -> Result<SevGuestDevice, TeeError>,
    tdx_guest: &std::path::Path,
    tdx: impl FnOnce() -> Result<TdxGuestDevice, TeeError>,
) -> Result<Selected, TeeError> {
    let mut why = Vec::new();
    match configfs() {
        Ok(t) => return Ok(Selected::Hardware(Box::new(t), "configfs-tsm")),
        Err(TeeError::NotPresent(m)) => why.push(format!("configfs-tsm: {m}")),
        Err(e) if not_this_tee(tee_errno(&e)) => {
            why.push(format!("configfs-tsm: {e} (not this TEE)"))
        }
        Err(e) => return Err(e),
    }
    if sev_guest.exists() {
        let dev = sev()?;
        // One probe request: ENODEV means the driver found no SEV-SNP firmware interface.
        match dev.get_report(&[0u8; 64]) {
            Ok(_) => return Ok(Selected::Hardware(Box::new(dev), "/dev/sev-guest")),
            Err(e) if not_this_tee(tee_errno(&e)) => {
                why.push(format!("{}: {e} (not this TEE)", sev_guest.display()))
            }
            Err(e) => return Err(e),
        }
    } else {
        why.push(format!("{} does not exist", sev_guest.display()));
    }
    if tdx_guest.exists() {
        let dev = tdx()?;
        match dev.get_tdreport(&[0u8; 64]) {
            Ok(_) => {
                return Err(TeeError::NotPresent(format!(
                    "{} answers, but TDX quotes need configfs-tsm ({}); mount configfs at /sys/kernel/config on \
                     a kernel with CONFIG_TSM_REPORTS",
                    tdx_guest.display(),
                    why.first().map(String::as_str).unwrap_or("")
                )))
            }
            Err(e) if not_this_tee(tee_errno(&e)) => {
                why.push(format!("{}: {e} (not this TEE)", tdx_guest.display()))
            }
            Err(e) => return Err(e),
        }
    } else {
        why.push(format!("{} does not exist", tdx_guest.display()));
    }
    Ok(Selected::NotATee(why))
}

/// Picks the attestation interface of this machine ([`select_at`] on the standard paths); "not a TEE" is an
/// error here, for callers that have no sim to fall back on.
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
    match select_at(tsm_root, sev_guest, tdx_guest)? {
        Selected::Hardware(t, _) => Ok(t),
        Selected::NotATee(why) => Err(TeeError::NotPresent(format!(
            "neither configfs-tsm nor {} nor {} answers ({}); this is not an SEV-SNP or TDX guest (use the sim \
             backend outside one)",
            sev_guest.display(),
            tdx_guest.display(),
            why.join("; ")
        ))),
    }
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
        assert!(text.contains("does not exist"), "{text}");
        assert!(text.contains("sev-guest"), "{text}");
    }

    #[test]
    fn a_plain_file_standing_for_tdx_guest_is_not_a_tee() {
        // A node that does not answer the ioctl (ENOTTY from a regular file) is "not this TEE".
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("tdx_guest"), b"").expect("touch");
        let sel = select_at(
            &dir.path().join("tsm"),
            &dir.path().join("sev-guest"),
            &dir.path().join("tdx_guest"),
        )
        .expect("select");
        match sel {
            Selected::NotATee(why) => {
                assert!(why.iter().any(|w| w.contains("not this TEE")), "{why:?}")
            }
            Selected::Hardware(_, name) => panic!("chose {name}"),
        }
    }
}
