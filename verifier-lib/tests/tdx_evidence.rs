//! Evidence with `tee = "sim-tdx"`: a sim TDX quote binding the guest key and nonce, its collateral carried in
//! the bundle, a signed verdict. The round trip verifies with `--allow-simulated`; a wrong nonce, a key the
//! quote does not bind, an unpinned MRTD, a `tdx` label on a sim chain, or no `--allow-simulated` are rejected.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::hex::Hex;
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use verifier_lib::evidence::{checks, verify_evidence, EvidenceOptions};
use verifier_lib::snp::{ChainOptions, Policy};
use verifier_lib::Input;

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

/// What a verification says, for comparing two of them: every failure, the registers compared, whether a
/// launch measurement counted as pinned.
fn summary(
    v: &verifier_lib::evidence::EvidenceVerification,
) -> (Vec<verifier_lib::Failure>, Vec<String>, bool) {
    (
        v.failures.clone(),
        v.pinned_registers.clone(),
        v.measurement_pinned,
    )
}

#[test]
fn tdx_evidence_is_judged_by_the_tdx_policy_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    // A debug TD (TD attribute bit 0): the TDX policy forbids it unless it allows debugging.
    let mut attrs = SimTd::default().td_attributes;
    attrs[0] |= 1;
    let tee = SimTdxTee::new(
        SimQe::new(dir.path()).expect("sim qe"),
        SimTd {
            mrtd: MRTD,
            td_attributes: attrs,
            ..SimTd::default()
        },
    );
    let k = key("guest");
    let nonce = [7u8; 32];
    let ev = evidence(&tee, TeeLabel::SimTdx, &k, &k, &nonce, &nonce);

    // The TDX policy given directly: the whole image pinned, debugging forbidden.
    let base = opts(true, MRTD, &nonce);
    let v = verify_evidence(&ev, &base);
    assert_eq!(
        checks_of(&v),
        vec!["td-attributes-debug"],
        "{:?}",
        v.failures
    );
    let want = summary(&v);
    assert_eq!(want.1, vec!["mrtd", "rtmr1", "rtmr2"]);

    // An SEV-SNP policy that would allow debugging, require other REPORT_DATA, pin another launch measurement
    // and more: none of it is read for TDX evidence.
    let hostile = Policy {
        allow_debug: true,
        measurements: vec![Hex([0x11; 48])],
        report_data: Some(Hex([0x44; 64])),
        vmpl: Some(3),
        min_guest_svn: Some(99),
        host_data: Some(Hex([0x55; 32])),
        ..Policy::default()
    };
    let mut o = base.clone();
    o.policy = hostile.clone();
    assert_eq!(summary(&verify_evidence(&ev, &o)), want);

    // The TDX policy allowing debugging verifies, whatever the SEV-SNP policy says.
    let mut o = base.clone();
    o.tdx_policy.allow_debug = true;
    assert!(verify_evidence(&ev, &o).verified());
    o.policy = hostile.clone();
    let v = verify_evidence(&ev, &o);
    assert!(v.verified(), "{:?}", v.failures);

    // Nor through the entry point: `Policy::snp` is not read for TDX evidence.
    let bytes = ev.to_cbor().expect("encode");
    let mut input = Input::new(&bytes, base.chain.at);
    input.pins.nonce = Some(nonce.to_vec());
    input.policy.allow_simulated = true;
    input.policy.tdx = base.tdx_policy.clone();
    let plain = verifier_lib::verify_evidence(&input).expect("evidence");
    input.policy.snp = hostile;
    let widened = verifier_lib::verify_evidence(&input).expect("evidence");
    assert_eq!(plain.failures, widened.failures);
    assert_eq!(plain.claims, widened.claims);
    assert_eq!(
        checks_of_failures(&plain.failures),
        vec!["td-attributes-debug"]
    );

    // What applies to either TEE is the shared part: debugging allowed there is allowed for TDX evidence too,
    // its REPORT_DATA is required of the quote, and its measurements count as MRTDs, which pin the firmware
    // alone (the gap is named).
    let mut o = base.clone();
    o.shared.allow_debug = true;
    let v = verify_evidence(&ev, &o);
    assert!(v.verified(), "{:?}", v.failures);
    o.shared.report_data = Some(Hex([0x44; 64]));
    assert_eq!(checks_of(&verify_evidence(&ev, &o)), vec!["report-data"]);
    let mut o = opts(true, [0x11; 48], &nonce);
    o.tdx_policy.allow_debug = true;
    o.tdx_policy.mrtd.clear();
    o.shared.measurements = vec![Hex(MRTD)];
    let v = verify_evidence(&ev, &o);
    assert_eq!(checks_of(&v), vec![checks::MEASUREMENT_INCOMPLETE]);
    assert!(
        v.failures[0]
            .detail
            .starts_with("--measurement on TDX evidence would pin MRTD only"),
        "{:?}",
        v.failures
    );
    o.leave_rtmrs_unpinned = true;
    let v = verify_evidence(&ev, &o);
    assert!(v.verified(), "{:?}", v.failures);
    assert_eq!(v.pinned_registers, vec!["mrtd", "rtmr1", "rtmr2"]);
}

fn checks_of_failures(f: &[verifier_lib::Failure]) -> Vec<String> {
    f.iter().map(|f| f.check.to_string()).collect()
}
