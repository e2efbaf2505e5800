//! X.509 path validation of Intel's chains (issue 20): each sim chain or collateral below carries exactly one
//! defect a compromised PCK key or collateral source could produce, and each is refused with its named check.
//! The real-data variants put the attacker's step on the real Intel chain of a vector (the forged signature
//! fails too, but the path checks must name the defect on their own).

use attestation::sim::tdx::{forged_leaf_under, SimDefect, SimPlatform, SimQe, SimTd};
use attestation::tdx::Quote;
use verifier_lib::tdx::x509::{parse_pem_chain, Cert};
use verifier_lib::tdx::{
    verify_quote, verify_quote_parsed, Collateral, Policy, TcbStatus, TdxVerification,
    VerifyOptions,
};

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn checks(r: &TdxVerification) -> Vec<&str> {
    r.failures.iter().map(|f| f.check.as_ref()).collect()
}

fn sim_verify(quote: &[u8], coll_json: &[u8], policy: &Policy) -> TdxVerification {
    let coll = Collateral::from_json(coll_json).expect("collateral parses");
    let opts = VerifyOptions {
        collateral: Some(&coll),
        at: now(),
        policy,
        allow_simulated: true,
    };
    verify_quote(quote, &opts).expect("quote parses")
}

#[test]
fn the_sim_chain_without_defects_verifies() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let td = SimTd::default();
    let r = sim_verify(
        &qe.quote(&td).expect("quote"),
        &qe.collateral_json(&td.tee_tcb_svn).expect("collateral"),
        &Policy::default(),
    );
    assert!(r.verified(), "{:?}", r.failures);
    assert!(r.authenticity.pck_chain_path);
}

#[test]
fn a_pck_leaf_that_signs_another_leaf_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let td = SimTd::default();
    let quote = qe
        .quote_with_defect(&td, SimDefect::LeafSignsLeaf)
        .expect("quote");
    let r = sim_verify(
        &quote,
        &qe.collateral_json(&td.tee_tcb_svn).expect("collateral"),
        &Policy::default(),
    );
    let c = checks(&r);
    assert!(!r.verified());
    // Every signature verifies (the PCK key really signed the forged leaf): only path validation refuses it.
    assert!(r.authenticity.pck_chain_signatures, "{c:?}");
    assert!(r.authenticity.qe_report_signature, "{c:?}");
    assert!(!r.authenticity.pck_chain_path);
    assert!(c.contains(&"pck-chain-shape"), "{c:?}");
    assert!(c.contains(&"pck-chain-ca-basic-constraints"), "{c:?}");
    // The forged leaf claims the highest TCB: without path validation this was VERIFIED, UpToDate.
    assert_eq!(r.tcb_status(), Some(TcbStatus::UpToDate));
}

#[test]
fn a_pck_leaf_whose_cpusvn_disagrees_with_its_components_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let td = SimTd::default();
    let quote = qe
        .quote_with_defect(&td, SimDefect::CpusvnMismatch)
        .expect("quote");
    let r = sim_verify(
        &quote,
        &qe.collateral_json(&td.tee_tcb_svn).expect("collateral"),
        &Policy::default(),
    );
    assert_eq!(checks(&r), ["pck-chain-leaf-sgx-extensions-cpusvn"]);
}

#[test]
fn tcb_info_signed_by_a_pck_key_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let td = SimTd::default();
    let issued = now() as u64 - 3600;
    let coll = qe
        .collateral_json_with_defect(&td.tee_tcb_svn, issued, SimDefect::CollateralSignedByPck)
        .expect("collateral");
    let r = sim_verify(&qe.quote(&td).expect("quote"), &coll, &Policy::default());
    let c = checks(&r);
    assert!(!r.verified());
    let checked = r.collateral.as_ref().expect("collateral checked");
    // The PCK key's signature over the TCB Info verifies; the signer is refused for what it is.
    assert!(checked.tcb_info_signature, "{c:?}");
    assert!(!checked.tcb_info_chain);
    assert!(!checked.qe_identity_chain);
    for name in ["tcb-info-issuer-chain", "qe-identity-issuer-chain"] {
        assert!(c.contains(&format!("{name}-shape").as_str()), "{c:?}");
        assert!(c.contains(&format!("{name}-leaf-role").as_str()), "{c:?}");
    }
}

#[test]
fn an_expired_or_future_crl_is_refused_naming_the_date() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let td = SimTd::default();
    let quote = qe.quote(&td).expect("quote");
    let issued = now() as u64 - 3600;
    for (defect, check) in [
        (SimDefect::ExpiredCrl, "root-ca-crl-next-update"),
        (SimDefect::FutureCrl, "root-ca-crl-this-update"),
    ] {
        let coll = qe
            .collateral_json_with_defect(&td.tee_tcb_svn, issued, defect)
            .expect("collateral");
        let r = sim_verify(&quote, &coll, &Policy::default());
        assert_eq!(checks(&r), [check], "{defect:?}");
        let f = &r.failures[0];
        // The failure says which date: the CRL's own, as RFC 3339.
        assert!(
            f.wanted_str().contains('T') && f.wanted_str().ends_with('Z'),
            "{f:?}"
        );
        assert!(!r.collateral.as_ref().expect("checked").fresh);
    }
}

#[test]
fn td_attribute_bits_the_default_policy_refuses() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let base = SimTd::default();
    let coll = qe.collateral_json(&base.tee_tcb_svn).expect("collateral");
    let with_bit = |bit: u32| {
        let mut td = base.clone();
        let a = u64::from_le_bytes(td.td_attributes) | (1u64 << bit);
        td.td_attributes = a.to_le_bytes();
        qe.quote(&td).expect("quote")
    };
    for (bit, check) in [
        (29, "td-attributes-migratable"),
        (63, "td-attributes-perfmon"),
        (5, "td-attributes-reserved"),
        (40, "td-attributes-reserved"),
    ] {
        let r = sim_verify(&with_bit(bit), &coll, &Policy::default());
        assert_eq!(checks(&r), [check], "bit {bit}");
    }
    let lenient = Policy {
        allow_migratable: true,
        allow_perfmon: true,
        ..Policy::default()
    };
    for bit in [29, 63, 30, 31] {
        let r = sim_verify(&with_bit(bit), &coll, &lenient);
        assert!(r.verified(), "bit {bit}: {:?}", r.failures);
    }
    // A reserved bit is refused whatever the policy allows.
    let r = sim_verify(&with_bit(5), &coll, &lenient);
    assert_eq!(checks(&r), ["td-attributes-reserved"]);
}

/// The dcap-qvl UpToDate vector: its quote, collateral JSON and time inside every window.
fn real() -> Option<(Quote, serde_json::Value, i64)> {
    let dir = attestation::vectors::dir("tdx")?.join("dcapqvl-v4-b0c06f-uptodate");
    let quote = Quote::parse(&std::fs::read(dir.join("quote.bin")).expect("quote")).expect("parse");
    let coll: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("collateral.json")).expect("collateral"))
            .expect("json");
    let c = Collateral::from_json(coll.to_string().as_bytes()).expect("collateral");
    let at = time::OffsetDateTime::parse(
        &c.tcb_info.issue_date,
        &time::format_description::well_known::Rfc3339,
    )
    .expect("date")
    .unix_timestamp()
        + 3600;
    Some((quote, coll, at))
}

fn permissive() -> Policy {
    let mut p = Policy::default();
    p.accepted_tcb_statuses.extend([
        TcbStatus::OutOfDate,
        TcbStatus::ConfigurationNeeded,
        TcbStatus::OutOfDateConfigurationNeeded,
    ]);
    p
}

#[test]
fn real_vector_keeps_verifying_and_its_path_checks_pass() {
    let Some((quote, coll, at)) = real() else {
        return;
    };
    let c = Collateral::from_json(coll.to_string().as_bytes()).expect("collateral");
    let policy = permissive();
    let opts = VerifyOptions {
        collateral: Some(&c),
        at,
        policy: &policy,
        allow_simulated: false,
    };
    let r = verify_quote_parsed(quote, None, &opts);
    assert!(r.authenticity.pck_chain_path, "{:?}", r.failures);
    let path: Vec<_> = checks(&r)
        .into_iter()
        .filter(|c| c.contains("shape") || c.contains("constraints") || c.contains("role"))
        .collect();
    assert!(path.is_empty(), "{path:?}");
    let used = r.collateral_used.as_ref().expect("collateral used");
    assert_eq!(used.tcb_info_issue_date, c.tcb_info.issue_date);
}

#[test]
fn real_chain_with_a_leaf_minted_under_the_pck_leaf_is_refused_by_path_checks() {
    let Some((quote, coll, at)) = real() else {
        return;
    };
    let chain = parse_pem_chain("pck", quote.pck_chain_pem().expect("type 5")).expect("chain");
    let forged = forged_leaf_under(
        chain[0].der(),
        &SimPlatform {
            sgx_tcb_components: [0xff; 16],
            ..SimPlatform::default()
        },
    )
    .expect("forge");
    let mut longer = vec![Cert::from_der("forged", &forged).expect("cert")];
    longer.extend(chain);
    let c = Collateral::from_json(coll.to_string().as_bytes()).expect("collateral");
    let policy = permissive();
    let opts = VerifyOptions {
        collateral: Some(&c),
        at,
        policy: &policy,
        allow_simulated: false,
    };
    let r = verify_quote_parsed(quote, Some(longer), &opts);
    let c = checks(&r);
    assert!(c.contains(&"pck-chain-shape"), "{c:?}");
    assert!(c.contains(&"pck-chain-ca-basic-constraints"), "{c:?}");
    assert!(c.contains(&"pck-chain-ca-key-usage"), "{c:?}");
}

#[test]
fn real_tcb_info_with_the_pck_chain_as_its_issuer_chain_is_refused() {
    let Some((quote, mut coll, at)) = real() else {
        return;
    };
    let pck_pem = String::from_utf8_lossy(quote.pck_chain_pem().expect("type 5"))
        .trim_end_matches('\0')
        .to_string();
    coll["tcb_info_issuer_chain"] = pck_pem.into();
    let c = Collateral::from_json(coll.to_string().as_bytes()).expect("collateral");
    let policy = permissive();
    let opts = VerifyOptions {
        collateral: Some(&c),
        at,
        policy: &policy,
        allow_simulated: false,
    };
    let r = verify_quote_parsed(quote, None, &opts);
    let c = checks(&r);
    assert!(c.contains(&"tcb-info-issuer-chain-shape"), "{c:?}");
    assert!(c.contains(&"tcb-info-issuer-chain-leaf-role"), "{c:?}");
    assert!(
        c.contains(&"tcb-info-issuer-chain-leaf-subject-name"),
        "{c:?}"
    );
}
