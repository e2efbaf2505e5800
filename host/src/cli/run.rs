//! `fenced-run run JOB.toml|BUNDLE --isolation process`: intake stages 1-5, then the job in the fence (namespaces on this host),
//! print the verdict (`--json` for the contract form) and optionally write sim evidence for it.
//! Exit 0 whenever the run judged, 1 when it refused, 2 on unusable input.

use attestation::text::{escape, shown};
use attestation::verdict::Verdict;
use guest::fence::input::run_input;
use guest::fence::run::RunOptions;
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
    /// The guest image of the `vm` tier (`fenced-run image build --out DIR`; default vm-image/ of the data directory, docs/install.md).
    #[arg(long, value_name = "DIR")]
    pub image: Option<PathBuf>,
    /// Print the verdict as JSON (the contract form) instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Write evidence for the run (sim attestation for the process tier) to this file.
    #[arg(long, value_name = "OUT")]
    pub evidence: Option<PathBuf>,
    /// The founder's nonce, hex, 16 to 64 bytes (random when absent); checked with or without --evidence.
    #[arg(long, value_name = "HEX", conflicts_with = "nonce_exchange")]
    pub nonce: Option<String>,
    /// The nonce is issued for the run's evidence key (the hosted pool's worker, docs/pool.md): the key is made
    /// first (in the vm tiers, by the guest agent, which announces it over the job channel), one line
    /// `key-sha256 HEX` is written on stdout, and one line of nonce hex is read from stdin. Needs --evidence.
    #[arg(long, requires = "evidence")]
    pub nonce_exchange: bool,
    /// With --nonce-exchange: the longest wait for the nonce line on stdin, in seconds; the run then ends with
    /// exit status 2 and a message naming this flag.
    #[arg(long, value_name = "SECONDS", requires = "nonce_exchange", default_value_t = crate::nonce_exchange::DEFAULT_NONCE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub nonce_timeout: u64,
    /// The operator's configuration (TOML, see docs/job-file.md): the environment names a job may pass
    /// through and the host paths it may read. Without it: TERM LANG LC_* TZ CI, and no read path.
    #[arg(long, value_name = "FILE")]
    pub operator_config: Option<PathBuf>,
    /// Progress of a `vm` run on stderr: `auto` (a spinner on a terminal, else plain lines), `text` (plain lines:
    /// each step, the guest's phases, a "still" line every 5 s), `json` (one JSON object per line per event) or
    /// `none`.
    #[arg(long, default_value = "auto", value_name = "MODE")]
    pub progress: String,
    /// Tests only: the vm tier's host dialer sends this allowlisted NAME:PORT to a loopback ADDRESS:PORT
    /// instead of resolving it (everything else is still resolved and checked). Repeatable.
    #[arg(long, value_name = "NAME:PORT=ADDR:PORT", hide = true)]
    pub test_dialer_map: Vec<String>,
    /// After the run, verify the evidence written with --evidence and serve it on loopback (`fenced-run view`).
    #[arg(long, requires = "evidence")]
    pub view: bool,
    /// The operator's registry (HOST or HOST:PORT) a task bundle's `FROM name@sha256:...` images are pulled
    /// from (docs/task-bundle.md); a task bundle is refused without it.
    #[arg(long, value_name = "HOST:PORT")]
    pub registry: Option<String>,
    /// Speak plain HTTP to --registry (accepted only for a loopback registry).
    #[arg(long, requires = "registry")]
    pub registry_plain_http: bool,
}

/// Prints why `fenced-run CMD` cannot go on and returns `code`: with `json` one object on stdout
/// (`{"ok": false, "error": {"check": CHECK, "detail": DETAIL}, ...}`, docs/cli.md), otherwise a line on stderr.
pub fn fail(json: bool, cmd: &str, check: &str, detail: &str, code: u8) -> ExitCode {
    if json {
        let v = attestation::cli_io::error_json("ok", check, detail);
        outln!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        eprintln!("fenced-run {cmd}: {}", escape(detail));
    }
    ExitCode::from(code)
}

/// Checks, before anything runs, that evidence can be written to `out`: its directory exists and a file can be
/// created in it (a probe file, removed at once), and `out` itself is not a directory. A run whose evidence
/// could not be written would have spent the founder's budget for nothing.
pub fn check_evidence_path(out: &std::path::Path) -> Result<(), String> {
    let shown_out = shown(out.display());
    if out.is_dir() {
        return Err(format!(
            "--evidence {shown_out}: is a directory; give the path of a file to write"
        ));
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(format!(
            "--evidence {shown_out}: the directory {} does not exist",
            shown(parent.display())
        ));
    }
    if out.exists() {
        // Opened for appending, which changes nothing: only whether it could be written is learnt.
        std::fs::OpenOptions::new()
            .append(true)
            .open(out)
            .map_err(|e| format!("--evidence {shown_out}: cannot write it: {}", shown(e)))?;
    }
    tempfile::Builder::new()
        .prefix(".fenced-run-evidence-probe-")
        .tempfile_in(&parent)
        .map(drop)
        .map_err(|e| {
            format!(
                "--evidence {shown_out}: cannot write in {}: {}",
                shown(parent.display()),
                shown(e)
            )
        })
}

/// The process tier's toolchain root: the unpacked tree of the image's toolchain file system, when `image` has
/// one (a job's `[image] toolchains` then runs on the same toolchains as in the `vm` tier; the process tier
/// checks nothing about the tree, which is the runner's own as everything in that tier is).
pub fn process_toolchains(image: &std::path::Path) -> Option<guest::fence::run::ToolchainRoot> {
    let manifest = crate::image::Manifest::load(image).ok()?;
    let t = manifest.toolchains?;
    let dir = image.join(crate::image::rootfs::TREE_DIR);
    if !dir.is_dir() {
        return None;
    }
    Some(guest::fence::run::ToolchainRoot {
        toolchains: t.toolchains,
        root_hash: t.root_hash,
        dir,
    })
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let json = args.json;
    // sev-snp and tdx are checked against this host before anything runs; auto picks and says why.
    let image = args.image.clone().unwrap_or_else(super::vm::default_image);
    let tier = match crate::vm::confidential::resolve_for_run(&args.isolation, &image) {
        Ok(c) => {
            if args.isolation == "auto" {
                eprintln!("fenced-run run: {}", escape(&c.why));
            }
            c.tier
        }
        Err(e) => return fail(json, "run", "isolation", &e, 2),
    };
    let operator = match super::operator_policy(args.operator_config.as_deref()) {
        Ok(p) => p,
        Err(e) => return fail(json, "run", "operator-config", &e, 2),
    };
    let nonce = match &args.nonce {
        Some(h) => match super::parse_nonce(h) {
            Ok(n) => n,
            Err(e) => return fail(json, "run", "nonce", &format!("--nonce: {e}"), 2),
        },
        // With --nonce-exchange the nonce is issued once the evidence key exists (below).
        None if args.nonce_exchange => Vec::new(),
        None => guest::fence::run::random_nonce(),
    };
    // The evidence path is checked before anything runs: a run whose evidence cannot be written is wasted.
    if let Some(out) = &args.evidence {
        if let Err(e) = check_evidence_path(out) {
            return fail(json, "run", "evidence-path", &e, 2);
        }
    }
    if tier != crate::vm::confidential::Tier::Process {
        // With --nonce-exchange the guest announces its key first and the nonce is obtained for it.
        let mut nonce = nonce;
        let code = super::vm::run(&args, &mut nonce, tier);
        return match (&args.evidence, args.view && code != ExitCode::from(2)) {
            (Some(out), true) => super::view::after_run_file(out, &nonce, false)
                .err()
                .unwrap_or(code),
            _ => code,
        };
    }
    // The report is requested before any untrusted code runs; the verdict is signed at the end.
    // With --nonce-exchange the key is made first and its hash announced; the nonce comes back for it.
    // The session writes the fence transcript from its first event (docs/transcript.md).
    let started = match (&args.evidence, args.nonce_exchange) {
        (Some(_), true) => Some(crate::sim::TranscribedSession::begin(
            &nonce,
            Some(&mut crate::nonce_exchange::StdioExchange::within(
                std::time::Duration::from_secs(args.nonce_timeout),
            )),
        )),
        (Some(_), false) => Some(crate::sim::TranscribedSession::begin(&nonce, None)),
        (None, _) => None,
    };
    let session = match started {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return fail(json, "run", "evidence", &format!("--evidence: {e}"), 2),
        None => None,
    };
    let nonce = match &session {
        Some(s) if args.nonce_exchange => s.session.nonce().to_vec(),
        _ => nonce,
    };
    let mut opts = RunOptions::new(PathBuf::from("/proc/self/exe"), nonce.clone());
    opts.operator = operator;
    opts.toolchains = process_toolchains(&image);
    opts.transcript = session.as_ref().map(|s| s.recorder.clone());
    // A task bundle: stage 6 builds its environment first (docs/task-bundle.md).
    let proxy = opts
        .proxy
        .clone()
        .unwrap_or_else(|| std::sync::Arc::new(guest::fence::run::ProxyEgress::system()));
    let runner =
        intake::normalise::RunnerPolicy::with_operator(opts.operator.clone(), opts.home.clone());
    let (environment, refused) = match task_environment(&args, proxy, runner, tier, &nonce) {
        Ok(p) => p,
        Err(e) => return fail(json, "run", "registry", &e, 2),
    };
    if let Some(b) = &environment {
        opts.task_image = Some(b.task_image());
    }
    // Intake stages 1-5 first (nothing runs), then the fence on intake's own copy of the bundle.
    let run = match refused {
        Some(v) => Ok(v),
        None => run_input(&args.job, &opts),
    };
    let verdict = match run {
        Ok(mut v) => {
            if let Some(b) = &environment {
                v.findings.extend(b.findings());
            }
            v
        }
        Err(why) => {
            return fail(
                json,
                "run",
                "input",
                &format!("{}: {why}", args.job.display()),
                2,
            )
        }
    };
    if let (Some(session), Some(out)) = (session, &args.evidence) {
        let written = session
            .seal(&verdict)
            .map_err(|e| e.to_string())
            .and_then(|ev| ev.to_cbor().map_err(|e| e.to_string()))
            .and_then(|bytes| {
                std::fs::write(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
            });
        if let Err(e) = written {
            return fail(json, "run", "evidence", &format!("--evidence: {e}"), 2);
        }
    }
    print_verdict(&verdict, json);
    if !json {
        match &args.evidence {
            Some(out) => outln!("evidence: written to {}", shown(out.display())),
            None => outln!("evidence: none written (no --evidence)"),
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

/// Stage 6 for `fenced-run run` (built on this host for every tier): `(Some(image), None)` when the input is a
/// task bundle whose environment was built, `(None, Some(verdict))` when the build refused, `(None, None)` for
/// anything else; `Err` for an unusable `--registry`.
pub(crate) fn task_environment(
    args: &Args,
    proxy: std::sync::Arc<dyn guest::fence::run::EgressProvider>,
    runner: intake::normalise::RunnerPolicy,
    tier: crate::vm::confidential::Tier,
    nonce: &[u8],
) -> Result<(Option<crate::task::BuiltImage>, Option<Verdict>), String> {
    if !crate::task::looks_like_task(&args.job) {
        return Ok((None, None));
    }
    let registry = args
        .registry
        .as_deref()
        .map(|r| crate::task::Registry::parse(r, args.registry_plain_http))
        .transpose()?;
    let build = registry.map(|registry| crate::task::BuildOptions {
        registry,
        proxy,
        uid_base: crate::task::DEFAULT_UID_BASE,
        work_parent: std::env::temp_dir(),
    });
    let (itier, vtier) = match tier {
        crate::vm::confidential::Tier::Process => (
            intake::normalise::Isolation::Process,
            attestation::verdict::Isolation::Process,
        ),
        crate::vm::confidential::Tier::Vm => (
            intake::normalise::Isolation::Vm,
            attestation::verdict::Isolation::Vm,
        ),
        crate::vm::confidential::Tier::SevSnp => (
            intake::normalise::Isolation::SevSnp,
            attestation::verdict::Isolation::SevSnp,
        ),
        crate::vm::confidential::Tier::Tdx => (
            intake::normalise::Isolation::Tdx,
            attestation::verdict::Isolation::Tdx,
        ),
    };
    let intake_opts = intake::IntakeOptions::for_tier(itier).with_runner(runner);
    Ok(
        match crate::task::prepare(&args.job, &intake_opts, build.as_ref(), vtier, nonce) {
            crate::task::Prepared::NotATask => (None, None),
            crate::task::Prepared::Built(b) => (Some(*b), None),
            crate::task::Prepared::Refused(v) => (None, Some(*v)),
        },
    )
}

/// Lines of the test phase's output tail the summary shows.
pub const SUMMARY_TAIL_LINES: usize = 20;

/// Prints a verdict as the summary or, with `json`, the contract form.
pub(crate) fn print_verdict(v: &Verdict, json: bool) {
    if json {
        outln!("{}", attestation::text::json_safe(&v.to_json_pretty()));
        return;
    }
    out!("{}", summary(v));
}

/// How a phase ended, in words: `exit 0`, `killed by signal 9`, or `no exit status`.
fn ended(exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (exit_code, signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "no exit status".to_string(),
    }
}

/// The last [`SUMMARY_TAIL_LINES`] lines of a tail, each escaped and indented, under a heading.
fn tail_lines(out: &mut String, what: &str, tail: &str) {
    use std::fmt::Write;
    let lines: Vec<&str> = tail.lines().collect();
    let shown_lines = &lines[lines.len().saturating_sub(SUMMARY_TAIL_LINES)..];
    if shown_lines.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "{what} output (last {} line(s); the whole tail is in --json):",
        shown_lines.len()
    );
    for l in shown_lines {
        let _ = writeln!(out, "  | {}", escape(l));
    }
}

/// The human summary of a verdict: outcome, inputs and nonce, the install phase (command, how it ended, every
/// denied egress attempt), the test phase, counts, processes, findings, and the output tails when the run did
/// not pass. Every value that came from the job, the repository or the command's output is escaped
/// ([`attestation::text`]): one-line values whole, the output tails line by line.
pub fn summary(v: &Verdict) -> String {
    use attestation::verdict::Outcome;
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
    let or_none = |h: &Option<String>| {
        h.as_deref()
            .map(escape)
            .unwrap_or("none".into())
            .into_owned()
    };
    let _ = writeln!(
        out,
        "inputs: commit {}, tree {}, patch sha256 {}, job sha256 {}",
        or_none(&v.inputs.commit),
        or_none(&v.inputs.tree),
        or_none(&v.inputs.patch_sha256),
        or_none(&v.inputs.job_sha256)
    );
    let _ = writeln!(out, "nonce: {}", hex::encode(&v.inputs.nonce));
    let _ = writeln!(out, "isolation: {}", v.isolation);
    match &v.install {
        Some(i) => {
            let allowed = i.egress.iter().filter(|e| e.allowed).count();
            let denied: Vec<_> = i.egress.iter().filter(|e| !e.allowed).collect();
            let _ = writeln!(
                out,
                "install: {} ({}), {}, {} ms, egress {} allowed, {} denied",
                escape(&i.command),
                escape(&i.source),
                ended(i.exit_code, i.signal),
                i.duration_ms,
                allowed,
                denied.len()
            );
            for e in denied {
                let _ = writeln!(
                    out,
                    "  egress denied: {}:{}: {}",
                    escape(&e.host),
                    e.port,
                    escape(&e.reason)
                );
            }
            if let Some(o) = &i.operator_egress {
                let _ = writeln!(
                    out,
                    "  operator egress: allow_networks [{}], upstream_proxy {}, ca_certificates {}",
                    escape(&o.allow_networks.join(", ")),
                    o.upstream_proxy
                        .as_deref()
                        .map(escape)
                        .unwrap_or("none".into()),
                    o.ca_certificates_sha256
                        .as_deref()
                        .map(|h| format!("sha256:{}", escape(h)))
                        .unwrap_or("none".into())
                );
            }
        }
        None => {
            let _ = writeln!(out, "install: none (no install phase)");
        }
    }
    match &v.test {
        Some(t) => {
            let _ = writeln!(
                out,
                "test: {} ({}), {}, {} ms, network none",
                escape(&t.command),
                escape(&t.source),
                ended(t.exit_code, t.signal),
                t.duration_ms
            );
        }
        None => {
            let _ = writeln!(out, "test: not run");
        }
    }
    match &v.tests {
        Some(c) => {
            let _ = writeln!(
                out,
                "counts: {} passed, {} failed, {} skipped ({})",
                c.passed,
                c.failed,
                c.skipped,
                escape(&c.parser)
            );
        }
        None => {
            let _ = writeln!(out, "counts: none");
        }
    }
    if !verifier_lib::tests_ran(v) {
        let _ = writeln!(out, "{}", verifier_lib::output::NO_TEST_RAN);
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
    if v.outcome != Outcome::TestsPassed {
        tail_lines(&mut out, "install", &v.output_tail.install);
        tail_lines(&mut out, "test", &v.output_tail.test);
    }
    out
}
