//! `fenced-run run JOB|BUNDLE --isolation vm [--image DIR]`: intake on the host (to refuse early and learn the
//! job's time budget), then the bundle in a QEMU guest (host::vm), the verdict printed and the evidence written.
//! Exit 0 judged, 1 refused, 2 unusable input or a VM that did not produce evidence. Also the hidden
//! `fenced-run vm-dialer` that QEMU starts per install-phase connection (host::vm::dialer).

use super::run::Args;
use crate::vm::{self, dialer, progress, VmOptions, VmRun};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of the hidden `fenced-run vm-dialer` (started by QEMU's guestfwd, one per guest connection).
#[derive(clap::Args, Debug)]
pub struct DialerArgs {
    /// The VM's directory (dialer log, cut marker, pid files).
    #[arg(long, value_name = "DIR")]
    pub state: PathBuf,
    /// Tests only: NAME:PORT=LOOPBACK-ADDR:PORT.
    #[arg(long, value_name = "MAP")]
    pub test_map: Vec<String>,
    /// The operator's `[egress] allow_networks`, one entry each (CIDR or address).
    #[arg(long, value_name = "CIDR")]
    pub allow_network: Vec<String>,
    /// The operator's `[egress] upstream_proxy` (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    pub upstream_proxy: Option<String>,
}

/// Runs the dialer on stdin/stdout.
pub fn dialer_main(args: DialerArgs) -> ExitCode {
    let mut map = Vec::new();
    for m in &args.test_map {
        match dialer::TestMap::parse(m) {
            Ok(m) => map.push(m),
            // stdout is the guest's connection: the refusal goes there.
            Err(e) => {
                outln!("ERR --test-map {e}");
                return ExitCode::from(2);
            }
        }
    }
    let egress = match job_policy::egress::OperatorEgress::parse(
        args.allow_network.as_slice(),
        args.upstream_proxy.as_deref(),
    ) {
        Ok(e) => e,
        Err(e) => {
            outln!("ERR {e}");
            return ExitCode::from(2);
        }
    };
    ExitCode::from(dialer::serve(&dialer::DialerConfig {
        state: args.state,
        map,
        egress,
    }))
}

/// Whether `qemu-system-x86_64` is on PATH, or why the vm tier cannot run.
pub fn qemu_available() -> Result<(), String> {
    if on_path("qemu-system-x86_64") {
        Ok(())
    } else {
        Err(format!(
            "qemu-system-x86_64 is not installed (to install it from bookworm-backports: {})",
            setup_command()
        ))
    }
}

/// Whether a file `name` is in one of PATH's directories.
pub fn on_path(name: &str) -> bool {
    crate::vm::qemu::which(Path::new(name)).is_some()
}

/// The command that installs the vm tier's pieces (QEMU, busybox, the kernel into the data directory), as a user
/// would type it: the checkout's scripts/vm-setup.sh in a build tree, the package's copy where it is installed,
/// else this binary's `demo`, which runs the set-up it embeds as root.
pub fn setup_command() -> String {
    use crate::image::datadir;
    let data = datadir::resolve().ok();
    let tree_target = data
        .as_ref()
        .and_then(|d| d.build_tree.as_ref())
        .map(|t| t.target.clone());
    // The data directory as an argument, unless it is the script's own default (the checkout's target/).
    let arg = |d: &datadir::DataDir| match &tree_target {
        Some(t) if *t == d.dir => String::new(),
        _ => format!(" {}", d.dir.display()),
    };
    match &data {
        Some(d) => match &d.build_tree {
            Some(t) => {
                let script = t.workspace.join("scripts/vm-setup.sh");
                let script = std::fs::canonicalize(&script).unwrap_or(script);
                format!("sudo {}{}", script.display(), arg(d))
            }
            None => {
                let packaged = std::path::Path::new(datadir::SYSTEM_DIR).join("vm-setup.sh");
                if packaged.is_file() {
                    format!("sudo {}{}", packaged.display(), arg(d))
                } else {
                    let exe = std::env::current_exe()
                        .map(|e| e.display().to_string())
                        .unwrap_or_else(|_| "fenced-run".into());
                    format!("sudo {exe} --data-dir {} demo", d.dir.display())
                }
            }
        },
        None => "sudo fenced-run --data-dir DIR demo".into(),
    }
}

/// The verdict of a VM run on the host's side: intake's refusal before launch, or the run.
pub enum HostRun {
    /// Intake on the host refused; nothing was launched.
    Refused(String),
    /// The VM ran and brought back evidence.
    Ran(Box<VmRun>),
}

/// What intake on the host made of an input for the vm tier.
pub enum Judged {
    /// Intake refused (stage: reason); nothing is packed.
    Refused(String),
    /// Intake accepted: the job, and the bundle packed from intake's own copy (host::vm::bundle::pack_judged).
    Packed {
        /// The job intake loaded.
        job: Box<intake::job::Job>,
        /// How the bytes are packed.
        kind: guest::channel::BundleKind,
        /// The bundle's bytes.
        bytes: Vec<u8>,
    },
}

/// Intake on the host, then the bundle packed from the tree intake judged (its work directory, removed before
/// this returns), never from `job_path` again; `egress` is the operator's (its `allow_networks` apply to a
/// repository URL's addresses here as in the dialer). `after_intake` runs between the two: the seam a test uses to
/// change the original after intake judged it. `Err` when the input is unusable or cannot be packed.
pub fn judge_and_pack(
    job_path: &Path,
    egress: &job_policy::egress::OperatorEgress,
    after_intake: impl FnOnce(),
) -> Result<Judged, String> {
    let work = tempfile::Builder::new()
        .prefix("fenced-run-intake-vm-")
        .tempdir()
        .map_err(|e| format!("cannot create intake's work directory: {e}"))?;
    // The operator's allow_networks apply to a repository URL's addresses here as in the dialer.
    let mut runner = intake::normalise::RunnerPolicy::probe();
    runner.operator.egress = egress.clone();
    let mut report = intake::run_stages(
        job_path,
        &intake::IntakeOptions::for_tier(intake::normalise::Isolation::Vm)
            .with_work_parent(work.path())
            .with_runner(runner),
    );
    if let Some(why) = report.unusable.clone() {
        let _ = report.cleanup();
        return Err(format!("{}: {why}", job_path.display()));
    }
    if !report.accepted || report.job.is_none() {
        let reason = report
            .refusal
            .as_ref()
            .map(|r| format!("{}: {}", r.stage.name(), r.reason))
            .unwrap_or_else(|| "intake did not accept the job".into());
        let _ = report.cleanup();
        return Ok(Judged::Refused(reason));
    }
    after_intake();
    let packed = vm::bundle::pack_judged(&report);
    let _ = report.cleanup();
    drop(work);
    let (kind, bytes) = packed.map_err(|e| e.to_string())?;
    match report.job.take() {
        Some(job) => Ok(Judged::Packed {
            job: Box::new(job),
            kind,
            bytes,
        }),
        None => Ok(Judged::Refused("intake did not accept the job".into())),
    }
}

/// Intake on the host, then the job in the VM with `opts` filled from the job's budgets.
pub fn run_job(job_path: &Path, nonce: &[u8], opts: VmOptions) -> Result<HostRun, String> {
    run_job_for_key(
        job_path,
        Box::new(crate::nonce_exchange::Fixed(nonce.to_vec())),
        opts,
    )
}

/// [`run_job`] with the nonce obtained from `source` for the key the guest announces (vm::run_for_key).
pub fn run_job_for_key(
    job_path: &Path,
    source: Box<dyn crate::nonce_exchange::NonceSource>,
    mut opts: VmOptions,
) -> Result<HostRun, String> {
    let (job, kind, bytes) = match judge_and_pack(job_path, &opts.egress, || {})? {
        Judged::Refused(reason) => return Ok(HostRun::Refused(reason)),
        Judged::Packed { job, kind, bytes } => (job, kind, bytes),
    };
    // A job that names toolchains the image does not hold is refused before anything boots (the guest would
    // refuse it too, with the same words).
    let image_root = crate::image::Manifest::load(&opts.image)
        .ok()
        .and_then(|m| m.toolchains)
        .map(|t| guest::fence::run::ToolchainRoot {
            toolchains: t.toolchains,
            root_hash: t.root_hash,
            dir: PathBuf::new(),
        });
    if let Err(why) = guest::fence::run::ToolchainRoot::for_job(image_root.as_ref(), &job) {
        return Ok(HostRun::Refused(format!("normalise: {why}")));
    }
    let install = job.install.as_ref();
    let mut t = vm::Timeouts::for_job(
        install.map(|i| i.timeout_seconds),
        job.test.timeout_seconds,
        Duration::from_secs(60),
    );
    t.boot = opts.timeouts.boot;
    opts.timeouts = t;
    opts.install = install.is_some();
    // The guest holds the job's memory and its tmpfs scratch, plus the agent and the kernel: the job's own limit
    // is reached before the guest runs out.
    let l = &job.limits;
    opts.memory_mib = opts
        .memory_mib
        .max(l.memory_mib.saturating_add(l.disk_mib).saturating_add(512));
    // The network device only where the install phase may use it.
    if install.is_none_or(|i| i.allow.is_empty()) {
        opts.dialer = None;
    }
    vm::run_for_key(kind, &bytes, source, &opts)
        .map(|r| HostRun::Ran(Box::new(r)))
        .map_err(|e| e.to_string())
}

/// The default image directory: `vm-image/` of the data directory (crate::image::datadir: the checkout's target/
/// in a build tree, else `~/.local/share/fenced-run`); `vm-image` under the current directory when none can be
/// named (no HOME), which the caller's messages then show.
pub fn default_image() -> PathBuf {
    use crate::image::datadir;
    match datadir::resolve() {
        Ok(d) => d.join(datadir::IMAGE_DIR),
        Err(_) => PathBuf::from(datadir::IMAGE_DIR),
    }
}

/// Runs `args` in the `vm` tier (or, for `tier` sev-snp/tdx, a confidential guest) with `nonce`; with
/// `--nonce-exchange` the nonce is obtained for the key the guest announces, and `nonce` becomes it.
pub fn run(args: &Args, nonce: &mut Vec<u8>, tier: crate::vm::confidential::Tier) -> ExitCode {
    // Only the operator's [egress] table applies in a guest: it has neither this host's environment nor its files.
    let operator = match super::operator_policy(args.operator_config.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fenced-run run: {e}");
            return ExitCode::from(2);
        }
    };
    if let (Some(p), false) = (&args.operator_config, operator.only_egress()) {
        eprintln!(
            "fenced-run run: --operator-config {}: the vm tier runs the job in a guest that has neither this \
             host's environment nor its files, so [env] passthrough and [sandbox] read cannot apply there (only \
             [egress] does); leave them out of the file or use --isolation process",
            p.display()
        );
        return ExitCode::from(2);
    }
    let mode = match progress::Mode::parse(&args.progress) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("fenced-run run: --progress {e}");
            return ExitCode::from(2);
        }
    };
    let mut map = Vec::new();
    for m in &args.test_dialer_map {
        match dialer::TestMap::parse(m) {
            Ok(m) => map.push(m),
            Err(e) => {
                eprintln!("fenced-run run: --test-dialer-map {e}");
                return ExitCode::from(2);
            }
        }
    }
    let image = args.image.clone().unwrap_or_else(default_image);
    if !image.join(crate::image::MANIFEST_FILE).is_file() {
        eprintln!(
            "fenced-run run: --image {}: no guest image there; build one with `fenced-run image build --out {}`",
            image.display(),
            image.display()
        );
        return ExitCode::from(2);
    }
    let mut opts = VmOptions::new(image);
    opts.confidential = crate::vm::confidential::for_tier(tier, &opts.image);
    opts.progress = mode;
    opts.dialer = std::env::current_exe().ok();
    opts.dialer_map = map;
    opts.egress = operator.egress;
    // A task bundle: stage 6 builds its environment on this host; the guest gets it as its verity disk.
    let built = super::run::task_environment(
        args,
        std::sync::Arc::new(guest::fence::run::ProxyEgress::system()),
        intake::normalise::RunnerPolicy::probe(),
        tier,
        nonce,
    );
    let environment = match built {
        Ok((_, Some(refused))) => {
            super::run::print_verdict(&refused, args.json);
            return ExitCode::from(1);
        }
        Ok((environment, None)) => environment,
        Err(e) => {
            eprintln!("fenced-run run: {e}");
            return ExitCode::from(2);
        }
    };
    opts.environment = environment.as_ref().map(|b| b.vm_environment());
    vm::install_interrupt_handler();
    let source: Box<dyn crate::nonce_exchange::NonceSource> = if args.nonce_exchange {
        Box::new(crate::nonce_exchange::StdioExchange::within(
            std::time::Duration::from_secs(args.nonce_timeout),
        ))
    } else {
        Box::new(crate::nonce_exchange::Fixed(nonce.clone()))
    };
    let out = match run_job_for_key(&args.job, source, opts) {
        Ok(HostRun::Ran(o)) => {
            nonce.clone_from(&o.nonce);
            o
        }
        Ok(HostRun::Refused(reason)) => {
            outln!("outcome: refused");
            outln!("refused by intake on the host before launch: {reason}");
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("fenced-run run --isolation vm: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.json {
        outln!(
            "vm          {} (agent ready after {:.2} s, VM exited after {:.2} s), measurement {}",
            out.accel.as_str(),
            out.ready.as_secs_f64(),
            out.total.as_secs_f64(),
            hex::encode(out.measurement)
        );
    }
    print_dialer_log(&out.dialer_log);
    if let Some(c) = &out.cut {
        eprintln!("host cut: {}", attestation::text::escape(c));
    }
    super::run::print_verdict(&out.verdict, args.json);
    if let Some(path) = &args.evidence {
        if let Err(e) = std::fs::write(path, &out.evidence_bytes) {
            eprintln!("fenced-run run: --evidence {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if out.verdict.judged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The host dialer's log on stderr, one line per connection attempt (the guest's egress log is in the verdict).
pub fn print_dialer_log(log: &[dialer::DialerRecord]) {
    for r in log.iter().filter(|r| r.event != "close") {
        eprintln!(
            "host dialer {} {}: {}",
            r.event,
            attestation::text::escape(&r.request),
            attestation::text::escape(&r.reason)
        );
    }
}
