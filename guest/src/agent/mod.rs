//! The guest agent as PID 1 of the `vm` tier: set up the guest, make the ephemeral evidence key and announce its
//! hash (`KeyAnnounce`), take the job header (its nonce) over the channel, get the report binding key and nonce
//! **before** any byte of the job is unpacked, then run intake and the fence exactly as the process tier
//! does, send the sealed evidence back, wait for the host's acknowledgement and power off.
//!
//! Every failure of the agent's own after the report ends in evidence (`refused` or `environment_exhausted`
//! with the reason); before the report there is no key to sign with, so the agent sends a `Failure` frame and
//! prints the reason on the console. A panic prints its message on the console and powers the VM off.

pub mod init;
pub mod net;
pub mod progress;
pub mod tee;
pub mod verity;

use crate::channel::{self, ChannelError, FrameType, JobHeader};
use crate::fence::input::run_input;
use crate::fence::run::{RunOptions, TaskImage, ToolchainRoot, AGENT_VERSION};
use attestation::session::KeyFirst;
use attestation::verdict::{Finding, Inputs, Isolation, Outcome, Verdict};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The argument `/init` is re-executed with once it runs from the new root.
pub const SWITCHED_ARG: &str = "--fenced-run-switched";
/// How long the agent waits for the port to appear and for the host's acknowledgement.
const PORT_WAIT: Duration = Duration::from_secs(20);
const ACK_WAIT: Duration = Duration::from_secs(60);

fn console(msg: &str) {
    eprintln!("guest-agent: {msg}");
}

/// PID 1's entry point; never returns.
pub fn pid1_main(args: &[String]) -> ! {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("guest-agent: PANIC: {info}; powering off");
        init::power_off();
    }));
    if !args.iter().any(|a| a == SWITCHED_ARG) {
        init::mark("/init started");
        let agent = match init::stage1() {
            Ok(fd) => fd,
            Err(e) => {
                console(&format!("set-up failed: {e}; powering off"));
                init::power_off();
            }
        };
        let err = exec_self(&agent);
        console(&format!(
            "re-executing /init in the new root: {err}; powering off"
        ));
        init::power_off();
    }
    let notes = init::stage2();
    let port = match open_port() {
        Ok(p) => p,
        Err(e) => {
            console(&format!("job channel: {e}; powering off"));
            init::power_off();
        }
    };
    if let Err(e) = serve(port, notes) {
        console(&format!("{e}; powering off"));
    }
    init::power_off();
}

/// Re-executes the agent from `agent` (its file, opened before the move) with [`SWITCHED_ARG`]; returns why
/// that failed.
fn exec_self(agent: &std::os::fd::OwnedFd) -> String {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let Ok(switched) = CString::new(SWITCHED_ARG) else {
        return "the switch argument holds a NUL byte".to_string();
    };
    let args = [c"/init".to_owned(), switched];
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    match nix::unistd::fexecve(agent.as_raw_fd(), &args, &env) {
        Err(e) => format!("fexecve: {e}"),
        Ok(never) => match never {},
    }
}

/// Finds the virtio-serial port named [`channel::PORT_NAME`] and opens it.
fn open_port() -> Result<File, String> {
    let deadline = std::time::Instant::now() + PORT_WAIT;
    loop {
        if let Ok(rd) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in rd.filter_map(Result::ok) {
                let name = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if name.trim() == channel::PORT_NAME {
                    let dev = Path::new("/dev").join(e.file_name());
                    if dev.exists() {
                        return std::fs::OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(&dev)
                            .map_err(|e| format!("open {}: {e}", dev.display()));
                    }
                }
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "no virtio-serial port named {} after {} s",
                channel::PORT_NAME,
                PORT_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The protocol after set-up. `Err` only where no evidence can be sent.
fn serve(port: File, notes: Result<Vec<String>, String>) -> Result<(), String> {
    let mut rd = port.try_clone().map_err(|e| format!("job channel: {e}"))?;
    let mut wr = port.try_clone().map_err(|e| format!("job channel: {e}"))?;
    let ch = |e: ChannelError| format!("job channel: {e}");
    // The report backend is chosen first (nothing is asked of it yet): on TDX the transcript's events are
    // extended into RTMR3 from the first one (docs/transcript.md).
    let selected = tee::select(&port);
    let recorder = match &selected {
        Ok((t, _)) if t.label() == attestation::evidence::TeeLabel::Tdx => {
            tee::rtmr3_recorder().unwrap_or_default()
        }
        _ => attestation::transcript::Recorder::new(),
    };
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    recorder.record(attestation::transcript::Event::AgentReady {
        agent_version: AGENT_VERSION.to_owned(),
        image: verity::params(&cmdline).ok().flatten().map(|p| p.root_hash),
    });
    progress::send(&mut wr, FrameType::Hello, channel::PROTOCOL).map_err(ch)?;
    init::mark("the job channel is open; Hello sent (agent ready)");
    // The evidence key exists before the nonce: its hash goes to the host, which obtains the nonce for it (a
    // hosted pool issues one per key and records it, docs/pool.md); the same key is bound and seals below.
    let keyed = KeyFirst::new();
    progress::send(&mut wr, FrameType::KeyAnnounce, &keyed.key_sha256()).map_err(ch)?;
    init::mark("KeyAnnounce sent");
    let fail = |wr: &mut File, why: String| {
        let _ = progress::send(wr, FrameType::Failure, why.as_bytes());
        why
    };
    let header = match channel::expect_frame(&mut rd, FrameType::JobHeader, "the job header")
        .and_then(|p| JobHeader::decode(&p))
    {
        Ok(h) => h,
        Err(e) => return Err(fail(&mut wr, format!("job header: {e}"))),
    };
    recorder.record(attestation::transcript::Event::JobHeader {
        nonce: header.nonce.clone(),
        job_sha256: None,
        bundle_sha256: Some(hex::encode(header.bundle_sha256)),
    });
    // The report, before any byte of the job is read: a real TEE if this guest has one, else the host's sim PSP.
    let (backend, which) = match selected {
        Ok(b) => b,
        Err(e) => return Err(fail(&mut wr, e)),
    };
    console(&format!("report backend: {which}"));
    let session = match keyed.begin_recorded(backend.as_ref(), &header.nonce, Some(&recorder)) {
        Ok(s) => s,
        Err(e) => return Err(fail(&mut wr, format!("attestation: {e}"))),
    };
    let inputs = Inputs {
        commit: None,
        tree: None,
        patch_sha256: None,
        job_sha256: None,
        nonce: header.nonce.clone(),
        protect: Vec::new(),
        test_tree: None,
    };
    // The job is part of the launch: a header whose digest is not the report's HOST_DATA (MRCONFIGID) is refused
    // before any byte of the bundle is asked for.
    let launch = launch_digest_refusal(
        session.label().is_snp(),
        &session.raw().report,
        &header.bundle_sha256,
    );
    let verdict = match notes {
        Err(e) => exhausted(inputs, "agent", &format!("guest set-up: {e}")),
        Ok(_) if launch.is_some() => {
            refused(inputs, "receive", launch.as_deref().unwrap_or_default())
        }
        Ok(notes) => {
            let mut v = receive_and_run(&mut rd, &header, inputs, &recorder);
            for n in notes {
                v.findings.push(agent_finding("module", n));
            }
            v
        }
    };
    // The verdict event, then the anchor: a second report over the transcript's hash and the verdict's.
    let evidence = session
        .seal_anchored(backend.as_ref(), &verdict, &recorder)
        .map_err(|e| e.to_string())
        .and_then(|(ev, why)| {
            if let Some(why) = why {
                console(&format!("the transcript's anchor: {why}"));
            }
            ev.to_cbor().map_err(|e| e.to_string())
        });
    let bytes = match evidence {
        Ok(b) => b,
        Err(e) => return Err(fail(&mut wr, format!("sealing the evidence: {e}"))),
    };
    progress::send(&mut wr, FrameType::Evidence, &bytes).map_err(ch)?;
    console(&format!(
        "evidence sent ({} bytes, outcome {})",
        bytes.len(),
        verdict.outcome.as_str()
    ));
    wait_ack(&port, &mut rd)
}

/// Why the job header does not belong to this launch, if it does not: the job's launch digest
/// ([`attestation::transcript::job_launch_digest`] of the header's bundle SHA-256) must be the report's HOST_DATA
/// (SEV-SNP, real or sim) or the first 32 bytes of its MRCONFIGID (TDX, the last 16 zero).
pub fn launch_digest_refusal(snp: bool, report: &[u8], bundle_sha256: &[u8; 32]) -> Option<String> {
    let want = attestation::transcript::job_launch_digest(bundle_sha256);
    let field = if snp { "HOST_DATA" } else { "MRCONFIGID" };
    match attestation::transcript::launch_job_field(snp, report) {
        Some(f) if f == want => None,
        Some(f) => Some(format!(
            "the job header's launch digest {} is not the report's {field} {}: this guest was launched for \
             another job (or by a host that does not put the job into the launch)",
            hex::encode(want),
            hex::encode(f)
        )),
        None => Some(format!(
            "the report's {field} cannot be read as a job's launch digest (TDX: MRCONFIGID's last 16 bytes must be \
             zero)"
        )),
    }
}

fn agent_finding(kind: &str, detail: String) -> Finding {
    Finding {
        stage: "agent".into(),
        path: String::new(),
        kind: kind.into(),
        detail,
    }
}

fn refused(inputs: Inputs, stage: &str, reason: &str) -> Verdict {
    Verdict::refused(stage, reason, Isolation::Vm, inputs, AGENT_VERSION)
}

fn exhausted(inputs: Inputs, stage: &str, reason: &str) -> Verdict {
    let mut v = Verdict::new(
        Outcome::EnvironmentExhausted,
        Isolation::Vm,
        inputs,
        AGENT_VERSION,
    );
    v.findings.push(Finding {
        stage: stage.into(),
        path: String::new(),
        kind: "environment".into(),
        detail: reason.into(),
    });
    v
}

/// Receives the bundle, checks it against the header, and runs intake and the fence on it.
fn receive_and_run(
    rd: &mut File,
    header: &JobHeader,
    inputs: Inputs,
    recorder: &attestation::transcript::Recorder,
) -> Verdict {
    if let Err(e) = progress::send(rd, FrameType::BundleRequest, b"") {
        return refused(inputs, "receive", &format!("asking for the bundle: {e}"));
    }
    init::mark("BundleRequest sent");
    // The bundle goes straight from the channel into its file, hashed on the way (on a second thread): one pass
    // over its bytes, never held whole in memory (intake reads the file next).
    let dir = PathBuf::from("/run/fenced-run-job");
    let path = dir.join(format!("bundle.{}", header.kind.extension()));
    // A file that cannot be written still takes the whole frame off the channel (the host is writing it), then
    // the run ends `environment_exhausted`.
    let mut sink = HashingFile {
        file: None,
        error: None,
        hash: Sha256::new(),
    };
    match std::fs::create_dir_all(&dir).and_then(|()| File::create(&path)) {
        Ok(f) => sink.file = Some(f),
        Err(e) => sink.error = Some(e),
    }
    let (received, sink) = receive_pipelined(rd, sink);
    let got: [u8; 32] = sink.hash.finalize().into();
    drop(sink.file);
    if let Some(e) = sink.error {
        let _ = std::fs::remove_file(&path);
        return exhausted(
            inputs,
            "agent",
            &format!("writing the bundle to {}: {e}", path.display()),
        );
    }
    let len = match received {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return refused(
                inputs,
                "receive",
                &format!("the bundle did not arrive whole: {e}"),
            );
        }
    };
    if len != header.bundle_len {
        let _ = std::fs::remove_file(&path);
        return refused(
            inputs,
            "receive",
            &format!(
                "the bundle has {len} bytes; the job header announced {}",
                header.bundle_len
            ),
        );
    }
    if got != header.bundle_sha256 {
        let _ = std::fs::remove_file(&path);
        return refused(
            inputs,
            "receive",
            &format!(
                "the bundle's SHA-256 is {}; the job header announced {}",
                hex::encode(got),
                hex::encode(header.bundle_sha256)
            ),
        );
    }
    init::mark(&format!("the bundle received and checked ({len} bytes)"));
    // From here to the verdict the host is told the guest's phase, at once and every few seconds.
    let reporter = rd
        .try_clone()
        .ok()
        .map(|port| progress::Reporter::start(port, channel::PROGRESS_EVERY));
    let mut opts = RunOptions::new(PathBuf::from("/proc/self/exe"), header.nonce.clone());
    opts.isolation = Isolation::Vm;
    // The operator's [egress] settings the host announced: recorded in the verdict; the host dialer applies them.
    opts.operator.egress = header.egress.clone();
    // The toolchain image the measured command line names: a run never goes on without it, or on a changed one.
    let image = init::toolchain_image();
    match image {
        None => {}
        Some(Ok((p, dir))) => {
            // A task's environment when the measured command line names its image id, else toolchains.
            let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
            match verity::task_image(&cmdline) {
                Ok(Some(digest)) => {
                    opts.task_image = Some(TaskImage {
                        digest,
                        root_hash: p.root_hash,
                        dir,
                    })
                }
                Ok(None) => {
                    opts.toolchains = Some(ToolchainRoot {
                        toolchains: p.toolchains,
                        root_hash: p.root_hash,
                        dir,
                    })
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    return exhausted(inputs, "agent", &format!("task image: {e}"));
                }
            }
        }
        Some(Err(e)) => {
            let _ = std::fs::remove_file(&path);
            return exhausted(inputs, "agent", &format!("toolchain image: {e}"));
        }
    }
    let notes = Arc::new(Mutex::new(Vec::new()));
    match rd.try_clone() {
        Ok(port) => opts.proxy = Some(Arc::new(net::VmEgress::new(port, notes.clone()))),
        Err(e) => {
            opts.proxy = None;
            notes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("no install-phase network: job channel: {e}"));
        }
    }
    opts.home = Some(PathBuf::from("/root"));
    opts.on_phase = reporter.as_ref().map(progress::Reporter::hook);
    opts.transcript = Some(recorder.clone());
    // Intake again in here: the guest trusts no host.
    let mut v = match run_input(&path, &opts) {
        Ok(v) => v,
        Err(why) => refused(inputs, "receive", &format!("the bundle is unusable: {why}")),
    };
    let _ = std::fs::remove_file(&path);
    init::mark("intake and the fence done");
    // No Progress frame after this: the evidence is next on the channel.
    if let Some(r) = reporter {
        r.stop();
    }
    // A block of the image that failed verification during the run (an I/O error to whatever read it) means
    // the run did not use the measured toolchains: our side gave out, whatever the tests said.
    let verified_root = opts
        .toolchains
        .as_ref()
        .map(|t| t.root_hash.clone())
        .or_else(|| opts.task_image.as_ref().map(|t| t.root_hash.clone()));
    if let Some(root_hash) = &verified_root {
        match verity::status() {
            Ok(s) if s == "V" => {}
            Ok(s) => {
                v = corrupted(
                    v,
                    format!(
                        "toolchain image: dm-verity reported status {s:?} after the run (a block did not match \
                         root hash {}); the run did not use the measured toolchains",
                        root_hash
                    ),
                )
            }
            Err(e) => v = corrupted(v, format!("toolchain image: reading dm-verity's status: {e}")),
        }
    }
    for n in notes.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
        v.findings.push(Finding {
            stage: "install".into(),
            path: String::new(),
            kind: "network".into(),
            detail: n,
        });
    }
    v
}

/// How many chunks of the Bundle frame may wait between the reading thread and the hashing one.
const PIPELINE: usize = 4;

/// Reads the Bundle frame ([`channel::read_frame_into`]) on this thread while a second one hashes and writes
/// each chunk that arrived into `sink` (the guest has two vCPUs: under TCG the channel's reads and the hashing
/// each take a vCPU). Returns what the read said and the sink.
fn receive_pipelined(
    rd: &mut impl std::io::Read,
    mut sink: HashingFile,
) -> (Result<u64, ChannelError>, HashingFile) {
    use std::sync::mpsc;
    let (full_tx, full_rx) = mpsc::sync_channel::<Vec<u8>>(PIPELINE);
    let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            for chunk in full_rx {
                let _ = std::io::Write::write_all(&mut sink, &chunk);
                let _ = free_tx.send(chunk);
            }
            sink
        });
        let mut feed = Feed {
            full: full_tx,
            free: free_rx,
            made: 0,
        };
        let received = channel::read_frame_into(rd, FrameType::Bundle, "the bundle", &mut feed);
        drop(feed);
        let sink = worker.join().unwrap_or_else(|_| HashingFile {
            file: None,
            error: Some(std::io::Error::other(
                "the bundle's hashing thread panicked",
            )),
            hash: Sha256::new(),
        });
        (received, sink)
    })
}

/// The reading side of [`receive_pipelined`]: each write is copied into a free buffer (at most `PIPELINE + 2`
/// are made) and handed to the hashing thread.
struct Feed {
    full: std::sync::mpsc::SyncSender<Vec<u8>>,
    free: std::sync::mpsc::Receiver<Vec<u8>>,
    made: usize,
}

impl std::io::Write for Feed {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let gone = || std::io::Error::other("the bundle's hashing thread is gone");
        let mut buf = match self.free.try_recv() {
            Ok(buf) => buf,
            Err(_) if self.made < PIPELINE + 2 => {
                self.made += 1;
                Vec::with_capacity(b.len())
            }
            Err(_) => self.free.recv().map_err(|_| gone())?,
        };
        buf.clear();
        buf.extend_from_slice(b);
        self.full.send(buf).map_err(|_| gone())?;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bundle's file, hashed as it is written. It never fails a write: the first error is kept (and nothing
/// more written) so that the frame is still read to its end.
struct HashingFile {
    file: Option<File>,
    error: Option<std::io::Error>,
    hash: Sha256,
}

impl std::io::Write for HashingFile {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.hash.update(b);
        if let (Some(f), None) = (&mut self.file, &self.error) {
            if let Err(e) = std::io::Write::write_all(f, b) {
                self.error = Some(e);
                self.file = None;
            }
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `v` turned into `environment_exhausted` with `why` as a finding (its record kept).
fn corrupted(mut v: Verdict, why: String) -> Verdict {
    v.outcome = Outcome::EnvironmentExhausted;
    v.judged = true;
    v.refusal = None;
    v.findings.push(Finding {
        stage: "agent".into(),
        path: String::new(),
        kind: "environment".into(),
        detail: why,
    });
    v
}

/// Waits (bounded) for the host's `Ack`, so the evidence is not cut off by the power-off.
fn wait_ack(port: &File, rd: &mut File) -> Result<(), String> {
    use std::os::fd::AsFd;
    let mut fds = [nix::poll::PollFd::new(
        port.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = u16::try_from(ACK_WAIT.as_millis()).unwrap_or(u16::MAX);
    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
        Ok(0) => {
            return Err(format!(
                "no acknowledgement from the host within {} s",
                ACK_WAIT.as_secs()
            ))
        }
        Ok(_) => {}
        Err(e) => return Err(format!("job channel: poll: {e}")),
    }
    channel::expect_frame(rd, FrameType::Ack, "the host's acknowledgement")
        .map(|_| ())
        .map_err(|e| format!("job channel: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job whose digest is not the launch's HOST_DATA is refused; the launch's own job is not.
    #[test]
    fn a_job_digest_differing_from_host_data_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let psp = attestation::sim::SimPsp::new(dir.path(), attestation::snp::Product::Milan)
            .expect("psp");
        let bundle = [0x11; 32];
        let tee = attestation::sim::SimSnpTee::new(psp, [0; 48])
            .with_host_data(attestation::transcript::job_launch_digest(&bundle));
        let raw = attestation::tee::Tee::get_report(&tee, &[0; 64]).expect("report");
        assert_eq!(launch_digest_refusal(true, &raw.report, &bundle), None);
        let other = [0x12; 32];
        let why = launch_digest_refusal(true, &raw.report, &other).expect("refused");
        assert!(
            why.contains("HOST_DATA") && why.contains("another job"),
            "{why}"
        );
        // A report that does not parse names the field.
        let why = launch_digest_refusal(true, &[0; 10], &bundle).expect("refused");
        assert!(why.contains("HOST_DATA"), "{why}");
    }

    /// The pipelined receive writes and hashes every byte in order, across many chunks; a file that cannot be
    /// written still lets the whole frame be read, and its error is kept.
    #[test]
    fn the_bundle_is_written_and_hashed_whole_while_it_is_read() {
        let payload: Vec<u8> = (0..(channel::STREAM_CHUNK * 9 + 77))
            .map(|i| (i % 253) as u8)
            .collect();
        let mut wire = Vec::new();
        channel::write_frame(&mut wire, FrameType::Bundle, &payload).expect("frame");
        channel::write_frame(&mut wire, FrameType::Ack, b"").expect("frame");
        let d = tempfile::tempdir().expect("tmp");
        let path = d.path().join("bundle.tar");
        let sink = HashingFile {
            file: Some(File::create(&path).expect("create")),
            error: None,
            hash: Sha256::new(),
        };
        let mut r = wire.as_slice();
        let (received, sink) = receive_pipelined(&mut r, sink);
        assert_eq!(received.expect("received"), payload.len() as u64);
        assert!(sink.error.is_none());
        drop(sink.file);
        assert_eq!(
            <[u8; 32]>::from(sink.hash.finalize()),
            <[u8; 32]>::from(Sha256::digest(&payload))
        );
        assert!(std::fs::read(&path).expect("read") == payload);
        assert!(channel::expect_frame(&mut r, FrameType::Ack, "ack").is_ok());

        // No file: the frame is still read to its end (the channel stays in step), the error kept.
        let sink = HashingFile {
            file: None,
            error: Some(std::io::Error::other("read-only")),
            hash: Sha256::new(),
        };
        let mut r = wire.as_slice();
        let (received, sink) = receive_pipelined(&mut r, sink);
        assert_eq!(received.expect("drained"), payload.len() as u64);
        assert!(sink.error.is_some());
        assert!(channel::expect_frame(&mut r, FrameType::Ack, "ack").is_ok());

        // Cut short: named, with what arrived.
        let mut r = &wire[..wire.len() / 2];
        let (received, _) = receive_pipelined(
            &mut r,
            HashingFile {
                file: None,
                error: None,
                hash: Sha256::new(),
            },
        );
        assert!(matches!(
            received,
            Err(ChannelError::Truncated {
                kind: FrameType::Bundle,
                ..
            })
        ));
    }
}
