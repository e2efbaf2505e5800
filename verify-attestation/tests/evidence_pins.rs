//! `verify-attestation evidence` with the founder's pins on the run: `--expect-outcome`, `--commit`, `--tree`,
//! `--patch`/`--patch-sha256`, `--job`/`--job-sha256`, `--isolation`, `--expect-tests-ran` and `--min-failed`,
//! each met and unmet in a table, each
//! failure naming its own check with the value seen and the value wanted; the outcome-not-pinned line; the
//! human output's first rows; `--nonce` required unless `--no-nonce`; and a verdict whose counts contradict
//! its outcome.

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::hex::Hex;
use attestation::sim::SimPsp;
use attestation::snp::Product;
use attestation::verdict::{Inputs, Isolation, Outcome, TestCounts, Verdict};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha256, Sha384};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use verifier_lib::evidence::{checks, verify_evidence, EvidenceOptions};

const MEASUREMENT: [u8; 48] = [0x6B; 48];
const NONCE: [u8; 24] = [0x42; 24];
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TREE: &str = "89abcdef0123456789abcdef0123456789abcdef";
const PATCH: &[u8] = b"--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n-echo 1\n+echo 2\n";
const JOB: &[u8] = b"[repository]\npath = \"repo\"\npatch = \"fix.patch\"\n";

fn state_dir() -> PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-verifier-lib-tests-sim")
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Sim SEV-SNP evidence of a process-tier run with `outcome` and `counts`, bound to NONCE.
fn evidence(outcome: Outcome, counts: Option<(u64, u64)>) -> Evidence {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let key = SigningKey::from_slice(&Sha384::digest(b"pins guest")).expect("scalar");
    let rd = binding::report_data(&p384::PublicKey::from(key.verifying_key()), &NONCE);
    let (report, certs) = psp
        .sign_report(psp.report_template(MEASUREMENT, rd))
        .expect("sign");
    let inputs = Inputs {
        commit: Some(COMMIT.into()),
        tree: Some(TREE.into()),
        patch_sha256: Some(sha(PATCH)),
        job_sha256: Some(sha(JOB)),
        nonce: NONCE.to_vec(),
        protect: Vec::new(),
        test_tree: None,
    };
    let mut verdict = Verdict::new(outcome, Isolation::Process, inputs, "test");
    verdict.tests = counts.map(|(passed, failed)| TestCounts {
        passed,
        failed,
        skipped: 0,
        parser: "plain".into(),
    });
    Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, &key, &verdict).expect("seal")
}

fn write(dir: &Path, ev: &Evidence) -> PathBuf {
    let p = dir.join("run.evidence");
    std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write evidence");
    std::fs::write(dir.join("fix.patch"), PATCH).expect("write patch");
    std::fs::write(dir.join("job.toml"), JOB).expect("write job");
    p
}

fn run(evidence: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(evidence)
        .args([
            "--allow-simulated",
            "--measurement",
            &hex::encode(MEASUREMENT),
        ])
        .args(args)
        .output()
        .expect("run verify-attestation")
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
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
fn every_pin_met_and_unmet_names_its_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = write(dir.path(), &evidence(Outcome::TestsPassed, Some((3, 0))));
    let patch = dir.path().join("fix.patch");
    let job = dir.path().join("job.toml");
    let other = dir.path().join("other.patch");
    std::fs::write(&other, b"another patch").expect("write");
    let (patch, job, other) = (
        patch.to_str().expect("utf8").to_owned(),
        job.to_str().expect("utf8").to_owned(),
        other.to_str().expect("utf8").to_owned(),
    );
    let wrong_sha = "ab".repeat(32);
    // (flags, the failing check or None when the pin holds, the value the failure must say was seen)
    let table: Vec<(Vec<&str>, Option<&str>, &str)> = vec![
        (vec!["--expect-outcome", "tests_passed"], None, ""),
        (
            vec![
                "--expect-outcome",
                "tests_failed",
                "--expect-outcome",
                "tests_passed",
            ],
            None,
            "",
        ),
        (
            vec!["--expect-outcome", "tests_failed"],
            Some(checks::PIN_OUTCOME),
            "tests_passed",
        ),
        (vec!["--commit", COMMIT], None, ""),
        (vec!["--commit", &COMMIT[..12]], None, ""),
        (
            vec!["--commit", "0123456789abcdef0123456789abcdef01234568"],
            Some(checks::PIN_COMMIT),
            COMMIT,
        ),
        (
            vec!["--commit", "fedcba987654"],
            Some(checks::PIN_COMMIT),
            COMMIT,
        ),
        (vec!["--tree", TREE], None, ""),
        (
            vec!["--tree", "89abcdef0123456789abcdef0123456789abcdee"],
            Some(checks::PIN_TREE),
            TREE,
        ),
        (vec!["--patch", &patch], None, ""),
        (vec!["--patch", &other], Some(checks::PIN_PATCH), ""),
        (
            vec!["--patch-sha256", &wrong_sha],
            Some(checks::PIN_PATCH),
            "",
        ),
        (vec!["--job", &job], None, ""),
        (vec!["--job-sha256", &wrong_sha], Some(checks::PIN_JOB), ""),
        (vec!["--isolation", "process"], None, ""),
        (
            vec!["--isolation", "sev-snp"],
            Some(checks::PIN_ISOLATION),
            "process",
        ),
    ];
    let nonce = hex::encode(NONCE);
    for (flags, failing, seen) in table {
        let mut args = vec!["--json", "--nonce", &nonce];
        args.extend(flags.iter().copied());
        let out = run(&ev, &args);
        let json = json_of(&out);
        match failing {
            None => {
                assert_eq!(out.status.code(), Some(0), "{flags:?}: {json}");
                assert!(failure_checks(&json).is_empty(), "{flags:?}: {json}");
                let pins = json["pins"].as_array().expect("pins");
                assert!(
                    !pins.is_empty() && pins.iter().all(|p| p["held"] == true),
                    "{flags:?}: {json}"
                );
            }
            Some(check) => {
                assert_eq!(out.status.code(), Some(1), "{flags:?}: {json}");
                assert_eq!(failure_checks(&json), vec![check], "{flags:?}: {json}");
                let f = &json["failures"][0];
                let want_seen = if seen.is_empty() {
                    // The patch/job pins: the verdict's SHA-256.
                    if check == checks::PIN_JOB {
                        sha(JOB)
                    } else {
                        sha(PATCH)
                    }
                } else {
                    seen.to_owned()
                };
                assert_eq!(f["seen"], want_seen.as_str(), "{flags:?}: {json}");
                assert!(
                    f["wanted"].as_str().is_some_and(|w| !w.is_empty()),
                    "{flags:?}: {json}"
                );
            }
        }
    }
    // A commit prefix shorter than 12 hex digits, or not hex, is a usage error.
    for bad in ["0123456789a", "0123456789abcdeg"] {
        let out = run(&ev, &["--nonce", &nonce, "--commit", bad]);
        assert_eq!(out.status.code(), Some(2), "--commit {bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--commit"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // An unreadable --patch file is unusable input naming the flag.
    let out = run(
        &ev,
        &["--nonce", &nonce, "--patch", "/nonexistent/fix.patch"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--patch /nonexistent/fix.patch"));
}

#[test]
fn a_failing_run_is_rejected_only_when_the_outcome_is_pinned_and_the_screen_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = write(dir.path(), &evidence(Outcome::TestsFailed, Some((2, 1))));
    let nonce = hex::encode(NONCE);
    // Not pinned: the evidence is authentic, so it verifies, and the first line after the result says the
    // outcome was not pinned; then the outcome, the counts and the inputs.
    let out = run(&ev, &["--nonce", &nonce]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("result") && lines[0].contains("VERIFIED"),
        "{text}"
    );
    assert!(lines[1].contains("outcome NOT pinned"), "{text}");
    let keys: Vec<String> = lines[2..10]
        .iter()
        .map(|l| {
            let l = l.trim_start_matches("SIMULATED ");
            l.split("  ").next().unwrap_or("").trim().to_owned()
        })
        .collect();
    assert_eq!(
        keys,
        [
            "outcome",
            "counts",
            "commit",
            "tree",
            "patch sha256",
            "job sha256",
            "nonce",
            "isolation"
        ],
        "{text}"
    );
    assert!(
        lines[2].contains("tests_failed") && lines[3].contains("1 failed"),
        "{text}"
    );
    assert!(
        lines[4].contains(COMMIT) && lines[8].contains(&nonce),
        "{text}"
    );
    let json = json_of(&run(&ev, &["--nonce", &nonce, "--json"]));
    assert_eq!(json["outcome_pinned"], false, "{json}");
    assert!(
        json["notes"][0]
            .as_str()
            .is_some_and(|n| n.starts_with("outcome NOT pinned")),
        "{json}"
    );

    // Pinned: the failing run is rejected naming the check.
    let out = run(
        &ev,
        &["--nonce", &nonce, "--expect-outcome", "tests_passed"],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL pin-outcome")
            && text.contains("seen tests_failed, wanted tests_passed"),
        "{text}"
    );
    assert!(!text.contains("outcome NOT pinned"), "{text}");
}

#[test]
fn nonce_is_required_unless_no_nonce_and_must_be_16_to_64_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = write(dir.path(), &evidence(Outcome::TestsPassed, Some((1, 0))));
    let out = run(&ev, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--nonce") && err.contains("--no-nonce"),
        "{err}"
    );
    for bad in ["00".repeat(15), "00".repeat(65)] {
        let out = run(&ev, &["--nonce", &bad]);
        assert_eq!(out.status.code(), Some(2), "{} bytes", bad.len() / 2);
    }
    let out = run(&ev, &["--no-nonce", "--json"]);
    let json = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{json}");
    assert_eq!(json["nonce_checked"], false);
    // The library: no nonce and no `no_nonce` is a named failure.
    let opts = EvidenceOptions {
        chain: verifier_lib::snp::ChainOptions {
            allow_simulated: true,
            ..Default::default()
        },
        policy: verifier_lib::snp::Policy {
            measurements: vec![Hex(MEASUREMENT)],
            ..Default::default()
        },
        ..EvidenceOptions::default()
    };
    let v = verify_evidence(&evidence(Outcome::TestsPassed, Some((1, 0))), &opts);
    let c: Vec<&str> = v.failures.iter().map(|f| f.check.as_ref()).collect();
    assert_eq!(c, vec![checks::NONCE_UNPINNED], "{:?}", v.failures);
}

#[test]
fn counts_that_contradict_the_outcome_are_a_named_failure() {
    let nonce = NONCE.to_vec();
    let opts = EvidenceOptions {
        chain: verifier_lib::snp::ChainOptions {
            allow_simulated: true,
            ..Default::default()
        },
        policy: verifier_lib::snp::Policy {
            measurements: vec![Hex(MEASUREMENT)],
            ..Default::default()
        },
        nonce: Some(nonce),
        ..EvidenceOptions::default()
    };
    let cases = [
        (Outcome::TestsPassed, Some((3, 0)), true),
        (Outcome::TestsPassed, Some((3, 1)), false),
        (Outcome::TestsPassed, Some((0, 0)), false),
        (Outcome::NoTestsObserved, Some((0, 0)), true),
        (Outcome::NoTestsObserved, Some((2, 0)), false),
        (Outcome::TestsFailed, Some((2, 1)), true),
        (Outcome::CountsUnparsed, None, true),
        (Outcome::CountsUnparsed, Some((1, 0)), false),
    ];
    for (outcome, counts, agree) in cases {
        let v = verify_evidence(&evidence(outcome, counts), &opts);
        let c: Vec<&str> = v.failures.iter().map(|f| f.check.as_ref()).collect();
        if agree {
            assert!(v.verified(), "{outcome} {counts:?}: {:?}", v.failures);
        } else {
            assert_eq!(c, vec![checks::VERDICT_COUNTS], "{outcome} {counts:?}");
            assert!(
                v.failures[0].detail.contains(outcome.as_str()),
                "{}",
                v.failures[0].detail
            );
        }
    }
}

#[test]
fn tdx_register_pins_do_not_pin_snp_evidence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ev = write(dir.path(), &evidence(Outcome::TestsPassed, Some((1, 0))));
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("evidence")
        .arg(&ev)
        .args([
            "--allow-simulated",
            "--json",
            "--nonce",
            &hex::encode(NONCE),
        ])
        .args(["--mrtd", &hex::encode(MEASUREMENT)])
        .output()
        .expect("run");
    let json = json_of(&out);
    // A TDX pin cannot apply to SEV-SNP evidence: unusable input (exit 2) naming the flag, never a pin.
    assert_eq!(out.status.code(), Some(2), "{json}");
    assert_eq!(failure_checks(&json), ["flag-not-applicable"], "{json}");
    assert!(
        json["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--mrtd")),
        "{json}"
    );
}

/// One case of the tests-ran pins: the outcome, the counts (passed, failed), the flags, the failing check (or
/// None) and the value the failure must say was seen.
type PinCase<'a> = (
    Outcome,
    Option<(u64, u64)>,
    Vec<&'a str>,
    Option<&'a str>,
    &'a str,
);

#[test]
fn tests_ran_and_min_failed_pins_hold_and_fail_and_no_test_ran_is_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nonce = hex::encode(NONCE);
    // (outcome, counts, flags, the failing check or None, the value the failure must say was seen)
    let cases: Vec<PinCase> = vec![
        // An install that failed: tests_failed with no counts.
        (
            Outcome::TestsFailed,
            None,
            vec!["--expect-outcome", "tests_failed"],
            None,
            "",
        ),
        (
            Outcome::TestsFailed,
            None,
            vec!["--expect-outcome", "tests_failed", "--min-failed", "1"],
            Some(checks::PIN_MIN_FAILED),
            "no counts (tests: null)",
        ),
        (
            Outcome::TestsFailed,
            None,
            vec!["--expect-tests-ran"],
            Some(checks::PIN_TESTS_RAN),
            "no counts (tests: null)",
        ),
        // The base reproduces the bug: one test counted failed.
        (
            Outcome::TestsFailed,
            Some((2, 1)),
            vec!["--expect-outcome", "tests_failed", "--min-failed", "1"],
            None,
            "",
        ),
        (
            Outcome::TestsFailed,
            Some((2, 1)),
            vec!["--expect-tests-ran"],
            None,
            "",
        ),
        (
            Outcome::TestsFailed,
            Some((2, 1)),
            vec!["--min-failed", "2"],
            Some(checks::PIN_MIN_FAILED),
            "2 passed, 1 failed",
        ),
        (
            Outcome::NoTestsObserved,
            Some((0, 0)),
            vec!["--expect-tests-ran"],
            Some(checks::PIN_TESTS_RAN),
            "0 passed, 0 failed",
        ),
        (
            Outcome::TestsPassed,
            Some((3, 0)),
            vec!["--expect-tests-ran"],
            None,
            "",
        ),
    ];
    for (outcome, counts, flags, failing, seen) in cases {
        let ev = write(dir.path(), &evidence(outcome, counts));
        let mut args = vec!["--json", "--nonce", &nonce];
        args.extend(flags.iter().copied());
        let out = run(&ev, &args);
        let json = json_of(&out);
        let ran = counts.is_some_and(|(p, f)| p + f > 0);
        assert_eq!(json["tests_ran"], ran, "{flags:?}: {json}");
        match failing {
            None => {
                assert_eq!(out.status.code(), Some(0), "{flags:?}: {json}");
                let pins = json["pins"].as_array().expect("pins");
                assert!(pins.iter().all(|p| p["held"] == true), "{json}");
            }
            Some(check) => {
                assert_eq!(out.status.code(), Some(1), "{flags:?}: {json}");
                assert_eq!(failure_checks(&json), vec![check], "{flags:?}: {json}");
                assert_eq!(json["failures"][0]["seen"], seen, "{flags:?}: {json}");
            }
        }
        // tests_failed pinned without a count pin: the notes say a run without tests would also do.
        let unpinned = flags.contains(&"tests_failed")
            && !flags.contains(&"--min-failed")
            && !flags.contains(&"--expect-tests-ran");
        let noted = json["notes"].as_array().is_some_and(|n| {
            n.iter().any(|n| {
                n.as_str()
                    .is_some_and(|n| n.starts_with("failed-test count NOT pinned"))
            })
        });
        assert_eq!(noted, unpinned, "{flags:?}: {json}");
    }

    // The table says no test ran on its own line, right after the counts; a run with tests does not.
    let ev = write(dir.path(), &evidence(Outcome::TestsFailed, None));
    let out = run(
        &ev,
        &["--nonce", &nonce, "--expect-outcome", "tests_failed"],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("NO TEST RAN: "))
        .unwrap_or_else(|| panic!("no NO TEST RAN line: {text}"));
    assert!(lines[at - 1].contains("counts"), "{text}");
    assert!(text.contains("failed-test count NOT pinned"), "{text}");
    let ev = write(dir.path(), &evidence(Outcome::TestsFailed, Some((2, 1))));
    let text = String::from_utf8_lossy(&run(&ev, &["--nonce", &nonce]).stdout).into_owned();
    assert!(!text.contains("NO TEST RAN"), "{text}");

    // --min-failed 0 pins nothing: a usage error naming the flag.
    let out = run(&ev, &["--nonce", &nonce, "--min-failed", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--min-failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
