//! The fenced run: prepare the repository, run the install phase behind the egress relay, make the cut, run
//! the test phase with no network, read the counts, classify the outcome and tear everything down. The
//! result is always a [`Verdict`]; nothing of the run is left on the host afterwards.

use super::cgroup::PhaseCgroup;
use super::classify::{self, PhaseFacts};
use super::counts;
use super::helper::HELPER_ARG;
use super::protect::Change;
use super::proxy::{EgressProxy, ProxyConfig, ProxyHandle};
use super::repo;
use super::spec::{self, ForwardSpec, PhaseReport, PhaseSpec};
use attestation::verdict::{
    AppliedLimits, EgressRecord, Finding, ImageInfo, Inputs, InstallPhase, Isolation,
    ProtectedRestore, RlimitValue, TestCounts, TestNetwork, TestPhase, Verdict, OUTPUT_TAIL_MAX,
};
use intake::job::{AllowEntry, Job, OnProtectedChange};
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The agent version recorded in verdicts.
pub const AGENT_VERSION: &str = concat!("fenced-run ", env!("CARGO_PKG_VERSION"));
/// The uid and gid untrusted commands run as when the runner is root (`nobody` on Debian).
pub const SANDBOX_ID: u32 = 65534;
/// The port of the egress relay inside the install phase's network namespace.
pub const RELAY_PORT: u16 = 3128;
/// The PATH of the sandbox (before any `[sandbox] read` directory named `bin`).
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// 32 random bytes, the nonce of a run when the founder gave none.
pub fn random_nonce() -> Vec<u8> {
    use rand::RngCore;
    let mut n = vec![0u8; 32];
    rand::thread_rng().fill_bytes(&mut n);
    n
}

/// A running egress proxy for one install phase.
pub trait EgressSession: Send {
    /// Stops the proxy (closing every connection) and returns every attempt it saw, in order.
    fn finish(self: Box<Self>) -> Vec<EgressRecord>;
}

/// Something that can start the install phase's egress proxy on a Unix socket.
pub trait EgressProvider: Send + Sync {
    /// Starts listening on `socket` with `allow` as the allowlist.
    fn start(&self, allow: &[AllowEntry], socket: &Path) -> Result<Box<dyn EgressSession>, String>;
}

/// The fence's egress proxy ([`super::proxy::EgressProxy`]), with a hook to adjust its configuration
/// (tests inject a resolver that sends an allowed name to a loopback registry).
#[derive(Clone)]
pub struct ProxyEgress {
    configure: Arc<dyn Fn(ProxyConfig) -> ProxyConfig + Send + Sync>,
}

impl ProxyEgress {
    /// The proxy with the system resolver and a plain TCP dialer.
    pub fn system() -> ProxyEgress {
        ProxyEgress {
            configure: Arc::new(|c| c),
        }
    }

    /// The proxy with its configuration passed through `configure` first.
    pub fn with(
        configure: impl Fn(ProxyConfig) -> ProxyConfig + Send + Sync + 'static,
    ) -> ProxyEgress {
        ProxyEgress {
            configure: Arc::new(configure),
        }
    }
}

struct ProxySession(ProxyHandle);

impl EgressSession for ProxySession {
    fn finish(self: Box<Self>) -> Vec<EgressRecord> {
        self.0.shutdown()
    }
}

impl EgressProvider for ProxyEgress {
    fn start(&self, allow: &[AllowEntry], socket: &Path) -> Result<Box<dyn EgressSession>, String> {
        let config = (self.configure)(ProxyConfig::new(allow.to_vec(), socket));
        let handle = EgressProxy::start(config).map_err(|e| e.to_string())?;
        Ok(Box::new(ProxySession(handle)))
    }
}

/// How to run a job (everything that is not in the job file).
#[derive(Clone)]
pub struct RunOptions {
    /// The binary re-executed as the fence helper (`/proc/self/exe` for `fenced-run`).
    pub helper: PathBuf,
    /// The isolation tier recorded in the verdict.
    pub isolation: Isolation,
    /// The founder's nonce recorded in the verdict.
    pub nonce: Vec<u8>,
    /// The egress proxy of the install phase; without one the install phase has loopback only.
    pub proxy: Option<Arc<dyn EgressProvider>>,
    /// The home directory `~` means in `[sandbox] read` (the runner's `HOME` when `None`).
    pub home: Option<PathBuf>,
    /// Where intake left the repository as a directory ([`run_input`] sets it); `None` reads the job's own
    /// `repository.path`.
    pub repository: Option<PathBuf>,
    /// What the job may take from the runner's machine (passthrough names, read paths): the operator's
    /// configuration, checked by intake's stage 4 and again by the fence.
    pub operator: intake::operator::OperatorPolicy,
    /// The toolchain root filesystem this runner has (`[image] toolchains`): in the `vm` tier the verity-checked
    /// image the agent mounted, in the `process` tier the image's unpacked tree. `None`: a job that names
    /// toolchains is refused.
    pub toolchains: Option<ToolchainRoot>,
    /// The environment image a task bundle runs on, built by stage 6 (`host::task`); `None`: a task is refused.
    pub task_image: Option<TaskImage>,
    /// A task's pristine `tests/` ([`run_input`] sets it from intake's copy); the test phase shows it read-only
    /// at [`spec::SANDBOX_TESTS`]. `None` for a repository job.
    pub tests_dir: Option<PathBuf>,
}

/// A task's environment, built from its Dockerfile and converted into a read-only root file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskImage {
    /// The built image's id (`sha256:<hex>`, the digest of its configuration), recorded in the verdict.
    pub digest: String,
    /// The dm-verity root hash (hex) of the image's erofs, recorded in the verdict.
    pub root_hash: String,
    /// The image's root directory (its `/usr`, `/bin`, `/lib`, `/etc`... become the sandbox's).
    pub dir: PathBuf,
}

/// A toolchain root filesystem the sandbox shows as its system directories when the job asks for toolchains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainRoot {
    /// The toolchain sets it holds (sorted).
    pub toolchains: Vec<String>,
    /// Its dm-verity root hash (hex), recorded in the verdict.
    pub root_hash: String,
    /// Its root directory.
    pub dir: PathBuf,
}

impl ToolchainRoot {
    /// The system root for `job`: `Ok(None)` when the job names no toolchain, this root when it holds every
    /// toolchain named, else why not (a refusal).
    pub fn for_job<'a>(
        root: Option<&'a ToolchainRoot>,
        job: &Job,
    ) -> Result<Option<&'a ToolchainRoot>, String> {
        let wanted = &job.image.toolchains;
        if wanted.is_empty() {
            return Ok(None);
        }
        let Some(root) = root else {
            return Err(format!(
                "image.toolchains = [{}]: this runner has no toolchain image (build one with `fenced-run image \
                 build --toolchains {}`)",
                wanted.join(", "),
                wanted.join(",")
            ));
        };
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|t| !root.toolchains.contains(t))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "image.toolchains: this runner's toolchain image holds [{}], not {}",
                root.toolchains.join(", "),
                missing.join(", ")
            ));
        }
        Ok(Some(root))
    }
}

impl RunOptions {
    /// Options for the process tier with `helper` as the re-executed binary.
    pub fn new(helper: PathBuf, nonce: Vec<u8>) -> RunOptions {
        RunOptions {
            helper,
            isolation: Isolation::Process,
            nonce,
            proxy: Some(Arc::new(ProxyEgress::system())),
            home: None,
            repository: None,
            operator: intake::operator::OperatorPolicy::default(),
            toolchains: None,
            task_image: None,
            tests_dir: None,
        }
    }
}

/// The run's own directory: spec and report files, the sandbox root mount points, and `fs` (a size-limited
/// tmpfs when the runner is root) holding the repository copy, the scratch home and the temporary dirs.
struct RunDir {
    dir: Option<tempfile::TempDir>,
    fs: PathBuf,
    mounted: bool,
}

impl RunDir {
    fn create(disk_mib: u64, root: bool) -> Result<RunDir, String> {
        let parent = super::rundir::runs_parent(&std::env::temp_dir())?;
        super::rundir::sweep(&parent);
        let dir = tempfile::Builder::new()
            .prefix(&format!("fenced-run-{}-", std::process::id()))
            .tempdir_in(&parent)
            .map_err(|e| format!("cannot create the run directory: {e}"))?;
        let fs_dir = dir.path().join("fs");
        fs::create_dir(&fs_dir).map_err(|e| format!("{}: {e}", fs_dir.display()))?;
        let mut rd = RunDir {
            dir: Some(dir),
            fs: fs_dir,
            mounted: false,
        };
        if root {
            nix::mount::mount(
                Some(super::rundir::SCRATCH_SOURCE),
                &rd.fs,
                Some("tmpfs"),
                nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                Some(format!("size={}m,mode=0755", disk_mib.max(1)).as_str()),
            )
            .map_err(|e| {
                format!(
                    "tmpfs of {disk_mib} MiB on {}: {}",
                    rd.fs.display(),
                    e.desc()
                )
            })?;
            rd.mounted = true;
        }
        Ok(rd)
    }

    fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .map(|d| d.path())
            .unwrap_or(Path::new("/nonexistent"))
    }

    /// Unmounts and removes everything; returns what could not be removed.
    fn teardown(mut self) -> Vec<String> {
        let mut left = Vec::new();
        if self.mounted {
            if let Err(e) = nix::mount::umount2(&self.fs, nix::mount::MntFlags::MNT_DETACH) {
                left.push(format!("mount {}: {}", self.fs.display(), e.desc()));
            }
            self.mounted = false;
        }
        if let Some(dir) = self.dir.take() {
            let p = dir.path().to_owned();
            if let Err(e) = dir.close() {
                left.push(format!("directory {}: {e}", p.display()));
            }
            if let Some(parent) = p.parent() {
                super::rundir::remove_parent_if_empty(parent);
            }
        }
        left
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.mounted {
            let _ = nix::mount::umount2(&self.fs, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Output of one phase, read to its end in bounded memory: the count parsers see every byte as it arrives
/// ([`counts::Scanner`]), and only the head and the tail are kept for display.
#[derive(Debug, Default)]
pub struct Output {
    /// The first bytes of the stream (at most [`OUTPUT_TAIL_MAX`]).
    pub head: Vec<u8>,
    /// Total bytes the phase wrote.
    pub total: u64,
    /// The last bytes written (at most twice [`OUTPUT_TAIL_MAX`]).
    pub tail: Vec<u8>,
    /// What the count parsers found in the whole stream.
    pub scanned: counts::Scanned,
}

impl Output {
    /// Reads `r` to its end, feeding every byte to the count parsers.
    pub fn read_all(mut r: impl Read) -> Output {
        let mut out = Output::default();
        let mut scanner = counts::Scanner::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = &buf[..n];
            out.total += n as u64;
            scanner.feed(chunk);
            let room = OUTPUT_TAIL_MAX.saturating_sub(out.head.len());
            out.head.extend_from_slice(&chunk[..room.min(n)]);
            out.tail.extend_from_slice(chunk);
            if out.tail.len() > 2 * OUTPUT_TAIL_MAX {
                let cut = out.tail.len() - OUTPUT_TAIL_MAX;
                out.tail.drain(..cut);
            }
        }
        out.scanned = scanner.finish();
        out
    }
}

/// What one phase gave.
struct PhaseRun {
    report: PhaseReport,
    output: Output,
    facts: PhaseFacts,
    left_after_teardown: u64,
    findings: Vec<Finding>,
    env_names: Vec<String>,
    sandbox: Vec<String>,
    header: String,
}

fn finding(stage: &str, kind: &str, detail: impl Into<String>) -> Finding {
    Finding {
        stage: stage.into(),
        path: String::new(),
        kind: kind.into(),
        detail: detail.into(),
    }
}

/// Runs `job` in the fence and returns its verdict (never panics on outside input; refusals are verdicts).
pub fn run_job(job: &Job, opts: &RunOptions) -> Verdict {
    let inputs = Inputs {
        commit: None,
        tree: None,
        patch_sha256: None,
        job_sha256: Some(job.sha256.clone()),
        nonce: opts.nonce.clone(),
        protect: Vec::new(),
        test_tree: None,
    };
    let refuse = |stage: &str, reason: &str, inputs: Inputs| {
        let mut v = Verdict::refused(stage, reason, opts.isolation, inputs, AGENT_VERSION);
        v.limits = applied_limits(job);
        v
    };
    if let Some(url) = job.repository.url() {
        let _ = url;
        return refuse(
            "repository",
            &format!(
                "{}: a repository URL is fetched by intake, not by the fence",
                job.repository.path
            ),
            inputs,
        );
    }
    let root = nix::unistd::geteuid().is_root();
    let home = opts
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .unwrap_or_default();
    let read_paths = match resolve_read_paths(job, &home, &opts.operator) {
        Ok(p) => p,
        Err(e) => return refuse("sandbox", &e, inputs),
    };
    if let Err(e) = ToolchainRoot::for_job(opts.toolchains.as_ref(), job) {
        return refuse("normalise", &e, inputs);
    }
    if opts.tests_dir.is_some() && opts.task_image.is_none() {
        return refuse(
            "environment",
            "a task bundle runs on the image its Dockerfile builds (stage 6), and none was built for this run",
            inputs,
        );
    }
    let dir = match RunDir::create(job.limits.disk_mib, root) {
        Ok(d) => d,
        Err(e) => return refuse("fence", &e, inputs),
    };
    let mut verdict = run_in(job, opts, &dir, read_paths, root, inputs);
    for left in dir.teardown() {
        verdict
            .findings
            .push(finding("teardown", "left-on-host", left));
    }
    verdict
}

/// Runs intake stages 1-5 on `input` (a job file, or a bundle: a directory or a .tar/.tar.gz/.zip whose root
/// holds `job.toml`), executing nothing, then, when intake accepts, the job it loaded, in the fence, from
/// intake's own copy of the bundle. Intake's refusals come back as `refused` verdicts naming the stage, with
/// every finding; `Err` only when the input is unusable (missing, unreadable, not a bundle).
pub fn run_input(input: &Path, opts: &RunOptions) -> Result<Verdict, String> {
    let parent = super::rundir::runs_parent(&std::env::temp_dir())?;
    let verdict = run_input_under(input, opts, &parent);
    super::rundir::remove_parent_if_empty(&parent);
    verdict
}

/// [`run_input`] with intake's work directory under `parent` (the runs' own parent directory).
fn run_input_under(input: &Path, opts: &RunOptions, parent: &Path) -> Result<Verdict, String> {
    let tier = match opts.isolation {
        Isolation::SevSnp => intake::normalise::Isolation::SevSnp,
        Isolation::Tdx => intake::normalise::Isolation::Tdx,
        Isolation::Vm => intake::normalise::Isolation::Vm,
        _ => intake::normalise::Isolation::Process,
    };
    // Named like the run directories (`fenced-run-<pid>-...`) and beside them, so that if this runner is
    // killed mid-run the next run sweeps intake's copy too.
    let work = tempfile::Builder::new()
        .prefix(&format!("fenced-run-{}-intake-", std::process::id()))
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create intake's work directory: {e}"))?;
    let runner =
        intake::normalise::RunnerPolicy::with_operator(opts.operator.clone(), opts.home.clone());
    let mut report = intake::run_stages(
        input,
        &intake::IntakeOptions::for_tier(tier)
            .with_work_parent(work.path())
            .with_runner(runner),
    );
    let findings: Vec<Finding> = report
        .findings()
        .filter(|f| f.severity != intake::Severity::Note)
        .map(|f| Finding {
            stage: f.stage.name().to_owned(),
            path: f.location.clone(),
            kind: match f.severity {
                intake::Severity::Refusal => "refusal".to_owned(),
                _ => "contained".to_owned(),
            },
            detail: f.what.clone(),
        })
        .collect();
    if let Some(why) = report.unusable.clone() {
        let _ = report.cleanup();
        return Err(why);
    }
    let job = match (report.accepted, report.job.take()) {
        (true, Some(job)) => job,
        _ => {
            let (stage, reason) = match &report.refusal {
                Some(r) => (r.stage.name().to_owned(), r.reason.clone()),
                None => (
                    "intake".to_owned(),
                    "intake did not accept the job".to_owned(),
                ),
            };
            let _ = report.cleanup();
            let inputs = Inputs {
                commit: None,
                tree: None,
                patch_sha256: None,
                job_sha256: job_file_sha256(input),
                nonce: opts.nonce.clone(),
                protect: Vec::new(),
                test_tree: None,
            };
            let mut v = Verdict::refused(&stage, &reason, opts.isolation, inputs, AGENT_VERSION);
            v.findings = findings;
            return Ok(v);
        }
    };
    let mut from_intake = opts.clone();
    from_intake.repository = report.repository_dir.clone();
    from_intake.tests_dir = report.task.as_ref().map(|t| t.tests_dir.clone());
    let mut verdict = run_job(&job, &from_intake);
    verdict.findings.splice(0..0, findings);
    if let Err(e) = report.cleanup() {
        verdict.findings.push(finding(
            "teardown",
            "left-on-host",
            format!("intake work directory: {e}"),
        ));
    }
    Ok(verdict)
}

/// SHA-256 of the job file `input` names (itself, or `job.toml` at a bundle directory's root), when readable.
fn job_file_sha256(input: &Path) -> Option<String> {
    use sha2::Digest;
    let file = if input.is_dir() {
        input.join("job.toml")
    } else if input.extension().is_some_and(|e| e == "toml") {
        input.to_path_buf()
    } else {
        return None;
    };
    let bytes = fs::read(file).ok()?;
    Some(hex::encode(sha2::Sha256::digest(bytes)))
}

/// The job's `[sandbox] read` paths, canonical: each must resolve (links followed) to a place the operator
/// allows (the allowed roots are resolved too), pass the credential list again, and hold no Unix socket or
/// FIFO anywhere below it (a socket the sandbox could connect to is a door out of it).
fn resolve_read_paths(
    job: &Job,
    home: &Path,
    operator: &intake::operator::OperatorPolicy,
) -> Result<Vec<PathBuf>, String> {
    let roots: Vec<PathBuf> = operator
        .read_roots(Some(home))
        .into_iter()
        .filter_map(|r| fs::canonicalize(r).ok())
        .collect();
    let mut out = Vec::new();
    for p in job.sandbox.resolve(home)? {
        let canon =
            fs::canonicalize(&p).map_err(|e| format!("[sandbox] read {}: {e}", p.display()))?;
        intake::job::check_read_path(&canon, Some(home)).map_err(|e| {
            format!(
                "[sandbox] read {} (resolves to {}): {e}",
                p.display(),
                canon.display()
            )
        })?;
        if !roots
            .iter()
            .any(|r| intake::operator::is_at_or_under(&canon, r))
        {
            return Err(format!(
                "[sandbox] read {} (resolves to {}): not at or under a path the operator allows (allowed: {}; from {})",
                p.display(),
                canon.display(),
                operator.read_line(),
                operator.source
            ));
        }
        refuse_sockets_below(&canon).map_err(|e| format!("[sandbox] read {}: {e}", p.display()))?;
        out.push(canon);
    }
    Ok(out)
}

/// Most entries walked below one read path looking for sockets and FIFOs; a larger tree is refused rather
/// than shown unchecked.
pub const READ_PATH_MAX_ENTRIES: u64 = 2_000_000;

/// Walks `dir` (links not followed, mount points crossed: a bind shows what is mounted below too) and
/// refuses the first Unix socket or FIFO, naming it.
fn refuse_sockets_below(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let mut seen = 0u64;
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let e = e.map_err(|e| format!("walking for sockets: {e}"))?;
        seen += 1;
        if seen > READ_PATH_MAX_ENTRIES {
            return Err(format!(
                "more than {READ_PATH_MAX_ENTRIES} entries: too large to check for sockets and FIFOs"
            ));
        }
        let t = e.file_type();
        if t.is_socket() || t.is_fifo() {
            return Err(format!(
                "{} is a {}: a read path must hold none (the sandbox could connect through it)",
                e.path().display(),
                if t.is_socket() { "Unix socket" } else { "FIFO" }
            ));
        }
    }
    Ok(())
}

fn applied_limits(job: &Job) -> AppliedLimits {
    let l = &job.limits;
    let mut rlimits = BTreeMap::new();
    let both = |v| RlimitValue {
        soft: Some(v),
        hard: Some(v),
    };
    rlimits.insert("RLIMIT_NOFILE".to_owned(), both(l.open_files));
    rlimits.insert(
        "RLIMIT_FSIZE".to_owned(),
        both(l.disk_mib.saturating_mul(1024 * 1024)),
    );
    rlimits.insert("RLIMIT_CORE".to_owned(), both(0));
    AppliedLimits {
        memory_mib: Some(l.memory_mib),
        pids: Some(l.pids),
        disk_mib: Some(l.disk_mib),
        open_files: Some(l.open_files),
        install_timeout_seconds: job.install.as_ref().map(|i| i.timeout_seconds),
        test_timeout_seconds: Some(job.test.timeout_seconds),
        rlimits,
    }
}

fn run_in(
    job: &Job,
    opts: &RunOptions,
    dir: &RunDir,
    read_paths: Vec<PathBuf>,
    root: bool,
    mut inputs: Inputs,
) -> Verdict {
    let refuse = |stage: &str, reason: &str, inputs: Inputs| {
        let mut v = Verdict::refused(stage, reason, opts.isolation, inputs, AGENT_VERSION);
        v.limits = applied_limits(job);
        v
    };
    let source = opts
        .repository
        .clone()
        .unwrap_or_else(|| job.resolve(Path::new(&job.repository.path)));
    let patch = job.repository.patch.as_ref().map(|p| job.resolve(p));
    let repo_dir = dir.fs.join("repo");
    // The protected paths as received are kept beside the repository, in the run directory the sandbox never
    // sees.
    let store = dir.fs.join("protected");
    inputs.protect = job.test.protect.clone();
    let (prepared, protected) = match repo::prepare_protected(
        &source,
        &repo_dir,
        job.repository.commit.as_deref(),
        patch.as_deref(),
        Some((&job.test.protect, &store)),
    ) {
        Ok(p) => p,
        Err(e) => return refuse(e.stage(), &e.to_string(), inputs),
    };
    inputs.commit = prepared.commit.clone();
    inputs.tree = Some(prepared.tree.clone());
    inputs.patch_sha256 = prepared.patch_sha256.clone();
    let mut undone = Vec::new();
    if let Some(p) = &protected {
        let changed = match p.changes(&repo_dir) {
            Ok(c) => c,
            Err(e) => return refuse("protect", &e.to_string(), inputs),
        };
        if !changed.is_empty() && job.test.on_protected_change == OnProtectedChange::Refuse {
            let list: Vec<String> = changed
                .iter()
                .map(|c| format!("{} ({})", c.path_text(), c.kind.name()))
                .collect();
            return refuse(
                "patch",
                &format!(
                    "the patch changes {} protected path(s) and the job says on_protected_change = \"refuse\": {}",
                    changed.len(),
                    list.join(", ")
                ),
                inputs,
            );
        }
        match p.restore(&repo_dir, None) {
            Ok(c) => undone.extend(c.into_iter().map(|c| restored(c, "patch"))),
            Err(e) => return refuse("protect", &e.to_string(), inputs),
        }
    }

    let (test_command, test_source) = match &job.test.command {
        Some(c) => (c.clone(), "job".to_owned()),
        None => match repo::detect_test_command(&repo_dir) {
            Some(found) => found,
            None => {
                return refuse(
                    "test",
                    "no [test] command in the job and none detected (Cargo.toml, package.json scripts.test, go.mod, \
                     pyproject.toml/pytest.ini/setup.cfg, Makefile test target, tests/test.sh)",
                    inputs,
                )
            }
        },
    };
    let (uid, gid) = if root {
        (SANDBOX_ID, SANDBOX_ID)
    } else {
        (0, 0)
    };
    let home_dir = dir.fs.join("home");
    let setup = (|| -> Result<(), String> {
        fs::create_dir(&home_dir).map_err(|e| format!("{}: {e}", home_dir.display()))?;
        if root {
            for d in [&repo_dir, &home_dir] {
                repo::chown_tree(d, uid, gid).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })();
    if let Err(e) = setup {
        return refuse("fence", &e, inputs);
    }

    let mut verdict = Verdict::new(
        attestation::verdict::Outcome::TestsPassed,
        opts.isolation,
        inputs,
        AGENT_VERSION,
    );
    verdict.limits = applied_limits(job);
    verdict.protected = undone;
    verdict.image = ToolchainRoot::for_job(opts.toolchains.as_ref(), job)
        .ok()
        .flatten()
        .map(|t| ImageInfo {
            toolchains: t.toolchains.clone(),
            root_hash: t.root_hash.clone(),
            digest: None,
        });
    if let (Some(img), Some(_)) = (&opts.task_image, &opts.tests_dir) {
        verdict.image = Some(ImageInfo {
            toolchains: Vec::new(),
            root_hash: img.root_hash.clone(),
            digest: Some(img.digest.clone()),
        });
    }
    for note in &prepared.notes {
        verdict
            .findings
            .push(finding("commit", "commit-unverified", note.clone()));
    }
    let ctx = PhaseCtx {
        job,
        opts,
        dir,
        read_paths: &read_paths,
        root,
        uid,
        gid,
        repo_dir: &repo_dir,
        home_dir: &home_dir,
    };

    if let Some(install) = &job.install {
        let socket = dir.path().join("egress.sock");
        let session = match &opts.proxy {
            Some(p) => match p.start(&install.allow, &socket) {
                Ok(s) => Some(s),
                Err(e) => {
                    verdict.findings.push(finding(
                        "install",
                        "egress-proxy",
                        format!("the egress proxy did not start: {e}"),
                    ));
                    None
                }
            },
            None => {
                verdict.findings.push(finding(
                    "install",
                    "egress-proxy",
                    "no egress proxy configured: the install phase had loopback only",
                ));
                None
            }
        };
        let forward = session.as_ref().map(|_| ForwardSpec {
            port: RELAY_PORT,
            socket: socket.clone(),
        });
        let run = ctx.phase(
            "install",
            &install.command,
            install.timeout_seconds,
            forward,
            None,
        );
        let egress = session.map(|s| s.finish()).unwrap_or_default();
        let _ = fs::remove_file(&socket);
        verdict.install = Some(InstallPhase {
            command: install.command.clone(),
            source: "job".into(),
            exit_code: run.report.exit_code,
            signal: run.report.signal,
            duration_ms: run.report.duration_ms,
            egress,
            env_names: run.env_names.clone(),
            sandbox: run.sandbox.clone(),
        });
        verdict.output_tail.install = tail_with_header(&run.header, &run.output);
        absorb(&mut verdict, &run);
        // The cut: the install namespace must be gone and every process of it dead before tests start.
        if run.left_after_teardown > 0 || !run.report.namespace_dead {
            verdict.findings.push(finding(
                "cut",
                "cut-not-verified",
                format!(
                    "after the install phase {} process(es) remained and PID 1 dead = {}; the test phase was not started",
                    run.left_after_teardown, run.report.namespace_dead
                ),
            ));
            verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
            return verdict;
        }
        if let Some((outcome, why)) = classify::install_stops(&run.facts) {
            verdict
                .findings
                .push(finding("install", "install-phase", why));
            verdict.set_outcome(outcome);
            return verdict;
        }
        if let Some(p) = &protected {
            let owner = root.then_some((uid, gid));
            match p.restore(&repo_dir, owner) {
                Ok(c) => verdict
                    .protected
                    .extend(c.into_iter().map(|c| restored(c, "install"))),
                Err(e) => {
                    verdict
                        .findings
                        .push(finding("protect", "protect", e.to_string()));
                    verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
                    return verdict;
                }
            }
        }
    }
    if let Some(tests) = &opts.tests_dir {
        // A task: what the test phase runs is the bundle's pristine tests/, never written by the first phase.
        match repo::tree_hash(tests) {
            Ok(t) => verdict.inputs.test_tree = Some(t),
            Err(e) => {
                verdict
                    .findings
                    .push(finding("protect", "protect", e.to_string()));
                verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
                return verdict;
            }
        }
    } else if let Some(p) = &protected {
        match p.tree() {
            Ok(t) => verdict.inputs.test_tree = Some(t),
            Err(e) => {
                verdict
                    .findings
                    .push(finding("protect", "protect", e.to_string()));
                verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
                return verdict;
            }
        }
    }

    let cut = job.install.as_ref().map(|_| {
        "cut: the install phase's PID 1 was reaped (so every process of its namespace was dead) and no \
         install process was left before this phase started"
    });
    let run = ctx.phase("test", &test_command, job.test.timeout_seconds, None, cut);
    verdict.test = Some(TestPhase {
        command: test_command.clone(),
        source: test_source,
        exit_code: run.report.exit_code,
        signal: run.report.signal,
        duration_ms: run.report.duration_ms,
        network: TestNetwork::None,
        env_names: run.env_names.clone(),
        sandbox: run.sandbox.clone(),
    });
    verdict.output_tail.test = tail_with_header(&run.header, &run.output);
    absorb(&mut verdict, &run);

    // The report file is the repository's: resolve it (symbolic links included) and read it only when it is
    // a regular file inside the repository copy, never a host file a link points to.
    let junit = match &job.test.junit {
        None => Ok(None),
        Some(j) => contained_file(&repo_dir, j).map(Some),
    };
    let counts = match junit {
        Err(why) => counts::CountsResult::Unparsed { why },
        Ok(j) => counts::count(&run.output.scanned, run.report.exit_code, j.as_deref()),
    };
    if run.output.scanned.long_lines > 0 && job.test.junit.is_none() {
        verdict.findings.push(finding(
            "counts",
            "long-lines",
            format!(
                "{} line(s) longer than {} bytes: the parsers read each from its start (after its last carriage return) only",
                run.output.scanned.long_lines,
                counts::MAX_PARSED_LINE
            ),
        ));
    }
    if let Some(c) = counts.counted() {
        verdict.tests = Some(TestCounts {
            passed: c.counts.passed,
            failed: c.counts.failed,
            skipped: c.counts.skipped,
            parser: c.parser_name(),
        });
        if let Some(d) = c.disagreement() {
            verdict
                .findings
                .push(finding("counts", "exit-code-disagrees", d));
        }
    }
    let (outcome, why) = classify::test_outcome(&run.facts, &counts);
    if let Some(why) = why {
        verdict.findings.push(finding("test", "outcome", why));
    }
    if let (Some(why), attestation::verdict::Outcome::TestsFailed) =
        (run.facts.exhausted(), outcome)
    {
        // The suite's failures were claimed before our side gave out: they stand, and the exhaustion is said.
        verdict
            .findings
            .push(finding("test", "environment-exhausted", why));
    }
    verdict.set_outcome(outcome);
    verdict
}

/// The verdict's record of one change to a protected path that the fence undid.
fn restored(c: Change, by: &str) -> ProtectedRestore {
    ProtectedRestore {
        path: c.path_text(),
        change: c.kind.name().to_owned(),
        by: by.to_owned(),
    }
}

/// `rel` inside `repo` as a canonical path, when it is a regular file there after resolving every link.
fn contained_file(repo: &Path, rel: &Path) -> Result<PathBuf, String> {
    let base = fs::canonicalize(repo).map_err(|e| format!("{}: {e}", repo.display()))?;
    let path = fs::canonicalize(base.join(rel))
        .map_err(|e| format!("[test] junit {}: {e}", rel.display()))?;
    if !path.starts_with(&base) {
        return Err(format!(
            "[test] junit {}: resolves outside the repository",
            rel.display()
        ));
    }
    match fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(path),
        Ok(_) => Err(format!(
            "[test] junit {}: not a regular file",
            rel.display()
        )),
        Err(e) => Err(format!("[test] junit {}: {e}", rel.display())),
    }
}

fn absorb(verdict: &mut Verdict, run: &PhaseRun) {
    verdict.processes.started += run.report.tasks_started;
    verdict.processes.running_at_end += run.report.running_at_end;
    verdict.processes.left_after_teardown += run.left_after_teardown;
    verdict.findings.extend(run.findings.iter().cloned());
}

fn tail_with_header(header: &str, out: &Output) -> String {
    let room = OUTPUT_TAIL_MAX.saturating_sub(header.len());
    let start = out.tail.len().saturating_sub(room);
    let mut s = header.to_owned();
    s.push_str(&String::from_utf8_lossy(&out.tail[start..]));
    s
}

struct PhaseCtx<'a> {
    job: &'a Job,
    opts: &'a RunOptions,
    dir: &'a RunDir,
    read_paths: &'a [PathBuf],
    root: bool,
    uid: u32,
    gid: u32,
    repo_dir: &'a Path,
    home_dir: &'a Path,
}

impl PhaseCtx<'_> {
    /// Where the sandbox's system directories come from: the toolchain root when the job asks for toolchains.
    fn system_root(&self) -> Option<&Path> {
        if let (Some(img), Some(_)) = (&self.opts.task_image, &self.opts.tests_dir) {
            return Some(img.dir.as_path());
        }
        ToolchainRoot::for_job(self.opts.toolchains.as_ref(), self.job)
            .ok()
            .flatten()
            .map(|t| t.dir.as_path())
    }

    fn env(&self, forward: Option<&ForwardSpec>) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        let mut path = String::new();
        for p in self.read_paths {
            if p.file_name().is_some_and(|n| n == "bin") {
                path.push_str(&p.to_string_lossy());
                path.push(':');
            }
        }
        path.push_str(SANDBOX_PATH);
        env.insert("PATH".into(), path);
        env.insert("HOME".into(), spec::SANDBOX_HOME.into());
        env.insert("TMPDIR".into(), spec::SANDBOX_TMP.into());
        env.insert("LANG".into(), "C.UTF-8".into());
        for name in &self.job.env.passthrough {
            // Intake's stage 4 refused the job already if the operator does not allow a name; a job handed
            // to the fence directly gets the same rule here.
            if !self.opts.operator.allows_env(name) {
                continue;
            }
            if let Ok(v) = std::env::var(name) {
                env.insert(name.clone(), v);
            }
        }
        for (k, v) in &self.job.env.set {
            env.insert(k.clone(), v.clone());
        }
        if let Some(f) = forward {
            let url = format!("http://127.0.0.1:{}", f.port);
            for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                env.insert(k.into(), url.clone());
            }
        }
        env.into_iter().collect()
    }

    fn sandbox_lines(
        &self,
        phase: &str,
        forward: Option<&ForwardSpec>,
        cgroup: Option<&PhaseCgroup>,
        timeout: u64,
    ) -> Vec<String> {
        let l = &self.job.limits;
        let mut lines = vec![if self.root {
            "namespaces: pid (own PID 1), mount, ipc, uts, net; user (the command's own, entered as its uid)"
                .to_owned()
        } else {
            "namespaces: user, pid (own PID 1), mount, ipc, uts, net".to_owned()
        }];
        lines.push(match forward {
            Some(f) => format!("network: loopback only; relay 127.0.0.1:{} -> egress proxy (HTTP_PROXY, HTTPS_PROXY)", f.port),
            None if phase == "install" => "network: loopback only (no egress proxy)".into(),
            None => "network: none (fresh namespace, loopback only)".into(),
        });
        let sys_root = self.system_root().unwrap_or(Path::new("/"));
        let sys: Vec<&str> = spec::SYSTEM_DIRS
            .iter()
            .copied()
            .filter(|d| spec::under_root(sys_root, d).exists())
            .collect();
        match self.system_root() {
            Some(r) => lines.push(format!(
                "read-only: {} (from the toolchain image at {})",
                sys.join(" "),
                r.display()
            )),
            None => lines.push(format!("read-only: {}", sys.join(" "))),
        }
        if !self.read_paths.is_empty() {
            let extra: Vec<String> = self
                .read_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            lines.push(format!("read-only ([sandbox] read): {}", extra.join(" ")));
        }
        if phase == "test" && self.opts.tests_dir.is_some() {
            lines.push(format!(
                "read-only: {} (the task bundle's pristine tests/; not shown to the solution phase)",
                spec::SANDBOX_TESTS
            ));
        }
        lines.push(format!(
            "read-write: {} (repository), {} (HOME), {} (TMPDIR){}",
            spec::SANDBOX_REPO,
            spec::SANDBOX_HOME,
            spec::SANDBOX_TMP,
            if self.root {
                format!(" on a {} MiB tmpfs", l.disk_mib)
            } else {
                " (no size limit: not root)".into()
            }
        ));
        lines.push(format!(
            "root: read-only tmpfs; /proc of the sandbox only; /dev: {} and a /dev/shm tmpfs",
            spec::DEVICES.join(" ")
        ));
        lines.push(
            "descriptors: 0 (/dev/null), 1 and 2 (the output pipe) only; the helper closes every inherited \
             descriptor and the command marks all from 3 close-on-exec (close_range)"
                .into(),
        );
        lines.push(
            "keyring: a fresh anonymous session keyring per phase (KEYCTL_JOIN_SESSION_KEYRING)"
                .into(),
        );
        lines.push(super::seccomp::describe());
        lines.push(if self.root {
            format!(
                "user: uid {} gid {}, no capabilities, no_new_privs",
                self.uid, self.gid
            )
        } else {
            "user: uid 0 of a user namespace mapped to the runner's uid, no_new_privs".into()
        });
        lines.push(format!(
            "limits: wall clock {timeout} s; memory {} MiB, pids {} ({}); RLIMIT_NOFILE {}, RLIMIT_FSIZE {} MiB, RLIMIT_CORE 0",
            l.memory_mib,
            l.pids,
            cgroup.map(|c| c.describe()).unwrap_or_else(|| "not enforced: no cgroup".into()),
            l.open_files,
            l.disk_mib
        ));
        lines
    }

    fn phase(
        &self,
        phase: &str,
        command: &str,
        timeout_seconds: u64,
        forward: Option<ForwardSpec>,
        note: Option<&str>,
    ) -> PhaseRun {
        let mut findings = Vec::new();
        let env = self.env(forward.as_ref());
        let env_names: Vec<String> = env.iter().map(|(k, _)| k.clone()).collect();
        let l = &self.job.limits;
        let cgroup_name = format!(
            "fenced-run-{}-{}-{:08x}",
            std::process::id(),
            phase,
            rand::random::<u32>()
        );
        let cgroup = match PhaseCgroup::create(
            &cgroup_name,
            l.memory_mib.saturating_mul(1024 * 1024),
            l.pids,
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                findings.push(finding(
                    phase,
                    "no-cgroup",
                    format!("memory and pids limits not enforced: {e}"),
                ));
                None
            }
        };
        let mut sandbox =
            self.sandbox_lines(phase, forward.as_ref(), cgroup.as_ref(), timeout_seconds);
        sandbox.extend(note.map(str::to_owned));
        let mut header = format!(
            "# fenced-run {phase} phase: {command}\n# env: {}\n",
            env_names.join(" ")
        );
        for line in &sandbox {
            header.push_str("# sandbox: ");
            header.push_str(line);
            header.push('\n');
        }
        let base = self.dir.path();
        let root_dir = base.join(format!("root-{phase}"));
        let tmp_dir = self.dir.fs.join(format!("tmp-{phase}"));
        let spec_path = base.join(format!("{phase}.spec.json"));
        let report_path = base.join(format!("{phase}.report.json"));
        let stderr_path = base.join(format!("{phase}.helper.log"));
        let spec = PhaseSpec {
            phase: phase.into(),
            command: command.into(),
            env,
            root_dir: root_dir.clone(),
            repo_dir: self.repo_dir.to_owned(),
            home_dir: self.home_dir.to_owned(),
            tmp_dir: tmp_dir.clone(),
            read_paths: self.read_paths.to_vec(),
            system_root: self.system_root().map(Path::to_path_buf),
            tests_dir: self.opts.tests_dir.clone().filter(|_| phase == "test"),
            uid: self.uid,
            gid: self.gid,
            user_ns: !self.root,
            timeout_ms: timeout_seconds.saturating_mul(1000),
            open_files: l.open_files,
            file_size_bytes: l.disk_mib.saturating_mul(1024 * 1024),
            cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            forward,
            report_path: report_path.clone(),
        };
        let mut run = PhaseRun {
            report: PhaseReport::default(),
            output: Output::default(),
            facts: PhaseFacts::default(),
            left_after_teardown: 0,
            findings: Vec::new(),
            env_names,
            sandbox,
            header,
        };
        let prepared = (|| -> Result<(), String> {
            fs::create_dir(&root_dir).map_err(|e| format!("{}: {e}", root_dir.display()))?;
            fs::create_dir(&tmp_dir).map_err(|e| format!("{}: {e}", tmp_dir.display()))?;
            if self.root {
                std::os::unix::fs::lchown(&tmp_dir, Some(self.uid), Some(self.gid))
                    .map_err(|e| format!("{}: {e}", tmp_dir.display()))?;
            }
            let json = serde_json::to_vec(&spec).map_err(|e| e.to_string())?;
            fs::write(&spec_path, json).map_err(|e| format!("{}: {e}", spec_path.display()))
        })();
        match prepared {
            Ok(()) => self.spawn(&spec_path, &stderr_path, timeout_seconds, &mut run),
            Err(e) => run.report.setup_error = Some(e),
        }
        if let Some(e) = &run.report.setup_error {
            findings.push(finding(phase, "sandbox-setup", e.clone()));
            // The kernel's answer when a layer could not be applied (the command did not start then).
            run.sandbox
                .push(format!("not applied: {e}; the command was not started"));
        }
        // Teardown checks: the namespace's PID 1 reaped, the cgroup empty, then removed.
        let events = cgroup.as_ref().map(|c| c.events()).unwrap_or_default();
        if let Some(c) = cgroup {
            let left = c.processes();
            run.left_after_teardown += left;
            if left > 0 {
                findings.push(finding(
                    phase,
                    "left-after-teardown",
                    format!("{left} process(es) still in {}", c.describe()),
                ));
            }
            if let Err(e) = c.remove() {
                findings.push(finding("teardown", "left-on-host", format!("cgroup: {e}")));
            }
        }
        let _ = fs::remove_dir_all(&tmp_dir);
        let _ = fs::remove_dir(&root_dir);
        let disk_full = self.root
            && run
                .report
                .scratch_free_bytes
                .is_some_and(|free| free < 64 * 1024);
        run.facts = PhaseFacts {
            setup_error: run.report.setup_error.clone(),
            exec_error: run.report.exec_error.clone(),
            exit_code: run.report.exit_code,
            signal: run.report.signal,
            timed_out: run.report.timed_out,
            oom_kills: events.oom_kills,
            pids_max: events.pids_max,
            disk_full,
            toolchain_error: classify::toolchain_error(&run.output.tail)
                .or_else(|| classify::toolchain_error(&run.output.head)),
        };
        run.findings = findings;
        run
    }

    /// Starts the helper, reads the phase's whole output, waits (with a backstop beyond the helper's own
    /// wall clock), and loads its report.
    fn spawn(
        &self,
        spec_path: &Path,
        stderr_path: &Path,
        timeout_seconds: u64,
        run: &mut PhaseRun,
    ) {
        let stderr = match fs::File::create(stderr_path) {
            Ok(f) => f,
            Err(e) => {
                run.report.setup_error = Some(format!("{}: {e}", stderr_path.display()));
                return;
            }
        };
        let child = Command::new(&self.opts.helper)
            .arg(HELPER_ARG)
            .arg(spec_path)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                run.report.setup_error = Some(format!(
                    "cannot start the fence helper {}: {e}",
                    self.opts.helper.display()
                ));
                return;
            }
        };
        let reader = child
            .stdout
            .take()
            .map(|out| std::thread::spawn(move || Output::read_all(out)));
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let backstop = Duration::from_secs(timeout_seconds.saturating_add(30));
        let status = match rx.recv_timeout(backstop) {
            Ok(s) => s.ok(),
            Err(_) => {
                // The helper did not end on its own: kill it; its PID 1 dies with it (PR_SET_PDEATHSIG).
                if let Ok(p) = i32::try_from(pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                rx.recv().ok().and_then(Result::ok)
            }
        };
        if let Some(r) = reader {
            run.output = r.join().unwrap_or_default();
        }
        let report_path = spec_path.with_file_name(
            spec_path
                .file_name()
                .map(|n| n.to_string_lossy().replace(".spec.json", ".report.json"))
                .unwrap_or_default(),
        );
        match fs::read(&report_path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<PhaseReport>(&b).map_err(|e| e.to_string()))
        {
            Ok(r) => run.report = r,
            Err(e) => {
                let log = fs::read_to_string(stderr_path).unwrap_or_default();
                run.report.setup_error = Some(format!(
                    "the fence helper gave no report ({e}); it ended with {}: {}",
                    status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "unknown status".into()),
                    log.trim()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_the_head_and_the_tail_and_counts_everything() {
        let mut data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        data.extend_from_slice(b"\n3 passed, 2 failed\n");
        let out = Output::read_all(&data[..]);
        assert_eq!(out.total, data.len() as u64);
        assert_eq!(out.head, &data[..OUTPUT_TAIL_MAX]);
        assert!(out.tail.len() >= OUTPUT_TAIL_MAX && out.tail.len() <= 2 * OUTPUT_TAIL_MAX);
        assert!(data.ends_with(&out.tail));
        assert_eq!(
            out.scanned.found,
            vec![(counts::Parser::Plain, counts::Counts::new(3, 2, 0))]
        );
        let small = Output::read_all(&b"abc"[..]);
        assert_eq!(
            (small.head.as_slice(), small.tail.as_slice()),
            (&b"abc"[..], &b"abc"[..])
        );
    }

    #[test]
    fn tail_with_header_stays_within_the_limit() {
        let out = Output {
            total: 200_000,
            tail: vec![b'x'; 2 * OUTPUT_TAIL_MAX],
            ..Default::default()
        };
        let t = tail_with_header("# header\n", &out);
        assert!(t.starts_with("# header\n"));
        assert_eq!(t.len(), OUTPUT_TAIL_MAX);
    }

    #[test]
    fn contained_file_refuses_links_out_of_the_repository() {
        let d = tempfile::tempdir().expect("tmp");
        let repo = d.path().join("repo");
        fs::create_dir(&repo).expect("mkdir");
        fs::write(d.path().join("outside.xml"), "x").expect("w");
        fs::write(repo.join("in.xml"), "x").expect("w");
        std::os::unix::fs::symlink(d.path().join("outside.xml"), repo.join("link.xml"))
            .expect("link");
        assert!(contained_file(&repo, Path::new("in.xml")).is_ok());
        assert!(contained_file(&repo, Path::new("link.xml"))
            .expect_err("escape")
            .contains("outside"));
        assert!(contained_file(&repo, Path::new("../outside.xml")).is_err());
        assert!(contained_file(&repo, Path::new(".")).is_err());
    }
}
