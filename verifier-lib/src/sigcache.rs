//! The signature-result cache under [`crate::Verifier`]: results of chain, CRL and collateral signature checks
//! keyed by the SHA-256 of algorithm, key, signed bytes and signature, active for the calls a `Verifier` makes on
//! this thread. It sits at the bottom of the crate: the SEV-SNP and TDX chain code call [`memo`], and only
//! `verifier.rs` creates a cache and makes it active.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Entries kept before the cache starts over (a few platforms' chains and collateral need a few dozen).
const MAX_ENTRIES: usize = 4096;

/// A signature check as a plain function of the key, the signed bytes and the signature (each algorithm's own
/// encoding), so that its result can be remembered under the hash of exactly those bytes.
pub(crate) type Check = fn(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), String>;

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

/// Runs `f`, a whole verification, with a cache active: the caller's [`crate::Verifier`] if one is active on this
/// thread, else a fresh cache for this one verification, so that a signature two chains share (Intel's TCB
/// Signing certificate under the root in both the TCB Info and the QE Identity chain, the PCK CA in the PCK
/// chain and the PCK CRL issuer chain) is verified once.
///
/// Everything runs on the calling thread, in order. Checking the signatures on a helper thread was measured
/// and taken out: on the 2-vCPU machines this project runs on, a new thread is kept off the second vCPU for 1 –
/// 3 ms while the first is busy, and when pinned there both threads ran at less than half speed, so the
/// sequential run was the fastest (docs/benchmarks.md, "One thread").
pub(crate) fn within_one_verification<T>(f: impl FnOnce() -> T) -> T {
    if ACTIVE.with(|a| a.borrow().is_some()) {
        return f();
    }
    let cache = Arc::new(Cache::default());
    let _scope = activate(&cache);
    f()
}

/// The cache key of a check: SHA-256 over algorithm, key, signed bytes and signature, each with its length.
fn id_of(alg: &str, key: &[u8], msg: &[u8], sig: &[u8]) -> [u8; 32] {
    let lens = [alg.len(), key.len(), msg.len(), sig.len()].map(|n| (n as u64).to_le_bytes());
    crate::digest::sha256(&[
        &lens[0],
        alg.as_bytes(),
        &lens[1],
        key,
        &lens[2],
        msg,
        &lens[3],
        sig,
    ])
}

/// Runs `check` (a signature verification of `alg` by `key` over `msg`) unless the active cache already knows its
/// result for exactly these bytes, and remembers the result. Without an active cache, it just runs `check`.
pub(crate) fn memo(
    alg: &str,
    key: &[u8],
    msg: &[u8],
    sig: &[u8],
    check: Check,
) -> Result<(), String> {
    let Some(cache) = ACTIVE.with(|a| a.borrow().clone()) else {
        return check(key, msg, sig);
    };
    let id = id_of(alg, key, msg, sig);
    if let Some(r) = cache.results.lock().ok().and_then(|m| m.get(&id).cloned()) {
        cache.hits.fetch_add(1, Ordering::Relaxed);
        return r;
    }
    let r = check(key, msg, sig);
    cache.misses.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut m) = cache.results.lock() {
        if m.len() >= MAX_ENTRIES {
            m.clear();
        }
        m.insert(id, r.clone());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Verifies when the signature is the message reversed; the message names the key otherwise. Counts its
    /// calls in `CALLS`.
    fn reversed(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), String> {
        CALLS.with(|c| c.set(c.get() + 1));
        let want: Vec<u8> = msg.iter().rev().copied().collect();
        if sig == want {
            Ok(())
        } else {
            Err(format!("key {} refused", String::from_utf8_lossy(key)))
        }
    }

    thread_local! {
        static CALLS: Cell<usize> = const { Cell::new(0) };
    }

    /// A verification of three signatures (the first two the same), with what each check answered.
    fn three(sigs: [&[u8]; 3]) -> Vec<Result<(), String>> {
        vec![
            memo("t", b"a", b"one", sigs[0], reversed),
            memo("t", b"a", b"one", sigs[1], reversed),
            memo("t", b"b", b"two", sigs[2], reversed),
        ]
    }

    #[test]
    fn one_verification_checks_a_shared_signature_once_and_gives_the_plain_answers() {
        CALLS.with(|c| c.set(0));
        let r = within_one_verification(|| three([b"eno", b"eno", b"two"]));
        assert_eq!(r, vec![Ok(()), Ok(()), Err("key b refused".to_string())]);
        assert_eq!(CALLS.with(Cell::get), 2, "the shared check ran once");
        // The same answers as with no cache at all, where every check runs.
        CALLS.with(|c| c.set(0));
        assert_eq!(r, three([b"eno", b"eno", b"two"]));
        assert_eq!(CALLS.with(Cell::get), 3);
    }

    #[test]
    fn the_cache_of_one_verification_is_gone_after_it() {
        within_one_verification(|| three([b"eno", b"eno", b"owt"]));
        CALLS.with(|c| c.set(0));
        within_one_verification(|| three([b"eno", b"eno", b"owt"]));
        assert_eq!(
            CALLS.with(Cell::get),
            2,
            "nothing carried over between one-shot verifications"
        );
        assert!(ACTIVE.with(|a| a.borrow().is_none()));
    }

    #[test]
    fn inside_a_verifier_the_verifiers_cache_is_used_and_kept() {
        let cache = Arc::new(Cache::default());
        let _scope = activate(&cache);
        let r = within_one_verification(|| three([b"eno", b"xx", b"two"]));
        assert_eq!(
            r,
            vec![
                Ok(()),
                Err("key a refused".to_string()),
                Err("key b refused".to_string())
            ],
            "the second asks for the same key and message with another signature: a different check"
        );
        let m = cache.results.lock().expect("lock");
        assert_eq!(m.len(), 3, "{m:?}");
    }
}
