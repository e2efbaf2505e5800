//! Evidence and verdict formats of fenced-run, the SEV-SNP report and TDX quote types parsed from bytes and
//! written back, the report-data key binding, and the TEE backends (hardware and sim).

pub mod binding;
pub mod cli_io;
pub mod evidence;
pub mod hex;
pub mod pool_nonce;
#[cfg(not(target_arch = "wasm32"))]
pub mod session;
pub mod sig;
#[cfg(not(target_arch = "wasm32"))]
pub mod sim;
pub mod snp;
pub mod tdx;
#[cfg(not(target_arch = "wasm32"))]
pub mod tee;
pub mod text;
#[cfg(not(target_arch = "wasm32"))]
pub mod vectors;
pub mod verdict;
pub mod wire;
