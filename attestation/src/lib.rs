//! Evidence and verdict formats of fenced-run, the SEV-SNP report and TDX quote types parsed from bytes and
//! written back, the report-data key binding, and the TEE backends (hardware and sim).
//!
//! The backends, the sim CAs' signing code and the agent's session (`tee`, `sim`, `session`) are the feature
//! `runner`, on by default; a verifier (verifier-lib, verify-attestation) builds without it and gets the formats
//! only.

pub mod binding;
pub mod cli_io;
pub mod evidence;
pub mod hex;
pub mod pool_ledger;
pub mod pool_nonce;
#[cfg(all(feature = "runner", not(target_arch = "wasm32")))]
pub mod session;
pub mod sig;
#[cfg(all(feature = "runner", not(target_arch = "wasm32")))]
pub mod sim;
pub mod snp;
pub mod tdx;
#[cfg(all(feature = "runner", not(target_arch = "wasm32")))]
pub mod tee;
pub mod text;
pub mod transcript;
#[cfg(not(target_arch = "wasm32"))]
pub mod vectors;
pub mod verdict;
pub mod wire;
