//! The auditor's and the founder's paths end to end, as processes: `measure-guest process --binary` on the
//! exact `fenced-run` binary, `pin --process-binary`, two auditors' `keygen` and `sign`, `fenced-run demo
//! --evidence --nonce`, then `verify-attestation evidence --measurements SET --auditor-key A --auditor-key B
//! --auditors-required 2 --expect-outcome tests_passed --nonce N`: accepted with both signatures, rejected with
//! one, when the set's not_after has passed, and when the set pins another binary.

use fenced_run_tests::fence::skip;
use std::path::Path;
use std::process::{Command, Output};

const FENCED_RUN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const MEASURE_GUEST: &str = env!("CARGO_BIN_EXE_measure-guest-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const NONCE: &str = "5eed5eed5eed5eed0123456789abcdef5eed5eed5eed5eed";

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("run tool")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn ok(what: &str, o: &Output) -> String {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn verify(d: &Path, set: &Path, nonce: &str) -> (Option<i32>, serde_json::Value) {
    let (a, b, ev) = (
        d.join("alice.pub"),
        d.join("bob.pub"),
        d.join("run.evidence"),
    );
    let args = vec![
        "evidence",
        s(&ev),
        "--json",
        "--allow-simulated",
        "--measurements",
        s(set),
        "--auditor-key",
        s(&a),
        "--auditor-key",
        s(&b),
        "--auditors-required",
        "2",
        "--expect-outcome",
        "tests_passed",
        "--nonce",
        nonce,
    ];
    let o = run(VERIFY, &args);
    let json = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code(), json)
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

#[test]
fn auditors_pin_the_process_binary_and_the_founder_verifies_the_demo() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();

    // The auditors measure the exact binary that will run, and pin it.
    let m = ok(
        "measure-guest process",
        &run(MEASURE_GUEST, &["process", "--binary", FENCED_RUN]),
    );
    let set_path = d.join("release.toml");
    ok(
        "pin",
        &run(
            MEASURE_GUEST,
            &[
                "pin",
                "--name",
                "fenced-run-process",
                "--release-version",
                "0.1.0",
                "--process-binary",
                FENCED_RUN,
                "--out",
                s(&set_path),
            ],
        ),
    );
    let text = std::fs::read_to_string(&set_path).expect("set written");
    assert!(
        text.contains(m.trim()),
        "pin wrote the measured value: {text}"
    );
    for who in ["alice", "bob"] {
        ok(
            "keygen",
            &run(MEASURE_GUEST, &["keygen", "--out", s(&d.join(who))]),
        );
        ok(
            "sign",
            &run(
                MEASURE_GUEST,
                &[
                    "sign",
                    "--key",
                    s(&d.join(format!("{who}.key"))),
                    "--set",
                    s(&set_path),
                    "--auditor",
                    who,
                ],
            ),
        );
    }

    // The contributor's host runs the demo with the founder's nonce and hands over the evidence.
    let evidence = d.join("run.evidence");
    let out = ok(
        "fenced-run demo",
        &run(
            FENCED_RUN,
            &[
                "demo",
                "--isolation",
                "process",
                "--evidence",
                s(&evidence),
                "--nonce",
                NONCE,
            ],
        ),
    );
    assert!(out.contains(&format!("nonce       {NONCE}")), "{out}");

    // Both auditors signed: accepted, with the outcome and the set's sim entry compared.
    let (code, json) = verify(d, &set_path, NONCE);
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(json["verdict"]["outcome"], "tests_passed", "{json}");
    assert_eq!(json["measurement_pinned"][0], "sim-measurement", "{json}");
    assert_eq!(json["outcome_pinned"], true, "{json}");
    let signers = json["measurement_set_signers"].as_array().expect("signers");
    assert_eq!(signers.len(), 2, "{json}");

    // Another nonce: rejected (key binding and the verdict's nonce).
    let (code, json) = verify(d, &set_path, "00000000000000000000000000000000");
    assert_eq!(code, Some(1), "{json}");
    assert!(checks(&json).contains(&"nonce".to_string()), "{json}");

    // The same binary pinned in a set whose not_after has passed (both signatures present): refused, naming
    // the date.
    let expired = d.join("expired.toml");
    ok(
        "pin expired",
        &run(
            MEASURE_GUEST,
            &[
                "pin",
                "--name",
                "fenced-run-process",
                "--release-version",
                "0.0.9",
                "--process-binary",
                FENCED_RUN,
                "--not-after",
                "2000-01-01T00:00:00Z",
                "--out",
                s(&expired),
            ],
        ),
    );
    for who in ["alice", "bob"] {
        ok(
            "sign expired",
            &run(
                MEASURE_GUEST,
                &[
                    "sign",
                    "--key",
                    s(&d.join(format!("{who}.key"))),
                    "--set",
                    s(&expired),
                    "--auditor",
                    who,
                ],
            ),
        );
    }
    let (code, json) = verify(d, &expired, NONCE);
    assert_eq!(code, Some(1), "{json}");
    assert_eq!(checks(&json), ["measurement-set"], "{json}");
    let detail = json["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("expired: its not_after is 2000-01-01T00:00:00Z"),
        "{detail}"
    );

    // One signature only: the set is not trusted, the evidence is rejected naming the set.
    std::fs::remove_file(d.join("release.toml.bob.sig")).expect("remove bob's signature");
    let (code, json) = verify(d, &set_path, NONCE);
    assert_eq!(code, Some(1), "{json}");
    assert_eq!(checks(&json), ["measurement-set"], "{json}");
    let detail = json["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("1 of 2 required"), "{detail}");

    // A set pinning another binary (both signatures present): the launch is not in it.
    let other_bin = d.join("other-binary");
    std::fs::write(&other_bin, b"some other build").expect("write");
    let other = d.join("other.toml");
    ok(
        "pin other",
        &run(
            MEASURE_GUEST,
            &[
                "pin",
                "--name",
                "fenced-run-process",
                "--release-version",
                "0.1.1",
                "--process-binary",
                s(&other_bin),
                "--out",
                s(&other),
            ],
        ),
    );
    for who in ["alice", "bob"] {
        ok(
            "sign other",
            &run(
                MEASURE_GUEST,
                &[
                    "sign",
                    "--key",
                    s(&d.join(format!("{who}.key"))),
                    "--set",
                    s(&other),
                    "--auditor",
                    who,
                ],
            ),
        );
    }
    let (code, json) = verify(d, &other, NONCE);
    assert_eq!(code, Some(1), "{json}");
    assert_eq!(checks(&json), ["measurement-set"], "{json}");
}

#[test]
fn run_and_demo_refuse_a_nonce_outside_16_to_64_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job = dir.path().join("job.toml");
    std::fs::write(&job, "[repository]\npath = \"repo\"\n").expect("write");
    for bad in ["00".repeat(15), "00".repeat(65), "zz".to_string()] {
        for extra in [&[][..], &["--evidence", "x.evidence"][..]] {
            let mut args = vec!["run", s(&job), "--nonce", &bad];
            args.extend_from_slice(extra);
            let o = run(FENCED_RUN, &args);
            assert_eq!(o.status.code(), Some(2), "run --nonce {bad} {extra:?}");
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("--nonce"),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let o = run(FENCED_RUN, &["demo", "--nonce", &bad]);
        assert_eq!(o.status.code(), Some(2), "demo --nonce {bad}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--nonce"));
    }
}
