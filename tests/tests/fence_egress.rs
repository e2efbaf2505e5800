//! Attack suite, install-phase egress through the whole fence (sandbox, forwarder, proxy): names the job did
//! not allow, IP literals, names that resolve to cloud-metadata, private or IPv4-embedded loopback addresses,
//! an allowed name resolving to loopback without the test-only allowance, a Host header that disagrees with the
//! URI, and a CONNECT smuggled after a GET on a keep-alive connection. Each attempt must be refused and logged.
//!
//! No packet can leave this machine even if the proxy were wrong: the injected resolver maps the test names,
//! and the injected dialer records every address it is asked for and connects only to plain loopback.

use fenced_run_tests::fence::{skip, Case};
use guest::fence::proxy::net::{BoxFuture, Dialer, Resolver};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// The test's DNS: every name the install script uses, and what it "resolves" to.
struct Names;

impl Resolver for Names {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let answer: Option<Vec<IpAddr>> = match name {
            "registry.example" => Some(vec![[127, 0, 0, 1].into()]),
            "metadata.example" => Some(vec![[169, 254, 169, 254].into()]),
            "private.example" => Some(vec![[10, 0, 0, 1].into()]),
            "mixed.example" => Some(vec![[127, 0, 0, 1].into(), [192, 168, 1, 1].into()]),
            "mapped.example" => Some(vec!["::ffff:127.0.0.1".parse().expect("v6")]),
            _ => None,
        };
        Box::pin(async move {
            answer.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

/// Records every address the proxy dials; connects only to plain loopback and refuses anything else.
#[derive(Default)]
struct LoopbackOnly {
    dialed: Mutex<Vec<SocketAddr>>,
}

impl Dialer for LoopbackOnly {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, std::io::Result<tokio::net::TcpStream>> {
        if let Ok(mut d) = self.dialed.lock() {
            d.push(addr);
        }
        Box::pin(async move {
            let loopback = match addr.ip() {
                IpAddr::V4(v4) => v4.is_loopback(),
                IpAddr::V6(v6) => v6.is_loopback(),
            };
            if !loopback {
                return Err(std::io::Error::other(
                    "the test dialer never leaves loopback",
                ));
            }
            tokio::net::TcpStream::connect(addr).await
        })
    }
}

/// A loopback "registry" that answers every request on a connection with a small body.
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
                    let body = "registry-body-5521";
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// Keep-alive smuggling: an allowed GET, then a CONNECT to a name that is not allowed, on one connection to
/// the proxy (through the forwarder at $HTTP_PROXY).
const SMUGGLE: &str = r#"
import os, socket, sys, time
port = int(sys.argv[1])
proxy = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
host, pport = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(pport)), timeout=10)
req = ("GET http://registry.example:%d/a HTTP/1.1\r\nHost: registry.example:%d\r\n\r\n"
       "CONNECT smuggled.example:443 HTTP/1.1\r\nHost: smuggled.example:443\r\n\r\n") % (port, port)
s.sendall(req.encode())
data = b""
s.settimeout(5)
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except OSError:
    pass
print("smuggle-reply:", data.decode("latin-1").replace("\r\n", " | ")[:400])
"#;

struct Run {
    verdict: serde_json::Value,
    dialed: Vec<SocketAddr>,
}

fn run(port: u16, script: &str, loopback_allowed: bool) -> Run {
    let c = Case::new(BIN);
    c.repo_file("install.sh", script);
    c.repo_file("smuggle.py", SMUGGLE);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    let job_path = c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\n\
         allow = [\"registry.example:{port}\", \"metadata.example:{port}\", \"private.example:{port}\", \
         \"mixed.example:{port}\", \"mapped.example:{port}\"]\ntimeout_seconds = 60\n\
         [test]\ncommand = \"sh test.sh\"\n"
    ));
    let job = intake::job::Job::load(&job_path).expect("job");
    let dialer = Arc::new(LoopbackOnly::default());
    let d = dialer.clone();
    let mut opts = guest::fence::run::RunOptions::new(BIN.into(), vec![9; 32]);
    opts.proxy = Some(Arc::new(guest::fence::run::ProxyEgress::with(move |c| {
        c.with_resolver(Arc::new(Names))
            .with_dialer(d.clone())
            .allow_loopback_for_tests(loopback_allowed)
    })));
    let verdict = guest::fence::run::run_job(&job, &opts).to_json_value();
    let dialed = dialer.dialed.lock().map(|d| d.clone()).unwrap_or_default();
    Run { verdict, dialed }
}

fn attempts<'a>(v: &'a serde_json::Value, host: &str) -> Vec<&'a serde_json::Value> {
    v["install"]["egress"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["host"] == host).collect())
        .unwrap_or_default()
}

#[test]
fn install_phase_egress_attacks_are_refused_and_logged() {
    if skip() {
        return;
    }
    let port = registry();
    let script = format!(
        "curl -sS -m 10 -o ok http://registry.example:{port}/ok; echo allowed=$?\n\
         curl -sS -m 10 http://unlisted.example:{port}/; echo unlisted=$?\n\
         curl -sS -m 10 http://127.0.0.1:{port}/; echo literal=$?\n\
         curl -sS -m 10 http://metadata.example:{port}/latest/meta-data/; echo metadata=$?\n\
         curl -sS -m 10 http://private.example:{port}/; echo private=$?\n\
         curl -sS -m 10 http://mixed.example:{port}/; echo mixed=$?\n\
         curl -sS -m 10 http://mapped.example:{port}/; echo mapped=$?\n\
         curl -sS -m 10 -p https://metadata.example:{port}/; echo connect_metadata=$?\n\
         curl -sS -m 10 -H 'Host: evil.example' http://registry.example:{port}/; echo host_mismatch=$?\n\
         python3 smuggle.py {port}\n"
    );
    let r = run(port, &script, true);
    let v = &r.verdict;
    assert_eq!(v["outcome"], "tests_passed", "{v}");
    let log = v["output_tail"]["install"].as_str().unwrap_or_default();

    // The allowed name reached the loopback registry, and it is the only address ever dialed.
    let allowed = attempts(v, "registry.example");
    assert!(
        allowed
            .iter()
            .any(|e| e["allowed"] == true && e["bytes_down"].as_u64().unwrap_or(0) > 0),
        "{v}"
    );
    assert!(log.contains("allowed=0"), "{log}");
    let registry_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    assert!(!r.dialed.is_empty(), "the allowed request was dialed");
    assert!(
        r.dialed.iter().all(|a| *a == registry_addr),
        "dialed only the checked registry address: {:?}",
        r.dialed
    );

    // Every attack attempt is in the log, refused, with a reason.
    for host in [
        "unlisted.example",
        "127.0.0.1",
        "metadata.example",
        "private.example",
        "mixed.example",
        "mapped.example",
        "smuggled.example",
    ] {
        let seen = attempts(v, host);
        assert!(!seen.is_empty(), "{host} missing from the egress log: {v}");
        for e in seen {
            assert_eq!(e["allowed"], false, "{host}: {e}");
            assert!(
                e["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{host} refused without a reason: {e}"
            );
            assert_eq!(e["bytes_up"], 0, "{host}: nothing may go up: {e}");
        }
    }
    // The Host/URI mismatch is refused (logged under either name) and its request never reached the registry.
    let mismatch: Vec<_> = attempts(v, "registry.example")
        .into_iter()
        .chain(attempts(v, "evil.example"))
        .filter(|e| e["allowed"] == false)
        .collect();
    assert!(!mismatch.is_empty(), "Host/URI mismatch not refused: {v}");
    // The smuggled CONNECT got no tunnel.
    assert!(!log.contains("200 Connection established"), "{log}");
}

#[test]
fn allowed_name_resolving_to_loopback_is_refused_without_the_test_allowance() {
    if skip() {
        return;
    }
    let port = registry();
    let script = format!("curl -sS -m 10 http://registry.example:{port}/; echo status=$?\n");
    let r = run(port, &script, false);
    let v = &r.verdict;
    let seen = attempts(v, "registry.example");
    assert!(!seen.is_empty(), "{v}");
    assert!(seen.iter().all(|e| e["allowed"] == false), "{v}");
    assert!(r.dialed.is_empty(), "nothing may be dialed: {:?}", r.dialed);
}
