//! Evidence with `tee = "sim-tdx"`: a sim TDX quote binding the guest key and nonce, its collateral carried in
//! the bundle, a signed verdict. The round trip verifies with `--allow-simulated`; a wrong nonce, a key the
//! quote does not bind, an unpinned MRTD, a `tdx` label on a sim chain, or no `--allow-simulated` are rejected.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use verifier_lib::evidence::{checks, verify_evidence, EvidenceOptions};
use verifier_lib::snp::{ChainOptions, Policy};

const MRTD: [u8; 48] = [0x3c; 48];

fn key(label: &str) -> SigningKey {
    SigningKey::from_slice(&Sha384::digest(label.as_bytes()))
        .expect("a SHA-384 digest is a P-384 scalar")
}

fn evidence(
    tee: &SimTdxTee,
    label: TeeLabel,
    bound: &SigningKey,
    signer: &SigningKey,
    nonce: &[u8],
    vnonce: &[u8],
) -> Evidence {
    let rd = binding::report_data(&p384::PublicKey::from(bound.verifying_key()), nonce);
    let raw = tee.get_report(&rd).expect("sim quote");
    assert!(raw.collateral.is_some());
    let inputs = Inputs {
        nonce: vnonce.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    let ev = Evidence::seal(
        label,
        raw.report,
        raw.certs,
        raw.collateral,
        signer,
        &verdict,
    )
    .expect("seal");
    // Through CBOR and back, as a founder receives it.
    Evidence::from_cbor(&ev.to_cbor().expect("encode")).expect("decode")
}

fn opts(allow_simulated: bool, mrtd: [u8; 48], nonce: &[u8]) -> EvidenceOptions {
    EvidenceOptions {
        chain: ChainOptions {
            allow_simulated,
            ..ChainOptions::default()
        },
        policy: Policy::default(),
        nonce: Some(nonce.to_vec()),
        any_measurement: false,
        measurement_set: None,
        tdx_collateral: None,
        // The whole image: MRTD and the RTMRs of kernel, initramfs and command line (zero in the sim TD).
        tdx_policy: verifier_lib::tdx::Policy {
            mrtd: vec![mrtd],
            rtmr: [None, Some([0; 48]), Some([0; 48]), None],
            ..verifier_lib::tdx::Policy::default()
        },
        ..EvidenceOptions::default()
    }
}

fn checks_of(v: &verifier_lib::evidence::EvidenceVerification) -> Vec<String> {
    v.failures.iter().map(|f| f.check.to_string()).collect()
}

#[test]
fn tdx_sim_evidence_round_trip_and_rejections() {
    let dir = tempfile::tempdir().expect("tmp");
    let tee = SimTdxTee::new(
        SimQe::new(dir.path()).expect("sim qe"),
        SimTd {
            mrtd: MRTD,
            ..SimTd::default()
        },
    );
    assert_eq!(tee.label(), TeeLabel::SimTdx);
    let k = key("guest");
    let nonce = [9u8; 32];

    let good = evidence(&tee, TeeLabel::SimTdx, &k, &k, &nonce, &nonce);
    let v = verify_evidence(&good, &opts(true, MRTD, &nonce));
    assert!(v.verified(), "{:?}", v.failures);
    assert!(v.simulated);
    assert!(matches!(
        v.report,
        verifier_lib::evidence::ReportVerification::Tdx(_)
    ));
    assert!(v.verdict.is_some());

    // Not allowed to be simulated.
    let v = verify_evidence(&good, &opts(false, MRTD, &nonce));
    assert!(
        checks_of(&v).contains(&checks::SIMULATED.to_string()),
        "{:?}",
        v.failures
    );

    // Wrong nonce expected by the founder: both the binding and the verdict nonce fail.
    let v = verify_evidence(&good, &opts(true, MRTD, &[1u8; 32]));
    let c = checks_of(&v);
    assert!(
        c.contains(&checks::KEY_BINDING.to_string()) && c.contains(&checks::NONCE.to_string()),
        "{c:?}"
    );

    // The verdict signed by a key the quote does not bind.
    let other = key("other");
    let bad = evidence(&tee, TeeLabel::SimTdx, &k, &other, &nonce, &nonce);
    let v = verify_evidence(&bad, &opts(true, MRTD, &nonce));
    assert!(!v.verified());
    assert!(
        checks_of(&v)
            .iter()
            .any(|c| c == checks::KEY_BINDING || c == checks::VERDICT_SIGNATURE),
        "{:?}",
        v.failures
    );

    // Another MRTD pinned.
    let v = verify_evidence(&good, &opts(true, [0x11; 48], &nonce));
    assert!(
        checks_of(&v).contains(&"mrtd".to_string()),
        "{:?}",
        v.failures
    );

    // A sim chain labelled as real TDX.
    let liar = evidence(&tee, TeeLabel::Tdx, &k, &k, &nonce, &nonce);
    let v = verify_evidence(&liar, &opts(true, MRTD, &nonce));
    assert!(
        checks_of(&v).contains(&checks::TEE_LABEL.to_string()),
        "{:?}",
        v.failures
    );

    // A truncated quote is named, not a panic.
    let mut cut = good.clone();
    cut.report.truncate(700);
    let v = verify_evidence(&cut, &opts(true, MRTD, &nonce));
    assert!(
        checks_of(&v).contains(&checks::TDX.to_string()),
        "{:?}",
        v.failures
    );
}

#[test]
fn tdx_evidence_without_collateral_takes_the_founders_collateral() {
    let dir = tempfile::tempdir().expect("tmp");
    let tee = SimTdxTee::new(
        SimQe::new(dir.path()).expect("sim qe"),
        SimTd {
            mrtd: MRTD,
            ..SimTd::default()
        },
    );
    let k = key("guest");
    let nonce = [5u8; 32];
    let mut ev = evidence(&tee, TeeLabel::SimTdx, &k, &k, &nonce, &nonce);
    let carried = match ev.collateral.take() {
        Some(attestation::evidence::Collateral::Bytes(b)) => b,
        other => panic!("sim TDX evidence carries collateral bytes, got {other:?}"),
    };

    // As configfs-tsm evidence arrives: no collateral, and the default policy needs it.
    let v = verify_evidence(&ev, &opts(true, MRTD, &nonce));
    assert!(!v.verified(), "verified without any collateral");

    // The founder fetched the collateral and verifies offline with it.
    let mut o = opts(true, MRTD, &nonce);
    o.tdx_collateral = Some(carried);
    let v = verify_evidence(&ev, &o);
    assert!(v.verified(), "{:?}", v.failures);
}
