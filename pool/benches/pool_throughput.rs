//! Throughput and per-run overhead of the pool (docs/benchmarks.md): N trivial runs with `fenced-run run`
//! directly, one after another, against the same N runs submitted at once through the pool with 1, 2 and 3
//! workers (one run at a time each), on a Temporal dev server and a PostgreSQL cluster started here.
//!
//! `cargo bench -p pool --bench pool_throughput` (POOL_BENCH_RUNS=N, default 6). Needs root, PostgreSQL and the
//! temporal CLI (as the tests); prints `skipped: ...` otherwise.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use std::time::{Duration, Instant};

const NONCE: &str = "00112233445566778899aabbccddeeff";

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    if !is_root() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "not root (the fence and a PostgreSQL owned by nobody need it)",
        );
        return;
    }
    let n: usize = std::env::var("POOL_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let job = Job::new("echo '1 passed, 0 failed'\n", 60);
    let jobp = job.path();

    // Direct: `fenced-run run` N times in a row, with evidence (as a worker runs it).
    let out = tempfile::tempdir().expect("out");
    let t0 = Instant::now();
    for i in 0..n {
        let ev = out.path().join(format!("direct-{i}.evidence"));
        let o = std::process::Command::new(FENCED_RUN)
            .arg("run")
            .arg(&jobp)
            .args(["--json", "--nonce", NONCE, "--evidence"])
            .arg(&ev)
            .output()
            .expect("fenced-run run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let direct = t0.elapsed();
    report("fenced-run run, sequential", n, direct, direct);

    let Some(pg) = Postgres::start() else { return };
    let Some(t) = Temporal::start() else { return };
    let admin = pg.url("pool_admin");
    let o = pool(&["init", "--store", &admin]);
    assert!(o.status.success());
    let work = tempfile::tempdir().expect("work");
    for workers in 1..=3usize {
        let queue = format!("bench-{workers}");
        let ws: Vec<Worker> = (0..workers)
            .map(|i| {
                Worker::start(
                    &t.addr,
                    &admin,
                    &queue,
                    &format!("bench-{workers}-{i}"),
                    1,
                    work.path(),
                )
            })
            .collect();
        let t0 = Instant::now();
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let args: Vec<String> = [
                    "submit",
                    jobp.to_str().expect("utf8"),
                    "--temporal",
                    &t.addr,
                    "--store",
                    &admin,
                    "--nonce",
                    NONCE,
                    "--queue",
                    &queue,
                    "--run-id",
                    &format!("bench-{workers}-{i}"),
                    "--wait",
                    "--json",
                    // A hang (issue 15) fails the bench after five minutes instead of waiting forever.
                    "--wait-timeout",
                    "300",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                std::thread::spawn(move || {
                    std::process::Command::new(POOL)
                        .args(&args)
                        .output()
                        .expect("submit")
                })
            })
            .collect();
        for h in handles {
            let o = h.join().expect("thread");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let took = t0.elapsed();
        report(&format!("pool, {workers} worker(s)"), n, took, direct);
        drop(ws);
    }
}

fn report(what: &str, n: usize, took: Duration, direct: Duration) {
    let per = took.as_secs_f64() / n as f64;
    println!(
        "{what:<28} {n} runs in {:>7.2} s: {:>5.2} runs/s, {:>6.2} s per run, {:+.2} s per run against direct",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        per,
        per - direct.as_secs_f64() / n as f64
    );
}
