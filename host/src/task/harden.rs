//! Stage 6's hardening: every process stage 6 starts (the user namespace's holder, `nsenter`/`buildah`, and
//! through them every `RUN` step) starts the way a fence phase does, and none outlives the build:
//!
//! - descriptors: every descriptor from 3 up is marked close-on-exec in the child before `execve`
//!   ([`guest::fence::sys::cloexec_from`], `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`), so nothing the runner
//!   inherited (an open root-only file, a socket) reaches buildah or a `RUN` step;
//! - keyring: a fresh anonymous session keyring ([`guest::fence::sys::join_fresh_session_keyring`]), so no key
//!   of the runner's session is reachable;
//! - environment: cleared by the caller ([`super::buildah`]) to an allowlist of its own values;
//! - a cgroup ([`guest::fence::cgroup::PhaseCgroup`]) with the tier's memory and pids limits, joined by the
//!   child itself before `execve` (it writes `0` to `cgroup.procs` through a descriptor opened beforehand),
//!   so every process of the build is in it from its first instruction; at the end (success, failure, budget
//!   or the runner interrupted) every process in it is killed (`cgroup.kill` on cgroup v2, else each pid
//!   `SIGKILL`ed until it is empty) and the group removed;
//! - its own process group and `PR_SET_PDEATHSIG(SIGKILL)`.
//!
//! Where no cgroup can be made the runner becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process of
//! the build that leaves its session or process group (`setsid`) is reparented to the runner, which kills
//! every such child at the end; [`Jail::note`] says so for the verdict.
#![allow(unsafe_code)]

use guest::fence::cgroup::{Layout, PhaseCgroup};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// How long [`Jail::kill_all`] keeps killing before it gives up and names the group.
pub const KILL_DEADLINE: Duration = Duration::from_secs(10);

/// Where the processes of one build are held.
pub struct Jail {
    cgroup: Option<PhaseCgroup>,
    /// `cgroup.procs` of each hierarchy, opened for writing, for the children to join with.
    procs: Vec<OwnedFd>,
    /// Why there is no cgroup (then the runner is a child subreaper).
    no_cgroup: Option<String>,
    /// Process groups of the commands started through [`Jail::command`].
    groups: std::sync::Mutex<Vec<i32>>,
}

impl Jail {
    /// A cgroup with `memory_bytes` and `pids` for a build; where none can be made, the runner becomes a
    /// child subreaper instead and [`Jail::note`] says why.
    pub fn create(memory_bytes: u64, pids: u64) -> Jail {
        // Unique within this runner (whose pid the name carries, for the sweep of a dead runner's groups).
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "fenced-run-{}-build-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let made = PhaseCgroup::create(&name, memory_bytes, pids)
            .map_err(|e| e.to_string())
            .and_then(|g| {
                let procs = g
                    .procs_files()
                    .iter()
                    .map(|p| {
                        fs::OpenOptions::new()
                            .write(true)
                            .open(p)
                            .map(OwnedFd::from)
                            .map_err(|e| format!("{}: {e}", p.display()))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((g, procs))
            });
        match made {
            Ok((g, procs)) => Jail {
                cgroup: Some(g),
                procs,
                no_cgroup: None,
                groups: Default::default(),
            },
            Err(e) => {
                let sub = nix::sys::prctl::set_child_subreaper(true)
                    .map(|()| "the runner is a child subreaper and kills the build's process groups and every child it adopts".to_owned())
                    .unwrap_or_else(|err| format!("PR_SET_CHILD_SUBREAPER failed too ({}): a process that leaves the build's process group may survive it", err.desc()));
                Jail {
                    cgroup: None,
                    procs: Vec::new(),
                    no_cgroup: Some(format!(
                        "no cgroup for the build ({e}): its memory and pids limits are not enforced; {sub}"
                    )),
                    groups: Default::default(),
                }
            }
        }
    }

    /// Why the build had no cgroup (`None`: it had one).
    pub fn note(&self) -> Option<&str> {
        self.no_cgroup.as_deref()
    }

    /// What holds the build, for people.
    pub fn describe(&self) -> String {
        match &self.cgroup {
            Some(g) => g.describe(),
            None => "no cgroup: process groups and a child subreaper".into(),
        }
    }

    /// Makes `cmd` start hardened: its own process group, close-on-exec on every descriptor from 3, a fresh
    /// session keyring, the build's cgroup joined before `execve`, SIGKILL when the runner's thread that
    /// started it ends. The environment is the caller's to clear.
    pub fn command(&self, cmd: &mut Command) {
        let mut fds = [-1i32; 2];
        for (slot, fd) in fds.iter_mut().zip(&self.procs) {
            *slot = fd.as_raw_fd();
        }
        cmd.process_group(0);
        // SAFETY: the closure runs in the child between fork and execve. It calls only system calls (prctl,
        // keyctl, write, close_range) and touches no lock: `cloexec_from` is one close_range call on kernels
        // since 5.11 (its /proc fallback for older kernels allocates, which glibc's fork handlers allow in
        // the child). The descriptors it writes to are owned by `self`, which outlives every spawn (the
        // commands are spawned while the jail is alive; the child has its own copy of the table).
        unsafe {
            cmd.pre_exec(move || {
                for fd in fds.iter().copied().filter(|fd| *fd >= 0) {
                    // Writing 0 moves the writer itself into the group (every hierarchy of a v1 layout).
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                guest::fence::sys::join_fresh_session_keyring().map_err(std::io::Error::from)?;
                guest::fence::sys::cloexec_from(3).map_err(std::io::Error::from)?;
                Ok(())
            });
        }
    }

    /// Records the process group of a started command (its pid, [`Jail::command`] made it a leader).
    pub fn started(&self, pid: u32) {
        if let (Ok(pid), Ok(mut g)) = (i32::try_from(pid), self.groups.lock()) {
            g.push(pid);
        }
    }

    /// Kills every process of the build; `Err` names what is still alive after [`KILL_DEADLINE`].
    pub fn kill_all(&self) -> Result<(), String> {
        let groups: Vec<i32> = self.groups.lock().map(|g| g.clone()).unwrap_or_default();
        if self.cgroup.is_none() {
            // Without a cgroup the process groups are what is known of the build (a group's id is not
            // reused while a process of it lives).
            for g in &groups {
                let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
            }
        }
        let deadline = Instant::now() + KILL_DEADLINE;
        match &self.cgroup {
            Some(g) => {
                if g.layout() == Layout::V2 {
                    if let Some(dir) = g.procs_files().first().and_then(|p| p.parent()) {
                        // cgroup.kill (Linux 5.14): the kernel kills every process of the group at once, a
                        // forking one included; on older kernels the loop below does it pid by pid.
                        let _ = fs::write(dir.join("cgroup.kill"), "1");
                    }
                }
                loop {
                    let pids = cgroup_pids(g);
                    if pids.is_empty() {
                        return Ok(());
                    }
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "{} process(es) of the build still in {} after {} s",
                            pids.len(),
                            g.describe(),
                            KILL_DEADLINE.as_secs()
                        ));
                    }
                    for p in pids {
                        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            None => loop {
                // Adopted orphans (the runner is their subreaper) and the build's process groups.
                let children = adopted_children(&groups);
                if children.is_empty() {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{} process(es) of the build still alive after {} s",
                        children.len(),
                        KILL_DEADLINE.as_secs()
                    ));
                }
                for p in children {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(
                        Pid::from_raw(p),
                        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            },
        }
    }

    /// Kills every process of the build and removes its cgroup; `Err` says what is left.
    pub fn finish(mut self) -> Result<(), String> {
        let killed = self.kill_all();
        let removed = match self.cgroup.take() {
            Some(g) => g.remove().map_err(|e| e.to_string()),
            None => Ok(()),
        };
        killed.and(removed)
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        if self.cgroup.is_some() || !self.groups.lock().map(|g| g.is_empty()).unwrap_or(true) {
            let _ = self.kill_all();
        }
        if let Some(g) = self.cgroup.take() {
            let _ = g.remove();
        }
    }
}

/// The pids listed in the group's `cgroup.procs` files.
fn cgroup_pids(g: &PhaseCgroup) -> Vec<i32> {
    let mut out: Vec<i32> = g
        .procs_files()
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The runner's children that are not its own threads: processes whose parent is the runner, or whose
/// process group is one of `groups`.
fn adopted_children(groups: &[i32]) -> Vec<i32> {
    let me = std::process::id().to_string();
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command name (which may hold spaces): state ppid pgrp ...
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let (ppid, pgrp) = (
                f.get(1).copied(),
                f.get(2).and_then(|g| g.parse::<i32>().ok()),
            );
            ppid == Some(me.as_str()) || pgrp.is_some_and(|g| groups.contains(&g))
        })
        .collect()
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// While alive, SIGINT and SIGTERM are recorded instead of ending the runner at once, so that the build's
/// processes are killed first; dropping it restores the runner's own handlers and raises the signal that
/// came, so the runner then ends (or its own handler runs) as it would have.
pub struct InterruptGuard {
    old: Vec<(Signal, nix::sys::signal::SigAction)>,
}

impl InterruptGuard {
    /// Installs the handlers.
    pub fn install() -> InterruptGuard {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
        INTERRUPTED.store(false, Ordering::SeqCst);
        let act = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        let mut old = Vec::new();
        for s in [Signal::SIGINT, Signal::SIGTERM] {
            // SAFETY: the handler only stores into atomics, which is async-signal-safe.
            if let Ok(prev) = unsafe { sigaction(s, &act) } {
                old.push((s, prev));
            }
        }
        InterruptGuard { old }
    }

    /// Whether SIGINT or SIGTERM came since [`InterruptGuard::install`].
    pub fn interrupted() -> bool {
        INTERRUPTED.load(Ordering::SeqCst)
    }
}

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        for (s, prev) in &self.old {
            // SAFETY: restoring the action that was installed before ours.
            let _ = unsafe { nix::sys::signal::sigaction(*s, prev) };
        }
        if INTERRUPTED.swap(false, Ordering::SeqCst) {
            if let Ok(s) = Signal::try_from(SIGNAL.load(Ordering::SeqCst)) {
                let _ = nix::sys::signal::raise(s);
            }
        }
    }
}
