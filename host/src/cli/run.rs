//! `fenced-run run JOB.toml|BUNDLE --isolation process`: intake stages 1-5, then the job in the fence (namespaces on this host),
//! print the verdict (`--json` for the contract form) and optionally write sim evidence for it.
//! Exit 0 whenever the run judged, 1 when it refused, 2 on unusable input.

use attestation::verdict::Verdict;
use guest::fence::run::{run_input, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `fenced-run run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The job: a job file (TOML, see docs/job-file.md) or a bundle (a directory, .tar, .tar.gz or .zip whose
    /// root holds `job.toml`). Intake stages 1-5 run on it before anything executes.
    pub job: PathBuf,
    /// The isolation tier: `process` (Linux namespaces on this host) or `vm` (a QEMU guest, docs/vm.md).
    #[arg(long, default_value = "process", value_name = "TIER")]
    pub isolation: String,
    /// The guest image of the `vm` tier (`fenced-run image build --out DIR`; default target/vm-image).
    #[arg(long, value_name = "DIR")]
    pub image: Option<PathBuf>,
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
    if args.isolation != "process" && args.isolation != "vm" {
        eprintln!(
            "fenced-run run: --isolation {}: only `process` and `vm` run from this command (sev-snp and tdx are not built yet)",
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
    if args.isolation == "vm" {
        return super::vm::run(&args, nonce);
    }
    // The report is requested before any untrusted code runs; the verdict is signed at the end.
    let session = match &args.evidence {
        Some(_) => match crate::sim::begin_process_session(&nonce) {
            Ok((s, _)) => Some(s),
            Err(e) => {
                eprintln!("fenced-run run: --evidence: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let opts = RunOptions::new(PathBuf::from("/proc/self/exe"), nonce);
    // Intake stages 1-5 first (nothing runs), then the fence on intake's own copy of the bundle.
    let verdict = match run_input(&args.job, &opts) {
        Ok(v) => v,
        Err(why) => {
            eprintln!("fenced-run run: {}: {why}", args.job.display());
            return ExitCode::from(2);
        }
    };
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

/// Prints a verdict as the summary or, with `json`, the contract form.
pub(crate) fn print_verdict(v: &Verdict, json: bool) {
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
