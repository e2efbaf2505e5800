//! The fence helper: our own binary re-executed as `BINARY __fence-helper SPEC.json`, single-threaded until
//! its namespaces exist. It unshares PID, network, IPC and UTS namespaces (and a user namespace when not
//! root), forks the namespace's PID 1 (which builds the mount tree and runs the command), enforces the
//! wall clock by killing that PID 1, and writes a [`PhaseReport`].

use super::spec::{self, PhaseReport, PhaseSpec};
use super::sys::{self, Forked};
use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{Gid, Pid, Uid};
use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The first argument that makes our binary act as the fence helper.
pub const HELPER_ARG: &str = "__fence-helper";

/// Runs the helper and exits when the process was started as one (`argv[1] == __fence-helper`); returns at
/// once otherwise. Call it as the first statement of `main`, before any thread or runtime exists.
pub fn dispatch() {
    let mut args = std::env::args_os();
    let _argv0 = args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(HELPER_ARG)) {
        return;
    }
    // Nothing the runner's own parent left open (a file, a directory, a socket) may reach the helper, its
    // forwarder or the sandbox: close every inherited descriptor but 0, 1 and 2 before opening anything.
    if let Err(e) = sys::close_from(3) {
        eprintln!("fence helper: closing inherited descriptors: {}", e.desc());
        std::process::exit(2);
    }
    let code = match args.next() {
        Some(path) => helper_main(Path::new(&path)),
        None => {
            eprintln!("fence helper: missing SPEC.json argument");
            2
        }
    };
    std::process::exit(code);
}

/// Reads the spec, runs the phase, writes the report; returns the process exit code (0 when a report was
/// written, whatever the command did).
fn helper_main(spec_path: &Path) -> i32 {
    let spec: PhaseSpec = match fs::read(spec_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fence helper: cannot read {}: {e}", spec_path.display());
            return 2;
        }
    };
    let report = run_phase(&spec).unwrap_or_else(|e| PhaseReport {
        setup_error: Some(e),
        ..Default::default()
    });
    match serde_json::to_vec(&report)
        .map_err(|e| e.to_string())
        .and_then(|b| {
            fs::write(&spec.report_path, b)
                .map_err(|e| format!("{}: {e}", spec.report_path.display()))
        }) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("fence helper: cannot write the report: {e}");
            3
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn errno(what: &str, e: Errno) -> String {
    format!("{what}: {}", e.desc())
}

/// Everything the helper does for one phase; `Err` only when the sandbox could not be set up.
fn run_phase(spec: &PhaseSpec) -> Result<PhaseReport, String> {
    // If the runner dies, so does the helper (and with it PID 1 and the whole sandbox).
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| errno("PR_SET_PDEATHSIG", e))?;
    if spec.user_ns {
        enter_user_namespace()?;
    }
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWUTS)
        .map_err(|e| errno("unshare(NET|IPC|UTS)", e))?;
    sys::loopback_up().map_err(|e| errno("bringing loopback up", e))?;
    // The forwarder is a child process forked before the PID namespace exists: it lives in the sandbox's
    // network namespace but in the host's PID and mount namespaces, where the proxy's socket is, and the
    // sandbox cannot see it. (A thread is impossible: after unshare(CLONE_NEWPID), clone(CLONE_THREAD) fails
    // with EINVAL.)
    let forwarder = match &spec.forward {
        Some(f) => Some(start_forwarder(f)?),
        None => None,
    };
    let result = run_pid_namespace(spec);
    if let Some((pid, stopper)) = forwarder {
        stopper.stop();
        drop(stopper);
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
    }
    result
}

/// Creates the PID namespace, forks its PID 1, puts it in the phase's cgroups, lets it run under the wall
/// clock and collects its report.
fn run_pid_namespace(spec: &PhaseSpec) -> Result<PhaseReport, String> {
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| errno("unshare(PID)", e))?;
    let (go_r, go_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| errno("pipe", e))?;
    let (status_r, status_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| errno("pipe", e))?;
    let init = match sys::fork_single_threaded().map_err(|e| errno("fork of PID 1", e))? {
        Forked::Child => {
            drop(go_w);
            drop(status_r);
            let code = pid1(spec, go_r, status_w);
            sys::exit_now(code)
        }
        Forked::Parent(pid) => pid,
    };
    drop(go_r);
    drop(status_w);
    let pidfd = sys::pidfd_open(init).map_err(|e| errno("pidfd_open", e));
    let setup = (|| -> Result<OwnedFd, String> {
        let pidfd = pidfd?;
        for procs in &spec.cgroup_procs {
            fs::write(procs, init.as_raw().to_string())
                .map_err(|e| format!("joining cgroup {}: {e}", procs.display()))?;
        }
        Ok(pidfd)
    })();
    let pidfd = match setup {
        Ok(fd) => fd,
        Err(e) => {
            let _ = kill(init, Signal::SIGKILL);
            let _ = waitpid(init, None);
            return Err(e);
        }
    };
    let started = Instant::now();
    let mut go = fs::File::from(go_w);
    let _ = go.write_all(b"g");
    drop(go);

    // Wait for PID 1 with the wall clock; at expiry PID 1 is asked to wrap up, then killed, and the kernel
    // kills the whole namespace with it.
    let deadline = started
        .checked_add(Duration::from_millis(spec.timeout_ms))
        .unwrap_or(started + Duration::from_secs(365 * 24 * 3600));
    let mut timed_out = false;
    let wait_exit = |ms: u16| -> Result<bool, Errno> {
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(n) => Ok(n > 0),
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(e),
        }
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            let _ = kill(init, Signal::SIGUSR1);
            if !matches!(wait_exit(2000), Ok(true)) {
                let _ = kill(init, Signal::SIGKILL);
            }
            break;
        }
        let ms = u16::try_from(left.as_millis().min(30_000)).unwrap_or(30_000);
        match wait_exit(ms) {
            Ok(true) => break,
            Ok(false) => continue,
            Err(e) => {
                let _ = kill(init, Signal::SIGKILL);
                let _ = waitpid(init, None);
                return Err(errno("poll on PID 1", e));
            }
        }
    }
    let namespace_dead = loop {
        match waitpid(init, None) {
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => break true,
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(_) => break false,
        }
    };
    let mut text = String::new();
    let _ = fs::File::from(status_r).read_to_string(&mut text);
    let mut report: PhaseReport = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(_) if timed_out => PhaseReport {
            duration_ms: millis(started.elapsed()),
            ..Default::default()
        },
        Err(_) => PhaseReport {
            setup_error: Some("PID 1 of the sandbox ended without a report".into()),
            ..Default::default()
        },
    };
    report.timed_out = timed_out;
    report.namespace_dead = namespace_dead;
    Ok(report)
}

/// Binds the relay's listener in the current (sandbox) network namespace and forks the forwarder process;
/// returns its pid and the stopper that ends it.
fn start_forwarder(f: &spec::ForwardSpec) -> Result<(Pid, super::forwarder::Stopper), String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", f.port))
        .map_err(|e| format!("relay listener on 127.0.0.1:{}: {e}", f.port))?;
    let (signal, stopper) =
        super::forwarder::StopSignal::new().map_err(|e| format!("forwarder stop pipe: {e}"))?;
    match sys::fork_single_threaded().map_err(|e| errno("fork of the forwarder", e))? {
        Forked::Child => {
            drop(stopper);
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            let code = match super::forwarder::serve(listener, &f.socket, &signal) {
                Ok(_) => 0,
                Err(_) => 1,
            };
            sys::exit_now(code)
        }
        Forked::Parent(pid) => Ok((pid, stopper)),
    }
}

/// Enters a new user namespace in which the caller's uid and gid are 0 (the unprivileged runner's path).
fn enter_user_namespace() -> Result<(), String> {
    let uid = Uid::current();
    let gid = Gid::current();
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| errno("unshare(USER)", e))?;
    fs::write("/proc/self/setgroups", "deny").map_err(|e| format!("/proc/self/setgroups: {e}"))?;
    fs::write("/proc/self/uid_map", format!("0 {uid} 1"))
        .map_err(|e| format!("/proc/self/uid_map: {e}"))?;
    fs::write("/proc/self/gid_map", format!("0 {gid} 1"))
        .map_err(|e| format!("/proc/self/gid_map: {e}"))?;
    Ok(())
}

/// As root the sandbox is built in the host's user namespace; the command then enters one of its own, already
/// the unprivileged uid, in which only that uid and gid exist (each mapped to itself), so it holds no
/// capability over anything of the host's user namespace, even through a setuid binary.
fn enter_own_user_namespace(uid: Uid, gid: Gid) -> Result<(), String> {
    // Changing credentials cleared the dumpable flag, which makes /proc/self root's: take it back to write
    // the maps (the command's own exec clears it again if it must).
    nix::sys::prctl::set_dumpable(true).map_err(|e| errno("PR_SET_DUMPABLE", e))?;
    unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| errno("unshare(USER) as the command's uid", e))?;
    fs::write("/proc/self/setgroups", "deny").map_err(|e| format!("/proc/self/setgroups: {e}"))?;
    fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(|e| format!("/proc/self/uid_map: {e}"))?;
    fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(|e| format!("/proc/self/gid_map: {e}"))?;
    Ok(())
}

/// PID 1 of the sandbox's PID namespace: builds the mount tree, starts the command, reaps every process,
/// and reports through `status`. Returns its exit code.
fn pid1(spec: &PhaseSpec, go: OwnedFd, status: OwnedFd) -> i32 {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    // PID 1 holds privileges in the sandbox's namespaces and the pipe its report goes through: not dumpable,
    // so that no process of the command (the same uid when the runner is not root) may ptrace it or read its
    // memory. The command's own exec makes the command dumpable again, for its own tree.
    if nix::sys::prctl::set_dumpable(false).is_err() {
        return 1;
    }
    if sys::install_timeout_handler().is_err() {
        return 1;
    }
    let mut byte = [0u8; 1];
    if !matches!(fs::File::from(go).read(&mut byte), Ok(1)) {
        return 1;
    }
    let mut status = fs::File::from(status);
    let report = match pid1_inner(spec) {
        Ok(r) => r,
        Err(e) => PhaseReport {
            setup_error: Some(e),
            ..Default::default()
        },
    };
    let text = serde_json::to_string(&report).unwrap_or_default();
    let _ = status.write_all(text.as_bytes());
    0
}

fn pid1_inner(spec: &PhaseSpec) -> Result<PhaseReport, String> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| errno("unshare(NS)", e))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| errno("making / private", e))?;
    nix::unistd::sethostname(spec::SANDBOX_HOSTNAME).map_err(|e| errno("sethostname", e))?;
    build_root(spec)?;
    enter_root(&spec.root_dir)?;

    let argv = [c("/bin/sh")?, c("sh")?, c("-c")?, c(&spec.command)?];
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| c(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let filters = super::seccomp::build().map_err(|e| e.to_string())?;
    let (err_r, err_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| errno("pipe", e))?;
    let started = Instant::now();
    let cmd = match sys::fork_single_threaded().map_err(|e| errno("fork of the command", e))? {
        Forked::Child => {
            drop(err_r);
            let e = become_command(spec, &argv, &env, &filters);
            let _ = fs::File::from(err_w).write_all(e.as_bytes());
            sys::exit_now(127)
        }
        Forked::Parent(pid) => pid,
    };
    drop(err_w);
    let mut failed = String::new();
    let _ = fs::File::from(err_r).read_to_string(&mut failed);
    // The child says which step failed: `setup:` before the command could be started (the sandbox was not
    // complete, nothing untrusted ran), `exec:` when /bin/sh itself could not be executed.
    let (setup_error, exec_error) = match failed.split_once(':') {
        Some(("setup", why)) => (Some(why.trim().to_owned()), String::new()),
        Some(("exec", why)) => (None, why.trim().to_owned()),
        _ => (None, failed),
    };

    let mut report = PhaseReport::default();
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == cmd => {
                report.exit_code = Some(code);
                break;
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == cmd => {
                report.signal = Some(sig as i32);
                break;
            }
            Err(Errno::EINTR) if sys::timeout_requested() => {
                report.timed_out = true;
                break;
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => return Err(errno("waiting for the command", e)),
        }
    }
    report.duration_ms = millis(started.elapsed());
    if let Some(e) = setup_error {
        report.setup_error = Some(e);
        report.exit_code = None;
    }
    if !exec_error.is_empty() {
        report.exec_error = Some(exec_error);
        report.exit_code = None;
    }
    report.running_at_end = count_processes().saturating_sub(1);
    report.tasks_started = fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|last| last.saturating_sub(1))
        .unwrap_or(0);
    report.scratch_free_bytes = [spec::SANDBOX_REPO, spec::SANDBOX_TMP]
        .iter()
        .filter_map(|p| nix::sys::statvfs::statvfs(*p).ok())
        .map(|s| s.blocks_available() * s.fragment_size())
        .min();
    // Kill everything else in the namespace and reap it; our own exit would do the same.
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    while let Ok(_) | Err(Errno::EINTR) = waitpid(Pid::from_raw(-1), None) {}
    Ok(report)
}

fn c(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("a NUL byte in {s:?}"))
}

/// Counts the processes of the namespace (entries of our own `/proc`).
fn count_processes() -> u64 {
    fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// In the forked child: drop everything and exec the command; returns only on failure, with the reason
/// (`setup: ...` when a step of the sandbox failed, `exec: ...` when /bin/sh could not be executed).
fn become_command(
    spec: &PhaseSpec,
    argv: &[CString; 4],
    env: &[CString],
    filters: &super::seccomp::Filters,
) -> String {
    use nix::sys::resource::{setrlimit, Resource};
    let r = (|| -> Result<(), String> {
        nix::unistd::setsid().map_err(|e| errno("setsid", e))?;
        let null = nix::fcntl::open(
            "/dev/null",
            nix::fcntl::OFlag::O_RDONLY,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| errno("/dev/null", e))?;
        nix::unistd::dup2(null, 0).map_err(|e| errno("dup2", e))?;
        nix::unistd::dup2(1, 2).map_err(|e| errno("dup2", e))?;
        if !spec.user_ns {
            give_output_pipe(Uid::from_raw(spec.uid), Gid::from_raw(spec.gid))?;
        }
        setrlimit(Resource::RLIMIT_NOFILE, spec.open_files, spec.open_files).map_err(|e| {
            errno(
                &format!(
                    "RLIMIT_NOFILE {} (above what the runner may set)",
                    spec.open_files
                ),
                e,
            )
        })?;
        setrlimit(
            Resource::RLIMIT_FSIZE,
            spec.file_size_bytes,
            spec.file_size_bytes,
        )
        .map_err(|e| errno("RLIMIT_FSIZE", e))?;
        setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(|e| errno("RLIMIT_CORE", e))?;
        nix::unistd::chdir(spec::SANDBOX_REPO).map_err(|e| errno("chdir /work/repo", e))?;
        let (uid, gid) = (Uid::from_raw(spec.uid), Gid::from_raw(spec.gid));
        if !spec.user_ns {
            nix::unistd::setgroups(&[gid]).map_err(|e| errno("setgroups", e))?;
        }
        sys::drop_capability_bounding_set().map_err(|e| errno("dropping capabilities", e))?;
        nix::unistd::setresgid(gid, gid, gid).map_err(|e| errno("setresgid", e))?;
        nix::unistd::setresuid(uid, uid, uid).map_err(|e| errno("setresuid", e))?;
        if !spec.user_ns {
            enter_own_user_namespace(uid, gid)?;
        }
        // No key of the runner's session is reachable, and what the command would add dies with it (the
        // filter below then denies the keyring calls altogether).
        sys::join_fresh_session_keyring()
            .map_err(|e| errno("joining a fresh session keyring", e))?;
        nix::sys::prctl::set_no_new_privs().map_err(|e| errno("PR_SET_NO_NEW_PRIVS", e))?;
        filters.apply().map_err(|e| e.to_string())?;
        // Only 0, 1 and 2 survive the exec (our error pipe is close-on-exec already).
        sys::cloexec_from(3).map_err(|e| errno("marking descriptors from 3 close-on-exec", e))?;
        Ok(())
    })();
    if let Err(e) = r {
        return format!("setup: {e}");
    }
    match nix::unistd::execve(&argv[0], &argv[1..], env) {
        Err(e) => format!("exec: {}", errno("execve /bin/sh", e)),
        Ok(never) => match never {},
    }
}

/// Makes the pipe on descriptors 1 and 2 the command's own (as root, before the uid changes), so that
/// `/dev/stdout` and `/dev/stderr` (links to `/proc/self/fd/1` and `2`, which the kernel opens as the pipe's
/// inode, mode 0600, owner its creator) open for the command as they do outside. A descriptor that is not a
/// pipe is left alone.
fn give_output_pipe(uid: Uid, gid: Gid) -> Result<(), String> {
    for fd in [1, 2] {
        let st = nix::sys::stat::fstat(fd).map_err(|e| errno(&format!("fstat {fd}"), e))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFIFO {
            nix::unistd::fchown(fd, Some(uid), Some(gid))
                .map_err(|e| errno(&format!("fchown of the output pipe ({fd})"), e))?;
        }
    }
    Ok(())
}

const RO: MsFlags = MsFlags::MS_RDONLY;

fn bind(src: &Path, dst: &Path, flags: MsFlags) -> Result<(), String> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| errno(&format!("bind {} -> {}", src.display(), dst.display()), e))?;
    // Keep the flags the kernel locked on the source (in a user namespace they cannot be cleared).
    let keep = locked_flags(dst);
    mount(
        None::<&str>,
        dst,
        None::<&str>,
        MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | flags
            | keep,
        None::<&str>,
    )
    .map_err(|e| errno(&format!("remount {}", dst.display()), e))
}

/// Opens `rel` below the directory `top` as an `O_PATH` descriptor one component at a time, never following a
/// symbolic link (the repository is the contributor's: a link in place of a directory must not redirect a
/// bind anywhere else). The last component must be a directory or a regular file.
fn open_below_no_links(top: &Path, rel: &Path) -> Result<fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = Path::new(spec::SANDBOX_REPO).join(rel);
    let open = |p: &Path| {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(p)
            .map_err(|e| format!("{}: {e}", shown.display()))
    };
    let mut at = open(top)?;
    let mut comps = rel.components().peekable();
    while let Some(comp) = comps.next() {
        let std::path::Component::Normal(name) = comp else {
            return Err(format!("{}: not a plain relative path", shown.display()));
        };
        // `/proc/self/fd/N/NAME`: the directory already opened, then NAME looked up in it without following it.
        let next = open(
            &Path::new("/proc/self/fd")
                .join(std::os::fd::AsRawFd::as_raw_fd(&at).to_string())
                .join(name),
        )?;
        let ft = next
            .metadata()
            .map_err(|e| format!("{}: {e}", shown.display()))?
            .file_type();
        let last = comps.peek().is_none();
        if ft.is_symlink() {
            return Err(format!(
                "{}: a symbolic link on the way (not followed)",
                shown.display()
            ));
        }
        if !(ft.is_dir() || (last && ft.is_file())) {
            return Err(format!(
                "{}: neither a directory nor a regular file",
                shown.display()
            ));
        }
        at = next;
    }
    Ok(at)
}

/// Binds `rel` below the sandbox's repository `top` read-only onto itself (the path resolved without following
/// a link), keeping the flags the kernel locked on the repository's mount.
fn bind_read_only_below(top: &Path, rel: &Path) -> Result<(), String> {
    let shown = Path::new(spec::SANDBOX_REPO).join(rel);
    let fd_path = |f: &fs::File| {
        PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(f)
        ))
    };
    let below = open_below_no_links(top, rel)?;
    let at = fd_path(&below);
    mount(Some(&at), &at, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| errno(&format!("read-only bind of {}", shown.display()), e))?;
    // The same path again now reaches the new mount (the descriptor above still names the one below it).
    let bound = open_below_no_links(top, rel)?;
    let at = fd_path(&bound);
    let keep = locked_flags(&at);
    mount(
        None::<&str>,
        &at,
        None::<&str>,
        MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | keep,
        None::<&str>,
    )
    .map_err(|e| errno(&format!("making {} read-only", shown.display()), e))
}

/// The mount flags set on the mount at `path` that a bind remount must keep (the kernel refuses to clear a
/// flag it locked on a mount a user namespace inherited): noexec, nodev, nosuid, rdonly.
fn locked_flags(path: &Path) -> MsFlags {
    let locked = nix::sys::statvfs::statvfs(path)
        .map(|s| s.flags())
        .unwrap_or(nix::sys::statvfs::FsFlags::empty());
    let mut keep = MsFlags::empty();
    for (f, m) in [
        (nix::sys::statvfs::FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (nix::sys::statvfs::FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (nix::sys::statvfs::FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (nix::sys::statvfs::FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
    ] {
        if locked.contains(f) {
            keep |= m;
        }
    }
    keep
}

fn under(root: &Path, abs: &Path) -> PathBuf {
    root.join(abs.strip_prefix("/").unwrap_or(abs))
}

fn mkdirs(p: &Path) -> Result<(), String> {
    fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))
}

/// Creates the directories leading to the host directory `host_dir` under `root` that do not exist there
/// yet, each with the mode (and, when `chown`, the owner) of the host directory it stands for: a read path
/// keeps the protection of its parents (a file under a 0700 home stays unreachable to other uids).
fn mkdirs_like_host(root: &Path, host_dir: &Path, chown: bool) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut host = PathBuf::from("/");
    for comp in host_dir.components() {
        let std::path::Component::Normal(name) = comp else {
            continue;
        };
        host.push(name);
        let target = under(root, &host);
        if fs::symlink_metadata(&target).is_ok() {
            continue;
        }
        let meta = fs::metadata(&host).map_err(|e| format!("{}: {e}", host.display()))?;
        fs::create_dir(&target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
        fs::set_permissions(&target, fs::Permissions::from_mode(meta.mode() & 0o1777))
            .map_err(|e| format!("chmod {}: {e}", target.display()))?;
        if chown {
            std::os::unix::fs::lchown(&target, Some(meta.uid()), Some(meta.gid()))
                .map_err(|e| format!("chown {}: {e}", target.display()))?;
        }
    }
    Ok(())
}

/// Builds the sandbox's root on `spec.root_dir` (a fresh tmpfs) in PID 1's private mount namespace.
fn build_root(spec: &PhaseSpec) -> Result<(), String> {
    let root = &spec.root_dir;
    mount(
        Some("fence-root"),
        root,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=1m,mode=0755"),
    )
    .map_err(|e| errno("tmpfs root", e))?;
    let system_root = spec.system_root.as_deref().unwrap_or(Path::new("/"));
    for dir in spec::SYSTEM_DIRS {
        let host_path = spec::under_root(system_root, dir);
        let host = host_path.as_path();
        let target = under(root, Path::new(dir));
        match fs::symlink_metadata(host) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(host).map_err(|e| format!("{dir}: {e}"))?;
                symlink(&to, &target).map_err(|e| format!("symlink {dir}: {e}"))?;
            }
            Ok(m) if m.is_dir() => {
                mkdirs(&target)?;
                bind(host, &target, RO)?;
            }
            _ => {}
        }
    }
    for p in &spec.read_paths {
        let target = under(root, p);
        let meta = fs::metadata(p).map_err(|e| format!("[sandbox] read {}: {e}", p.display()))?;
        if meta.is_dir() {
            mkdirs_like_host(root, p, !spec.user_ns)?;
        } else {
            if let Some(parent) = p.parent() {
                mkdirs_like_host(root, parent, !spec.user_ns)?;
            }
            fs::write(&target, b"")
                .map_err(|e| format!("mount point {}: {e}", target.display()))?;
        }
        bind(p, &target, RO)?;
    }
    if let Some(ca) = &spec.ca_bundle {
        // The operator's CA certificates with the system's, read-only over the system bundle: the path resolved
        // below the sandbox's root without following a link (an absolute link would name a host path here).
        let rel = Path::new(spec::SYSTEM_CA_BUNDLE.trim_start_matches('/'));
        open_below_no_links(root, rel).map_err(|e| {
            format!(
                "the operator's CA certificates over {}: {}",
                spec::SYSTEM_CA_BUNDLE,
                e.trim_start_matches(spec::SANDBOX_REPO)
            )
        })?;
        bind(ca, &under(root, Path::new(spec::SYSTEM_CA_BUNDLE)), RO)?;
    }
    if let Some(tests) = &spec.tests_dir {
        // A task's pristine tests: read-only, and only in the phase that runs them.
        let target = under(root, Path::new(spec::SANDBOX_TESTS));
        mkdirs(&target)?;
        bind(tests, &target, RO)?;
    }
    for (host, inside) in [
        (&spec.repo_dir, spec::SANDBOX_REPO),
        (&spec.home_dir, spec::SANDBOX_HOME),
        (&spec.tmp_dir, spec::SANDBOX_TMP),
    ] {
        let target = under(root, Path::new(inside));
        mkdirs(&target)?;
        bind(host, &target, MsFlags::empty())?;
    }
    if let Some(var_tmp) = &spec.var_tmp_dir {
        let target = under(root, Path::new(spec::SANDBOX_VAR_TMP));
        mkdirs(&target)?;
        bind(var_tmp, &target, MsFlags::empty())?;
    }
    // The protected paths, read-only over the writable repository (the test phase only).
    let repo_top = under(root, Path::new(spec::SANDBOX_REPO));
    for rel in &spec.read_only_repo {
        bind_read_only_below(&repo_top, rel)?;
    }
    let dev = root.join("dev");
    mkdirs(&dev)?;
    mount(
        Some("fence-dev"),
        &dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("size=64k,mode=0755"),
    )
    .map_err(|e| errno("tmpfs /dev", e))?;
    for name in spec::DEVICES {
        let host = Path::new("/dev").join(name);
        if !host.exists() {
            continue;
        }
        let target = dev.join(name);
        fs::write(&target, b"").map_err(|e| format!("mount point {}: {e}", target.display()))?;
        mount(
            Some(&host),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| errno(&format!("bind {}", host.display()), e))?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(to, dev.join(name)).map_err(|e| format!("/dev/{name}: {e}"))?;
    }
    // POSIX shared memory: a tmpfs of its own, bounded like the scratch (its pages count in the memory cgroup).
    let shm = dev.join("shm");
    mkdirs(&shm)?;
    mount(
        Some("fence-shm"),
        &shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(format!("size={},mode=1777", spec.file_size_bytes.max(4096)).as_str()),
    )
    .map_err(|e| errno("tmpfs /dev/shm", e))?;
    // The sandbox's own /proc (of PID 1's namespace), mounted while the host's /proc is still in this mount
    // namespace: in a user namespace the kernel allows a new proc mount only beside a fully visible one.
    let proc_dir = root.join("proc");
    mkdirs(&proc_dir)?;
    mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| errno("mounting /proc", e))?;
    Ok(())
}

/// Makes `root` the root of PID 1's mount namespace, detaches the host's tree and makes `/` read-only.
fn enter_root(root: &Path) -> Result<(), String> {
    nix::unistd::chdir(root).map_err(|e| errno("chdir root", e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| errno("pivot_root", e))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| errno("detaching the host's tree", e))?;
    nix::unistd::chdir("/").map_err(|e| errno("chdir /", e))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| errno("making / read-only", e))?;
    Ok(())
}
