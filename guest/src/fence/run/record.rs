//! What the verdict records of a run besides its phases: the fence's own findings, the limits applied and
//! the changes to protected paths that were undone.

use super::{RunOptions, ToolchainRoot};
use crate::fence::protect::Change;
use attestation::verdict::{AppliedLimits, Finding, ProtectedRestore, RlimitValue, ToolchainPin};
use intake::job::Job;
use std::collections::BTreeMap;

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
