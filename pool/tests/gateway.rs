//! The founder gateway end to end, on loopback with real servers started here (a Temporal dev server, a
//! PostgreSQL cluster, pool workers and `pool gateway`): founder B's token reads, fetches and cancels none of
//! founder A's runs (a test per verb, each checking that A's run goes on untouched); no token or a wrong one is
//! refused; A's own verbs work; founders have no database role; a gateway or a PostgreSQL killed with SIGKILL
//! mid-run and started again loses nothing.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// The tests that start servers take turns (as in tests/pool.rs).
static SERVERS: Mutex<()> = Mutex::new(());

const NONCE_A: &str = "00112233445566778899aabbccddeeff";

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

/// Servers, one worker, a gateway, and the tokens of founders `alice` and `bob` in files.
struct Pool {
    gateway: Gateway,
    _worker: Worker,
    t: Temporal,
    pg: Postgres,
    dir: tempfile::TempDir,
    _work: tempfile::TempDir,
    admin: String,
    /// The pool's ledger key (the gateway signs the ledgers founders fetch with it) and its public half.
    key: PathBuf,
    public: PathBuf,
    // Last: the next test starts its servers only once these are stopped.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Pool {
    /// None (having said why) where the servers cannot run here.
    fn start(listen_unix: bool, gateway_extra: &[&str]) -> Option<Pool> {
        if !is_root() {
            skip_not_root(
                "the pool tests run the process tier's fence and a PostgreSQL owned by nobody",
            );
            return None;
        }
        let turn = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
        let pg = Postgres::start()?;
        let t = Temporal::start()?;
        let admin = pg.url("pool_admin");
        let o = pool(&["init", "--store", &admin]);
        assert!(o.status.success(), "{}", text(&o));
        let dir = tempfile::tempdir().expect("dir");
        for f in ["alice", "bob"] {
            let o = pool(&["founder", "add", f, "--store", &admin, "--json"]);
            assert!(o.status.success(), "{}", text(&o));
            let token = json_of(&o)["token"].as_str().expect("token").to_owned();
            std::fs::write(dir.path().join(format!("{f}.token")), token).expect("token file");
        }
        let work = tempfile::Builder::new()
            .prefix("pool-gw-work-")
            .tempdir()
            .expect("work");
        let worker = Worker::start(&t.addr, &admin, "process", "gw-worker-1", 2, work.path());
        // The gateway holds the pool's ledger key: founders fetch their run's signed execution ledger through it.
        let key = dir.path().join("pool.key");
        let o = pool(&["key", "--out", key.to_str().expect("utf8")]);
        assert!(o.status.success(), "{}", text(&o));
        let public = dir.path().join("pool.key.pub");
        let mut extra = vec!["--pool-key", key.to_str().expect("utf8")];
        extra.extend_from_slice(gateway_extra);
        let listen = if listen_unix {
            format!("unix:{}", dir.path().join("gateway.sock").display())
        } else {
            "127.0.0.1:0".to_owned()
        };
        let gateway = Gateway::start(&t.addr, &admin, &listen, &extra);
        Some(Pool {
            gateway,
            _worker: worker,
            t,
            pg,
            dir,
            _work: work,
            admin,
            key,
            public,
            _turn: turn,
        })
    }

    fn token_file(&self, founder: &str) -> PathBuf {
        self.dir.path().join(format!("{founder}.token"))
    }

    /// `pool ARGS --gateway URL --token-file FOUNDER's`.
    fn as_founder(&self, founder: &str, args: &[&str]) -> Output {
        let tf = self.token_file(founder);
        Command::new(POOL)
            .args(args)
            .args(["--gateway", &self.gateway.url, "--token-file"])
            .arg(tf)
            .env_remove("FENCED_RUN_POOL_TOKEN")
            .output()
            .expect("fenced-run-pool")
    }

    fn submit(&self, founder: &str, job: &Job, run_id: &str, extra: &[&str]) -> Output {
        let jobp = job.path();
        let mut args = vec![
            "submit",
            jobp.to_str().expect("utf8"),
            "--nonce",
            NONCE_A,
            "--run-id",
            run_id,
        ];
        args.extend_from_slice(extra);
        self.as_founder(founder, &args)
    }

    /// The operator's view of a run (straight to the store), as JSON.
    fn operator_status(&self, run_id: &str) -> Value {
        let o = pool(&[
            "status",
            run_id,
            "--temporal",
            &self.t.addr,
            "--store",
            &self.admin,
            "--json",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        json_of(&o)
    }

    /// Waits (bounded) until the operator sees the run final.
    fn final_status(&self, run_id: &str) -> Value {
        wait_for(Duration::from_secs(180), &format!("{run_id} final"), || {
            let s = self.operator_status(run_id);
            (s["workflow"] == "completed").then_some(s)
        })
    }
}

/// The founder's check of `evidence` (alice's run `run_id`): the run's signed execution ledger fetched through
/// the gateway, pinned to the pool's key, at most `max_executions` executions.
fn verify(p: &Pool, run_id: &str, evidence: &Path, max_executions: u32) -> Output {
    let ledger = p.dir.path().join(format!("{run_id}.ledger"));
    let copy = p.dir.path().join(format!("{run_id}.fetched-for-ledger"));
    let o = p.as_founder(
        "alice",
        &[
            "fetch",
            run_id,
            "--out",
            copy.to_str().expect("utf8"),
            "--ledger-out",
            ledger.to_str().expect("utf8"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    Command::new(VERIFY)
        .arg("evidence")
        .arg(evidence)
        .args(["--allow-simulated", "--any-measurement", "--nonce", NONCE_A])
        .arg("--pool-ledger")
        .arg(&ledger)
        .arg("--pool-key")
        .arg(&p.public)
        .args(["--max-executions", &max_executions.to_string()])
        .output()
        .expect("verify-attestation")
}

/// A job that runs for a while (its marker, a sleep duration, finds its processes), then passes.
fn slow_job(marker: &str) -> Job {
    Job::new(&format!("sleep {marker}\necho '2 passed, 0 failed'\n"), 120)
}

/// Alice's run `run-a` (sleeping `marker` seconds), submitted through the gateway and running.
fn alice_running(p: &Pool, marker: &str) -> Job {
    let job = slow_job(marker);
    let o = p.submit("alice", &job, "run-a", &[]);
    assert!(o.status.success(), "{}", text(&o));
    wait_for(Duration::from_secs(60), "alice's run running", || {
        (!processes_with(marker).is_empty()).then_some(())
    });
    job
}

/// Alice's run ended as if nobody else had touched it: passed, one attempt, on the workflow's own terms, and
/// its evidence (fetched by alice) verifies as attempt 1.
fn alice_untouched(p: &Pool) {
    let s = p.final_status("alice:run-a");
    assert_eq!(s["outcome"], "tests_passed", "{s}");
    assert_eq!(s["attempts"].as_array().map(Vec::len), Some(1), "{s}");
    assert_eq!(s["accepted_attempt"], 1, "{s}");
    let ev = p.dir.path().join("alice.evidence");
    let o = p.as_founder(
        "alice",
        &["fetch", "run-a", "--out", ev.to_str().expect("utf8")],
    );
    assert!(o.status.success(), "{}", text(&o));
    let ok = verify(p, "run-a", &ev, 1);
    assert!(ok.status.success(), "{}", text(&ok));
}

/// Bob's refusal for alice's run reads exactly as his refusal for a run that does not exist, under both forms
/// of the ID; nothing of alice's run (her nonce, her bundle's digest) is in it.
fn refused_as_not_found(p: &Pool, verb: &[&str], tail: &[&str]) {
    let bundle = p.operator_status("alice:run-a")["bundle_digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    for id in ["run-a", "alice:run-a"] {
        let args: Vec<&str> = verb.iter().chain([&id]).chain(tail).copied().collect();
        let o = p.as_founder("bob", &args);
        assert_eq!(o.status.code(), Some(1), "{verb:?} {id}: {}", text(&o));
        let none: Vec<&str> = verb
            .iter()
            .chain([&"run-none"])
            .chain(tail)
            .copied()
            .collect();
        let n = p.as_founder("bob", &none);
        assert_eq!(n.status.code(), Some(1), "{}", text(&n));
        // Errors are on stderr, or with --json on stdout.
        let both = |o: &Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        let said = both(&o).replace(id, "ID");
        let said_none = both(&n).replace("run-none", "ID");
        assert_eq!(
            said, said_none,
            "another founder's run must read as a missing one"
        );
        assert!(said.contains("not found"), "{}", text(&o));
        assert!(
            !said.contains(NONCE_A) && !said.contains(&bundle),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn another_founder_cannot_read_a_run() {
    let Some(p) = Pool::start(false, &[]) else {
        return;
    };
    let marker = "6.0411";
    let _job = alice_running(&p, marker);
    refused_as_not_found(&p, &["status"], &[]);
    refused_as_not_found(&p, &["status"], &["--json"]);
    // The operator (straight to the store) still sees it, running.
    assert!(p.operator_status("alice:run-a")["outcome"].is_null());
    alice_untouched(&p);
}

#[test]
fn another_founder_cannot_fetch_a_run() {
    let Some(p) = Pool::start(false, &[]) else {
        return;
    };
    let marker = "6.0412";
    let _job = alice_running(&p, marker);
    let out = p.dir.path().join("stolen.evidence");
    let outs = out.to_str().expect("utf8");
    refused_as_not_found(&p, &["fetch"], &["--out", outs]);
    alice_untouched(&p);
    // Also once the run has evidence.
    refused_as_not_found(&p, &["fetch"], &["--out", outs]);
    assert!(!out.exists());
}

#[test]
fn another_founder_cannot_cancel_a_run() {
    let Some(p) = Pool::start(false, &[]) else {
        return;
    };
    let marker = "6.0413";
    let _job = alice_running(&p, marker);
    refused_as_not_found(&p, &["cancel", "--wait-seconds", "5"], &[]);
    assert!(
        !processes_with(marker).is_empty(),
        "alice's run must still be running"
    );
    let s = p.operator_status("alice:run-a");
    assert_eq!(s["workflow"], "running", "{s}");
    alice_untouched(&p);
}

#[test]
fn no_token_or_a_wrong_token_is_refused() {
    let Some(p) = Pool::start(false, &["--max-bundle-mib", "1"]) else {
        return;
    };
    let job = Job::new("echo '1 passed, 0 failed'\n", 60);
    let jobp = job.path();
    let base = [
        "submit",
        jobp.to_str().expect("utf8"),
        "--nonce",
        NONCE_A,
        "--run-id",
        "run-x",
    ];
    // No token at all: the client says so before sending anything.
    let o = Command::new(POOL)
        .args(base)
        .args(["--gateway", &p.gateway.url])
        .env_remove("FENCED_RUN_POOL_TOKEN")
        .output()
        .expect("pool");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no token"),
        "{}",
        text(&o)
    );
    // A wrong token (in the environment variable), and one that is almost right: 401 for every verb.
    let right = std::fs::read_to_string(p.token_file("alice")).expect("token");
    let mut almost = right.clone().into_bytes();
    let last = almost.len() - 1;
    almost[last] = if almost[last] == b'0' { b'1' } else { b'0' };
    let almost = String::from_utf8(almost).expect("ascii");
    let out = p.dir.path().join("x.evidence");
    for token in ["frp1_not-a-token", almost.as_str()] {
        for args in [
            base.to_vec(),
            vec!["status", "run-x"],
            vec!["fetch", "run-x", "--out", out.to_str().expect("utf8")],
            vec!["cancel", "run-x"],
        ] {
            let o = Command::new(POOL)
                .args(&args)
                .args(["--gateway", &p.gateway.url])
                .env("FENCED_RUN_POOL_TOKEN", token)
                .output()
                .expect("pool");
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("401") && err.contains("token"), "{}", text(&o));
        }
    }
    // Nothing was registered.
    let o = pool(&[
        "status",
        "alice:run-x",
        "--temporal",
        &p.t.addr,
        "--store",
        &p.admin,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // A request with no Authorization header at all, sent by hand: 401 with a JSON error, also on a path the
    // gateway does not serve.
    let port = p.gateway.url.rsplit(':').next().expect("port");
    for path in ["/v1/runs/alice:run-x", "/nothing"] {
        let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
        use std::io::{Read, Write};
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.contains("{\"error\""), "{answer}");
    }
    // With the right token, a bundle over the gateway's limit (1 MiB here) is refused with 413 and registers
    // nothing.
    let big = Job::new("echo '1 passed, 0 failed'\n", 60);
    let mut noise = vec![0u8; 3 * 1024 * 1024];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(
        big.path().parent().expect("dir").join("repo/noise.bin"),
        noise,
    )
    .expect("noise");
    let o = p.submit("alice", &big, "run-big", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("413"),
        "{}",
        text(&o)
    );
    let o = pool(&[
        "status",
        "alice:run-big",
        "--temporal",
        &p.t.addr,
        "--store",
        &p.admin,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn a_founders_own_verbs_work_end_to_end() {
    let Some(p) = Pool::start(true, &[]) else {
        return;
    };
    let keys = tempfile::tempdir().expect("key dir");
    let (key, public) = (p.key.clone(), p.public.clone());
    // submit --wait with the evidence, in JSON.
    let job = Job::new("echo '3 passed, 0 failed'\n", 60);
    let ev = p.dir.path().join("own.evidence");
    let o = p.submit(
        "alice",
        &job,
        "run-own",
        &["--wait", "--json", "--evidence", ev.to_str().expect("utf8")],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["outcome"], "tests_passed", "{}", text(&o));
    let ok = verify(&p, "run-own", &ev, 1);
    assert!(ok.status.success(), "{}", text(&ok));
    // status, in JSON and text, under both forms of the ID.
    for id in ["run-own", "alice:run-own"] {
        let o = p.as_founder("alice", &["status", id, "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let s = json_of(&o);
        assert_eq!(s["run_id"], "alice:run-own", "{s}");
        assert_eq!(s["outcome"], "tests_passed", "{s}");
        assert_eq!(s["workflow"], "completed", "{s}");
        assert_eq!(s["attempts"][0]["worker"], "gw-worker-1", "{s}");
    }
    let o = p.as_founder("alice", &["status", "run-own"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("outcome: tests_passed") && out.contains("attempt 1: worker gw-worker-1"),
        "{out}"
    );
    // fetch gives the same bytes.
    let fetched = p.dir.path().join("own.fetched");
    let o = p.as_founder(
        "alice",
        &[
            "fetch",
            "run-own",
            "--out",
            fetched.to_str().expect("utf8"),
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["attempt"], 1);
    assert_eq!(std::fs::read(&fetched).ok(), std::fs::read(&ev).ok());
    // The status lists the run's one execution, verified.
    let o = p.as_founder("alice", &["status", "run-own", "--json"]);
    let s = json_of(&o);
    assert_eq!(s["executions"].as_array().map(Vec::len), Some(1), "{s}");
    assert_eq!(s["executions"][0]["result"], "verified", "{s}");
    // fetch --ledger-out: the ledger signed with the gateway's key, which the founder's check accepts (one
    // execution), and which another key does not.
    let ledger = p.dir.path().join("own.ledger");
    let o = p.as_founder(
        "alice",
        &[
            "fetch",
            "run-own",
            "--out",
            fetched.to_str().expect("utf8"),
            "--ledger-out",
            ledger.to_str().expect("utf8"),
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["executions"], 1, "{}", text(&o));
    let checked = Command::new(VERIFY)
        .arg("evidence")
        .arg(&fetched)
        .args(["--allow-simulated", "--any-measurement", "--nonce", NONCE_A])
        .arg("--pool-ledger")
        .arg(&ledger)
        .arg("--pool-key")
        .arg(&public)
        .output()
        .expect("verify-attestation");
    assert!(checked.status.success(), "{}", text(&checked));
    let other = keys.path().join("other.key");
    let o = pool(&["key", "--out", other.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    let wrong = Command::new(VERIFY)
        .arg("evidence")
        .arg(&fetched)
        .args(["--allow-simulated", "--any-measurement", "--nonce", NONCE_A])
        .arg("--pool-ledger")
        .arg(&ledger)
        .arg("--pool-key")
        .arg(keys.path().join("other.key.pub"))
        .output()
        .expect("verify-attestation");
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    // A founder gives no --pool-key: the gateway signs.
    let o = p.as_founder(
        "alice",
        &[
            "fetch",
            "run-own",
            "--out",
            fetched.to_str().expect("utf8"),
            "--ledger-out",
            ledger.to_str().expect("utf8"),
            "--pool-key",
            key.to_str().expect("utf8"),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // The same ID again is refused (exit 1), and says so.
    let o = p.submit("alice", &job, "run-own", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already"),
        "{}",
        text(&o)
    );
    // Bob may use the same ID: it is his own, in his scope.
    let o = p.submit("bob", &job, "run-own", &["--wait", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(p.final_status("bob:run-own")["outcome"], "tests_passed");
    // cancel: the run's processes end and the run says cancelled.
    let marker = "300.0417";
    let hang = Job::new(&format!("sleep {marker}\n"), 600);
    let o = p.submit("alice", &hang, "run-hang", &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["run_id"], "alice:run-hang", "{}", text(&o));
    wait_for(Duration::from_secs(60), "run-hang running", || {
        (!processes_with(marker).is_empty()).then_some(())
    });
    let o = p.as_founder("alice", &["cancel", "run-hang", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        json_of(&o)["why"]
            .as_str()
            .unwrap_or("")
            .contains("cancelled"),
        "{}",
        text(&o)
    );
    wait_for(Duration::from_secs(10), "run-hang's processes gone", || {
        processes_with(marker).is_empty().then_some(())
    });
    let o = p.as_founder("alice", &["status", "run-hang", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = json_of(&o);
    assert!(s["outcome"].is_null(), "{s}");
    assert!(
        s["ended_why"].as_str().unwrap_or("").contains("cancelled"),
        "{s}"
    );
}

#[test]
fn founders_have_no_database_role() {
    let Some(p) = Pool::start(false, &[]) else {
        return;
    };
    // `founder add` made no role: neither founder can connect to the store, whatever password is offered.
    let token = std::fs::read_to_string(p.token_file("alice")).expect("token");
    for user in ["alice", "bob"] {
        let e =
            p.pg.query(user, "SELECT rolname FROM pg_roles")
                .expect_err("a founder must have no database access");
        assert!(e.contains("does not exist"), "{user}: {e}");
    }
    let url = format!("{}&password={token}", p.pg.url("alice"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let connected = rt.block_on(async {
        let config: tokio_postgres::Config = url.parse().expect("url");
        config.connect(tokio_postgres::NoTls).await.map(|_| ())
    });
    assert!(connected.is_err(), "the token must not open the database");
    let rows =
        p.pg.query(
            "pool_admin",
            "SELECT count(*) FROM pg_roles WHERE rolname IN ('alice', 'bob')",
        )
        .expect("pg_roles");
    assert_eq!(rows[0][0].as_deref(), Some("0"), "{rows:?}");
    // The store keeps the token's SHA-256 only.
    let rows =
        p.pg.query(
            "pool_admin",
            "SELECT founder, encode(token_sha256, 'hex') FROM pool_founders ORDER BY founder",
        )
        .expect("pool_founders");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let dump = format!("{rows:?}");
    assert!(!dump.contains(token.trim()), "{dump}");
    assert_eq!(
        rows[0][1].as_deref(),
        Some(hex::encode(sha2::Sha256::digest(token.trim().as_bytes())).as_str())
    );
    // A second `founder add` of the same name is refused; `--replace` issues a new token and the old one stops
    // working.
    let o = pool(&["founder", "add", "alice", "--store", &p.admin]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already exists"),
        "{}",
        text(&o)
    );
    let o = p.as_founder("alice", &["status", "run-none"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the old token works before --replace: {}",
        text(&o)
    );
    let o_replaced = pool(&[
        "founder",
        "add",
        "alice",
        "--replace",
        "--store",
        &p.admin,
        "--json",
    ]);
    assert!(o_replaced.status.success(), "{}", text(&o_replaced));
    let o = p.as_founder("alice", &["status", "run-none"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("401"),
        "{}",
        text(&o)
    );
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("expired"),
        "a replaced token is not an expired one: {}",
        text(&o)
    );
    let v = json_of(&o_replaced);
    assert!(v["expires_at"].is_string(), "{v}");

    // Tokens expire: `--expires-in` says when (default 90 days), the store's clock decides, and an expired token
    // is refused saying that it expired, which a wrong token never says.
    let o = pool(&[
        "founder",
        "add",
        "carol",
        "--expires-in",
        "1h",
        "--store",
        &p.admin,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v = json_of(&o);
    std::fs::write(p.token_file("carol"), v["token"].as_str().expect("token")).expect("token file");
    let rows =
        p.pg.query(
            "pool_admin",
            "SELECT founder, extract(epoch FROM expires_at - now())::integer FROM pool_founders \
             WHERE founder IN ('alice', 'carol') ORDER BY founder",
        )
        .expect("expiry");
    let left = |i: usize| -> i64 {
        rows[i][1]
            .as_deref()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        (89 * 86400..=90 * 86400).contains(&left(0)),
        "alice's token (default): {rows:?}"
    );
    assert!(
        (3500..=3600).contains(&left(1)),
        "carol's token (1h): {rows:?}"
    );
    let o = p.as_founder("carol", &["status", "run-none"]);
    assert_eq!(o.status.code(), Some(1), "a current token: {}", text(&o));
    p.pg.query(
        "pool_admin",
        "UPDATE pool_founders SET expires_at = now() - interval '1 second' WHERE founder = 'carol'",
    )
    .expect("expire carol's token");
    for verb in [
        &["status", "run-none"][..],
        &["fetch", "run-none", "--out", "/dev/null"],
    ] {
        let o = p.as_founder("carol", verb);
        assert_eq!(o.status.code(), Some(2), "{verb:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("401"), "{verb:?}: {}", text(&o));
        assert!(
            err.contains("founder token of carol expired at"),
            "{verb:?}: {}",
            text(&o)
        );
        assert!(err.contains("--replace"), "{verb:?}: {}", text(&o));
    }
    for bad in ["0d", "90", "2000d", "1w"] {
        let o = pool(&[
            "founder",
            "add",
            "dave",
            "--expires-in",
            bad,
            "--store",
            &p.admin,
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--expires-in"),
            "{bad}: {}",
            text(&o)
        );
    }
}

use sha2::Digest as _;

#[test]
fn gateway_killed_mid_run_loses_nothing() {
    let Some(mut p) = Pool::start(true, &[]) else {
        return;
    };
    let marker = "8.0419";
    let job = slow_job(marker);
    let ev = p.dir.path().join("kill.evidence");
    let tf = p.token_file("alice");
    // submit --wait through the gateway, in the background.
    let child = Command::new(POOL)
        .arg("submit")
        .arg(job.path())
        .args(["--nonce", NONCE_A, "--run-id", "run-k", "--wait", "--json"])
        .args(["--wait-timeout", "240", "--evidence"])
        .arg(&ev)
        .args(["--gateway", &p.gateway.url, "--token-file"])
        .arg(&tf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("submit");
    wait_for(Duration::from_secs(60), "run-k running", || {
        (!processes_with(marker).is_empty()).then_some(())
    });
    p.gateway.kill9();
    let o = p.as_founder("alice", &["status", "run-k"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "the gateway is down: {}",
        text(&o)
    );
    p.gateway.restart();
    let o = child.wait_with_output().expect("submit");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["outcome"], "tests_passed", "{}", text(&o));
    let ok = verify(&p, "run-k", &ev, 1);
    assert!(ok.status.success(), "{}", text(&ok));
    let o = p.as_founder("alice", &["status", "run-k", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = json_of(&o);
    assert_eq!(s["outcome"], "tests_passed", "{s}");
    assert_eq!(s["attempts"].as_array().map(Vec::len), Some(1), "{s}");
    let fetched = p.dir.path().join("kill.fetched");
    let o = p.as_founder(
        "alice",
        &["fetch", "run-k", "--out", fetched.to_str().expect("utf8")],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(&fetched).ok(), std::fs::read(&ev).ok());
}

#[test]
fn postgres_killed_mid_run_loses_nothing() {
    let Some(p) = Pool::start(false, &[]) else {
        return;
    };
    let marker = "8.0421";
    let job = slow_job(marker);
    let o = p.submit("alice", &job, "run-pg", &["--heartbeat-seconds", "5"]);
    assert!(o.status.success(), "{}", text(&o));
    wait_for(Duration::from_secs(60), "run-pg running", || {
        (!processes_with(marker).is_empty()).then_some(())
    });
    p.pg.kill9();
    // While the store is down the gateway says so (and does not guess).
    let o = p.as_founder("alice", &["status", "run-pg"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("store"),
        "{}",
        text(&o)
    );
    p.pg.restart();
    // The run completes (its attempt, or a new one if the first could not store its evidence).
    let s = p.final_status("alice:run-pg");
    assert_eq!(s["outcome"], "tests_passed", "{s}");
    let attempts = s["attempts"].as_array().expect("attempts");
    assert!(!attempts.is_empty(), "{s}");
    // The store's rows are complete: the run has its end, every attempt its end and reason, the accepted one
    // its evidence.
    assert!(s["ended_at"].is_string(), "{s}");
    for a in attempts {
        assert!(a["end"].is_string() && a["why"].is_string(), "{s}");
    }
    let n = s["accepted_attempt"].as_u64().expect("accepted attempt") as u32;
    let ev = p.dir.path().join("pg.evidence");
    let o = p.as_founder(
        "alice",
        &["fetch", "run-pg", "--out", ev.to_str().expect("utf8")],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Every execution the pool issued a nonce for is in the ledger and the status; the founder accepts exactly
    // that many (a killed store may have cost an attempt its execution).
    let executions = s["executions"].as_array().map_or(0, Vec::len) as u32;
    assert!(executions >= n, "{s}");
    let ok = verify(&p, "run-pg", &ev, executions);
    assert!(ok.status.success(), "{}", text(&ok));
    eprintln!(
        "run-pg after kill -9 of PostgreSQL: {} attempt(s)",
        attempts.len()
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        o.status.success(),
        "openssl {}: {}",
        args.join(" "),
        text(&o)
    );
}

/// A P-256 test CA (`ca.pem`) and a server certificate it issued for 127.0.0.1 (`server.pem`, `server.key`).
fn test_ca(d: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=pool gateway test CA",
    ]);
    a.extend([
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(d, &a);
    let mut a = vec!["req", "-new"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(d, &a);
    std::fs::write(
        d.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

#[test]
fn the_gateway_over_tls() {
    if Command::new("openssl").arg("version").output().is_err() {
        skip("the openssl CLI is not installed (it makes the test CA)");
        return;
    }
    let certs = tempfile::tempdir().expect("certs");
    test_ca(certs.path());
    let cert = certs.path().join("server.pem");
    let key = certs.path().join("server.key");
    let ca = certs.path().join("ca.pem");
    let Some(p) = Pool::start(
        false,
        &[
            "--tls-cert",
            cert.to_str().expect("utf8"),
            "--tls-key",
            key.to_str().expect("utf8"),
        ],
    ) else {
        return;
    };
    assert!(
        p.gateway.url.starts_with("https://127.0.0.1:"),
        "{}",
        p.gateway.url
    );
    let tf = p.token_file("alice");
    let founder = |extra: &[&str], args: &[&str]| {
        Command::new(POOL)
            .args(args)
            .args(["--gateway", &p.gateway.url, "--token-file"])
            .arg(&tf)
            .args(extra)
            .output()
            .expect("pool")
    };
    let cas = ["--gateway-ca", ca.to_str().expect("utf8")];
    // Through TLS with the test CA trusted: a whole run, and its status.
    let job = Job::new("echo '1 passed, 0 failed'\n", 60);
    let jobp = job.path();
    let o = founder(
        &cas,
        &[
            "submit",
            jobp.to_str().expect("utf8"),
            "--nonce",
            NONCE_A,
            "--run-id",
            "run-tls",
            "--wait",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["outcome"], "tests_passed", "{}", text(&o));
    let o = founder(&cas, &["status", "run-tls", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_of(&o)["outcome"], "tests_passed", "{}", text(&o));
    // Without the CA (the system's roots do not know it): refused by the client, nothing sent.
    let o = founder(&[], &["status", "run-tls"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("TLS"),
        "{}",
        text(&o)
    );
    // Plain HTTP to the TLS port gets no answer it can use.
    let plain = p.gateway.url.replace("https://", "http://");
    let o = Command::new(POOL)
        .args(["status", "run-tls", "--gateway", &plain, "--token-file"])
        .arg(&tf)
        .output()
        .expect("pool");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
