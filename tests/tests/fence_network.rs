//! Attack suite, network: the test phase reaches nothing (TCP, UDP and DNS to listeners the test starts on
//! the host's loopback; the old relay port and proxy socket of the install phase); the install phase reaches
//! only the proxy, which logs every attempt; an allowed name reaches a loopback registry through an injected
//! resolver. Every target is on loopback, so a bug shows up as a connection seen here, not as traffic.

use fenced_run_tests::fence::{skip, Case};
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

const PROBE: &str = r#"
import socket, glob, sys, os
tcp, udp, sock_glob = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
bad = []
for port in (tcp, 3128):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2); bad.append("tcp %d" % port)
    except OSError:
        pass
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# A DNS query for registry.example to the host-side UDP listener (it must never arrive).
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x08registry\x07example\x00\x00\x01\x00\x01"
try:
    s.sendto(q, ("127.0.0.1", udp))
except OSError:
    pass
try:
    socket.getaddrinfo("registry.example", 443); bad.append("dns")
except OSError:
    pass
for path in glob.glob(sock_glob) + ["/work/egress.sock"]:
    try:
        u = socket.socket(socket.AF_UNIX); u.connect(path); bad.append("unix " + path)
    except OSError:
        pass
ifs = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
if ifs != ["lo"]:
    bad.append("interfaces %s" % ifs)
print("netns", os.readlink("/proc/self/ns/net"))
print("bad:", bad)
print("1 passed, 0 failed" if not bad else "0 passed, 1 failed")
sys.exit(1 if bad else 0)
"#;

#[test]
fn test_phase_reaches_nothing() {
    if skip() {
        return;
    }
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
    tcp.set_nonblocking(true).expect("nb");
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nb");
    let c = Case::new(BIN);
    c.repo_file("probe.py", PROBE);
    let sock_glob = format!("{}/fenced-run-*/egress.sock", c.tmp().display());
    c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"echo netns $(readlink /proc/self/ns/net)\"\ntimeout_seconds = 30\n[test]\ncommand = \"python3 probe.py {} {} '{sock_glob}'\"\ntimeout_seconds = 60\n",
        tcp.local_addr().expect("a").port(),
        udp.local_addr().expect("a").port()
    ));
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["test"]["network"], "none");
    assert!(
        tcp.accept().is_err(),
        "the sandbox reached the host's TCP listener"
    );
    let mut buf = [0u8; 512];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "the sandbox reached the host's UDP listener"
    );
    // Each phase ran in a network namespace of its own, never the host's (the helper and forwarder that held
    // them are gone: `assert_clean` looks for any process naming this case's directory).
    let host = std::fs::read_link("/proc/self/ns/net").expect("own netns");
    for tail in [
        r.test_tail(),
        r.verdict["output_tail"]["install"].as_str().unwrap_or(""),
    ] {
        let ns = tail
            .lines()
            .find_map(|l| l.strip_prefix("netns "))
            .map(str::to_owned);
        let ns = ns.unwrap_or_else(|| panic!("no netns line in {tail}"));
        assert_ne!(
            std::path::Path::new(&ns),
            host,
            "a phase ran in the host's network namespace"
        );
    }
    c.assert_clean(&r, &["probe.py"]);
}

#[test]
fn install_phase_without_proxy_route_reaches_no_host_listener() {
    if skip() {
        return;
    }
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
    tcp.set_nonblocking(true).expect("nb");
    let port = tcp.local_addr().expect("a").port();
    let c = Case::new(BIN);
    c.repo_file(
        "install.py",
        &format!(
            "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('REACHED')\nexcept OSError as e:\n    print('blocked', e)\n"
        ),
    );
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[install]\ncommand = \"python3 install.py\"\ntimeout_seconds = 30\n[test]\ncommand = \"sh test.sh\"\n");
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let tail = r.verdict["output_tail"]["install"].as_str().expect("tail");
    assert!(
        tail.contains("blocked") && !tail.contains("REACHED"),
        "{tail}"
    );
    assert!(
        tcp.accept().is_err(),
        "the install phase reached the host's listener directly"
    );
    c.assert_clean(&r, &["install.py"]);
}

/// A resolver that sends every name to 127.0.0.1 (the loopback registry of the test).
struct Loopback;

impl guest::fence::proxy::net::Resolver for Loopback {
    fn resolve<'a>(
        &'a self,
        _name: &'a str,
    ) -> guest::fence::proxy::net::BoxFuture<'a, std::io::Result<Vec<std::net::IpAddr>>> {
        Box::pin(async { Ok(vec![std::net::IpAddr::from([127, 0, 0, 1])]) })
    }
}

#[test]
fn install_phase_egress_through_the_proxy_is_logged() {
    if skip() {
        return;
    }
    // A loopback "registry" answering one request per connection.
    let registry = TcpListener::bind("127.0.0.1:0").expect("registry");
    let port = registry.local_addr().expect("a").port();
    std::thread::spawn(move || {
        for conn in registry.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "package-bytes-917100";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let c = Case::new(BIN);
    c.repo_file(
        "install.sh",
        &format!(
            "curl -sS -o pkg http://registry.example:{port}/pkg; echo allowed=$?\n\
             curl -sS -o other http://other.example:{port}/x; echo denied=$?\n\
             curl -sS -o lit http://127.0.0.1:{port}/x; echo literal=$?\n"
        ),
    );
    c.repo_file(
        "test.sh",
        "grep -q package-bytes-917100 pkg && echo '1 passed, 0 failed'\n",
    );
    let job_path = c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\nallow = [\"registry.example:{port}\"]\ntimeout_seconds = 60\n[test]\ncommand = \"sh test.sh\"\n"
    ));
    let job = intake::job::Job::load(&job_path).expect("job");
    let mut opts = guest::fence::run::RunOptions::new(BIN.into(), vec![7; 32]);
    opts.proxy = Some(Arc::new(guest::fence::run::ProxyEgress::with(|c| {
        c.with_resolver(Arc::new(Loopback))
            .allow_loopback_for_tests(true)
    })));
    let v = guest::fence::run::run_job(&job, &opts).to_json_value();
    assert_eq!(v["outcome"], "tests_passed", "{v}");
    let egress = v["install"]["egress"].as_array().expect("egress");
    let find = |host: &str| {
        egress
            .iter()
            .find(|e| e["host"] == host)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(find("registry.example")["allowed"], true, "{v}");
    assert!(
        find("registry.example")["bytes_down"].as_u64().unwrap_or(0) > 0,
        "{v}"
    );
    assert_eq!(find("other.example")["allowed"], false, "{v}");
    assert_eq!(find("127.0.0.1")["allowed"], false, "{v}");
}
