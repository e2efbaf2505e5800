//! What the verdict records of a run besides its phases: the fence's own findings, the limits applied and
//! the changes to protected paths that were undone.

use super::{RunOptions, ToolchainRoot};
use crate::fence::protect::{Change, Protected};
use attestation::verdict::{
    AppliedLimits, Finding, Outcome, ProtectedRestore, Refusal, RlimitValue, ToolchainPin, Verdict,
};
use intake::job::Job;
use std::collections::BTreeMap;
use std::path::Path;

/// The most changed paths a refusal after the test phase names (the rest are counted).
const MAX_NAMED_CHANGES: usize = 32;

/// A finding of the fence (no path).
pub(super) fn finding(stage: &str, kind: &str, detail: impl Into<String>) -> Finding {
    Finding {
        stage: stage.into(),
        path: String::new(),
        kind: kind.into(),
        detail: detail.into(),
    }
}

/// The limits the verdict records as applied.
pub(super) fn applied_limits(job: &Job) -> AppliedLimits {
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

/// The verdict's record of one change to a protected path that the fence undid.
pub(super) fn restored(c: Change, by: &str) -> ProtectedRestore {
    ProtectedRestore {
        path: c.path_text(),
        change: c.kind.name().to_owned(),
        by: by.to_owned(),
    }
}

/// The repository's toolchain pins judged against the versions of the toolchain image the job runs on (each
/// `unknown` when it runs on none): crate::fence::toolchain_pins.
pub(super) fn toolchain_pins(
    job: &Job,
    opts: &RunOptions,
    repo_dir: &std::path::Path,
) -> Vec<ToolchainPin> {
    use crate::fence::toolchain_pins::{image_versions, read_pins};
    let image = ToolchainRoot::for_job(opts.toolchains.as_ref(), job)
        .ok()
        .flatten()
        .map(|t| image_versions(&t.dir));
    read_pins(repo_dir, image.as_ref())
}

/// After the test phase: hashes the protected paths of `repo` again and records that tree as
/// `inputs.test_tree`; any difference from the paths as received (which were in place, read-only, for the
/// whole phase) makes the verdict `refused` at stage `test`, naming the paths, whatever the tests said.
/// `scratch` is a path this may create to hash what changed; it is removed before returning.
pub(super) fn check_after_test(
    verdict: &mut Verdict,
    protected: &Protected,
    repo: &Path,
    scratch: &Path,
) {
    let after = protected.after_test(repo, scratch);
    let _ = std::fs::remove_dir_all(scratch);
    let reason = match after {
        Ok(a) => {
            verdict.inputs.test_tree = Some(a.tree);
            if a.changes.is_empty() {
                return;
            }
            let mut named: Vec<String> = a
                .changes
                .iter()
                .take(MAX_NAMED_CHANGES)
                .map(|c| format!("{} ({})", c.path_text(), c.kind.name()))
                .collect();
            if a.changes.len() > MAX_NAMED_CHANGES {
                named.push(format!("and {} more", a.changes.len() - MAX_NAMED_CHANGES));
            }
            format!(
                "{} protected path(s) differ after the test phase from what it started with: {}",
                a.changes.len(),
                named.join(", ")
            )
        }
        Err(e) => {
            verdict.inputs.test_tree = None;
            format!("the protected paths could not be read after the test phase: {e}")
        }
    };
    verdict.set_outcome(Outcome::Refused);
    verdict.refusal = Some(Refusal {
        stage: "test".into(),
        reason,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use attestation::verdict::{Inputs, Isolation};
    use std::fs;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, Protected, Verdict) {
        let t = tempfile::tempdir().expect("tempdir");
        let repo = t.path().join("repo");
        fs::create_dir_all(repo.join("tests")).expect("mkdir");
        fs::write(repo.join("tests/test.sh"), "exit 1\n").expect("write");
        fs::write(repo.join("main.sh"), "true\n").expect("write");
        let p = Protected::snapshot(&repo, &["tests/**".into()], &t.path().join("store"))
            .expect("snapshot");
        let mut v = Verdict::new(
            Outcome::TestsPassed,
            Isolation::Process,
            Inputs::default(),
            "test",
        );
        v.inputs.test_tree = Some(p.tree().expect("tree"));
        (t, repo, p, v)
    }

    #[test]
    fn an_unchanged_tree_keeps_the_outcome_and_the_tree() {
        let (t, repo, p, mut v) = setup();
        fs::write(repo.join("main.sh"), "changed, not protected\n").expect("write");
        let pristine = p.tree().expect("tree");
        check_after_test(&mut v, &p, &repo, &t.path().join("after"));
        assert_eq!(v.outcome, Outcome::TestsPassed);
        assert_eq!(v.inputs.test_tree.as_deref(), Some(pristine.as_str()));
        assert!(v.refusal.is_none());
        v.check_consistency().expect("consistent");
    }

    #[test]
    fn a_protected_file_changed_during_the_phase_refuses_at_stage_test_naming_it() {
        let (t, repo, p, mut v) = setup();
        let pristine = p.tree().expect("tree");
        fs::write(repo.join("tests/test.sh"), "exit 0\n").expect("write");
        fs::write(repo.join("tests/new.sh"), "new\n").expect("write");
        check_after_test(&mut v, &p, &repo, &t.path().join("after"));
        assert_eq!(v.outcome, Outcome::Refused);
        let r = v.refusal.clone().expect("refusal");
        assert_eq!(r.stage, "test");
        assert!(
            r.reason.contains("tests/test.sh (modified)")
                && r.reason.contains("tests/new.sh (added)"),
            "{}",
            r.reason
        );
        let after = v.inputs.test_tree.clone().expect("tree after");
        assert_ne!(after, pristine, "the tree of what was there at the end");
        // It is the git tree of exactly what was there.
        let only = t.path().join("only");
        fs::create_dir_all(only.join("tests")).expect("mkdir");
        fs::write(only.join("tests/test.sh"), "exit 0\n").expect("write");
        fs::write(only.join("tests/new.sh"), "new\n").expect("write");
        let direct = crate::fence::gitdir::tree_hash(&only)
            .expect("tree")
            .to_string();
        assert_eq!(after, direct);
        assert!(!t.path().join("after").exists(), "scratch removed");
        v.check_consistency().expect("consistent");
    }
}
