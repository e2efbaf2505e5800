//! Agent session with the sim PSP through to evidence bytes and back: the binding holds, the verdict signature
//! verifies, and tampering with the key, the signature, the payload or the bytes is rejected without panics.

use attestation::binding;
use attestation::evidence::{Evidence, EvidenceError, TeeLabel};
use attestation::session::{Session, SessionError};
use attestation::sim::{process_launch_measurement, SimPsp, SimSnpTee};
use attestation::snp::{AttestationReport, Product};
use attestation::verdict::{Inputs, Isolation, Outcome, TestCounts, Verdict};
use coset::CborSerializable;
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

fn shared_state() -> &'static Path {
    // Under the target's own temporary directory, not a TempDir in a static: statics are never dropped, so
    // a TempDir there would be left in /tmp by every run.
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("fenced-run-attestation-evidence-session-tests-sim")
    })
}

fn tee(product: Product) -> SimSnpTee {
    let psp = SimPsp::new(shared_state(), product).expect("sim psp");
    SimSnpTee::new(psp, process_launch_measurement(b"agent build 1"))
}

fn verdict(nonce: &[u8]) -> Verdict {
    let inputs = Inputs {
        commit: Some("ab".repeat(20)),
        tree: Some("cd".repeat(20)),
        patch_sha256: None,
        job_sha256: Some("ef".repeat(32)),
        nonce: nonce.to_vec(),
        protect: Vec::new(),
        test_tree: None,
    };
    let mut v = Verdict::new(Outcome::TestsFailed, Isolation::Process, inputs, "0.1.0");
    v.tests = Some(TestCounts {
        passed: 10,
        failed: 2,
        skipped: 0,
        parser: "cargo".into(),
    });
    v
}

fn sealed(nonce: &[u8]) -> Evidence {
    let t = tee(Product::Milan);
    let s = Session::begin(&t, nonce).expect("begin");
    s.seal(&verdict(nonce)).expect("seal")
}

#[test]
fn session_to_evidence_and_back() {
    for product in Product::ALL {
        let nonce = [0x5a; 32];
        let t = tee(product);
        let session = Session::begin(&t, &nonce).expect("begin");
        let public = session.public_key();
        assert_eq!(session.report_data(), binding::report_data(&public, &nonce));
        let evidence = session.seal(&verdict(&nonce)).expect("seal");
        let bytes = evidence.to_cbor().expect("encode");
        let back = Evidence::from_cbor(&bytes).expect("decode");
        assert_eq!(back.tee, TeeLabel::SimSevSnp);
        assert_eq!(back.key(), public);
        assert_eq!(back.certs.len(), 3);
        assert_eq!(
            back.verify_verdict_signature().expect("verdict signature"),
            verdict(&nonce)
        );
        // The report binds exactly this key and nonce, and carries the launch measurement.
        let report = AttestationReport::from_bytes(&back.report).expect("report");
        assert_eq!(
            report.report_data,
            binding::report_data(&back.key(), &nonce)
        );
        assert_ne!(
            report.report_data,
            binding::report_data(&back.key(), &[0x5b; 32])
        );
        assert_eq!(
            report.measurement,
            process_launch_measurement(b"agent build 1")
        );
    }
}

#[test]
fn nonce_rules_enforced() {
    let t = tee(Product::Genoa);
    assert!(matches!(
        Session::begin(&t, &[0; 8]),
        Err(SessionError::Nonce(_))
    ));
    assert!(matches!(
        Session::begin(&t, &[0; 65]),
        Err(SessionError::Nonce(_))
    ));
    let s = Session::begin(&t, &[1; 16]).expect("16 bytes");
    let err = s
        .seal(&verdict(&[2; 16]))
        .expect_err("verdict nonce differs");
    assert!(matches!(err, SessionError::NonceMismatch { .. }), "{err}");
}

#[test]
fn swapped_verdict_or_key_rejected() {
    let a = sealed(&[1; 32]);
    let b = sealed(&[1; 32]);
    // B's verdict (signed by B's key) under A's key.
    let mut swapped = a.clone();
    swapped.verdict = b.verdict.clone();
    assert!(matches!(
        swapped.verify_verdict_signature(),
        Err(EvidenceError::BadSignature)
    ));
    // A's verdict with B's key.
    let mut other_key = a.clone();
    other_key.key = b.key;
    assert!(matches!(
        other_key.verify_verdict_signature(),
        Err(EvidenceError::BadSignature)
    ));
    // A changed payload (a better outcome) under the original signature.
    let mut better = a.clone();
    let mut v = verdict(&[1; 32]);
    v.set_outcome(Outcome::TestsPassed);
    better.verdict.payload = Some(v.to_cbor().expect("cbor"));
    assert!(matches!(
        better.verify_verdict_signature(),
        Err(EvidenceError::BadSignature)
    ));
    // A detached payload, a short signature.
    let mut detached = a.clone();
    detached.verdict.payload = None;
    assert!(detached.verify_verdict_signature().is_err());
    let mut short = a.clone();
    short.verdict.signature.truncate(64);
    assert!(short.verify_verdict_signature().is_err());
    a.verify_verdict_signature()
        .expect("the untouched one still verifies");
}

#[test]
fn every_byte_of_key_and_verdict_is_protected() {
    let e = sealed(&[7; 32]);
    let bytes = e.to_cbor().expect("encode");
    // The key and the verdict are the last two items of the map.
    let sign1_len = e.verdict.clone().to_vec().expect("sign1").len();
    let key_len = attestation::evidence::cose_key(&e.key)
        .to_vec()
        .expect("key")
        .len();
    let start = bytes.len() - sign1_len - key_len - "verdict".len() - 1;
    let mut accepted = Vec::new();
    for i in start..bytes.len() {
        for mask in [0x01u8, 0x80] {
            let mut m = bytes.clone();
            m[i] ^= mask;
            let ok = match Evidence::from_cbor(&m) {
                Ok(ev) => ev.verify_verdict_signature().is_ok(),
                Err(_) => false,
            };
            if ok {
                accepted.push((i, mask));
            }
        }
    }
    assert!(accepted.is_empty(), "flips accepted at {accepted:?}");
}

#[test]
fn huge_declared_lengths_are_errors() {
    for bytes in [
        vec![0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        vec![0x7b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, b'a'],
        vec![0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00],
        vec![0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00],
        vec![
            0xa1, 0x66, b'f', b'o', b'r', b'm', b'a', b't', 0x7a, 0xff, 0xff, 0xff, 0xff,
        ],
        [0x81u8; 200].to_vec(),
        vec![],
    ] {
        assert!(Evidence::from_cbor(&bytes).is_err(), "{bytes:02x?}");
        assert!(Verdict::from_cbor(&bytes).is_err(), "{bytes:02x?}");
    }
    let too_big = vec![0u8; attestation::evidence::MAX_EVIDENCE_LEN + 1];
    assert!(matches!(
        Evidence::from_cbor(&too_big),
        Err(EvidenceError::TooLarge { .. })
    ));
}

fn valid_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| sealed(&[9; 24]).to_cbor().expect("encode"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(e) = Evidence::from_cbor(&bytes) {
            let _ = e.verify_verdict_signature();
        }
        let _ = Verdict::from_cbor(&bytes);
        let _ = Verdict::from_json(&bytes);
    }

    #[test]
    fn mutated_evidence_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut m = valid_bytes().to_vec();
        for (at, value) in edits {
            let i = at.index(m.len());
            m[i] = value;
        }
        if truncate {
            m.truncate(cut.index(m.len()));
        }
        if let Ok(e) = Evidence::from_cbor(&m) {
            let _ = e.verify_verdict_signature();
        }
    }
}

#[test]
fn sim_tdx_session_binds_the_quote() {
    use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
    let qe = SimQe::new(shared_state()).expect("sim qe");
    let t = SimTdxTee::new(qe, SimTd::default());
    let nonce = [0x33; 20];
    let s = Session::begin(&t, &nonce).expect("begin");
    assert_eq!(s.label(), TeeLabel::SimTdx);
    let e = s.seal(&verdict(&nonce)).expect("seal");
    let back = Evidence::from_cbor(&e.to_cbor().expect("encode")).expect("decode");
    let quote = attestation::tdx::Quote::parse(&back.report).expect("quote");
    assert_eq!(
        quote.td().report_data,
        binding::report_data(&back.key(), &nonce)
    );
    assert_eq!(
        back.verify_verdict_signature().expect("verify"),
        verdict(&nonce)
    );
}

#[test]
fn evidence_file_round_trip_and_missing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.evidence");
    let e = sealed(&[4; 32]);
    std::fs::write(&path, e.to_cbor().expect("encode")).expect("write");
    let back = Evidence::from_file(&path).expect("read");
    assert_eq!(
        back.verify_verdict_signature().expect("verify"),
        verdict(&[4; 32])
    );
    let err = Evidence::from_file(&dir.path().join("absent.evidence")).expect_err("absent");
    assert!(err.to_string().contains("absent.evidence"), "{err}");
}

fn valid_verdict_cbor() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| verdict(&[1; 16]).to_cbor().expect("cbor"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_verdict_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut m = valid_verdict_cbor().to_vec();
        for (at, value) in edits {
            let i = at.index(m.len());
            m[i] = value;
        }
        if truncate {
            m.truncate(cut.index(m.len()));
        }
        if let Ok(v) = Verdict::from_cbor(&m) {
            // Whatever decodes is consistent.
            prop_assert_eq!(v.judged, v.outcome != Outcome::Refused);
        }
    }

    #[test]
    fn cert_tables_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = attestation::tee::parse_cert_table(&bytes);
    }

    #[test]
    fn cert_table_round_trips(datas in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 0..4)) {
        use attestation::tee::{CertKind, CertTableEntry};
        let kinds = [CertKind::Vcek, CertKind::Ask, CertKind::Ark, CertKind::Crl];
        let entries: Vec<CertTableEntry> =
            datas.into_iter().zip(kinds).map(|(data, kind)| CertTableEntry { kind, data }).collect();
        let table = attestation::tee::certtable::build_cert_table(&entries);
        prop_assert_eq!(attestation::tee::parse_cert_table(&table).expect("parse"), entries);
    }
}
