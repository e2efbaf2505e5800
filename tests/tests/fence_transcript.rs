//! The fence transcript of process-tier runs, end to end: `fenced-run run --evidence` on a passing, a failing and
//! a budget-expired run; each evidence carries the transcript with its events present and in order (agent
//! ready, job header, report requested, intake, install start, the proxy's connections, the cut, test start,
//! test end, verdict), verifies with `--expect-cut` and `--expect-egress-only`, and fails the `transcript`
//! check once an event is removed, reordered or added. In process, an allowed connection through the proxy
//! (a loopback registry) is written as an `egress` event equal to the verdict's record.

use attestation::evidence::Evidence;
use attestation::transcript::{Event, Recorder, Transcript};
use fenced_run_tests::fence::{skip, Case};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use verifier_lib::{verify_evidence_with as verify_evidence, EvidenceOptions};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const NONCE: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

fn options(pins: bool) -> EvidenceOptions {
    let mut o = EvidenceOptions::default();
    o.chain.allow_simulated = true;
    o.any_measurement = true;
    o.nonce = Some(hex::decode(NONCE).expect("hex"));
    if pins {
        o.pins.expect_cut = true;
        o.pins.expect_egress_only =
            Some(vec![
                verifier_lib::EgressPin::parse("registry.example:443").expect("pin")
            ]);
    }
    o
}

/// Runs the case with `--evidence` and returns the evidence.
fn run(c: &Case, outcome: &str) -> Evidence {
    let out = c.path().join("run.evidence");
    let r = c.run_with(
        &["--evidence", out.to_str().expect("utf8"), "--nonce", NONCE],
        &[],
    );
    assert_eq!(r.outcome(), outcome, "{}", r.dump());
    assert!(
        !r.stderr.contains("the transcript's anchor"),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
    Evidence::from_file(&out).expect("evidence")
}

fn names(ev: &Evidence) -> Vec<&'static str> {
    ev.transcript
        .as_ref()
        .expect("the evidence carries a transcript")
        .transcript
        .events()
        .expect("events")
        .iter()
        .map(Event::name)
        .collect()
}

const INSTALL: &str = "curl -sS -o /dev/null http://denied.example:80/x; echo denied=$?";

fn job(c: &Case, test: &str, timeout: u32) {
    c.repo_file("test.sh", test);
    c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"{INSTALL}\"\nallow = [\"registry.example:443\"]\n\
         timeout_seconds = 30\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = {timeout}\n"
    ));
}

const IN_ORDER: [&str; 10] = [
    "agent-ready",
    "job-header",
    "report-requested",
    "intake",
    "install-start",
    "egress",
    "cut",
    "test-start",
    "test-end",
    "verdict",
];

/// `verify-attestation evidence --json` with the transcript pins: its exit code and JSON.
fn verify_cli(evidence: &std::path::Path) -> (i32, serde_json::Value) {
    let o = std::process::Command::new(VERIFY)
        .args([
            "evidence",
            "--allow-simulated",
            "--any-measurement",
            "--json",
            "--nonce",
            NONCE,
            "--expect-cut",
            "--expect-egress-only",
            "registry.example:443,mirror.example",
            "--expect-egress-only",
            "[::1]:8080",
        ])
        .arg(evidence)
        .output()
        .expect("run verify-attestation");
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

fn transcript_claim(v: &serde_json::Value) -> serde_json::Value {
    v["claims"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["claim"] == "transcript"))
        .cloned()
        .unwrap_or_default()
}

/// Verifies `ev` (with pins) and that each tampering fails the `transcript` check.
fn verifies_and_tampering_fails(ev: &Evidence) {
    let v = verify_evidence(ev, &options(true));
    assert!(v.verified(), "{:?}", v.failures);
    assert!(v.transcript.anchored);
    assert_eq!(v.transcript.pins.len(), 2);
    let raw = ev.transcript.as_ref().expect("t").transcript.raw().to_vec();
    let with = |events: Vec<Vec<u8>>| {
        let mut e = ev.clone();
        if let Some(t) = &mut e.transcript {
            t.transcript = Transcript::from_raw(events).expect("decode");
        }
        e
    };
    let mut removed = raw.clone();
    removed.remove(5);
    let mut reordered = raw.clone();
    reordered.swap(6, 7);
    let mut added = raw.clone();
    added.insert(
        7,
        Event::TestStart {
            command: "sh other.sh".into(),
        }
        .encode()
        .expect("enc"),
    );
    for (what, e) in [
        ("removed", with(removed)),
        ("reordered", with(reordered)),
        ("added", with(added)),
    ] {
        let v = verify_evidence(&e, &options(false));
        assert!(
            v.failures.iter().any(|f| f.check == "transcript"),
            "{what}: {:?}",
            v.failures
        );
    }
}

#[test]
fn passing_failing_and_budget_expired_runs_carry_their_transcript() {
    if skip() {
        return;
    }
    let cases = [
        ("echo '2 passed, 0 failed'\n", 30, "tests_passed"),
        ("echo '1 passed, 1 failed'; exit 1\n", 30, "tests_failed"),
        ("sleep 917301\n", 2, "budget_expired"),
    ];
    for (test, timeout, outcome) in cases {
        let c = Case::new(BIN);
        job(&c, test, timeout);
        let ev = run(&c, outcome);
        let got = names(&ev);
        assert_eq!(got, IN_ORDER.to_vec(), "{outcome}");
        let events = ev
            .transcript
            .as_ref()
            .expect("t")
            .transcript
            .events()
            .expect("events");
        assert!(
            matches!(&events[5], Event::Egress { host, port: 80, allowed: false, .. } if host == "denied.example"),
            "{:?}",
            events[5]
        );
        assert!(
            matches!(
                &events[6],
                Event::Cut {
                    pid1_reaped: true,
                    processes_left: 0,
                    held: true
                }
            ),
            "{:?}",
            events[6]
        );
        match (&events[8], outcome) {
            (
                Event::TestEnd {
                    passed: Some(2),
                    failed: Some(0),
                    exit_code: Some(0),
                    ..
                },
                "tests_passed",
            ) => {}
            (
                Event::TestEnd {
                    passed: Some(1),
                    failed: Some(1),
                    exit_code: Some(1),
                    ..
                },
                "tests_failed",
            ) => {}
            (
                // Killed at the budget: no exit code, and no counts.
                Event::TestEnd {
                    exit_code: None,
                    passed: None,
                    failed: None,
                    ..
                },
                "budget_expired",
            ) => {}
            (e, o) => panic!("{o}: {e:?}"),
        }
        assert!(
            matches!(&events[9], Event::Verdict { outcome: o, .. } if o == outcome),
            "{:?}",
            events[9]
        );
        verifies_and_tampering_fails(&ev);
        let (code, json) = verify_cli(&c.path().join("run.evidence"));
        assert_eq!(code, 0, "{json}");
        let claim = transcript_claim(&json);
        assert_eq!(claim["status"], "held", "{json}");
        assert_eq!(
            json["transcript"]["events"],
            serde_json::json!(IN_ORDER),
            "{json}"
        );
        assert_eq!(json["transcript"]["anchored"], true, "{json}");
        assert_eq!(
            json["transcript"]["sha384"],
            hex::encode(ev.transcript.as_ref().expect("t").transcript.hash()),
            "{json}"
        );
        assert!(
            claim["detail"].as_str().unwrap_or("").contains("pin-cut"),
            "{claim}"
        );
    }
}

/// A refusal at intake: the transcript ends after intake with the verdict, and `--expect-cut` fails.
#[test]
fn a_refused_run_has_no_cut() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.job("[repository]\npath = \"missing\"\n[test]\ncommand = \"true\"\n");
    let ev = run(&c, "refused");
    assert_eq!(
        names(&ev),
        [
            "agent-ready",
            "job-header",
            "report-requested",
            "intake",
            "verdict"
        ]
    );
    let v = verify_evidence(&ev, &options(false));
    assert!(v.verified(), "{:?}", v.failures);
    let v = verify_evidence(&ev, &options(true));
    assert!(
        v.failures.iter().any(|f| f.check == "pin-cut"),
        "{:?}",
        v.failures
    );
    let (code, json) = verify_cli(&c.path().join("run.evidence"));
    assert_eq!(code, 1, "{json}");
    assert_eq!(transcript_claim(&json)["status"], "failed", "{json}");
}

/// A loopback "registry" answering every request with a small body.
fn registry() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("registry");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "package-bytes-917302";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

struct Loopback;

impl guest::fence::proxy::net::Resolver for Loopback {
    fn resolve<'a>(
        &'a self,
        _name: &'a str,
    ) -> guest::fence::proxy::net::BoxFuture<'a, std::io::Result<Vec<std::net::IpAddr>>> {
        Box::pin(async { Ok(vec![std::net::IpAddr::from([127, 0, 0, 1])]) })
    }
}

#[test]
fn an_allowed_connection_is_an_egress_event_equal_to_the_verdicts_record() {
    if skip() {
        return;
    }
    let port = registry();
    let c = Case::new(BIN);
    c.repo_file(
        "install.sh",
        &format!(
            "curl -sS -o pkg http://registry.example:{port}/pkg; echo allowed=$?\n\
             curl -sS -o other http://other.example:{port}/x; echo denied=$?\n"
        ),
    );
    c.repo_file(
        "test.sh",
        "grep -q package-bytes-917302 pkg && echo '1 passed, 0 failed'\n",
    );
    let job_path = c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\nallow = [\"registry.example:{port}\"]\ntimeout_seconds = 60\n[test]\ncommand = \"sh test.sh\"\n"
    ));
    let job = intake::job::Job::load(&job_path).expect("job");
    let mut opts = guest::fence::run::RunOptions::new(BIN.into(), vec![7; 32]);
    opts.proxy = Some(Arc::new(guest::fence::run::ProxyEgress::with(|c| {
        c.with_resolver(Arc::new(Loopback))
            .allow_loopback_for_tests(true)
    })));
    let recorder = Recorder::new();
    opts.transcript = Some(recorder.clone());
    let v = guest::fence::run::run_job(&job, &opts);
    assert_eq!(v.outcome.as_str(), "tests_passed", "{v:?}");
    let events = recorder.transcript().events().expect("events");
    let egress: Vec<(String, u16, bool, u64, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Egress {
                host,
                port,
                allowed,
                bytes_up,
                bytes_down,
            } => Some((host.clone(), *port, *allowed, *bytes_up, *bytes_down)),
            _ => None,
        })
        .collect();
    let recorded: Vec<(String, u16, bool, u64, u64)> = v
        .install
        .as_ref()
        .expect("install")
        .egress
        .iter()
        .map(|e| (e.host.clone(), e.port, e.allowed, e.bytes_up, e.bytes_down))
        .collect();
    assert_eq!(egress, recorded);
    assert!(
        egress
            .iter()
            .any(|(h, p, a, _, down)| h == "registry.example" && *p == port && *a && *down > 0),
        "{egress:?}"
    );
    assert!(
        egress
            .iter()
            .any(|(h, _, a, _, _)| h == "other.example" && !*a),
        "{egress:?}"
    );
    let install = events
        .iter()
        .position(|e| matches!(e, Event::InstallStart { .. }))
        .expect("install-start");
    let first_egress = events
        .iter()
        .position(|e| matches!(e, Event::Egress { .. }))
        .expect("egress");
    let cut = events
        .iter()
        .position(|e| matches!(e, Event::Cut { held: true, .. }))
        .expect("cut");
    let test = events
        .iter()
        .position(|e| matches!(e, Event::TestStart { .. }))
        .expect("test-start");
    assert!(
        install < first_egress && first_egress < cut && cut < test,
        "{events:?}"
    );
    assert!(
        matches!(&events[install], Event::InstallStart { allow, .. } if *allow == [format!("registry.example:{port}")]),
        "{events:?}"
    );
}
