//! `fenced-run run --nonce-exchange` (what a pool worker runs) waits for its nonce at most `--nonce-timeout`
//! seconds: a peer that reads the key line and never answers ends the run with exit 2 and a message naming the
//! flag, instead of holding it forever. Needs no server.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_silent_nonce_source_ends_the_run_after_the_timeout() {
    let job = Job::new("echo '1 passed, 0 failed'\n", 60);
    let out = tempfile::tempdir().expect("out");
    let t0 = Instant::now();
    let mut child = Command::new(FENCED_RUN)
        .arg("run")
        .arg(job.path())
        .args(["--nonce-exchange", "--nonce-timeout", "2", "--evidence"])
        .arg(out.path().join("run.evidence"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fenced-run run");
    // The stdin end stays open and silent for the whole run.
    let _stdin = child.stdin.take();
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the key line");
    assert!(line.starts_with("key-sha256 "), "{line:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the run still waits for its nonce after 60 s (--nonce-timeout 2)");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = t0.elapsed();
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--nonce-timeout"), "{err}");
    assert!(err.contains("no nonce arrived"), "{err}");
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(!out.path().join("run.evidence").exists());
}
