//! The process tier as a whole pipeline: job -> fenced run -> sim evidence (`--evidence`) -> verification with
//! simulated evidence allowed, any measurement, and the founder's nonce; a wrong nonce is rejected.

use fenced_run_tests::fence::{skip, Case};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn options(nonce: &[u8]) -> verifier_lib::EvidenceOptions {
    let mut o = verifier_lib::EvidenceOptions::default();
    o.chain.allow_simulated = true;
    o.any_measurement = true;
    o.nonce = Some(nonce.to_vec());
    o
}

#[test]
fn evidence_of_a_fenced_run_verifies() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let out = c.path().join("run.evidence");
    let nonce = "00112233445566778899aabbccddeeff0011223344556677";
    let r = c.run_with(
        &["--evidence", out.to_str().expect("utf8"), "--nonce", nonce],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let bytes = std::fs::read(&out).expect("evidence written");
    let nonce = hex::decode(nonce).expect("hex");
    let v = verifier_lib::verify_evidence_bytes(&bytes, &options(&nonce)).expect("decodes");
    assert!(v.verified(), "{:?}", v.failures);
    assert!(v.simulated);
    let verdict = v.verdict.expect("verdict");
    assert_eq!(verdict.outcome.as_str(), "tests_passed");
    assert_eq!(verdict.inputs.nonce, nonce);

    let mut wrong = nonce.clone();
    wrong[0] ^= 1;
    let v = verifier_lib::verify_evidence_bytes(&bytes, &options(&wrong)).expect("decodes");
    assert!(!v.verified(), "a wrong nonce must be rejected");
    c.assert_clean(&r, &[]);
}
