//! A [`Verifier`] for callers that verify many reports or quotes of one platform (the hosted pool, a founder
//! checking a backlog): it remembers which certificate, CRL and collateral signatures verified, keyed by the
//! SHA-256 of algorithm, key, signed bytes and signature, so a second report of the same chip costs one ECDSA
//! check (its own signature) instead of the whole chain again.
//!
//! Only signature results are remembered; every other check (names, profile, path rules, validity at the
//! verification time, CRL windows and revocation, policy) runs again for every report. The report's and the
//! quote's own signatures are never cached.

use crate::evidence::{EvidenceOptions, EvidenceVerification};
use crate::sigcache::{self, Cache};
use crate::snp::{self, ChainOptions, Policy, SnpInput, SnpVerification};
use crate::tdx::{TdxError, TdxVerification, VerifyOptions};
use attestation::snp::ReportError;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How often the chain cache answered and how often a signature was verified to fill it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Chain, CRL and collateral signatures answered from the cache.
    pub hits: u64,
    /// Chain, CRL and collateral signatures verified (and then remembered).
    pub misses: u64,
}

/// Verifies SEV-SNP reports, TDX quotes and evidence like the free functions of this crate, with the results of
/// chain, CRL and collateral signatures cached by DER hash across calls. Safe to share between threads.
#[derive(Clone, Debug, Default)]
pub struct Verifier {
    cache: Arc<Cache>,
}

impl Verifier {
    /// A verifier with an empty cache.
    pub fn new() -> Verifier {
        Verifier::default()
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        let _scope = sigcache::activate(&self.cache);
        f()
    }

    /// Runs `f` with this verifier's cache active: any entry point of the crate
    /// (`verifier.cached(|| verifier_lib::verify_evidence(&input))`) then checks each chain, CRL and collateral
    /// signature it has seen before from the cache.
    pub fn cached<T>(&self, f: impl FnOnce() -> T) -> T {
        self.with(f)
    }

    /// [`snp::verify_report_bytes`] with the chain cache.
    pub fn snp(
        &self,
        input: &SnpInput<'_>,
        opts: &ChainOptions,
        policy: &Policy,
    ) -> Result<SnpVerification, ReportError> {
        self.with(|| snp::verify_report_bytes(input, opts, policy))
    }

    /// `tdx::verify_quote` with the chain and collateral cache.
    pub fn tdx(&self, quote: &[u8], opts: &VerifyOptions<'_>) -> Result<TdxVerification, TdxError> {
        self.with(|| crate::tdx::verify_quote(quote, opts))
    }

    /// [`crate::evidence::verify_evidence_bytes`] with the chain and collateral cache.
    pub fn evidence(
        &self,
        bytes: &[u8],
        opts: &EvidenceOptions,
    ) -> Result<EvidenceVerification, attestation::evidence::EvidenceError> {
        self.with(|| crate::evidence::verify_evidence_bytes(bytes, opts))
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.cache.hits.load(Ordering::Relaxed),
            misses: self.cache.misses.load(Ordering::Relaxed),
        }
    }
}
