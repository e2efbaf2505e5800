//! Collateral a verification needs but the evidence may lack: [`bundle`] is the offline bundle auditors sign,
//! [`baseline`] the SEV-SNP TCB floor file (`--tcb-baseline`); both are checks on bytes the founder hands in.
//!
//! With the feature `fetch` (off by default; the verify-attestation CLI turns it on) it is also fetched from
//! AMD's KDS and Intel's PCS ([`kds`], [`pcs`], one HTTP client in [`http`]), verified before use, and kept in an
//! on-disk [`cache`] until the earliest expiry or `nextUpdate`. Without it the library has no HTTP client and no
//! cache layout.

pub mod baseline;
pub mod bundle;
#[cfg(feature = "fetch")]
pub mod cache;
#[cfg(feature = "fetch")]
pub mod http;
#[cfg(feature = "fetch")]
pub mod kds;
#[cfg(feature = "fetch")]
pub mod pcs;

#[cfg(feature = "fetch")]
mod error;
#[cfg(feature = "fetch")]
mod fetch_config;
#[cfg(feature = "fetch")]
pub use error::FetchError;
#[cfg(feature = "fetch")]
pub use fetch_config::{FetchConfig, FetchConfigError};
