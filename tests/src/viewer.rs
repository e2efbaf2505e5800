//! Helpers for the viewer's tests: sim evidence made with the library (a sim PSP session sealing a verdict the
//! test builds), the verifier options a founder would give, and a raw HTTP/1.1 request for what a normal client
//! will not send (a foreign `Host`, no `Host`).

use attestation::verdict::{
    EgressRecord, Finding, Inputs, InstallPhase, Isolation, Outcome, TestCounts, TestNetwork,
    TestPhase, Verdict,
};
use std::io::{Read, Write};
use verifier_lib::EvidenceOptions;

/// The nonce every helper-made evidence carries.
pub const NONCE: [u8; 24] = [7; 24];

/// A verdict of `outcome` with an install phase (one allowed and one denied egress row), a test phase and counts;
/// every string field holds `s` (prefixed with the field's name).
pub fn verdict(outcome: Outcome, s: &str) -> Verdict {
    let f = |name: &str| format!("{name} {s}");
    let inputs = Inputs {
        commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
        tree: Some("89abcdef0123456789abcdef0123456789abcdef".into()),
        patch_sha256: Some("aa".repeat(32)),
        job_sha256: Some("bb".repeat(32)),
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let mut v = if outcome == Outcome::Refused {
        Verdict::refused(
            &f("stage"),
            &f("reason"),
            Isolation::Process,
            inputs,
            &f("agent"),
        )
    } else {
        Verdict::new(outcome, Isolation::Process, inputs, &f("agent"))
    };
    if outcome != Outcome::Refused {
        v.install = Some(InstallPhase {
            command: f("install-command"),
            source: f("install-source"),
            exit_code: Some(0),
            signal: None,
            duration_ms: 1234,
            egress: vec![
                EgressRecord {
                    host: f("allowed-host"),
                    port: 443,
                    allowed: true,
                    reason: f("allowed-reason"),
                    bytes_up: 100,
                    bytes_down: 2000,
                },
                EgressRecord {
                    host: "denied.example".into(),
                    port: 80,
                    allowed: false,
                    reason: f("denied-reason"),
                    bytes_up: 0,
                    bytes_down: 0,
                },
            ],
            env_names: vec![f("ENV")],
            sandbox: vec![f("sandbox-line")],
            operator_egress: None,
        });
        v.test = Some(TestPhase {
            command: f("test-command"),
            source: f("test-source"),
            exit_code: Some(i32::from(outcome == Outcome::TestsFailed)),
            signal: None,
            duration_ms: 4321,
            network: TestNetwork::default(),
            env_names: vec![f("TESTENV")],
            sandbox: vec![f("test-sandbox-line")],
        });
        let failed = u64::from(outcome == Outcome::TestsFailed);
        v.tests = Some(TestCounts {
            passed: 3,
            failed,
            skipped: 1,
            parser: f("parser"),
        });
    }
    v.output_tail.install = f("install-tail");
    v.output_tail.test = f("test-tail");
    v.findings.push(Finding {
        stage: f("finding-stage"),
        path: f("finding-path"),
        kind: f("finding-kind"),
        detail: f("finding-detail"),
    });
    v.limits.rlimits.insert(
        f("RLIMIT"),
        attestation::verdict::RlimitValue {
            soft: Some(1),
            hard: None,
        },
    );
    v
}

/// Sim `process` evidence sealing `v` (which must carry [`NONCE`]), and its launch measurement.
pub fn evidence(v: &Verdict) -> (Vec<u8>, [u8; 48]) {
    let (session, measurement) = host::sim::begin_process_session(&NONCE).expect("sim session");
    let ev = session.seal(v).expect("seal");
    (ev.to_cbor().expect("cbor"), measurement)
}

/// What a founder gives for sim evidence: simulated allowed, the measurement and the nonce pinned.
pub fn founder_options(measurement: [u8; 48]) -> EvidenceOptions {
    let mut o = EvidenceOptions {
        nonce: Some(NONCE.to_vec()),
        ..EvidenceOptions::default()
    };
    o.chain.allow_simulated = true;
    o.policy.measurements = vec![attestation::hex::Hex(measurement)];
    o
}

/// A raw HTTP/1.1 GET of `path` on 127.0.0.1:`port` with exactly the header lines given (`Host` included or
/// not); returns the status code and the whole response text.
pub fn raw_get(port: u16, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// The first of `names` found on `PATH` (chromium, chromedriver).
pub fn find_on_path(names: &[&str]) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// A process killed and reaped when the test ends, however it ends.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback TCP port (for chromedriver).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
