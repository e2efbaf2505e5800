//! The execution host's side of the pool: the one activity a `fenced-run pool worker` offers on its task queue.
//! An attempt runs the accepted bundle through `fenced-run run` itself (the same code path as a direct run, in
//! its own process group and work directory), heartbeats while it goes, and kills the run at once when its lease
//! is lost or the run is cancelled. The host is untrusted: it connects to the store as a role in
//! `fenced_run_worker` (it records its attempt's start, reads the run's bundle, asks for nonces and stores
//! evidence, each through a function that checks the run) and decides nothing; the coordinator
//! (`crate::coordinator`) verifies what it delivers and records outcomes.

// The SDK's macros add a constant per workflow or activity method and leave it undocumented; every item written
// here is documented.
#![allow(missing_docs)]

use crate::store::Store;
use crate::workflow::{AttemptInput, AttemptResult};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio::io::AsyncReadExt;

/// Most bytes of a run's standard output kept (the verdict JSON); the rest is drained and dropped.
const MAX_STDOUT: u64 = 16 << 20;
/// Most bytes of a run's standard error kept for a host-failure message.
const MAX_STDERR: u64 = 64 << 10;

/// How a worker runs its attempts.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The store's connection URL.
    pub store_url: String,
    /// The `fenced-run` binary whose `run` subcommand executes an attempt.
    pub fenced_run: PathBuf,
    /// The isolation tier this host gives (`process`, `vm`).
    pub isolation: String,
    /// The vm tier's guest image directory, passed to `fenced-run run --image`.
    pub image: Option<PathBuf>,
    /// The operator's configuration, passed to `fenced-run run --operator-config`.
    pub operator_config: Option<PathBuf>,
    /// Where attempts get their work directories (removed when the attempt ends, however it ends).
    pub work_dir: PathBuf,
    /// This worker's identity (recorded with every attempt it takes).
    pub identity: String,
    /// Misbehaviour on purpose, for the tests of the execution ledger only (all zero in service).
    pub test: TestMisbehaviour,
}

/// What a test worker does wrong on purpose (`pool worker --test-rerun N --test-host-failure-attempts N`,
/// hidden flags): the ledger must show it either way.
#[derive(Debug, Clone, Copy, Default)]
pub struct TestMisbehaviour {
    /// Run every attempt this many times more (each run asks for its own nonce) and deliver the last run whose
    /// outcome is `tests_passed`, else the last run: the cherry-picking host of issue 34.
    pub reruns: u32,
    /// For attempts up to this number, kill the run once its nonce is issued and report a host failure.
    pub host_failure_attempts: u32,
}

/// How one `fenced-run run` ended: its exit, output, evidence and the execution its nonce was issued for.
struct Ran {
    code: Option<i32>,
    out: Vec<u8>,
    err: Vec<u8>,
    evidence: Option<Vec<u8>>,
    execution: Option<(i32, String)>,
}

/// The attempt activity, registered by every worker (an execution host) and nowhere else.
pub struct AttemptActivities {
    /// The worker's configuration.
    pub config: WorkerConfig,
}

fn failure(msg: impl Into<String>) -> ActivityError {
    ActivityError::from(std::io::Error::other(msg.into()))
}

fn file_name_part(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(40)
        .collect()
}

async fn read_bounded(r: Option<impl tokio::io::AsyncRead + Unpin>, max: u64) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(r) = r {
        let mut r = r;
        let _ = (&mut r).take(max).read_to_end(&mut out).await;
        let _ = tokio::io::copy(&mut r, &mut tokio::io::sink()).await;
    }
    out
}

/// Kills a run's whole process group with SIGKILL (the fence's helper and a VM's QEMU also die with their
/// parent through PR_SET_PDEATHSIG) and reaps it.
async fn kill_run(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill().await;
    let _ = child.wait().await;
}

/// The lock file inside an attempt's directory.
const LOCK_FILE: &str = "attempt.lock";

/// Removes the attempt directories under `work_dir` that no living worker holds (their lock is free): what a
/// killed worker's attempts left. A directory without a lock file yet (being created) is left alone.
pub fn sweep_stale(work_dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(work_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("attempt-") {
            continue;
        }
        let path = e.path();
        let Ok(f) = std::fs::File::open(path.join(LOCK_FILE)) else {
            continue;
        };
        if f.try_lock().is_ok() {
            remove_attempt_dir(&path);
        }
    }
}

/// Removes an attempt's directory after its run was killed: first the mounts the fence made under it and could
/// not take down itself (its size-limited scratch is a tmpfs in the host's mount namespace), deepest first and
/// detached, then the files.
pub fn remove_attempt_dir(dir: &std::path::Path) {
    let prefix = format!("{}/", dir.display());
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        // mountinfo escapes space, tab, newline and backslash as octal; such paths are not ours.
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Parses the line `fenced-run run --nonce-exchange` writes first: `key-sha256 HEX`.
fn parse_key_line(line: &[u8]) -> Result<[u8; 32], String> {
    let text = std::str::from_utf8(line).map_err(|_| "the key line is not UTF-8".to_owned())?;
    let hex_part = text
        .trim_end_matches('\n')
        .strip_prefix(host::nonce_exchange::KEY_LINE_PREFIX)
        .ok_or_else(|| {
            format!(
                "the run's first line is not its key hash: {}",
                attestation::text::escape(text.trim_end())
            )
        })?;
    hex::decode(hex_part)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| "the key hash is not 32 bytes of hex".to_owned())
}

/// One `fenced-run run --nonce-exchange` of the attempt: the run announces its evidence key's hash, the pool
/// issues the nonce of a new execution for it (the ledger row exists before the nonce is sent), the run goes on,
/// heartbeats while it does. Cancelled (the run killed, an error returned) when the lease is lost.
#[allow(clippy::too_many_arguments)]
async fn run_once(
    cfg: &WorkerConfig,
    ctx: &ActivityContext,
    store: &Store,
    input: &AttemptInput,
    attempt: i32,
    bundle_path: &std::path::Path,
    evidence_path: &std::path::Path,
    tmp: &std::path::Path,
) -> Result<Ran, ActivityError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut cmd = tokio::process::Command::new(&cfg.fenced_run);
    cmd.arg("run")
        .arg(bundle_path)
        .args(["--isolation", &cfg.isolation, "--nonce-exchange", "--json"])
        .arg("--evidence")
        .arg(evidence_path);
    if let Some(image) = &cfg.image {
        cmd.arg("--image").arg(image);
    }
    if let Some(op) = &cfg.operator_config {
        cmd.arg("--operator-config").arg(op);
    }
    // Everything the run writes outside the fence goes under the attempt's directory.
    let dir = tmp.parent().unwrap_or(tmp);
    cmd.env("TMPDIR", tmp)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| failure(format!("cannot start {}: {e}", cfg.fenced_run.display())))?;
    let mut stdin = child.stdin.take();
    let (key_tx, mut key_rx) = tokio::sync::mpsc::channel::<Result<[u8; 32], String>>(1);
    let stdout = child.stdout.take();
    let stdout = tokio::spawn(async move {
        let Some(stdout) = stdout else {
            return Vec::new();
        };
        let mut r = tokio::io::BufReader::new(stdout);
        let mut line = Vec::new();
        let _ = (&mut r).take(512).read_until(b'\n', &mut line).await;
        let _ = key_tx.send(parse_key_line(&line)).await;
        read_bounded(Some(r), MAX_STDOUT).await
    });
    let stderr = tokio::spawn(read_bounded(child.stderr.take(), MAX_STDERR));
    let lease = ctx
        .info()
        .heartbeat_timeout
        .unwrap_or(Duration::from_secs(10));
    let mut beat = tokio::time::interval((lease / 3).max(Duration::from_millis(200)));
    let mut execution = None;
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            _ = ctx.cancelled() => {
                // Lease lost (no heartbeat reached the server in time, the deadline passed) or the run was
                // cancelled: the run is no longer ours. Kill it now, report nothing.
                kill_run(&mut child).await;
                return Err(ActivityError::cancelled());
            }
            Some(key) = key_rx.recv() => {
                let Ok(key) = key else {
                    // No key line: the run failed before its key existed (its exit says why).
                    stdin = None;
                    continue;
                };
                match store.issue_nonce(&input.run_id, attempt, &key, &cfg.identity).await {
                    Ok((n, nonce)) => {
                        let nonce = hex::encode(nonce);
                        execution = Some((n, nonce.clone()));
                        if i64::from(attempt) <= i64::from(cfg.test.host_failure_attempts) {
                            kill_run(&mut child).await;
                            return Err(failure(format!(
                                "test worker: a host failure reported after execution {n} got its nonce"
                            )));
                        }
                        if let Some(mut w) = stdin.take() {
                            let _ = w.write_all(format!("{nonce}\n").as_bytes()).await;
                        }
                    }
                    Err(e) => {
                        kill_run(&mut child).await;
                        return Err(failure(format!("no nonce issued: {e}")));
                    }
                }
            }
            _ = beat.tick() => {
                let _ = ctx.record_heartbeat(cfg.identity.clone()).await;
            }
        }
    };
    let out = stdout.await.unwrap_or_default();
    let err = stderr.await.unwrap_or_default();
    if ctx.is_cancelled() {
        return Err(ActivityError::cancelled());
    }
    let status = status.map_err(|e| failure(format!("waiting for the run: {e}")))?;
    Ok(Ran {
        code: status.code(),
        out,
        err,
        evidence: std::fs::read(evidence_path).ok(),
        execution,
    })
}

#[activities]
impl AttemptActivities {
    /// One attempt at a run: the bundle from the store, `fenced-run run` with the attempt's nonce, heartbeats
    /// while it goes, the evidence stored by its digest. Ends with an error (a host failure) when the run could
    /// not be judged; is cancelled (the run killed, its files removed) when the lease is lost or the run cancelled.
    #[activity]
    pub async fn run_attempt(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AttemptInput,
    ) -> Result<AttemptResult, ActivityError> {
        let cfg = &self.config;
        if input.isolation != cfg.isolation {
            return Err(failure(format!(
                "worker {} gives isolation {}, the run asks for {}",
                cfg.identity, cfg.isolation, input.isolation
            )));
        }
        let store = Store::connect(&cfg.store_url).await.map_err(failure)?;
        let attempt = i32::try_from(input.attempt).map_err(|_| failure("attempt out of range"))?;
        store
            .attempt_started(&input.run_id, attempt, &cfg.identity)
            .await
            .map_err(failure)?;
        let (kind, bundle) = store
            .run_bundle(&input.run_id, &input.bundle_digest)
            .await
            .map_err(failure)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!(
                "attempt-{}-{}-",
                file_name_part(&input.run_id),
                input.attempt
            ))
            .tempdir_in(&cfg.work_dir)
            .map_err(|e| failure(format!("work directory {}: {e}", cfg.work_dir.display())))?;
        // The attempt holds a lock on its directory while it lives; a directory whose lock nobody holds was left
        // by a worker that died (kill -9), and the next attempt started here removes it.
        let lock = std::fs::File::create(dir.path().join(LOCK_FILE))
            .and_then(|f| f.try_lock().map(|_| f).map_err(std::io::Error::other))
            .map_err(|e| failure(format!("{}: lock: {e}", dir.path().display())))?;
        sweep_stale(&cfg.work_dir);
        let bundle_path = dir.path().join(format!("bundle.{kind}"));
        let tmp = dir.path().join("tmp");
        std::fs::write(&bundle_path, &bundle)
            .and_then(|_| std::fs::create_dir(&tmp))
            .map_err(|e| failure(format!("{}: {e}", dir.path().display())))?;

        // Every run asks the pool for its own nonce (one execution each); a test worker may run more than once.
        let mut chosen: Option<Ran> = None;
        for run in 0..=cfg.test.reruns {
            let evidence_path = dir.path().join(format!("execution-{run}.evidence"));
            let ran = match run_once(
                cfg,
                &ctx,
                &store,
                &input,
                attempt,
                &bundle_path,
                &evidence_path,
                &tmp,
            )
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    remove_attempt_dir(&dir.keep());
                    return Err(e);
                }
            };
            let passed = attestation::verdict::Verdict::from_json(&ran.out)
                .is_ok_and(|v| v.outcome == attestation::verdict::Outcome::TestsPassed);
            let keep_previous = chosen.as_ref().is_some_and(|c| {
                attestation::verdict::Verdict::from_json(&c.out)
                    .is_ok_and(|v| v.outcome == attestation::verdict::Outcome::TestsPassed)
            }) && !passed;
            if !keep_previous {
                chosen = Some(ran);
            }
        }
        let Some(ran) = chosen else {
            return Err(failure("no run was made"));
        };
        let verdict = attestation::verdict::Verdict::from_json(&ran.out);
        let (verdict, evidence, (execution, nonce)) =
            match (ran.code, verdict, ran.evidence, ran.execution) {
                (Some(0 | 1), Ok(v), Some(ev), Some(x)) => (v, ev, x),
                (code, _, _, x) => {
                    let tail = String::from_utf8_lossy(&ran.err);
                    let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                    let how = match code {
                        Some(c) => format!("exited with status {c}"),
                        None => "was killed by a signal".to_owned(),
                    };
                    let asked = match x {
                        Some((n, _)) => format!(" (execution {n} had its nonce)"),
                        None => " (no nonce was issued)".to_owned(),
                    };
                    return Err(failure(format!(
                        "fenced-run run {how} without a verdict and evidence{asked}: {}",
                        attestation::text::escape(&tail)
                    )));
                }
            };
        drop(lock);
        drop(dir);
        let evidence_digest = store
            .put_run_evidence(&input.run_id, &evidence)
            .await
            .map_err(failure)?;
        Ok(AttemptResult {
            attempt: input.attempt,
            execution: u32::try_from(execution).unwrap_or(0),
            // The workflow's own check fills these; the worker's word counts for nothing.
            simulated: false,
            checked: String::new(),
            worker: cfg.identity.clone(),
            outcome: verdict.outcome.as_str().to_owned(),
            verdict: verdict.to_json_value(),
            evidence_digest,
            nonce,
        })
    }
}
