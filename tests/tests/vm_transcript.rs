//! The fence transcript in the `vm` tier, one boot: `fenced-run run --isolation vm --evidence` on a job with an
//! install and a test phase; the evidence carries the transcript the guest agent wrote (agent ready, job header
//! with the bundle's SHA-256, report requested, intake, install start, the cut, test start, test end, verdict),
//! anchored by a second sim report; the job is in the launch (the first report's HOST_DATA is the job's launch
//! digest); it verifies with `--expect-cut`, and fails once an event is removed.
//!
//! Skips with a printed reason where QEMU or the kernel (.ci/run) is missing, unless FENCED_RUN_REQUIRE_VM=1.

use attestation::evidence::Evidence;
use attestation::transcript::{self, Event, Transcript};
use std::path::Path;
use std::process::Command;
use verifier_lib::{verify_evidence_with as verify_evidence, EvidenceOptions};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
use fenced_run_tests::vm::NONCE;

#[test]
fn the_guest_agent_writes_and_anchors_the_transcript() {
    if fenced_run_tests::vm::missing(&[]).is_some() {
        return;
    }
    // An image of this build's agent (the other vm tests' shared image may be older).
    let image = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image-transcript");
    fenced_run_tests::vm::build_image(BIN, None, &image);
    let work = tempfile::tempdir().expect("tmp");
    let dir = work.path().join("job");
    std::fs::create_dir_all(dir.join("repo")).expect("mkdir");
    std::fs::write(
        dir.join("job.toml"),
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"true\"\ntimeout_seconds = 60\n\
         [test]\ncommand = \"sh t.sh\"\ntimeout_seconds = 120\n",
    )
    .expect("job");
    std::fs::write(dir.join("repo/t.sh"), "echo '3 passed, 0 failed'\n").expect("t.sh");
    let evidence = work.path().join("run.evidence");
    let o = Command::new(BIN)
        .args([
            "run",
            "--isolation",
            "vm",
            "--json",
            "--nonce",
            NONCE,
            "--image",
        ])
        .arg(&image)
        .arg("--evidence")
        .arg(&evidence)
        .arg(&dir)
        .output()
        .expect("run fenced-run run");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stdout.contains("\"tests_passed\""), "{stdout}\n{stderr}");
    assert!(!stderr.contains("the transcript's anchor"), "{stderr}");
    let ev = Evidence::from_file(&evidence).expect("evidence");
    let t = ev
        .transcript
        .clone()
        .expect("the evidence carries a transcript");
    let events = t.transcript.events().expect("events");
    let names: Vec<&str> = events.iter().map(Event::name).collect();
    assert_eq!(
        names,
        [
            "agent-ready",
            "job-header",
            "report-requested",
            "intake",
            "install-start",
            "cut",
            "test-start",
            "test-end",
            "verdict"
        ],
        "{events:?}"
    );
    let Event::JobHeader {
        bundle_sha256: Some(b),
        ..
    } = &events[1]
    else {
        panic!("the job header names no bundle: {:?}", events[1])
    };
    let bundle: [u8; 32] = hex::decode(b).expect("hex").try_into().expect("32 bytes");
    assert_eq!(
        transcript::launch_job_field(true, &ev.report),
        Some(transcript::job_launch_digest(&bundle)),
        "the first report's HOST_DATA is the job's launch digest"
    );
    assert!(t.anchor.is_some());

    let mut opts = EvidenceOptions::default();
    opts.chain.allow_simulated = true;
    opts.any_measurement = true;
    opts.nonce = Some(hex::decode(NONCE).expect("hex"));
    opts.pins.expect_cut = true;
    let v = verify_evidence(&ev, &opts);
    assert!(v.verified(), "{:?}", v.failures);
    assert!(v.transcript.anchored);

    let mut raw = t.transcript.raw().to_vec();
    raw.remove(5);
    let mut removed = ev.clone();
    if let Some(t) = &mut removed.transcript {
        t.transcript = Transcript::from_raw(raw).expect("decode");
    }
    let v = verify_evidence(&removed, &opts);
    assert!(
        v.failures.iter().any(|f| f.check == "transcript"),
        "{:?}",
        v.failures
    );
    assert!(
        v.failures.iter().any(|f| f.check == "pin-cut"),
        "{:?}",
        v.failures
    );
}
