//! Inputs that must never crash or mislead `verify-attestation` (issue 20): a crafted CCEL (SHA-384 declared
//! twice with different sizes) is a named error with exit 2, not a panic (exit 101); a 1 GiB evidence file is
//! refused without being read; a closed stdout ends the run quietly with an error exit.

use attestation::sim::tdx::{SimQe, SimTd};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
}

/// A CCEL whose Spec ID event declares `algs` (id, size), then one event with a 48-byte SHA-384 digest.
pub fn ccel_declaring(algs: &[(u16, u16)]) -> Vec<u8> {
    let mut spec = b"Spec ID Event03\0".to_vec();
    spec.extend_from_slice(&0u32.to_le_bytes());
    spec.extend_from_slice(&[0, 2, 0, 2]);
    spec.extend_from_slice(&(algs.len() as u32).to_le_bytes());
    for (a, s) in algs {
        spec.extend_from_slice(&a.to_le_bytes());
        spec.extend_from_slice(&s.to_le_bytes());
    }
    spec.push(0);
    let mut l = Vec::new();
    l.extend_from_slice(&0u32.to_le_bytes());
    l.extend_from_slice(&3u32.to_le_bytes());
    l.extend_from_slice(&[0; 20]);
    l.extend_from_slice(&(spec.len() as u32).to_le_bytes());
    l.extend_from_slice(&spec);
    for v in [1u32, 1, 1] {
        l.extend_from_slice(&v.to_le_bytes());
    }
    l.extend_from_slice(&0x000Cu16.to_le_bytes());
    l.extend_from_slice(&[0x5A; 48]);
    l.extend_from_slice(&0u32.to_le_bytes());
    l
}

fn sim_quote(dir: &std::path::Path) -> std::path::PathBuf {
    let qe = SimQe::new(dir).expect("qe");
    let q = dir.join("quote.bin");
    std::fs::write(&q, qe.quote(&SimTd::default()).expect("quote")).expect("write");
    q
}

#[test]
fn tdx_quote_event_log_with_sha384_declared_twice_is_a_named_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let quote = sim_quote(dir.path());
    let log = dir.path().join("ccel.bin");
    std::fs::write(&log, ccel_declaring(&[(0x000C, 32), (0x000C, 48)])).expect("write");
    let out = bin()
        .arg("tdx-quote")
        .arg(&quote)
        .arg("--allow-simulated")
        .arg("--event-log")
        .arg(&log)
        .arg("--json")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout} {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let j: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(j["failures"][0]["check"], "event-log-format", "{j}");
    let detail = j["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("0x000c twice"), "{detail}");
}

#[test]
fn a_1_gib_evidence_file_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let big = dir.path().join("big.evidence");
    std::fs::File::create(&big)
        .expect("create")
        .set_len(1 << 30)
        .expect("sparse 1 GiB");
    let started = std::time::Instant::now();
    let out = bin()
        .arg("evidence")
        .arg(&big)
        .arg("--any-measurement")
        .arg("--no-nonce")
        .arg("--json")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let j: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let detail = j["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("1073741824 bytes") && detail.contains("not read"),
        "{detail}"
    );
    // Reading 1 GiB (even of zeros) and decoding it would take far longer than refusing it; this bound only
    // guards against a regression that reads the file, it is not a timing claim.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // The same for --collateral and a quote.
    let out = bin().arg("tdx-quote").arg(&big).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not read"));
}

#[test]
fn a_closed_stdout_is_a_quiet_error_exit_not_a_panic() {
    let dir = tempfile::tempdir().expect("tmp");
    let quote = sim_quote(dir.path());
    for json in [false, true] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut c = bin();
        c.arg("tdx-quote").arg(&quote).arg("--allow-simulated");
        if json {
            c.arg("--json");
        }
        let out = c
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("cannot write to stdout"), "{stderr}");
    }
}
