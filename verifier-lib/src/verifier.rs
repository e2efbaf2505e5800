//! A [`Verifier`] for callers that verify many reports or quotes of one platform (the hosted pool, a founder
//! checking a backlog): it remembers which certificate, CRL and collateral signatures verified, keyed by the
//! SHA-256 of algorithm, key, signed bytes and signature, so a second report of the same chip costs one ECDSA
//! check (its own signature) instead of the whole chain again.
//!
//! Only signature results are remembered; every other check (names, profile, path rules, validity at the
//! verification time, CRL windows and revocation, policy) runs again for every report. The report's and the
//! quote's own signatures are never cached.

use crate::evidence::{EvidenceOptions, EvidenceVerification};
use crate::snp::{self, ChainOptions, Policy, SnpInput, SnpVerification};
use crate::tdx::{TdxError, TdxVerification, VerifyOptions};
use attestation::snp::ReportError;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Entries kept before the cache starts over (a few platforms' chains and collateral need a few dozen).
const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Default)]
struct Cache {
    results: Mutex<HashMap<[u8; 32], Result<(), String>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

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

thread_local! {
    static ACTIVE: RefCell<Option<Arc<Cache>>> = const { RefCell::new(None) };
}

/// Restores the thread's previous cache when a call ends, by return or by unwinding.
struct Scope(Option<Arc<Cache>>);

impl Drop for Scope {
    fn drop(&mut self) {
        let prev = self.0.take();
        ACTIVE.with(|a| *a.borrow_mut() = prev);
    }
}

impl Verifier {
    /// A verifier with an empty cache.
    pub fn new() -> Verifier {
        Verifier::default()
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        let prev = ACTIVE.with(|a| a.borrow_mut().replace(self.cache.clone()));
        let _scope = Scope(prev);
        f()
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

    /// [`crate::tdx::verify_quote`] with the chain and collateral cache.
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

/// Runs `check` (a signature verification of `alg` by `key` over `msg`) unless the active [`Verifier`] already
/// knows its result for exactly these bytes. Without an active verifier, it just runs `check`.
pub(crate) fn memo(
    alg: &str,
    key: &[u8],
    msg: &[u8],
    sig: &[u8],
    check: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let Some(cache) = ACTIVE.with(|a| a.borrow().clone()) else {
        return check();
    };
    let mut h = Sha256::new();
    for part in [alg.as_bytes(), key, msg, sig] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    let id: [u8; 32] = h.finalize().into();
    if let Some(r) = cache.results.lock().ok().and_then(|m| m.get(&id).cloned()) {
        cache.hits.fetch_add(1, Ordering::Relaxed);
        return r;
    }
    let r = check();
    cache.misses.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut m) = cache.results.lock() {
        if m.len() >= MAX_ENTRIES {
            m.clear();
        }
        m.insert(id, r.clone());
    }
    r
}
