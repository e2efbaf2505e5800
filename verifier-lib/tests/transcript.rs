//! The `transcript` check on sim evidence: a transcript sealed with its anchor verifies; an event removed,
//! reordered, added or changed, a missing or foreign anchor, or (sim TDX) an RTMR3 that does not replay the log
//! fails it; evidence without a transcript verifies as before with the transcript "not present"; the pins
//! `--expect-egress-only` and `--expect-cut` hold and fail on the events.

use attestation::evidence::Evidence;
use attestation::session::Session;
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::sim::{process_launch_measurement, SimPsp, SimSnpTee};
use attestation::snp::Product;
use attestation::tee::Tee;
use attestation::transcript::{self, Event, Recorder, Transcript};
use attestation::verdict::{EgressRecord, Inputs, InstallPhase, Isolation, Outcome, Verdict};
use std::sync::Arc;
use verifier_lib::evidence::{verify_evidence, EvidenceOptions};
use verifier_lib::output::{evidence_claims, ClaimContext, ClaimStatus};
use verifier_lib::transcript::checks;
use verifier_lib::EgressPin;

const NONCE: [u8; 32] = [0x61; 32];

fn egress() -> Vec<EgressRecord> {
    vec![
        EgressRecord {
            host: "registry.example".into(),
            port: 443,
            allowed: true,
            reason: "allowlist registry.example:443".into(),
            bytes_up: 120,
            bytes_down: 4096,
        },
        EgressRecord {
            host: "evil.example".into(),
            port: 443,
            allowed: false,
            reason: "not in the allowlist".into(),
            bytes_up: 0,
            bytes_down: 0,
        },
    ]
}

fn verdict() -> Verdict {
    verdict_with(egress())
}

fn verdict_with(egress: Vec<EgressRecord>) -> Verdict {
    let inputs = Inputs {
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let mut v = Verdict::new(Outcome::NoTestsObserved, Isolation::Vm, inputs, "test");
    v.install = Some(InstallPhase {
        command: "make deps".into(),
        source: "job".into(),
        egress,
        ..InstallPhase::default()
    });
    v
}

/// The run's events after the first report, as the fence writes them.
fn run_events(r: &Recorder) {
    run_events_with(r, egress())
}

fn run_events_with(r: &Recorder, egress: Vec<EgressRecord>) {
    r.record(Event::Intake {
        accepted: true,
        job_sha256: None,
        detail: String::new(),
    });
    r.record(Event::InstallStart {
        command: "make deps".into(),
        allowlist_sha256: transcript::allowlist_sha256(&["registry.example:443".into()]),
        allow: vec!["registry.example:443".into()],
    });
    for e in &egress {
        r.record(Event::egress(e));
    }
    r.record(Event::Cut {
        pid1_reaped: true,
        processes_left: 0,
        held: true,
    });
    r.record(Event::TestStart {
        command: "make test".into(),
    });
    r.record(Event::TestEnd {
        exit_code: Some(0),
        signal: None,
        passed: None,
        failed: None,
        skipped: None,
    });
}

fn opening(r: &Recorder) {
    r.record(Event::AgentReady {
        agent_version: "test".into(),
        image: None,
    });
    r.record(Event::JobHeader {
        nonce: NONCE.to_vec(),
        job_sha256: None,
        bundle_sha256: None,
    });
}

fn sealed(tee: &dyn Tee, r: &Recorder) -> Evidence {
    sealed_with(tee, r, egress())
}

fn sealed_with(tee: &dyn Tee, r: &Recorder, egress: Vec<EgressRecord>) -> Evidence {
    opening(r);
    let session = attestation::session::KeyFirst::new()
        .begin_recorded(tee, &NONCE, Some(r))
        .expect("begin");
    run_events_with(r, egress.clone());
    let (ev, why) = session
        .seal_anchored(tee, &verdict_with(egress), r)
        .expect("seal");
    assert_eq!(why, None);
    Evidence::from_cbor(&ev.to_cbor().expect("enc")).expect("dec")
}

fn opts() -> EvidenceOptions {
    let mut o = EvidenceOptions::default();
    o.chain.allow_simulated = true;
    o.any_measurement = true;
    o.leave_rtmrs_unpinned = true;
    o.nonce = Some(NONCE.to_vec());
    o
}

fn transcript_failures(v: &verifier_lib::EvidenceVerification) -> Vec<String> {
    v.failures
        .iter()
        .filter(|f| f.check.starts_with("transcript") || f.check.starts_with("pin-"))
        .map(|f| f.to_string())
        .collect()
}

fn with_events(ev: &Evidence, events: Vec<Vec<u8>>) -> Evidence {
    let mut e = ev.clone();
    if let Some(t) = &mut e.transcript {
        t.transcript = Transcript::from_raw(events).expect("events decode");
    }
    e
}

fn tampered(ev: &Evidence) -> Vec<(&'static str, Evidence)> {
    let raw = ev.transcript.as_ref().expect("t").transcript.raw().to_vec();
    let mut out = Vec::new();
    let mut v = raw.clone();
    v.remove(5); // the allowed egress connection
    out.push(("removed", with_events(ev, v)));
    let mut v = raw.clone();
    v.swap(7, 8); // test-start before the cut
    out.push(("reordered", with_events(ev, v)));
    let mut v = raw.clone();
    v.insert(
        6,
        Event::Egress {
            host: "other.example".into(),
            port: 80,
            allowed: true,
            bytes_up: 1,
            bytes_down: 1,
        }
        .encode()
        .expect("enc"),
    );
    out.push(("added", with_events(ev, v)));
    let mut v = raw.clone();
    v[5] = Event::Egress {
        host: "registry.example".into(),
        port: 443,
        allowed: true,
        bytes_up: 120,
        bytes_down: 4097,
    }
    .encode()
    .expect("enc");
    out.push(("changed", with_events(ev, v)));
    let mut e = ev.clone();
    if let Some(t) = &mut e.transcript {
        t.anchor = None;
    }
    out.push(("anchor removed", e));
    out
}

#[test]
fn sim_snp_transcript_verifies_and_tampering_fails() {
    let dir = tempfile::tempdir().expect("tmp");
    let tee = SimSnpTee::new(
        SimPsp::new(dir.path(), Product::Milan).expect("psp"),
        process_launch_measurement(b"agent"),
    );
    let ev = sealed(&tee, &Recorder::new());
    let v = verify_evidence(&ev, &opts());
    assert!(v.verified(), "{:?}", v.failures);
    assert!(v.transcript.present && v.transcript.anchored);
    assert_eq!(v.transcript.rtmr3_replayed, None);
    assert_eq!(v.transcript.events.len(), 11);
    assert_eq!(
        v.transcript_sha(),
        Some(hex::encode(
            ev.transcript.as_ref().expect("t").transcript.hash()
        ))
    );
    let claims = evidence_claims(&v, &opts(), &ClaimContext::default());
    let t = claims
        .iter()
        .find(|c| c.claim == "transcript")
        .expect("row");
    assert_eq!(t.status, ClaimStatus::Held, "{t:?}");

    for (what, e) in tampered(&ev) {
        let v = verify_evidence(&e, &opts());
        let f = transcript_failures(&v);
        assert!(
            !v.verified() && f.iter().any(|f| f.starts_with("transcript")),
            "{what}: {:?}",
            v.failures
        );
        let claims = evidence_claims(&v, &opts(), &ClaimContext::default());
        let t = claims
            .iter()
            .find(|c| c.claim == "transcript")
            .expect("row");
        assert_eq!(t.status, ClaimStatus::Failed, "{what}: {t:?}");
    }

    // An anchor from another session (another nonce) does not bind this transcript.
    let other_tee = &tee;
    let other = {
        let r = Recorder::new();
        opening(&r);
        let s = Session::begin(other_tee, &[0x99; 32]).expect("begin");
        let mut v = verdict();
        v.inputs.nonce = vec![0x99; 32];
        s.seal_anchored(other_tee, &v, &r).expect("seal").0
    };
    let mut e = ev.clone();
    if let Some(t) = &mut e.transcript {
        t.anchor = other.transcript.and_then(|t| t.anchor);
    }
    let v = verify_evidence(&e, &opts());
    assert!(
        transcript_failures(&v)
            .iter()
            .any(|f| f.contains("anchor report: REPORT_DATA")),
        "{:?}",
        v.failures
    );

    // Evidence without a transcript: verifies as before, the transcript "not present".
    let plain = Session::begin(&tee, &NONCE)
        .expect("begin")
        .seal(&verdict())
        .expect("seal");
    let v = verify_evidence(&plain, &opts());
    assert!(v.verified(), "{:?}", v.failures);
    assert!(!v.transcript.present);
    assert_eq!(v.transcript_sha(), None);
    let claims = evidence_claims(&v, &opts(), &ClaimContext::default());
    let t = claims
        .iter()
        .find(|c| c.claim == "transcript")
        .expect("row");
    assert_eq!(t.status, ClaimStatus::NotPinned);
    assert!(t.detail.contains("not present"), "{t:?}");

    // The pins: held on the run's events, failed when the list leaves out a connection let through, and
    // failed without a transcript.
    let mut o = opts();
    o.pins.expect_cut = true;
    o.pins.expect_egress_only = Some(vec![EgressPin::parse("registry.example:443").expect("pin")]);
    let v = verify_evidence(&ev, &o);
    assert!(v.verified(), "{:?}", v.failures);
    assert_eq!(v.transcript.pins.len(), 2);
    o.pins.expect_egress_only = Some(vec![EgressPin::parse("mirror.example").expect("pin")]);
    let v = verify_evidence(&ev, &o);
    assert!(
        v.failures.iter().any(|f| f.check == checks::PIN_EGRESS_ONLY
            && f.to_string().contains("registry.example:443")),
        "{:?}",
        v.failures
    );
    let v = verify_evidence(&plain, &o);
    assert!(
        v.failures.iter().any(|f| f.check == checks::PIN_CUT),
        "{:?}",
        v.failures
    );
    // Reordered (test-start before the cut) fails the cut pin too.
    let (_, reordered) = tampered(&ev).swap_remove(1);
    let mut o = opts();
    o.pins.expect_cut = true;
    let v = verify_evidence(&reordered, &o);
    assert!(
        v.failures.iter().any(|f| f.check == checks::PIN_CUT),
        "{:?}",
        v.failures
    );
}

#[test]
fn sim_tdx_rtmr3_replays_and_a_changed_log_fails() {
    let dir = tempfile::tempdir().expect("tmp");
    let tee = Arc::new(SimTdxTee::new(
        SimQe::new(dir.path()).expect("qe"),
        SimTd::default(),
    ));
    let x = tee.clone();
    let r = Recorder::extending(Arc::new(move |d: &transcript::Hash| {
        x.extend_rtmr(3, d).map_err(|e| e.to_string())
    }));
    let ev = sealed(tee.as_ref(), &r);
    let v = verify_evidence(&ev, &opts());
    assert!(v.verified(), "{:?}", v.failures);
    assert_eq!(v.transcript.rtmr3_replayed, Some(true));

    for (what, e) in tampered(&ev) {
        let v = verify_evidence(&e, &opts());
        let f = transcript_failures(&v);
        assert!(!v.verified(), "{what}");
        if what != "anchor removed" {
            assert!(
                f.iter().any(|f| f.contains("RTMR3 of the anchor quote")),
                "{what}: {f:?}"
            );
        }
    }

    // A register extended with something the log does not carry: the replay fails though the chain holds.
    let r = Recorder::new();
    let y = tee.clone();
    let session_tee = tee.clone();
    opening(&r);
    let session = Session::begin(session_tee.as_ref(), &NONCE).expect("begin");
    y.extend_rtmr(3, &[0xee; 48]).expect("extend");
    let (ev, _) = session
        .seal_anchored(session_tee.as_ref(), &verdict(), &r)
        .expect("seal");
    let v = verify_evidence(&ev, &opts());
    let f = transcript_failures(&v);
    assert!(f.iter().any(|f| f.contains("RTMR3")), "{f:?}");
}

/// The job in the launch: a job header naming its bundle must name the report's HOST_DATA.
#[test]
fn the_job_header_must_be_the_launchs() {
    let dir = tempfile::tempdir().expect("tmp");
    let bundle = [0x33; 32];
    let seal_with = |host_data: [u8; 32]| {
        let tee = SimSnpTee::new(
            SimPsp::new(dir.path(), Product::Milan).expect("psp"),
            process_launch_measurement(b"agent"),
        )
        .with_host_data(host_data);
        let r = Recorder::new();
        r.record(Event::AgentReady {
            agent_version: "test".into(),
            image: None,
        });
        r.record(Event::JobHeader {
            nonce: NONCE.to_vec(),
            job_sha256: None,
            bundle_sha256: Some(hex::encode(bundle)),
        });
        let session = attestation::session::KeyFirst::new()
            .begin_recorded(&tee, &NONCE, Some(&r))
            .expect("begin");
        run_events(&r);
        session.seal_anchored(&tee, &verdict(), &r).expect("seal").0
    };
    let v = verify_evidence(&seal_with(transcript::job_launch_digest(&bundle)), &opts());
    assert!(v.verified(), "{:?}", v.failures);
    let v = verify_evidence(&seal_with([0; 32]), &opts());
    assert!(
        transcript_failures(&v)
            .iter()
            .any(|f| f.contains("job in the launch") && f.contains("HOST_DATA")),
        "{:?}",
        v.failures
    );
}

/// A contributor's install phase that fills the proxy's log (`ProxyLimits::max_log_records`) before reaching
/// another host the job allows: the proxy then records only how many attempts it did not log, so
/// `--expect-egress-only` cannot hold, though every logged connection lies within the list.
#[test]
fn the_egress_pin_fails_when_the_proxys_log_overflowed() {
    let mut records = vec![egress()[0].clone()];
    // What guest::fence::proxy appends when it stopped logging.
    records.push(EgressRecord {
        host: String::new(),
        port: 0,
        allowed: false,
        reason: "1 further attempts not logged (log limit 1 reached)".into(),
        bytes_up: 0,
        bytes_down: 0,
    });
    let dir = tempfile::tempdir().expect("tmp");
    let tee = SimSnpTee::new(
        SimPsp::new(dir.path(), Product::Milan).expect("psp"),
        process_launch_measurement(b"agent"),
    );
    let ev = sealed_with(&tee, &Recorder::new(), records);
    let mut o = opts();
    o.pins.expect_egress_only = Some(vec![EgressPin::parse("registry.example:443").expect("pin")]);
    let v = verify_evidence(&ev, &o);
    let pin = v
        .failures
        .iter()
        .find(|f| f.check == checks::PIN_EGRESS_ONLY)
        .unwrap_or_else(|| panic!("the pin held: {:?}", v.transcript.pins));
    assert!(pin.to_string().contains("log overflowed"), "{pin}");
    // The transcript itself is sound: only the pin fails.
    assert!(
        v.failures
            .iter()
            .all(|f| f.check == checks::PIN_EGRESS_ONLY),
        "{:?}",
        v.failures
    );
}
