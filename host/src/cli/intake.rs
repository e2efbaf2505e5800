//! `fenced-run intake BUNDLE [--json]`: runs intake stages 1-5 on a bundle (executing nothing) and prints
//! each stage's result and every finding. Exit 0 accepted, 1 refused, 2 unusable input.

use attestation::text::{escape, shown};
use intake::normalise::Isolation;
use intake::{run_stages, IntakeOptions, IntakeReport, Severity, StageStatus};
use std::process::ExitCode;

/// The isolation tier named on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Tier {
    /// AMD SEV-SNP.
    SevSnp,
    /// Intel TDX.
    Tdx,
    /// Plain VM.
    Vm,
    /// Linux namespaces on the host.
    Process,
}

impl From<Tier> for Isolation {
    fn from(t: Tier) -> Isolation {
        match t {
            Tier::SevSnp => Isolation::SevSnp,
            Tier::Tdx => Isolation::Tdx,
            Tier::Vm => Isolation::Vm,
            Tier::Process => Isolation::Process,
        }
    }
}

/// Arguments of this subcommand.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The bundle: a directory or a .tar, .tar.gz or .zip whose root holds job.toml.
    pub input: std::path::PathBuf,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The isolation tier whose limits stage 4 applies.
    #[arg(long, value_enum, default_value = "process")]
    pub isolation: Tier,
    /// Keep the unpacked work directory (its path is printed) instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// The operator's configuration (TOML, see docs/job-file.md) stage 4 checks `[env] passthrough` and
    /// `[sandbox] read` against. Without it: TERM LANG LC_* TZ CI, and no read path.
    #[arg(long, value_name = "FILE")]
    pub operator_config: Option<std::path::PathBuf>,
}

/// The exit code of a report: 0 accepted, 1 refused, 2 unusable input.
pub fn exit_code(report: &IntakeReport) -> u8 {
    if report.unusable.is_some() {
        2
    } else if report.accepted {
        0
    } else {
        1
    }
}

/// The report as lines of text. Every location, finding and reason comes from the bundle (file names, lines of
/// the repository, job values), so each is escaped as one line ([`attestation::text::escape`]).
pub fn render(report: &IntakeReport) -> String {
    let mut out = String::new();
    out.push_str(&format!("intake {}\n", shown(report.input.display())));
    if let Some(u) = &report.unusable {
        out.push_str(&format!("unusable input: {}\n", escape(u)));
    }
    for s in &report.stages {
        let status = match s.status {
            StageStatus::Passed => "passed",
            StageStatus::Refused => "REFUSED",
            _ => "not run",
        };
        out.push_str(&format!("  {:<10} {status}\n", s.stage.name()));
        for f in &s.findings {
            let sev = match f.severity {
                Severity::Refusal => "refused",
                Severity::Contained => "finding",
                _ => "note",
            };
            out.push_str(&format!(
                "    [{}] {sev}: {}: {}\n",
                f.stage,
                escape(&f.location),
                escape(&f.what)
            ));
        }
    }
    match (&report.refusal, report.accepted) {
        (Some(r), _) => out.push_str(&format!("refused at {}: {}\n", r.stage, escape(&r.reason))),
        (None, true) => out.push_str("accepted\n"),
        (None, false) => {}
    }
    out
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let operator = match super::operator_policy(args.operator_config.as_deref()) {
        Ok(p) => p,
        Err(e) => return super::run::fail(args.json, "intake", "operator-config", &e, 2),
    };
    let mut opts = IntakeOptions::for_tier(args.isolation.into()).with_runner(
        ::intake::normalise::RunnerPolicy::with_operator(operator, None),
    );
    opts.keep_on_refusal = args.keep;
    let mut report = run_stages(&args.input, &opts);
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(j) => outln!("{}", attestation::text::json_safe(&j)),
            Err(e) => {
                let detail = format!("cannot write JSON: {e}");
                return super::run::fail(true, "intake", "output", &detail, 2);
            }
        }
    } else {
        out!("{}", render(&report));
    }
    if args.keep {
        if let Some(w) = &report.work_dir {
            eprintln!("work directory kept: {}", shown(w.display()));
        }
    } else if let Err(e) = report.cleanup() {
        eprintln!(
            "fenced-run intake: cannot remove the work directory: {}",
            shown(e)
        );
    }
    ExitCode::from(exit_code(&report))
}
