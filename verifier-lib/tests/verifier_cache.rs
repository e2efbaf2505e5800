//! The chain cache of `verifier_lib::Verifier`: a second report of the same chip (a second quote of the same
//! platform) is answered from the cache except for its own signature, with exactly the result of an uncached
//! verification; and every signed text is checked as received (a byte the JSON parser ignores still counts).

mod snp_common;

use snp_common::{report_vectors, snp_vectors};
use verifier_lib::snp::{self, CertBundle, ChainOptions, Policy, SnpInput};
use verifier_lib::tdx::{self, Collateral, VerifyOptions};
use verifier_lib::{CacheStats, Verifier};

#[test]
fn second_snp_report_of_a_chip_costs_only_its_own_signature() {
    let Some(dir) = snp_vectors() else { return };
    let vectors = report_vectors(&dir);
    let v = vectors
        .iter()
        .find(|v| v.name == "milan-v2-go-sev-guest")
        .expect("milan-v2-go-sev-guest vector");
    let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("certs");
    let opts = ChainOptions {
        at: v.at(),
        crl: None,
        allow_simulated: false,
    };
    let policy = Policy {
        allow_debug: true,
        ..Policy::default()
    };
    let input = SnpInput {
        report: &v.report,
        certs: &bundle,
    };
    let uncached = snp::verify_report_bytes(&input, &opts, &policy).expect("parses");
    assert!(uncached.verified(), "{:?}", uncached.failures);

    let verifier = Verifier::new();
    let first = verifier.snp(&input, &opts, &policy).expect("parses");
    // ASK by ARK, VCEK by ASK: verified once, remembered (the ARK is AMD's own, byte for byte, so its
    // self-signature is known good and never checked: verifier_lib::anchors).
    assert_eq!(verifier.stats(), CacheStats { hits: 0, misses: 2 });
    let second = verifier.snp(&input, &opts, &policy).expect("parses");
    assert_eq!(verifier.stats(), CacheStats { hits: 2, misses: 2 });
    assert_eq!(first.failures, uncached.failures);
    assert_eq!(second.failures, uncached.failures);
    assert!(second.signature_valid && second.chain.signatures_valid());

    // The report's own signature is never cached: a changed report fails at once.
    let mut tampered = v.report.clone();
    tampered[0x50] ^= 1;
    let bad = verifier
        .snp(
            &SnpInput {
                report: &tampered,
                certs: &bundle,
            },
            &opts,
            &policy,
        )
        .expect("parses");
    assert!(!bad.signature_valid);
    assert!(
        bad.failures.iter().any(|f| f.check == "report-signature"),
        "{:?}",
        bad.failures
    );
    assert_eq!(verifier.stats(), CacheStats { hits: 4, misses: 2 });
}

fn tdx_vector() -> Option<(Vec<u8>, serde_json::Value, i64)> {
    let dir = attestation::vectors::dir("tdx/dcapqvl-v4-b0c06f-uptodate")?;
    let q = std::fs::read(dir.join("quote.bin")).expect("quote");
    let c = serde_json::from_slice(&std::fs::read(dir.join("collateral.json")).expect("c"))
        .expect("json");
    let e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("e")).expect("j");
    Some((q, c, e["reference_time_unix"].as_i64().expect("t")))
}

#[test]
fn second_tdx_quote_of_a_platform_reuses_chain_and_collateral_signatures() {
    let Some((quote, coll, at)) = tdx_vector() else {
        return;
    };
    let coll = Collateral::from_json(coll.to_string().as_bytes()).expect("collateral");
    let policy = tdx::Policy::default();
    let opts = VerifyOptions {
        collateral: Some(&coll),
        at,
        policy: &policy,
        allow_simulated: false,
    };
    let uncached = tdx::verify_quote(&quote, &opts).expect("parses");
    let verifier = Verifier::new();
    let first = verifier.tdx(&quote, &opts).expect("parses");
    let after_first = verifier.stats();
    // PCK chain (3), TCB Info and QE Identity chains (2 each, the same certificates: hits already), two CRLs,
    // the QE report, TCB Info and QE Identity.
    assert!(after_first.misses >= 8, "{after_first:?}");
    let second = verifier.tdx(&quote, &opts).expect("parses");
    let after_second = verifier.stats();
    // Nothing new was verified but the quote's own signature (which does not go through the cache): every
    // check that went through the cache on the first call is a hit on the second.
    assert_eq!(after_second.misses, after_first.misses, "{after_second:?}");
    assert_eq!(
        after_second.hits - after_first.hits,
        after_first.hits + after_first.misses,
        "{after_second:?}"
    );
    assert_eq!(first.failures, uncached.failures);
    assert_eq!(second.failures, uncached.failures);
    assert_eq!(second.authenticity, uncached.authenticity);
}

#[test]
fn tcb_info_and_qe_identity_are_checked_over_the_exact_received_text() {
    let Some((quote, coll, at)) = tdx_vector() else {
        return;
    };
    let policy = tdx::Policy::default();
    for (field, check) in [
        ("tcb_info", "tcb-info-signature"),
        ("qe_identity", "qe-identity-signature"),
    ] {
        // One space after the opening brace: the JSON parser ignores it, the signature must not.
        let mut c = coll.clone();
        let text = c[field].as_str().expect("text").to_string();
        assert!(text.starts_with('{'), "{field}");
        c[field] = serde_json::Value::String(format!("{{ {}", &text[1..]));
        let parsed = Collateral::from_json(c.to_string().as_bytes()).expect("still parses");
        let opts = VerifyOptions {
            collateral: Some(&parsed),
            at,
            policy: &policy,
            allow_simulated: false,
        };
        let r = tdx::verify_quote(&quote, &opts).expect("parses");
        let names: Vec<&str> = r.failures.iter().map(|f| f.check.as_ref()).collect();
        assert_eq!(names, [check], "{field}: {:?}", r.failures);
    }
}
