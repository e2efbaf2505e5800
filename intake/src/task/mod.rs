//! Task bundles: the second kind of input beside a repository job. A bundle whose root holds `task.toml`
//! (with `instruction.md`, `tests/test.sh` and a `Dockerfile` or `environment/Dockerfile`) is checked here by
//! stages 3-5 and turned into the [`Job`] the fence runs: the solution in the first phase, then the bundle's
//! pristine `tests/test.sh` in a phase of its own (docs/task-bundle.md).

pub mod dockerfile;
pub mod file;

use crate::job::Job;
use crate::normalise::{self, Isolation, RunnerPolicy, TierLimits};
use crate::report::{Finding, IntakeLimits, Severity, Stage};
use dockerfile::BaseImage;
use file::TaskFile;
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

/// The task's declaration at the bundle root.
pub const TASK_FILE: &str = "task.toml";
/// What the task asks for, in words (for the agent; the runner only checks it is there).
pub const INSTRUCTION_FILE: &str = "instruction.md";
/// The task's verifier, run from the pristine copy in the test phase.
pub const TEST_SCRIPT: &str = "tests/test.sh";
/// The Dockerfile's places, in the order they are looked for when `task.toml` names none.
pub const DOCKERFILES: &[&str] = &["Dockerfile", "environment/Dockerfile"];
/// The optional directory of files the solution works on (the work tree's initial content).
pub const WORKSPACE_DIR: &str = "workspace";
/// The optional directory of the reference solution, copied into the work tree (never the tests).
pub const SOLUTION_DIR: &str = "solution";
/// Where the test phase shows the bundle's pristine `tests/`, read-only (the solution phase has no such path).
pub const SANDBOX_TESTS: &str = "/work/tests";

/// What stages 3-5 established about a task bundle; the runner builds its image (stage 6) from `context`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Task {
    /// The loaded `task.toml`.
    pub file: TaskFile,
    /// The Dockerfile, relative to the bundle root.
    pub dockerfile: PathBuf,
    /// The build context: the directory that holds the Dockerfile, in intake's copy of the bundle. When that is
    /// the bundle root, the runner leaves `tests/` and `solution/` out of the context it hands the builder.
    pub context: PathBuf,
    /// The base images the Dockerfile pins (stage 5).
    pub bases: Vec<BaseImage>,
    /// The bundle's `tests/` in intake's copy: the pristine tests the test phase runs.
    pub tests_dir: PathBuf,
    /// The work tree the solution phase gets (`workspace/` and `solution/`, never `tests/`), in intake's work
    /// directory.
    pub work_tree: PathBuf,
}

/// Whether the unpacked bundle at `root` is a task bundle: `task.toml` at its root and no `job.toml`.
pub fn is_task_bundle(root: &Path) -> bool {
    fs::symlink_metadata(root.join(TASK_FILE)).is_ok()
        && fs::symlink_metadata(root.join("job.toml")).is_err()
}

fn regular_file(root: &Path, rel: &str) -> bool {
    fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.is_file())
}

/// Stage 3 on a task bundle at `root`: every required file present (all that are missing named in one
/// refusal), `task.toml` loaded strictly, a named patch present, and the work tree assembled under `work`.
pub fn structure(
    root: &Path,
    work: &Path,
    limits: &IntakeLimits,
) -> Result<(Task, Vec<Finding>), String> {
    let mut missing: Vec<String> = Vec::new();
    for rel in [INSTRUCTION_FILE, TASK_FILE, TEST_SCRIPT] {
        if !regular_file(root, rel) {
            missing.push(format!("`{rel}`"));
        }
    }
    if fs::symlink_metadata(root.join("tests")).is_ok_and(|m| !m.is_dir()) {
        missing.push("`tests/` (a directory, not a link or a file)".into());
    }
    let loaded = if regular_file(root, TASK_FILE) {
        let bytes =
            crate::unpack::read_limited(&root.join(TASK_FILE), crate::job::MAX_JOB_FILE_BYTES)
                .map_err(|e| format!("{TASK_FILE}: {e}"))?
                .ok_or_else(|| {
                    format!(
                        "{TASK_FILE} is larger than {} bytes",
                        crate::job::MAX_JOB_FILE_BYTES
                    )
                })?;
        Some(TaskFile::from_bytes(&bytes, Path::new(TASK_FILE)).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let dockerfile = match loaded
        .as_ref()
        .and_then(|t| t.environment.dockerfile.clone())
    {
        Some(d) => {
            if !regular_file(root, &d.to_string_lossy()) {
                missing.push(format!(
                    "`{}` (named by environment.dockerfile)",
                    d.display()
                ));
            }
            Some(d)
        }
        None => match DOCKERFILES.iter().find(|d| regular_file(root, d)) {
            Some(d) => Some(PathBuf::from(d)),
            None => {
                missing.push("`Dockerfile` or `environment/Dockerfile`".into());
                None
            }
        },
    };
    if !missing.is_empty() {
        return Err(format!(
            "a task bundle (it has task.toml) needs {}; missing: {}",
            "instruction.md, task.toml, tests/test.sh and Dockerfile or environment/Dockerfile",
            missing.join(", ")
        ));
    }
    let (Some(file), Some(dockerfile)) = (loaded, dockerfile) else {
        return Err("task bundle: task.toml or the Dockerfile could not be read".into());
    };
    let df_full = crate::structure::inside(root, &dockerfile, "environment.dockerfile")
        .map_err(|e| e.to_string())?;
    let context = df_full
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.to_path_buf());
    if let Some(p) = &file.solution.patch {
        let full =
            crate::structure::inside(root, p, "solution.patch").map_err(|e| e.to_string())?;
        if !fs::symlink_metadata(&full).is_ok_and(|m| m.is_file()) {
            return Err(format!(
                "solution.patch = `{}` is not a regular file in the bundle",
                p.display()
            ));
        }
    }
    let mut notes = Vec::new();
    let work_tree = work.join("task-tree");
    let ws = root.join(WORKSPACE_DIR);
    match fs::symlink_metadata(&ws) {
        Ok(m) if m.is_dir() => {
            crate::unpack::copy_dir(&ws, &work_tree, limits)
                .map_err(|e| format!("{WORKSPACE_DIR}/{}: {}", e.member, e.reason))?;
        }
        Ok(_) => return Err(format!("`{WORKSPACE_DIR}` is not a directory")),
        Err(_) => {
            fs::create_dir(&work_tree).map_err(|e| format!("{}: {e}", work_tree.display()))?;
            notes.push(Finding::new(
                Stage::Structure,
                Severity::Note,
                WORKSPACE_DIR,
                "no workspace/: the solution starts from an empty work tree",
            ));
        }
    }
    let sol = root.join(SOLUTION_DIR);
    if fs::symlink_metadata(&sol).is_ok_and(|m| m.is_dir()) {
        let dest = work_tree.join(SOLUTION_DIR);
        if fs::symlink_metadata(&dest).is_ok() {
            return Err(format!(
                "`{WORKSPACE_DIR}/{SOLUTION_DIR}` collides with the bundle's `{SOLUTION_DIR}/`"
            ));
        }
        crate::unpack::copy_dir(&sol, &dest, limits)
            .map_err(|e| format!("{SOLUTION_DIR}/{}: {}", e.member, e.reason))?;
    }
    if fs::symlink_metadata(work_tree.join("tests")).is_ok() {
        notes.push(Finding::new(
            Stage::Structure,
            Severity::Note,
            "workspace/tests",
            format!(
                "the work tree has its own tests/; the test phase runs the bundle's tests/ from {SANDBOX_TESTS}"
            ),
        ));
    }
    Ok((
        Task {
            file,
            dockerfile,
            context,
            bases: Vec::new(),
            tests_dir: root.join("tests"),
            work_tree,
        },
        notes,
    ))
}

impl Task {
    /// The job the fence runs for this task: the solution command as the first phase (network only through
    /// `[solution] allow`), the patch applied before it, and `sh /work/tests/test.sh` as the test phase. It is
    /// written as a job file and loaded by the job loader, so it is checked like any job; its `sha256` is then
    /// set to `task.toml`'s.
    pub fn to_job(&self, bundle_root: &Path) -> Result<Job, String> {
        use toml::{Table, Value};
        let f = &self.file;
        let int = |v: u64| Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
        let mut doc = Table::new();
        let mut repo = Table::new();
        repo.insert("path".into(), Value::String(WORKSPACE_DIR.into()));
        if let Some(p) = &f.solution.patch {
            repo.insert(
                "patch".into(),
                Value::String(p.to_string_lossy().into_owned()),
            );
        }
        doc.insert("repository".into(), Value::Table(repo));
        if let Some(c) = &f.solution.command {
            let mut install = Table::new();
            install.insert("command".into(), Value::String(c.clone()));
            install.insert(
                "allow".into(),
                Value::Array(
                    f.solution
                        .allow
                        .iter()
                        .map(|a| Value::String(a.to_string()))
                        .collect(),
                ),
            );
            install.insert("timeout_seconds".into(), int(f.solution.timeout_seconds));
            doc.insert("install".into(), Value::Table(install));
        }
        let mut test = Table::new();
        test.insert(
            "command".into(),
            Value::String(format!("sh {SANDBOX_TESTS}/test.sh")),
        );
        test.insert("timeout_seconds".into(), int(f.test_timeout_seconds));
        doc.insert("test".into(), Value::Table(test));
        let mut limits = Table::new();
        limits.insert("memory_mib".into(), int(f.limits.memory_mib));
        limits.insert("pids".into(), int(f.limits.pids));
        limits.insert("disk_mib".into(), int(f.limits.disk_mib));
        limits.insert("open_files".into(), int(f.limits.open_files));
        doc.insert("limits".into(), Value::Table(limits));
        let text = toml::to_string(&doc).map_err(|e| format!("task.toml as a job: {e}"))?;
        let mut job = Job::from_toml_str(&text, &bundle_root.join(TASK_FILE))
            .map_err(|e| format!("task.toml as a job: {e}"))?;
        job.sha256 = f.sha256.clone();
        Ok(job)
    }
}

/// Stage 4 on a task: the job's resources against the tier (the solution phase is checked as the install
/// phase and named `solution.*`), and the build's budget and allowlist against the tier's install limits.
pub fn normalise(
    task: &Task,
    job: &Job,
    tier: Isolation,
    limits: &TierLimits,
    runner: &RunnerPolicy,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = normalise::normalise_for_runner(job, tier, limits, runner)
        .into_iter()
        .map(|mut f| {
            f.location = f.location.replace("install.", "solution.");
            f.what = f.what.replace("install.", "solution.");
            f
        })
        .collect();
    let env = &task.file.environment;
    if env.build_timeout_seconds > limits.install_timeout_seconds {
        out.push(Finding::new(
            Stage::Normalise,
            Severity::Refusal,
            "environment.build_timeout_seconds",
            format!(
                "environment.build_timeout_seconds = {} is above the {tier} tier's limit of {}",
                env.build_timeout_seconds, limits.install_timeout_seconds
            ),
        ));
    }
    if env.allow.len() > limits.allow_entries {
        out.push(Finding::new(
            Stage::Normalise,
            Severity::Refusal,
            "environment.allow",
            format!(
                "environment.allow lists {} entries; the {tier} tier's limit is {}",
                env.allow.len(),
                limits.allow_entries
            ),
        ));
    }
    out
}

/// Stage 5 on a task: the Dockerfile ([`dockerfile::scan`]), the solution command (as a job command: a hit
/// refuses), and the work tree's hooks (findings). Fills in the task's pinned base images.
pub fn scan(task: &mut Task, root: &Path, job: &Job, limits: &IntakeLimits) -> Vec<Finding> {
    let shown = task.dockerfile.display().to_string();
    let text =
        match crate::unpack::read_limited(&root.join(&task.dockerfile), limits.max_scan_file_bytes)
        {
            Ok(Some(b)) => String::from_utf8(b).map_err(|_| "is not UTF-8".to_owned()),
            Ok(None) => Err(format!(
                "is larger than max_scan_file_bytes = {}",
                limits.max_scan_file_bytes
            )),
            Err(e) => Err(e.to_string()),
        };
    let mut out = match text {
        Ok(t) => {
            let s = dockerfile::scan(&t, &shown, &task.file.environment.allow);
            task.bases = s.bases;
            s.findings
        }
        Err(e) => vec![Finding::new(Stage::Scan, Severity::Refusal, shown, e)],
    };
    out.extend(crate::scan::scan_job(job).into_iter().map(|mut f| {
        f.location = f.location.replace("install.", "solution.");
        f
    }));
    out.extend(crate::scan::scan_repository(&task.work_tree, limits));
    out.sort_by_key(|f| f.severity != Severity::Refusal);
    out
}
