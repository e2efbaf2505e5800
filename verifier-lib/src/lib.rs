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
//! Besides these, the API is small and deliberate (docs/verification.md, "The library's API", lists every
//! item): [`sev_snp`] and [`intel_tdx`] (the policy and result types of each TEE, and the option-level
//! verification the CLI runs on input it has parsed already), [`collateral`] (auditor-signed bundles, the TCB
//! baseline and, with the feature `fetch`, fetching and the cache), [`output`] (the rows and JSON the CLI, the
//! browser check and the run viewer print), and at the root [`EvidenceOptions`] with [`verify_evidence_bytes`],
//! [`verify_decoded`] and [`verify_evidence_with`], the options form of [`verify_evidence`] for callers that print
//! with [`output`]. Everything else is `pub(crate)`; the unstable feature `internals` makes the interior public
//! for the fuzz targets and the tests and benches, and no crate's `[dependencies]` may turn it on.
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

/// Declares an interior module: `pub(crate)`, or `pub` and hidden with the feature `internals` (unstable; for the
/// fuzz targets and the tests, benches and examples of this crate and of verify-attestation, never a normal
/// dependency: tests/surface.rs checks both).
macro_rules! interior {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "internals"))]
        pub(crate) mod $name;
    };
}

mod anchors;
#[cfg(not(target_arch = "wasm32"))]
pub mod collateral;
mod digest;
mod entry;
interior!(evidence);
mod failure;
pub mod intel_tdx;
pub mod output;
interior!(pki);
interior!(pool_ledger);
pub mod sev_snp;
mod sigcache;
interior!(snp);
interior!(tdx);
interior!(transcript);
mod verifier;

pub use entry::{
    verify_evidence, verify_snp_report, verify_tdx_quote, Collateral, Detail, Input, Pins, Policy,
    Verification, VerifyError,
};
/// Verifies evidence already decoded, with [`EvidenceOptions`] (the options form of [`Input`], for callers that
/// keep the options to print the result with [`output`]); [`verify_decoded`] when the SEV-SNP report inside was
/// parsed too.
pub use evidence::verify_evidence as verify_evidence_with;
pub use evidence::{
    checks, parse_commit_pin, parse_tree_pin, tests_ran, verify_decoded, verify_evidence_bytes,
    Decoded, EvidenceOptions, EvidenceVerification, PinCheck, PinError, ReportVerification,
    RunPins, SharedPolicy,
};
pub use failure::Failure;
pub use intel_tdx::{Policy as TdxPolicy, TdxVerification};
pub use output::{Claim, ClaimContext, ClaimStatus};
pub use pool_ledger::{check as check_pool_ledger, PoolLedgerCheck};
pub use sev_snp::{CertBundle, Policy as SnpPolicy, SnpVerification};
pub use transcript::{EgressPin, TranscriptVerification};
pub use verifier::{CacheStats, Verifier};
