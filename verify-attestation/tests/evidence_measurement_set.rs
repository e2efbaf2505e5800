//! `verify-attestation evidence --measurements SET --auditor-key KEY... --auditors-required K`: a launch is
//! accepted only when its measurement is in the set and enough trusted auditors signed the set; otherwise the
//! rejection names the set, the nearest entry, or the missing signatures.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::sim::SimPsp;
use attestation::snp::Product;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use measurements::set::{self, Artifacts, Hex, MeasurementSet, Release, SignatureFile, SimEntry};
use p384::ecdsa::SigningKey;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LAUNCHED: [u8; 48] = [0x3C; 48];
const NONCE: [u8; 32] = [0x11; 32];

fn state_dir() -> PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-verifier-lib-tests-sim")
}

/// Sim evidence of a `vm`-tier launch whose measurement is `LAUNCHED`.
fn write_evidence(dir: &Path) -> PathBuf {
    let psp = SimPsp::new(&state_dir(), Product::Genoa).expect("sim psp");
    let key = SigningKey::random(&mut p384::elliptic_curve::rand_core::OsRng);
    let rd = binding::report_data(&p384::PublicKey::from(key.verifying_key()), &NONCE);
    let (report, certs) = psp
        .sign_report(psp.report_template(LAUNCHED, rd))
        .expect("sign report");
    let inputs = Inputs {
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    let ev =
        Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, &key, &verdict).expect("seal");
    let path = dir.join("run.evidence");
    std::fs::write(&path, ev.to_cbor().expect("cbor")).expect("write evidence");
    path
}

fn measurement_set(sim: &[[u8; 48]]) -> MeasurementSet {
    MeasurementSet {
        format: set::SET_FORMAT.to_string(),
        not_after: Some("2099-01-01T00:00:00Z".into()),
        release: Release {
            name: "fenced-run-guest".into(),
            version: "0.1.0-test".into(),
        },
        artifacts: Artifacts {
            kernel_sha256: Some(Hex([1; 32])),
            initramfs_sha256: Some(Hex([2; 32])),
            cmdline: Some("console=ttyS0".into()),
            cmdline_sha256: Some(Hex(measurements::sim::cmdline_sha256("console=ttyS0"))),
            ovmf_sha256: None,
            tdvf_sha256: None,
        },
        snp: Vec::new(),
        tdx: Vec::new(),
        sim: sim
            .iter()
            .map(|m| SimEntry {
                tier: "vm".into(),
                measurement: Hex(*m),
                binary_sha256: None,
            })
            .collect(),
        identity: Vec::new(),
    }
}

/// Writes the set, one signature per auditor (by name), and every auditor's public key; returns the key paths.
fn publish(dir: &Path, set: &MeasurementSet, auditors: &[&str], signing: &[&str]) -> Vec<PathBuf> {
    std::fs::write(dir.join("release.toml"), set.to_toml()).expect("write set");
    let mut keys = Vec::new();
    for name in auditors {
        let sk = set::generate_key();
        let pk = dir.join(format!("{name}.pub.pem"));
        std::fs::write(&pk, set::public_key_pem(&sk.verifying_key()).expect("pem"))
            .expect("write key");
        keys.push(pk);
        if signing.contains(name) {
            let sig = SignatureFile::sign(set, &sk, name);
            std::fs::write(dir.join(format!("release.toml.{name}.sig")), sig.to_toml())
                .expect("write signature");
        }
    }
    keys
}

fn verify(dir: &Path, evidence: &Path, keys: &[PathBuf], k: u32) -> (Output, serde_json::Value) {
    verify_with(dir, evidence, keys, k, &[])
}

fn verify_with(
    dir: &Path,
    evidence: &Path,
    keys: &[PathBuf],
    k: u32,
    extra: &[&str],
) -> (Output, serde_json::Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_verify-attestation"));
    cmd.args([
        "evidence",
        "--json",
        "--allow-simulated",
        "--nonce",
        &hex::encode(NONCE),
    ])
    .arg(evidence)
    .arg("--measurements")
    .arg(dir.join("release.toml"))
    .args(["--auditors-required", &k.to_string()]);
    for key in keys {
        cmd.arg("--auditor-key").arg(key);
    }
    cmd.args(extra);
    let out = cmd.output().expect("run verify-attestation");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn failure_checks(json: &serde_json::Value) -> Vec<String> {
    json["failures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["check"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn launch_in_a_set_signed_by_enough_auditors_is_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = write_evidence(dir.path());
    let set = measurement_set(&[[0x77; 48], LAUNCHED]);
    let keys = publish(
        dir.path(),
        &set,
        &["alice", "bob", "carol"],
        &["alice", "bob"],
    );
    let (out, json) = verify(dir.path(), &evidence, &keys, 2);
    assert_eq!(out.status.code(), Some(0), "{json}");
    assert_eq!(json["verified"], true, "{json}");
}

#[test]
fn launch_outside_the_set_is_rejected_naming_set_and_nearest_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = write_evidence(dir.path());
    let set = measurement_set(&[[0x77; 48]]);
    let keys = publish(dir.path(), &set, &["alice"], &["alice"]);
    let (out, json) = verify(dir.path(), &evidence, &keys, 1);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(
        failure_checks(&json),
        vec!["measurement-set".to_string()],
        "{json}"
    );
    let detail = json["failures"][0]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains("fenced-run-guest"),
        "names the set: {detail}"
    );
    assert!(
        detail.contains(&hex::encode(LAUNCHED)),
        "names the measurement: {detail}"
    );
    assert!(
        detail.contains("nearest") && detail.contains(&hex::encode([0x77; 48])),
        "names the nearest entry (the set's only one): {detail}"
    );
}

#[test]
fn too_few_trusted_signatures_reject_the_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = write_evidence(dir.path());
    let set = measurement_set(&[LAUNCHED]);
    // Three trusted auditors, only one signed, two required.
    let keys = publish(dir.path(), &set, &["alice", "bob", "carol"], &["alice"]);
    let (out, json) = verify(dir.path(), &evidence, &keys, 2);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(json["verified"], false);
    assert_eq!(
        failure_checks(&json),
        vec!["measurement-set".to_string()],
        "{json}"
    );

    // A signature by a key the founder does not trust does not count either.
    let stranger = tempfile::tempdir().expect("tempdir");
    let untrusted = publish(stranger.path(), &set, &["mallory"], &[]);
    let (out, _) = verify(dir.path(), &evidence, &untrusted, 1);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_set_edited_after_signing_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = write_evidence(dir.path());
    let signed = measurement_set(&[[0x77; 48]]);
    let keys = publish(dir.path(), &signed, &["alice"], &["alice"]);
    // Someone adds the launched measurement to the set after the auditor signed it.
    let edited = measurement_set(&[[0x77; 48], LAUNCHED]);
    std::fs::write(dir.path().join("release.toml"), edited.to_toml()).expect("rewrite set");
    let (out, json) = verify(dir.path(), &evidence, &keys, 1);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(
        failure_checks(&json),
        vec!["measurement-set".to_string()],
        "{json}"
    );
}

#[test]
fn an_expired_set_is_refused_naming_its_not_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = write_evidence(dir.path());
    let mut set = measurement_set(&[LAUNCHED]);
    set.not_after = Some("2027-03-01T12:00:00Z".into());
    let keys = publish(dir.path(), &set, &["alice"], &["alice"]);
    let (out, json) = verify_with(
        dir.path(),
        &evidence,
        &keys,
        1,
        &["--at", "2027-02-01T00:00:00Z"],
    );
    assert_eq!(out.status.code(), Some(0), "before not_after: {json}");
    let (out, json) = verify_with(
        dir.path(),
        &evidence,
        &keys,
        1,
        &["--at", "2027-03-01T12:00:01Z"],
    );
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(
        failure_checks(&json),
        vec!["measurement-set".to_string()],
        "{json}"
    );
    let detail = json["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("expired: its not_after is 2027-03-01T12:00:00Z, the verification time is 2027-03-01T12:00:01Z"),
        "{detail}"
    );
}

#[test]
fn a_set_without_not_after_is_refused_naming_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let evidence = write_evidence(dir.path());
    let mut set = measurement_set(&[LAUNCHED]);
    set.format = set::SET_FORMAT_V1.into();
    set.not_after = None;
    let keys = publish(dir.path(), &set, &["alice"], &["alice"]);
    let (out, json) = verify(dir.path(), &evidence, &keys, 1);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(
        failure_checks(&json),
        vec!["measurement-set".to_string()],
        "{json}"
    );
    let detail = json["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("has no not_after") && detail.contains("measure-guest renew"),
        "{detail}"
    );
}
