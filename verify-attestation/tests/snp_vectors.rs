//! Table-driven over every folder of `../shared/vectors/snp`: signature and chain results, TCB and hwID binding,
//! product, and the `verify-attestation snp-report` verdict agree with each `expected.json`.

#[path = "../../verifier-lib/tests/snp_common/mod.rs"]
mod snp_common;

use attestation::snp::{AttestationReport, Product};
use snp_common::{report_vectors, snp_vectors};
use std::process::Command;
use verifier_lib::snp::chain::{checks, verify_raw_report_signature};
use verifier_lib::snp::{verify_chain, verify_report, CertBundle, ChainOptions, Policy, RootKind};

fn has(failures: &[verifier_lib::Failure], check: &str) -> bool {
    failures.iter().any(|f| f.check == check)
}

#[test]
fn every_report_vector_matches_expected() {
    let Some(snp) = snp_vectors() else { return };
    let vectors = report_vectors(&snp);
    assert!(vectors.len() >= 20, "only {} report vectors", vectors.len());
    for v in &vectors {
        let name = &v.name;
        let exp = &v.expected;
        let sig_ok = exp["signature_valid"].as_bool().expect("signature_valid");
        let chain_ok = exp["chain_valid"].as_bool().expect("chain_valid");
        let product =
            Product::from_name(exp["product"].as_str().expect("product")).expect("product");
        let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("cert bundle");
        let opts = ChainOptions {
            at: v.at(),
            crl: None,
            allow_simulated: false,
        };
        let detail = &exp["chain_detail"];

        match AttestationReport::from_bytes(&v.report) {
            Ok(report) => {
                let res = verify_report(
                    &report,
                    &bundle,
                    &opts,
                    &Policy {
                        allow_debug: true,
                        ..Policy::default()
                    },
                );
                assert_eq!(
                    res.signature_valid, sig_ok,
                    "{name}: signature_valid ({:?})",
                    res.failures
                );
                assert_eq!(
                    res.chain.signatures_valid(),
                    chain_ok,
                    "{name}: chain_valid ({:?})",
                    res.failures
                );
                assert_eq!(
                    res.chain.ark_self_signed,
                    detail["ark_self_signed"].as_bool().expect("d"),
                    "{name}"
                );
                assert_eq!(
                    res.chain.intermediate_signed_by_ark,
                    detail["intermediate_signed_by_ark"].as_bool().expect("d"),
                    "{name}"
                );
                assert_eq!(
                    res.chain.leaf_signed_by_intermediate,
                    detail["leaf_signed_by_intermediate"].as_bool().expect("d"),
                    "{name}"
                );
                assert_eq!(res.chain.root, RootKind::Amd(product), "{name}: root");
                assert_eq!(res.product(), Some(product), "{name}: product");
                assert!(res.chain.time_valid, "{name}: time inside validity");
                assert_eq!(
                    has(&res.failures, checks::REPORT_SIGNATURE),
                    !sig_ok,
                    "{name}: {:?}",
                    res.failures
                );
                assert_eq!(
                    has(&res.failures, checks::LEAF_SIGNATURE),
                    !chain_ok,
                    "{name}: {:?}",
                    res.failures
                );
                let kc = &exp["key_cert"];
                let tcb_ok = kc["tcb_matches_reported_tcb"].as_bool().expect("tcb match");
                assert_eq!(
                    !has(&res.failures, checks::TCB_EXTENSIONS),
                    tcb_ok,
                    "{name}: {:?}",
                    res.failures
                );
                if let Some(hw_ok) = kc["hwid_matches_chip_id"].as_bool() {
                    assert_eq!(
                        !has(&res.failures, checks::HWID),
                        hw_ok,
                        "{name}: {:?}",
                        res.failures
                    );
                }
                let leaf = res.chain.leaf.as_ref().expect("leaf parsed");
                let tcb = leaf.extensions.tcb(product).expect("SPLs");
                assert_eq!(
                    tcb.to_string(),
                    kc["tcb_as_u64"].as_str().expect("tcb_as_u64"),
                    "{name}"
                );
                assert_eq!(
                    leaf.extensions.csp_id.as_deref(),
                    kc["csp_id"].as_str(),
                    "{name}: csp_id"
                );
                assert_eq!(
                    leaf.extensions.hw_id.as_ref().map(hex::encode).as_deref(),
                    kc["hwID"].as_str(),
                    "{name}: hwID"
                );
                assert_eq!(
                    leaf.issuer_cn,
                    kc["issuer_cn"].as_str().expect("issuer"),
                    "{name}"
                );
                assert_eq!(
                    leaf.serial,
                    kc["serial"].as_str().expect("serial"),
                    "{name}"
                );
                assert_eq!(
                    res.verified(),
                    sig_ok && chain_ok,
                    "{name}: {:?}",
                    res.failures
                );
            }
            Err(e) => {
                assert!(
                    v.is_negative(),
                    "{name}: a real report failed to parse: {e}"
                );
                let chain = verify_chain(&bundle, &opts, None);
                assert_eq!(chain.signatures_valid(), chain_ok, "{name}");
                let key = chain.leaf_key.as_ref().expect("leaf key");
                assert_eq!(
                    verify_raw_report_signature(&v.report, key).is_ok(),
                    sig_ok,
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn cli_verified_agrees_with_every_vector() {
    let Some(snp) = snp_vectors() else { return };
    for v in report_vectors(&snp) {
        let exp = &v.expected;
        let want = exp["signature_valid"].as_bool().expect("sig")
            && exp["chain_valid"].as_bool().expect("chain");
        let debug = u64::from_str_radix(
            exp["fields"]["policy"]
                .as_str()
                .expect("p")
                .trim_start_matches("0x"),
            16,
        )
        .expect("policy")
            & (1 << 19)
            != 0;
        let at = v.at().unix_timestamp().to_string();
        let run = |extra: &[&str]| {
            let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
                .arg("snp-report")
                .arg(v.dir.join("report.bin"))
                .arg("--certs")
                .arg(&v.dir)
                .args(["--at", &at, "--json"])
                .args(extra)
                .output()
                .expect("run verify-attestation");
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "{}: stdout is not JSON ({e}): {}",
                    v.name,
                    String::from_utf8_lossy(&out.stdout)
                )
            });
            (out.status.code(), json)
        };
        let (code, json) = run(if debug { &["--allow-debug"] } else { &[] });
        assert_eq!(json["verified"].as_bool(), Some(want), "{}: {json}", v.name);
        if want {
            assert_eq!(code, Some(0), "{}", v.name);
            for key in [
                "tee",
                "product",
                "signing_key",
                "measurement",
                "report_data",
                "chip_id",
                "reported_tcb",
                "policy",
            ] {
                assert!(json.get(key).is_some(), "{}: missing {key}", v.name);
            }
            assert_eq!(json["tee"], "sev-snp", "{}", v.name);
            assert_eq!(json["product"], exp["product"], "{}", v.name);
            assert_eq!(json["signing_key"], exp["signing_key"], "{}", v.name);
            assert_eq!(
                json["measurement"], exp["fields"]["measurement"],
                "{}",
                v.name
            );
            assert_eq!(
                json["reported_tcb"]["snp"], exp["reported_tcb_decoded"]["snp"],
                "{}",
                v.name
            );
            assert_eq!(
                json["failures"].as_array().map(Vec::len),
                Some(0),
                "{}",
                v.name
            );
        } else {
            assert!(
                code == Some(1) || code == Some(2),
                "{}: exit {code:?}",
                v.name
            );
            assert!(
                !json["failures"].as_array().expect("failures").is_empty(),
                "{}",
                v.name
            );
        }
        if debug && want {
            let (code, json) = run(&[]);
            assert_eq!(
                code,
                Some(1),
                "{}: debug guest must be rejected by default",
                v.name
            );
            assert!(
                json["failures"]
                    .as_array()
                    .expect("f")
                    .iter()
                    .any(|f| f["check"] == "debug"),
                "{json}"
            );
        }
    }
}

#[test]
fn expired_vlek_is_its_own_failure() {
    let Some(snp) = snp_vectors() else { return };
    let v = report_vectors(&snp)
        .into_iter()
        .find(|v| v.name == "milan-v2-vlek-aws-constellation-2023b")
        .expect("vector");
    let report = AttestationReport::from_bytes(&v.report).expect("parse");
    let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("bundle");
    let late = time::macros::datetime!(2026-11-29 00:00 UTC);
    let res = verify_report(
        &report,
        &bundle,
        &ChainOptions {
            at: late,
            crl: None,
            allow_simulated: false,
        },
        &Policy::default(),
    );
    assert!(res.signature_valid && res.chain.signatures_valid());
    let checks_seen: Vec<&str> = res.failures.iter().map(|f| f.check.as_ref()).collect();
    assert_eq!(
        checks_seen,
        vec![checks::CERT_VALIDITY],
        "{:?}",
        res.failures
    );
    assert!(
        res.failures[0].detail.contains("2024-07-19"),
        "{}",
        res.failures[0].detail
    );
}

#[test]
fn report_with_another_products_chain_is_rejected() {
    let Some(snp) = snp_vectors() else { return };
    let vs = report_vectors(&snp);
    let genoa = vs
        .iter()
        .find(|v| v.name == "genoa-v3-yaxi")
        .expect("genoa");
    let milan = vs
        .iter()
        .find(|v| v.name == "milan-v3-oak-oc-release")
        .expect("milan");
    let report = AttestationReport::from_bytes(&genoa.report).expect("parse");
    let bundle = CertBundle::from_dir(&milan.dir, milan.signing_key()).expect("bundle");
    let res = verify_report(
        &report,
        &bundle,
        &ChainOptions {
            at: genoa.at(),
            ..ChainOptions::default()
        },
        &Policy::default(),
    );
    assert!(!res.verified());
    assert!(has(&res.failures, checks::PRODUCT), "{:?}", res.failures);
    assert!(
        has(&res.failures, checks::REPORT_SIGNATURE),
        "{:?}",
        res.failures
    );
}

#[test]
fn turin_chain_only_vector_chain_and_extensions() {
    let Some(snp) = snp_vectors() else { return };
    let dir = snp.join("chain-only/turin-vcek-virtee-sev");
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("json"))
            .expect("json");
    let bundle = CertBundle::from_dir(&dir, attestation::snp::SigningKey::Vcek).expect("bundle");
    let opts = ChainOptions {
        at: snp_common::at_inside(&exp),
        crl: None,
        allow_simulated: false,
    };
    let chain = verify_chain(&bundle, &opts, None);
    assert!(chain.failures.is_empty(), "{:?}", chain.failures);
    assert_eq!(
        chain.signatures_valid(),
        exp["chain_valid"].as_bool().expect("chain_valid")
    );
    assert_eq!(chain.root, RootKind::Amd(Product::Turin));
    assert_eq!(chain.product, Some(Product::Turin));
    let leaf = chain.leaf.expect("leaf");
    let kc = &exp["key_cert"];
    assert_eq!(
        leaf.extensions.hw_id.as_ref().map(hex::encode).as_deref(),
        kc["hwID"].as_str()
    );
    assert_eq!(leaf.extensions.hw_id.as_ref().map(Vec::len), Some(8));
    assert_eq!(
        leaf.extensions.fmc_spl.map(u64::from),
        kc["fmcSPL"].as_u64()
    );
    assert_eq!(
        leaf.extensions.ucode_spl.map(u64::from),
        kc["ucodeSPL"].as_u64()
    );
    assert_eq!(
        leaf.extensions.product_name.as_deref(),
        kc["productName"].as_str()
    );
    assert_eq!(
        leaf.extensions
            .tcb(Product::Turin)
            .map(|t| t.to_string())
            .as_deref(),
        kc["tcb_as_u64"].as_str()
    );
    // A Turin report whose CHIP_ID starts with the 8-byte hwID and is zero after it matches; a non-zero tail does not.
    let mut report = AttestationReport::new(3);
    report.chip_id[..8].copy_from_slice(leaf.extensions.hw_id.as_deref().expect("hwid"));
    assert_eq!(
        verifier_lib::snp::chain::hwid_mismatch(&report, &leaf, Product::Turin),
        None
    );
    report.chip_id[8] = 1;
    assert!(verifier_lib::snp::chain::hwid_mismatch(&report, &leaf, Product::Turin).is_some());
}

#[test]
fn cert_chain_pem_layout_and_missing_files() {
    let Some(snp) = snp_vectors() else { return };
    let v = report_vectors(&snp)
        .into_iter()
        .find(|v| v.name == "milan-v3-oak-oc-release")
        .expect("vector");
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::copy(v.dir.join("vcek.der"), tmp.path().join("vcek.der")).expect("copy");
    let err =
        CertBundle::from_dir(tmp.path(), attestation::snp::SigningKey::Vcek).expect_err("no ark");
    assert!(err.to_string().contains("cert_chain.pem"), "{err}");
    std::fs::copy(
        snp.join("roots/milan/cert_chain.pem"),
        tmp.path().join("cert_chain.pem"),
    )
    .expect("copy");
    let bundle =
        CertBundle::from_dir(tmp.path(), attestation::snp::SigningKey::Vcek).expect("bundle");
    let report = AttestationReport::from_bytes(&v.report).expect("parse");
    let res = verify_report(
        &report,
        &bundle,
        &ChainOptions {
            at: v.at(),
            ..ChainOptions::default()
        },
        &Policy::default(),
    );
    assert!(res.verified(), "{:?}", res.failures);
}
