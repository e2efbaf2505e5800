//! Intake stages 1-5 (receive, unpack, structure, normalise, scan): refuse a bad bundle before a byte of
//! it runs. Nothing reachable from here spawns a process or loads code; `tests/no_exec.rs` walks this crate
//! and its dependency graph to keep it so. The job file's loader ([`job`]) and the address policy
//! ([`addr`]) are [`job_policy`]'s, re-exported; the accepted bundle ([`AcceptedBundle`]) is what every later
//! step takes.

pub mod job;
pub mod normalise;
pub mod operator;
pub mod receive;
pub mod report;
pub mod scan;
pub mod structure;
pub mod task;
pub mod unpack;

/// The address policy (in [`job_policy::addr`]), shared with the egress proxy.
pub use job_policy::addr;

pub use report::{
    AcceptedBundle, Finding, IntakeLimits, IntakeReport, Refusal, Severity, Stage, StageResult,
    StageStatus,
};

use normalise::{Isolation, RunnerPolicy, TierLimits};
use receive::{BundleKind, ReceiveError, Resolver, SystemResolver};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use unpack::{ArchiveFormat, OpenedArchive};

/// How to run intake.
#[derive(Clone)]
#[non_exhaustive]
pub struct IntakeOptions {
    /// Size, count and ratio limits.
    pub limits: IntakeLimits,
    /// The tier the job will run in (stage 4).
    pub isolation: Isolation,
    /// The tier's resource limits (default: [`TierLimits::for_tier`]).
    pub tier_limits: TierLimits,
    /// The operator's configuration and the runner's own limits (default: [`RunnerPolicy::probe`]).
    pub runner: RunnerPolicy,
    /// Where the fresh work directory is created (default: the system temporary directory).
    pub work_parent: PathBuf,
    /// Resolver for repository URLs (default: the system's).
    pub resolver: Arc<dyn Resolver>,
    /// Keep the work directory when intake refuses (for inspection); default false.
    pub keep_on_refusal: bool,
}

impl std::fmt::Debug for IntakeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntakeOptions")
            .field("limits", &self.limits)
            .field("isolation", &self.isolation)
            .field("tier_limits", &self.tier_limits)
            .field("runner", &self.runner)
            .field("work_parent", &self.work_parent)
            .field("keep_on_refusal", &self.keep_on_refusal)
            .finish_non_exhaustive()
    }
}

impl Default for IntakeOptions {
    fn default() -> Self {
        IntakeOptions::for_tier(Isolation::Process)
    }
}

impl IntakeOptions {
    /// Defaults for a tier.
    pub fn for_tier(isolation: Isolation) -> Self {
        IntakeOptions {
            limits: IntakeLimits::default(),
            isolation,
            tier_limits: TierLimits::for_tier(isolation),
            runner: RunnerPolicy::probe(),
            work_parent: std::env::temp_dir(),
            resolver: Arc::new(SystemResolver),
            keep_on_refusal: false,
        }
    }

    /// The same options with another work parent directory.
    pub fn with_work_parent(mut self, dir: impl Into<PathBuf>) -> Self {
        self.work_parent = dir.into();
        self
    }

    /// The same options with another resolver.
    pub fn with_resolver(mut self, r: Arc<dyn Resolver>) -> Self {
        self.resolver = r;
        self
    }

    /// The same options with another runner policy (operator configuration, home, runner limits).
    pub fn with_runner(mut self, runner: RunnerPolicy) -> Self {
        self.runner = runner;
        self
    }

    /// The same options with other limits.
    pub fn with_limits(mut self, limits: IntakeLimits) -> Self {
        self.limits = limits;
        self
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a directory that did not exist before (never reusing one: `mkdir` fails on an existing name).
fn fresh_dir(parent: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..64 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = parent.join(format!("fenced-run-intake-{nanos:x}-{n}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no fresh name")))
}

struct Run {
    report: IntakeReport,
}

impl Run {
    fn pass(&mut self, stage: Stage, findings: Vec<Finding>) {
        self.report.stages.push(StageResult {
            stage,
            status: StageStatus::Passed,
            findings,
        });
    }

    fn refuse(&mut self, stage: Stage, mut findings: Vec<Finding>, location: &str, reason: String) {
        if !findings.iter().any(|f| f.severity == Severity::Refusal) {
            findings.insert(0, Finding::new(stage, Severity::Refusal, location, reason));
        }
        let first = findings
            .iter()
            .find(|f| f.severity == Severity::Refusal)
            .map(|f| {
                if f.location.is_empty() {
                    f.what.clone()
                } else {
                    format!("{}: {}", f.location, f.what)
                }
            })
            .unwrap_or_default();
        self.report.refusal = Some(Refusal {
            stage,
            reason: first,
        });
        self.report.stages.push(StageResult {
            stage,
            status: StageStatus::Refused,
            findings,
        });
    }

    fn finish(mut self, opts: &IntakeOptions) -> IntakeReport {
        for s in Stage::ALL {
            if !self.report.stages.iter().any(|r| r.stage == s) {
                self.report.stages.push(StageResult {
                    stage: s,
                    status: StageStatus::NotRun,
                    findings: Vec::new(),
                });
            }
        }
        self.report.accepted = self.report.unusable.is_none()
            && self
                .report
                .stages
                .iter()
                .all(|s| s.status == StageStatus::Passed);
        if !self.report.accepted && !opts.keep_on_refusal {
            // Best effort: a failure to remove leaves `work_dir` set so the caller can see it.
            if self.report.cleanup().is_err() {
                return self.report;
            }
            self.report.root = None;
            self.report.repository_dir = None;
            self.report.task = None;
        }
        self.report
    }
}

/// The job file as intake read it once: its bytes' hash and what the loader made of them.
struct LoadedJob {
    /// SHA-256 of the bytes, lowercase hex.
    sha256: String,
    /// The bytes (kept to check a directory bundle's copy against them).
    bytes: Vec<u8>,
    /// The parsed job, or the loader's refusal.
    job: Result<job::Job, job::JobError>,
}

impl LoadedJob {
    /// Parses `bytes` once; `origin` is where the job file lies in intake's copy (relative paths resolve
    /// against its directory).
    fn parse(bytes: Vec<u8>, origin: &Path) -> LoadedJob {
        let job = job::Job::from_bytes(&bytes, origin);
        let sha256 = match &job {
            Ok(j) => j.sha256.clone(),
            Err(_) => {
                use sha2::Digest;
                hex::encode(sha2::Sha256::digest(&bytes))
            }
        };
        LoadedJob { sha256, bytes, job }
    }
}

/// The job file's name as messages show it (never the temporary directory it was unpacked into).
fn shown_name(job_path: &Path) -> String {
    job_path
        .file_name()
        .map_or_else(|| "job.toml".into(), |n| n.to_string_lossy().into_owned())
}

/// Reads the job file at `job_path` (a regular file, at most [`job::MAX_JOB_FILE_BYTES`]) as stage 3 would;
/// `Err` is stage 3's refusal.
fn read_job_file(job_path: &Path) -> Result<Vec<u8>, String> {
    let shown = shown_name(job_path);
    match std::fs::symlink_metadata(job_path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(format!("{shown} is not a regular file")),
        Err(_) => return Err(format!("the bundle root holds no {shown}")),
    }
    match unpack::read_limited(job_path, job::MAX_JOB_FILE_BYTES) {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(format!(
            "{shown}: the job file is larger than {} bytes",
            job::MAX_JOB_FILE_BYTES
        )),
        Err(e) => Err(format!("{shown}: cannot read the job file: {e}")),
    }
}

/// Unpacks the job's repository when it is an archive (or, with `copy_dirs`, copies it when it is a
/// directory) into `work/repository` under the stage 2 rules. `Ok(None)` when there is nothing to do (a
/// URL, a git bundle, a directory inside an unpacked bundle, or a job stage 3 will refuse anyway).
fn unpack_repository(
    job: &job::Job,
    root: &Path,
    work: &Path,
    limits: &IntakeLimits,
    copy_dirs: bool,
) -> Result<Option<(PathBuf, Finding)>, (String, String)> {
    if job.repository.url().is_some() {
        return Ok(None);
    }
    let Ok(full) = structure::inside(root, Path::new(&job.repository.path), "repository.path")
    else {
        return Ok(None);
    };
    let Ok(meta) = std::fs::symlink_metadata(&full) else {
        return Ok(None);
    };
    let dest = work.join("repository");
    let who = format!("repository {}", job.repository.path);
    let result = if meta.is_dir() && copy_dirs {
        unpack::copy_dir(&full, &dest, limits)
    } else if meta.is_file() {
        let bytes = match unpack::read_limited(&full, limits.max_bundle_bytes) {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Err((
                    who,
                    format!(
                        "repository archive is larger than max_bundle_bytes = {}",
                        limits.max_bundle_bytes
                    ),
                ))
            }
            Err(_) => return Ok(None),
        };
        let Some(fmt) = ArchiveFormat::detect(&bytes) else {
            return Ok(None);
        };
        let archive = OpenedArchive::open(&bytes, fmt, work, limits);
        archive.unpack(&dest)
    } else {
        return Ok(None);
    };
    match result.and_then(|s| unpack::verify_tree(&dest).map(|_| s)) {
        Ok(s) => Ok(Some((
            dest,
            Finding::new(
                Stage::Unpack,
                Severity::Note,
                who,
                format!(
                    "{} entries: {} files ({} bytes)",
                    s.entries, s.files, s.bytes
                ),
            ),
        ))),
        Err(e) => Err((format!("{who}: {}", e.member), e.reason)),
    }
}

/// Runs stages 1-5 on a bundle (a directory or a .tar/.tar.gz/.zip whose root holds `job.toml`), or on a
/// lone job file (`*.toml`, whose repository and patch must lie under its directory). Executes nothing.
/// The job file is read and parsed once, and an archive decompressed once. On acceptance the report holds
/// the unpacked root, the repository directory and the loaded job; [`IntakeReport::into_accepted`] turns it
/// into the [`AcceptedBundle`] every later step takes.
pub fn run_stages(input: &Path, opts: &IntakeOptions) -> IntakeReport {
    let mut run = Run {
        report: IntakeReport {
            input: input.to_path_buf(),
            unusable: None,
            stages: Vec::new(),
            refusal: None,
            accepted: false,
            work_dir: None,
            root: None,
            repository_dir: None,
            job: None,
            job_sha256: None,
            isolation: opts.isolation,
            task: None,
        },
    };
    let limits = &opts.limits;

    // 1 receive
    let received = match receive::receive(input, limits) {
        Ok(r) => r,
        Err(ReceiveError::Unusable(m)) => {
            run.report.unusable = Some(m);
            return run.finish(opts);
        }
        Err(ReceiveError::Refused(m)) => {
            run.refuse(Stage::Receive, Vec::new(), "bundle", m);
            return run.finish(opts);
        }
    };
    // The work directory is made now: a .tar.gz is inflated once, into it, for every later pass.
    let work = match fresh_dir(&opts.work_parent) {
        Ok(w) => w,
        Err(e) => {
            run.report.unusable = Some(format!(
                "cannot create a work directory under {}: {e}",
                opts.work_parent.display()
            ));
            return run.finish(opts);
        }
    };
    run.report.work_dir = Some(work.clone());
    let job_file = received.kind == BundleKind::JobFile;
    let root = if job_file {
        match input.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    } else {
        work.join("bundle")
    };
    let job_path = if job_file {
        input.to_path_buf()
    } else {
        root.join("job.toml")
    };
    let opened = match (&received.kind, &received.bytes) {
        (BundleKind::Archive(fmt), Some(bytes)) => {
            Some(OpenedArchive::open(bytes, *fmt, &work, limits))
        }
        _ => None,
    };
    let mut notes = Vec::new();
    // The job file, read and parsed here once when that is cheap; stage 3 judges what the loader said.
    let mut loaded = receive::peek_job(input, &received, opened.as_ref())
        .map(|bytes| LoadedJob::parse(bytes, &job_path));
    match &loaded {
        Some(l) => {
            run.report.job_sha256 = Some(l.sha256.clone());
            if let Ok(job) = &l.job {
                if let Some(Ok(url)) = job.repository.url() {
                    if let Err(why) = receive::check_repository_url(
                        &url,
                        opts.resolver.as_ref(),
                        &opts.runner.operator.egress.allow_networks,
                    ) {
                        run.refuse(
                            Stage::Receive,
                            Vec::new(),
                            "repository.url",
                            why.to_string(),
                        );
                        return run.finish(opts);
                    }
                }
            }
        }
        None => notes.push(Finding::new(
            Stage::Receive,
            Severity::Note,
            "job.toml",
            "not found cheaply in stage 1; the repository URL (if any) is checked in stage 3",
        )),
    }
    run.pass(Stage::Receive, notes);

    // 2 unpack
    let mut unpack_notes = if job_file {
        vec![Finding::new(
            Stage::Unpack,
            Severity::Note,
            "job file",
            format!(
                "a job file, not a bundle: what it names is taken from {} under the bundle rules",
                root.display()
            ),
        )]
    } else {
        let unpacked = match &opened {
            Some(archive) => archive.unpack(&root),
            None => unpack::copy_dir(input, &root, limits),
        };
        let summary = match unpacked.and_then(|s| unpack::verify_tree(&root).map(|_| s)) {
            Ok(s) => s,
            Err(e) => {
                run.refuse(Stage::Unpack, Vec::new(), &e.member, e.reason);
                return run.finish(opts);
            }
        };
        vec![Finding::new(
            Stage::Unpack,
            Severity::Note,
            "bundle",
            format!(
                "{} entries: {} files ({} bytes), {} symlinks, {} hard links",
                summary.entries, summary.files, summary.bytes, summary.symlinks, summary.hardlinks
            ),
        )]
    };
    run.report.root = Some(root.clone());
    // The archive's bytes (and its spool) are not needed again: free them before a repository archive is read.
    drop(opened);
    let copy_dirs = job_file;
    let kind = received.kind;
    drop(received);
    // The job file from intake's own copy: read there when stage 1 could not read it cheaply; a directory
    // bundle's copy must hold the very bytes stage 1 read (a file changed mid-intake is refused).
    let job_state: Result<LoadedJob, String> = match loaded.take() {
        Some(l) if kind == BundleKind::Directory => match read_job_file(&job_path) {
            Ok(copy) if copy == l.bytes => Ok(l),
            Ok(_) | Err(_) => {
                run.refuse(
                    Stage::Unpack,
                    Vec::new(),
                    "job.toml",
                    "changed while intake copied the bundle (the copy differs from what stage 1 read)"
                        .into(),
                );
                return run.finish(opts);
            }
        },
        Some(l) => Ok(l),
        None => read_job_file(&job_path).map(|b| {
            let l = LoadedJob::parse(b, &job_path);
            run.report.job_sha256 = Some(l.sha256.clone());
            l
        }),
    };
    // A repository shipped as an archive is unpacked, and a lone job file's repository directory copied,
    // under the same rules, into `repository/`.
    let repo_unpacked = match job_state.as_ref().map(|l| l.job.as_ref()) {
        Ok(Ok(job)) => match unpack_repository(job, &root, &work, limits, copy_dirs) {
            Ok(Some((dest, note))) => {
                unpack_notes.push(note);
                Some(dest)
            }
            Ok(None) => None,
            Err((location, reason)) => {
                run.refuse(Stage::Unpack, Vec::new(), &location, reason);
                return run.finish(opts);
            }
        },
        _ => None,
    };
    run.pass(Stage::Unpack, unpack_notes);
    if !copy_dirs && task::is_task_bundle(&root) {
        return task_stages(run, &root, &work, opts);
    }

    // 3 structure
    let job = match job_state.map(|l| l.job) {
        Ok(Ok(job)) => job,
        Ok(Err(e)) => {
            // Messages name the file by its own name, not the temporary directory it was unpacked into.
            let why =
                e.to_string()
                    .replacen(&job_path.display().to_string(), &shown_name(&job_path), 1);
            run.refuse(Stage::Structure, Vec::new(), "", why);
            return run.finish(opts);
        }
        Err(why) => {
            run.refuse(Stage::Structure, Vec::new(), "", why);
            return run.finish(opts);
        }
    };
    let st = match structure::structure_of(
        job,
        &root,
        repo_unpacked.as_deref(),
        opts.resolver.as_ref(),
        &opts.runner.operator.egress.allow_networks,
    ) {
        Ok(s) => s,
        Err(why) => {
            run.refuse(Stage::Structure, Vec::new(), "", why.to_string());
            return run.finish(opts);
        }
    };
    let job = st.job;
    run.report.repository_dir = st.repository_dir.clone();
    run.report.job = Some(job.clone());
    run.pass(Stage::Structure, st.notes);

    // 4 normalise
    let n = normalise::normalise_for_runner(&job, opts.isolation, &opts.tier_limits, &opts.runner);
    if n.iter().any(|f| f.severity == Severity::Refusal) {
        run.refuse(Stage::Normalise, n, "", String::new());
        return run.finish(opts);
    }
    run.pass(Stage::Normalise, n);

    // 5 scan
    let mut s = scan::scan_job(&job);
    let refused = !s.is_empty();
    if let Some(dir) = &st.repository_dir {
        s.extend(scan::scan_repository(dir, limits));
    }
    if refused {
        run.refuse(Stage::Scan, s, "", String::new());
    } else {
        run.pass(Stage::Scan, s);
    }
    run.finish(opts)
}

/// Stages 3-5 of a task bundle (`task.toml` at the root): the layout and `task.toml`, the resources against
/// the tier, the Dockerfile and the solution command (see [`task`]).
fn task_stages(mut run: Run, root: &Path, work: &Path, opts: &IntakeOptions) -> IntakeReport {
    let limits = &opts.limits;
    // 3 structure
    let (mut t, notes) = match task::structure(root, work, limits) {
        Ok(s) => s,
        Err(why) => {
            run.refuse(Stage::Structure, Vec::new(), "", why);
            return run.finish(opts);
        }
    };
    run.report.job_sha256 = Some(t.file.sha256.clone());
    let job = match t.to_job(root) {
        Ok(j) => j,
        Err(why) => {
            run.refuse(Stage::Structure, Vec::new(), "task.toml", why);
            return run.finish(opts);
        }
    };
    run.report.repository_dir = Some(t.work_tree.clone());
    run.report.job = Some(job.clone());
    run.pass(Stage::Structure, notes);

    // 4 normalise
    let n = task::normalise(&t, &job, opts.isolation, &opts.tier_limits, &opts.runner);
    if n.iter().any(|f| f.severity == Severity::Refusal) {
        run.refuse(Stage::Normalise, n, "", String::new());
        return run.finish(opts);
    }
    run.pass(Stage::Normalise, n);

    // 5 scan
    let s = task::scan(&mut t, root, &job, limits);
    run.report.task = Some(t);
    if s.iter().any(|f| f.severity == Severity::Refusal) {
        run.refuse(Stage::Scan, s, "", String::new());
    } else {
        run.pass(Stage::Scan, s);
    }
    run.finish(opts)
}
