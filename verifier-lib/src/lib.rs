//! Every check a founder needs before trusting a fenced-run verdict, with typed results.
//! Authenticity (chain, signature) and acceptability (policy, measurement, TCB) are kept apart.

mod anchors;
#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
#[cfg(not(target_arch = "wasm32"))]
pub mod collateral;
mod digest;
pub mod evidence;
pub mod failure;
pub mod output;
pub mod pki;
mod sigcache;
pub mod snp;
pub mod tdx;
pub mod verifier;

pub use failure::Failure;
pub use verifier::{CacheStats, Verifier};
