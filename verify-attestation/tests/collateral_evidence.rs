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
    assert!(out.contains("collateral-unsigned"), "{out}");
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

/// SEV-SNP evidence from a host that set no certificate table (its `certs` are empty, as configfs-tsm leaves
/// them): without outside collateral it is unverifiable and the failure says how to get it; `--online`
/// fetches the ASK, ARK, VCEK and CRL from the fake KDS (sim chain, `--allow-simulated`) and the whole
/// evidence verifies; `--cache` then verifies it offline with no request; `fetch --bundle` of the evidence
/// and `--collateral BUNDLE` verify it too, with the auditors' k-of-n; another chip's certificates in a
/// bundle, or the sim chain without `--allow-simulated`, are rejected; certificates the evidence carries
/// are set aside for the founder's.
#[test]
fn snp_evidence_without_certificates_verifies_with_the_founders_collateral() {
    use attestation::sim::SimPsp;
    use attestation::snp::{AttestationReport, Product};
    use collateral_common::{FakeServer, Reply};

    const DAY: u64 = 86_400;
    let state =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-collateral-kds-sim");
    let psp = SimPsp::new(&state, Product::Milan).expect("sim psp");
    let k = SigningKey::from_slice(&Sha384::digest(b"snp guest")).expect("key");
    let nonce = [9u8; 32];
    let measurement = [0x44u8; 48];
    let rd = binding::report_data(&p384::PublicKey::from(k.verifying_key()), &nonce);
    let (report, certs) = psp
        .sign_report(psp.report_template(measurement, rd))
        .expect("sign");
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::Vm,
        Inputs {
            nonce: nonce.to_vec(),
            ..Inputs::default()
        },
        "test",
    );
    let dir = tempfile::tempdir().expect("tmp");
    let seal = |name: &str, certs: Vec<Vec<u8>>| {
        let ev = Evidence::seal(
            TeeLabel::SimSevSnp,
            report.clone(),
            certs,
            None,
            &k,
            &verdict,
        )
        .expect("seal");
        let p = dir.path().join(name);
        std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write");
        p
    };
    let bare = seal("bare.evidence", vec![]);

    let srv = FakeServer::start();
    let pem = |der: &[u8]| {
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der)
        )
    };
    srv.route(
        "/vcek/v1/Milan/cert_chain",
        vec![Reply::ok(pem(psp.ask_der()) + &pem(psp.ark_der()))],
    );
    let r = AttestationReport::from_bytes(&report).expect("report");
    let vcek_url =
        verifier_lib::collateral::kds::vcek_url(&srv.base, Product::Milan, &r).expect("url");
    srv.route(
        vcek_url.trim_start_matches(&srv.base),
        vec![Reply::ok(certs[0].clone())],
    );
    let t = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let crl = psp.ark_crl_der(t - DAY, t + 30 * DAY, &[]).expect("crl");
    srv.route("/vcek/v1/Milan/crl", vec![Reply::ok(crl.clone())]);

    let cache = dir.path().join("cache");
    let cache_s = cache.to_str().expect("utf8").to_string();
    let m_hex = hex::encode(measurement);
    let n_hex = hex::encode(nonce);
    let verify = |ev: &std::path::Path, extra: &[&str]| {
        let mut a = vec![
            "evidence",
            ev.to_str().expect("utf8"),
            "--nonce",
            &n_hex,
            "--measurement",
            &m_hex,
            "--json",
        ];
        a.extend_from_slice(extra);
        let (code, out, err) = cli(&a);
        let j: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("one JSON object ({e}): {out}{err}"));
        (code, j, format!("{out}{err}"))
    };
    let checks = |j: &serde_json::Value| -> Vec<String> {
        j["failures"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| f["check"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };

    // 1. No certificates and no outside collateral: rejected, naming the certificates and the way out.
    let (code, j, all) = verify(&bare, &["--allow-simulated"]);
    assert_eq!(code, 1, "{all}");
    assert!(checks(&j).contains(&"certs".to_string()), "{all}");
    assert!(
        all.contains("0 certificates") && all.contains("--online") && all.contains("--collateral"),
        "{all}"
    );

    // 2. --online: the chain, the VCEK and the CRL from the fake KDS; everything verifies.
    let online = [
        "--allow-simulated",
        "--online",
        "--kds-url",
        &srv.base,
        "--cache",
        &cache_s,
    ];
    let (code, j, all) = verify(&bare, &online);
    assert_eq!(code, 0, "{all}");
    assert_eq!(j["verified"], true, "{all}");
    assert_eq!(j["collateral_source"]["source"], "online", "{all}");
    assert_eq!(srv.hits("/vcek/v1/Milan/cert_chain"), 1);
    assert_eq!(srv.hits("/vcek/v1/Milan/crl"), 1);
    assert_eq!(srv.total_hits(), 3, "cert_chain, VCEK, CRL");

    // 3. Offline from the cache: verified, no request.
    let (code, j, all) = verify(&bare, &["--allow-simulated", "--cache", &cache_s]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(j["collateral_source"]["source"], "cache", "{all}");
    assert_eq!(srv.total_hits(), 3);
    // An empty cache offline is a named failure (exit 2), not a crash.
    let empty = dir.path().join("empty-cache");
    let (code, j, all) = verify(
        &bare,
        &[
            "--allow-simulated",
            "--cache",
            empty.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code, 2, "{all}");
    assert!(
        checks(&j).contains(&"collateral-missing".to_string()),
        "{all}"
    );

    // 4. One offline bundle of the evidence's collateral (from the cache, no request).
    let bundle_path = dir.path().join("snp.bundle.json");
    let (code, out, err) = cli(&[
        "fetch",
        bare.to_str().expect("utf8"),
        "--bundle",
        bundle_path.to_str().expect("utf8"),
        "--kds-url",
        &srv.base,
        "--cache",
        &cache_s,
        "--allow-simulated",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(srv.total_hits(), 3);
    let b = bundle_path.to_str().expect("utf8");
    let (code, j, all) = verify(&bare, &["--allow-simulated", "--collateral", b]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(j["collateral_source"]["source"], "bundle", "{all}");
    // The auditors' k of n: unsigned, it is rejected; signed by the trusted key, it verifies.
    let key = measurements::set::generate_key();
    let pk = dir.path().join("auditor.pub");
    std::fs::write(
        &pk,
        measurements::set::public_key_pem(&key.verifying_key()).expect("pem"),
    )
    .expect("write");
    let pk = pk.to_str().expect("utf8");
    let with_key = [
        "--allow-simulated",
        "--collateral",
        b,
        "--collateral-auditor-key",
        pk,
    ];
    let (code, j, all) = verify(&bare, &with_key);
    assert_eq!(code, 1, "{all}");
    assert!(
        checks(&j).contains(&"collateral-unsigned".to_string()),
        "{all}"
    );
    let mut signed = Bundle::from_json(&std::fs::read(&bundle_path).expect("read")).expect("b");
    signed.sign(&key, "auditor-a");
    std::fs::write(&bundle_path, signed.to_json()).expect("write");
    let (code, j, all) = verify(&bare, &with_key);
    assert_eq!(code, 0, "{all}");
    assert_eq!(
        j["collateral_source"]["auditors"].as_array().map(Vec::len),
        Some(1),
        "{all}"
    );

    // 5. The bundle is trusted no further than its roots: without --allow-simulated the sim chain is refused.
    let (code, j, all) = verify(&bare, &["--collateral", b]);
    assert_eq!(code, 1, "{all}");
    assert!(checks(&j).contains(&"simulated".to_string()), "{all}");

    // 6. A bundle holding another chip's certificates (a real Milan VCEK chain) does not verify this report.
    if let Some(v) = collateral_common::vectors() {
        let vd = v.join("snp/milan-v3-oak-oc-release");
        let der_of = |p: std::path::PathBuf| {
            let raw = collateral_common::read(p);
            verifier_lib::snp::certs::ders_from_file_bytes(&raw, "vector")
                .expect("certificate")
                .remove(0)
        };
        let other = verifier_lib::snp::CertBundle {
            ark: der_of(vd.join("ark.pem")),
            intermediate: der_of(vd.join("ask.pem")),
            leaf: der_of(vd.join("vcek.der")),
        };
        let foreign = Bundle::new(Content {
            format: BUNDLE_FORMAT.into(),
            created: "2026-12-01T00:00:00Z".into(),
            subject: "bare.evidence".into(),
            snp: Some(verifier_lib::collateral::bundle::SnpPart::new(
                Product::Milan,
                &other,
                None,
            )),
            tdx: None,
            sources: vec![],
        });
        let fp = dir.path().join("foreign.bundle.json");
        std::fs::write(&fp, foreign.to_json()).expect("write");
        let (code, j, all) = verify(
            &bare,
            &[
                "--collateral",
                fp.to_str().expect("utf8"),
                "--at",
                "2025-06-01T00:00:00Z",
            ],
        );
        assert_eq!(code, 1, "{all}");
        assert_eq!(j["verified"], false, "{all}");
        assert!(
            !checks(&j).is_empty() && !checks(&j).contains(&"simulated".to_string()),
            "a real chain, but not this report's: {all}"
        );
    }

    // 7. Certificates the evidence carries (here not even certificates) are set aside for the founder's.
    let junk = seal("junk.evidence", vec![vec![1], vec![2], vec![3]]);
    let (code, _, all) = verify(&junk, &["--allow-simulated"]);
    assert_eq!(code, 1, "{all}");
    let (code, j, all) = verify(&junk, &["--allow-simulated", "--collateral", b]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(
        j["collateral_source"]["evidence_certs"], "set aside",
        "{all}"
    );
}
