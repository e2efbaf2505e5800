//! The fence transcript sealed with its anchor: a second sim SEV-SNP report over the transcript's hash, the
//! verdict's SHA-384 and the nonce; on the sim TDX each event extended into RTMR3 as it is written, so the
//! anchor quote's RTMR3 is the fold of the events' digests. Evidence with a transcript round-trips.

use attestation::evidence::Evidence;
use attestation::session::Session;
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::sim::{process_launch_measurement, SimPsp, SimSnpTee};
use attestation::snp::{AttestationReport, Product};
use attestation::tdx::Quote;
use attestation::transcript::{self, Event, Recorder};
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use std::sync::Arc;

fn state() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-transcript-anchor-sim")
}

fn verdict(nonce: &[u8]) -> Verdict {
    let inputs = Inputs {
        nonce: nonce.to_vec(),
        job_sha256: Some("ef".repeat(32)),
        ..Inputs::default()
    };
    Verdict::new(
        Outcome::NoTestsObserved,
        Isolation::Process,
        inputs,
        "0.1.0",
    )
}

fn record_run(r: &Recorder, nonce: &[u8]) {
    r.record(Event::AgentReady {
        agent_version: "0.1.0".into(),
        image: None,
    });
    r.record(Event::JobHeader {
        nonce: nonce.to_vec(),
        job_sha256: None,
        bundle_sha256: None,
    });
    r.record(Event::TestStart {
        command: "true".into(),
    });
}

#[test]
fn sim_snp_anchor_binds_the_transcript_and_the_verdict() {
    let nonce = [0x42; 32];
    let psp = SimPsp::new(&state(), Product::Milan).expect("psp");
    let tee = SimSnpTee::new(psp, process_launch_measurement(b"agent"));
    let session = Session::begin(&tee, &nonce).expect("begin");
    let r = Recorder::new();
    record_run(&r, &nonce);
    let v = verdict(&nonce);
    let (ev, why) = session.seal_anchored(&tee, &v, &r).expect("seal");
    assert_eq!(why, None);
    let back = Evidence::from_cbor(&ev.to_cbor().expect("enc")).expect("dec");
    let t = back.transcript.expect("transcript carried");
    let events = t.transcript.events().expect("events");
    assert_eq!(events.len(), 4);
    let vsha = transcript::verdict_sha384(&v.to_cbor().expect("cbor"));
    assert_eq!(
        events[3],
        Event::Verdict {
            outcome: "no_tests_observed".into(),
            sha384: vsha.to_vec()
        }
    );
    let anchor = AttestationReport::from_bytes(&t.anchor.expect("anchor")).expect("report");
    assert_eq!(
        anchor.report_data,
        transcript::anchor_report_data(&t.transcript.hash(), &vsha, &nonce)
    );
    // Evidence without a transcript (as written before it existed) still reads, with none.
    let session = Session::begin(&tee, &nonce).expect("begin");
    let plain = session.seal(&v).expect("seal");
    let back = Evidence::from_cbor(&plain.to_cbor().expect("enc")).expect("dec");
    assert!(back.transcript.is_none());
}

#[test]
fn sim_tdx_rtmr3_is_the_fold_of_the_events() {
    let nonce = [0x24; 32];
    let qe = SimQe::new(&state()).expect("qe");
    let tee = Arc::new(SimTdxTee::new(qe, SimTd::default()));
    let session = Session::begin(tee.as_ref(), &nonce).expect("begin");
    let x = tee.clone();
    let r = Recorder::extending(Arc::new(move |d: &transcript::Hash| {
        x.extend_rtmr(3, d).map_err(|e| e.to_string())
    }));
    record_run(&r, &nonce);
    let (ev, why) = session
        .seal_anchored(tee.as_ref(), &verdict(&nonce), &r)
        .expect("seal");
    assert_eq!(why, None);
    let t = ev.transcript.expect("transcript");
    let quote = Quote::parse(t.anchor.as_deref().expect("anchor")).expect("quote");
    assert_eq!(quote.td().rtmr[3], transcript::rtmr3_of(t.transcript.raw()));
    // The first quote was taken before any event: RTMR3 was zero then.
    let first = Quote::parse(&ev.report).expect("quote");
    assert_eq!(first.td().rtmr[3], [0; 48]);
}
