//! The fence's own cost: a run whose commands are `true`, with and without an install phase (the difference is
//! the cost of one phase), against running `true` directly and against `bwrap --unshare-all` doing the same.
//! Run with `cargo bench -p guest --bench fence` as root (the fence needs namespaces and cgroups).

use criterion::{criterion_main, Criterion};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn job(dir: &std::path::Path, install: bool) -> intake::job::Job {
    let mut text = String::from("[repository]\npath = \"repo\"\n");
    if install {
        text.push_str("[install]\ncommand = \"true\"\n");
    }
    text.push_str("[test]\ncommand = \"true\"\n");
    let path = dir.join(if install { "both.toml" } else { "test.toml" });
    std::fs::write(&path, text).expect("job");
    intake::job::Job::load(&path).expect("load")
}

fn bench(c: &mut Criterion) {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let mut g = c.benchmark_group("fence_true");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("direct", |b| {
        b.iter(|| {
            Command::new("true")
                .stdout(Stdio::null())
                .status()
                .expect("true")
        })
    });
    let bwrap = Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if bwrap {
        g.bench_function("bwrap_unshare_all", |b| {
            b.iter(|| {
                Command::new("bwrap")
                    .args([
                        "--unshare-all",
                        "--ro-bind",
                        "/",
                        "/",
                        "--dev",
                        "/dev",
                        "--proc",
                        "/proc",
                        "true",
                    ])
                    .status()
                    .expect("bwrap")
            })
        });
    } else {
        // A peer for comparison, not a component of ours: what this machine has (kind host, never required).
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Host,
            "bwrap_unshare_all: bwrap is not installed (apt package bubblewrap)",
        );
    }
    // Compiled once per phase by PID 1 (applying it is irreversible, so it is measured inside the runs).
    g.bench_function("seccomp_filter_compile", |b| {
        b.iter(|| guest::fence::seccomp::build().expect("filter"))
    });
    if root {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("repo")).expect("repo");
        std::fs::write(dir.path().join("repo/README"), "bench\n").expect("file");
        let helper = PathBuf::from(env!("CARGO_BIN_EXE_guest-agent"));
        let mut opts = guest::fence::run::RunOptions::new(helper, vec![0; 32]);
        opts.proxy = None;
        let test_only = job(dir.path(), false);
        let both = job(dir.path(), true);
        // A refusal would time the refusal path, not the fence: every run measured must be judged.
        for (name, j) in [("test only", &test_only), ("install and test", &both)] {
            let v = guest::fence::run::run_job(j, &opts);
            assert!(
                v.judged,
                "bench job ({name}) was not judged: {:?}",
                v.refusal
            );
        }
        g.bench_function("fence_run_test_phase_only", |b| {
            b.iter(|| guest::fence::run::run_job(&test_only, &opts))
        });
        g.bench_function("fence_run_install_and_test", |b| {
            b.iter(|| guest::fence::run::run_job(&both, &opts))
        });
        let mut with_proxy = opts.clone();
        with_proxy.proxy = Some(std::sync::Arc::new(guest::fence::run::ProxyEgress::system()));
        g.bench_function("fence_run_install_with_proxy_and_test", |b| {
            b.iter(|| guest::fence::run::run_job(&both, &with_proxy))
        });
        g.bench_function("repository_copy_and_tree_hash", |b| {
            b.iter(|| {
                let d = tempfile::tempdir().expect("dir");
                guest::fence::repo::prepare(
                    &dir.path().join("repo"),
                    &d.path().join("r"),
                    None,
                    None,
                )
                .expect("prep")
            })
        });
    } else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "the fence runs: not root",
        );
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
