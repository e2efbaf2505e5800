//! The `vm` tier's launcher: boots the guest image in QEMU, speaks the host side of the job channel
//! (guest::channel), answers the guest's report request with the host's sim PSP, and brings the evidence back.
//!
//! Every step has a deadline (boot to the agent's hello, the attestation exchange, intake, the install phase,
//! the cut, the test phase, the shutdown) and is shown by [`progress`]; whatever happens (error, timeout,
//! Ctrl-C) the QEMU process and every host dialer are killed and waited for, and the VM's directory (channel
//! socket, console log, dialer log) removed, by [`Vm`]'s `Drop`.

pub mod bundle;
pub mod confidential;
pub mod dialer;
pub mod progress;
pub mod qemu;
pub mod qmp;

use attestation::evidence::Evidence;
use attestation::sim::{SimPsp, SimSnpTee};
use attestation::snp::Product;
use attestation::tee::Tee;
use attestation::verdict::Verdict;
use guest::channel::{self, BundleKind, ChannelError, Frame, FrameType, JobHeader};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Deadlines of one VM run.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// From spawning QEMU to the agent's hello.
    pub boot: Duration,
    /// From the job header to the guest asking for the bundle (the report exchange).
    pub attest: Duration,
    /// From sending the bundle to the install phase's start (the guest's intake and repository preparation).
    pub intake: Duration,
    /// From the install phase's start to the guest's `Cut`.
    pub install: Duration,
    /// From the cut (or, without an install phase, the end of intake's budget) to the evidence.
    pub test: Duration,
    /// From the acknowledgement to QEMU's exit.
    pub shutdown: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            boot: Duration::from_secs(90),
            attest: Duration::from_secs(60),
            intake: Duration::from_secs(120),
            install: Duration::from_secs(660),
            test: Duration::from_secs(660),
            shutdown: Duration::from_secs(30),
        }
    }
}

impl Timeouts {
    /// The job's own phase budgets plus `slack` each for the fence's set-up and teardown under TCG.
    pub fn for_job(install_s: Option<u64>, test_s: u64, slack: Duration) -> Timeouts {
        Timeouts {
            install: Duration::from_secs(install_s.unwrap_or(0)) + slack,
            test: Duration::from_secs(test_s) + slack,
            ..Timeouts::default()
        }
    }
}

/// A fault the host injects on the channel (tests of the guest's and host's error paths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// None: the normal protocol.
    #[default]
    None,
    /// Garbage bytes instead of the job header.
    GarbageHeader,
    /// The bundle frame cut off halfway, then the channel closed.
    TruncatedBundle,
}

/// How to launch.
#[derive(Clone, Debug)]
pub struct VmOptions {
    /// The image directory (`fenced-run image build --out DIR`).
    pub image: PathBuf,
    /// vCPUs (2: multi-threaded TCG runs jobs about twice as fast as 1).
    pub vcpus: u32,
    /// Guest memory in MiB.
    pub memory_mib: u64,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// Injected fault (tests).
    pub fault: Fault,
    /// Where the VM's directory is made (the system's temporary directory when `None`).
    pub work_parent: Option<PathBuf>,
    /// The job has an install phase (its deadlines and the `Cut` are expected).
    pub install: bool,
    /// The install phase's network: the program run as the host dialer (`fenced-run`, which has the hidden
    /// `vm-dialer` subcommand); `None` gives the VM no network device.
    pub dialer: Option<PathBuf>,
    /// Test-only mappings the dialer applies (allowlisted `*.example` names to a loopback server).
    pub dialer_map: Vec<dialer::TestMap>,
    /// The operator's `[egress]` settings: the dialer applies them, the guest records them in the verdict.
    pub egress: job_policy::egress::OperatorEgress,
    /// How progress is shown on stderr.
    pub progress: progress::Mode,
    /// An SEV-SNP or TDX launch (host::vm::confidential); `None` for the `vm` tier.
    pub confidential: Option<confidential::Confidential>,
    /// A task bundle's environment image (stage 6, `host::task`): attached as the guest's disk instead of the
    /// image's toolchain disk, its parameters on the measured command line instead of the toolchains'.
    pub environment: Option<VmEnvironment>,
}

/// A task's environment as the VM gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmEnvironment {
    /// The erofs with its dm-verity hash tree.
    pub disk: PathBuf,
    /// The kernel command-line parameters naming it (`host::task::BuiltImage::cmdline_params`).
    pub params: String,
}

/// `cmdline` with the toolchain image's parameters replaced by `env`'s (when there is one).
pub fn cmdline_with(cmdline: &str, env: Option<&VmEnvironment>) -> String {
    let Some(env) = env else {
        return cmdline.to_owned();
    };
    let mut words: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| {
            ![
                crate::image::rootfs::PARAM_TOOLCHAINS,
                crate::image::rootfs::PARAM_VERITY,
            ]
            .iter()
            .any(|p| w.strip_prefix(p).is_some_and(|r| r.starts_with('=')))
        })
        .collect();
    words.extend(env.params.split_whitespace());
    words.join(" ")
}

impl VmOptions {
    /// Defaults for `image`: 2 vCPUs, 2 GiB, `qemu-system-x86_64` from PATH.
    pub fn new(image: PathBuf) -> VmOptions {
        VmOptions {
            image,
            vcpus: 2,
            memory_mib: 2048,
            timeouts: Timeouts::default(),
            qemu: PathBuf::from("qemu-system-x86_64"),
            fault: Fault::None,
            work_parent: None,
            install: false,
            dialer: None,
            dialer_map: Vec::new(),
            egress: Default::default(),
            progress: progress::Mode::None,
            confidential: None,
            environment: None,
        }
    }
}

/// What a VM run brought back.
#[derive(Debug)]
pub struct VmRun {
    /// The evidence, as the guest sent it (CBOR).
    pub evidence_bytes: Vec<u8>,
    /// The verdict, after its signature was checked against the evidence's key.
    pub verdict: Verdict,
    /// The launch measurement the sim PSP signed (of the kernel, initramfs and command line launched).
    pub measurement: [u8; 48],
    /// Spawn to the agent's hello.
    pub ready: Duration,
    /// Spawn to QEMU's exit.
    pub total: Duration,
    /// The accelerator used.
    pub accel: qemu::Accel,
    /// Every connection the host dialer saw (empty without an install-phase network).
    pub dialer_log: Vec<dialer::DialerRecord>,
    /// Each step and how long it took.
    pub steps: Vec<(&'static str, Duration)>,
    /// What the host did at the cut (`None`: no cut, the job had no install phase).
    pub cut: Option<String>,
    /// The nonce the job header carried (the fixed one, or the one obtained for the announced key).
    pub nonce: Vec<u8>,
    /// The SHA-256 of the evidence key the guest announced before its nonce (the evidence's key hashes to it).
    pub key_sha256: [u8; 32],
}

/// The pieces the bundle is written in (between them the progress may print a "still" line): 64 MiB, about a
/// second of the channel under TCG, so that a bundle of up to 64 MiB still goes in one write.
const BUNDLE_PIECE: usize = 64 << 20;

/// How long the host waits for QEMU's answers when it removes the install network at the cut.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM end a VM run cleanly (the VM killed, its files removed) instead of killing the
/// host process with QEMU left behind.
pub fn install_interrupt_handler() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        #[allow(unsafe_code)]
        let _ = unsafe { sigaction(s, &act) };
    }
}

/// Why a `vm` tier run ended without evidence. Each variant names the step that failed; its text is the
/// message users see (ending with the guest console's tail once QEMU was running).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VmError {
    /// The run could not be prepared: the image, its kernel or initrd, the sim PSP, the VM's directory or
    /// the channel's socket.
    #[error("{0}")]
    Setup(String),
    /// QEMU could not be started, exited, or did not connect the job channel in time.
    #[error("{0}")]
    Qemu(String),
    /// The job channel failed: accepting, reading, writing, or closed early.
    #[error("{0}")]
    Channel(String),
    /// What the host waited for did not arrive from the guest within its budget; the VM was killed.
    #[error("{0}")]
    Timeout(String),
    /// The guest broke the protocol, reported that it could not produce evidence, or sent evidence that
    /// does not check.
    #[error("{0}")]
    Guest(String),
    /// The run was interrupted; the VM was killed.
    #[error("interrupted; the VM was killed")]
    Interrupted,
    /// No nonce was obtained for the key the guest announced (`--nonce-exchange`: the other side refused,
    /// answered something that is not a nonce, or closed); the VM was killed.
    #[error("{0}")]
    Nonce(String),
}

/// A running VM; dropping it kills QEMU, waits for it and removes its directory.
struct Vm {
    child: Child,
    dir: Option<tempfile::TempDir>,
    console: PathBuf,
    rx: mpsc::Receiver<Result<Frame, ChannelError>>,
    wr: UnixStream,
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.wr.shutdown(std::net::Shutdown::Both);
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if let Some(d) = &self.dir {
            // Dialers are QEMU's children but not in its process group (slirp starts each in a new session).
            dialer::cut(d.path());
        }
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
    }
}

fn console_tail(p: &Path) -> String {
    let bytes = std::fs::read(p).unwrap_or_default();
    let start = bytes.len().saturating_sub(2048);
    let t = String::from_utf8_lossy(&bytes[start..]).trim().to_string();
    if t.is_empty() {
        "(console empty)".into()
    } else {
        format!("console:\n{t}")
    }
}

impl Vm {
    fn fail(&mut self, msg: String) -> String {
        format!("{msg}\n{}", console_tail(&self.console))
    }

    /// The next frame from the guest, by `deadline`; the guest's `Progress` frames on the way go to `progress`
    /// (a malformed one is a protocol error), which also prints its "still" lines while the host waits.
    fn recv(
        &mut self,
        progress: &mut progress::Progress,
        deadline: Instant,
        budget: Duration,
        what: &str,
    ) -> Result<Frame, VmError> {
        loop {
            progress.tick();
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Ok(f)) if f.kind == FrameType::Progress => {
                    match channel::ProgressNote::decode(&f.payload) {
                        Ok(n) => progress.guest(n),
                        Err(e) => {
                            return Err(VmError::Guest(self.fail(format!(
                                "the guest's {e} (while the host waited for {what})"
                            ))))
                        }
                    }
                    continue;
                }
                Ok(Ok(f)) => return Ok(f),
                Ok(Err(e)) => {
                    return Err(VmError::Channel(
                        self.fail(format!("job channel, waiting for {what}: {e}")),
                    ))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(VmError::Channel(
                        self.fail(format!("job channel closed while waiting for {what}")),
                    ))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(VmError::Qemu(self.fail(format!(
                    "QEMU exited ({st}) while the host waited for {what}"
                ))));
            }
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err(VmError::Interrupted);
            }
            if Instant::now() > deadline {
                return Err(VmError::Timeout(self.fail(format!(
                    "{what} did not arrive from the guest within {} s; the VM was killed",
                    budget.as_secs()
                ))));
            }
        }
    }

    /// The nonce `source` gives for `key_sha256`, asked on a thread of its own so that QEMU exiting, SIGINT and
    /// `deadline` still end the wait (a source that never answers is left behind; the run ends).
    fn nonce_for(
        &mut self,
        progress: &mut progress::Progress,
        mut source: Box<dyn crate::nonce_exchange::NonceSource>,
        key_sha256: [u8; 32],
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<u8>, VmError> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(source.nonce_for(&key_sha256));
        });
        loop {
            progress.tick();
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) => {
                    return Err(VmError::Nonce(format!(
                        "no nonce for the guest's evidence key {}: {e}; the VM was killed",
                        hex::encode(key_sha256)
                    )))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(VmError::Nonce(format!(
                        "no nonce for the guest's evidence key {}: the nonce source stopped without an answer",
                        hex::encode(key_sha256)
                    )))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(VmError::Qemu(self.fail(format!(
                    "QEMU exited ({st}) while the host waited for the nonce of the guest's key"
                ))));
            }
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err(VmError::Interrupted);
            }
            if Instant::now() > deadline {
                return Err(VmError::Timeout(format!(
                    "no nonce for the guest's evidence key {} within {} s; the VM was killed",
                    hex::encode(key_sha256),
                    budget.as_secs()
                )));
            }
        }
    }

    /// Sends the Bundle frame in pieces of [`BUNDLE_PIECE`], so that the progress shows "still" lines while a
    /// large bundle goes out (the frame on the wire is the same as [`channel::write_frame`]'s).
    fn send_bundle(
        &mut self,
        bytes: &[u8],
        progress: &mut progress::Progress,
    ) -> Result<(), VmError> {
        let len = u32::try_from(bytes.len())
            .ok()
            .filter(|&l| l <= FrameType::Bundle.max_len())
            .ok_or_else(|| {
                VmError::Setup(format!(
                    "the bundle has {} bytes; the channel carries at most {}",
                    bytes.len(),
                    FrameType::Bundle.max_len()
                ))
            })?;
        let io = |e: std::io::Error| VmError::Channel(format!("job channel, sending Bundle: {e}"));
        let mut head = [0u8; 5];
        head[0] = FrameType::Bundle as u8;
        head[1..].copy_from_slice(&len.to_be_bytes());
        self.wr.write_all(&head).map_err(io)?;
        for piece in bytes.chunks(BUNDLE_PIECE) {
            self.wr.write_all(piece).map_err(io)?;
            progress.tick();
        }
        self.wr.flush().map_err(io)
    }

    fn send(&mut self, kind: FrameType, payload: &[u8]) -> Result<(), VmError> {
        channel::write_frame(&mut self.wr, kind, payload)
            .map_err(|e| VmError::Channel(format!("job channel, sending {kind:?}: {e}")))
    }
}

/// Boots the image, runs the bundle (`kind`, `bytes`) with `nonce`, and returns the evidence.
pub fn run(
    kind: BundleKind,
    bytes: &[u8],
    nonce: &[u8],
    opts: &VmOptions,
) -> Result<VmRun, VmError> {
    run_for_key(
        kind,
        bytes,
        Box::new(crate::nonce_exchange::Fixed(nonce.to_vec())),
        opts,
    )
}

/// [`run`] with the nonce obtained from `source` for the evidence key the guest announces (`KeyAnnounce`,
/// right after its hello): `source` gets the key's SHA-256 and must answer within the attest budget.
pub fn run_for_key(
    kind: BundleKind,
    bytes: &[u8],
    source: Box<dyn crate::nonce_exchange::NonceSource>,
    opts: &VmOptions,
) -> Result<VmRun, VmError> {
    let mut p = progress::Progress::new(opts.progress);
    let r = run_steps(kind, bytes, source, opts, &mut p);
    match &r {
        Ok(_) => p.finish(None),
        Err(e) => p.finish(Some(e.to_string().lines().next().unwrap_or_default())),
    }
    r.map(|mut out| {
        out.steps = p.done.clone();
        out
    })
}

/// The host dialer's command line for QEMU's guestfwd.
fn dialer_command(
    program: &Path,
    dir: &Path,
    map: &[dialer::TestMap],
    egress: &job_policy::egress::OperatorEgress,
) -> String {
    let mut cmd = format!(
        "{} vm-dialer --state {}",
        qemu::quote_cmd_word(&program.display().to_string()),
        qemu::quote_cmd_word(&dir.display().to_string())
    );
    for m in map {
        cmd.push_str(&format!(
            " --test-map {}",
            qemu::quote_cmd_word(&format!("{}:{}={}", m.host, m.port, m.to))
        ));
    }
    for n in egress.allow_networks.entries() {
        cmd.push_str(&format!(" --allow-network {}", qemu::quote_cmd_word(&n)));
    }
    if let Some(u) = &egress.upstream_proxy {
        cmd.push_str(&format!(
            " --upstream-proxy {}",
            qemu::quote_cmd_word(&u.url())
        ));
    }
    cmd
}

/// The key hash of the guest's second frame, which must be `KeyAnnounce` of exactly 32 bytes; else what arrived.
fn announced_key(f: &Frame) -> Result<[u8; 32], String> {
    if f.kind != FrameType::KeyAnnounce {
        return Err(format!(
            "the guest sent a {:?} frame ({} bytes) after its hello, not the KeyAnnounce of its evidence key",
            f.kind,
            f.payload.len()
        ));
    }
    channel::decode_key_announce(&f.payload).map_err(|e| format!("the guest's {e}"))
}

/// Checks that the evidence's key is the one whose hash the guest announced before it had its nonce.
fn check_announced(evidence: &Evidence, announced: &[u8; 32]) -> Result<(), String> {
    let got = attestation::pool_ledger::key_sha256(&evidence.key());
    if &got != announced {
        return Err(format!(
            "the guest's evidence is sealed with a key whose SHA-256 is {}, not the {} it announced before its nonce",
            hex::encode(got),
            hex::encode(announced)
        ));
    }
    Ok(())
}

fn run_steps(
    kind: BundleKind,
    bytes: &[u8],
    source: Box<dyn crate::nonce_exchange::NonceSource>,
    opts: &VmOptions,
    progress: &mut progress::Progress,
) -> Result<VmRun, VmError> {
    progress.step("boot", "starting QEMU");
    let manifest =
        crate::image::Manifest::load(&opts.image).map_err(|e| VmError::Setup(e.to_string()))?;
    // The confidential tiers boot the bzImage through OVMF (what kernel-hashes measures); the vm tier boots
    // the PVH kernel where the image has one.
    let kernel_path = match opts.confidential {
        Some(_) => opts.image.join(crate::image::KERNEL_FILE),
        None => crate::image::vm_kernel_path(&opts.image, &manifest),
    };
    let initrd_path = opts.image.join(crate::image::INITRAMFS_FILE);
    let cmdline = cmdline_with(&manifest.cmdline.value, opts.environment.as_ref());
    let own_cmdline = opts.environment.is_some();
    // The sim PSP attests what is launched: these files' bytes, whatever the manifest says. Hashing them (73 MB)
    // and opening the PSP's keys run beside QEMU's boot; the guest asks for its report only after its hello.
    let attester = {
        let (kernel_path, initrd_path, cmdline) =
            (kernel_path.clone(), initrd_path.clone(), cmdline.clone());
        let (image, vm) = (opts.image.clone(), manifest.measurements.vm.clone());
        std::thread::spawn(move || -> Result<(SimSnpTee, [u8; 48]), String> {
            let kernel = std::fs::read(&kernel_path)
                .map_err(|e| format!("{}: {e}", kernel_path.display()))?;
            let initrd = std::fs::read(&initrd_path)
                .map_err(|e| format!("{}: {e}", initrd_path.display()))?;
            let measurement = measurements::sim::vm_launch_measurement(&kernel, &initrd, &cmdline);
            if hex::encode(measurement) != vm && !own_cmdline {
                eprintln!(
                    "fenced-run: warning: {} differs from its manifest; the evidence will carry the measurement \
                     of what is launched",
                    image.display()
                );
            }
            let psp = SimPsp::open_default(Product::Milan).map_err(|e| format!("sim PSP: {e}"))?;
            Ok((SimSnpTee::new(psp, measurement), measurement))
        })
    };

    let mut builder = tempfile::Builder::new();
    builder.prefix("fenced-run-vm-");
    let dir = match &opts.work_parent {
        Some(p) => builder.tempdir_in(p),
        None => builder.tempdir(),
    }
    .map_err(|e| VmError::Setup(format!("cannot create the VM's directory: {e}")))?;
    let sock = dir.path().join("job.sock");
    let console = dir.path().join("console.log");
    let sock_err = |e: std::io::Error| VmError::Setup(format!("{}: {e}", sock.display()));
    let listener = UnixListener::bind(&sock).map_err(sock_err)?;
    listener.set_nonblocking(true).map_err(sock_err)?;
    let accel = qemu::choose_accel(Path::new("/sys/module"), Path::new("/dev/kvm"));
    let network = opts.install && opts.dialer.is_some();
    let launch = qemu::Launch {
        kernel: kernel_path,
        initrd: initrd_path,
        cmdline,
        channel: sock.clone(),
        console: console.clone(),
        vcpus: opts.vcpus,
        memory_mib: opts.memory_mib,
        accel,
        dialer: match (&opts.dialer, network) {
            (Some(d), true) => Some(dialer_command(
                d,
                dir.path(),
                &opts.dialer_map,
                &opts.egress,
            )),
            _ => None,
        },
        qmp: network.then(|| dir.path().join(qmp::SOCKET_FILE)),
        bios: qemu::fast_firmware(&opts.qemu),
        disk: match &opts.environment {
            Some(env) => Some(env.disk.clone()),
            None => manifest
                .toolchains
                .as_ref()
                .map(|t| opts.image.join(&t.image.file)),
        },
    };
    // The bundle's SHA-256 for the job header, and the job's digest the launch carries (SEV-SNP HOST_DATA, TDX
    // MRCONFIGID, the sim PSP's HOST_DATA): the agent refuses a header whose digest is not the launch's.
    let bundle_sha256: [u8; 32] = Sha256::digest(bytes).into();
    let job_digest = attestation::transcript::job_launch_digest(&bundle_sha256);
    let start = Instant::now();
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(&opts.qemu);
    cmd.args(confidential::with_job_digest(
        confidential::launch_args(&launch, opts.confidential.as_ref()),
        opts.confidential.as_ref(),
        &job_digest,
    ))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .process_group(0);
    {
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(|e| {
        VmError::Qemu(format!(
            "cannot start {}: {e} (install qemu-system-x86)",
            opts.qemu.display()
        ))
    })?;

    // Accept QEMU's connection to the channel.
    let boot_deadline = start + opts.timeouts.boot;
    let stream = loop {
        progress.tick();
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(VmError::Channel(format!("job channel: accept: {e}")));
            }
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || INTERRUPTED.load(Ordering::SeqCst) || Instant::now() > boot_deadline
        {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return Err(match exited {
                Some(st) => VmError::Qemu(format!(
                    "QEMU exited ({st}) before connecting the job channel: {}",
                    err.trim()
                )),
                None if INTERRUPTED.load(Ordering::SeqCst) => VmError::Interrupted,
                None => VmError::Qemu(format!(
                    "QEMU did not connect the job channel within {} s",
                    opts.timeouts.boot.as_secs()
                )),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(listener);
    stream
        .set_nonblocking(false)
        .map_err(|e| VmError::Channel(format!("job channel: {e}")))?;
    let mut rd = stream
        .try_clone()
        .map_err(|e| VmError::Channel(format!("job channel: {e}")))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        let f = channel::read_frame(&mut rd, "a frame from the guest");
        let end = f.is_err();
        if tx.send(f).is_err() || end {
            break;
        }
    });
    let mut vm = Vm {
        child,
        dir: Some(dir),
        console,
        rx,
        wr: stream,
    };

    let hello = vm.recv(
        progress,
        boot_deadline,
        opts.timeouts.boot,
        "the agent's hello",
    )?;
    if hello.kind != FrameType::Hello || hello.payload != channel::PROTOCOL {
        return Err(VmError::Guest(vm.fail(format!(
            "the guest's first frame is {:?} {}, not the hello of {}",
            hello.kind,
            attestation::text::escape(&String::from_utf8_lossy(
                &hello.payload[..hello.payload.len().min(64)]
            )),
            String::from_utf8_lossy(channel::PROTOCOL)
        ))));
    }
    let ready = start.elapsed();
    // The guest's evidence key exists before its nonce: its hash comes next, then the nonce is obtained for it.
    progress.step(
        "attest",
        "the guest's evidence key, its nonce, then its report request",
    );
    let key_budget = opts.timeouts.attest;
    let key_deadline = Instant::now() + key_budget;
    let announce = vm.recv(
        progress,
        key_deadline,
        key_budget,
        "the guest's KeyAnnounce",
    )?;
    let key_sha256 = announced_key(&announce).map_err(|e| VmError::Guest(vm.fail(e)))?;
    let nonce = vm.nonce_for(progress, source, key_sha256, key_deadline, key_budget)?;
    let nonce = nonce.as_slice();
    let (tee, measurement) = match attester.join() {
        Ok(Ok((t, m))) => (t.with_host_data(job_digest), m),
        Ok(Err(e)) => return Err(VmError::Setup(vm.fail(e))),
        Err(_) => {
            return Err(VmError::Setup(
                vm.fail("the sim PSP's thread panicked".into()),
            ))
        }
    };
    let header = JobHeader {
        kind,
        nonce: nonce.to_vec(),
        bundle_sha256,
        bundle_len: bytes.len() as u64,
        egress: opts.egress.clone(),
    };
    if opts.fault == Fault::GarbageHeader {
        vm.wr
            .write_all(b"\x42\x00\x00\x00\x04junk")
            .map_err(|e| VmError::Channel(format!("job channel: {e}")))?;
    } else {
        vm.send(FrameType::JobHeader, &header.encode())?;
    }
    let t = opts.timeouts;
    let mut deadline = Instant::now() + t.attest;
    let mut budget = t.attest;
    let mut what = "the report request or bundle request";
    let mut cut_note: Option<String> = None;
    let evidence_bytes = loop {
        let f = vm.recv(progress, deadline, budget, what)?;
        match f.kind {
            FrameType::ReportRequest => {
                let rd: [u8; 64] = match f.payload.as_slice().try_into() {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(VmError::Guest(vm.fail(format!(
                            "the guest's report request has {} bytes, not 64",
                            f.payload.len()
                        ))))
                    }
                };
                // A confidential guest's report comes from its own PSP or TDX module, never from the sim.
                let report = match opts.confidential {
                    Some(_) => Err(attestation::tee::TeeError::Unsupported(
                        "the host's sim PSP does not attest a confidential launch".into(),
                    )),
                    None => tee.get_report(&rd),
                };
                match report {
                    Ok(raw) => vm.send(
                        FrameType::Report,
                        &channel::encode_report(&raw.report, &raw.certs),
                    )?,
                    Err(e) => {
                        let why = format!("sim PSP: {e}");
                        vm.send(FrameType::ReportFailure, why.as_bytes())?;
                    }
                }
            }
            FrameType::BundleRequest => {
                if opts.fault == Fault::TruncatedBundle {
                    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                    let mut head = vec![FrameType::Bundle as u8];
                    head.extend_from_slice(&len.to_be_bytes());
                    let _ = vm.wr.write_all(&head);
                    let _ = vm.wr.write_all(&bytes[..bytes.len() / 2]);
                    let _ = vm.wr.shutdown(std::net::Shutdown::Write);
                } else {
                    progress.step("transfer", "sending the bundle to the guest");
                    // A guest that stops reading must not hold the host in `write` forever.
                    vm.wr
                        .set_write_timeout(Some(t.intake))
                        .map_err(|e| VmError::Channel(format!("job channel: {e}")))?;
                    vm.send_bundle(bytes, progress)?;
                    let _ = vm.wr.set_write_timeout(None);
                }
                if opts.install {
                    progress.step("intake", "intake and repository preparation in the guest");
                    budget = t.intake;
                    what = "the install phase's start";
                } else {
                    progress.step("test", "intake, then the test phase in the guest");
                    budget = t.intake + t.test;
                    what = "the evidence";
                }
                deadline = Instant::now() + budget;
            }
            FrameType::InstallStart if opts.install && what == "the install phase's start" => {
                progress.step(
                    "install",
                    if network {
                        "the install phase, network through the host dialer"
                    } else {
                        "the install phase, no network device"
                    },
                );
                budget = t.install;
                deadline = Instant::now() + budget;
                what = "the end of the install phase";
            }
            FrameType::Cut if cut_note.is_none() => {
                progress.step("cut", "cutting the install network");
                let killed = vm.dir.as_ref().map_or(0, |d| dialer::cut(d.path()));
                let netdev = match &launch.qmp {
                    Some(q) => match qmp::netdev_del(q, qmp::NETDEV_ID, QMP_TIMEOUT) {
                        Ok(()) => format!(
                            "QEMU's install network removed (QMP netdev_del {})",
                            qmp::NETDEV_ID
                        ),
                        Err(e) => format!("QEMU's install network NOT removed: {e}"),
                    },
                    None => "no install network device".to_string(),
                };
                let said = format!(
                    "{netdev}; the host refuses every further dialer connection; {killed} running dialer(s) killed"
                );
                cut_note = Some(said.clone());
                vm.send(FrameType::CutDone, said.as_bytes())?;
                progress.step("test", "the test phase in the guest, no network");
                budget = t.test;
                deadline = Instant::now() + budget;
                what = "the evidence";
            }
            FrameType::Evidence => break f.payload,
            FrameType::Failure => {
                return Err(VmError::Guest(vm.fail(format!(
                    "the guest agent could not produce evidence: {}",
                    attestation::text::escape(&String::from_utf8_lossy(&f.payload))
                ))))
            }
            other => {
                return Err(VmError::Guest(vm.fail(format!(
                    "unexpected {other:?} frame from the guest while waiting for {what}"
                ))))
            }
        }
    };
    progress.step("shutdown", "checking the evidence, the guest powers off");
    // Whatever the guest did, the install network is over once the evidence is here.
    let dialer_log = match &vm.dir {
        Some(d) => {
            dialer::cut(d.path());
            dialer::read_log(d.path())
        }
        None => Vec::new(),
    };
    let evidence = Evidence::from_cbor(&evidence_bytes).map_err(|e| {
        VmError::Guest(vm.fail(format!("the guest's evidence does not parse: {e}")))
    })?;
    let verdict = evidence
        .verify_verdict_signature()
        .map_err(|e| VmError::Guest(vm.fail(format!("the guest's evidence: {e}"))))?;
    if verdict.inputs.nonce != nonce {
        return Err(VmError::Guest(vm.fail(
            "the guest's verdict carries another nonce than the one sent".into(),
        )));
    }
    check_announced(&evidence, &key_sha256).map_err(|e| VmError::Guest(vm.fail(e)))?;
    vm.send(FrameType::Ack, b"")?;
    let shutdown_deadline = Instant::now() + opts.timeouts.shutdown;
    loop {
        progress.tick();
        if let Ok(Some(_)) = vm.child.try_wait() {
            break;
        }
        if Instant::now() > shutdown_deadline || INTERRUPTED.load(Ordering::SeqCst) {
            eprintln!(
                "fenced-run: the guest did not power off within {} s; killed",
                opts.timeouts.shutdown.as_secs()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let total = start.elapsed();
    drop(vm);
    Ok(VmRun {
        evidence_bytes,
        verdict,
        measurement,
        ready,
        total,
        accel,
        dialer_log,
        steps: Vec::new(),
        cut: cut_note,
        nonce: nonce.to_vec(),
        key_sha256,
    })
}

#[cfg(test)]
mod environment_tests {
    use super::*;

    #[test]
    fn a_task_environment_replaces_the_toolchain_parameters_on_the_command_line() {
        let base = "console=ttyS0 fenced_run.toolchains=python fenced_run.verity=1,ab,cd quiet";
        assert_eq!(cmdline_with(base, None), base);
        let env = VmEnvironment {
            disk: PathBuf::from("/x.erofs"),
            params: "fenced_run.toolchains=task fenced_run.verity=2,ef,cd fenced_run.task_image=sha256:00"
                .into(),
        };
        assert_eq!(
            cmdline_with(base, Some(&env)),
            "console=ttyS0 quiet fenced_run.toolchains=task fenced_run.verity=2,ef,cd fenced_run.task_image=sha256:00"
        );
    }
}

#[cfg(test)]
mod key_announce_tests {
    use super::*;

    fn frame(kind: FrameType, payload: &[u8]) -> Frame {
        Frame {
            kind,
            payload: payload.to_vec(),
        }
    }

    /// After its hello the guest must announce its key: anything else (a guest that skips KeyAnnounce and asks
    /// for its report or the bundle, a second hello, a failure) is a guest error naming the frame; a KeyAnnounce
    /// of another length than a SHA-256 is named with its length.
    #[test]
    fn the_frame_after_the_hello_must_be_a_key_announce_of_32_bytes() {
        assert_eq!(
            announced_key(&frame(FrameType::KeyAnnounce, &[0x5a; 32])).expect("a key hash"),
            [0x5a; 32]
        );
        for (kind, payload) in [
            (FrameType::ReportRequest, &[0u8; 64][..]),
            (FrameType::BundleRequest, &[][..]),
            (FrameType::Hello, channel::PROTOCOL),
            (FrameType::Failure, b"no key".as_slice()),
        ] {
            let e = announced_key(&frame(kind, payload)).expect_err("not a KeyAnnounce");
            assert!(
                e.contains(&format!("{kind:?} frame ({} bytes)", payload.len()))
                    && e.contains("not the KeyAnnounce"),
                "{e}"
            );
        }
        for len in [0, 31, 33, 64] {
            let e = announced_key(&frame(FrameType::KeyAnnounce, &vec![1; len]))
                .expect_err("wrong length");
            assert!(
                e.contains("KeyAnnounce") && e.contains(&format!("{len} bytes")),
                "{e}"
            );
        }
    }

    /// The evidence must be sealed with the key whose hash was announced before the nonce.
    #[test]
    fn the_evidence_key_must_be_the_announced_one() {
        let state = tempfile::tempdir().expect("tmp");
        let psp = SimPsp::new(state.path(), Product::Milan).expect("sim psp");
        let tee = SimSnpTee::new(psp, [7u8; 48]);
        let nonce = vec![0x33; 32];
        let keyed = attestation::session::KeyFirst::new();
        let announced = keyed.key_sha256();
        let session = keyed.begin(&tee, &nonce).expect("session");
        let verdict = Verdict::new(
            attestation::verdict::Outcome::TestsPassed,
            attestation::verdict::Isolation::Vm,
            attestation::verdict::Inputs {
                nonce,
                ..Default::default()
            },
            "test",
        );
        let evidence = session.seal(&verdict).expect("seal");
        check_announced(&evidence, &announced).expect("the announced key");
        let other = attestation::session::KeyFirst::new().key_sha256();
        let e = check_announced(&evidence, &other).expect_err("another key");
        assert!(
            e.contains(&hex::encode(announced)) && e.contains(&hex::encode(other)),
            "{e}"
        );
    }
}
