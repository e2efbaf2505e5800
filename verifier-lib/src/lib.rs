//! Every check a founder needs before trusting a fenced-run verdict, with typed results.
//! Authenticity (chain, signature) and acceptability (policy, measurement, TCB) are kept apart.
//!
//! The checks only: the command line is the `verify-attestation` crate, and fetching collateral over HTTP with
//! its on-disk cache is the feature `fetch` (off by default).
//!
//! # The API
//!
//! One entry point per kind of input, each with the same [`Input`] (the bytes as received, the founder's
//! [`Pins`], the [`Policy`], the [`Collateral`], the time) and the same [`Verification`] (one [`Claim`] row per
//! claim, held, failed or not pinned, with the anchor of each held claim; every [`Failure`]; the kind's
//! [`Detail`]), or a [`VerifyError`] for input that cannot be verified at all:
//!
//! - [`verify_snp_report`]: a bare SEV-SNP ATTESTATION_REPORT and its VCEK/VLEK chain;
//! - [`verify_tdx_quote`]: a bare TDX DCAP quote and its collateral;
//! - [`verify_evidence`]: fenced-run evidence (the report or quote, the key binding, the signed verdict, the
//!   nonce, the measurement and the run pins).
//!
//! [`Verifier`] remembers verified chain and collateral signatures across many reports of one platform.
//! The modules below them are hidden: the `verify-attestation` CLI, `verifier-wasm`, `fenced-run view` and the
//! pool use some of their items, listed in docs/verification.md ("The library's API"); they are not the API.
//!
//! # Embedding it
//!
//! Verify evidence against the founder's nonce and launch measurement, at a given time:
//!
//! ```no_run
//! use verifier_lib::{verify_evidence, ClaimStatus, Input};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bytes = std::fs::read("evidence.cbor")?;
//! let mut input = Input::new(&bytes, time::OffsetDateTime::now_utc());
//! input.pins.nonce = Some(vec![0x5a; 32]);
//! // The launch measurement, whatever the TEE (on TDX evidence also pin RTMR1 and RTMR2 in `policy.tdx`).
//! input.policy.shared.measurements = vec!["00".repeat(48).parse()?];
//! // Decoded once: the CBOR, and an SEV-SNP report inside; undecodable bytes are an error, not a failed check.
//! let v = verify_evidence(&input)?;
//! for c in &v.claims {
//!     match c.status {
//!         ClaimStatus::Held => println!("{}: held ({})", c.claim, c.anchor.as_deref().unwrap_or("")),
//!         ClaimStatus::Failed => println!("{}: FAILED: {}", c.claim, c.detail),
//!         ClaimStatus::NotPinned => println!("{}: not pinned: {}", c.claim, c.detail),
//!     }
//! }
//! println!("{}", if v.verified() { "verified" } else { "REJECTED" });
//! # Ok(())
//! # }
//! ```

mod anchors;
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub mod collateral;
mod digest;
mod entry;
#[doc(hidden)]
pub mod evidence;
mod failure;
#[doc(hidden)]
pub mod output;
#[doc(hidden)]
pub mod pki;
#[doc(hidden)]
pub mod pool_ledger;
mod sigcache;
#[doc(hidden)]
pub mod snp;
#[doc(hidden)]
pub mod tdx;
#[doc(hidden)]
pub mod transcript;
mod verifier;

pub use entry::{
    verify_evidence, verify_snp_report, verify_tdx_quote, Collateral, Detail, Input, Pins, Policy,
    Verification, VerifyError,
};
pub use evidence::{EvidenceVerification, RunPins, SharedPolicy};
pub use failure::Failure;
pub use output::{Claim, ClaimContext, ClaimStatus};
pub use snp::{CertBundle, Policy as SnpPolicy, SnpVerification};
pub use tdx::{Policy as TdxPolicy, TdxVerification};
pub use transcript::{EgressPin, TranscriptVerification};
pub use verifier::{CacheStats, Verifier};
