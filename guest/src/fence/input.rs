//! From an input on disk (a job file or a bundle) to a verdict: intake's stages first, then the bundle it
//! accepted ([`intake::AcceptedBundle`]: the job it parsed, its copy of the tree) in the fence, read from
//! intake's copy and never re-read, re-parsed or re-hashed; intake's refusals become `refused` verdicts.

use super::run::{run_fenced, RunOptions, AGENT_VERSION};
use attestation::verdict::{Finding, Inputs, Verdict};
use intake::AcceptedBundle;
use std::path::Path;

/// Why an input could not be run at all (intake's refusals are verdicts, not errors).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The input is unusable: missing, unreadable, not a bundle nor a job file (intake's own words).
    #[error("{0}")]
    Unusable(String),
    /// The runs' parent directory, where intake's work directory goes, cannot be used.
    #[error(transparent)]
    RunsDir(#[from] crate::fence::rundir::RunsDirError),
    /// Intake's work directory could not be created.
    #[error("cannot create intake's work directory: {0}")]
    WorkDir(std::io::Error),
}

/// Runs intake stages 1-5 on `input` (a job file, or a bundle: a directory or a .tar/.tar.gz/.zip whose root
/// holds `job.toml`), executing nothing, then, when intake accepts, the bundle it accepted in the fence
/// ([`run_accepted`]). Intake's refusals come back as `refused` verdicts naming the stage, with every
/// finding; `Err` only when the input is unusable (missing, unreadable, not a bundle).
pub fn run_input(input: &Path, opts: &RunOptions) -> Result<Verdict, InputError> {
    opts.phase_starts("intake");
    let parent = crate::fence::rundir::runs_parent(&std::env::temp_dir())?;
    let verdict = run_input_under(input, opts, &parent);
    crate::fence::rundir::remove_parent_if_empty(&parent);
    verdict
}

/// Runs a bundle intake accepted in the fence: the job intake parsed (its hash is the verdict's
/// `inputs.job_sha256`), the repository from intake's copy. Intake's findings other than notes open the
/// verdict's findings. The caller removes intake's work directory ([`AcceptedBundle::cleanup`]).
pub fn run_accepted(bundle: &AcceptedBundle, opts: &RunOptions) -> Verdict {
    // A task bundle's pristine tests (intake's copy) are what its test phase runs; a job has none.
    let mut opts = opts.clone();
    opts.tests_dir = bundle.task.as_ref().map(|t| t.tests_dir.clone());
    let mut verdict = run_fenced(&bundle.job, bundle.repository_dir.as_deref(), &opts);
    verdict
        .findings
        .splice(0..0, verdict_findings(&bundle.findings));
    verdict
}

/// Intake's findings as the verdict records them (notes left out): a bundle's from intake, a fetched
/// repository's from the fence's own stage-5 scan ([`crate::fence::repo::judge_fetched`]).
pub(crate) fn verdict_findings<'a>(
    findings: impl IntoIterator<Item = &'a intake::Finding>,
) -> Vec<Finding> {
    findings
        .into_iter()
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
        .collect()
}

/// [`run_input`] with intake's work directory under `parent` (the runs' own parent directory).
fn run_input_under(input: &Path, opts: &RunOptions, parent: &Path) -> Result<Verdict, InputError> {
    // Named like the run directories (`fenced-run-<pid>-...`) and beside them, so that if this runner is
    // killed mid-run the next run sweeps intake's copy too.
    let work = tempfile::Builder::new()
        .prefix(&format!("fenced-run-{}-intake-", std::process::id()))
        .tempdir_in(parent)
        .map_err(InputError::WorkDir)?;
    let runner =
        intake::normalise::RunnerPolicy::with_operator(opts.operator.clone(), opts.home.clone());
    let mut intake_opts = intake::IntakeOptions::for_tier(opts.isolation)
        .with_work_parent(work.path())
        .with_runner(runner);
    if opts.isolation != attestation::verdict::Isolation::Process {
        // In a guest, names are resolved by the host dialer, which checks every answer against the address
        // policy (with the operator's allow_networks) when the fetch connects.
        intake_opts = intake_opts.with_resolver(std::sync::Arc::new(intake::receive::AtConnect));
    }
    let report = intake::run_stages(input, &intake_opts);
    let mut bundle = match report.into_accepted() {
        Ok(b) => b,
        Err(mut report) => {
            if let Some(why) = report.unusable.clone() {
                let _ = report.cleanup();
                return Err(InputError::Unusable(why));
            }
            let (stage, reason) = match &report.refusal {
                Some(r) => (r.stage.name().to_owned(), r.reason.clone()),
                None => (
                    "intake".to_owned(),
                    "intake did not accept the job".to_owned(),
                ),
            };
            let _ = report.cleanup();
            opts.record(attestation::transcript::Event::Intake {
                accepted: false,
                job_sha256: report.job_sha256.clone(),
                detail: format!("{stage}: {reason}"),
            });
            let inputs = Inputs {
                commit: None,
                tree: None,
                patch_sha256: None,
                // The hash of the job file's bytes as intake read them (when it read them at all).
                job_sha256: report.job_sha256.clone(),
                nonce: opts.nonce.clone(),
                protect: Vec::new(),
                test_tree: None,
            };
            let mut v = Verdict::refused(&stage, &reason, opts.isolation, inputs, AGENT_VERSION);
            v.findings = verdict_findings(report.findings());
            return Ok(v);
        }
    };
    opts.record(attestation::transcript::Event::Intake {
        accepted: true,
        job_sha256: Some(bundle.job.sha256.clone()),
        detail: String::new(),
    });
    let mut verdict = run_accepted(&bundle, opts);
    if let Err(e) = bundle.cleanup() {
        verdict.findings.push(Finding {
            stage: "teardown".into(),
            path: String::new(),
            kind: "left-on-host".into(),
            detail: format!("intake work directory: {e}"),
        });
    }
    Ok(verdict)
}
