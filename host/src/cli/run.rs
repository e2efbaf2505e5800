//! `fenced-run run JOB.toml --isolation process`: load the job, run it in the fence (namespaces on this host),
//! print the verdict (`--json` for the contract form) and optionally write sim evidence for it.
//! Exit 0 whenever the run judged, 1 when it refused, 2 on unusable input.

use attestation::verdict::Verdict;
use guest::fence::run::{run_job, RunOptions};
use intake::job::{Job, JobError};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `fenced-run run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The job file (TOML, see docs/job-file.md).
    pub job: PathBuf,
    /// The isolation tier; only `process` (Linux namespaces on this host) runs from this command.
    #[arg(long, default_value = "process", value_name = "TIER")]
    pub isolation: String,
    /// Print the verdict as JSON (the contract form) instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Write evidence for the run (sim attestation for the process tier) to this file.
    #[arg(long, value_name = "OUT")]
    pub evidence: Option<PathBuf>,
    /// The founder's nonce, hex (random when absent).
    #[arg(long, value_name = "HEX")]
    pub nonce: Option<String>,
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    if args.isolation != "process" {
        eprintln!(
            "fenced-run run: --isolation {}: only `process` runs from this command (vm, sev-snp and tdx launch a guest)",
            args.isolation
        );
        return ExitCode::from(2);
    }
    let nonce = match &args.nonce {
        Some(h) => match hex::decode(h.trim()) {
            Ok(n) if !n.is_empty() && n.len() <= 64 => n,
            Ok(n) => {
                eprintln!(
                    "fenced-run run: --nonce: {} bytes; expected 1 to 64",
                    n.len()
                );
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("fenced-run run: --nonce: not hex: {e}");
                return ExitCode::from(2);
            }
        },
        None => guest::fence::run::random_nonce(),
    };
    let job = match Job::load(&args.job) {
        Ok(j) => j,
        Err(e @ JobError::Invalid { .. }) => {
            // A value the policy refuses (denied environment name, credential path): a refusal, with a verdict.
            let mut v = Verdict::refused(
                "job",
                &e.to_string(),
                attestation::verdict::Isolation::Process,
                attestation::verdict::Inputs {
                    commit: None,
                    tree: None,
                    patch_sha256: None,
                    job_sha256: std::fs::read(&args.job).ok().map(|b| {
                        use sha2::Digest;
                        hex::encode(sha2::Sha256::digest(b))
                    }),
                    nonce: nonce.clone(),
                },
                guest::fence::run::AGENT_VERSION,
            );
            v.limits = Default::default();
            print_verdict(&v, args.json);
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("fenced-run run: {e}");
            return ExitCode::from(2);
        }
    };
    // The report is requested before any untrusted code runs; the verdict is signed at the end.
    let session = match &args.evidence {
        Some(_) => match begin_sim_session(&nonce) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("fenced-run run: --evidence: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let mut opts = RunOptions::new(PathBuf::from("/proc/self/exe"), nonce);
    opts.intake_input = Some(args.job.clone());
    let verdict = run_job(&job, &opts);
    print_verdict(&verdict, args.json);
    if let (Some(session), Some(out)) = (session, &args.evidence) {
        let written = session
            .seal(&verdict)
            .map_err(|e| e.to_string())
            .and_then(|ev| ev.to_cbor().map_err(|e| e.to_string()))
            .and_then(|bytes| {
                std::fs::write(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
            });
        if let Err(e) = written {
            eprintln!("fenced-run run: --evidence: {e}");
            return ExitCode::from(2);
        }
    }
    if verdict.judged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_verdict(v: &Verdict, json: bool) {
    if json {
        println!("{}", v.to_json_pretty());
        return;
    }
    println!("outcome: {}", v.outcome.as_str());
    if let Some(r) = &v.refusal {
        println!("refused at {}: {}", r.stage, r.reason);
    }
    if let Some(t) = &v.test {
        println!(
            "test: {} ({}), exit {:?}, signal {:?}, {} ms, network none",
            t.command, t.source, t.exit_code, t.signal, t.duration_ms
        );
    }
    if let Some(c) = &v.tests {
        println!(
            "counts: {} passed, {} failed, {} skipped ({})",
            c.passed, c.failed, c.skipped, c.parser
        );
    }
    println!(
        "processes: {} started, {} running at end, {} left after teardown",
        v.processes.started, v.processes.running_at_end, v.processes.left_after_teardown
    );
    for f in &v.findings {
        println!("finding [{}] {}: {}", f.stage, f.kind, f.detail);
    }
}

/// Opens the sim PSP (SEV-SNP, Milan) and begins an attestation session for the process tier; its launch
/// measurement is the sim stand-in computed from this executable.
fn begin_sim_session(nonce: &[u8]) -> Result<attestation::session::Session, String> {
    use attestation::sim::{current_process_launch_measurement, SimPsp, SimSnpTee};
    let psp = SimPsp::open_default(attestation::snp::Product::Milan).map_err(|e| e.to_string())?;
    let measurement = current_process_launch_measurement().map_err(|e| e.to_string())?;
    let tee = SimSnpTee::new(psp, measurement);
    attestation::session::Session::begin(&tee, nonce).map_err(|e| e.to_string())
}
