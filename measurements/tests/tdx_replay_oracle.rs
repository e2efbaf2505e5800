//! Compares `measurements::tdx::replay_rtmrs` with an independent CCEL parser, Intel's `cctrusted-base`
//! (PyPI, installed by .ci/run into the same venv as sev-snp-measure), on event logs built here: SHA-384-only
//! and SHA-256+SHA-384 logs with every RTMR, EV_NO_ACTION events in the middle and the 0xFF fill at the end.
//! Skips with a reason when the venv is absent, unless FENCED_RUN_REQUIRE_VECTORS=1.

use std::path::PathBuf;
use std::process::Command;

use measurements::tdx;

fn venv_python() -> Option<PathBuf> {
    let v = attestation::vectors::oracle_venv();
    let py = v.join("bin/python");
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", "import cctrusted_base.eventlog"])
            .output()
            .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

/// A deterministic byte stream (xorshift), so the logs are varied but reproducible.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 24) as u8
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// Builds a crypto-agile log with the given algorithms ((id, size), SHA-384 among them) and `n` events.
fn build_log(algs: &[(u16, u16)], n: usize, seed: u64) -> Vec<u8> {
    let mut r = Bytes(seed);
    let mut spec = b"Spec ID Event03\0".to_vec();
    spec.extend_from_slice(&0u32.to_le_bytes());
    spec.extend_from_slice(&[0, 2, 0, 2]);
    spec.extend_from_slice(&(algs.len() as u32).to_le_bytes());
    for (id, size) in algs {
        spec.extend_from_slice(&id.to_le_bytes());
        spec.extend_from_slice(&size.to_le_bytes());
    }
    spec.push(0);
    let mut l = Vec::new();
    l.extend_from_slice(&0u32.to_le_bytes());
    l.extend_from_slice(&tdx::EV_NO_ACTION.to_le_bytes());
    l.extend_from_slice(&[0; 20]);
    l.extend_from_slice(&(spec.len() as u32).to_le_bytes());
    l.extend_from_slice(&spec);
    let types = [
        0x8000_0001u32,
        0x8000_0003,
        0x0000_0004,
        0x0000_000D,
        0x8000_000A,
        0x8000_0007,
    ];
    for i in 0..n {
        let mr = 1 + (r.next() % 4) as u32;
        let ty = if i % 7 == 3 {
            tdx::EV_NO_ACTION
        } else {
            types[i % types.len()]
        };
        l.extend_from_slice(&mr.to_le_bytes());
        l.extend_from_slice(&ty.to_le_bytes());
        l.extend_from_slice(&(algs.len() as u32).to_le_bytes());
        for (id, size) in algs {
            l.extend_from_slice(&id.to_le_bytes());
            l.extend(r.take(*size as usize));
        }
        let len = 1 + (r.next() % 90) as usize; // cctrusted-base cannot read empty event data
        let data = r.take(len);
        l.extend_from_slice(&(data.len() as u32).to_le_bytes());
        l.extend_from_slice(&data);
    }
    l.extend_from_slice(&[0xFF; 1024]);
    l
}

const ORACLE: &str = r#"
import sys, logging
logging.disable(logging.CRITICAL)
from cctrusted_base.eventlog import EventLogs, TcgEventLog
data = open(sys.argv[1], "rb").read()
logs = EventLogs(data, None, TcgEventLog.TCG_FORMAT_PCCLIENT)
logs.select(None, None)
result = EventLogs.replay(logs.event_logs)
for i in range(4):
    v = result.get(i, {}).get(12)
    print(v.hex() if v is not None else "0" * 96)
print(logs.count)
"#;

#[test]
fn replay_matches_cctrusted_base() {
    let Some(py) = venv_python() else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Oracles,
            "target/sev-snp-venv with cctrusted-base not found (.ci/run creates it)",
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("oracle.py");
    std::fs::write(&script, ORACLE).expect("write script");
    type Case = (&'static [(u16, u16)], usize, u64);
    let cases: [Case; 4] = [
        (&[(0x000C, 48)], 40, 1),
        (&[(0x000B, 32), (0x000C, 48)], 60, 2),
        (&[(0x000C, 48), (0x000D, 64)], 25, 3),
        (&[(0x000C, 48)], 1, 4),
    ];
    for (algs, n, seed) in cases {
        let log = build_log(algs, n, seed);
        let path = dir.path().join(format!("ccel-{seed}.bin"));
        std::fs::write(&path, &log).expect("write log");
        let out = Command::new(&py)
            .arg(&script)
            .arg(&path)
            .output()
            .expect("python");
        assert!(
            out.status.success(),
            "cctrusted-base failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        let ours = tdx::replay_rtmrs(&log).expect("replay");
        for (i, (rtmr, line)) in ours.rtmrs.iter().zip(&lines).enumerate() {
            assert_eq!(
                &hex::encode(rtmr),
                line,
                "RTMR{i} differs for log {seed} ({n} events)"
            );
        }
        assert_eq!(
            ours.events.len().to_string(),
            lines[4],
            "event count for log {seed}"
        );
        assert_eq!(ours.padding, 1024);
        assert!(
            ours.rtmrs.iter().any(|r| r != &[0u8; 48]),
            "log {seed} extended nothing"
        );
    }
}
