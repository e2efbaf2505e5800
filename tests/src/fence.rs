//! Helpers of the fence attack suite: a case is a temporary directory holding a tiny repository and a job
//! file; it runs `fenced-run run` (the test build) with its own `TMPDIR`, parses the verdict, and checks that
//! nothing of the run is left on the host (process, mount, cgroup, temporary directory).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the fence cannot run here (not root and no user namespaces), or `None` when it can.
pub fn skip_reason() -> Option<String> {
    let uid = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
        })
        .unwrap_or_default();
    if uid == "0" {
        return None;
    }
    let max = fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        return Some("not root and user namespaces are disabled".into());
    }
    match Command::new("unshare")
        .args(["-U", "-r", "-p", "-f", "-m", "-n", "true"])
        .status()
    {
        Ok(s) if s.success() => None,
        _ => Some("not root and unprivileged namespaces are unavailable".into()),
    }
}

/// Says why and returns true when the fence cannot run here (a `root` skip: `attestation::vectors::skip_for`).
pub fn skip() -> bool {
    match skip_reason() {
        Some(r) => {
            attestation::vectors::skip_for(attestation::vectors::SkipKind::Root, &r);
            true
        }
        None => false,
    }
}

/// Like [`skip`], and also skips (printing why) when not root: cgroup limits and the size-limited scratch need
/// root, so the exhaustion cases cannot be judged without it.
pub fn skip_without_limits() -> bool {
    if skip() {
        return true;
    }
    let root = fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "not root, so no cgroup limits or size-limited scratch to exhaust",
        );
    }
    !root
}

/// The result of one run.
#[derive(Debug)]
pub struct Ran {
    /// Exit code of the CLI.
    pub code: i32,
    /// The verdict JSON (`Null` when none was printed).
    pub verdict: serde_json::Value,
    /// The CLI's standard error.
    pub stderr: String,
    /// The runner's pid (names its cgroups).
    pub pid: u32,
}

impl Ran {
    /// The outcome name.
    pub fn outcome(&self) -> &str {
        self.verdict["outcome"].as_str().unwrap_or("<none>")
    }

    /// The test phase's output tail.
    pub fn test_tail(&self) -> &str {
        self.verdict["output_tail"]["test"].as_str().unwrap_or("")
    }

    /// A readable dump for assertion messages.
    pub fn dump(&self) -> String {
        format!(
            "exit {}\nstderr: {}\nverdict: {}",
            self.code, self.stderr, self.verdict
        )
    }
}

/// One attack case.
pub struct Case {
    /// The case's directory (job file, repository, per-run TMPDIR).
    pub dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Case {
    /// A new case run with `bin` (the `fenced-run-e2e` binary).
    pub fn new(bin: &str) -> Case {
        let dir = tempfile::Builder::new()
            .prefix("fence-case-")
            .tempdir()
            .expect("case dir");
        fs::create_dir(dir.path().join("repo")).expect("repo dir");
        fs::create_dir(dir.path().join("tmp")).expect("tmp dir");
        Case {
            dir,
            bin: PathBuf::from(bin),
        }
    }

    /// The case directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `rel` under the repository.
    pub fn repo_file(&self, rel: &str, text: &str) {
        let p = self.path().join("repo").join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    /// Writes the job file.
    pub fn job(&self, toml: &str) -> PathBuf {
        let p = self.path().join("job.toml");
        fs::write(&p, toml).expect("write job");
        p
    }

    /// The per-run TMPDIR the runner uses (must be empty after the run).
    pub fn tmp(&self) -> PathBuf {
        self.path().join("tmp")
    }

    /// Runs `fenced-run run job.toml --json` with extra arguments and environment.
    pub fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Ran {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("run")
            .arg(self.path().join("job.toml"))
            .arg("--json")
            .args(args)
            .env("TMPDIR", self.tmp());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let pid = child.id();
        let out = child.wait_with_output().expect("wait");
        let verdict = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        Ran {
            code: out.status.code().unwrap_or(-1),
            verdict,
            stderr: String::from_utf8_lossy(&out.stderr).into(),
            pid,
        }
    }

    /// Starts `fenced-run run job.toml --json` without waiting for it.
    pub fn spawn(&self) -> std::process::Child {
        Command::new(&self.bin)
            .arg("run")
            .arg(self.path().join("job.toml"))
            .arg("--json")
            .env("TMPDIR", self.tmp())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn")
    }

    /// Runs with no extra arguments.
    pub fn run(&self) -> Ran {
        self.run_with(&[], &[])
    }

    /// Asserts that nothing of the run remains: the TMPDIR is empty, no mount under the case, no cgroup of
    /// the runner, no process whose command line holds one of `markers` or the case directory (the helper and
    /// the forwarder name their spec file there).
    pub fn assert_clean(&self, ran: &Ran, markers: &[&str]) {
        let left: Vec<_> = fs::read_dir(self.tmp())
            .expect("tmp")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        assert!(
            left.is_empty(),
            "temporary files left: {left:?}\n{}",
            ran.dump()
        );
        let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let case = self.path().to_string_lossy().to_string();
        assert!(
            !mounts.contains(&case),
            "a mount under {case} is left\n{}",
            ran.dump()
        );
        let cg = cgroups_of(ran.pid);
        assert!(cg.is_empty(), "cgroups left: {cg:?}\n{}", ran.dump());
        let case_marker = case.clone();
        let mut all: Vec<&str> = markers.to_vec();
        all.push(&case_marker);
        let procs = processes_with(&all);
        assert!(
            procs.is_empty(),
            "processes left: {procs:?}\n{}",
            ran.dump()
        );
    }
}

/// The cgroups (any hierarchy) of the runner with process id `pid`.
pub fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    find_cgroups(
        Path::new("/sys/fs/cgroup"),
        &format!("fenced-run-{pid}-"),
        6,
    )
}

fn find_cgroups(dir: &Path, prefix: &str, depth: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.filter_map(Result::ok) {
        let Ok(ft) = e.file_type() else { continue };
        if !ft.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy().starts_with(prefix) {
            out.push(e.path());
        }
        out.extend(find_cgroups(&e.path(), prefix, depth - 1));
    }
    out
}

/// Host processes whose command line contains any of `markers`.
pub fn processes_with(markers: &[&str]) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if markers.iter().any(|m| cmd.contains(m)) {
            out.push(format!("{name}: {cmd}"));
        }
    }
    out
}

impl Case {
    /// Writes an operator configuration (TOML) into the case directory and returns its path, for
    /// `--operator-config`.
    pub fn operator(&self, toml: &str) -> PathBuf {
        let p = self.path().join("operator.toml");
        fs::write(&p, toml).expect("write operator config");
        p
    }

    /// Runs `PROGRAM ARGS... BIN run job.toml --json EXTRA...` (a wrapper that prepares the runner's process:
    /// open descriptors, keyrings, another uid), with this case's TMPDIR.
    pub fn run_via(&self, wrapper: &[&str], extra: &[&str]) -> Ran {
        let (program, args) = wrapper.split_first().expect("a wrapper program");
        let child = Command::new(program)
            .args(args)
            .arg(&self.bin)
            .arg("run")
            .arg(self.path().join("job.toml"))
            .arg("--json")
            .args(extra)
            .env("TMPDIR", self.tmp())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn wrapper");
        let pid = child.id();
        let out = child.wait_with_output().expect("wait");
        Ran {
            code: out.status.code().unwrap_or(-1),
            verdict: serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
            pid,
        }
    }

    /// Gives the whole case directory to `uid` (for runs as an unprivileged runner).
    pub fn give_to(&self, uid: u32) {
        let st = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{uid}"))
            .arg(self.path())
            .status()
            .expect("chown");
        assert!(st.success(), "chown of the case directory");
    }
}

/// Whether this process is root (the non-root variants start the runner as `nobody` from root).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Roots under which the job loader refuses `[sandbox] read` paths whatever the operator allows (other users'
/// files, temporary directories): a clone of the project under one of them cannot lend its target directory.
const READ_DENIED_ROOTS: &[&str] = &["/tmp", "/var/tmp", "/home", "/root"];

/// A fresh directory (mode 0755) that may be an operator's read root: under `target_tmp` (the test's
/// `CARGO_TARGET_TMPDIR`) unless that lies under a root the loader refuses (a clone under `/tmp`), else under
/// `/var/cache/fenced-run-tests`, created for it. Removed when dropped.
pub fn read_area(target_tmp: &Path) -> tempfile::TempDir {
    let denied = READ_DENIED_ROOTS.iter().any(|r| target_tmp.starts_with(r));
    let base = if denied {
        let b = PathBuf::from("/var/cache/fenced-run-tests");
        fs::create_dir_all(&b).expect("create /var/cache/fenced-run-tests");
        b
    } else {
        target_tmp.to_path_buf()
    };
    let d = tempfile::Builder::new()
        .prefix("read-area-")
        .tempdir_in(&base)
        .expect("read area");
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    d
}

/// `~/.cargo/bin/cargo` when it is rustup's proxy (rustup installed for this user).
pub fn rustup_cargo_bin() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let cargo = home.join(".cargo/bin/cargo");
    let rustup = home.join(".cargo/bin/rustup");
    (cargo.is_file() && rustup.is_file()).then_some(cargo)
}

/// The active rustup toolchain's directory (`~/.rustup/toolchains/NAME`), from `rustc --print sysroot`.
pub fn rustup_toolchain() -> Option<PathBuf> {
    let cargo = rustup_cargo_bin()?;
    let rustc = cargo.with_file_name("rustc");
    let o = std::process::Command::new(rustc)
        .args(["--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    (o.status.success() && p.starts_with(home.join(".rustup/toolchains"))).then_some(p)
}

/// Whether every ancestor of `p` lets others through (mode o+x): the command's uid (65534 under a root
/// runner) can then reach `p`.
fn reachable_by_others(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.ancestors()
        .skip(1)
        .all(|a| fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// A rustup toolchain the sandbox's uid can read: the installed one where every directory above it lets
/// others through, else the same toolchain placed (hard links where the file system allows, else a copy) in a
/// [`read_area`] (the layout `RUSTUP_HOME=/opt/rustup` gives). Dropping it removes the placed copy.
pub struct SandboxToolchain {
    /// The toolchain's directory (its `bin` and `lib` go in `[sandbox] read`, the directory in the operator's).
    pub dir: PathBuf,
    _area: tempfile::TempDir,
}

/// The active rustup toolchain made reachable for the sandbox (see [`SandboxToolchain`]); `None` without one.
pub fn rustup_toolchain_for_sandbox(target_tmp: &Path) -> Option<SandboxToolchain> {
    let installed = rustup_toolchain()?;
    let area = read_area(target_tmp);
    if reachable_by_others(&installed) {
        return Some(SandboxToolchain {
            dir: installed,
            _area: area,
        });
    }
    let dest = area.path().join("rustup/toolchains");
    fs::create_dir_all(&dest).expect("toolchains dir");
    let cp = |flag: &str| {
        std::process::Command::new("cp")
            .arg(flag)
            .arg(&installed)
            .arg(&dest)
            .status()
            .is_ok_and(|s| s.success())
    };
    let name = installed.file_name()?.to_owned();
    if !cp("-al") {
        let _ = fs::remove_dir_all(dest.join(&name));
        assert!(cp("-a"), "copy of the toolchain");
    }
    Some(SandboxToolchain {
        dir: dest.join(name),
        _area: area,
    })
}
