//! From an input on disk (a job file or a bundle) to a verdict: intake's stages first, then the job it
//! accepted, in the fence, from intake's own copy; intake's refusals become `refused` verdicts.

use super::run::{run_job, RunOptions, AGENT_VERSION};
use attestation::verdict::{Finding, Inputs, Isolation, Verdict};
use std::fs;
use std::path::Path;

/// Runs intake stages 1-5 on `input` (a job file, or a bundle: a directory or a .tar/.tar.gz/.zip whose root
/// holds `job.toml`), executing nothing, then, when intake accepts, the job it loaded, in the fence, from
/// intake's own copy of the bundle. Intake's refusals come back as `refused` verdicts naming the stage, with
/// every finding; `Err` only when the input is unusable (missing, unreadable, not a bundle).
pub fn run_input(input: &Path, opts: &RunOptions) -> Result<Verdict, String> {
    let parent = crate::fence::rundir::runs_parent(&std::env::temp_dir())?;
    let verdict = run_input_under(input, opts, &parent);
    crate::fence::rundir::remove_parent_if_empty(&parent);
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
    let mut verdict = run_job(&job, &from_intake);
    verdict.findings.splice(0..0, findings);
    if let Err(e) = report.cleanup() {
        verdict.findings.push(Finding {
            stage: "teardown".into(),
            path: String::new(),
            kind: "left-on-host".into(),
            detail: format!("intake work directory: {e}"),
        });
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
