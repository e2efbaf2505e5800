//! Helpers of the vm-tier tests (vm_tier.rs, vm_toolchains.rs): the founder's check of sim evidence.

use std::path::Path;
use std::process::{Command, Output};

/// The nonce the vm-tier tests run their jobs with.
pub const NONCE: &str = "00112233445566778899aabbccddeeff0011223344556677";

/// `verify-attestation evidence --allow-simulated --json --nonce NONCE --measurement MEASUREMENT EVIDENCE`, run
/// with the binary `verify` (an integration test's `CARGO_BIN_EXE_verify-attestation-e2e`).
pub fn verify_sim(verify: &str, evidence: &Path, measurement: &str) -> Output {
    Command::new(verify)
        .args([
            "evidence",
            "--allow-simulated",
            "--json",
            "--nonce",
            NONCE,
            "--measurement",
            measurement,
        ])
        .arg(evidence)
        .output()
        .expect("run verify-attestation")
}
