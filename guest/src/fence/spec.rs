//! What the runner tells the re-executed helper about one phase ([`PhaseSpec`]), and what the helper reports
//! back ([`PhaseReport`]). Both travel as JSON files inside the run's own temporary directory, which only
//! the runner and the helper (never the untrusted commands) can see.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the sandbox shows the repository.
pub const SANDBOX_REPO: &str = "/work/repo";
/// Where a task's test phase shows the bundle's pristine `tests/`, read-only.
pub const SANDBOX_TESTS: &str = intake::task::SANDBOX_TESTS;
/// Where the sandbox shows the scratch home directory.
pub const SANDBOX_HOME: &str = "/work/home";
/// Where the sandbox shows the scratch temporary directory.
pub const SANDBOX_TMP: &str = "/tmp";
/// Where the sandbox shows a second scratch temporary directory, empty at the start of each phase (tools that
/// want a temporary directory surviving a reboot use it whatever TMPDIR says).
pub const SANDBOX_VAR_TMP: &str = "/var/tmp";
/// The system CA bundle (Debian's path) the install phase's combined bundle is bound over when the operator
/// set `[egress] ca_certificates`.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The variables that point the common clients at [`SYSTEM_CA_BUNDLE`] when the operator's CA certificates are
/// in force (OpenSSL and Python's ssl, Node, pip, requests, cargo, git).
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
    "GIT_SSL_CAINFO",
];
/// Host name the sandbox sees (its own UTS namespace).
pub const SANDBOX_HOSTNAME: &str = "fence";
/// System directories bound read-only into the sandbox when they exist on the host (symlinks are recreated).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// `dir` (one of [`SYSTEM_DIRS`]) under the system root `root`.
pub fn under_root(root: &std::path::Path, dir: &str) -> PathBuf {
    root.join(dir.trim_start_matches('/'))
}

/// Device nodes bound into the sandbox's own `/dev`.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The relay the install phase gets: a listener on 127.0.0.1 inside the phase's network namespace whose
/// connections are carried to the egress proxy's Unix socket outside.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ForwardSpec {
    /// TCP port on 127.0.0.1 inside the sandbox.
    pub port: u16,
    /// The proxy's Unix socket on the host (never visible inside the sandbox).
    pub socket: PathBuf,
}

/// One phase as the helper must run it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PhaseSpec {
    /// `install` or `test`.
    pub phase: String,
    /// The command line, run as `/bin/sh -c COMMAND` in the repository.
    pub command: String,
    /// The complete environment of the command (names and values), already filtered.
    pub env: Vec<(String, String)>,
    /// An empty directory the helper's PID 1 mounts the sandbox root on (in its own mount namespace).
    pub root_dir: PathBuf,
    /// The repository copy, shown read-write at [`SANDBOX_REPO`].
    pub repo_dir: PathBuf,
    /// Scratch home, shown at [`SANDBOX_HOME`].
    pub home_dir: PathBuf,
    /// Scratch temporary directory, shown at [`SANDBOX_TMP`].
    pub tmp_dir: PathBuf,
    /// Scratch directory shown at [`SANDBOX_VAR_TMP`] (on the run's size-limited scratch, fresh per phase).
    #[serde(default)]
    pub var_tmp_dir: Option<PathBuf>,
    /// Paths relative to [`SANDBOX_REPO`] that the helper binds read-only onto themselves after the
    /// repository (the test phase's protected paths; the empty path is the repository itself). Each is
    /// resolved from the repository's top one component at a time without following a symbolic link.
    #[serde(default)]
    pub read_only_repo: Vec<PathBuf>,
    /// Extra host paths shown read-only at the same place.
    pub read_paths: Vec<PathBuf>,
    /// Where [`SYSTEM_DIRS`] come from (a toolchain image's root); `None`: the host's own `/`.
    #[serde(default)]
    pub system_root: Option<PathBuf>,
    /// A task's pristine `tests/`, shown read-only at [`SANDBOX_TESTS`] (a task's test phase only).
    #[serde(default)]
    pub tests_dir: Option<PathBuf>,
    /// The system bundle plus the operator's CA certificates, bound read-only over [`SYSTEM_CA_BUNDLE`] (the
    /// install phase only, when the operator set `[egress] ca_certificates`).
    #[serde(default)]
    pub ca_bundle: Option<PathBuf>,
    /// The uid the command runs as (inside the user namespace when [`PhaseSpec::user_ns`]).
    pub uid: u32,
    /// The gid the command runs as.
    pub gid: u32,
    /// Create a user namespace first (when the runner is not root).
    pub user_ns: bool,
    /// Wall-clock budget in milliseconds; at expiry the whole PID namespace is killed.
    pub timeout_ms: u64,
    /// RLIMIT_NOFILE.
    pub open_files: u64,
    /// RLIMIT_FSIZE in bytes.
    pub file_size_bytes: u64,
    /// `cgroup.procs` files (one per hierarchy) the helper puts its PID 1 in before anything runs.
    pub cgroup_procs: Vec<PathBuf>,
    /// The relay to the egress proxy (install phase only).
    pub forward: Option<ForwardSpec>,
    /// Where the helper writes its [`PhaseReport`].
    pub report_path: PathBuf,
}

/// What the helper observed while running one phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PhaseReport {
    /// Set when the sandbox could not be built; nothing untrusted ran then.
    pub setup_error: Option<String>,
    /// Set when `/bin/sh` itself could not be executed (errno text).
    pub exec_error: Option<String>,
    /// Exit code of the command, when it exited.
    pub exit_code: Option<i32>,
    /// Signal that ended the command, when one did.
    pub signal: Option<i32>,
    /// Whether the wall-clock budget ran out (the PID namespace was killed).
    pub timed_out: bool,
    /// Milliseconds from the start of the command to its end (or to the kill).
    pub duration_ms: u64,
    /// Tasks (processes and threads) the command started, from the PID namespace's last allocated PID.
    pub tasks_started: u64,
    /// Processes other than PID 1 still present in the namespace when the command ended.
    pub running_at_end: u64,
    /// Whether PID 1 of the namespace was confirmed dead (reaped by the helper).
    pub namespace_dead: bool,
    /// Free bytes left in the writable scratch when the command ended (`None` if unknown).
    pub scratch_free_bytes: Option<u64>,
}
