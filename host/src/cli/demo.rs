//! `fenced-run demo`: the main job on an embedded bundle, end to end on this machine. A tiny shell repository with
//! a bug, and a patch that claims to fix it, go through intake, the fence (the best isolation this machine offers),
//! evidence bound to a sim attestation report, and the founder's verification of that evidence.

use attestation::text::{escape, shown};
use attestation::verdict::{Isolation, Verdict};
use guest::fence::run::{run_input, RunOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use verifier_lib::evidence::{verify_evidence_bytes, EvidenceOptions};
use verifier_lib::snp::chain::ChainOptions;

/// The embedded bundle: (path inside the bundle, contents, executable).
const BUNDLE: &[(&str, &str, bool)] = &[
    ("job.toml", include_str!("../../demo/job.toml"), false),
    ("fix.patch", include_str!("../../demo/fix.patch"), false),
    (
        "repo/calc.sh",
        include_str!("../../demo/repo/calc.sh"),
        false,
    ),
    (
        "repo/tests/test.sh",
        include_str!("../../demo/repo/tests/test.sh"),
        true,
    ),
];

/// Arguments of `fenced-run demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Write the evidence here as well (it is verified either way).
    #[arg(long, value_name = "OUT")]
    pub evidence: Option<PathBuf>,
    /// Print the verdict as JSON after the summary.
    #[arg(long)]
    pub json: bool,
    /// The founder's nonce, hex, 16 to 64 bytes (random when absent); printed either way, for
    /// `verify-attestation evidence --nonce`.
    #[arg(long, value_name = "HEX")]
    pub nonce: Option<String>,
    /// After the demo, serve its verified evidence on loopback (`fenced-run view`) until Ctrl-C.
    #[arg(long)]
    pub view: bool,
}

/// Runs the demo; exit 0 when the run judged and its evidence verified, 1 otherwise, 2 when it could not start.
pub fn run(args: Args) -> ExitCode {
    match demo(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("fenced-run demo: {}", escape(&e));
            ExitCode::from(2)
        }
    }
}

/// The isolation tier this machine offers for the demo, and why.
fn best_isolation() -> (Isolation, &'static str) {
    // The vm, sev-snp and tdx tiers need the guest image and the VM launcher, which are not built yet; the
    // process tier runs the same fence code in Linux namespaces on this host.
    (
        Isolation::Process,
        "Linux namespaces on this host (the VM tiers need the guest image launcher, not built yet)",
    )
}

fn write_bundle(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for (rel, text, exec) in BUNDLE {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        if *exec {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

fn demo(args: &Args) -> Result<bool, String> {
    // The founder's nonce, checked before anything runs.
    let nonce = match &args.nonce {
        Some(h) => super::parse_nonce(h).map_err(|e| format!("--nonce: {e}"))?,
        None => guest::fence::run::random_nonce(),
    };
    let (isolation, why) = best_isolation();
    let tmp = tempfile::Builder::new()
        .prefix("fenced-run-demo-")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let bundle = tmp.path().join("bundle");
    write_bundle(&bundle)?;
    println!("bundle      embedded demo (calc.sh with a bug, fix.patch claims to fix it)");
    println!("isolation   {}: {why}", isolation_name(isolation));

    // The attestation session begins before any untrusted code runs.
    println!("nonce       {}", hex::encode(&nonce));
    let (session, measurement) = crate::sim::begin_process_session(&nonce)?;

    // Intake stages 1-5 (nothing runs yet), then the fence on intake's copy of the bundle.
    let mut opts = RunOptions::new(PathBuf::from("/proc/self/exe"), nonce.clone());
    opts.isolation = isolation;
    let verdict = run_input(&bundle, &opts).map_err(|e| format!("intake: {e}"))?;
    for f in &verdict.findings {
        println!(
            "finding     [{}] {} {}: {}",
            escape(&f.stage),
            escape(&f.kind),
            escape(&f.path),
            escape(&f.detail)
        );
    }
    print_verdict(&verdict);

    let evidence = session
        .seal(&verdict)
        .map_err(|e| format!("sealing the verdict: {e}"))?;
    let bytes = evidence
        .to_cbor()
        .map_err(|e| format!("encoding the evidence: {e}"))?;
    if let Some(out) = &args.evidence {
        std::fs::write(out, &bytes).map_err(|e| format!("writing {}: {e}", out.display()))?;
        println!(
            "evidence    {} ({} bytes)",
            shown(out.display()),
            bytes.len()
        );
    }

    // The founder's side: verify what came back, pinning the measurement and the nonce.
    let mut vopts = EvidenceOptions {
        chain: ChainOptions {
            allow_simulated: true,
            ..ChainOptions::default()
        },
        nonce: Some(nonce),
        ..EvidenceOptions::default()
    };
    vopts.policy.measurements = vec![verifier_lib::snp::policy::HexBytes(measurement)];
    let v = verify_evidence_bytes(&bytes, &vopts).map_err(|e| format!("decoding evidence: {e}"))?;
    if v.verified() {
        println!(
            "verified    SIMULATED: chain, report signature, policy, measurement {}, key binding, verdict signature, nonce",
            &hex::encode(measurement)[..16]
        );
    } else {
        for f in &v.failures {
            println!("REJECTED    {}: {}", escape(&f.check), escape(&f.detail));
        }
    }
    if args.json {
        println!(
            "{}",
            attestation::text::json_safe(&verdict.to_json_pretty())
        );
    }
    if args.view {
        let nonce = vopts.nonce.clone().unwrap_or_default();
        super::view::after_run(&bytes, "fenced-run demo", &nonce, Some(measurement))
            .map_err(|_| "--view: the viewer could not start".to_string())?;
    }
    Ok(verdict.judged && v.verified())
}

fn isolation_name(i: Isolation) -> String {
    serde_json::to_value(i)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{i:?}"))
}

fn print_verdict(v: &Verdict) {
    println!("outcome     {}", v.outcome.as_str());
    if let Some(r) = &v.refusal {
        println!("refused     at {}: {}", escape(&r.stage), escape(&r.reason));
    }
    if let Some(t) = &v.test {
        println!(
            "test        `{}` ({}), exit {:?}, {} ms, network none",
            escape(&t.command),
            escape(&t.source),
            t.exit_code,
            t.duration_ms
        );
    }
    if let Some(c) = &v.tests {
        println!(
            "counts      {} passed, {} failed, {} skipped (parser: {})",
            c.passed,
            c.failed,
            c.skipped,
            escape(&c.parser)
        );
    }
    println!(
        "processes   {} started, {} running at end, {} left after teardown",
        v.processes.started, v.processes.running_at_end, v.processes.left_after_teardown
    );
}
