//! The signature-result cache under [`crate::Verifier`]: results of chain, CRL and collateral signature checks
//! keyed by the SHA-256 of algorithm, key, signed bytes and signature, active for the calls a `Verifier` makes on
//! this thread. It sits at the bottom of the crate: the SEV-SNP and TDX chain code call [`memo`], and only
//! `verifier.rs` creates a cache and makes it active.

use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Entries kept before the cache starts over (a few platforms' chains and collateral need a few dozen).
const MAX_ENTRIES: usize = 4096;

/// A signature check as a plain function of the key, the signed bytes and the signature (each algorithm's own
/// encoding): the same function answers at once, or later on another thread when a one-shot verification runs
/// its signatures in parallel, so both give the same result and the same message.
pub(crate) type Check = fn(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), String>;

/// A check a one-shot verification put off, with its own copy of the bytes, and its answer once a thread has
/// run it.
#[derive(Debug)]
struct Job {
    id: [u8; 32],
    check: Check,
    key: Vec<u8>,
    msg: Vec<u8>,
    sig: Vec<u8>,
    answer: OnceLock<Result<(), String>>,
}

impl Job {
    /// The answer: the one a thread has already given, else the check run now on this thread (never waiting
    /// for another thread that is running it: both give the same answer, and the first is kept).
    fn run(&self) -> Result<(), String> {
        if let Some(r) = self.answer.get() {
            return r.clone();
        }
        let r = (self.check)(&self.key, &self.msg, &self.sig);
        let _ = self.answer.set(r.clone());
        r
    }
}

/// The checks one one-shot verification put off, in order, shared with its helper threads.
#[derive(Debug, Default)]
struct Queue {
    state: Mutex<QueueState>,
    /// A job was put off (for waiting helpers).
    more: Condvar,
    /// A helper finished a job (for the calling thread waiting at the end of the pass).
    done: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    jobs: Vec<Arc<Job>>,
    /// Jobs before this index have been taken by some thread.
    taken: usize,
    /// The first pass is over: no job will be added, helpers leave when nothing is left to take.
    closed: bool,
    /// Helpers have been started.
    started: bool,
    /// Helpers waiting for a job (only they need a wake-up, which costs a system call).
    waiting: usize,
    /// The calling thread waits for a helper's answer.
    caller_waiting: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next job no thread has taken yet, if any.
    fn take(&self) -> Option<Arc<Job>> {
        let mut st = self.lock();
        let job = st.jobs.get(st.taken).cloned()?;
        st.taken += 1;
        Some(job)
    }

    /// Waits until every job of `jobs` has an answer or `deadline` has passed, whichever comes first.
    fn wait_for_answers(&self, jobs: &[Arc<Job>], deadline: Instant) {
        let mut st = self.lock();
        while jobs.iter().any(|j| j.answer.get().is_none()) {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return;
            };
            st.caller_waiting = true;
            st = match self.done.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(e) => e.into_inner().0,
            };
            st.caller_waiting = false;
        }
    }

    /// A helper thread: runs jobs as the first pass puts them off, until it is over and none is left.
    fn help(&self) {
        let mut st = self.lock();
        loop {
            if let Some(job) = st.jobs.get(st.taken).cloned() {
                st.taken += 1;
                drop(st);
                let _kept_in_the_job = job.run();
                st = self.lock();
                if st.caller_waiting {
                    self.done.notify_all();
                }
            } else if st.closed {
                return;
            } else {
                st.waiting += 1;
                st = self.more.wait(st).unwrap_or_else(|e| e.into_inner());
                st.waiting -= 1;
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Cache {
    pub(crate) results: Mutex<HashMap<[u8; 32], Result<(), String>>>,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    /// Set while a one-shot verification runs its first pass: a check whose result is not known is put off and
    /// answered as if it verified (see [`within_one_verification`]).
    speculative: AtomicBool,
    queue: Arc<Queue>,
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
/// thread (then `f` runs once, as it is), else a fresh cache for this one verification. With the fresh cache, a
/// signature two chains share (Intel's TCB Signing certificate under the root in both the TCB Info and the QE
/// Identity chain, the PCK CA in the PCK chain and the PCK CRL issuer chain) is verified once, and the distinct
/// signatures are verified in parallel with the rest of the verification:
///
/// 1. `f` runs with every signature it asks for put off and answered "verified"; a helper thread (on a machine
///    with more than one core, started when the first check is put off) verifies them as they are put off;
/// 2. when `f` is done, the calling thread verifies every check no helper has taken, waits for the ones a helper
///    is running about as long as one check takes it, and then runs any still unanswered itself (so a helper
///    that the machine's load keeps off a core holds the verification up by one check's time at most: the same
///    check gives the same answer on either thread, and the first answer is kept);
/// 3. if all verified, the answers of step 1 were the true ones, and its result stands; if any failed, `f` runs
///    again with every result known (the failures with their own messages), and that second result is returned.
///
/// Either way the result is the one a plain sequential run gives: no answer `f` saw was other than the truth.
pub(crate) fn within_one_verification<T>(mut f: impl FnMut() -> T) -> T {
    if ACTIVE.with(|a| a.borrow().is_some()) {
        return f();
    }
    let cache = Arc::new(Cache::default());
    let _scope = activate(&cache);
    cache.speculative.store(true, Ordering::Relaxed);
    let first = f();
    cache.speculative.store(false, Ordering::Relaxed);
    let (jobs, waiting) = {
        let mut st = cache.queue.lock();
        st.closed = true;
        (st.jobs.clone(), st.waiting)
    };
    if waiting > 0 {
        cache.queue.more.notify_all();
    }
    if jobs.is_empty() {
        return first;
    }
    // The checks no helper has taken; then, for those a helper is running, as long as one check takes this
    // thread (a helper on a core finishes by then; one the load keeps off a core is not waited for longer).
    let mut patience = Duration::from_micros(100);
    while let Some(job) = cache.queue.take() {
        let t = Instant::now();
        let _kept_in_the_job = job.run();
        patience = t.elapsed();
    }
    cache
        .queue
        .wait_for_answers(&jobs, Instant::now() + patience);
    let mut all_verified = true;
    if let Ok(mut m) = cache.results.lock() {
        for job in &jobs {
            let r = job.run();
            all_verified &= r.is_ok();
            m.insert(job.id, r);
        }
    }
    if all_verified {
        first
    } else {
        f()
    }
}

/// Threads a one-shot verification's signatures run on at most (the calling thread is one of them).
pub(crate) const MAX_THREADS: usize = 4;

/// Starts the helper threads of a one-shot verification: one fewer than the machine's cores, at most
/// [`MAX_THREADS`] - 1. A helper that cannot be started leaves its share to the calling thread.
fn start_helpers(queue: &Arc<Queue>) {
    let helpers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS)
        - 1;
    for _ in 0..helpers {
        let q = queue.clone();
        if std::thread::Builder::new()
            .name("sig-check".into())
            .spawn(move || q.help())
            .is_err()
        {
            break;
        }
    }
}

/// The cache key of a check: SHA-256 over algorithm, key, signed bytes and signature, each with its length.
fn id_of(alg: &str, key: &[u8], msg: &[u8], sig: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [alg.as_bytes(), key, msg, sig] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// Puts a check off in a speculative pass (once per distinct check), for a helper thread or the end of the
/// pass; `false` outside one.
fn put_off(cache: &Cache, id: [u8; 32], check: Check, key: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    if !cache.speculative.load(Ordering::Relaxed) {
        return false;
    }
    let start = {
        let mut st = cache.queue.lock();
        if st.jobs.iter().any(|j| j.id == id) {
            return true;
        }
        st.jobs.push(Arc::new(Job {
            id,
            check,
            key: key.to_vec(),
            msg: msg.to_vec(),
            sig: sig.to_vec(),
            answer: OnceLock::new(),
        }));
        let start = !st.started;
        st.started = true;
        (start, st.waiting > 0)
    };
    match start {
        (true, _) => start_helpers(&cache.queue),
        (false, true) => cache.queue.more.notify_one(),
        (false, false) => {}
    }
    true
}

/// Runs `check` (a signature verification of `alg` by `key` over `msg`) unless the active cache already knows its
/// result for exactly these bytes, and remembers the result; in the first pass of a one-shot verification it is
/// put off instead. Without an active cache, it just runs `check`.
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
    if put_off(&cache, id, check, key, msg, sig) {
        return Ok(());
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

/// A check that a [`crate::Verifier`] never remembers (a report's or a quote's own signature, which no other
/// report shares): run at once, except in a one-shot verification, where it is put off and run in parallel with
/// the others like a [`memo`] check.
pub(crate) fn once(
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
    // Known only in the second pass of a one-shot verification (a Verifier's cache never holds these).
    if let Some(r) = cache.results.lock().ok().and_then(|m| m.get(&id).cloned()) {
        return r;
    }
    if put_off(&cache, id, check, key, msg, sig) {
        return Ok(());
    }
    check(key, msg, sig)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Verifies when the signature is the message reversed; the message names the key otherwise.
    fn reversed(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), String> {
        let want: Vec<u8> = msg.iter().rev().copied().collect();
        if sig == want {
            Ok(())
        } else {
            Err(format!("key {} refused", String::from_utf8_lossy(key)))
        }
    }

    /// A verification of three signatures (two the same), with what each check answered.
    fn three(sigs: [&[u8]; 3]) -> Vec<Result<(), String>> {
        vec![
            memo("t", b"a", b"one", sigs[0], reversed),
            memo("t", b"a", b"one", sigs[1], reversed),
            once("t-own", b"b", b"two", sigs[2], reversed),
        ]
    }

    #[test]
    fn a_one_shot_verification_that_verifies_runs_once_with_the_checks_run_apart() {
        let runs = Cell::new(0);
        let r = within_one_verification(|| {
            runs.set(runs.get() + 1);
            three([b"eno", b"eno", b"owt"])
        });
        assert_eq!(runs.get(), 1);
        assert_eq!(r, vec![Ok(()), Ok(()), Ok(())]);
    }

    #[test]
    fn a_failed_signature_makes_the_verification_run_again_with_the_true_answers() {
        let runs = Cell::new(0);
        let r = within_one_verification(|| {
            runs.set(runs.get() + 1);
            three([b"eno", b"eno", b"two"])
        });
        assert_eq!(
            runs.get(),
            2,
            "first pass answered 'verified', so it ran again"
        );
        assert_eq!(r, vec![Ok(()), Ok(()), Err("key b refused".to_string())]);
        // The same as with no cache at all, in order.
        assert_eq!(r, three([b"eno", b"eno", b"two"]));
    }

    #[test]
    fn inside_a_verifier_nothing_is_put_off_and_own_signatures_are_not_remembered() {
        let cache = Arc::new(Cache::default());
        let _scope = activate(&cache);
        let r = within_one_verification(|| three([b"eno", b"xx", b"two"]));
        assert_eq!(
            r,
            vec![
                Ok(()),
                Err("key a refused".to_string()),
                Err("key b refused".to_string())
            ]
        );
        let m = cache.results.lock().expect("lock");
        assert_eq!(
            m.len(),
            2,
            "the two memo checks, not the report's own: {m:?}"
        );
        assert!(cache.queue.lock().jobs.is_empty());
    }
}
