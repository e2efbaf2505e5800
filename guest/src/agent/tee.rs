//! The sim backend of the `vm` tier: the report comes from the host's sim PSP over the job channel, as a real
//! SNP report comes from the PSP outside the guest. The host signs it for the launch measurement of what it
//! launched; the verifier accepts it only with `--allow-simulated`, by the chain it ends in.

use crate::channel::{self, FrameType};
use attestation::evidence::TeeLabel;
use attestation::tee::{RawEvidence, Tee, TeeError};
use std::fs::File;
use std::sync::Mutex;

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
        channel::write_frame(&mut *port, FrameType::ReportRequest, report_data).map_err(io)?;
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
