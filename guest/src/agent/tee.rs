//! The sim backend of the `vm` tier: the report comes from the host's sim PSP over the job channel, as a real
//! SNP report comes from the PSP outside the guest. The host signs it for the launch measurement of what it
//! launched; the verifier accepts it only with `--allow-simulated`, by the chain it ends in. [`select`] picks
//! the agent's backend: configfs-tsm, then `/dev/sev-guest`, then `/dev/tdx_guest`, then this sim.

use crate::channel::{self, FrameType};
use attestation::evidence::TeeLabel;
use attestation::tee::{RawEvidence, Tee, TeeError};
use std::fs::File;
use std::sync::Mutex;

/// The agent's report backend: the hardware interface this guest has (attestation::tee::select_at, in the
/// order configfs-tsm, `/dev/sev-guest`, `/dev/tdx_guest`, ENODEV-like answers read as "not this TEE"), else
/// the sim over `port`. `Err` when a TEE is present but cannot give a report (no silent fallback to the sim).
pub fn select(port: &File) -> Result<(Box<dyn Tee>, String), String> {
    select_at(
        std::path::Path::new(attestation::tee::DEFAULT_TSM_REPORT_ROOT),
        std::path::Path::new(attestation::tee::DEFAULT_SEV_GUEST_DEVICE),
        std::path::Path::new(attestation::tee::DEFAULT_TDX_GUEST_DEVICE),
        port,
    )
}

/// [`select`] with the interface paths given (tests).
pub fn select_at(
    tsm_root: &std::path::Path,
    sev_guest: &std::path::Path,
    tdx_guest: &std::path::Path,
    port: &File,
) -> Result<(Box<dyn Tee>, String), String> {
    match attestation::tee::select_at(tsm_root, sev_guest, tdx_guest) {
        Ok(attestation::tee::Selected::Hardware(t, name)) => Ok((t, name.to_string())),
        Ok(attestation::tee::Selected::NotATee(why)) => {
            let p = port.try_clone().map_err(|e| format!("job channel: {e}"))?;
            Ok((
                Box::new(ChannelSimTee::new(p)),
                format!(
                    "the host's sim PSP (no hardware attestation interface: {})",
                    why.join("; ")
                ),
            ))
        }
        Err(e) => Err(format!("attestation interface: {e}")),
    }
}

/// A transcript recorder that extends each event into this TD's RTMR3 through the kernel's measurement sysfs
/// ([`attestation::tee::rtmr::SysfsRtmr3`]); `None` when the attribute is absent (a kernel before 6.16: the
/// events are then not extended, and the verifier's RTMR3 replay fails).
pub fn rtmr3_recorder() -> Option<attestation::transcript::Recorder> {
    rtmr3_recorder_at(std::path::Path::new(
        attestation::tee::rtmr::DEFAULT_TDX_MEASUREMENTS,
    ))
}

/// [`rtmr3_recorder`] with the measurements directory given (tests).
pub fn rtmr3_recorder_at(
    measurements: &std::path::Path,
) -> Option<attestation::transcript::Recorder> {
    let r = attestation::tee::rtmr::SysfsRtmr3::at(measurements)?;
    Some(attestation::transcript::Recorder::extending(
        std::sync::Arc::new(move |d: &attestation::transcript::Hash| {
            r.extend(d).map_err(|e| e.to_string())
        }),
    ))
}

/// A [`Tee`] that asks the host's sim PSP over the channel (label `sim-sev-snp`).
#[derive(Debug)]
pub struct ChannelSimTee {
    port: Mutex<File>,
}

impl ChannelSimTee {
    /// A sim backend over `port` (a clone of the job channel).
    pub fn new(port: File) -> ChannelSimTee {
        ChannelSimTee {
            port: Mutex::new(port),
        }
    }
}

impl Tee for ChannelSimTee {
    fn label(&self) -> TeeLabel {
        TeeLabel::SimSevSnp
    }

    fn get_report(&self, report_data: &[u8; 64]) -> Result<RawEvidence, TeeError> {
        let mut port = self
            .port
            .lock()
            .map_err(|_| TeeError::Sim("job channel lock poisoned".into()))?;
        let io = |e: channel::ChannelError| TeeError::Sim(format!("job channel: {e}"));
        super::progress::send(&mut *port, FrameType::ReportRequest, report_data).map_err(io)?;
        let f = channel::read_frame(&mut *port, "the sim report").map_err(io)?;
        match f.kind {
            FrameType::Report => {
                let (report, certs) = channel::decode_report(&f.payload).map_err(io)?;
                Ok(RawEvidence {
                    report,
                    certs,
                    collateral: None,
                })
            }
            FrameType::ReportFailure => Err(TeeError::Sim(format!(
                "the host's sim PSP refused: {}",
                String::from_utf8_lossy(&f.payload)
            ))),
            other => Err(TeeError::Sim(format!(
                "job channel: unexpected {other:?} frame (expected the sim report)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_interface_selects_the_channel_sim() {
        let d = tempfile::tempdir().expect("tmp");
        let port = File::open(d.path()).expect("a file standing for the port");
        let (t, why) = select_at(
            &d.path().join("tsm/report"),
            &d.path().join("sev-guest"),
            &d.path().join("tdx_guest"),
            &port,
        )
        .expect("sim");
        assert_eq!(t.label(), TeeLabel::SimSevSnp);
        assert!(
            why.contains("sim PSP") && why.contains("does not exist"),
            "{why}"
        );
    }
}
