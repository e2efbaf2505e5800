//! `verify-attestation evidence --emit-statement FILE --statement-key KEY --ear FILE --ear-key KEY`: the verified
//! run as an in-toto Statement v1 (test-result v0.1) in a DSSE envelope, and the appraisal as an EAR JWT.
//!
//! The envelope's signature and the statement's schema are checked by independent implementations: in-toto's
//! Python libraries from PyPI (securesystemslib's DSSE `Envelope.verify`, in-toto-attestation's `Statement` and
//! `TestResult` protobufs), from the oracle venv `.ci/run` prepares; a tampered payload and a tampered signature
//! must fail that check. The EAR is read back with the `jsonwebtoken` crate (ES256 over ring) and every claim
//! is compared. Evidence: sim SEV-SNP evidence of the demo's job and patch sealed here, and the evidence of
//! `fenced-run demo` itself where that binary is built beside the tests. There is no real-hardware fenced-run
//! evidence among the shared vectors (they are bare reports and quotes), so none is used.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::sim::SimPsp;
use attestation::snp::Product;
use attestation::vectors::{skip_for, SkipKind};
use attestation::verdict::{
    EgressRecord, Inputs, InstallPhase, Isolation, Outcome, TestCounts, Verdict,
};
use base64::Engine;
use p256::pkcs8::{EncodePrivateKey, EncodePublicKey};
use serde_json::Value;
use sha2::{Digest, Sha256, Sha384};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MEASUREMENT: [u8; 48] = [0x3C; 48];
const NONCE: [u8; 32] = [0x5A; 32];
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TREE: &str = "ee820371983d494f3ccdb5a93a33dc4286e8d5af";
const PATCH: &str = include_str!("../../host/demo/fix.patch");
const JOB: &str = include_str!("../../host/demo/job.toml");

fn state_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-standard-forms-sim")
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Sim SEV-SNP evidence of the demo's job and patch: a process-tier run with `outcome`, 3 passed and
/// `failed` failed tests, bound to NONCE; `egress` adds an install phase that fetched through the proxy.
fn evidence(outcome: Outcome, failed: u64, egress: bool) -> Evidence {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let key = p384::ecdsa::SigningKey::from_slice(&Sha384::digest(b"standard forms guest"))
        .expect("scalar");
    let rd = binding::report_data(&p384::PublicKey::from(key.verifying_key()), &NONCE);
    let (report, certs) = psp
        .sign_report(psp.report_template(MEASUREMENT, rd))
        .expect("sign");
    let inputs = Inputs {
        commit: Some(COMMIT.into()),
        tree: Some(TREE.into()),
        patch_sha256: Some(sha(PATCH.as_bytes())),
        job_sha256: Some(sha(JOB.as_bytes())),
        nonce: NONCE.to_vec(),
        protect: Vec::new(),
        test_tree: None,
    };
    let mut verdict = Verdict::new(outcome, Isolation::Process, inputs, "test");
    verdict.tests = Some(TestCounts {
        passed: 3,
        failed,
        skipped: 0,
        parser: "plain".into(),
    });
    if egress {
        verdict.install = Some(InstallPhase {
            command: "true".into(),
            source: "job".into(),
            exit_code: Some(0),
            signal: None,
            duration_ms: 1,
            egress: vec![EgressRecord {
                host: "registry.example".into(),
                port: 443,
                allowed: true,
                reason: "allowlist".into(),
                bytes_up: 10,
                bytes_down: 20,
            }],
            env_names: Vec::new(),
            sandbox: Vec::new(),
            operator_egress: None,
        });
    }
    Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, &key, &verdict).expect("seal")
}

/// The founder's key: a P-256 PKCS#8 PEM written to `dir/name`, and its verifying key.
fn founder_key(dir: &Path, name: &str, seed: &[u8]) -> (PathBuf, p256::ecdsa::VerifyingKey) {
    let k = p256::ecdsa::SigningKey::from_slice(&Sha256::digest(seed)).expect("scalar");
    let p = dir.join(name);
    std::fs::write(
        &p,
        k.to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
            .expect("pem")
            .as_bytes(),
    )
    .expect("write key");
    (p, *k.verifying_key())
}

/// The key id the docs promise: lowercase hex SHA-256 of the DER SubjectPublicKeyInfo.
fn keyid(vk: &p256::ecdsa::VerifyingKey) -> String {
    let der = p256::PublicKey::from(vk)
        .to_public_key_der()
        .expect("spki der");
    hex::encode(Sha256::digest(der.as_bytes()))
}

fn verify(evidence: &Path, measurement: &[u8], nonce: &[u8], extra: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(evidence)
        .args(["--allow-simulated", "--json", "--measurement"])
        .arg(hex::encode(measurement))
        .arg("--nonce")
        .arg(hex::encode(nonce))
        .args(extra)
        .output()
        .expect("run verify-attestation")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

struct Paths {
    statement: PathBuf,
    ear: PathBuf,
    key: PathBuf,
    vk: p256::ecdsa::VerifyingKey,
}

impl Paths {
    fn new(dir: &Path) -> Paths {
        let (key, vk) = founder_key(dir, "founder.pem", b"founder of the standard forms test");
        Paths {
            statement: dir.join("run.intoto.json"),
            ear: dir.join("run.ear.jwt"),
            key,
            vk,
        }
    }

    fn flags(&self) -> Vec<&std::ffi::OsStr> {
        vec![
            "--emit-statement".as_ref(),
            self.statement.as_os_str(),
            "--statement-key".as_ref(),
            self.key.as_os_str(),
            "--ear".as_ref(),
            self.ear.as_os_str(),
            "--ear-key".as_ref(),
            self.key.as_os_str(),
        ]
    }
}

/// The statement inside the envelope at `path`, after checking the envelope's own fields.
fn statement_of(path: &Path) -> Value {
    let env: Value = serde_json::from_slice(&std::fs::read(path).expect("read envelope"))
        .expect("envelope is JSON");
    assert_eq!(env["payloadType"], "application/vnd.in-toto+json");
    let sigs = env["signatures"].as_array().expect("signatures");
    assert_eq!(sigs.len(), 1);
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().expect("payload"))
        .expect("payload is base64");
    serde_json::from_slice(&payload).expect("payload is JSON")
}

/// The EAR's claims, its signature checked by `jsonwebtoken` with the founder's public key.
fn ear_claims(path: &Path, vk: &p256::ecdsa::VerifyingKey) -> (jsonwebtoken::Header, Value) {
    let token = std::fs::read_to_string(path).expect("read ear");
    let point = vk.to_encoded_point(false);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let key = jsonwebtoken::DecodingKey::from_ec_components(
        &b64.encode(point.x().expect("x")),
        &b64.encode(point.y().expect("y")),
    )
    .expect("decoding key");
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    // An EAR has iat but no exp.
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    let data = jsonwebtoken::decode::<Value>(&token, &key, &validation)
        .unwrap_or_else(|e| panic!("the EAR does not verify: {e}"));
    (data.header, data.claims)
}

/// Checks every claim of the EAR of a verified sim run of [`evidence`].
fn check_ear(
    ear: &Value,
    header: &jsonwebtoken::Header,
    vk: &p256::ecdsa::VerifyingKey,
    iat: (i64, i64),
    evidence_bytes: &[u8],
) {
    assert_eq!(header.kid.as_deref(), Some(keyid(vk).as_str()));
    assert_eq!(header.typ.as_deref(), Some("JWT"));
    let mut top: Vec<&String> = ear.as_object().expect("object").keys().collect();
    top.sort();
    assert_eq!(
        top,
        ["ear.verifier-id", "eat_profile", "iat", "submods"],
        "top-level claims"
    );
    assert_eq!(ear["eat_profile"], "tag:github.com,2023:veraison/ear");
    let t = ear["iat"].as_i64().expect("integer iat");
    assert!(iat.0 <= t && t <= iat.1, "iat {t} not within {iat:?}");
    assert_eq!(ear["ear.verifier-id"]["developer"], "fenced-run");
    assert_eq!(
        ear["ear.verifier-id"]["build"],
        format!("verify-attestation {}", env!("CARGO_PKG_VERSION"))
    );
    let submods = ear["submods"].as_object().expect("submods");
    assert_eq!(submods.keys().collect::<Vec<_>>(), ["sim-sev-snp"]);
    let a = &submods["sim-sev-snp"];
    let mut keys: Vec<&String> = a.as_object().expect("appraisal").keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "ear.appraisal-policy-id",
            "ear.status",
            "ear.trustworthiness-vector",
            "eat_nonce",
            "fenced-run.verification"
        ]
    );
    // Sim evidence: no platform identity, hardware unrecognized, memory visible to the host: contraindicated
    // even though every check held.
    assert_eq!(a["ear.status"], "contraindicated");
    assert_eq!(
        a["ear.trustworthiness-vector"],
        serde_json::json!({
            "instance-identity": 0,
            "configuration": 2,
            "executables": 3,
            "file-system": 0,
            "hardware": 97,
            "runtime-opaque": 96,
            "storage-opaque": 0,
            "sourced-data": 0,
        })
    );
    assert_eq!(
        a["ear.appraisal-policy-id"],
        "urn:fenced-run:verify-attestation:evidence"
    );
    assert_eq!(
        a["eat_nonce"],
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(NONCE)
    );
    let own = &a["fenced-run.verification"];
    assert_eq!(own["verified"], true);
    assert_eq!(own["simulated"], true);
    assert_eq!(own["outcome"], "tests_passed");
    assert_eq!(own["tier"], "process");
    assert_eq!(
        own["counts"],
        serde_json::json!({"passed": 3, "failed": 0, "skipped": 0})
    );
    assert_eq!(own["evidence_sha256"], sha(evidence_bytes));
    assert_eq!(own["failures"], serde_json::json!([]));
    let claims = own["claims"].as_array().expect("claims");
    assert_eq!(claims.len(), 17);
    let row = |name: &str| {
        claims
            .iter()
            .find(|c| c["claim"] == name)
            .unwrap_or_else(|| panic!("no claim row {name}"))
    };
    assert_eq!(row("chain")["status"], "held");
    assert_eq!(row("measurement")["status"], "held");
    assert_eq!(row("commit")["status"], "not pinned");
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

#[test]
fn a_verified_run_gives_a_signed_statement_and_an_ear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = evidence(Outcome::TestsPassed, 0, false);
    let bytes = ev.to_cbor().expect("cbor");
    let file = dir.path().join("run.evidence");
    std::fs::write(&file, &bytes).expect("write evidence");
    let p = Paths::new(dir.path());
    let before = now();
    let out = verify(&file, &MEASUREMENT, &NONCE, &p.flags());
    let after = now();
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    assert_eq!(j["statement"]["written"], true, "{j}");
    assert_eq!(j["statement"]["keyid"], keyid(&p.vk));
    assert_eq!(j["ear"]["written"], true);
    assert_eq!(j["ear"]["status"], "contraindicated");

    let s = statement_of(&p.statement);
    assert_eq!(s["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(
        s["predicateType"],
        "https://in-toto.io/attestation/test-result/v0.1"
    );
    assert_eq!(
        s["subject"],
        serde_json::json!([
            {"name": "commit", "digest": {"gitCommit": COMMIT}},
            {"name": "tree", "digest": {"gitTree": TREE}},
            {"name": "patch", "digest": {"sha256": sha(PATCH.as_bytes())}},
        ])
    );
    let pred = &s["predicate"];
    assert_eq!(pred["result"], "PASSED");
    assert_eq!(
        pred["configuration"],
        serde_json::json!([{"name": "job", "digest": {"sha256": sha(JOB.as_bytes())}}])
    );
    // No URL of a run exists and the parser counts tests without naming them: those fields are left out.
    for absent in ["url", "passedTests", "failedTests", "warnedTests"] {
        assert!(pred.get(absent).is_none(), "{absent} present");
    }
    let own = &pred["fencedRun"];
    assert_eq!(own["outcome"], "tests_passed");
    assert_eq!(own["judged"], true);
    assert_eq!(
        own["counts"],
        serde_json::json!({"passed": 3, "failed": 0, "skipped": 0, "parser": "plain"})
    );
    assert_eq!(own["tier"], "process");
    assert_eq!(own["tee"], "sim-sev-snp");
    assert_eq!(own["simulated"], true);
    assert_eq!(own["evidenceSha256"], sha(&bytes));
    assert_eq!(own["nonce"], hex::encode(NONCE));
    assert!(own.get("transcriptSha384").is_none());
    assert_eq!(own["claims"].as_array().map(Vec::len), Some(17));

    // The DSSE signature: DER ECDSA P-256 SHA-256 over PAE(payloadType, payload), keyid of the founder's key.
    let env: Value =
        serde_json::from_slice(&std::fs::read(&p.statement).expect("read")).expect("json");
    assert_eq!(env["signatures"][0]["keyid"], keyid(&p.vk));

    let (header, ear) = ear_claims(&p.ear, &p.vk);
    check_ear(&ear, &header, &p.vk, (before, after), &bytes);
    // Evidence sealed without a fence transcript: neither form names one.
    assert!(ear["submods"]["sim-sev-snp"]["fenced-run.verification"]
        .get("transcript_sha384")
        .is_none());

    // The independent check, where the oracle venv is.
    if let Some(py) = oracle_python() {
        let pem = dir.path().join("founder.pub.pem");
        std::fs::write(&pem, public_pem(&p.vk)).expect("write pem");
        let r = oracle(&py, &p.statement, &pem, &keyid(&p.vk));
        assert!(
            r.status.success(),
            "oracle refused: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let o: Value = serde_json::from_slice(&r.stdout).expect("oracle JSON");
        assert_eq!(o["verified_keyids"], serde_json::json!([keyid(&p.vk)]));
        assert_eq!(o["result"], "PASSED");
    }
}

#[test]
fn a_failed_verification_writes_no_statement_and_a_contraindicated_ear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.evidence");
    std::fs::write(
        &file,
        evidence(Outcome::TestsPassed, 0, false)
            .to_cbor()
            .expect("cbor"),
    )
    .expect("write evidence");
    let p = Paths::new(dir.path());
    // Another nonce than the run's: the key binding and the nonce fail.
    let out = verify(&file, &MEASUREMENT, &[0x11; 32], &p.flags());
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(1), "{j}");
    assert!(
        !p.statement.exists(),
        "a statement was written for a failed verification"
    );
    assert_eq!(j["statement"]["written"], false);
    let why = j["statement"]["why"].as_str().expect("why");
    assert!(
        why.contains("verification failed") && why.contains("key-binding"),
        "{why}"
    );
    let (_, ear) = ear_claims(&p.ear, &p.vk);
    let a = &ear["submods"]["sim-sev-snp"];
    assert_eq!(a["ear.status"], "contraindicated");
    // The binding of the verdict key to the report failed: cryptographic validation of the evidence failed.
    assert_eq!(a["ear.trustworthiness-vector"]["instance-identity"], 99);
    assert_eq!(a["fenced-run.verification"]["verified"], false);
    assert!(a["fenced-run.verification"]["failures"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f["check"] == "key-binding")));

    // A failing measurement pin: executables contraindicated, no statement; the human output says so.
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(&file)
        .args([
            "--allow-simulated",
            "--measurement",
            &"00".repeat(48),
            "--nonce",
            &hex::encode(NONCE),
        ])
        .args(p.flags())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("SIMULATED statement   NOT written to ")),
        "{text}"
    );
    assert!(!p.statement.exists());
    let (_, ear) = ear_claims(&p.ear, &p.vk);
    assert_eq!(
        ear["submods"]["sim-sev-snp"]["ear.trustworthiness-vector"]["executables"],
        96
    );
}

#[test]
fn outcome_counts_and_egress_shape_the_forms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.evidence");
    std::fs::write(
        &file,
        evidence(Outcome::TestsFailed, 2, true)
            .to_cbor()
            .expect("cbor"),
    )
    .expect("write evidence");
    let p = Paths::new(dir.path());
    let mut flags = p.flags();
    flags.push("--any-measurement".as_ref());
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(&file)
        .args([
            "--allow-simulated",
            "--json",
            "--nonce",
            &hex::encode(NONCE),
        ])
        .args(&flags)
        .output()
        .expect("run");
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    let s = statement_of(&p.statement);
    assert_eq!(s["predicate"]["result"], "FAILED");
    assert_eq!(s["predicate"]["fencedRun"]["outcome"], "tests_failed");
    assert_eq!(s["predicate"]["fencedRun"]["counts"]["failed"], 2);
    let (_, ear) = ear_claims(&p.ear, &p.vk);
    let tv = &ear["submods"]["sim-sev-snp"]["ear.trustworthiness-vector"];
    // --any-measurement: the launch code was not recognized; packages came through the proxy: unattested data.
    assert_eq!(tv["executables"], 33);
    assert_eq!(tv["sourced-data"], 32);
}

#[test]
fn an_unusable_key_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.evidence");
    std::fs::write(
        &file,
        evidence(Outcome::TestsPassed, 0, false)
            .to_cbor()
            .expect("cbor"),
    )
    .expect("write evidence");
    let p = Paths::new(dir.path());
    // A P-384 key: another curve.
    let p384_key = dir.path().join("p384.pem");
    let k = p384::SecretKey::from_slice(&Sha384::digest(b"not a p-256 key")).expect("scalar");
    std::fs::write(
        &p384_key,
        k.to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
            .expect("pem")
            .as_bytes(),
    )
    .expect("write");
    let out = verify(
        &file,
        &MEASUREMENT,
        &NONCE,
        &[
            "--emit-statement".as_ref(),
            p.statement.as_os_str(),
            "--statement-key".as_ref(),
            p384_key.as_os_str(),
        ],
    );
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(2), "{j}");
    assert_eq!(j["error"]["check"], "founder-key");
    assert!(
        j["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--statement-key") && d.contains("P-256")),
        "{j}"
    );
    assert!(!p.statement.exists());
    // Each output flag needs its key, and each key its output.
    for flags in [
        vec!["--emit-statement".as_ref(), p.statement.as_os_str()],
        vec!["--ear".as_ref(), p.ear.as_os_str()],
        vec!["--ear-key".as_ref(), p.key.as_os_str()],
        vec!["--statement-key".as_ref(), p.key.as_os_str()],
    ] {
        let out = verify(&file, &MEASUREMENT, &NONCE, &flags);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
    }
    assert!(!p.statement.exists() && !p.ear.exists());
    // A file that cannot be written: exit 2, naming the flag's check and the file.
    let nowhere = dir.path().join("no such directory").join("run.intoto.json");
    let out = verify(
        &file,
        &MEASUREMENT,
        &NONCE,
        &[
            "--emit-statement".as_ref(),
            nowhere.as_os_str(),
            "--statement-key".as_ref(),
            p.key.as_os_str(),
        ],
    );
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(2), "{j}");
    assert_eq!(j["error"]["check"], "emit-statement");
    assert!(
        j["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no such directory")),
        "{j}"
    );
}

#[test]
fn a_verdict_without_subject_is_not_stated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.evidence");
    let mut ev = evidence(Outcome::TestsPassed, 0, false);
    // Re-sealed with no commit, tree or patch in the verdict's inputs.
    let key = p384::ecdsa::SigningKey::from_slice(&Sha384::digest(b"standard forms guest"))
        .expect("scalar");
    let mut verdict =
        Verdict::from_cbor(ev.verdict.payload.as_deref().expect("payload")).expect("verdict");
    verdict.inputs.commit = None;
    verdict.inputs.tree = None;
    verdict.inputs.patch_sha256 = None;
    ev.verdict = attestation::evidence::sign_verdict(&key, &verdict).expect("sign");
    std::fs::write(&file, ev.to_cbor().expect("cbor")).expect("write evidence");
    let p = Paths::new(dir.path());
    let out = verify(&file, &MEASUREMENT, &NONCE, &p.flags());
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(2), "{j}");
    assert_eq!(j["error"]["check"], "emit-statement");
    assert!(
        j["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no commit, tree or patch")),
        "{j}"
    );
    assert!(!p.statement.exists());
}

#[test]
fn a_tampered_envelope_fails_the_independent_check() {
    let Some(py) = oracle_python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.evidence");
    std::fs::write(
        &file,
        evidence(Outcome::TestsFailed, 1, false)
            .to_cbor()
            .expect("cbor"),
    )
    .expect("write evidence");
    let p = Paths::new(dir.path());
    let out = verify(&file, &MEASUREMENT, &NONCE, &p.flags());
    assert_eq!(out.status.code(), Some(0));
    let pem = dir.path().join("founder.pub.pem");
    std::fs::write(&pem, public_pem(&p.vk)).expect("write pem");
    let id = keyid(&p.vk);
    let good = oracle(&py, &p.statement, &pem, &id);
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );

    let env: Value =
        serde_json::from_slice(&std::fs::read(&p.statement).expect("read")).expect("json");
    let b64 = base64::engine::general_purpose::STANDARD;
    // The payload changed after signing: FAILED made PASSED.
    let payload = String::from_utf8(
        b64.decode(env["payload"].as_str().expect("payload"))
            .expect("b64"),
    )
    .expect("utf8");
    assert!(payload.contains("\"result\":\"FAILED\""));
    let mut forged = env.clone();
    forged["payload"] = b64
        .encode(payload.replace("\"result\":\"FAILED\"", "\"result\":\"PASSED\""))
        .into();
    // The signature changed: one bit of its last byte.
    let mut bad_sig = env.clone();
    let mut sig = b64
        .decode(env["signatures"][0]["sig"].as_str().expect("sig"))
        .expect("b64");
    if let Some(b) = sig.last_mut() {
        *b ^= 1;
    }
    bad_sig["signatures"][0]["sig"] = b64.encode(sig).into();
    // The payload type changed (it is covered by the PAE).
    let mut retyped = env.clone();
    retyped["payloadType"] = "application/json".into();
    // Another key than the founder's.
    let (_, other_vk) = founder_key(dir.path(), "other.pem", b"someone else");
    let other_pem = dir.path().join("other.pub.pem");
    std::fs::write(&other_pem, public_pem(&other_vk)).expect("write");
    for (what, envelope, pem, id) in [
        ("payload", &forged, &pem, id.as_str()),
        ("signature", &bad_sig, &pem, id.as_str()),
        ("payload type", &retyped, &pem, id.as_str()),
        ("key", &env, &other_pem, id.as_str()),
    ] {
        let f = dir.path().join("tampered.json");
        std::fs::write(&f, serde_json::to_vec(envelope).expect("json")).expect("write");
        let r = oracle(&py, &f, pem, id);
        assert!(
            !r.status.success(),
            "the oracle accepted an envelope with a changed {what}"
        );
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("VerificationError"), "{what}: {err}");
    }
}

/// The evidence of `fenced-run demo` (process tier) itself, where the binary is built beside the tests.
#[test]
fn the_demo_evidence_gives_a_statement_the_oracle_accepts() {
    let exe = std::env::current_exe().expect("exe");
    let Some(bin) = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("fenced-run"))
        .filter(|p| p.exists())
    else {
        skip_for(
            SkipKind::Build,
            "fenced-run binary not built beside the tests (run cargo test --workspace)",
        );
        return;
    };
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Uid:")
                    .map(|u| u.split_whitespace().next().unwrap_or("").to_owned())
            })
        });
    if uid.as_deref() != Some("0") {
        skip_for(
            SkipKind::Root,
            "the process-tier demo runs its fence as root",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("demo.evidence");
    let out = Command::new(&bin)
        .args([
            "demo",
            "--isolation",
            "process",
            "--no-setup",
            "--json",
            "--nonce",
        ])
        .arg(hex::encode(NONCE))
        .arg("--evidence")
        .arg(&file)
        .env("TMPDIR", dir.path())
        .output()
        .expect("run fenced-run demo");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let demo = json_of(&out);
    let measurement = hex::decode(demo["measurement"].as_str().expect("measurement")).expect("hex");
    let p = Paths::new(dir.path());
    let before = now();
    let out = verify(&file, &measurement, &NONCE, &p.flags());
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    let s = statement_of(&p.statement);
    let inputs = &demo["verdict"]["inputs"];
    // The demo's bundle has no git history: its subjects are the tree and the patch.
    assert_eq!(
        s["subject"],
        serde_json::json!([
            {"name": "tree", "digest": {"gitTree": inputs["tree"]}},
            {"name": "patch", "digest": {"sha256": sha(PATCH.as_bytes())}},
        ])
    );
    assert_eq!(inputs["patch_sha256"], sha(PATCH.as_bytes()));
    assert_eq!(s["predicate"]["result"], "PASSED");
    assert_eq!(
        s["predicate"]["configuration"][0]["digest"]["sha256"],
        sha(JOB.as_bytes())
    );
    let bytes = std::fs::read(&file).expect("read evidence");
    assert_eq!(s["predicate"]["fencedRun"]["evidenceSha256"], sha(&bytes));
    let (header, ear) = ear_claims(&p.ear, &p.vk);
    check_ear(&ear, &header, &p.vk, (before, now()), &bytes);
    // The demo's evidence carries its fence transcript: both forms name its final chain hash, the same one.
    let t = s["predicate"]["fencedRun"]["transcriptSha384"]
        .as_str()
        .expect("the statement names the transcript");
    assert!(
        t.len() == 96 && t.bytes().all(|b| b.is_ascii_hexdigit()),
        "{t}"
    );
    let submod = ear["submods"]
        .as_object()
        .and_then(|m| m.values().next())
        .expect("a submodule");
    assert_eq!(submod["fenced-run.verification"]["transcript_sha384"], t);
    if let Some(py) = oracle_python() {
        let pem = dir.path().join("founder.pub.pem");
        std::fs::write(&pem, public_pem(&p.vk)).expect("write pem");
        let r = oracle(&py, &p.statement, &pem, &keyid(&p.vk));
        assert!(
            r.status.success(),
            "oracle refused: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
}

fn public_pem(vk: &p256::ecdsa::VerifyingKey) -> String {
    p256::PublicKey::from(vk)
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .expect("pem")
}

/// The Python of the oracle venv when securesystemslib and in-toto-attestation import there; else `None` after
/// an `oracles` skip (a failure under FENCED_RUN_REQUIRE_ORACLES=1).
fn oracle_python() -> Option<PathBuf> {
    let py = attestation::vectors::oracle_venv().join("bin/python");
    let ok = Command::new(&py)
        .args([
            "-c",
            "import securesystemslib.dsse, securesystemslib.signer, in_toto_attestation.v1.statement, cryptography",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(py)
    } else {
        skip_for(
            SkipKind::Oracles,
            &format!(
                "{} cannot import securesystemslib and in-toto-attestation (.ci/run installs them)",
                py.display()
            ),
        );
        None
    }
}

/// The independent check, in Python: securesystemslib's DSSE `Envelope.verify` with the founder's public key
/// (ecdsa-sha2-nistp256) under `keyid`, then the payload parsed by in-toto-attestation's `Statement` (validated)
/// and the predicate by its test-result protobuf (strictly, but for the documented extension field).
const ORACLE: &str = r#"
import json, sys
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2

envelope_path, pem_path, keyid = sys.argv[1:4]
with open(envelope_path) as f:
    envelope = Envelope.from_dict(json.load(f))
with open(pem_path) as f:
    key = SSlibKey(keyid, "ecdsa", "ecdsa-sha2-nistp256", {"public": f.read()})
accepted = envelope.verify([key], 1)
assert envelope.payload_type == "application/vnd.in-toto+json", envelope.payload_type
body = json.loads(envelope.payload)
pb = json_format.ParseDict(body, statement_pb2.Statement())
Statement.copy_from_pb(pb).validate()
assert pb.predicate_type == "https://in-toto.io/attestation/test-result/v0.1", pb.predicate_type
predicate = {k: v for k, v in body["predicate"].items() if k != "fencedRun"}
result = json_format.ParseDict(predicate, test_result_pb2.TestResult())
assert result.result in ("PASSED", "WARNED", "FAILED"), result.result
print(json.dumps({"verified_keyids": sorted(accepted), "result": result.result,
                  "subjects": [s.name for s in pb.subject]}))
"#;

fn oracle(py: &Path, envelope: &Path, pem: &Path, keyid: &str) -> Output {
    Command::new(py)
        .arg("-c")
        .arg(ORACLE)
        .arg(envelope)
        .arg(pem)
        .arg(keyid)
        .output()
        .expect("run the oracle")
}

/// Sim TDX evidence of a vm-tier run: the submodule and the statement name the TEE and the tier.
#[test]
fn sim_tdx_evidence_names_its_tee_and_tier() {
    use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
    use attestation::tee::Tee;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mrtd, rtmr1, rtmr2) = ([0x3c; 48], [0x71; 48], [0x72; 48]);
    let tee = SimTdxTee::new(
        SimQe::new(&dir.path().join("qe")).expect("sim qe"),
        SimTd {
            mrtd,
            rtmr: [[0; 48], rtmr1, rtmr2, [0; 48]],
            ..SimTd::default()
        },
    );
    let key = p384::ecdsa::SigningKey::from_slice(&Sha384::digest(b"standard forms tdx guest"))
        .expect("scalar");
    let rd = binding::report_data(&p384::PublicKey::from(key.verifying_key()), &NONCE);
    let raw = tee.get_report(&rd).expect("sim quote");
    let inputs = Inputs {
        tree: Some(TREE.into()),
        patch_sha256: Some(sha(PATCH.as_bytes())),
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let mut verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    verdict.tests = Some(TestCounts {
        passed: 1,
        failed: 0,
        skipped: 0,
        parser: "plain".into(),
    });
    let ev = Evidence::seal(
        TeeLabel::SimTdx,
        raw.report,
        raw.certs,
        raw.collateral,
        &key,
        &verdict,
    )
    .expect("seal");
    let file = dir.path().join("tdx.evidence");
    std::fs::write(&file, ev.to_cbor().expect("cbor")).expect("write");
    let p = Paths::new(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(&file)
        .args([
            "--allow-simulated",
            "--json",
            "--nonce",
            &hex::encode(NONCE),
        ])
        .args(["--mrtd", &hex::encode(mrtd)])
        .args(["--rtmr", &format!("1={}", hex::encode(rtmr1))])
        .args(["--rtmr", &format!("2={}", hex::encode(rtmr2))])
        .args(p.flags())
        .output()
        .expect("run");
    let j = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    let s = statement_of(&p.statement);
    assert_eq!(s["predicate"]["fencedRun"]["tee"], "sim-tdx");
    assert_eq!(s["predicate"]["fencedRun"]["tier"], "vm");
    assert_eq!(s["predicate"]["configuration"], serde_json::json!([]));
    let (_, ear) = ear_claims(&p.ear, &p.vk);
    let submods = ear["submods"].as_object().expect("submods");
    assert_eq!(submods.keys().collect::<Vec<_>>(), ["sim-tdx"]);
    let a = &submods["sim-tdx"];
    assert_eq!(a["ear.status"], "contraindicated");
    assert_eq!(a["ear.trustworthiness-vector"]["executables"], 3);
    assert_eq!(a["ear.trustworthiness-vector"]["hardware"], 97);
    assert_eq!(a["fenced-run.verification"]["tier"], "vm");
    if let Some(py) = oracle_python() {
        let pem = dir.path().join("founder.pub.pem");
        std::fs::write(&pem, public_pem(&p.vk)).expect("write pem");
        let r = oracle(&py, &p.statement, &pem, &keyid(&p.vk));
        assert!(
            r.status.success(),
            "oracle refused: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
}
