//! X.509 path validation of AMD's chains and the product checks (issue 20): a sim chain carrying exactly one
//! defect (an ASK that is not a CA, a VCEK that is a CA, a productName disagreeing with the issuer, an unknown
//! CPUID family) is refused with its named check; on real data, a real VCEK used as the issuer of a leaf is
//! refused by the path checks alone.

use attestation::sim::snp::SimSnpDefect;
use attestation::sim::SimPsp;
use attestation::snp::{AttestationReport, Cpuid, Product};
use std::path::PathBuf;
use verifier_lib::snp::chain::checks;
use verifier_lib::snp::{verify_chain, verify_report, CertBundle, ChainOptions, Policy};

fn state_dir() -> PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-verifier-lib-tests-sim")
}

fn sim() -> ChainOptions {
    ChainOptions {
        allow_simulated: true,
        ..ChainOptions::default()
    }
}

fn failures_with(psp: &SimPsp, defect: SimSnpDefect) -> Vec<(String, String)> {
    let (bytes, certs) = psp
        .sign_report_with_defect(psp.report_template([0; 48], [0; 64]), defect)
        .expect("sign");
    let report = AttestationReport::from_bytes(&bytes).expect("report");
    let bundle = CertBundle::from_der_list(&certs).expect("bundle");
    verify_report(&report, &bundle, &sim(), &Policy::default())
        .failures
        .into_iter()
        .map(|f| (f.check.to_string(), f.detail))
        .collect()
}

#[test]
fn the_sim_chain_passes_path_validation() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let (bytes, certs) = psp
        .sign_report(psp.report_template([0; 48], [0; 64]))
        .expect("sign");
    let report = AttestationReport::from_bytes(&bytes).expect("report");
    let bundle = CertBundle::from_der_list(&certs).expect("bundle");
    let v = verify_report(&report, &bundle, &sim(), &Policy::default());
    assert!(v.verified(), "{:?}", v.failures);
}

#[test]
fn an_ask_that_is_not_a_ca_is_refused() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let f = failures_with(&psp, SimSnpDefect::AskNotCa);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, checks::CERT_PATH);
    assert!(
        f[0].1.starts_with("basic-constraints: ASK/ASVK"),
        "{}",
        f[0].1
    );
}

#[test]
fn a_vcek_that_is_a_ca_is_refused() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let f = failures_with(&psp, SimSnpDefect::VcekIsCa);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, checks::CERT_PATH);
    assert!(f[0].1.starts_with("leaf-is-ca: VCEK/VLEK"), "{}", f[0].1);
}

#[test]
fn a_product_name_disagreeing_with_the_issuer_is_refused() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let f = failures_with(&psp, SimSnpDefect::ProductNameMismatch);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, checks::PRODUCT);
    assert!(f[0].1.contains("productName"), "{}", f[0].1);
}

#[test]
fn an_unknown_cpuid_family_is_refused() {
    let psp = SimPsp::new(&state_dir(), Product::Genoa).expect("sim psp");
    let mut r = psp.report_template([0; 48], [0; 64]);
    assert!(r.cpuid.is_some(), "the sim Genoa report is v3+");
    r.cpuid = Some(Cpuid {
        family: 0x17,
        model: 0x31,
        stepping: 0,
    });
    let (bytes, certs) = psp.sign_report(r).expect("sign");
    let report = AttestationReport::from_bytes(&bytes).expect("report");
    let bundle = CertBundle::from_der_list(&certs).expect("bundle");
    let v = verify_report(&report, &bundle, &sim(), &Policy::default());
    let f: Vec<_> = v
        .failures
        .iter()
        .filter(|f| f.check == checks::PRODUCT)
        .collect();
    assert_eq!(f.len(), 1, "{:?}", v.failures);
    assert!(f[0].detail.contains("family 0x17"), "{}", f[0].detail);
}

#[test]
fn real_vcek_as_the_issuer_of_a_leaf_is_refused_by_path_checks() {
    let Some(dir) = attestation::vectors::dir("snp") else {
        return;
    };
    let dir = dir.join("milan-v2-virtee-sev");
    let real = CertBundle::from_dir(&dir, attestation::snp::SigningKey::Vcek).expect("bundle");
    // The attacker's chain: any certificate in the leaf position, the real VCEK as its issuer, the real ARK.
    let bundle = CertBundle {
        ark: real.ark.clone(),
        intermediate: real.leaf.clone(),
        leaf: real.leaf.clone(),
    };
    let out = verify_chain(&bundle, &ChainOptions::default(), None);
    let path: Vec<_> = out
        .failures
        .iter()
        .filter(|f| f.check == checks::CERT_PATH)
        .map(|f| f.detail.as_str())
        .collect();
    assert!(
        path.iter()
            .any(|d| d.starts_with("basic-constraints: ASK/ASVK")),
        "{path:?}"
    );
    // And the real chain itself passes path validation.
    let ok = verify_chain(&real, &ChainOptions::default(), None);
    assert!(
        !ok.failures.iter().any(|f| f.check == checks::CERT_PATH),
        "{:?}",
        ok.failures
    );
}
