//! TDX evidence with collateral from outside it: `evidence --collateral BUNDLE` uses the bundle's
//! `collateral.json` (the evidence's own is set aside) and a bundle lacking the auditor signatures the founder
//! demands rejects the evidence (sim TDX evidence); `evidence --online --pcs-url FAKE` fetches a real quote's
//! collateral from the fake PCS, verifies with it, and `--cache` then serves offline.

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

/// TDX evidence holding a real quote (dcap-qvl's v4 vector), sealed here: `evidence --online --pcs-url FAKE`
/// fetches the quote's TCB Info, QE Identity and CRLs from the fake PCS (the real collateral), verifies them
/// and the quote with them; `--cache` then serves offline with no request. The sealing key is the test's, so
/// the only failure is the quote's report_data not binding it: everything the collateral decides passes.
#[test]
fn tdx_evidence_online_fetches_the_quotes_collateral_from_the_fake_pcs() {
    let Some(v) = collateral_common::vectors() else {
        return;
    };
    let tv = collateral_common::tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let srv = collateral_common::FakeServer::start();
    tv.serve_all(&srv);
    let dir = tempfile::tempdir().expect("tmp");
    let k = SigningKey::from_slice(&Sha384::digest(b"guest")).expect("key");
    let nonce = [9u8; 32];
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::Tdx,
        Inputs {
            nonce: nonce.to_vec(),
            ..Inputs::default()
        },
        "test",
    );
    let ev =
        Evidence::seal(TeeLabel::Tdx, tv.quote.clone(), vec![], None, &k, &verdict).expect("seal");
    let ev_path = dir.path().join("tdx.evidence");
    std::fs::write(&ev_path, ev.to_cbor().expect("cbor")).expect("write");
    let exp: serde_json::Value = serde_json::from_slice(&collateral_common::read(
        v.join("tdx/dcapqvl-v4-b0c06f-uptodate/expected.json"),
    ))
    .expect("expected");
    let mrtd = exp["fields"]["mrtd"].as_str().expect("mrtd").to_string();
    let at = tv.reference_time.to_string();
    let nonce_hex = hex::encode(nonce);
    let cache = dir.path().join("cache");
    let root_crl = format!("{}{}", srv.base, collateral_common::ROOT_CRL_ROUTE);
    let run = |extra: &[&str]| {
        let mut a = vec![
            "evidence",
            ev_path.to_str().expect("utf8"),
            "--nonce",
            &nonce_hex,
            "--mrtd",
            &mrtd,
            "--leave-rtmrs-unpinned",
            "--at",
            &at,
            "--cache",
            cache.to_str().expect("utf8"),
            "--json",
        ];
        a.extend_from_slice(extra);
        let (code, out, err) = cli(&a);
        let j: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}{err}"));
        (code, j)
    };
    let failing = |j: &serde_json::Value| -> Vec<String> {
        j["failures"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| f["check"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Offline before anything was fetched: the missing cache entry is named.
    let (code, j) = run(&[]);
    assert_eq!(code, 2, "{j}");
    assert!(j.to_string().contains("collateral-missing"), "{j}");
    assert_eq!(srv.total_hits(), 0);
    let (code, j) = run(&[
        "--online",
        "--pcs-url",
        &srv.base,
        "--root-crl-url",
        &root_crl,
    ]);
    assert_eq!(code, 1, "{j}");
    let f = failing(&j);
    assert_eq!(f, ["key-binding"], "only the binding fails: {j}");
    assert_eq!(
        j["reported_tcb"], "UpToDate",
        "judged with the fetched TCB Info: {j}"
    );
    assert_eq!(
        j["collateral_used"]["tcb_evaluation_data_number"], 17,
        "{j}"
    );
    for route in [
        collateral_common::tcb_route(&tv.fmspc),
        collateral_common::QE_ROUTE.to_string(),
        collateral_common::PCK_CRL_ROUTE.to_string(),
        collateral_common::ROOT_CRL_ROUTE.to_string(),
    ] {
        assert_eq!(srv.hits(&route), 1, "{route}");
    }
    // Offline from the cache: the same verdict, no request.
    let before = srv.total_hits();
    let (code, j2) = run(&[]);
    assert_eq!(code, 1, "{j2}");
    assert_eq!(failing(&j2), f);
    assert_eq!(srv.total_hits(), before);
}

#[test]
fn tdx_evidence_online_refuses_collateral_the_fake_pcs_serves_with_a_wrong_chain() {
    let Some(v) = collateral_common::vectors() else {
        return;
    };
    let tv = collateral_common::tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let srv = collateral_common::FakeServer::start();
    tv.serve_all(&srv);
    // The TCB Info served without its TCB-Info-Issuer-Chain header: refused before use, naming the URL.
    let body = tv.tcb_reply().body;
    srv.route(
        &collateral_common::tcb_route(&tv.fmspc),
        vec![collateral_common::Reply::ok(body)],
    );
    let dir = tempfile::tempdir().expect("tmp");
    let k = SigningKey::from_slice(&Sha384::digest(b"guest")).expect("key");
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::Tdx,
        Inputs::default(),
        "test",
    );
    let ev =
        Evidence::seal(TeeLabel::Tdx, tv.quote.clone(), vec![], None, &k, &verdict).expect("seal");
    let ev_path = dir.path().join("tdx.evidence");
    std::fs::write(&ev_path, ev.to_cbor().expect("cbor")).expect("write");
    let at = tv.reference_time.to_string();
    let root_crl = format!("{}{}", srv.base, collateral_common::ROOT_CRL_ROUTE);
    let (code, out, _) = cli(&[
        "evidence",
        ev_path.to_str().expect("utf8"),
        "--no-nonce",
        "--any-measurement",
        "--leave-rtmrs-unpinned",
        "--at",
        &at,
        "--online",
        "--no-cache",
        "--pcs-url",
        &srv.base,
        "--root-crl-url",
        &root_crl,
        "--json",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("collateral-rejected") && out.contains("/tdx/certification/v4/tcb"),
        "{out}"
    );
}
