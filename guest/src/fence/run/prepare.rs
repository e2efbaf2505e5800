//! Before any phase: the repository copied into the run directory at the pinned commit with the patch
//! applied, the protected paths kept aside and what the patch did to them undone (or refused), the test
//! command chosen.

use super::record::restored;
use crate::fence::protect::Protected;
use crate::fence::repo;
use crate::fence::rundir::RunDir;
use crate::fence::test_time;
use attestation::verdict::{Finding, Inputs, ProtectedRestore};
use intake::job::{Job, OnProtectedChange};
use std::path::{Path, PathBuf};

/// The repository ready for the install phase.
pub(super) struct Prepared {
    /// The repository copy the sandbox sees read-write.
    pub repo_dir: PathBuf,
    /// What preparing the repository found (commit, tree, patch hash, notes).
    pub repo: repo::Prepared,
    /// The protected paths as received, when the job protects any.
    pub protected: Option<Protected>,
    /// The patch's changes to protected paths that were undone.
    pub undone: Vec<ProtectedRestore>,
    /// The test phase's command and where it came from (`job` or what detected it).
    pub test_command: (String, String),
}

/// Why the run stops before its first phase: the verdict's refusal stage and reason.
pub(super) struct Refusal {
    pub stage: String,
    pub reason: String,
}

impl Refusal {
    fn new(stage: &str, reason: impl Into<String>) -> Refusal {
        Refusal {
            stage: stage.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Prepares the repository of `job` in `dir`, recording its commit, tree, patch hash and protected globs in
/// `inputs`. `repository` is where intake left it as a directory (`None`: the job's own `repository.path`);
/// `fetched` is where the fetch phase wrote a `repository.url` job's repository (read as data).
pub(super) fn prepare(
    job: &Job,
    repository: Option<&Path>,
    fetched: Option<&Path>,
    dir: &RunDir,
    inputs: &mut Inputs,
) -> Result<Prepared, Refusal> {
    let source = repository
        .map(Path::to_path_buf)
        .unwrap_or_else(|| job.resolve(Path::new(&job.repository.path)));
    let patch = job.repository.patch.as_ref().map(|p| job.resolve(p));
    let repo_dir = dir.fs.join("repo");
    // The protected paths as received are kept beside the repository, in the run directory the sandbox never
    // sees.
    let store = dir.fs.join("protected");
    inputs.protect = job.test.protect.clone();
    let protect = Some((&job.test.protect[..], store.as_path()));
    let done = match (fetched, job.repository.commit.as_deref()) {
        (Some(f), Some(pin)) => repo::prepare_fetched(f, &repo_dir, pin, patch.as_deref(), protect),
        _ => repo::prepare_protected(
            &source,
            &repo_dir,
            job.repository.commit.as_deref(),
            patch.as_deref(),
            protect,
        ),
    };
    let (prepared, protected) = match done {
        Ok(p) => p,
        Err(e) => return Err(Refusal::new(e.stage(), e.to_string())),
    };
    inputs.commit = prepared.commit.clone();
    inputs.tree = Some(prepared.tree.clone());
    inputs.patch_sha256 = prepared.patch_sha256.clone();
    let mut undone = Vec::new();
    if let Some(p) = &protected {
        let changed = match p.changes(&repo_dir) {
            Ok(c) => c,
            Err(e) => return Err(Refusal::new("protect", e.to_string())),
        };
        if !changed.is_empty() && job.test.on_protected_change == OnProtectedChange::Refuse {
            let list: Vec<String> = changed
                .iter()
                .map(|c| format!("{} ({})", c.path_text(), c.kind.name()))
                .collect();
            return Err(Refusal::new(
                "patch",
                format!(
                    "the patch changes {} protected path(s) and the job says on_protected_change = \"refuse\": {}",
                    changed.len(),
                    list.join(", ")
                ),
            ));
        }
        match p.restore(&repo_dir, None) {
            Ok(c) => undone.extend(c.into_iter().map(|c| restored(c, "patch"))),
            Err(e) => return Err(Refusal::new("protect", e.to_string())),
        }
    }

    let (test_command, test_source) = match &job.test.command {
        Some(c) => (c.clone(), "job".to_owned()),
        None => match repo::detect_test_command(&repo_dir) {
            Some(found) => found,
            None => {
                return Err(Refusal::new(
                    "test",
                    "no [test] command in the job and none detected (Cargo.toml, package.json scripts.test, go.mod, \
                     pyproject.toml/pytest.ini/setup.cfg, Makefile test target, tests/test.sh)",
                ))
            }
        },
    };
    Ok(Prepared {
        repo_dir,
        repo: prepared,
        protected,
        undone,
        test_command: (test_command, test_source),
    })
}

/// The `runs-at-test-time` findings (stage `patch`): the files the job's patch adds or changes that run
/// around the tests ([`test_time`]), read in the prepared repository, leaving out the protected paths whose
/// change was undone.
pub(super) fn test_time_findings(
    job: &Job,
    repo_dir: &Path,
    test_command: &str,
    undone: &[ProtectedRestore],
) -> Vec<Finding> {
    let Some(patch) = job.repository.patch.as_ref().map(|p| job.resolve(p)) else {
        return Vec::new();
    };
    // prepare() read and applied this same file; it is the job's own input, never the repository's.
    let Ok(bytes) = std::fs::read(&patch) else {
        return Vec::new();
    };
    let skip: Vec<&str> = undone.iter().map(|u| u.path.as_str()).collect();
    test_time::findings(repo_dir, &bytes, test_command, &skip)
        .into_iter()
        .map(|(path, detail)| Finding {
            stage: "patch".into(),
            path,
            kind: test_time::KIND.into(),
            detail,
        })
        .collect()
}
