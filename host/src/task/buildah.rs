//! The task's environment built with Debian's `buildah`: no daemon, `--isolation chroot`, its storage in the
//! run's own directory, run as root of a user namespace whose ids map to unprivileged host ids (65536 from
//! [`super::BuildOptions::uid_base`]). Base images are pulled first, by digest, from the operator's registry;
//! the build itself runs in a network namespace of its own whose only way out is a relay to the egress proxy.

use super::harden::{InterruptGuard, Jail};
use super::{BuildError, BuildOptions};
use attestation::verdict::EgressRecord;
use intake::task::Task;
use std::fs;
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The relay port inside the build's network namespace (`HTTP_PROXY=http://127.0.0.1:PORT`).
pub const RELAY_PORT: u16 = 3128;
/// How much of buildah's output an error quotes (its last bytes).
pub const LOG_TAIL_BYTES: usize = 4096;
/// The `PATH` of every process stage 6 starts (nothing of the runner's own environment is passed on).
pub const SAFE_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// What [`build`] produced.
#[derive(Debug)]
pub struct Built {
    /// `sha256:<hex>`, the image id.
    pub digest: String,
    /// The image's root file system.
    pub rootfs: PathBuf,
    /// The build's egress log.
    pub egress: Vec<EgressRecord>,
    /// What of the hardening could not be had (no cgroup), for the verdict.
    pub notes: Vec<String>,
}

/// Whether `buildah`, `unshare` and `nsenter` are installed; `Err` names the missing one and its package.
pub fn available() -> Result<(), String> {
    for (tool, pkg) in [
        ("buildah", "buildah"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
    ] {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
        if !found {
            return Err(format!(
                "stage 6 needs `{tool}` (Debian package {pkg}) to build a task's environment"
            ));
        }
    }
    Ok(())
}

/// A user namespace held open by a `sleep` process, with 65536 ids mapped from `uid_base`.
struct UserNs {
    holder: Child,
}

impl UserNs {
    fn create(uid_base: u32, jail: &Jail) -> Result<UserNs, BuildError> {
        let setup = |e: String| BuildError::Setup(e);
        let mut cmd = Command::new("unshare");
        cmd.args(["--user", "--", "sleep", "infinity"])
            .env_clear()
            .env("PATH", SAFE_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        jail.command(&mut cmd);
        let mut holder = cmd
            .spawn()
            .map_err(|e| setup(format!("unshare --user: {e}")))?;
        let pid = holder.id();
        jail.started(pid);
        let own = fs::read_link("/proc/self/ns/user").map_err(|e| setup(e.to_string()))?;
        // The holder is in its namespace once its ns link differs from ours: wait for that, bounded.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match fs::read_link(format!("/proc/{pid}/ns/user")) {
                Ok(l) if l != own => break,
                _ if Instant::now() > deadline => {
                    let _ = holder.kill();
                    let _ = holder.wait();
                    return Err(setup("the user namespace holder did not start".into()));
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        let map = format!("0 {uid_base} 65536\n");
        for f in ["uid_map", "gid_map"] {
            if let Err(e) = fs::write(format!("/proc/{pid}/{f}"), &map) {
                let _ = holder.kill();
                let _ = holder.wait();
                return Err(setup(format!(
                    "writing /proc/{pid}/{f} ({map:?}): {e} (stage 6 runs as root to map the build's ids)"
                )));
            }
        }
        Ok(UserNs { holder })
    }

    /// `buildah ARGS` as root of this namespace (host uid `uid_base`), with `env` only.
    fn buildah(&self, global: &[String], args: &[String], env: &[(String, String)]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--target={}", self.holder.id()))
            .args(["--user", "--setuid=0", "--setgid=0", "--", "buildah"])
            .args(global)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        c
    }
}

impl Drop for UserNs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn chown_all(path: &Path, uid: u32) -> Result<(), BuildError> {
    for e in walkdir::WalkDir::new(path).follow_links(false) {
        let e = e.map_err(|e| BuildError::Setup(e.to_string()))?;
        std::os::unix::fs::lchown(e.path(), Some(uid), Some(uid))
            .map_err(|err| BuildError::Setup(format!("chown {}: {err}", e.path().display())))?;
    }
    Ok(())
}

/// The Dockerfile as handed to buildah: each pinned `FROM name@sha256:...` with the operator's registry in
/// front (stage 5 allowed no other form), everything else unchanged.
pub fn rewrite_from(text: &str, task: &Task, registry: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for b in &task.bases {
        if let Some(l) = lines.get_mut(b.line.saturating_sub(1)) {
            let pinned = format!("{}@{}", b.name, b.digest);
            let words: Vec<String> = l
                .split_whitespace()
                .map(|w| {
                    if w == pinned {
                        format!("{registry}/{pinned}")
                    } else {
                        w.to_owned()
                    }
                })
                .collect();
            *l = words.join(" ");
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn tail(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(LOG_TAIL_BYTES);
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}

/// Runs `cmd` hardened by `jail` with stdout and stderr to `log`, killing the whole build at `budget` or when
/// the runner is interrupted; `Ok(Ok(()))` when it exited 0.
fn run_logged(
    mut cmd: Command,
    log: &Path,
    budget: Duration,
    jail: &Jail,
) -> Result<Result<(), String>, BuildError> {
    let f =
        fs::File::create(log).map_err(|e| BuildError::Setup(format!("{}: {e}", log.display())))?;
    let f2 = f
        .try_clone()
        .map_err(|e| BuildError::Setup(e.to_string()))?;
    // Its own process group, the build's cgroup, no inherited descriptor or key (see [`super::harden`]).
    jail.command(&mut cmd);
    let mut child = cmd
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .spawn()
        .map_err(|e| BuildError::Setup(format!("starting nsenter/buildah: {e}")))?;
    jail.started(child.id());
    let deadline = Instant::now() + budget;
    loop {
        if InterruptGuard::interrupted() {
            let _ = jail.kill_all();
            let _ = child.kill();
            let _ = child.wait();
            return Err(BuildError::Interrupted);
        }
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(Ok(())),
            Ok(Some(s)) => return Ok(Err(format!("buildah ended with {s}: {}", tail(log)))),
            Ok(None) if Instant::now() >= deadline => {
                let _ = jail.kill_all();
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Err(format!(
                    "the build ran out of its budget of {} s and was killed",
                    budget.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(BuildError::Setup(format!("waiting for buildah: {e}"))),
        }
    }
}

/// Builds `task`'s environment in `work` (which must be empty and stay until the result is no longer
/// needed): pulls each pinned base image from the operator's registry (host network: the registry is the
/// operator's), then runs `buildah build --pull=never --isolation chroot` in a fresh network namespace with
/// loopback and a relay to the egress proxy (allowlist `[environment] allow`) as its only network.
///
/// Every process of it starts hardened and held in a cgroup with `memory_bytes` and `pids`
/// ([`super::harden`]); when this returns, whatever happened, every one of them has been killed (a build
/// whose processes could not all be killed is an error).
pub fn build(
    task: &Task,
    opts: &BuildOptions,
    work: &Path,
    memory_bytes: u64,
    pids: u64,
) -> Result<Built, BuildError> {
    available().map_err(BuildError::Missing)?;
    let jail = Jail::create(memory_bytes, pids);
    let notes: Vec<String> = jail.note().map(str::to_owned).into_iter().collect();
    let result = build_in(task, opts, work, &jail);
    let ended = jail.finish();
    match (result, ended) {
        (Ok(mut b), Ok(())) => {
            b.notes = notes;
            Ok(b)
        }
        (Err(e), Ok(())) => Err(e),
        (_, Err(left)) => Err(BuildError::Setup(format!(
            "ending the build: {left}; the build is refused"
        ))),
    }
}

fn build_in(
    task: &Task,
    opts: &BuildOptions,
    work: &Path,
    jail: &Jail,
) -> Result<Built, BuildError> {
    let uid = opts.uid_base;
    let setup =
        |e: std::io::Error, what: &Path| BuildError::Setup(format!("{}: {e}", what.display()));
    for d in ["storage", "runroot", "home", "registries.d", "tmp"] {
        let p = work.join(d);
        fs::create_dir(&p).map_err(|e| setup(e, &p))?;
    }
    // The build context: the directory holding the Dockerfile, without the tests and the solution.
    let ctx = work.join("context");
    guest::fence::repo::copy_tree(&task.context, &ctx)
        .map_err(|e| BuildError::Setup(format!("copying the build context: {e}")))?;
    if task.tests_dir.parent() == Some(task.context.as_path()) {
        // The Dockerfile sits at the bundle root: the tests, the solution and the work tree stay out of it.
        for leave_out in ["tests", "solution", "workspace"] {
            let p = ctx.join(leave_out);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&p).map_err(|e| setup(e, &p))?,
                Ok(_) => fs::remove_file(&p).map_err(|e| setup(e, &p))?,
                Err(_) => {}
            }
        }
    }
    let df_text = fs::read_to_string(
        task.context
            .join(task.dockerfile.file_name().unwrap_or_default()),
    )
    .map_err(|e| BuildError::Setup(format!("{}: {e}", task.dockerfile.display())))?;
    let dockerfile = work.join("Dockerfile.fenced");
    fs::write(
        &dockerfile,
        rewrite_from(&df_text, task, &opts.registry.host),
    )
    .map_err(|e| setup(e, &dockerfile))?;
    chown(work, Some(uid), Some(uid)).map_err(|e| setup(e, work))?;
    chown_all(work, uid)?;

    let ns = UserNs::create(uid, jail)?;
    let p = |d: &str| work.join(d).display().to_string();
    let global = vec![
        format!("--root={}", p("storage")),
        format!("--runroot={}", p("runroot")),
        "--storage-driver=vfs".to_owned(),
        format!("--registries-conf-dir={}", p("registries.d")),
    ];
    let mut env = vec![
        ("PATH".to_owned(), SAFE_PATH.to_owned()),
        ("HOME".to_owned(), p("home")),
        ("XDG_RUNTIME_DIR".to_owned(), p("home")),
        ("TMPDIR".to_owned(), p("tmp")),
        ("BUILDAH_ISOLATION".to_owned(), "chroot".to_owned()),
        ("LC_ALL".to_owned(), "C".to_owned()),
    ];
    let budget = Duration::from_secs(task.file.environment.build_timeout_seconds);
    let started = Instant::now();
    for b in &task.bases {
        let reference = format!("{}/{}@{}", opts.registry.host, b.name, b.digest);
        let args = vec![
            "pull".to_owned(),
            "--remove-signatures".to_owned(),
            format!("--tls-verify={}", !opts.registry.plain_http),
            format!("docker://{reference}"),
        ];
        let log = work.join("pull.log");
        let left = budget.saturating_sub(started.elapsed());
        if let Err(detail) = run_logged(ns.buildah(&global, &args, &env), &log, left, jail)? {
            return Err(BuildError::Pull { reference, detail });
        }
    }

    // The egress proxy starts here, in this thread's network namespace (it reaches the allowlisted hosts);
    // the build thread then moves into a namespace of its own with the relay as its only way out.
    let socket = work.join("egress.sock");
    let session = opts
        .proxy
        .start(&task.file.environment.allow, &socket)
        .map_err(|e| BuildError::Setup(format!("egress proxy: {e}")))?;
    let url = format!("http://127.0.0.1:{RELAY_PORT}");
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        env.push((k.to_owned(), url.clone()));
    }
    let rootfs = work.join("rootfs");
    let iid = work.join("image-id");
    let args = vec![
        "build".to_owned(),
        "--pull=never".to_owned(),
        "--isolation=chroot".to_owned(),
        "--layers=false".to_owned(),
        format!("--iidfile={}", iid.display()),
        format!("--output=type=local,dest={}", rootfs.display()),
        format!("--file={}", dockerfile.display()),
        ctx.display().to_string(),
    ];
    let cmd = ns.buildah(&global, &args, &env);
    let log = work.join("build.log");
    let left = budget.saturating_sub(started.elapsed());
    let sock = socket.clone();
    let result = std::thread::scope(|s| {
        s.spawn(move || -> Result<Result<(), String>, BuildError> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                BuildError::Setup(format!("a network namespace for the build: {}", e.desc()))
            })?;
            guest::fence::sys::loopback_up()
                .map_err(|e| BuildError::Setup(format!("loopback up: {}", e.desc())))?;
            let (_, stopper, relay) = guest::fence::forwarder::spawn(RELAY_PORT, &sock)
                .map_err(|e| BuildError::Setup(format!("relay to the egress proxy: {e}")))?;
            let r = run_logged(cmd, &log, left, jail);
            stopper.stop();
            let _ = relay.join();
            r
        })
        .join()
        .unwrap_or_else(|_| Err(BuildError::Setup("the build thread panicked".into())))
    });
    let egress = session.finish();
    let _ = fs::remove_file(&socket);
    match result? {
        Ok(()) => {}
        Err(detail) => return Err(BuildError::Failed { detail, egress }),
    }
    let id = fs::read_to_string(&iid).map_err(|e| setup(e, &iid))?;
    let id = id.trim();
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BuildError::Setup(format!(
            "buildah wrote an image id that is not a sha256 digest: {id:?}"
        )));
    }
    Ok(Built {
        digest: format!("sha256:{}", hex.to_ascii_lowercase()),
        rootfs,
        egress,
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_end() {
        let d = tempfile::tempdir().expect("tmp");
        let f = d.path().join("log");
        let mut text = "x".repeat(10_000);
        text.push_str("\nlast line");
        fs::write(&f, text).expect("write");
        let t = tail(&f);
        assert!(
            t.ends_with("last line") && t.len() <= LOG_TAIL_BYTES,
            "{}",
            t.len()
        );
        assert!(tail(&d.path().join("absent")).is_empty());
    }
}
