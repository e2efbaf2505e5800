//! An install phase that fails because the environment did not provide what it asked for: a host not on the
//! allowlist (refused by the proxy) or an allowlisted one that could not be connected is
//! `environment_exhausted`, naming the refusal, within seconds; an install that fails with every connection
//! served stays `tests_failed`. Neither counts a test, and the human summary says so on its own line.
//!
//! No packet leaves this machine: the refused name is refused before any resolution, and the library runs use
//! an injected resolver and a dialer that connects only to loopback.

use fenced_run_tests::fence::{skip, Case};
use guest::fence::proxy::net::{BoxFuture, Dialer, Resolver};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// The job of every case: the install script given, tests that would pass.
fn case(install: &str, allow: &str) -> Case {
    let c = Case::new(BIN);
    c.repo_file("install.sh", install);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\nallow = [{allow}]\n\
         timeout_seconds = 60\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 60\n"
    ));
    c
}

fn findings(v: &serde_json::Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| format!("{} {}: {}", f["stage"], f["kind"], f["detail"]))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_install_refused_by_the_allowlist_is_environment_exhausted_naming_the_refusal() {
    if skip() {
        return;
    }
    let c = case(
        "curl -fsS -m 20 -o pkg.tgz http://blocked.example:8081/pkg.tgz\n",
        "\"registry.example:443\"",
    );
    let started = Instant::now();
    let ran = c.run();
    let took = started.elapsed();
    assert_eq!(ran.outcome(), "environment_exhausted", "{}", ran.dump());
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let v = &ran.verdict;
    assert!(v["tests"].is_null(), "{}", ran.dump());
    assert!(v["test"].is_null(), "no test phase: {}", ran.dump());
    let refused: Vec<_> = v["install"]["egress"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["host"] == "blocked.example")
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !refused.is_empty() && refused.iter().all(|e| e["allowed"] == false),
        "{}",
        ran.dump()
    );
    let f = findings(v);
    assert!(
        f.iter().any(|f| f.contains("install-phase")
            && f.contains("blocked.example:8081 (")
            && f.contains("could not provide the dependencies")),
        "{f:?}"
    );
    c.assert_clean(&ran, &[]);

    // The human summary says no test ran, on its own line.
    let out = Command::new(BIN)
        .arg("run")
        .arg(c.path().join("job.toml"))
        .env("TMPDIR", c.tmp())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("NO TEST RAN: ")),
        "{text}"
    );
    assert!(text.contains("outcome: environment_exhausted"), "{text}");
}

/// Resolves the test's names to loopback.
struct Names;

impl Resolver for Names {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let answer = (name == "registry.example").then(|| vec![IpAddr::from([127, 0, 0, 1])]);
        Box::pin(async move {
            answer.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

/// Connects only to loopback.
struct LoopbackOnly;

impl Dialer for LoopbackOnly {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, std::io::Result<tokio::net::TcpStream>> {
        Box::pin(async move {
            if !addr.ip().is_loopback() {
                return Err(std::io::Error::other(
                    "the test dialer never leaves loopback",
                ));
            }
            tokio::net::TcpStream::connect(addr).await
        })
    }
}

/// A loopback server answering each request with a small body; its port.
fn registry() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("registry");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let reply = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\npackage";
                    if s.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn run_lib(c: &Case) -> attestation::verdict::Verdict {
    let job = intake::job::Job::load(&c.path().join("job.toml")).expect("job");
    let mut opts = guest::fence::run::RunOptions::new(BIN.into(), vec![9; 32]);
    opts.proxy = Some(Arc::new(guest::fence::run::ProxyEgress::with(|c| {
        c.with_resolver(Arc::new(Names))
            .with_dialer(Arc::new(LoopbackOnly))
            .allow_loopback_for_tests(true)
    })));
    guest::fence::run::run_job(&job, &opts)
}

#[test]
fn an_allowlisted_host_that_cannot_be_connected_is_environment_exhausted_and_a_served_failure_is_not(
) {
    if skip() {
        return;
    }
    use attestation::verdict::Outcome;
    // Allowed, but nothing listens: the proxy records the failed connection.
    let port = closed_port();
    let c = case(
        &format!("curl -fsS -m 20 -o pkg http://registry.example:{port}/pkg\n"),
        &format!("\"registry.example:{port}\""),
    );
    let started = Instant::now();
    let v = run_lib(&c);
    assert!(started.elapsed() < Duration::from_secs(30));
    let why: Vec<String> = v.findings.iter().map(|f| f.detail.clone()).collect();
    assert_eq!(v.outcome, Outcome::EnvironmentExhausted, "{why:?}");
    assert!(
        why.iter()
            .any(|w| w.contains(&format!("registry.example:{port} ("))
                && w.contains("connecting failed")),
        "{why:?}"
    );
    assert!(v.tests.is_none());

    // Every connection served, and the install still fails: the repository's own failure.
    let port = registry();
    let c = case(
        &format!("curl -fsS -m 20 -o pkg http://registry.example:{port}/pkg && exit 3\n"),
        &format!("\"registry.example:{port}\""),
    );
    let v = run_lib(&c);
    let why: Vec<String> = v.findings.iter().map(|f| f.detail.clone()).collect();
    assert_eq!(v.outcome, Outcome::TestsFailed, "{why:?}");
    let install = v.install.as_ref().expect("install phase");
    assert!(
        install.egress.iter().any(|e| e.allowed && e.bytes_down > 0),
        "{:?}",
        install.egress
    );
    assert!(
        why.iter()
            .any(|w| w.contains("install phase failed with exit code 3; no test ran")),
        "{why:?}"
    );
    assert!(v.tests.is_none());
}
