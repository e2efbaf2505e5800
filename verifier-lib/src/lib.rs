//! Every check a founder needs before trusting a fenced-run verdict, with typed results.
//! Authenticity (chain, signature) and acceptability (policy, measurement, TCB) are kept apart.
//!
//! The checks only: the command line is the `verify-attestation` crate, and fetching collateral over HTTP with
//! its on-disk cache is the feature `fetch` (off by default). The entry points, one per kind of input
//! (docs/verification.md, "The library's API"): [`evidence::verify_decoded`] (or
//! [`evidence::verify_evidence_bytes`]) for an evidence bundle, [`snp::verify_report_bytes`] for a raw SEV-SNP
//! report, [`tdx::verify_quote`] for a raw TDX quote, and [`Verifier`] for many reports of one platform.
//!
//! Embedding it: verify evidence against the founder's nonce and launch measurement, at a given time.
//!
//! ```no_run
//! use verifier_lib::evidence::{verify_decoded, Decoded, EvidenceOptions};
//! use verifier_lib::snp::ChainOptions;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bytes = std::fs::read("evidence.cbor")?;
//! let mut opts = EvidenceOptions {
//!     chain: ChainOptions {
//!         at: time::OffsetDateTime::now_utc(),
//!         crl: None,
//!         allow_simulated: false,
//!     },
//!     nonce: Some(vec![0x5a; 32]),
//!     ..EvidenceOptions::default()
//! };
//! opts.policy.measurements = vec!["00".repeat(48).parse()?];
//! // Decoded once: the CBOR, and an SEV-SNP report inside; an undecodable bundle is an error.
//! let decoded = Decoded::from_cbor(&bytes)?;
//! let v = verify_decoded(&decoded, &opts);
//! if v.verified() {
//!     println!("verified: {:?}", v.verdict.map(|d| d.outcome));
//! } else {
//!     for f in &v.failures {
//!         eprintln!("FAIL {}: {}", f.check, f.detail);
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod anchors;
#[cfg(not(target_arch = "wasm32"))]
pub mod collateral;
mod digest;
pub mod evidence;
pub mod failure;
pub mod output;
pub mod pki;
pub mod pool_ledger;
mod sigcache;
pub mod snp;
pub mod tdx;
pub mod verifier;

pub use failure::Failure;
pub use verifier::{CacheStats, Verifier};
