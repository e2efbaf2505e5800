//! Software stand-ins for the AMD PSP and the Intel QE, signing with a locally generated test chain.
//!
//! The sim backends make byte-exact reports signed by a chain generated at first use into a state directory,
//! so the verifier runs its real code path on them; a verifier tells them apart by the root they end in.

pub mod snp;
pub mod state;
pub mod tdx;

use sha2::{Digest, Sha384};
use std::path::PathBuf;

pub use snp::{SimPsp, SimSnpTee};
pub use state::default_state_dir;

/// Domain string of the `process`-tier sim launch measurement.
pub const PROCESS_LAUNCH_DOMAIN: &[u8] = b"fenced-run/v1/sim-process-launch";

/// Why a sim backend failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Neither `XDG_STATE_HOME` nor `HOME` is set, so there is no default state directory.
    #[error("no sim state directory: neither XDG_STATE_HOME nor HOME is set")]
    NoStateDir,
    /// A state file operation failed.
    #[error("sim state: {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A state file exists but cannot be used.
    #[error("sim state file {path} is corrupt: {detail} (delete it to regenerate)")]
    StateCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Key generation or signing failed.
    #[error("sim crypto: {0}")]
    Crypto(String),
    /// DER encoding failed.
    #[error("sim certificate encoding: {0}")]
    Der(String),
}

/// The sim launch measurement of the `process` tier: SHA-384(domain || SHA-384(agent binary)).
///
/// In the process tier nothing measures a launch, so the sim PSP signs this stand-in: it changes whenever the
/// binary that runs the fence changes, which is what an auditor can pin for a given build.
pub fn process_launch_measurement(agent_binary: &[u8]) -> [u8; 48] {
    let inner = Sha384::digest(agent_binary);
    let mut h = Sha384::new();
    h.update(PROCESS_LAUNCH_DOMAIN);
    h.update(inner);
    h.finalize().into()
}

/// [`process_launch_measurement`] of the running executable (`/proc/self/exe`).
pub fn current_process_launch_measurement() -> Result<[u8; 48], SimError> {
    let path = PathBuf::from("/proc/self/exe");
    let bytes = std::fs::read(&path).map_err(|source| SimError::Io {
        op: "read",
        path,
        source,
    })?;
    Ok(process_launch_measurement(&bytes))
}
