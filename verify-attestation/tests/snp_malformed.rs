//! Malformed inputs to the SEV-SNP verifier never panic: arbitrary or truncated certificates, arbitrary reports
//! through the CLI, and garbage CRLs all end as named failures or errors.

#[path = "../../verifier-lib/tests/snp_common/mod.rs"]
mod snp_common;

use attestation::snp::AttestationReport;
use proptest::prelude::*;
use snp_common::{report_vectors, snp_vectors};
use std::process::Command;
use verifier_lib::snp::chain::checks;
use verifier_lib::snp::{verify_chain, CertBundle, ChainOptions};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_certificates_fail_without_panicking(
        ark in prop::collection::vec(any::<u8>(), 0..600),
        inter in prop::collection::vec(any::<u8>(), 0..600),
        leaf in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let out = verify_chain(&CertBundle { ark, intermediate: inter, leaf }, &ChainOptions::default(), None);
        prop_assert!(out.failures.iter().any(|f| f.check == checks::CERT_PARSE));
        prop_assert!(!out.signatures_valid());
    }

    #[test]
    fn garbage_crl_is_a_crl_failure(crl in prop::collection::vec(any::<u8>(), 0..300)) {
        let Some(snp) = snp_vectors() else { return Ok(()) };
        let v = &report_vectors(&snp)[0];
        let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("bundle");
        let opts = ChainOptions { at: v.at(), crl: Some(crl), allow_simulated: false };
        let out = verify_chain(&bundle, &opts, None);
        prop_assert!(out.failures.iter().any(|f| f.check == checks::CRL), "{:?}", out.failures);
    }
}

#[test]
fn truncated_real_certificates_are_parse_failures() {
    let Some(snp) = snp_vectors() else { return };
    let v = report_vectors(&snp)
        .into_iter()
        .find(|v| !v.is_negative())
        .expect("vector");
    let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("bundle");
    let opts = ChainOptions {
        at: v.at(),
        crl: None,
        allow_simulated: false,
    };
    for cut in (0..bundle.leaf.len()).step_by(13) {
        let mut b = bundle.clone();
        b.leaf.truncate(cut);
        let out = verify_chain(&b, &opts, None);
        assert!(
            out.failures.iter().any(|f| f.check == checks::CERT_PARSE),
            "cut {cut}: {:?}",
            out.failures
        );
    }
    let mut b = bundle.clone();
    b.ark.extend_from_slice(&[0, 0]);
    let out = verify_chain(&b, &opts, None);
    assert!(
        out.failures.iter().any(|f| f.detail.contains("trailing")),
        "{:?}",
        out.failures
    );
}

#[test]
fn cli_gives_exit_2_and_a_named_error_for_malformed_reports() {
    let Some(snp) = snp_vectors() else { return };
    let v = report_vectors(&snp)
        .into_iter()
        .find(|v| !v.is_negative())
        .expect("vector");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut v5 = AttestationReport::new(5).to_bytes().to_vec();
    v5[0] = 4;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "0 bytes"),
        ("truncated", v.report[..600].to_vec(), "600 bytes"),
        (
            "oversized",
            [v.report.clone(), vec![0; 16]].concat(),
            "1200 bytes",
        ),
        ("garbage", vec![0xA5; 1184], "version"),
        ("unknown-version", v5, "version 4"),
    ];
    for (name, bytes, want) in cases {
        let path = tmp.path().join(name);
        std::fs::write(&path, &bytes).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("snp-report")
            .arg(&path)
            .arg("--certs")
            .arg(&v.dir)
            .arg("--json")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{name}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(json["verified"], false, "{name}");
        assert_eq!(json["failures"][0]["check"], "report-format", "{name}");
        let detail = json["failures"][0]["detail"].as_str().expect("detail");
        assert!(detail.contains(want), "{name}: {detail}");
    }
    // A certificate directory without the leaf the report needs.
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("snp-report")
        .arg(v.dir.join("report.bin"))
        .args(["--certs", "/nonexistent-dir"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir"));
}
