//! `[repository] url` in the process tier: the pinned commit fetched in the fence's install sandbox through the
//! egress proxy (never by the host), from a loopback git server this test starts (smart HTTP through
//! `git http-backend`, and dumb HTTP, where a shallow fetch is refused and the fence fetches in full), named
//! `localhost` on the job's allowlist and reached through the operator's `allow_networks = ["127.0.0.1/32"]`.
//! The base commit's test fails and the patch fixes it, with the counts of a direct run outside the fence; the
//! verdict carries the URL and `verify-attestation --repository` pins it. A pin the server does not have is
//! refused naming it; a URL not on the allowlist, or to loopback without `allow_networks`, is refused at intake.

use fenced_run_tests::fence::{skip, skip_without_limits, Case, Ran};
use fenced_run_tests::gitserve::{GitServer, Protocol, FIX_PATCH};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const OPERATOR: &str = "[egress]\nallow_networks = [\"127.0.0.1/32\"]\n";

/// A case whose job fetches `url` at `pin`, with `allow` on the allowlist and the fix as its patch when `fix`.
fn case(url: &str, pin: &str, allow: &str, fix: bool) -> Case {
    case_with(url, pin, allow, fix, "timeout_seconds = 120\n")
}

/// [`case`] with `extra` after the `[install]` allowlist (the fetch's time limit, a `[limits]` table).
fn case_with(url: &str, pin: &str, allow: &str, fix: bool, extra: &str) -> Case {
    let c = Case::new(BIN);
    let patch = if fix {
        std::fs::write(c.path().join("fix.patch"), FIX_PATCH).expect("patch");
        "patch = \"fix.patch\"\n"
    } else {
        ""
    };
    c.job(&format!(
        "[repository]\nurl = \"{url}\"\ncommit = \"{pin}\"\n{patch}[install]\ncommand = \"true\"\n\
         allow = [\"{allow}\"]\n{extra}[test]\ncommand = \"sh test.sh\"\n"
    ));
    c
}

fn run(c: &Case, operator: bool, extra: &[&str]) -> Ran {
    let op = c.operator(OPERATOR);
    let mut args: Vec<&str> = Vec::new();
    if operator {
        args.extend(["--operator-config", op.to_str().expect("utf-8")]);
    }
    args.extend(extra);
    c.run_with(&args, &[])
}

fn counts(r: &Ran) -> (u64, u64) {
    let t = &r.verdict["tests"];
    (
        t["passed"].as_u64().unwrap_or(u64::MAX),
        t["failed"].as_u64().unwrap_or(u64::MAX),
    )
}

fn fetch_records(r: &Ran, port: u16) -> usize {
    let in_install = r.verdict["install"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let in_repo = r.verdict["repository"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    in_install
        .iter()
        .chain(in_repo.iter())
        .filter(|e| e["host"] == "localhost" && e["port"] == port && e["allowed"] == true)
        .count()
}

#[test]
fn base_fails_and_the_fix_passes_from_a_smart_http_server_with_the_url_pinned() {
    if skip() {
        return;
    }
    let s = GitServer::start(Protocol::Smart);
    let allow = format!("localhost:{}", s.port);

    let c = case(&s.url(), &s.base, &allow, false);
    let r = run(&c, true, &[]);
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(counts(&r), s.direct(false), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["url"], s.url(), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["fetch"], "shallow", "{}", r.dump());
    assert_eq!(
        r.verdict["inputs"]["commit"],
        s.base.as_str(),
        "{}",
        r.dump()
    );
    assert!(fetch_records(&r, s.port) > 0, "{}", r.dump());
    c.assert_clean(&r, &[]);

    let c = case(&s.url(), &s.base, &allow, true);
    let nonce = "00112233445566778899aabbccddeeff";
    let evidence = c.path().join("run.evidence");
    let r = run(
        &c,
        true,
        &[
            "--evidence",
            evidence.to_str().expect("utf-8"),
            "--nonce",
            nonce,
        ],
    );
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(counts(&r), s.direct(true), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["url"], s.url(), "{}", r.dump());
    let verify = |url: Option<&str>| {
        let mut cmd = Command::new(VERIFY);
        cmd.arg("evidence").arg(&evidence).args([
            "--allow-simulated",
            "--any-measurement",
            "--nonce",
            nonce,
            "--json",
        ]);
        if let Some(u) = url {
            cmd.args(["--repository", u]);
        }
        let out = cmd.output().expect("verify");
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out.status.code(), json)
    };
    let (code, json) = verify(Some(&s.url()));
    assert_eq!(code, Some(0), "{json}");
    let (code, json) = verify(Some("http://localhost:1/other.git"));
    assert_eq!(code, Some(1), "{json}");
    assert!(json.to_string().contains("pin-repository"), "{json}");
    let (code, json) = verify(None);
    assert_eq!(code, Some(0), "{json}");
    assert!(
        json.to_string().contains("repository URL NOT pinned"),
        "{json}"
    );
    c.assert_clean(&r, &[]);
}

#[test]
fn a_dumb_http_server_is_fetched_in_full_and_judged_the_same() {
    if skip() {
        return;
    }
    let s = GitServer::start(Protocol::Dumb);
    let c = case(&s.url(), &s.base, &format!("localhost:{}", s.port), true);
    let r = run(&c, true, &[]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(counts(&r), s.direct(true), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["fetch"], "full", "{}", r.dump());
    assert_eq!(
        r.verdict["inputs"]["commit"],
        s.base.as_str(),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
}

#[test]
fn a_pin_the_server_does_not_have_is_refused_naming_it() {
    if skip() {
        return;
    }
    let s = GitServer::start(Protocol::Smart);
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let c = case(&s.url(), missing, &format!("localhost:{}", s.port), false);
    let r = run(&c, true, &[]);
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(missing), "{}", r.dump());
    assert!(r.verdict["test"].is_null(), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["url"], s.url(), "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn urls_off_the_allowlist_or_to_loopback_without_allow_networks_are_refused_at_intake() {
    let s = GitServer::start(Protocol::Smart);
    // Not on the allowlist: the loader refuses it, naming the host:port to add.
    let c = case(&s.url(), &s.base, "registry.example:443", false);
    let r = run(&c, true, &[]);
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("repository.url") && reason.contains(&format!("localhost:{}", s.port)),
        "{}",
        r.dump()
    );
    assert!(r.verdict["repository"].is_null(), "{}", r.dump());
    // Loopback without the operator's allow_networks: refused at receive, naming the address.
    let c = case(&s.url(), &s.base, &format!("localhost:{}", s.port), false);
    let r = run(&c, false, &[]);
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "receive", "{}", r.dump());
    let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("localhost") && reason.contains("127.0.0.1") && reason.contains("loopback"),
        "{}",
        r.dump()
    );
}

#[test]
fn a_server_that_never_answers_meets_the_time_limit() {
    if skip() {
        return;
    }
    // Accepts and holds every connection, answering nothing.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    let url = format!("http://localhost:{port}/repo.git");
    let c = case_with(
        &url,
        &"a".repeat(40),
        &format!("localhost:{port}"),
        false,
        "timeout_seconds = 3\n",
    );
    let started = std::time::Instant::now();
    let r = run(&c, true, &[]);
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    assert!(r.verdict.to_string().contains("time limit"), "{}", r.dump());
    assert!(r.verdict["test"].is_null(), "{}", r.dump());
    assert!(started.elapsed().as_secs() < 60, "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn a_pack_larger_than_the_run_s_disk_meets_the_disk_limit() {
    if skip() || skip_without_limits() {
        return;
    }
    let s = GitServer::start_with(Protocol::Smart, 12 << 20);
    let c = case_with(
        &s.url(),
        &s.base,
        &format!("localhost:{}", s.port),
        false,
        "timeout_seconds = 120\n[limits]\ndisk_mib = 4\n",
    );
    let r = run(&c, true, &[]);
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    assert!(r.verdict.to_string().contains("disk limit"), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["fetch"], "failed", "{}", r.dump());
    c.assert_clean(&r, &[]);
}
