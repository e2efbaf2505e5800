//! The execution ledger end to end (issue 34, docs/pool.md "The execution ledger"), with a real Temporal dev
//! server and PostgreSQL started here: a worker that runs an attempt twice leaves both executions in the ledger
//! and in `pool status`, and the founder's `verify-attestation --pool-ledger` fails the cherry-picked evidence
//! with `pool-executions` unless `--max-executions 2`; a worker that reports a host failure after its guest got
//! a nonce leaves that execution shown without a result; a run whose guest never asked for a nonce is a plain
//! host failure; a forged `temporal activity complete` never becomes a status; the ledger is append-only and a
//! worker's role can only ask for nonces.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const NONCE: &str = "0123456789abcdef0123456789abcdef";

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// The coordinator of `queue` (the store's owner `store`) and a worker on `queue`, connected as the execution
/// hosts' role, with extra flags (the hidden test misbehaviours, another `--fenced-run`).
fn worker(
    t: &Temporal,
    store: &str,
    queue: &str,
    identity: &str,
    work: &Path,
    extra: &[&str],
) -> (Coordinator, Child9) {
    let coordinator = Coordinator::start(&t.addr, store, queue, None);
    let store = &host_url(store);
    let child = Command::new(POOL)
        .args([
            "worker",
            "--temporal",
            &t.addr,
            "--queue",
            queue,
            "--store",
            store,
        ])
        .args([
            "--isolation",
            "process",
            "--max-runs",
            "1",
            "--identity",
            identity,
        ])
        .args(["--fenced-run", FENCED_RUN])
        .arg("--work-dir")
        .arg(work)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("pool worker");
    (coordinator, Child9(child))
}

/// A worker process killed (SIGKILL) and reaped on drop.
struct Child9(std::process::Child);

impl Drop for Child9 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn submit_wait(
    t: &Temporal,
    store: &str,
    job: &Job,
    run_id: &str,
    queue: &str,
    ev: &Path,
) -> Output {
    let jobp = job.path();
    let o = Command::new(POOL)
        .args([
            "submit",
            jobp.to_str().expect("utf8"),
            "--temporal",
            &t.addr,
            "--store",
            store,
        ])
        .args([
            "--nonce",
            NONCE,
            "--queue",
            queue,
            "--run-id",
            run_id,
            "--heartbeat-seconds",
            "3",
        ])
        .args(["--wait", "--wait-timeout", "240", "--evidence"])
        .arg(ev)
        .output()
        .expect("submit");
    o
}

fn status(t: &Temporal, store: &str, run_id: &str, json: bool) -> Output {
    let mut args = vec!["status", run_id, "--temporal", &t.addr, "--store", store];
    if json {
        args.push("--json");
    }
    pool(&args)
}

fn fetch(t: &Temporal, store: &str, run_id: &str, dir: &Path, key: &Path) -> (PathBuf, PathBuf) {
    let (ev, ledger) = (
        dir.join(format!("{run_id}.evidence")),
        dir.join(format!("{run_id}.ledger")),
    );
    let o = Command::new(POOL)
        .args([
            "fetch",
            run_id,
            "--temporal",
            &t.addr,
            "--store",
            store,
            "--out",
        ])
        .arg(&ev)
        .arg("--ledger-out")
        .arg(&ledger)
        .arg("--pool-key")
        .arg(key)
        .output()
        .expect("fetch");
    assert!(o.status.success(), "{}", text(&o));
    (ev, ledger)
}

fn verify(ev: &Path, ledger: &Path, key_pub: &Path, max: u32) -> Output {
    Command::new(VERIFY)
        .arg("evidence")
        .arg(ev)
        .args([
            "--allow-simulated",
            "--any-measurement",
            "--nonce",
            NONCE,
            "--json",
        ])
        .arg("--pool-ledger")
        .arg(ledger)
        .arg("--pool-key")
        .arg(key_pub)
        .args(["--max-executions", &max.to_string()])
        .output()
        .expect("verify-attestation")
}

fn psql(pg: &Postgres, user: &str, sql: &str) -> Output {
    Command::new(pg_bin("psql").expect("psql"))
        .arg(pg.url(user))
        .args(["-v", "ON_ERROR_STOP=1", "-X", "-q", "-A", "-t", "-c", sql])
        .output()
        .expect("psql")
}

fn executions(s: &Value) -> Vec<(i64, i64, String)> {
    s["executions"]
        .as_array()
        .expect("executions")
        .iter()
        .map(|e| {
            (
                e["attempt"].as_i64().unwrap_or(0),
                e["execution"].as_i64().unwrap_or(0),
                e["result"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn execution_ledger() {
    if !is_root() {
        skip_not_root(
            "the pool tests run the process tier's fence and a PostgreSQL owned by nobody",
        );
        return;
    }
    let Some(pg) = Postgres::start() else { return };
    let Some(t) = Temporal::start() else { return };
    let admin = pg.url("pool_admin");
    let o = pool(&["init", "--store", &admin, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["schema"], 3, "{}", text(&o));
    // The founder's own database role (the operator's direct path; founders of the gateway have none).
    pg.founder_role("alice");
    let alice = pg.url("alice");
    let dir = tempfile::tempdir().expect("dir");
    let key = dir.path().join("pool.key");
    let o = pool(&["key", "--out", key.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    let key_pub = dir.path().join("pool.key.pub");
    let work = tempfile::Builder::new()
        .prefix("pool-ledger-work-")
        .tempdir()
        .expect("work");
    let pass = Job::new("echo '2 passed, 0 failed'\n", 60);

    // --- a worker that runs attempt 1 twice and delivers the second run -----------------------------------------
    {
        let _w = worker(
            &t,
            &admin,
            "rerun",
            "rerunner",
            work.path(),
            &["--test-rerun", "1"],
        );
        let ev = dir.path().join("submitted.evidence");
        let o = submit_wait(&t, &alice, &pass, "run-rerun", "rerun", &ev);
        assert!(o.status.success(), "{}", text(&o));
        let o = status(&t, &alice, "run-rerun", true);
        assert!(o.status.success(), "{}", text(&o));
        let s = json_of(&o);
        assert_eq!(s["outcome"], "tests_passed", "{s}");
        assert_eq!(
            executions(&s),
            vec![
                (1, 1, "no result delivered".to_owned()),
                (1, 2, "verified".to_owned())
            ],
            "{s}"
        );
        // What the pool verified, and that it is simulated, is what the run records.
        assert_eq!(s["ended_why"], "final: tests_passed (SIMULATED)", "{s}");
        let why = s["attempts"][0]["why"].as_str().unwrap_or("");
        assert!(
            why.contains("verified by the pool: nonce of attempt 1 execution 2"),
            "{s}"
        );
        assert!(why.contains("SIMULATED"), "{s}");
        // The coordinator pinned the process tier's measurement of this fenced-run with its set, and says so.
        assert!(
            why.contains("launch measurement in measurement set pool-test 1"),
            "{s}"
        );
        let o = status(&t, &alice, "run-rerun", false);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("attempt 1 execution 1: worker rerunner"),
            "{}",
            text(&o)
        );
        assert!(out.contains("no result delivered"), "{}", text(&o));
        assert!(
            out.contains("attempt 1 execution 2: worker rerunner"),
            "{}",
            text(&o)
        );
        let (ev, ledger) = fetch(&t, &alice, "run-rerun", dir.path(), &key);
        let once = verify(&ev, &ledger, &key_pub, 1);
        assert_eq!(once.status.code(), Some(1), "{}", text(&once));
        let j = json_of(&once);
        let failed: Vec<&str> = j["failures"]
            .as_array()
            .expect("failures")
            .iter()
            .filter_map(|f| f["check"].as_str())
            .collect();
        assert_eq!(failed, vec!["pool-executions"], "{j}");
        let twice = verify(&ev, &ledger, &key_pub, 2);
        assert!(twice.status.success(), "{}", text(&twice));
        let j = json_of(&twice);
        assert_eq!(j["pool_execution"]["attempt"], 1, "{j}");
        assert_eq!(j["pool_execution"]["execution"], 2, "{j}");
        // Another key than the pool's pinned one: the ledger is not trusted.
        let other = dir.path().join("other.key");
        let o = pool(&["key", "--out", other.to_str().expect("utf8")]);
        assert!(o.status.success(), "{}", text(&o));
        let wrong = verify(&ev, &ledger, &dir.path().join("other.key.pub"), 2);
        assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
        assert!(
            String::from_utf8_lossy(&wrong.stdout).contains("pool-ledger"),
            "{}",
            text(&wrong)
        );
    }

    // --- a host failure reported after the guest got its nonce: shown without a result ---------------------------
    {
        let _w = worker(
            &t,
            &admin,
            "hostfail",
            "liar",
            work.path(),
            &["--test-host-failure-attempts", "1"],
        );
        let ev = dir.path().join("hostfail.evidence");
        let o = submit_wait(&t, &alice, &pass, "run-hostfail", "hostfail", &ev);
        assert!(o.status.success(), "{}", text(&o));
        let s = json_of(&status(&t, &alice, "run-hostfail", true));
        assert_eq!(s["accepted_attempt"], 2, "{s}");
        assert_eq!(
            executions(&s),
            vec![
                (1, 1, "no result delivered".to_owned()),
                (2, 1, "verified".to_owned())
            ],
            "{s}"
        );
        let why = s["attempts"][0]["why"].as_str().unwrap_or("");
        assert!(why.contains("got a nonce and delivered no result"), "{s}");
        let (ev, ledger) = fetch(&t, &alice, "run-hostfail", dir.path(), &key);
        let once = verify(&ev, &ledger, &key_pub, 1);
        assert_eq!(once.status.code(), Some(1), "{}", text(&once));
        assert!(
            String::from_utf8_lossy(&once.stdout).contains("pool-executions"),
            "{}",
            text(&once)
        );
    }

    // --- the coordinator's measurement set: a set without this fenced-run's measurement rejects the execution;
    // --any-measurement verifies and says the measurement was not pinned ----------------------------------------
    {
        let sets = tempfile::tempdir().expect("sets");
        let other = measurement_set(
            sets.path(),
            &[("process", [7; 48]), ("vm", process_measurement())],
        );
        let _c = Coordinator::start(&t.addr, &admin, "wrongset", Some(other));
        let host = host_url(&admin);
        let _w = Command::new(POOL)
            .args(["worker", "--temporal", &t.addr, "--queue", "wrongset"])
            .args([
                "--store",
                &host,
                "--isolation",
                "process",
                "--identity",
                "w-wrongset",
            ])
            .args(["--fenced-run", FENCED_RUN])
            .arg("--work-dir")
            .arg(work.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map(Child9)
            .expect("worker");
        let jobp = pass.path();
        let o = pool(&[
            "submit",
            jobp.to_str().expect("utf8"),
            "--temporal",
            &t.addr,
            "--store",
            &alice,
            "--nonce",
            NONCE,
            "--queue",
            "wrongset",
            "--run-id",
            "run-wrongset",
            "--max-attempts",
            "1",
            "--wait",
            "--wait-timeout",
            "180",
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let s = json_of(&status(&t, &alice, "run-wrongset", true));
        assert!(s["outcome"].is_null(), "{s}");
        assert!(s["accepted_attempt"].is_null(), "{s}");
        assert_eq!(executions(&s), vec![(1, 1, "rejected".to_owned())], "{s}");
        let why = s["attempts"][0]["why"].as_str().unwrap_or("");
        assert!(why.contains("rejected execution 1"), "{s}");
        assert!(why.contains("measurement-set"), "{s}");
        assert!(s["attempts"][0]["outcome"].is_null(), "{s}");

        let _c = Coordinator::start(
            &t.addr,
            &admin,
            "anyset",
            Some(vec!["--any-measurement".into()]),
        );
        let _w = Command::new(POOL)
            .args(["worker", "--temporal", &t.addr, "--queue", "anyset"])
            .args([
                "--store",
                &host,
                "--isolation",
                "process",
                "--identity",
                "w-anyset",
            ])
            .args(["--fenced-run", FENCED_RUN])
            .arg("--work-dir")
            .arg(work.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map(Child9)
            .expect("worker");
        let o = pool(&[
            "submit",
            jobp.to_str().expect("utf8"),
            "--temporal",
            &t.addr,
            "--store",
            &alice,
            "--nonce",
            NONCE,
            "--queue",
            "anyset",
            "--run-id",
            "run-anyset",
            "--wait",
            "--wait-timeout",
            "180",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(
                "launch measurement not pinned (the coordinator runs with --any-measurement)"
            ),
            "{}",
            text(&o)
        );
        // Without either, the coordinator does not start.
        let o = Command::new(POOL)
            .args(["coordinator", "--temporal", &t.addr, "--queue", "x"])
            .args(["--store", &admin])
            .output()
            .expect("coordinator");
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--measurements"),
            "{}",
            text(&o)
        );
    }

    // --- a host failure before any nonce: accepted as one, nothing in the ledger --------------------------------
    {
        let _c = Coordinator::start(&t.addr, &admin, "broken", None);
        let host = host_url(&admin);
        let _w = Command::new(POOL)
            .args([
                "worker",
                "--temporal",
                &t.addr,
                "--queue",
                "broken",
                "--store",
                &host,
            ])
            .args([
                "--isolation",
                "process",
                "--identity",
                "broken",
                "--fenced-run",
                "/bin/false",
            ])
            .arg("--work-dir")
            .arg(work.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map(Child9)
            .expect("worker");
        let jobp = pass.path();
        let o = pool(&[
            "submit",
            jobp.to_str().expect("utf8"),
            "--temporal",
            &t.addr,
            "--store",
            &alice,
            "--nonce",
            NONCE,
            "--queue",
            "broken",
            "--run-id",
            "run-broken",
            "--max-attempts",
            "1",
            "--wait",
            "--wait-timeout",
            "120",
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let s = json_of(&status(&t, &alice, "run-broken", true));
        assert!(executions(&s).is_empty(), "{s}");
        let why = s["attempts"][0]["why"].as_str().unwrap_or("");
        assert!(why.contains("no nonce was issued for this attempt"), "{s}");
    }

    // --- a forged activity completion is a rejected execution, never a status -----------------------------------
    {
        let _w = worker(&t, &admin, "forge", "honest", work.path(), &[]);
        let marker = "4.0371";
        let failing = Job::new(
            &format!("sleep {marker}\necho '0 passed, 3 failed'\nexit 1\n"),
            60,
        );
        let jobp = failing.path();
        let o = pool(&[
            "submit",
            jobp.to_str().expect("utf8"),
            "--temporal",
            &t.addr,
            "--store",
            &alice,
            "--nonce",
            NONCE,
            "--queue",
            "forge",
            "--run-id",
            "run-forge",
            "--heartbeat-seconds",
            "3",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        wait_for(Duration::from_secs(60), "attempt 1 running", || {
            (!processes_with(marker).is_empty()).then_some(())
        });
        let forged = t.cli(&[
            "activity", "complete", "--workflow-id", "run-forge", "--activity-id", "attempt-1", "--identity",
            "mallory", "--result",
            &format!(
                r#"{{"attempt":1,"execution":1,"worker":"w1","outcome":"tests_passed","verdict":{{}},"evidence_digest":"{}","nonce":"00"}}"#,
                "0".repeat(64)
            ),
        ]);
        assert!(
            forged.status.success(),
            "the forgery reaches the open activity: {}",
            text(&forged)
        );
        let s = wait_for(Duration::from_secs(180), "run-forge final", || {
            let s = json_of(&status(&t, &alice, "run-forge", true));
            s["ended_at"].is_string().then_some(s)
        });
        assert_eq!(s["outcome"], "tests_failed", "{s}");
        let why = s["attempts"][0]["why"].as_str().unwrap_or("");
        assert!(why.contains("rejected execution"), "{s}");
        assert!(why.contains("not in the store"), "{s}");
        assert!(s["attempts"][0]["outcome"].is_null(), "{s}");
        // The honest worker's execution of attempt 1 was cut off by the forged completion: it is listed.
        let x = executions(&s);
        assert_eq!(
            x.first(),
            Some(&(1, 1, "no result delivered".to_owned())),
            "{s}"
        );
        assert_eq!(x.last(), Some(&(2, 1, "verified".to_owned())), "{s}");
    }

    // --- the ledger is append-only; a worker's role only asks for nonces -----------------------------------------
    let o = psql(&pg, "pool_admin", "UPDATE pool_executions SET worker = 'x'");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("append-only"),
        "{}",
        text(&o)
    );
    let o = psql(&pg, "pool_admin", "TRUNCATE pool_executions");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("append-only"),
        "{}",
        text(&o)
    );
    let o = psql(&pg, "pool_admin", "DELETE FROM pool_executions");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("append-only"),
        "{}",
        text(&o)
    );
    let o = psql(&pg, "pool_admin", "UPDATE pool_executions SET result = 'verified' WHERE result = 'rejected' OR result = 'verified'");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("append-only"),
        "a result is filled once: {}",
        text(&o)
    );
    let o = psql(
        &pg,
        "pool_admin",
        "CREATE ROLE hostw LOGIN IN ROLE fenced_run_worker",
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = psql(&pg, "pool_admin", "SELECT count(*) FROM pool_executions");
    let before = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let o = psql(&pg, "hostw", "SELECT count(*) FROM pool_executions");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
    let o = psql(
        &pg,
        "hostw",
        "INSERT INTO pool_executions (run_id, attempt, execution, founder, key_sha256, nonce, worker) \
         VALUES ('run-forge', 9, 1, 'alice', '\\x00', '\\x00', 'x')",
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
    // A finished run issues no nonce, even through the function.
    let o = psql(
        &pg,
        "hostw",
        &format!(
            "SELECT * FROM pool_issue_nonce('run-forge', 3, '\\x{}', 'hostw')",
            "ab".repeat(32)
        ),
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("has ended"),
        "{}",
        text(&o)
    );
    let o = psql(&pg, "pool_admin", "SELECT count(*) FROM pool_executions");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        before,
        "{}",
        text(&o)
    );

    // --- the execution hosts' role (what every worker above connected as) can write no record ------------------
    for attack in [
        "UPDATE pool_runs SET outcome = 'tests_passed'",
        "UPDATE pool_attempts SET outcome = 'tests_passed', why = 'forged'",
        "ALTER TABLE pool_executions DISABLE TRIGGER pool_executions_no_update_delete",
        "ALTER TABLE pool_executions DISABLE TRIGGER ALL",
        "DELETE FROM pool_executions",
        "DELETE FROM pool_runs",
        "INSERT INTO pool_evidence (founder, digest, bytes) VALUES ('alice', repeat('0', 64), '\\x00')",
        "UPDATE pool_evidence SET bytes = '\\x00'",
        "TRUNCATE pool_attempts",
    ] {
        let o = psql(&pg, HOST_ROLE, attack);
        assert!(!o.status.success(), "{attack}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("permission denied") || err.contains("must be owner"),
            "{attack}: {}",
            text(&o)
        );
    }
    // Its functions check the run: an ended run's bundle, attempts and evidence are not reachable through them.
    for (call, says) in [
        ("SELECT * FROM pool_run_bundle('run-forge')", "has ended"),
        (
            "SELECT pool_attempt_started('run-forge', 7, 'mallory')",
            "has ended",
        ),
        (
            "SELECT pool_put_evidence('run-forge', '\\x00')",
            "has ended",
        ),
        (
            "SELECT pool_attempt_started('no-such-run', 1, 'mallory')",
            "not in the store",
        ),
    ] {
        let o = psql(&pg, HOST_ROLE, call);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{call}: {}",
            text(&o)
        );
    }
    let o = psql(&pg, "pool_admin", "SELECT count(*) FROM pool_executions");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        before,
        "{}",
        text(&o)
    );
    // A worker given the owner's credentials (or any role that can write a record table) refuses to start,
    // naming the fix; so does one whose role is not in fenced_run_worker.
    // The tests' owner is the cluster's superuser; a deployment's owner is often a plain role owning the tables:
    // `owner` owns the ledger here.
    let o = psql(
        &pg,
        "pool_admin",
        "CREATE ROLE plain LOGIN; CREATE ROLE owner LOGIN; ALTER TABLE pool_executions OWNER TO owner",
    );
    assert!(o.status.success(), "{}", text(&o));
    for (user, says) in [
        ("pool_admin", "is a superuser"),
        ("owner", "owns or can write pool_executions"),
        ("alice", "owns or can write pool_runs"),
        ("plain", "not a member of fenced_run_worker"),
    ] {
        let o = Command::new(POOL)
            .args(["worker", "--temporal", &t.addr, "--queue", "refused"])
            .args(["--store", &pg.url(user), "--isolation", "process"])
            .args(["--fenced-run", FENCED_RUN])
            .arg("--work-dir")
            .arg(work.path())
            .output()
            .expect("worker");
        assert_eq!(o.status.code(), Some(2), "{user}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{user}: {}", text(&o));
        assert!(err.contains("fenced_run_worker"), "{user}: {}", text(&o));
    }
}
