//! Archive bombs stay bounded in memory: intake streams a tar.gz that really inflates to 10 GiB (about 10 MB on
//! disk) and a few-KB one that declares 10 GiB, refuses both at stage 2 naming the member, and its peak memory
//! stays small. This file holds a single test so that the process's peak RSS (VmHWM) is this test's own.
//! (Time is bounded by the same limits, and is measured in benchmarks, never asserted here.)

use flate2::write::GzEncoder;
use flate2::Compression;
use intake::{run_stages, IntakeOptions, Stage};
use std::io::Write;
use std::path::Path;

const JOB: &str = "[repository]\npath = \"repo\"\n\n[test]\ncommand = \"sh test.sh\"\n";

/// Peak resident set size of this process, in KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

fn header(path: &str, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_path(path).expect("path");
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    h
}

/// `job.toml`, then `repo/zeros` declaring 10 GiB followed by `data_mib` MiB of real zeros (gzip members).
fn bomb(path: &Path, data_mib: usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let gz = |bytes: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), Compression::best());
        e.write_all(bytes).expect("gzip");
        e.finish().expect("gzip")
    };
    let mut head = Vec::new();
    head.extend_from_slice(header("job.toml", JOB.len() as u64).as_bytes());
    head.extend_from_slice(JOB.as_bytes());
    head.resize(1024, 0);
    head.extend_from_slice(header("repo/zeros", 10 << 30).as_bytes());
    out.write_all(&gz(&head)).expect("write");
    let mib = gz(&vec![0u8; 1 << 20]);
    for _ in 0..data_mib {
        out.write_all(&mib).expect("write");
    }
    out.flush().expect("flush");
}

#[test]
fn bombs_are_refused_with_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work");
    let before = vm_hwm_kib();
    for (name, data_mib) in [
        ("real-10gib.tar.gz", 10 * 1024),
        ("declared-10gib.tar.gz", 1),
    ] {
        let path = dir.path().join(name);
        bomb(&path, data_mib);
        let report = run_stages(&path, &IntakeOptions::default().with_work_parent(&work));
        let refusal = report.refusal.as_ref().expect("refused");
        assert_eq!(refusal.stage, Stage::Unpack, "{name}: {refusal:?}");
        assert!(refusal.reason.contains("repo/zeros"), "{name}: {refusal:?}");
        assert!(
            std::fs::read_dir(&work).expect("work").next().is_none(),
            "{name}: intake left its work directory behind"
        );
    }
    let grown_mib = vm_hwm_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 128,
        "peak memory grew by {grown_mib} MiB while refusing bombs"
    );
}
