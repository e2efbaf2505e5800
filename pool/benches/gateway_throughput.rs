//! Runs per minute through the pool with the founder gateway (docs/benchmarks.md): N trivial runs with
//! `fenced-run run` directly, one after another, against the same N runs submitted at once by a founder through
//! `pool gateway` (a token, `submit --wait --gateway`) to a queue served by 2 workers of one run each, then the
//! same N runs one at a time (each run's latency through the pool), over TCP and over a Unix socket, on a
//! Temporal dev server and a PostgreSQL cluster started here.
//!
//! `cargo bench -p pool --bench gateway_throughput` (POOL_BENCH_RUNS=N, default 12). Needs root, PostgreSQL and
//! the temporal CLI (as the tests); prints `skipped: ...` otherwise.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use std::time::{Duration, Instant};

const NONCE: &str = "00112233445566778899aabbccddeeff";

fn main() {
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
        .unwrap_or(12);
    let job = Job::new("echo '1 passed, 0 failed'\n", 60);
    let jobp = job.path();
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
    let o = pool(&["founder", "add", "bench", "--store", &admin, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let token = v["token"].as_str().expect("token").to_owned();
    let work = tempfile::tempdir().expect("work");
    let ws: Vec<Worker> = (0..2)
        .map(|i| {
            Worker::start(
                &t.addr,
                &admin,
                "gw-bench",
                &format!("gw-bench-{i}"),
                1,
                work.path(),
            )
        })
        .collect();
    for listen in [
        "127.0.0.1:0".to_owned(),
        format!("unix:{}", out.path().join("gw.sock").display()),
    ] {
        let gateway = Gateway::start(&t.addr, &admin, &listen, &[]);
        let kind = if listen.starts_with("unix:") {
            "unix"
        } else {
            "tcp"
        };
        let t0 = Instant::now();
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let mut cmd = std::process::Command::new(POOL);
                cmd.arg("submit")
                    .arg(&jobp)
                    .args([
                        "--gateway",
                        &gateway.url,
                        "--nonce",
                        NONCE,
                        "--queue",
                        "gw-bench",
                    ])
                    .args(["--run-id", &format!("{kind}-{i}"), "--wait", "--json"])
                    .args(["--wait-timeout", "300"])
                    .env("FENCED_RUN_POOL_TOKEN", &token);
                std::thread::spawn(move || cmd.output().expect("submit"))
            })
            .collect();
        for h in handles {
            let o = h.join().expect("thread");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        report(
            &format!("pool + gateway ({kind}), 2 workers"),
            n,
            t0.elapsed(),
            direct,
        );
        // One run at a time: each run's own latency through the pool against a direct run's.
        let t0 = Instant::now();
        for i in 0..n {
            let o = std::process::Command::new(POOL)
                .arg("submit")
                .arg(&jobp)
                .args([
                    "--gateway",
                    &gateway.url,
                    "--nonce",
                    NONCE,
                    "--queue",
                    "gw-bench",
                ])
                .args(["--run-id", &format!("{kind}-seq-{i}"), "--wait", "--json"])
                .args(["--wait-timeout", "300"])
                .env("FENCED_RUN_POOL_TOKEN", &token)
                .output()
                .expect("submit");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        report(
            &format!("pool + gateway ({kind}), one at a time"),
            n,
            t0.elapsed(),
            direct,
        );
        drop(gateway);
    }
    drop(ws);
}

fn report(what: &str, n: usize, took: Duration, direct: Duration) {
    let per = took.as_secs_f64() / n as f64;
    println!(
        "{what:<34} {n} runs in {:>7.2} s: {:>6.1} runs/min, {:>6.2} s per run, {:+.2} s per run against direct",
        took.as_secs_f64(),
        60.0 * n as f64 / took.as_secs_f64(),
        per,
        per - direct.as_secs_f64() / n as f64
    );
}
