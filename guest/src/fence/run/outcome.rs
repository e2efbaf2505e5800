//! The test phase's outcome: the counts read from its output (or the repository's JUnit file, only when it
//! is a regular file inside the repository copy) and the classification into one named outcome.

use super::phase::PhaseRun;
use super::record::finding;
use crate::fence::{classify, counts};
use attestation::verdict::{TestCounts, Verdict};
use intake::job::Job;
use std::fs;
use std::path::{Path, PathBuf};

/// Reads the counts of the test phase `run` and sets `verdict`'s counts, findings and outcome.
pub(super) fn record_test_outcome(
    verdict: &mut Verdict,
    job: &Job,
    repo_dir: &Path,
    run: &PhaseRun,
) {
    // The report file is the repository's: resolve it (symbolic links included) and read it only when it is
    // a regular file inside the repository copy, never a host file a link points to.
    let junit = match &job.test.junit {
        None => Ok(None),
        Some(j) => contained_file(repo_dir, j).map(Some),
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

#[cfg(test)]
mod tests {
    use super::*;

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
