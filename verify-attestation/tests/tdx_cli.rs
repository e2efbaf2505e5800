//! `verify-attestation tdx-quote` end to end on the real vectors: JSON keys, exit codes 0/1/2, policy flags.

use std::path::PathBuf;
use std::process::Command;

fn vectors_dir() -> Option<PathBuf> {
    attestation::vectors::dir("tdx")
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .arg("tdx-quote")
        .args(args)
        .output()
        .expect("run");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn expected(d: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(d.join("expected.json")).expect("expected"))
        .expect("json")
}

#[test]
fn tdx_cli_every_vector_json_keys_and_exit_codes() {
    let Some(dir) = vectors_dir() else { return };
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("dir").flatten() {
        let d = e.path();
        if !d.join("quote.bin").is_file() {
            continue;
        }
        n += 1;
        let exp = expected(&d);
        let at = exp["reference_time_unix"]
            .as_i64()
            .expect("time")
            .to_string();
        let q = d.join("quote.bin");
        let c = d.join("collateral.json");
        let (code, out, err) = run(&[
            q.to_str().expect("utf8"),
            "--collateral",
            c.to_str().expect("utf8"),
            "--at",
            &at,
            "--json",
            "--allow-debug",
            "--allow-sept-ve",
            "--accept-tcb-status",
            "OutOfDate",
            "--accept-tcb-status",
            "NotSupported",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{}: {e}: {out} {err}", d.display()));
        for k in [
            "verified",
            "tee",
            "mrtd",
            "rtmr0",
            "rtmr1",
            "rtmr2",
            "rtmr3",
            "mr_config_id",
            "report_data",
            "td_attributes",
            "xfam",
            "tcb_status",
            "advisory_ids",
            "failures",
        ] {
            assert!(v.get(k).is_some(), "{}: key {k} missing", d.display());
        }
        let negative = exp.get("negative").is_some();
        assert_eq!(
            v["verified"],
            !negative,
            "{}: {}",
            d.display(),
            v["failures"]
        );
        assert_eq!(code, if negative { 1 } else { 0 }, "{}", d.display());
        assert_eq!(v["tee"], "tdx");
        assert_eq!(v["mrtd"], exp["fields"]["mrtd"], "{}", d.display());
        assert_eq!(v["rtmr1"], exp["fields"]["rtmr1"], "{}", d.display());
        assert_eq!(v["xfam"], exp["fields"]["xfam"], "{}", d.display());
        if let Some(s) = exp["tcb_status_intel_qvl_semantics"].as_str() {
            assert_eq!(v["tcb_status"], s, "{}", d.display());
            assert_eq!(
                v["advisory_ids"],
                exp["advisory_ids_intel_qvl_semantics"],
                "{}",
                d.display()
            );
        }
    }
    assert!(n >= 9, "only {n} vectors");
}

#[test]
fn tdx_cli_policy_flags_expiry_and_unusable_input() {
    let Some(dir) = vectors_dir() else { return };
    let d = dir.join("dcapqvl-v4-b0c06f-uptodate");
    let exp = expected(&d);
    let at = exp["reference_time_unix"]
        .as_i64()
        .expect("time")
        .to_string();
    let q = d.join("quote.bin");
    let q = q.to_str().expect("utf8");
    let c = d.join("collateral.json");
    let c = c.to_str().expect("utf8");
    let mrtd = exp["fields"]["mrtd"].as_str().expect("mrtd");

    // Default policy, right MRTD among others: verified, exit 0, human table.
    let other = "ab".repeat(48);
    let (code, out, _) = run(&[
        q,
        "--collateral",
        c,
        "--at",
        &at,
        "--mrtd",
        &other,
        "--mrtd",
        mrtd,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("result") && out.contains("VERIFIED") && out.contains("UpToDate"),
        "{out}"
    );
    assert!(!out.contains("SIMULATED"));

    // Wrong MRTD and report data: exit 1, each failure named.
    let (code, out, _) = run(&[
        q,
        "--collateral",
        c,
        "--at",
        &at,
        "--mrtd",
        &other,
        "--report-data",
        &"00".repeat(64),
        "--json",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let checks: Vec<&str> = v["failures"]
        .as_array()
        .expect("f")
        .iter()
        .map(|f| f["check"].as_str().expect("c"))
        .collect();
    assert_eq!(checks, ["mrtd", "report-data"]);
    assert_eq!(v["failures"][0]["seen"], mrtd);

    // After the collateral expires: exit 1, the expiry named.
    let (code, out, _) = run(&[
        q,
        "--collateral",
        c,
        "--at",
        "2025-08-30T00:00:00Z",
        "--json",
    ]);
    assert_eq!(code, 1);
    assert!(
        out.contains("tcb-info-next-update") && out.contains("pck-crl-next-update"),
        "{out}"
    );

    // No collateral: rejected (TCB unknown), exit 1.
    let (code, out, _) = run(&[q, "--at", &at, "--json"]);
    assert_eq!(code, 1);
    assert!(out.contains("\"collateral\""), "{out}");

    // Unusable input: exit 2 naming the file.
    let tmp = tempfile::tempdir().expect("tmp");
    let bad = tmp.path().join("short.bin");
    std::fs::write(&bad, &std::fs::read(q).expect("q")[..100]).expect("write");
    let (code, _, err) = run(&[bad.to_str().expect("utf8"), "--collateral", c]);
    assert_eq!(code, 2);
    assert!(
        err.contains("short.bin") && err.contains("truncated"),
        "{err}"
    );
    let (code, _, err) = run(&[q, "--collateral", "/nonexistent/collateral.json"]);
    assert_eq!(code, 2);
    assert!(err.contains("--collateral"), "{err}");
    let badc = tmp.path().join("c.json");
    std::fs::write(&badc, b"{\"tcb_info\": 1}").expect("write");
    let (code, out, _) = run(&[q, "--collateral", badc.to_str().expect("utf8"), "--json"]);
    assert_eq!(code, 2);
    assert!(out.contains("collateral-format"), "{out}");
    let (code, _, _) = run(&[q, "--mrtd", "xyz"]);
    assert_eq!(code, 2);
}
