//! TDX evidence pins the whole image: MRTD (firmware) and RTMR1/RTMR2 (kernel, initramfs, command line). Sim TDX
//! evidence with the same MRTD and another RTMR1 is rejected unless `--leave-rtmrs-unpinned` says the RTMRs are
//! deliberately unpinned; `--measurement` (MRTD only) is refused naming what is missing; `measurement_pinned`
//! lists exactly the registers compared; `tdx-quote`'s policy flags apply; and sim TDX evidence is matched only
//! against a measurement set's sim entries, never its (hardware) TDX entries.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use measurements::set::{self, Artifacts, Hex, MeasurementSet, Release, SignatureFile};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MRTD: [u8; 48] = [0x3c; 48];
const RTMR1: [u8; 48] = [0x71; 48];
const RTMR2: [u8; 48] = [0x72; 48];
const NONCE: [u8; 32] = [0x24; 32];

fn write_evidence(dir: &Path) -> PathBuf {
    let tee = SimTdxTee::new(
        SimQe::new(&dir.join("qe")).expect("sim qe"),
        SimTd {
            mrtd: MRTD,
            rtmr: [[0; 48], RTMR1, RTMR2, [0; 48]],
            ..SimTd::default()
        },
    );
    let key = SigningKey::from_slice(&Sha384::digest(b"tdx image guest")).expect("scalar");
    let rd = binding::report_data(&p384::PublicKey::from(key.verifying_key()), &NONCE);
    let raw = tee.get_report(&rd).expect("sim quote");
    let inputs = Inputs {
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    let ev = Evidence::seal(
        TeeLabel::SimTdx,
        raw.report,
        raw.certs,
        raw.collateral,
        &key,
        &verdict,
    )
    .expect("seal");
    let p = dir.join("tdx.evidence");
    std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write");
    p
}

fn run(evidence: &Path, args: &[&str]) -> (Output, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(evidence)
        .args([
            "--allow-simulated",
            "--json",
            "--nonce",
            &hex::encode(NONCE),
        ])
        .args(args)
        .output()
        .expect("run verify-attestation");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn checks(json: &serde_json::Value) -> Vec<String> {
    json["failures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["check"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn pinned(json: &serde_json::Value) -> Vec<String> {
    json["measurement_pinned"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn tdx_image_pin_covers_mrtd_and_the_rtmrs_of_kernel_initramfs_and_cmdline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = write_evidence(dir.path());
    let (mrtd, r1, r2) = (hex::encode(MRTD), hex::encode(RTMR1), hex::encode(RTMR2));
    let rt1 = format!("1={r1}");
    let rt2 = format!("2={r2}");
    let other_rt1 = format!("1={}", hex::encode([0x99; 48]));

    // The whole image pinned: verified, and the registers compared are named.
    let (out, json) = run(&ev, &["--mrtd", &mrtd, "--rtmr", &rt1, "--rtmr", &rt2]);
    assert_eq!(out.status.code(), Some(0), "{json}");
    assert_eq!(pinned(&json), ["mrtd", "rtmr1", "rtmr2"], "{json}");
    assert_eq!(json["rtmr1"], r1.as_str(), "{json}");

    // Same MRTD, another RTMR1 (another kernel): rejected, naming rtmr1 with the value seen and wanted.
    let (out, json) = run(
        &ev,
        &["--mrtd", &mrtd, "--rtmr", &other_rt1, "--rtmr", &rt2],
    );
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(checks(&json), ["rtmr1"], "{json}");
    assert_eq!(json["failures"][0]["seen"], r1.as_str(), "{json}");

    // MRTD alone: refused, naming the RTMRs left out.
    let (out, json) = run(&ev, &["--mrtd", &mrtd]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(checks(&json), ["measurement-incomplete"], "{json}");
    let detail = json["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("RTMR1, RTMR2"), "{detail}");

    // --measurement on TDX evidence means MRTD only: refused, saying what is missing.
    let (out, json) = run(&ev, &["--measurement", &mrtd]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(checks(&json), ["measurement-incomplete"], "{json}");
    let detail = json["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("RTMR1 and RTMR2"), "{detail}");

    // Deliberately unpinned RTMRs: MRTD alone (or with another RTMR1 on the screen) is accepted, and the
    // output says only MRTD was compared.
    for flags in [
        vec!["--mrtd", mrtd.as_str(), "--leave-rtmrs-unpinned"],
        vec!["--measurement", mrtd.as_str(), "--leave-rtmrs-unpinned"],
    ] {
        let (out, json) = run(&ev, &flags);
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {json}");
        assert_eq!(pinned(&json), ["mrtd"], "{flags:?}: {json}");
        assert!(
            json["notes"].as_array().is_some_and(|n| n.iter().any(|n| n
                .as_str()
                .is_some_and(|n| n.contains("TDX image NOT fully pinned")))),
            "{json}"
        );
    }
    // A wrong MRTD is still named with the RTMRs left unpinned.
    let (out, json) = run(&ev, &["--mrtd", &"11".repeat(48), "--leave-rtmrs-unpinned"]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(checks(&json), ["mrtd"], "{json}");
}

#[test]
fn tdx_quote_policy_flags_apply_to_tdx_evidence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = write_evidence(dir.path());
    let mrtd = hex::encode(MRTD);
    let base = [
        "--mrtd".to_string(),
        mrtd,
        "--rtmr".into(),
        format!("1={}", hex::encode(RTMR1)),
        "--rtmr".into(),
        format!("2={}", hex::encode(RTMR2)),
    ];
    let td = SimTd::default();
    let table: Vec<(Vec<String>, Option<&str>)> = vec![
        (
            vec!["--mr-config-id".into(), "ee".repeat(48)],
            Some("mr-config-id"),
        ),
        (vec!["--mr-owner".into(), "ee".repeat(48)], Some("mr-owner")),
        (
            vec!["--mr-owner-config".into(), "ee".repeat(48)],
            Some("mr-owner-config"),
        ),
        (
            vec!["--mr-owner-config".into(), hex::encode(td.mr_owner_config)],
            None,
        ),
        (vec!["--xfam".into(), "ff".repeat(8)], Some("xfam")),
        (vec!["--xfam".into(), hex::encode(td.xfam)], None),
        (
            vec!["--td-attributes".into(), "ff".repeat(8)],
            Some("td-attributes"),
        ),
        (
            vec!["--min-tee-tcb-svn".into(), "ff".repeat(16)],
            Some("tee-tcb-svn"),
        ),
        (
            vec!["--rtmr".into(), format!("3={}", "ee".repeat(48))],
            Some("rtmr3"),
        ),
    ];
    for (flags, failing) in table {
        let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
        args.extend(flags.iter().map(String::as_str));
        let (out, json) = run(&ev, &args);
        match failing {
            None => assert_eq!(out.status.code(), Some(0), "{flags:?}: {json}"),
            Some(c) => {
                assert_eq!(out.status.code(), Some(1), "{flags:?}: {json}");
                assert_eq!(checks(&json), [c], "{flags:?}: {json}");
            }
        }
    }
    // A bad --rtmr is a usage error naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .args(["evidence", "x.evidence", "--no-nonce", "--rtmr", "4=00"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rtmr"));
}

fn publish(dir: &Path, set: &MeasurementSet) -> PathBuf {
    std::fs::write(dir.join("set.toml"), set.to_toml()).expect("write set");
    let sk = set::generate_key();
    let pk = dir.join("alice.pub");
    std::fs::write(&pk, set::public_key_pem(&sk.verifying_key()).expect("pem")).expect("write");
    let sig = SignatureFile::sign(set, &sk, "alice");
    std::fs::write(dir.join("set.toml.alice.sig"), sig.to_toml()).expect("write sig");
    pk
}

fn tdx_set(tdx: bool, sim: bool) -> MeasurementSet {
    MeasurementSet {
        format: set::SET_FORMAT.into(),
        not_after: Some("2099-01-01T00:00:00Z".into()),
        release: Release {
            name: "fenced-run-guest".into(),
            version: "0.1.0-tdx".into(),
        },
        artifacts: Artifacts {
            kernel_sha256: Some(Hex([1; 32])),
            initramfs_sha256: Some(Hex([2; 32])),
            cmdline: None,
            cmdline_sha256: Some(Hex([3; 32])),
            ovmf_sha256: None,
            tdvf_sha256: None,
        },
        snp: Vec::new(),
        // A hardware entry with exactly the sim quote's registers: it must not match sim evidence.
        tdx: if tdx {
            vec![set::TdxEntry {
                mrtd: Hex(MRTD),
                rtmr0: None,
                rtmr1: Some(Hex(RTMR1)),
                rtmr2: Some(Hex(RTMR2)),
                rtmr3: None,
            }]
        } else {
            Vec::new()
        },
        sim: if sim {
            vec![set::SimEntry {
                tier: "vm".into(),
                measurement: Hex(MRTD),
                binary_sha256: None,
            }]
        } else {
            vec![set::SimEntry {
                tier: "vm".into(),
                measurement: Hex([0x55; 48]),
                binary_sha256: None,
            }]
        },
        identity: Vec::new(),
    }
}

#[test]
fn sim_tdx_evidence_is_matched_only_against_the_sets_sim_entries() {
    for (tdx_entry, sim_entry, accepted) in [
        (true, false, false),
        (false, true, true),
        (true, true, true),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let ev = write_evidence(dir.path());
        let key = publish(dir.path(), &tdx_set(tdx_entry, sim_entry));
        let set_path = dir.path().join("set.toml");
        let (out, json) = run(
            &ev,
            &[
                "--measurements",
                set_path.to_str().expect("utf8"),
                "--auditor-key",
                key.to_str().expect("utf8"),
            ],
        );
        if accepted {
            assert_eq!(out.status.code(), Some(0), "{json}");
            assert_eq!(pinned(&json), ["sim-measurement"], "{json}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{json}");
            assert_eq!(checks(&json), ["measurement-set"], "{json}");
            let d = json["failures"][0]["detail"].as_str().unwrap_or_default();
            assert!(
                d.contains("sim tier=vm"),
                "names the nearest sim entry: {d}"
            );
        }
    }
}
