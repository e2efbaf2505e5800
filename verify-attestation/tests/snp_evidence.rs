//! Evidence verification over sim SEV-SNP bundles (Milan, Genoa, Turin layouts): the round trip verifies, and a
//! wrong nonce, another key, a swapped verdict, a truncated report, a false label or sim evidence without
//! `--allow-simulated` are each rejected naming the right check. Also drives the `evidence` CLI.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::hex::Hex;
use attestation::sim::SimPsp;
use attestation::snp::Product;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use std::path::PathBuf;
use std::process::Command;
use verifier_lib::evidence::{checks, verify_evidence, EvidenceOptions, EvidenceVerification};
use verifier_lib::snp::{ChainOptions, Policy};

const MEASUREMENT: [u8; 48] = [0x5A; 48];

/// A state directory shared by the tests so the sim RSA-4096 roots are generated once.
fn state_dir() -> PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-verifier-lib-tests-sim")
}

fn key(label: &str) -> SigningKey {
    let seed = Sha384::digest(label.as_bytes());
    SigningKey::from_slice(&seed).expect("a SHA-384 digest is a valid P-384 scalar")
}

struct Bundle {
    psp: SimPsp,
    key: SigningKey,
    nonce: Vec<u8>,
}

impl Bundle {
    fn new(product: Product) -> Bundle {
        Bundle {
            psp: SimPsp::new(&state_dir(), product).expect("sim psp"),
            key: key("guest"),
            nonce: vec![7; 32],
        }
    }

    /// Evidence whose report binds `bound_key`/`bound_nonce`, whose verdict carries `verdict_nonce` and is signed
    /// by `signer`.
    fn evidence(
        &self,
        bound_key: &SigningKey,
        bound_nonce: &[u8],
        verdict_nonce: &[u8],
        signer: &SigningKey,
    ) -> Evidence {
        let rd = binding::report_data(
            &p384::PublicKey::from(bound_key.verifying_key()),
            bound_nonce,
        );
        let (report, certs) = self
            .psp
            .sign_report(self.psp.report_template(MEASUREMENT, rd))
            .expect("sign");
        let inputs = Inputs {
            nonce: verdict_nonce.to_vec(),
            ..Inputs::default()
        };
        let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
        Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, signer, &verdict).expect("seal")
    }

    fn good(&self) -> Evidence {
        self.evidence(&self.key, &self.nonce, &self.nonce, &self.key)
    }

    fn opts(&self, allow_simulated: bool) -> EvidenceOptions {
        EvidenceOptions {
            chain: ChainOptions {
                allow_simulated,
                ..ChainOptions::default()
            },
            policy: Policy {
                measurements: vec![Hex(MEASUREMENT)],
                ..Policy::default()
            },
            nonce: Some(self.nonce.clone()),
            any_measurement: false,
            measurement_set: None,
            tdx_collateral: None,
            ..EvidenceOptions::default()
        }
    }
}

fn checks_of(v: &EvidenceVerification) -> Vec<String> {
    v.failures.iter().map(|f| f.check.to_string()).collect()
}

#[test]
fn sim_round_trip_for_each_product_layout() {
    for product in [Product::Milan, Product::Genoa, Product::Turin] {
        let b = Bundle::new(product);
        let ev = Evidence::from_cbor(&b.good().to_cbor().expect("cbor")).expect("decode");
        let v = verify_evidence(&ev, &b.opts(true));
        assert!(v.verified(), "{product}: {:?}", v.failures);
        assert!(
            v.simulated && v.nonce_checked && v.measurement_pinned,
            "{product}"
        );
        let verifier_lib::evidence::ReportVerification::Snp(s) = &v.report else {
            panic!("{product}: not SNP")
        };
        assert_eq!(s.product(), Some(product));
        assert_eq!(
            s.report.reported_tcb.decode(product).fmc.is_some(),
            product == Product::Turin
        );
        assert_eq!(
            v.verdict.as_ref().map(|d| d.inputs.nonce.clone()),
            Some(b.nonce.clone())
        );
    }
}

#[test]
fn sim_evidence_without_allow_simulated_is_rejected() {
    let b = Bundle::new(Product::Genoa);
    let v = verify_evidence(&b.good(), &b.opts(false));
    assert_eq!(checks_of(&v), vec![checks::SIMULATED], "{:?}", v.failures);
}

#[test]
fn wrong_nonce_is_rejected_by_the_binding_and_the_nonce_check() {
    let b = Bundle::new(Product::Milan);
    let mut opts = b.opts(true);
    opts.nonce = Some(vec![9; 32]);
    let v = verify_evidence(&b.good(), &opts);
    assert_eq!(
        checks_of(&v),
        vec![checks::KEY_BINDING, checks::NONCE],
        "{:?}",
        v.failures
    );
    // Report bound to the right nonce, verdict carrying another one: only the verdict's nonce check fails.
    let ev = b.evidence(&b.key, &b.nonce, &[3; 32], &b.key);
    let v = verify_evidence(&ev, &b.opts(true));
    assert_eq!(checks_of(&v), vec![checks::NONCE], "{:?}", v.failures);
}

#[test]
fn another_key_is_rejected_by_the_binding() {
    let b = Bundle::new(Product::Milan);
    let other = key("attacker");
    // The report binds the guest's key; the bundle carries (and its verdict is signed by) another key.
    let ev = b.evidence(&b.key, &b.nonce, &b.nonce, &other);
    let v = verify_evidence(&ev, &b.opts(true));
    assert_eq!(checks_of(&v), vec![checks::KEY_BINDING], "{:?}", v.failures);
}

#[test]
fn swapped_verdict_is_rejected_by_the_signature() {
    let b = Bundle::new(Product::Genoa);
    let mut ev = b.good();
    let other = b.evidence(&key("other"), &b.nonce, &b.nonce, &key("other"));
    ev.verdict = other.verdict;
    let v = verify_evidence(&ev, &b.opts(true));
    assert_eq!(
        checks_of(&v),
        vec![checks::VERDICT_SIGNATURE],
        "{:?}",
        v.failures
    );
}

#[test]
fn truncated_report_is_rejected_as_malformed() {
    let b = Bundle::new(Product::Turin);
    let mut ev = b.good();
    ev.report.truncate(1000);
    let v = verify_evidence(&ev, &b.opts(true));
    assert_eq!(
        checks_of(&v).first().map(String::as_str),
        Some(checks::REPORT_FORMAT),
        "{:?}",
        v.failures
    );
    assert!(
        v.failures[0].detail.contains("1000 bytes"),
        "{}",
        v.failures[0].detail
    );
}

#[test]
fn label_measurement_and_isolation_must_agree() {
    let b = Bundle::new(Product::Milan);
    let mut ev = b.good();
    ev.tee = TeeLabel::SevSnp;
    let v = verify_evidence(&ev, &b.opts(true));
    assert_eq!(checks_of(&v), vec![checks::TEE_LABEL], "{:?}", v.failures);

    let mut opts = b.opts(true);
    opts.policy.measurements = vec![Hex([1; 48])];
    let v = verify_evidence(&b.good(), &opts);
    assert_eq!(checks_of(&v), vec!["measurement"], "{:?}", v.failures);

    opts.policy.measurements.clear();
    let v = verify_evidence(&b.good(), &opts);
    assert_eq!(
        checks_of(&v),
        vec![checks::MEASUREMENT_UNPINNED],
        "{:?}",
        v.failures
    );
    opts.any_measurement = true;
    assert!(verify_evidence(&b.good(), &opts).verified());

    let rd = binding::report_data(&p384::PublicKey::from(b.key.verifying_key()), &b.nonce);
    let (report, certs) = b
        .psp
        .sign_report(b.psp.report_template(MEASUREMENT, rd))
        .expect("sign");
    let inputs = Inputs {
        nonce: b.nonce.clone(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::SevSnp, inputs, "test");
    let ev =
        Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, &b.key, &verdict).expect("seal");
    let v = verify_evidence(&ev, &b.opts(true));
    assert_eq!(checks_of(&v), vec![checks::ISOLATION], "{:?}", v.failures);
}

#[test]
fn evidence_cli_says_simulated_on_every_line_and_exits_by_verdict() {
    let b = Bundle::new(Product::Genoa);
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("run.evidence");
    std::fs::write(&file, b.good().to_cbor().expect("cbor")).expect("write");
    let m = hex::encode(MEASUREMENT);
    let n = hex::encode(&b.nonce);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("evidence")
            .arg(&file)
            .args(args)
            .output()
            .expect("run verify-attestation")
    };
    let out = run(&["--measurement", &m, "--nonce", &n, "--allow-simulated"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().count() > 5 && text.lines().all(|l| l.starts_with("SIMULATED ")),
        "{text}"
    );

    let out = run(&["--measurement", &m, "--nonce", &n]);
    assert_eq!(out.status.code(), Some(1));
    let out = run(&["--measurement", &m, "--nonce", &n, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["verified"], false);
    assert_eq!(json["tee"], "sim-sev-snp");
    assert_eq!(json["failures"][0]["check"], checks::SIMULATED);
    assert_eq!(json["verdict"]["outcome"], "tests_passed");
    for key in [
        "product",
        "signing_key",
        "measurement",
        "report_data",
        "chip_id",
        "reported_tcb",
        "policy",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }

    let out = run(&["--any-measurement", "--no-nonce", "--allow-simulated"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NOT pinned") && text.contains("nonce NOT checked"),
        "{text}"
    );

    // Neither a measurement nor --any-measurement: a usage error.
    assert_eq!(
        run(&["--allow-simulated", "--nonce", &n]).status.code(),
        Some(2)
    );
    // Neither --nonce nor --no-nonce: a usage error.
    assert_eq!(
        run(&["--any-measurement", "--allow-simulated"])
            .status
            .code(),
        Some(2)
    );
    // Not evidence at all: unusable input.
    std::fs::write(&file, b"not cbor").expect("write");
    assert_eq!(
        run(&["--any-measurement", "--no-nonce"]).status.code(),
        Some(2)
    );
}

#[test]
fn help_documents_the_policy_defaults() {
    for sub in ["snp-report", "evidence"] {
        let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .args([sub, "--help"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{sub}");
        let text = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for flag in [
            "--allow-debug",
            "--allow-migration-agent",
            "--forbid-smt",
            "--min-tcb",
            "--vmpl",
            "--measurement",
        ] {
            assert!(text.contains(flag), "{sub} --help lacks {flag}");
        }
        assert!(
            text.contains("Default: forbidden") && text.contains("Default: any VMPL"),
            "{sub}: {text}"
        );
    }
}

#[test]
fn snp_report_cli_on_a_sim_chain_needs_allow_simulated_and_says_so() {
    let b = Bundle::new(Product::Turin);
    let (report, certs) = b
        .psp
        .sign_report(b.psp.report_template(MEASUREMENT, [0; 64]))
        .expect("sign");
    let tmp = tempfile::tempdir().expect("tmp");
    let pem = |der: &[u8]| {
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        )
    };
    std::fs::write(tmp.path().join("report.bin"), &report).expect("write");
    std::fs::write(tmp.path().join("vcek.der"), &certs[0]).expect("write");
    std::fs::write(tmp.path().join("ask.pem"), pem(&certs[1])).expect("write");
    std::fs::write(tmp.path().join("ark.pem"), pem(&certs[2])).expect("write");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("snp-report")
            .arg(tmp.path().join("report.bin"))
            .arg("--certs")
            .arg(tmp.path())
            .args(["--measurement", &hex::encode(MEASUREMENT)])
            .args(extra)
            .output()
            .expect("run")
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().all(|l| l.starts_with("SIMULATED ")), "{text}");
    assert!(text.contains("FAIL root"), "{text}");
    let out = run(&["--allow-simulated", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["tee"], "sim-sev-snp");
    assert_eq!(json["product"], "Turin");
    assert!(json["reported_tcb"]["fmc"].is_u64(), "{json}");
}

mod arbitrary_contents {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn good() -> &'static (Evidence, EvidenceOptions) {
        static GOOD: OnceLock<(Evidence, EvidenceOptions)> = OnceLock::new();
        GOOD.get_or_init(|| {
            let b = Bundle::new(Product::Genoa);
            (b.good(), b.opts(true))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn arbitrary_report_bytes_are_rejected_without_panicking(report in prop::collection::vec(any::<u8>(), 0..1500)) {
            let (ev, opts) = good();
            let mut ev = ev.clone();
            ev.report = report;
            prop_assert!(!verify_evidence(&ev, opts).verified());
        }

        #[test]
        fn arbitrary_certificates_are_rejected_without_panicking(
            certs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..400), 0..5),
        ) {
            let (ev, opts) = good();
            let mut ev = ev.clone();
            ev.certs = certs;
            prop_assert!(!verify_evidence(&ev, opts).verified());
        }

        #[test]
        fn any_flipped_report_byte_is_rejected(off in 0usize..attestation::snp::REPORT_LEN, bit in 0u8..8) {
            let (ev, opts) = good();
            let mut ev = ev.clone();
            ev.report[off] ^= 1 << bit;
            let v = verify_evidence(&ev, opts);
            // The reserved signature tail is outside the signed part but must be zero, so it is rejected too.
            prop_assert!(!v.verified(), "offset {off:#x}");
        }
    }
}
