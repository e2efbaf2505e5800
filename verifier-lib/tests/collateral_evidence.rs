//! `evidence --collateral BUNDLE` for TDX evidence: the bundle's `collateral.json` is used as the founder's
//! (the evidence's own is set aside), and a bundle lacking the auditor signatures the founder demands rejects
//! the evidence. Sim TDX evidence and its sim collateral, so it runs everywhere.

mod collateral_common;

use attestation::binding;
use attestation::evidence::{Collateral, Evidence, TeeLabel};
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use collateral_common::cli;
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use verifier_lib::collateral::bundle::{Bundle, Content, BUNDLE_FORMAT};

#[test]
fn tdx_evidence_uses_the_bundles_collateral_and_its_auditors() {
    let dir = tempfile::tempdir().expect("tmp");
    let mrtd = [0x3c; 48];
    let tee = SimTdxTee::new(
        SimQe::new(dir.path()).expect("sim qe"),
        SimTd {
            mrtd,
            ..SimTd::default()
        },
    );
    let k = SigningKey::from_slice(&Sha384::digest(b"guest")).expect("key");
    let nonce = [7u8; 32];
    let rd = binding::report_data(&p384::PublicKey::from(k.verifying_key()), &nonce);
    let raw = tee.get_report(&rd).expect("sim quote");
    let Some(Collateral::Bytes(coll)) = raw.collateral.clone() else {
        panic!("sim collateral is collateral.json bytes")
    };
    let inputs = Inputs {
        nonce: nonce.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    let ev = Evidence::seal(
        TeeLabel::SimTdx,
        raw.report,
        raw.certs,
        raw.collateral,
        &k,
        &verdict,
    )
    .expect("seal");
    let ev_path = dir.path().join("run.evidence");
    std::fs::write(&ev_path, ev.to_cbor().expect("cbor")).expect("write");

    let bundle = Bundle::new(Content {
        format: BUNDLE_FORMAT.into(),
        created: "2026-12-01T00:00:00Z".into(),
        subject: "run.evidence".into(),
        snp: None,
        tdx: Some(serde_json::from_slice(&coll).expect("collateral.json")),
        sources: vec![],
    });
    let b_path = dir.path().join("run.bundle.json");
    std::fs::write(&b_path, bundle.to_json()).expect("write");

    let key = measurements::set::generate_key();
    let pk = dir.path().join("auditor.pub");
    std::fs::write(
        &pk,
        measurements::set::public_key_pem(&key.verifying_key()).expect("pem"),
    )
    .expect("write");
    let mrtd_hex = hex::encode(mrtd);
    let nonce_hex = hex::encode(nonce);
    let base = |extra: &[&str]| {
        let mut a = vec![
            "evidence",
            ev_path.to_str().expect("utf8"),
            "--allow-simulated",
            "--nonce",
            &nonce_hex,
            "--mrtd",
            &mrtd_hex,
            "--leave-rtmrs-unpinned",
            "--collateral",
            b_path.to_str().expect("utf8"),
            "--json",
        ];
        a.extend_from_slice(extra);
        cli(&a)
    };
    let (code, out, err) = base(&[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("\"evidence_collateral_ignored\":true"),
        "the bundle's collateral was the founder's: {out}"
    );
    let pk = pk.to_str().expect("utf8");
    let (code, out, _) = base(&["--collateral-auditor-key", pk]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("collateral-signatures"), "{out}");
    let mut signed = bundle.clone();
    signed.sign(&key, "auditor");
    std::fs::write(&b_path, signed.to_json()).expect("write");
    let (code, out, err) = base(&["--collateral-auditor-key", pk]);
    assert_eq!(code, 0, "{out}{err}");
}
