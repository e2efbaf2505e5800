//! `fenced-run run JOB.toml|BUNDLE --isolation process`: intake stages 1-5, then the job in the fence (namespaces on this host),
//! print the verdict (`--json` for the contract form) and optionally write sim evidence for it.
//! Exit 0 whenever the run judged, 1 when it refused, 2 on unusable input.

use attestation::text::{escape, shown};
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
    /// The isolation tier: `process` (Linux namespaces on this host), `vm` (a QEMU guest, docs/vm.md),
    /// `sev-snp` or `tdx` (a confidential guest; checked against this host first, see `fenced-run doctor`), or
    /// `auto` (the best this host offers: sev-snp, tdx, vm, process).
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
    /// The founder's nonce, hex, 16 to 64 bytes (random when absent); checked with or without --evidence.
    #[arg(long, value_name = "HEX")]
    pub nonce: Option<String>,
    /// The operator's configuration (TOML, see docs/job-file.md): the environment names a job may pass
    /// through and the host paths it may read. Without it: TERM LANG LC_* TZ CI, and no read path.
    #[arg(long, value_name = "FILE")]
    pub operator_config: Option<PathBuf>,
    /// Progress of a `vm` run on stderr: `auto` (a spinner on a terminal), `json` (one JSON object per line per
    /// step) or `none`.
    #[arg(long, default_value = "auto", value_name = "MODE")]
    pub progress: String,
    /// Tests only: the vm tier's host dialer sends this allowlisted NAME:PORT to a loopback ADDRESS:PORT
    /// instead of resolving it (everything else is still resolved and checked). Repeatable.
    #[arg(long, value_name = "NAME:PORT=ADDR:PORT", hide = true)]
    pub test_dialer_map: Vec<String>,
    /// After the run, verify the evidence written with --evidence and serve it on loopback (`fenced-run view`).
    #[arg(long, requires = "evidence")]
    pub view: bool,
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    // sev-snp and tdx are checked against this host before anything runs; auto picks and says why.
    let image = args.image.clone().unwrap_or_else(super::vm::default_image);
    let tier = match crate::vm::confidential::resolve_for_run(&args.isolation, &image) {
        Ok(c) => {
            if args.isolation == "auto" {
                eprintln!("fenced-run run: {}", escape(&c.why));
            }
            c.tier
        }
        Err(e) => {
            eprintln!("fenced-run run: {e}");
            return ExitCode::from(2);
        }
    };
    let operator = match super::operator_policy(args.operator_config.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fenced-run run: {e}");
            return ExitCode::from(2);
        }
    };
    let nonce = match &args.nonce {
        Some(h) => match super::parse_nonce(h) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("fenced-run run: --nonce: {}", shown(&e));
                return ExitCode::from(2);
            }
        },
        None => guest::fence::run::random_nonce(),
    };
    if tier != crate::vm::confidential::Tier::Process {
        let code = super::vm::run(&args, nonce.clone(), tier);
        return match (&args.evidence, args.view && code != ExitCode::from(2)) {
            (Some(out), true) => super::view::after_run_file(out, &nonce, false)
                .err()
                .unwrap_or(code),
            _ => code,
        };
    }
    // The report is requested before any untrusted code runs; the verdict is signed at the end.
    let session = match &args.evidence {
        Some(_) => match crate::sim::begin_process_session(&nonce) {
            Ok((s, _)) => Some(s),
            Err(e) => {
                eprintln!("fenced-run run: --evidence: {}", shown(e));
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let mut opts = RunOptions::new(PathBuf::from("/proc/self/exe"), nonce);
    opts.operator = operator;
    // Intake stages 1-5 first (nothing runs), then the fence on intake's own copy of the bundle.
    let verdict = match run_input(&args.job, &opts) {
        Ok(v) => v,
        Err(why) => {
            eprintln!(
                "fenced-run run: {}: {}",
                shown(args.job.display()),
                escape(&why)
            );
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
            eprintln!("fenced-run run: --evidence: {}", escape(&e));
            return ExitCode::from(2);
        }
    }
    if let (true, Some(out)) = (args.view, &args.evidence) {
        if let Err(code) = super::view::after_run_file(out, &verdict.inputs.nonce, true) {
            return code;
        }
    }
    if verdict.judged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Lines of the test phase's output tail the summary shows.
pub const SUMMARY_TAIL_LINES: usize = 20;

/// Prints a verdict as the summary or, with `json`, the contract form.
pub(crate) fn print_verdict(v: &Verdict, json: bool) {
    if json {
        println!("{}", attestation::text::json_safe(&v.to_json_pretty()));
        return;
    }
    print!("{}", summary(v));
}

/// The human summary of a verdict. Every value that came from the job, the repository or the command's output
/// is escaped ([`attestation::text`]): one-line values whole, the output tail line by line.
pub fn summary(v: &Verdict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "outcome: {}", v.outcome.as_str());
    if let Some(r) = &v.refusal {
        let _ = writeln!(
            out,
            "refused at {}: {}",
            escape(&r.stage),
            escape(&r.reason)
        );
    }
    if let Some(t) = &v.test {
        let _ = writeln!(
            out,
            "test: {} ({}), exit {:?}, signal {:?}, {} ms, network none",
            escape(&t.command),
            escape(&t.source),
            t.exit_code,
            t.signal,
            t.duration_ms
        );
    }
    if let Some(c) = &v.tests {
        let _ = writeln!(
            out,
            "counts: {} passed, {} failed, {} skipped ({})",
            c.passed,
            c.failed,
            c.skipped,
            escape(&c.parser)
        );
    }
    let _ = writeln!(
        out,
        "processes: {} started, {} running at end, {} left after teardown",
        v.processes.started, v.processes.running_at_end, v.processes.left_after_teardown
    );
    for f in &v.findings {
        let _ = write!(out, "finding [{}] {}", escape(&f.stage), escape(&f.kind));
        if !f.path.is_empty() {
            let _ = write!(out, " {}", escape(&f.path));
        }
        let _ = writeln!(out, ": {}", escape(&f.detail));
    }
    let lines: Vec<&str> = v.output_tail.test.lines().collect();
    let shown_lines = &lines[lines.len().saturating_sub(SUMMARY_TAIL_LINES)..];
    if !shown_lines.is_empty() {
        let _ = writeln!(
            out,
            "test output (last {} line(s); the whole tail is in --json):",
            shown_lines.len()
        );
        for l in shown_lines {
            let _ = writeln!(out, "  | {}", escape(l));
        }
    }
    out
}
