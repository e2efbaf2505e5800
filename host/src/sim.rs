//! The sim PSP on the host side of the process tier: it attests what this host runs, with a locally generated
//! chain that `verify-attestation` accepts only with `--allow-simulated`.

use attestation::session::Session;
use attestation::sim::{current_process_launch_measurement, SimPsp, SimSnpTee};
use attestation::snp::Product;

/// Begins an attestation session for a process-tier run: a sim SEV-SNP report (Milan layout) whose launch
/// measurement is the process-tier measurement of the running binary, bound to a fresh key and `nonce`.
/// Returns the session and the measurement it attests.
pub fn begin_process_session(nonce: &[u8]) -> Result<(Session, [u8; 48]), String> {
    let psp = SimPsp::open_default(Product::Milan).map_err(|e| format!("sim PSP: {e}"))?;
    let measurement =
        current_process_launch_measurement().map_err(|e| format!("launch measurement: {e}"))?;
    let tee = SimSnpTee::new(psp, measurement);
    let session = Session::begin(&tee, nonce).map_err(|e| format!("attestation: {e}"))?;
    Ok((session, measurement))
}
