//! `fenced-run demo`: the main job on an embedded bundle, end to end on this machine. A tiny shell repository with
//! a bug, and a patch that claims to fix it, go through intake, the fence in the best tier this machine offers
//! (the `vm` tier where QEMU, the kernel and the guest image are there, the image built on first use; else the
//! `process` tier, saying why on the first line), evidence bound to a sim attestation report, and the founder's
//! verification of that evidence against the image manifest's (or the process's) measurement.

use attestation::text::{escape, shown};
use attestation::verdict::{Isolation, Verdict};
use guest::fence::input::run_input;
use guest::fence::run::RunOptions;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use verifier_lib::sev_snp::ChainOptions;
use verifier_lib::{verify_evidence_bytes, EvidenceOptions};

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
    /// Print exactly one JSON object on stdout (tier, why, nonce, measurement, verification, verdict); the
    /// summary and progress go to stderr.
    #[arg(long)]
    pub json: bool,
    /// `auto` (the vm tier where it can run, else process), `vm` or `process`.
    #[arg(long, default_value = "auto", value_name = "TIER")]
    pub isolation: String,
    /// The vm tier's guest image (default vm-image/ of the data directory, docs/install.md; built there when
    /// missing).
    #[arg(long, value_name = "DIR")]
    pub image: Option<PathBuf>,
    /// Progress of a vm run on stderr: `auto` (a spinner on a terminal, else plain lines), `text`, `json` or
    /// `none`.
    #[arg(long, default_value = "auto", value_name = "MODE")]
    pub progress: String,
    /// The founder's nonce, hex, 16 to 64 bytes (random when absent); printed either way, for
    /// `verify-attestation evidence --nonce`.
    #[arg(long, value_name = "HEX")]
    pub nonce: Option<String>,
    /// After the demo, serve its verified evidence on loopback (`fenced-run view`) until Ctrl-C.
    #[arg(long)]
    pub view: bool,
    /// Never install what the vm tier lacks. Without it, a demo run as root on a machine with apt whose QEMU or
    /// kernel is missing first runs scripts/vm-setup.sh (QEMU from bookworm-backports, the 6.12 kernel under
    /// vm-kernel/ of the data directory).
    #[arg(long)]
    pub no_setup: bool,
}

/// The vm tier's set-up script (QEMU and the kernel through apt), embedded so that the binary runs the version it
/// was built with. `FENCED_RUN_VM_SETUP` names another script to run instead (tests use it).
const VM_SETUP: &str = include_str!("../../../scripts/vm-setup.sh");

/// What is missing for the vm tier on this host, if anything: QEMU, or both the image and a kernel to build it.
fn vm_missing(image: &Path) -> Option<String> {
    if let Err(why) = super::vm::qemu_available() {
        return Some(why);
    }
    if !image.join(crate::image::MANIFEST_FILE).is_file()
        && super::image::default_kernel().is_none()
    {
        return Some(format!(
            "no guest image in {} and no kernel under {} to build one ({} fetches it)",
            image.display(),
            crate::image::datadir::resolve()
                .map(|d| d
                    .join(crate::image::datadir::KERNEL_DIR)
                    .display()
                    .to_string())
                .unwrap_or_else(|_| "vm-kernel/ of the data directory".into()),
            super::vm::setup_command()
        ));
    }
    None
}

/// Runs the vm tier's set-up where it may (as root, with apt-get on PATH): Ok(true) when it ran and succeeded,
/// Ok(false) when it may not run here, Err(why) when it ran and failed.
fn vm_setup(no_setup: bool) -> Result<bool, String> {
    use super::vm::on_path;
    if no_setup || !nix::unistd::geteuid().is_root() || !on_path("apt-get") || !on_path("bash") {
        return Ok(false);
    }
    // The set-up extracts the kernel into the data directory (the checkout's target/ in a build tree).
    let target = crate::image::datadir::resolve()
        .map_err(|e| e.to_string())?
        .dir;
    std::fs::create_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
    // Progress, on stderr: stdout's first line stays the tier and why.
    eprintln!(
        "setup       the vm tier needs QEMU and Debian's 6.12 kernel: installing them through apt (scripts/vm-setup.sh)"
    );
    use std::os::fd::AsFd;
    let mut cmd = std::process::Command::new("bash");
    match std::env::var_os("FENCED_RUN_VM_SETUP") {
        Some(script) => cmd.arg(script),
        None => cmd.arg("-c").arg(VM_SETUP).arg("vm-setup.sh"),
    };
    // The script's lines are passed on (`vm-setup: WHAT` names what the "still" lines then name), and a "still"
    // line follows every few seconds while apt or the kernel's download is silent; its stdout joins stderr
    // (stdout is the summary's).
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::process::Stdio::from)
        .unwrap_or_else(|_| std::process::Stdio::null());
    let mut child = cmd
        .arg(&target)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("scripts/vm-setup.sh could not start: {e}"))?;
    let ticker = crate::vm::progress::Ticker::start("setup", "running scripts/vm-setup.sh");
    if let Some(err) = child.stderr.take() {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("{}", escape(&line));
            if let Some(what) = line.strip_prefix("vm-setup: ") {
                ticker.set(&escape(what));
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for scripts/vm-setup.sh: {e}"))?;
    drop(ticker);
    if status.success() {
        Ok(true)
    } else {
        Err(format!(
            "scripts/vm-setup.sh failed ({status}; its messages are above on stderr)"
        ))
    }
}

/// Runs the demo; exit 0 when the run judged and its evidence verified, 1 otherwise, 2 when it could not start.
pub fn run(args: Args) -> ExitCode {
    match demo(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => super::run::fail(args.json, "demo", "demo-not-started", &e, 2),
    }
}

/// Where the demo runs.
enum Tier {
    /// The vm tier with this image.
    Vm(PathBuf),
    /// The process tier, and why not the vm tier.
    Process(String),
}

/// The vm tier if it can run here (building the image when only it is missing), else why not.
fn choose_tier(args: &Args) -> Result<Tier, String> {
    let image = args.image.clone().unwrap_or_else(super::vm::default_image);
    match args.isolation.as_str() {
        "process" => return Ok(Tier::Process("asked for with --isolation process".into())),
        "vm" | "auto" => {}
        other => {
            return Err(format!(
                "--isolation {}: expected auto, vm or process",
                escape(other)
            ))
        }
    }
    let forced = args.isolation == "vm";
    let missing = |why: String| -> Result<Tier, String> {
        if forced {
            Err(format!("--isolation vm: {why}"))
        } else {
            Ok(Tier::Process(format!("the vm tier cannot run here: {why}")))
        }
    };
    if let Some(why) = vm_missing(&image) {
        match vm_setup(args.no_setup) {
            Ok(true) => {}
            Ok(false) => return missing(why),
            Err(e) => return missing(format!("{why}, and {e}")),
        }
        if let Some(why) = vm_missing(&image) {
            return missing(format!("{why} (after scripts/vm-setup.sh)"));
        }
    }
    if !image.join(crate::image::MANIFEST_FILE).is_file() {
        // Progress, on stderr: stdout's first line stays the tier and why.
        eprintln!(
            "image       building the guest image into {} (first run only)",
            image.display()
        );
        let b = super::image::BuildArgs {
            out: image.clone(),
            kernel: None,
            modules: None,
            agent: None,
            busybox: None,
            ovmf: None,
            tdx_ovmf: None,
            no_git: false,
            toolchains: None,
            deb_cache: None,
        };
        if let Err(e) = super::image::build(&b) {
            return missing(format!("building the guest image failed: {e}"));
        }
    }
    Ok(Tier::Vm(image))
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
    let mode =
        crate::vm::progress::Mode::parse(&args.progress).map_err(|e| format!("--progress {e}"))?;
    // With --json, stdout carries the one JSON object only.
    let json = args.json;
    let say = move |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            outln!("{line}");
        }
    };
    let tier = choose_tier(args)?;
    let tmp = tempfile::Builder::new()
        .prefix("fenced-run-demo-")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let bundle = tmp.path().join("bundle");
    write_bundle(&bundle)?;
    let (isolation, why) = match &tier {
        Tier::Vm(image) => (
            Isolation::Vm,
            format!(
                "a QEMU guest booted from {} (sim PSP: no SEV-SNP/TDX here)",
                image.display()
            ),
        ),
        Tier::Process(why) => (Isolation::Process, why.clone()),
    };
    say(format!("isolation   {}: {why}", isolation_name(isolation)));
    say("bundle      embedded demo (calc.sh with a bug, fix.patch claims to fix it)".into());
    say(format!("nonce       {}", hex::encode(&nonce)));

    let (verdict, bytes, measurement) = match &tier {
        Tier::Vm(image) => {
            let manifest = crate::image::Manifest::load(image).map_err(|e| e.to_string())?;
            let pin: [u8; 48] = hex::decode(&manifest.measurements.vm)
                .ok()
                .and_then(|v| v.try_into().ok())
                .ok_or_else(|| {
                    format!(
                        "{}: measurements.vm is not 48 bytes of hex",
                        image.join(crate::image::MANIFEST_FILE).display()
                    )
                })?;
            let mut opts = crate::vm::VmOptions::new(image.clone());
            opts.progress = mode;
            opts.dialer = std::env::current_exe().ok();
            crate::vm::install_interrupt_handler();
            match super::vm::run_job(&bundle, &nonce, opts)? {
                super::vm::HostRun::Refused(r) => {
                    return Err(format!("intake on the host refused the demo bundle: {r}"))
                }
                super::vm::HostRun::Ran(out) => {
                    say(format!(
                        "vm          {} (agent ready after {:.2} s, VM exited after {:.2} s)",
                        out.accel.as_str(),
                        out.ready.as_secs_f64(),
                        out.total.as_secs_f64()
                    ));
                    (out.verdict, out.evidence_bytes, pin)
                }
            }
        }
        Tier::Process(_) => {
            // The attestation session begins before any untrusted code runs.
            // It writes the fence transcript from its first event (docs/transcript.md).
            let session =
                crate::sim::TranscribedSession::begin(&nonce, None).map_err(|e| e.to_string())?;
            let measurement = session.measurement;
            // Intake stages 1-5 (nothing runs yet), then the fence on intake's copy of the bundle.
            let mut opts = RunOptions::new(PathBuf::from("/proc/self/exe"), nonce.clone());
            opts.isolation = isolation;
            opts.transcript = Some(session.recorder.clone());
            let verdict = run_input(&bundle, &opts).map_err(|e| format!("intake: {e}"))?;
            let evidence = session
                .seal(&verdict)
                .map_err(|e| format!("sealing the verdict: {e}"))?;
            let bytes = evidence
                .to_cbor()
                .map_err(|e| format!("encoding the evidence: {e}"))?;
            (verdict, bytes, measurement)
        }
    };
    drop(tmp);
    for f in &verdict.findings {
        say(format!(
            "finding     [{}] {} {}: {}",
            escape(&f.stage),
            escape(&f.kind),
            escape(&f.path),
            escape(&f.detail)
        ));
    }
    for l in verdict_lines(&verdict) {
        say(l);
    }
    if let Some(out) = &args.evidence {
        std::fs::write(out, &bytes).map_err(|e| format!("writing {}: {e}", out.display()))?;
        say(format!(
            "evidence    {} ({} bytes)",
            shown(out.display()),
            bytes.len()
        ));
    }

    // The founder's side: verify what came back, pinning the measurement and the nonce.
    let mut vopts = EvidenceOptions {
        chain: ChainOptions {
            allow_simulated: true,
            ..ChainOptions::default()
        },
        nonce: Some(nonce.clone()),
        ..EvidenceOptions::default()
    };
    vopts.policy.measurements = vec![attestation::hex::Hex(measurement)];
    let v = verify_evidence_bytes(&bytes, &vopts).map_err(|e| format!("decoding evidence: {e}"))?;
    let pinned = match isolation {
        Isolation::Vm => "the image manifest's vm measurement",
        _ => "this process's measurement",
    };
    if v.verified() {
        say(format!(
            "verified    SIMULATED: chain, report signature, policy, measurement {} ({pinned}), key binding, verdict signature, nonce",
            &hex::encode(measurement)[..16]
        ));
    } else {
        for f in &v.failures {
            say(format!(
                "REJECTED    {}: {}",
                escape(&f.check),
                escape(&f.detail)
            ));
        }
    }
    if args.json {
        let failures: Vec<serde_json::Value> = v
            .failures
            .iter()
            .map(|f| serde_json::json!({"check": f.check, "detail": f.detail}))
            .collect();
        let obj = serde_json::json!({
            "isolation": isolation_name(isolation),
            "why": why,
            "nonce": hex::encode(&nonce),
            "measurement": hex::encode(measurement),
            "verified": v.verified(),
            "failures": failures,
            "verdict": verdict.to_json_value(),
        });
        outln!("{}", attestation::text::json_safe(&obj.to_string()));
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

fn verdict_lines(v: &Verdict) -> Vec<String> {
    let mut out = vec![format!("outcome     {}", v.outcome.as_str())];
    if let Some(r) = &v.refusal {
        out.push(format!(
            "refused     at {}: {}",
            escape(&r.stage),
            escape(&r.reason)
        ));
    }
    if let Some(t) = &v.test {
        out.push(format!(
            "test        `{}` ({}), exit {}, {} ms, network none",
            escape(&t.command),
            escape(&t.source),
            t.exit_code.map_or("none".to_string(), |c| c.to_string()),
            t.duration_ms
        ));
    }
    if let Some(c) = &v.tests {
        out.push(format!(
            "counts      {} passed, {} failed, {} skipped (parser: {})",
            c.passed,
            c.failed,
            c.skipped,
            escape(&c.parser)
        ));
    }
    if !verifier_lib::tests_ran(v) {
        out.push(verifier_lib::output::NO_TEST_RAN.to_string());
    }
    out.push(format!(
        "processes   {} started, {} running at end, {} left after teardown",
        v.processes.started, v.processes.running_at_end, v.processes.left_after_teardown
    ));
    out
}
