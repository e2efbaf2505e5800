//! `measure-guest tdx --event-log` on hostile input (issue 20): a CCEL with SHA-384 declared twice with
//! different sizes is a named error with exit 2 (it used to panic, exit 101); a 1 GiB log is refused without
//! being read; a closed stdout is a quiet error exit, not a panic.

use std::process::{Command, Stdio};

fn ccel_declaring(algs: &[(u16, u16)]) -> Vec<u8> {
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

fn run(log: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .arg("tdx")
        .arg("--event-log")
        .arg(log)
        .output()
        .expect("run")
}

#[test]
fn sha384_declared_twice_is_a_named_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("ccel.bin");
    std::fs::write(&log, ccel_declaring(&[(0x000C, 32), (0x000C, 48)])).expect("write");
    let out = run(&log);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("declares algorithm 0x000c twice"),
        "{stderr}"
    );
    // The well-formed log is read.
    std::fs::write(&log, ccel_declaring(&[(0x000C, 48)])).expect("write");
    let out = run(&log);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("RTMR0: "));
}

#[test]
fn a_1_gib_event_log_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("big.bin");
    std::fs::File::create(&log)
        .expect("create")
        .set_len(1 << 30)
        .expect("sparse");
    let out = run(&log);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not read"), "{stderr}");
}

#[test]
fn a_closed_stdout_is_a_quiet_error_exit() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("ccel.bin");
    std::fs::write(&log, ccel_declaring(&[(0x000C, 48)])).expect("write");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .arg("tdx")
        .arg("--event-log")
        .arg(&log)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
