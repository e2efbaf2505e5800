//! The fence's seccomp filter: the system calls a test suite has no need for and that have been the kernel's
//! recurring attack surface fail inside the sandbox. Compiled with `seccompiler` (the compiler of
//! Firecracker's jailer) in PID 1 before the command is forked, applied by the command's process as the last
//! step before `execve` (after `no_new_privs`, the fresh session keyring and the command's own user
//! namespace, which the filter then stops it from leaving or nesting). Everything not listed is allowed:
//! this is a deny list, its rationale in docs/fence.md.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Calls that fail with `EPERM` whatever their arguments, each with the reason it is denied.
pub const DENIED_EPERM: &[(&str, i64, &str)] = &[
    ("add_key", libc::SYS_add_key, "keyring"),
    ("keyctl", libc::SYS_keyctl, "keyring"),
    ("request_key", libc::SYS_request_key, "keyring"),
    ("bpf", libc::SYS_bpf, "kernel attack surface"),
    (
        "perf_event_open",
        libc::SYS_perf_event_open,
        "kernel attack surface",
    ),
    (
        "userfaultfd",
        libc::SYS_userfaultfd,
        "kernel attack surface",
    ),
    ("kexec_load", libc::SYS_kexec_load, "kernel replacement"),
    (
        "kexec_file_load",
        libc::SYS_kexec_file_load,
        "kernel replacement",
    ),
    ("init_module", libc::SYS_init_module, "module loading"),
    ("finit_module", libc::SYS_finit_module, "module loading"),
    ("delete_module", libc::SYS_delete_module, "module loading"),
    ("fsopen", libc::SYS_fsopen, "new mount API"),
    ("fsconfig", libc::SYS_fsconfig, "new mount API"),
    ("fsmount", libc::SYS_fsmount, "new mount API"),
    ("fspick", libc::SYS_fspick, "new mount API"),
    ("move_mount", libc::SYS_move_mount, "new mount API"),
    ("open_tree", libc::SYS_open_tree, "new mount API"),
    ("mount_setattr", libc::SYS_mount_setattr, "new mount API"),
    ("mount", libc::SYS_mount, "mount table"),
    ("umount2", libc::SYS_umount2, "mount table"),
    ("pivot_root", libc::SYS_pivot_root, "mount table"),
    (
        "open_by_handle_at",
        libc::SYS_open_by_handle_at,
        "file handles (escapes bind mounts)",
    ),
    ("reboot", libc::SYS_reboot, "host administration"),
    ("swapon", libc::SYS_swapon, "host administration"),
    ("swapoff", libc::SYS_swapoff, "host administration"),
    ("acct", libc::SYS_acct, "host administration"),
    ("quotactl", libc::SYS_quotactl, "host administration"),
    ("syslog", libc::SYS_syslog, "kernel log"),
    ("settimeofday", libc::SYS_settimeofday, "system clock"),
    ("clock_settime", libc::SYS_clock_settime, "system clock"),
    ("clock_adjtime", libc::SYS_clock_adjtime, "system clock"),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl, "port I/O"),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm, "port I/O"),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib, "obsolete loader"),
    ("vhangup", libc::SYS_vhangup, "terminal of the host"),
];

/// Calls that fail with `EPERM` when they would create a user namespace (`CLONE_NEWUSER` in their flags):
/// a nested user namespace is where an unprivileged process regains capabilities over fresh namespaces, the
/// door to most of the kernel's namespace bugs.
pub const DENIED_NEWUSER: &[(&str, i64)] =
    &[("clone", libc::SYS_clone), ("unshare", libc::SYS_unshare)];

/// Calls that fail with `ENOSYS` ("not implemented"), so that runtimes take their fallback path: io_uring
/// (tokio, liburing and libuv fall back to epoll and threads), and `clone3`, whose flags live in memory the
/// filter cannot read (libc then uses `clone`, whose `CLONE_NEWUSER` the filter sees).
pub const DENIED_ENOSYS: &[(&str, i64)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("clone3", libc::SYS_clone3),
];

/// The compiled filters, applied in order.
#[derive(Debug, Clone)]
pub struct Filters {
    programs: Vec<BpfProgram>,
}

/// Why the filter could not be built or applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompError {
    /// This architecture has no filter.
    #[error("seccomp: no filter for architecture {0}")]
    Arch(String),
    /// seccompiler refused the rules.
    #[error("seccomp: compiling the filter: {0}")]
    Compile(String),
    /// The kernel refused the filter.
    #[error("seccomp: the kernel refused the filter: {0}")]
    Apply(String),
}

fn unconditional(names: impl Iterator<Item = i64>) -> BTreeMap<i64, Vec<SeccompRule>> {
    names.map(|nr| (nr, Vec::new())).collect()
}

/// Builds the filters for the architecture this binary was built for.
pub fn build() -> Result<Filters, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| SeccompError::Arch(std::env::consts::ARCH.to_owned()))?;
    let compile =
        |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32| -> Result<BpfProgram, SeccompError> {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )
            .map_err(|e| SeccompError::Compile(e.to_string()))?;
            BpfProgram::try_from(filter).map_err(|e| SeccompError::Compile(e.to_string()))
        };
    let mut eperm = unconditional(DENIED_EPERM.iter().map(|(_, nr, _)| *nr));
    let newuser = libc::CLONE_NEWUSER as u64;
    for (_, nr) in DENIED_NEWUSER {
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )
        .map_err(|e| SeccompError::Compile(e.to_string()))?;
        let rule =
            SeccompRule::new(vec![cond]).map_err(|e| SeccompError::Compile(e.to_string()))?;
        eperm.insert(*nr, vec![rule]);
    }
    let mut programs = vec![
        compile(eperm, libc::EPERM)?,
        compile(
            unconditional(DENIED_ENOSYS.iter().map(|(_, nr)| *nr)),
            libc::ENOSYS,
        )?,
    ];
    programs.extend(x32_program());
    Ok(Filters { programs })
}

/// On x86_64, the x32 ABI reaches every call again under its number with bit 30 set, which a deny list by
/// number would miss: every such number fails with `ENOSYS` (seccompiler matches exact numbers only, so this
/// four-instruction program is written out here). Other ABIs (i386 through `int 0x80`) are killed by
/// seccompiler's own architecture check.
fn x32_program() -> Option<BpfProgram> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    // BPF_LD (0x00) | BPF_W (0x00) | BPF_ABS (0x20); BPF_JMP (0x05) | BPF_JGE (0x30) | BPF_K (0x00);
    // BPF_RET (0x06) | BPF_K (0x00).
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let ins = |code, jt, jf, k| seccompiler::sock_filter { code, jt, jf, k };
    Some(vec![
        // A = seccomp_data.nr
        ins(BPF_LD_W_ABS, 0, 0, 0),
        // if A >= X32_SYSCALL_BIT: errno else allow
        ins(BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ])
}

impl Filters {
    /// Applies every filter to the calling thread (which must have `no_new_privs` set or CAP_SYS_ADMIN).
    pub fn apply(&self) -> Result<(), SeccompError> {
        for p in &self.programs {
            seccompiler::apply_filter(p).map_err(|e| SeccompError::Apply(e.to_string()))?;
        }
        Ok(())
    }

    /// BPF instructions in all filters.
    pub fn instructions(&self) -> usize {
        self.programs.iter().map(Vec::len).sum()
    }
}

/// The verdict's sandbox line for the filter.
pub fn describe() -> String {
    let eperm: Vec<&str> = DENIED_EPERM.iter().map(|(n, _, _)| *n).collect();
    let enosys: Vec<&str> = DENIED_ENOSYS.iter().map(|(n, _)| *n).collect();
    let newuser: Vec<&str> = DENIED_NEWUSER.iter().map(|(n, _)| *n).collect();
    format!(
        "seccomp ({} filter, seccompiler): EPERM for {}; EPERM for {} with CLONE_NEWUSER; ENOSYS for {}{}; \
         other architectures' calls kill the process; everything else allowed (ptrace only within the command's \
         own tree: PID 1 is not dumpable)",
        std::env::consts::ARCH,
        eperm.join(" "),
        newuser.join(" "),
        enosys.join(" "),
        if cfg!(target_arch = "x86_64") {
            " and every x32 call"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let f = build().expect("build");
        assert!(
            f.instructions() > DENIED_EPERM.len(),
            "{}",
            f.instructions()
        );
        let d = describe();
        for name in [
            "io_uring_setup",
            "keyctl",
            "bpf",
            "fsopen",
            "open_tree",
            "userfaultfd",
        ] {
            assert!(d.contains(name), "{d}");
        }
    }

    #[test]
    fn no_call_is_listed_twice() {
        let mut all: Vec<i64> = DENIED_EPERM.iter().map(|(_, nr, _)| *nr).collect();
        all.extend(DENIED_ENOSYS.iter().map(|(_, nr)| *nr));
        all.extend(DENIED_NEWUSER.iter().map(|(_, nr)| *nr));
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
