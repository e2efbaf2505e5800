//! What intake says about a bundle: one result per stage, the findings, and the options and limits it ran
//! with. Serialised as JSON by `fenced-run intake --json`; the verdict's `refusal` is `{stage, reason}` of the
//! first refusing stage.

use crate::job::Job;
use crate::normalise::Isolation;
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// The five intake stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stage {
    /// 1: size limits, input kind, repository URLs against the address policy.
    Receive,
    /// 2: unpack into a fresh directory under the archive rules.
    Unpack,
    /// 3: the job file loads; repository and patch are present.
    Structure,
    /// 4: resources within the tier's limits; environment deny list.
    Normalise,
    /// 5: job commands and repository install hooks scanned.
    Scan,
}

impl Stage {
    /// All stages in order.
    pub const ALL: [Stage; 5] = [
        Stage::Receive,
        Stage::Unpack,
        Stage::Structure,
        Stage::Normalise,
        Stage::Scan,
    ];

    /// The stage's name as used in verdicts (`receive`, `unpack`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Receive => "receive",
            Stage::Unpack => "unpack",
            Stage::Structure => "structure",
            Stage::Normalise => "normalise",
            Stage::Scan => "scan",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StageStatus {
    /// The stage found nothing that refuses the bundle.
    Passed,
    /// The stage refused the bundle.
    Refused,
    /// The stage did not run (an earlier one refused, or the input was unusable).
    NotRun,
}

/// How much a finding weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Severity {
    /// The reason a stage refused.
    Refusal,
    /// Recorded, not refused: the fence contains it (a repository hook fetching code, say).
    Contained,
    /// For information (something intake could not look into, an unusual but allowed setting).
    Note,
}

/// One thing a stage noticed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// The stage that found it.
    pub stage: Stage,
    /// Its weight.
    pub severity: Severity,
    /// Where: an archive member, a file of the repository (`path:line`), or a job key.
    pub location: String,
    /// What, in words.
    pub what: String,
}

impl Finding {
    /// A new finding.
    pub fn new(
        stage: Stage,
        severity: Severity,
        location: impl Into<String>,
        what: impl Into<String>,
    ) -> Finding {
        Finding {
            stage,
            severity,
            location: location.into(),
            what: what.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Refusal => "refused",
            Severity::Contained => "finding",
            Severity::Note => "note",
        };
        write!(
            f,
            "[{}] {sev}: {}: {}",
            self.stage, self.location, self.what
        )
    }
}

/// The result of one stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StageResult {
    /// Which stage.
    pub stage: Stage,
    /// How it ended.
    pub status: StageStatus,
    /// Everything it noticed (a refusing stage has at least one `Refusal`).
    pub findings: Vec<Finding>,
}

/// `{stage, reason}` of the refusing stage, as the verdict's `refusal` field carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Refusal {
    /// The stage that refused.
    pub stage: Stage,
    /// Why (its first refusal finding, with the location).
    pub reason: String,
}

/// Everything intake says about a bundle.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct IntakeReport {
    /// The input as given.
    pub input: PathBuf,
    /// Set when the input could not be used at all (missing, unreadable, not a bundle): exit 2.
    pub unusable: Option<String>,
    /// One entry per stage, in order.
    pub stages: Vec<StageResult>,
    /// The first refusal, if any.
    pub refusal: Option<Refusal>,
    /// Whether every stage passed.
    pub accepted: bool,
    /// The fresh directory intake made (holds `bundle/` and perhaps `repository/`); the caller removes it
    /// (see [`IntakeReport::cleanup`]). Removed already when intake refused.
    pub work_dir: Option<PathBuf>,
    /// The unpacked bundle root (holds `job.toml`), when unpacking succeeded.
    pub root: Option<PathBuf>,
    /// The repository as a directory (inside the bundle, or unpacked from its archive), when there is one.
    pub repository_dir: Option<PathBuf>,
    /// The loaded job, when stage 3 passed.
    pub job: Option<Job>,
    /// SHA-256 of the job file's bytes as intake read them (lowercase hex), when it read them, whether or not
    /// they loaded: a refused verdict names the job file by it.
    #[serde(skip)]
    pub job_sha256: Option<String>,
    /// The tier intake judged the job for (stage 4).
    #[serde(skip)]
    pub isolation: Isolation,
    /// The task, when the bundle is a task bundle and stage 5 ran (the job above is the one it runs as).
    pub task: Option<crate::task::Task>,
}

/// A bundle intake accepted: the one checked value every later step (the fence, the guest agent) takes, so
/// that nothing re-reads, re-parses or re-hashes what intake checked. It owns intake's work directory
/// (the unpacked tree and repository); [`AcceptedBundle::cleanup`] removes it.
#[derive(Debug)]
#[non_exhaustive]
pub struct AcceptedBundle {
    /// The job, loaded once from the job file in intake's copy (its `sha256` is the file's hash, its
    /// `base_dir` the copy's root, so a patch path resolves inside intake's copy).
    pub job: Job,
    /// The unpacked bundle root (a lone job file's own directory for `fenced-run run JOB.toml`).
    pub root: PathBuf,
    /// The repository as a directory in intake's copy (or a lone job file's directory tree copied), when
    /// there is one; `None` for a git bundle, which the fence reads itself.
    pub repository_dir: Option<PathBuf>,
    /// Every finding of every stage, in order (notes included).
    pub findings: Vec<Finding>,
    /// The tier intake judged the job for.
    pub isolation: Isolation,
    /// The task, for a task bundle (docs/task-bundle.md): its pristine tests and its build context live in
    /// intake's work directory too.
    pub task: Option<crate::task::Task>,
    /// Intake's work directory, removed by [`AcceptedBundle::cleanup`].
    work_dir: Option<PathBuf>,
}

impl AcceptedBundle {
    /// SHA-256 of the job file, lowercase hex (the verdict's `inputs.job_sha256`).
    pub fn job_sha256(&self) -> &str {
        &self.job.sha256
    }

    /// Intake's work directory, while it is there.
    pub fn work_dir(&self) -> Option<&Path> {
        self.work_dir.as_deref()
    }

    /// Removes intake's work directory (never following a symbolic link out of it).
    pub fn cleanup(&mut self) -> std::io::Result<()> {
        if let Some(dir) = self.work_dir.take() {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
        }
        Ok(())
    }
}

impl IntakeReport {
    /// Every finding of every stage, in order.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.stages.iter().flat_map(|s| s.findings.iter())
    }

    /// The accepted bundle when every stage passed (the report's job, root, repository and work directory
    /// move into it); the report itself, unchanged, otherwise.
    #[allow(clippy::result_large_err)]
    pub fn into_accepted(mut self) -> Result<AcceptedBundle, IntakeReport> {
        if !self.accepted || self.unusable.is_some() || self.job.is_none() || self.root.is_none() {
            return Err(self);
        }
        let (Some(job), Some(root)) = (self.job.take(), self.root.take()) else {
            return Err(self);
        };
        Ok(AcceptedBundle {
            findings: self.findings().cloned().collect(),
            job,
            root,
            repository_dir: self.repository_dir.take(),
            isolation: self.isolation,
            task: self.task.take(),
            work_dir: self.work_dir.take(),
        })
    }

    /// Removes the work directory (never following a symbolic link out of it).
    pub fn cleanup(&mut self) -> std::io::Result<()> {
        if let Some(dir) = self.work_dir.take() {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
        }
        Ok(())
    }
}

/// Limits on what intake accepts; every one is named in the refusal that exceeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct IntakeLimits {
    /// Largest bundle (archive file) accepted by stage 1, bytes. Default 256 MiB.
    pub max_bundle_bytes: u64,
    /// Largest total unpacked size, bytes (bundle and repository archive each). Default 2 GiB.
    pub max_unpacked_bytes: u64,
    /// Most members in an archive or files in a directory bundle. Default 50,000.
    pub max_entries: u64,
    /// Largest ratio of unpacked bytes to archive bytes for compressed archives. Default 100.
    pub max_ratio: u64,
    /// Unpacked bytes always allowed whatever the ratio (small bundles compress well). Default 8 MiB.
    pub ratio_slack_bytes: u64,
    /// Longest member path, bytes. Default 1024.
    pub max_path_bytes: usize,
    /// Longest single path component, bytes. Default 255.
    pub max_name_bytes: usize,
    /// Deepest member path, components. Default 64.
    pub max_depth: usize,
    /// Largest repository file stage 5 reads; larger files are noted and skipped. Default 1 MiB.
    pub max_scan_file_bytes: u64,
}

impl Default for IntakeLimits {
    fn default() -> Self {
        IntakeLimits {
            max_bundle_bytes: 256 << 20,
            max_unpacked_bytes: 2 << 30,
            max_entries: 50_000,
            max_ratio: 100,
            ratio_slack_bytes: 8 << 20,
            max_path_bytes: 1024,
            max_name_bytes: 255,
            max_depth: 64,
            max_scan_file_bytes: 1 << 20,
        }
    }
}
