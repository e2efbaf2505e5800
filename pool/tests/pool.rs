//! The hosted pool end to end, on loopback with real servers started here: a Temporal dev server, a PostgreSQL
//! cluster from `initdb`, three worker processes. Passing, failing and timing-out runs all complete with
//! verifiable evidence bound to their attempt's nonce; a worker killed with SIGKILL mid-run costs one attempt
//! and the run completes elsewhere, the killed attempt's late result being rejected; a duplicate run ID is
//! rejected; cancellation leaves no process and no file; a founder cannot read another founder's run. And many
//! more runs queued than slots (one worker of one slot) all come back judged within a bound, the worker alive.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests that start servers and workers take turns: on a small machine two Temporal dev servers, two
/// clusters and their workers at once only add load to each other's leases and deadlines.
static SERVERS: Mutex<()> = Mutex::new(());

fn servers_turn() -> std::sync::MutexGuard<'static, ()> {
    SERVERS.lock().unwrap_or_else(|e| e.into_inner())
}

const NONCE_A: &str = "00112233445566778899aabbccddeeff";
const NONCE_B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa9988";

fn text(o: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// How the founder checks pooled evidence: against the run's signed ledger (`--pool-ledger`, `--pool-key`,
/// `--max-executions`), the old derived nonce of an attempt (`--pool-attempt`, which an issued nonce never
/// matches), or the founder's nonce as given.
enum Check<'a> {
    Ledger(&'a Path, &'a Path, u32),
    Attempt(u32),
    Plain,
}

fn verify(evidence: &Path, nonce: &str, check: Check<'_>) -> std::process::Output {
    let mut c = std::process::Command::new(VERIFY);
    c.arg("evidence").arg(evidence).args([
        "--allow-simulated",
        "--any-measurement",
        "--nonce",
        nonce,
    ]);
    match check {
        Check::Ledger(ledger, key, max) => {
            c.arg("--pool-ledger")
                .arg(ledger)
                .arg("--pool-key")
                .arg(key)
                .args(["--max-executions", &max.to_string()]);
        }
        Check::Attempt(n) => {
            c.args(["--pool-attempt", &n.to_string()]);
        }
        Check::Plain => {}
    }
    c.output().expect("verify-attestation")
}

/// `pool fetch RUN --out EV --ledger-out LEDGER --pool-key KEY` as `store`'s role.
fn fetch_with_ledger(
    t: &Temporal,
    store: &str,
    run_id: &str,
    ev: &Path,
    ledger: &Path,
    key: &Path,
) -> std::process::Output {
    let mut c = std::process::Command::new(POOL);
    c.args([
        "fetch",
        run_id,
        "--temporal",
        &t.addr,
        "--store",
        store,
        "--out",
    ])
    .arg(ev)
    .arg("--ledger-out")
    .arg(ledger)
    .arg("--pool-key")
    .arg(key);
    c.output().expect("pool fetch")
}

/// The pool's ledger key, created by `pool key` in `dir`: (private key, public key).
fn pool_key_in(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = dir.join("pool.key");
    let o = pool(&["key", "--out", key.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("BEGIN PUBLIC KEY"),
        "{}",
        text(&o)
    );
    (key.clone(), dir.join("pool.key.pub"))
}

fn status(t: &Temporal, store: &str, run_id: &str) -> Value {
    let o = pool(&[
        "status",
        run_id,
        "--temporal",
        &t.addr,
        "--store",
        store,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    json_of(&o)
}

fn submit(
    t: &Temporal,
    store: &str,
    job: &Job,
    nonce: &str,
    run_id: &str,
    extra: &[&str],
) -> std::process::Output {
    let jobp = job.path();
    let mut args = vec![
        "submit",
        jobp.to_str().expect("utf8"),
        "--temporal",
        &t.addr,
        "--store",
        store,
        "--nonce",
        nonce,
        "--queue",
        "process",
        "--run-id",
        run_id,
    ];
    args.extend_from_slice(extra);
    pool(&args)
}

fn listing(dir: &Path) -> String {
    let o = std::process::Command::new("find")
        .arg(dir)
        .args(["-maxdepth", "4", "-ls"])
        .output()
        .expect("find");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn attempt_dirs(work: &Path) -> Vec<String> {
    std::fs::read_dir(work)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("attempt-"))
        .collect()
}

#[test]
fn pool_end_to_end() {
    if let Some(why) = fenced_run_tests_skip_reason() {
        skip_not_root(&why);
        return;
    }
    let _turn = servers_turn();
    let Some(pg) = Postgres::start() else { return };
    let Some(t) = Temporal::start() else { return };
    let admin = pg.url("pool_admin");

    // The schema by migration (idempotent), and two founders.
    for _ in 0..2 {
        let o = pool(&["init", "--store", &admin, "--json"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    // Store roles made by the operator (founders get gateway tokens, tests/gateway.rs): the store's own
    // row-level security on the direct path.
    for f in ["alice", "bob"] {
        pg.founder_role(f);
    }
    let alice = pg.url("alice");
    let bob = pg.url("bob");

    let work = tempfile::Builder::new()
        .prefix("pool-work-")
        .tempdir()
        .expect("work");
    let mut workers: Vec<Worker> = (1..=3)
        .map(|i| {
            Worker::start(
                &t.addr,
                &admin,
                "process",
                &format!("worker-{i}"),
                2,
                work.path(),
            )
        })
        .collect();

    // --- passing, failing, timing out: three runs at once, on three workers ------------------------------------
    let pass = Job::new("echo '3 passed, 0 failed'\n", 60);
    let failj = Job::new("echo '1 passed, 2 failed'\nexit 1\n", 60);
    let slow = Job::new("sleep 30\n", 2);
    let dir = tempfile::tempdir().expect("out dir");
    let cases = [
        ("run-pass", &pass, &alice, NONCE_A, "tests_passed"),
        ("run-fail", &failj, &alice, NONCE_A, "tests_failed"),
        ("run-slow", &slow, &bob, NONCE_B, "budget_expired"),
    ];
    let handles: Vec<_> = cases
        .iter()
        .map(|(id, job, store, nonce, _)| {
            let ev = dir.path().join(format!("{id}.evidence"));
            let args: Vec<String> = [
                "submit",
                job.path().to_str().expect("utf8"),
                "--temporal",
                &t.addr,
                "--store",
                store.as_str(),
                "--nonce",
                nonce,
                "--run-id",
                id,
                "--wait",
                "--json",
                "--evidence",
                ev.to_str().expect("utf8"),
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
    let (key, key_pub) = pool_key_in(dir.path());
    for ((id, _, store, nonce, outcome), h) in cases.iter().zip(handles) {
        let o = h.join().expect("submit thread");
        let v = json_of(&o);
        assert_eq!(v["outcome"], *outcome, "{id}: {}", text(&o));
        let ev = dir.path().join(format!("{id}.evidence"));
        // `fetch` gives the same evidence, and the run's signed ledger of one execution.
        let out = dir.path().join(format!("{id}.fetched"));
        let ledger = dir.path().join(format!("{id}.ledger"));
        let o = fetch_with_ledger(&t, store, id, &out, &ledger, &key);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(std::fs::read(&out).ok(), std::fs::read(&ev).ok());
        let ok = verify(&ev, nonce, Check::Ledger(&ledger, &key_pub, 1));
        assert!(
            ok.status.success(),
            "{id}: the evidence of attempt 1 execution 1 must verify: {}",
            text(&ok)
        );
        // The evidence is bound to the nonce the pool issued to its key: not the founder's nonce itself, not
        // the nonce anyone could derive for attempt 1.
        let plain = verify(&ev, nonce, Check::Plain);
        assert_eq!(plain.status.code(), Some(1), "{id}: {}", text(&plain));
        let derived = verify(&ev, nonce, Check::Attempt(1));
        assert_eq!(derived.status.code(), Some(1), "{id}: {}", text(&derived));
        let s = status(&t, store, id);
        assert_eq!(s["outcome"], *outcome);
        assert_eq!(s["workflow"], "completed", "{s}");
        assert_eq!(s["attempts"].as_array().map(Vec::len), Some(1), "{s}");
        let x = s["executions"].as_array().expect("executions");
        assert_eq!(x.len(), 1, "{s}");
        assert_eq!(x[0]["result"], "verified", "{s}");
        assert_eq!(x[0]["outcome"], *outcome, "{s}");
    }

    // --- a founder reads only their own runs ------------------------------------------------------------------
    let o = pool(&[
        "status",
        "run-slow",
        "--temporal",
        &t.addr,
        "--store",
        &alice,
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "alice must not see bob's run: {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("not found"),
        "{}",
        text(&o)
    );
    let out = dir.path().join("stolen.evidence");
    let o = pool(&[
        "fetch",
        "run-pass",
        "--temporal",
        &t.addr,
        "--store",
        &bob,
        "--out",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "bob must not fetch alice's evidence: {}",
        text(&o)
    );
    assert!(!out.exists());
    let s = status(&t, &admin, "run-slow");
    assert_eq!(s["outcome"], "budget_expired");

    // --- a duplicate run ID is rejected, and says so ------------------------------------------------------------
    let o = submit(&t, &alice, &pass, NONCE_A, "run-pass", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already"),
        "{}",
        text(&o)
    );

    // --- a refused bundle never enters the pool -----------------------------------------------------------------
    let bad = Job::new("true\n", 60);
    std::fs::write(
        bad.path(),
        "[repository]\npath = \"../../etc\"\n[test]\ncommand = \"true\"\n",
    )
    .expect("bad job");
    let o = submit(&t, &alice, &bad, NONCE_A, "run-bad", &[]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let o = pool(&[
        "status",
        "run-bad",
        "--temporal",
        &t.addr,
        "--store",
        &admin,
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a refused bundle must not be registered: {}",
        text(&o)
    );

    // --- kill -9 of a worker mid-run ----------------------------------------------------------------------------
    let marker = "7.0317";
    let long = Job::new(&format!("sleep {marker}\necho '1 passed, 0 failed'\n"), 120);
    let o = submit(
        &t,
        &alice,
        &long,
        NONCE_A,
        "run-kill",
        &["--heartbeat-seconds", "2"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let first = wait_for(Duration::from_secs(60), "attempt 1 started", || {
        let s = status(&t, &admin, "run-kill");
        let w = s["attempts"][0]["worker"].as_str()?.to_owned();
        (!processes_with(marker).is_empty()).then_some(w)
    });
    let idx = workers
        .iter()
        .position(|w| w.identity == first)
        .unwrap_or_else(|| panic!("attempt 1 on an unknown worker {first}"));
    workers[idx].kill9();
    // Attempt 2 starts on another worker once the lease (2 s) has run out.
    wait_for(Duration::from_secs(60), "attempt 2 started", || {
        let s = status(&t, &admin, "run-kill");
        s["attempts"][1]["worker"].is_string().then_some(())
    });
    // A late result for the killed attempt, delivered while the run is still open, is rejected: attempt 1's
    // activity is closed (timed out), so the server refuses to complete it.
    let late = t.cli(&[
        "activity", "complete", "--workflow-id", "run-kill", "--activity-id", "attempt-1", "--result",
        r#"{"attempt":1,"worker":"worker-x","outcome":"tests_passed","verdict":{},"evidence_digest":"00","nonce":"00"}"#,
    ]);
    assert!(
        !late.status.success(),
        "a late result must be rejected: {}",
        text(&late)
    );
    let s = wait_for(Duration::from_secs(120), "run-kill final", || {
        let s = status(&t, &admin, "run-kill");
        s["outcome"].is_string().then_some(s)
    });
    assert_eq!(s["outcome"], "tests_passed", "{s}");
    let attempts = s["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{s}");
    assert_eq!(attempts[0]["worker"], first.as_str());
    assert_ne!(attempts[1]["worker"], first.as_str(), "{s}");
    assert!(
        attempts[0]["why"]
            .as_str()
            .unwrap_or("")
            .contains("lease lost"),
        "{s}"
    );
    assert!(attempts[0]["outcome"].is_null(), "{s}");
    assert_eq!(s["accepted_attempt"], 2, "{s}");
    // The ledger is complete after the kill: attempt 1's execution got its nonce and never delivered a result;
    // attempt 2's was verified. The founder's check counts both.
    let x = s["executions"].as_array().expect("executions");
    assert_eq!(x.len(), 2, "{s}");
    assert_eq!(
        (&x[0]["attempt"], &x[0]["execution"], &x[0]["result"]),
        (&1.into(), &1.into(), &"no result delivered".into()),
        "{s}"
    );
    assert_eq!(x[0]["worker"], first.as_str(), "{s}");
    assert_eq!(
        (&x[1]["attempt"], &x[1]["execution"], &x[1]["result"]),
        (&2.into(), &1.into(), &"verified".into()),
        "{s}"
    );
    let ev = dir.path().join("run-kill.evidence");
    let ledger = dir.path().join("run-kill.ledger");
    let o = fetch_with_ledger(&t, &alice, "run-kill", &ev, &ledger, &key);
    assert!(o.status.success(), "{}", text(&o));
    let once = verify(&ev, NONCE_A, Check::Ledger(&ledger, &key_pub, 1));
    assert_eq!(once.status.code(), Some(1), "{}", text(&once));
    assert!(
        String::from_utf8_lossy(&once.stdout).contains("pool-executions"),
        "{}",
        text(&once)
    );
    let ok = verify(&ev, NONCE_A, Check::Ledger(&ledger, &key_pub, 2));
    assert!(
        ok.status.success(),
        "attempt 2's evidence must verify as attempt 2 execution 1 with two executions accepted: {}",
        text(&ok)
    );
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains("attempt 2 execution 1"),
        "{}",
        text(&ok)
    );
    // Nothing of the killed attempt runs any more, and its directory was swept by a later attempt or worker.
    assert!(
        processes_with(marker).is_empty(),
        "{:?}",
        processes_with(marker)
    );
    workers.remove(idx);
    workers.push(Worker::start(
        &t.addr,
        &admin,
        "process",
        "worker-4",
        2,
        work.path(),
    ));
    let swept = (0..150).any(|_| {
        std::thread::sleep(Duration::from_millis(200));
        attempt_dirs(work.path()).is_empty()
    });
    assert!(
        swept,
        "stale attempt directories left: {}",
        listing(work.path())
    );

    // --- cancellation kills the run's processes and removes its files -------------------------------------------
    let marker = "300.0213";
    let hang = Job::new(&format!("sleep {marker}\n"), 600);
    let o = submit(&t, &bob, &hang, NONCE_B, "run-cancel", &[]);
    assert!(o.status.success(), "{}", text(&o));
    wait_for(Duration::from_secs(60), "run-cancel running", || {
        (!processes_with(marker).is_empty() && !attempt_dirs(work.path()).is_empty()).then_some(())
    });
    // Another founder cannot cancel it.
    let o = pool(&[
        "cancel",
        "run-cancel",
        "--temporal",
        &t.addr,
        "--store",
        &alice,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!processes_with(marker).is_empty());
    let o = pool(&[
        "cancel",
        "run-cancel",
        "--temporal",
        &t.addr,
        "--store",
        &bob,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    wait_for(
        Duration::from_secs(10),
        "the cancelled run's processes gone",
        || processes_with(marker).is_empty().then_some(()),
    );
    assert!(
        attempt_dirs(work.path()).is_empty(),
        "{:?}",
        attempt_dirs(work.path())
    );
    let s = status(&t, &bob, "run-cancel");
    assert!(s["outcome"].is_null(), "{s}");
    assert!(
        s["ended_why"].as_str().unwrap_or("").contains("cancelled"),
        "{s}"
    );
    drop(workers);
}

/// How many runs `queued_runs_beyond_slots` queues on its one-slot worker (POOL_QUEUE_RUNS, default 16).
fn queued_runs() -> usize {
    std::env::var("POOL_QUEUE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 2)
        .unwrap_or(16)
}

/// Many more runs than slots (issue 15: a 12-run benchmark on one `--max-runs 1` worker once hung, the worker
/// gone and every `submit --wait` waiting): N trivial runs submitted at once with `--wait` to a queue served by
/// one worker of one slot. Every submit must come back judged before a deadline on the child processes (those
/// still running then are killed and named), each run must have taken one attempt, and the worker must still
/// be running at the end with no SDK panic or dropped local activity in its log.
#[test]
fn queued_runs_beyond_slots() {
    if let Some(why) = fenced_run_tests_skip_reason() {
        skip_not_root(&why);
        return;
    }
    let _turn = servers_turn();
    let Some(pg) = Postgres::start() else { return };
    let Some(t) = Temporal::start() else { return };
    let admin = pg.url("pool_admin");
    let o = pool(&["init", "--store", &admin]);
    assert!(o.status.success(), "{}", text(&o));
    let work = tempfile::Builder::new()
        .prefix("pool-work-")
        .tempdir()
        .expect("work");
    let out = tempfile::tempdir().expect("out dir");
    let log = out.path().join("worker.log");
    let mut worker = Worker::start_logged(
        &t.addr,
        &admin,
        "solo",
        "solo-1",
        1,
        work.path(),
        Some(&log),
    );
    let job = Job::new("echo '1 passed, 0 failed'\n", 60);

    // `submit --wait` is bounded: on a queue nobody serves it gives up after --wait-timeout, naming the run.
    let t0 = Instant::now();
    let jobp = job.path();
    let o = pool(&[
        "submit",
        jobp.to_str().expect("utf8"),
        "--temporal",
        &t.addr,
        "--store",
        &admin,
        "--nonce",
        NONCE_A,
        "--queue",
        "nobody",
        "--run-id",
        "run-unserved",
        "--wait",
        "--wait-timeout",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("run-unserved") && err.contains("--wait-timeout"),
        "{}",
        text(&o)
    );
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());

    let n = queued_runs();
    let ids: Vec<String> = (0..n).map(|i| format!("queued-{i}")).collect();
    let started = Instant::now();
    let mut children: Vec<(String, Option<std::process::Child>)> = ids
        .iter()
        .map(|id| {
            let stdout = std::fs::File::create(out.path().join(format!("{id}.out"))).expect("out");
            let stderr = std::fs::File::create(out.path().join(format!("{id}.err"))).expect("err");
            let child = Command::new(POOL)
                .arg("submit")
                .arg(job.path())
                .args(["--temporal", &t.addr, "--store", &admin, "--nonce", NONCE_A])
                .args(["--queue", "solo", "--run-id", id, "--wait", "--json"])
                .args(["--wait-timeout", "240"])
                .stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .spawn()
                .expect("submit");
            (id.clone(), Some(child))
        })
        .collect();
    // The deadline is on the submits themselves: each must have exited by then.
    let limit = Duration::from_secs(180);
    let deadline = started + limit;
    let mut codes: Vec<(String, Option<i32>)> = Vec::new();
    loop {
        for (id, slot) in children.iter_mut() {
            if let Some(c) = slot {
                if let Ok(Some(st)) = c.try_wait() {
                    codes.push((id.clone(), st.code()));
                    *slot = None;
                }
            }
        }
        let waiting: Vec<&str> = children
            .iter()
            .filter(|(_, c)| c.is_some())
            .map(|(id, _)| id.as_str())
            .collect();
        if waiting.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let alive = matches!(worker.child.try_wait(), Ok(None));
            let names = waiting.join(", ");
            for (_, c) in children.iter_mut() {
                if let Some(c) = c {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            panic!(
                "{} of {n} submits still waiting after {limit:?} ({names}); worker {}; worker log:\n{}",
                names.split(", ").count(),
                if alive { "alive" } else { "EXITED" },
                logs_of(&log)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    println!("{n} queued runs on one one-slot worker judged in {took:.2?}");
    for (id, code) in &codes {
        let stdout =
            std::fs::read_to_string(out.path().join(format!("{id}.out"))).unwrap_or_default();
        let stderr =
            std::fs::read_to_string(out.path().join(format!("{id}.err"))).unwrap_or_default();
        assert_eq!(*code, Some(0), "{id}: exit {code:?}\n{stdout}\n{stderr}");
        let v: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{id}: not JSON ({e}): {stdout}\n{stderr}"));
        assert_eq!(v["outcome"], "tests_passed", "{id}: {v}");
        let s = status(&t, &admin, id);
        assert_eq!(s["workflow"], "completed", "{s}");
        assert_eq!(s["attempts"].as_array().map(Vec::len), Some(1), "{s}");
        assert_eq!(s["accepted_attempt"], 1, "{s}");
    }
    // The worker and the coordinator it came with (which runs the workflows and their local activities).
    let alive = matches!(worker.child.try_wait(), Ok(None))
        && worker
            .coordinator
            .as_mut()
            .is_some_and(|c| matches!(c.child.try_wait(), Ok(None)));
    let worker_log = logs_of(&log);
    let noted: Vec<&str> = worker_log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    println!(
        "worker log: {} lines, {} WARN/ERROR{}",
        worker_log.lines().count(),
        noted.len(),
        noted
            .iter()
            .take(10)
            .map(|l| format!("\n  {l}"))
            .collect::<String>()
    );
    assert!(
        alive,
        "the worker or its coordinator exited; their logs:\n{worker_log}"
    );
    for bad in [
        "panicked",
        "likely to be dropped",
        "worker stopped",
        "coordinator stopped",
    ] {
        assert!(
            !worker_log.contains(bad),
            "the worker's or the coordinator's log has {bad:?}:\n{worker_log}"
        );
    }
}

/// The worker's log and its coordinator's (`LOG.coordinator`).
fn logs_of(log: &Path) -> String {
    let mut c = log.as_os_str().to_owned();
    c.push(".coordinator");
    format!(
        "{}\n--- coordinator:\n{}",
        std::fs::read_to_string(log).unwrap_or_default(),
        std::fs::read_to_string(std::path::PathBuf::from(c)).unwrap_or_default()
    )
}

/// The fence needs root or unprivileged namespaces (the same rule as the fence tests).
fn fenced_run_tests_skip_reason() -> Option<String> {
    if is_root() {
        return None;
    }
    Some(
        "not root: the pool tests run the process tier's fence and a PostgreSQL owned by nobody"
            .into(),
    )
}

#[test]
fn bad_input_is_named() {
    let o = pool(&[
        "status",
        "x",
        "--temporal",
        "127.0.0.1:1",
        "--store",
        "not a url",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let v = json_of(&o);
    assert!(v["error"].as_str().unwrap_or("").contains("--store"), "{v}");
    let o = pool(&[
        "submit",
        "/nonexistent/job.toml",
        "--temporal",
        "nohostport",
        "--store",
        "postgresql://x@/y?host=/nonexistent",
        "--nonce",
        NONCE_A,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--temporal"),
        "{}",
        text(&o)
    );
    let o = pool(&[
        "submit",
        "/nonexistent/job.toml",
        "--temporal",
        "127.0.0.1:7233",
        "--store",
        "postgresql://x@/y?host=/nonexistent",
        "--nonce",
        "abc",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--nonce"),
        "{}",
        text(&o)
    );
}

/// The vm tier's guest image for the pool's vm worker: the one in cargo's target directory (`target/vm-image`,
/// found through CARGO_TARGET_TMPDIR, so that a CARGO_TARGET_DIR shared between checkouts finds its image), else
/// the workspace's default (`host::cli::vm::default_image`). `Err(why)` when the vm tier cannot run here.
fn vm_tier_image() -> Result<std::path::PathBuf, String> {
    let qemu = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("qemu-system-x86_64").is_file()))
        .unwrap_or(false);
    if !qemu {
        return Err("qemu-system-x86_64 is not installed (.ci/run installs it)".into());
    }
    if !is_root() {
        return Err("not root (the vm tier's tests assume it)".into());
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..");
    let in_target = std::fs::canonicalize(&target)
        .unwrap_or(target)
        .join("vm-image");
    let default = host::cli::vm::default_image();
    [in_target.clone(), default.clone()]
        .into_iter()
        .find(|d| d.join(host::image::MANIFEST_FILE).is_file())
        .ok_or_else(|| {
            format!(
                "no guest image in {} or {} (build one with `fenced-run image build --out DIR`)",
                in_target.display(),
                default.display()
            )
        })
}

/// Runs `cmd` to its end or kills it after `limit`; the child's own deadline (`--wait-timeout`) comes first.
fn output_within(mut cmd: Command, limit: Duration, what: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("wait");
            panic!("{what}: not done within {limit:?}, killed: {}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    child.wait_with_output().expect("wait")
}

/// A pooled run in the vm tier: one worker with `--isolation vm`, one passing run submitted with `--wait`; its
/// verdict says `tests_passed` and `vm`, and its evidence (a sim-PSP SEV-SNP report) verifies as attempt 1 with
/// the image's pinned vm measurement, and not under another measurement or the founder's own nonce.
#[test]
fn pool_vm_tier_end_to_end() {
    if let Some(why) = fenced_run_tests_skip_reason() {
        skip_not_root(&why);
        return;
    }
    let image = match vm_tier_image() {
        Ok(d) => d,
        Err(why) => {
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::Vm,
                &format!("the vm tier cannot run: {why}"),
            );
            return;
        }
    };
    let measurement = host::image::Manifest::load(&image)
        .unwrap_or_else(|e| panic!("{}: {e}", image.display()))
        .measurements
        .vm;
    let _turn = servers_turn();
    let Some(pg) = Postgres::start() else { return };
    let Some(t) = Temporal::start() else { return };
    let admin = pg.url("pool_admin");
    let o = pool(&["init", "--store", &admin, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    pg.founder_role("alice");
    let alice = pg.url("alice");

    let work = tempfile::Builder::new()
        .prefix("pool-vm-work-")
        .tempdir()
        .expect("work");
    // The coordinator of the vm queue pins the image's vm measurement; the worker is an execution host.
    let sets = tempfile::tempdir().expect("set dir");
    let m: [u8; 48] = hex::decode(&measurement)
        .ok()
        .and_then(|b| b.try_into().ok())
        .expect("the image's vm measurement is 48 bytes of hex");
    let coordinator = Coordinator::start(
        &t.addr,
        &admin,
        "vm",
        Some(measurement_set(sets.path(), &[("vm", m)])),
    );
    let host = host_url(&admin);
    let worker = Command::new(POOL)
        .args(["worker", "--temporal", &t.addr, "--queue", "vm"])
        .args(["--store", &host, "--isolation", "vm", "--max-runs", "1"])
        .args(["--identity", "vm-worker-1", "--fenced-run", FENCED_RUN])
        .arg("--image")
        .arg(&image)
        .arg("--work-dir")
        .arg(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("pool worker");
    let worker = Worker {
        child: worker,
        identity: "vm-worker-1".into(),
        coordinator: Some(coordinator),
    };

    let job = Job::new("echo '2 passed, 0 failed'\n", 120);
    let out = tempfile::tempdir().expect("out dir");
    let ev = out.path().join("vm.evidence");
    let t0 = Instant::now();
    let mut cmd = Command::new(POOL);
    cmd.arg("submit")
        .arg(job.path())
        .args(["--temporal", &t.addr, "--store", &alice, "--nonce", NONCE_A])
        .args(["--queue", "vm", "--isolation", "vm", "--run-id", "run-vm"])
        .args(["--wait", "--wait-timeout", "600", "--json", "--evidence"])
        .arg(&ev);
    let o = output_within(
        cmd,
        Duration::from_secs(660),
        "submit --wait in the vm tier",
    );
    eprintln!("the vm run through the pool took {:?}", t0.elapsed());
    assert!(o.status.success(), "{}", text(&o));
    let v = json_of(&o);
    assert_eq!(v["outcome"], "tests_passed", "{}", text(&o));
    assert_eq!(v["isolation"], "vm", "{v}");
    assert_eq!(v["tests"]["passed"], 2, "{v}");

    // The founder's check: the run's signed ledger (the guest announced its key, the pool issued its nonce).
    let (key, key_pub) = pool_key_in(out.path());
    let ledger = out.path().join("vm.ledger");
    let fetched = out.path().join("vm.fetched");
    let o = fetch_with_ledger(&t, &alice, "run-vm", &fetched, &ledger, &key);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(&fetched).ok(), std::fs::read(&ev).ok());
    let verify_vm = |nonce: &str, check: Check<'_>, measurement: &str| {
        let mut c = Command::new(VERIFY);
        c.arg("evidence").arg(&ev).args([
            "--allow-simulated",
            "--json",
            "--nonce",
            nonce,
            "--measurement",
            measurement,
        ]);
        match check {
            Check::Ledger(ledger, key, max) => {
                c.arg("--pool-ledger")
                    .arg(ledger)
                    .arg("--pool-key")
                    .arg(key)
                    .args(["--max-executions", &max.to_string()]);
            }
            Check::Attempt(n) => {
                c.args(["--pool-attempt", &n.to_string()]);
            }
            Check::Plain => {}
        }
        c.output().expect("verify-attestation")
    };
    let ok = verify_vm(NONCE_A, Check::Ledger(&ledger, &key_pub, 1), &measurement);
    assert!(
        ok.status.success(),
        "attempt 1 execution 1's vm evidence must verify against the ledger: {}",
        text(&ok)
    );
    let checked = json_of(&ok);
    assert_eq!(checked["verdict"]["outcome"], "tests_passed", "{checked}");
    assert_eq!(checked["verdict"]["isolation"], "vm", "{checked}");
    // The vm tier's evidence: a sim-PSP SEV-SNP report of the image's launch measurement.
    assert_eq!(checked["tee"], "sim-sev-snp", "{checked}");
    assert_eq!(checked["simulated"], true, "{checked}");
    assert_eq!(checked["measurement"], measurement.as_str(), "{checked}");
    // Bound to the nonce the pool issued to the guest's key and to the image's measurement: not the founder's
    // nonce, not a nonce derived for attempt 1, not another measurement.
    let plain = verify_vm(NONCE_A, Check::Plain, &measurement);
    assert_eq!(plain.status.code(), Some(1), "{}", text(&plain));
    let derived = verify_vm(NONCE_A, Check::Attempt(1), &measurement);
    assert_eq!(derived.status.code(), Some(1), "{}", text(&derived));
    let mut other = measurement.clone().into_bytes();
    other[0] = if other[0] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8(other).expect("hex");
    let wrong = verify_vm(NONCE_A, Check::Ledger(&ledger, &key_pub, 1), &other);
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));

    let s = status(&t, &alice, "run-vm");
    assert_eq!(s["outcome"], "tests_passed", "{s}");
    assert_eq!(s["workflow"], "completed", "{s}");
    assert_eq!(s["attempts"].as_array().map(Vec::len), Some(1), "{s}");
    assert_eq!(s["attempts"][0]["worker"], "vm-worker-1", "{s}");
    // The vm guest's execution is in the ledger, verified.
    let x = s["executions"].as_array().expect("executions");
    assert_eq!(x.len(), 1, "{s}");
    assert_eq!(x[0]["result"], "verified", "{s}");
    assert_eq!(x[0]["outcome"], "tests_passed", "{s}");
    // The coordinator pinned the image's measurement with its set and says so.
    let why = s["attempts"][0]["why"].as_str().unwrap_or("");
    assert!(
        why.contains("launch measurement in measurement set pool-test 1"),
        "{s}"
    );

    // A coordinator whose set lacks the image's vm measurement (it has the process tier's of this fenced-run,
    // and a vm entry of something else): the vm execution is rejected, never a status.
    let wrong_sets = tempfile::tempdir().expect("set dir");
    let _wrong_coordinator = Coordinator::start(
        &t.addr,
        &admin,
        "vm-wrong",
        Some(measurement_set(
            wrong_sets.path(),
            &[("vm", [9; 48]), ("process", m)],
        )),
    );
    let wrong_worker = Command::new(POOL)
        .args(["worker", "--temporal", &t.addr, "--queue", "vm-wrong"])
        .args(["--store", &host, "--isolation", "vm", "--max-runs", "1"])
        .args(["--identity", "vm-worker-2", "--fenced-run", FENCED_RUN])
        .arg("--image")
        .arg(&image)
        .arg("--work-dir")
        .arg(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("pool worker");
    let wrong_worker = Worker {
        child: wrong_worker,
        identity: "vm-worker-2".into(),
        coordinator: None,
    };
    let mut cmd = Command::new(POOL);
    cmd.arg("submit")
        .arg(job.path())
        .args(["--temporal", &t.addr, "--store", &alice, "--nonce", NONCE_A])
        .args([
            "--queue",
            "vm-wrong",
            "--isolation",
            "vm",
            "--run-id",
            "run-vm-wrong",
        ])
        .args([
            "--max-attempts",
            "1",
            "--wait",
            "--wait-timeout",
            "600",
            "--json",
        ]);
    let o = output_within(
        cmd,
        Duration::from_secs(660),
        "submit --wait in the vm tier, a set without the image",
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = status(&t, &alice, "run-vm-wrong");
    assert!(s["outcome"].is_null(), "{s}");
    let why = s["attempts"][0]["why"].as_str().unwrap_or("");
    assert!(why.contains("rejected execution 1"), "{s}");
    assert!(why.contains("measurement-set"), "{s}");
    let x = s["executions"].as_array().expect("executions");
    assert_eq!(x.len(), 1, "{s}");
    assert_eq!(x[0]["result"], "rejected", "{s}");
    drop(wrong_worker);

    // The attempts left no directory and no process (QEMU) naming its directory.
    assert!(
        attempt_dirs(work.path()).is_empty(),
        "{}",
        listing(work.path())
    );
    let attempts = format!("{}/attempt-", work.path().display());
    assert!(
        processes_with(&attempts).is_empty(),
        "{:?}",
        processes_with(&attempts)
    );
    drop(worker);
}
