//! The worker side of the pool: the activities a `fenced-run pool worker` offers on its task queue. An attempt
//! runs the accepted bundle through `fenced-run run` itself (the same code path as a direct run, in its own
//! process group and work directory), heartbeats while it goes, and kills the run at once when its lease is lost
//! or the run is cancelled; the bookkeeping activities write what the workflow decided to the store.

// The SDK's macros add a constant per workflow or activity method and leave it undocumented; every item written
// here is documented.
#![allow(missing_docs)]

use crate::store::Store;
use crate::workflow::{AttemptEnd, AttemptInput, AttemptResult, RunEnd};
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
}

/// The pool's activities, registered by every worker.
pub struct PoolActivities {
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

#[activities]
impl PoolActivities {
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
            .attempt_started(&input.run_id, attempt, &input.founder, &cfg.identity)
            .await
            .map_err(failure)?;
        let (kind, bundle) = store
            .bundle(&input.founder, &input.bundle_digest)
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
        let evidence_path = dir.path().join("attempt.evidence");
        let tmp = dir.path().join("tmp");
        std::fs::write(&bundle_path, &bundle)
            .and_then(|_| std::fs::create_dir(&tmp))
            .map_err(|e| failure(format!("{}: {e}", dir.path().display())))?;

        let mut cmd = tokio::process::Command::new(&cfg.fenced_run);
        cmd.arg("run")
            .arg(&bundle_path)
            .args([
                "--isolation",
                &cfg.isolation,
                "--nonce",
                &input.nonce,
                "--json",
            ])
            .arg("--evidence")
            .arg(&evidence_path);
        if let Some(image) = &cfg.image {
            cmd.arg("--image").arg(image);
        }
        if let Some(op) = &cfg.operator_config {
            cmd.arg("--operator-config").arg(op);
        }
        // Everything the run writes outside the fence goes under the attempt's directory.
        cmd.env("TMPDIR", &tmp)
            .current_dir(dir.path())
            .stdin(Stdio::null())
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
        let stdout = tokio::spawn(read_bounded(child.stdout.take(), MAX_STDOUT));
        let stderr = tokio::spawn(read_bounded(child.stderr.take(), MAX_STDERR));
        let lease = ctx
            .info()
            .heartbeat_timeout
            .unwrap_or(Duration::from_secs(10));
        let mut beat = tokio::time::interval((lease / 3).max(Duration::from_millis(200)));
        let status = loop {
            tokio::select! {
                s = child.wait() => break s,
                _ = ctx.cancelled() => {
                    // Lease lost (no heartbeat reached the server in time, the deadline passed) or the run was
                    // cancelled: the run is no longer ours. Kill it now, remove its files, report nothing.
                    kill_run(&mut child).await;
                    remove_attempt_dir(&dir.keep());
                    return Err(ActivityError::cancelled());
                }
                _ = beat.tick() => {
                    let _ = ctx.record_heartbeat(cfg.identity.clone()).await;
                }
            }
        };
        let out = stdout.await.unwrap_or_default();
        let err = stderr.await.unwrap_or_default();
        if ctx.is_cancelled() {
            remove_attempt_dir(&dir.keep());
            return Err(ActivityError::cancelled());
        }
        let status = status.map_err(|e| failure(format!("waiting for the run: {e}")))?;
        let code = status.code();
        let verdict = attestation::verdict::Verdict::from_json(&out);
        let (verdict, evidence) = match (code, verdict, std::fs::read(&evidence_path)) {
            (Some(0 | 1), Ok(v), Ok(ev)) => (v, ev),
            _ => {
                let tail = String::from_utf8_lossy(&err);
                let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                let how = match code {
                    Some(c) => format!("exited with status {c}"),
                    None => "was killed by a signal".to_owned(),
                };
                return Err(failure(format!(
                    "fenced-run run {how} without a verdict and evidence: {}",
                    attestation::text::escape(&tail)
                )));
            }
        };
        drop(lock);
        drop(dir);
        let mut store = store;
        let evidence_digest = store
            .put_evidence(&input.founder, &evidence)
            .await
            .map_err(failure)?;
        Ok(AttemptResult {
            attempt: input.attempt,
            worker: cfg.identity.clone(),
            outcome: verdict.outcome.as_str().to_owned(),
            verdict: verdict.to_json_value(),
            evidence_digest,
            nonce: input.nonce,
        })
    }

    /// Writes how an attempt ended, as the workflow decided (a local activity of the workflow).
    #[activity]
    pub async fn record_attempt(
        self: Arc<Self>,
        _ctx: ActivityContext,
        end: AttemptEnd,
    ) -> Result<(), ActivityError> {
        let mut store = Store::connect(&self.config.store_url)
            .await
            .map_err(failure)?;
        let attempt = i32::try_from(end.attempt).map_err(|_| failure("attempt out of range"))?;
        store
            .attempt_ended(
                &end.run_id,
                attempt,
                end.outcome.as_deref(),
                &end.why,
                end.evidence_digest.as_deref(),
            )
            .await
            .map_err(failure)
    }

    /// Writes how the run ended, as the workflow decided (a local activity of the workflow).
    #[activity]
    pub async fn record_run(
        self: Arc<Self>,
        _ctx: ActivityContext,
        end: RunEnd,
    ) -> Result<(), ActivityError> {
        let store = Store::connect(&self.config.store_url)
            .await
            .map_err(failure)?;
        let accepted = end.accepted.as_ref().map(|a| {
            (
                i32::try_from(a.attempt).unwrap_or(i32::MAX),
                a.outcome.as_str(),
                a.evidence_digest.as_str(),
                &a.verdict,
            )
        });
        store
            .run_ended(&end.run_id, accepted, &end.why)
            .await
            .map_err(failure)
    }
}
