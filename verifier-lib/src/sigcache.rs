//! The signature-result cache under [`crate::Verifier`]: results of chain, CRL and collateral signature checks
//! keyed by the SHA-256 of algorithm, key, signed bytes and signature, active for the calls a `Verifier` makes on
//! this thread. It sits at the bottom of the crate: the SEV-SNP and TDX chain code call [`memo`], and only
//! `verifier.rs` creates a cache and makes it active.

use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Entries kept before the cache starts over (a few platforms' chains and collateral need a few dozen).
const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct Cache {
    pub(crate) results: Mutex<HashMap<[u8; 32], Result<(), String>>>,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

thread_local! {
    static ACTIVE: RefCell<Option<Arc<Cache>>> = const { RefCell::new(None) };
}

/// Restores the thread's previous cache when a call ends, by return or by unwinding.
pub(crate) struct Scope(Option<Arc<Cache>>);

impl Drop for Scope {
    fn drop(&mut self) {
        let prev = self.0.take();
        ACTIVE.with(|a| *a.borrow_mut() = prev);
    }
}

/// Makes `cache` the thread's active cache until the returned guard is dropped (by return or by unwinding).
pub(crate) fn activate(cache: &Arc<Cache>) -> Scope {
    Scope(ACTIVE.with(|a| a.borrow_mut().replace(cache.clone())))
}

/// Runs `f` with a cache active: the caller's [`crate::Verifier`] if one is active on this thread, else a fresh
/// cache that lives for this one verification, so that a signature two chains share (Intel's TCB Signing
/// certificate under the root in both the TCB Info and the QE Identity chain, the PCK CA in the PCK chain and the
/// PCK CRL issuer chain, the root's own signature in each) is verified once per verification, not once per chain.
pub(crate) fn within_one_verification<T>(f: impl FnOnce() -> T) -> T {
    if ACTIVE.with(|a| a.borrow().is_some()) {
        return f();
    }
    let _scope = activate(&Arc::new(Cache::default()));
    f()
}

/// Runs `check` (a signature verification of `alg` by `key` over `msg`) unless the active [`crate::Verifier`] already
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
