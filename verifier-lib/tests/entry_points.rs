//! The library's entry points (docs/verification.md, "The library's API"), through the crate root only: one real
//! SEV-SNP report and one real TDX quote each verify with their claim rows and anchors, the same report sealed
//! into evidence verifies but for the key binding (the sealing key is the test's), and input that cannot be
//! verified at all is a `VerifyError`, never a failed check.

use attestation::evidence::{Evidence, TeeLabel};
use attestation::snp::SigningKey;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use verifier_lib::{
    verify_evidence, verify_snp_report, verify_tdx_quote, CertBundle, ClaimStatus, Detail, Input,
    VerifyError,
};

fn read(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn collection_time() -> time::OffsetDateTime {
    // Inside the VCEK's validity (2023-04-03 .. 2030-04-03).
    time::OffsetDateTime::from_unix_timestamp(1_750_000_000).expect("time")
}

#[test]
fn a_real_snp_report_verifies_with_a_held_chain_anchored_in_the_pinned_ark() {
    let Some(dir) = attestation::vectors::dir("snp/milan-v2-virtee-sev") else {
        return;
    };
    let report = read(&dir.join("report.bin"));
    let mut input = Input::new(&report, collection_time());
    input.collateral.snp_certs = Some(CertBundle::from_dir(&dir, SigningKey::Vcek).expect("certs"));
    let v = verify_snp_report(&input).expect("a report");
    assert!(v.verified(), "{:?}", v.failures);
    assert!(matches!(v.detail, Detail::SnpReport(_)));
    let names: Vec<&str> = v.claims.iter().map(|c| c.claim).collect();
    assert_eq!(
        names,
        ["chain", "tcb", "policy", "measurement", "collateral"]
    );
    let chain = v.claim("chain").expect("chain row");
    assert_eq!(chain.status, ClaimStatus::Held);
    let anchor = chain.anchor.as_deref().expect("an anchor");
    assert!(
        anchor.contains("ARK-Milan") && anchor.contains("VCEK"),
        "{anchor}"
    );
    // Nothing pinned the measurement: the row says so rather than held.
    assert_eq!(
        v.claim("measurement").expect("row").status,
        ClaimStatus::NotPinned
    );

    // Through a Verifier: the second report of the same chip takes the chain's signatures from the cache.
    let verifier = verifier_lib::Verifier::new();
    for _ in 0..2 {
        let v = verifier
            .cached(|| verify_snp_report(&input))
            .expect("a report");
        assert!(v.verified(), "{:?}", v.failures);
    }
    let stats = verifier.stats();
    assert!(stats.hits > 0 && stats.misses > 0, "{stats:?}");

    // A measurement pin that the report does not carry fails the measurement claim, and only that row.
    input.policy.snp.measurements = vec!["11".repeat(48).parse().expect("hex")];
    let v = verify_snp_report(&input).expect("a report");
    assert!(!v.verified());
    assert_eq!(
        v.claim("measurement").expect("row").status,
        ClaimStatus::Failed
    );
    assert_eq!(v.claim("chain").expect("row").status, ClaimStatus::Held);
}

#[test]
fn a_bare_snp_report_without_certificates_or_with_bad_bytes_is_an_error() {
    let input = Input::new(&[0u8; 10], collection_time());
    assert!(matches!(
        verify_snp_report(&input),
        Err(VerifyError::NoCertificates)
    ));
    let Some(dir) = attestation::vectors::dir("snp/milan-v2-virtee-sev") else {
        return;
    };
    let mut input = Input::new(&[0u8; 10], collection_time());
    input.collateral.snp_certs = Some(CertBundle::from_dir(&dir, SigningKey::Vcek).expect("certs"));
    let e = verify_snp_report(&input).expect_err("ten bytes are no report");
    assert!(matches!(e, VerifyError::Report(_)), "{e}");
    assert!(e.to_string().starts_with("SEV-SNP report: "), "{e}");
}

#[test]
fn a_real_tdx_quote_verifies_with_its_collateral_at_the_reference_time() {
    let Some(dir) = attestation::vectors::dir("tdx/dcapqvl-v4-b0c06f-uptodate") else {
        return;
    };
    let quote = read(&dir.join("quote.bin"));
    let expected: serde_json::Value =
        serde_json::from_slice(&read(&dir.join("expected.json"))).expect("expected.json");
    let at = time::OffsetDateTime::from_unix_timestamp(
        expected["reference_time_unix"].as_i64().expect("time"),
    )
    .expect("time");
    let mut input = Input::new(&quote, at);
    input.collateral.tdx = Some(read(&dir.join("collateral.json")));
    let v = verify_tdx_quote(&input).expect("a quote");
    assert!(v.verified(), "{:?}", v.failures);
    let chain = v.claim("chain").expect("chain row");
    assert_eq!(chain.status, ClaimStatus::Held);
    assert!(
        chain
            .anchor
            .as_deref()
            .is_some_and(|a| a.contains("Intel SGX Root CA")),
        "{chain:?}"
    );
    assert_eq!(v.claim("tcb").expect("row").status, ClaimStatus::Held);

    // Collateral that does not parse is an error, not a failed check.
    input.collateral.tdx = Some(b"{}".to_vec());
    assert!(matches!(verify_tdx_quote(&input), Err(VerifyError::Tdx(_))));
    // Nor is a quote of ten bytes.
    input.bytes = &[0u8; 10];
    input.collateral.tdx = None;
    assert!(matches!(verify_tdx_quote(&input), Err(VerifyError::Tdx(_))));
}

#[test]
fn evidence_of_the_real_report_fails_only_the_key_binding_and_names_every_run_claim() {
    let Some(dir) = attestation::vectors::dir("snp/milan-v2-virtee-sev") else {
        return;
    };
    let certs = CertBundle::from_dir(&dir, SigningKey::Vcek).expect("certs");
    let key = p384::ecdsa::SigningKey::from_slice(&[7u8; 48]).expect("a P-384 scalar");
    let nonce = vec![0x5a; 32];
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::SevSnp,
        Inputs {
            nonce: nonce.clone(),
            ..Inputs::default()
        },
        "entry_points test",
    );
    let evidence = Evidence::seal(
        TeeLabel::SevSnp,
        read(&dir.join("report.bin")),
        vec![
            certs.leaf.clone(),
            certs.intermediate.clone(),
            certs.ark.clone(),
        ],
        None,
        &key,
        &verdict,
    )
    .and_then(|e| e.to_cbor())
    .expect("sealed");
    let mut input = Input::new(&evidence, collection_time());
    input.pins.nonce = Some(nonce);
    input.pins.any_measurement = true;
    let v = verify_evidence(&input).expect("evidence");
    let failed: Vec<&str> = v.failures.iter().map(|f| f.check.as_ref()).collect();
    assert_eq!(failed, ["key-binding"], "{:?}", v.failures);
    assert!(matches!(v.detail, Detail::Evidence(_)));
    assert_eq!(v.claim("chain").expect("row").status, ClaimStatus::Held);
    assert_eq!(
        v.claim("key binding").expect("row").status,
        ClaimStatus::Failed
    );
    // Nothing about the run was pinned: each of those rows says "not pinned".
    for name in ["commit", "tree", "patch", "job"] {
        assert_eq!(
            v.claim(name).expect("row").status,
            ClaimStatus::NotPinned,
            "{name}"
        );
    }

    let junk = Input::new(b"not cbor", collection_time());
    assert!(matches!(
        verify_evidence(&junk),
        Err(VerifyError::Evidence(_))
    ));
}

#[test]
fn the_shared_policy_pins_a_bare_report_and_quote_and_the_other_tees_policy_does_not() {
    let Some(snp_dir) = attestation::vectors::dir("snp/milan-v2-virtee-sev") else {
        return;
    };
    let report = read(&snp_dir.join("report.bin"));
    let measurement = attestation::snp::AttestationReport::from_bytes(&report)
        .expect("report")
        .measurement;
    let mut input = Input::new(&report, collection_time());
    input.collateral.snp_certs =
        Some(CertBundle::from_dir(&snp_dir, SigningKey::Vcek).expect("certs"));
    // The shared pin of the report's own measurement holds; another fails the measurement row alone.
    input.policy.shared.measurements = vec![attestation::hex::Hex(measurement)];
    let v = verify_snp_report(&input).expect("a report");
    assert!(v.verified(), "{:?}", v.failures);
    assert_eq!(
        v.claim("measurement").expect("row").status,
        ClaimStatus::Held
    );
    input.policy.shared.measurements = vec!["11".repeat(48).parse().expect("hex")];
    let v = verify_snp_report(&input).expect("a report");
    let checks: Vec<&str> = v.failures.iter().map(|f| f.check.as_ref()).collect();
    assert_eq!(checks, ["measurement"]);
    // The TDX policy is not read for an SEV-SNP report.
    input.policy.shared = Default::default();
    input.policy.tdx.mrtd = vec![[0x11; 48]];
    input.policy.tdx.report_data = Some([0x22; 64]);
    let v = verify_snp_report(&input).expect("a report");
    assert!(v.verified(), "{:?}", v.failures);

    let Some(dir) = attestation::vectors::dir("tdx/dcapqvl-v4-b0c06f-uptodate") else {
        return;
    };
    let quote = read(&dir.join("quote.bin"));
    let expected: serde_json::Value =
        serde_json::from_slice(&read(&dir.join("expected.json"))).expect("expected.json");
    let at = time::OffsetDateTime::from_unix_timestamp(
        expected["reference_time_unix"].as_i64().expect("time"),
    )
    .expect("time");
    let mut input = Input::new(&quote, at);
    input.collateral.tdx = Some(read(&dir.join("collateral.json")));
    let mrtd = match verify_tdx_quote(&input).expect("a quote").detail {
        Detail::TdxQuote(t) => t.quote.td().mrtd,
        other => panic!("a TDX quote's detail, got {other:?}"),
    };
    // An SEV-SNP policy that pins another measurement and other REPORT_DATA is not read for a TDX quote.
    input.policy.snp.measurements = vec!["11".repeat(48).parse().expect("hex")];
    input.policy.snp.report_data = Some("22".repeat(64).parse().expect("hex"));
    let v = verify_tdx_quote(&input).expect("a quote");
    assert!(v.verified(), "{:?}", v.failures);
    // The shared measurements are MRTDs.
    input.policy.shared.measurements = vec![attestation::hex::Hex(mrtd)];
    let v = verify_tdx_quote(&input).expect("a quote");
    assert!(v.verified(), "{:?}", v.failures);
    assert_eq!(
        v.claim("measurement").expect("row").status,
        ClaimStatus::Held
    );
    input.policy.shared.measurements = vec!["11".repeat(48).parse().expect("hex")];
    let v = verify_tdx_quote(&input).expect("a quote");
    let checks: Vec<&str> = v.failures.iter().map(|f| f.check.as_ref()).collect();
    assert_eq!(checks, ["mrtd"]);
}
