//! The vm tier's host dialer (`fenced-run vm-dialer`, started by QEMU's guestfwd per guest connection) without a
//! VM: the connection is this test's pipe. It reaches an allowlisted name only through the test-only map to a
//! loopback server, refuses loopback/private/link-local/metadata addresses after its own resolution (answered
//! `DENY`: a refusal by policy, final, which the guest's proxy answers 403), refuses every connection once the
//! network is cut, and logs each attempt in the VM directory's dialer log. With the operator's `allow_networks`
//! a named loopback address is reached; with `upstream_proxy` the connection goes through the operator's CONNECT
//! proxy (this test's, counting what it carries), whose 403 is a `DENY` too.

use host::vm::dialer;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// A loopback server answering one HTTP request per connection; returns its port.
fn server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut s) = c else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\ndialer-ok-913");
        }
    });
    port
}

/// Runs one dialer with `input` as the guest's side; returns what it wrote back.
fn dial(state: &std::path::Path, map: Option<&str>, input: &[u8]) -> String {
    dial_with(state, map, &[], input)
}

/// [`dial`] with extra arguments (the operator's settings).
fn dial_with(state: &std::path::Path, map: Option<&str>, extra: &[&str], input: &[u8]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(["vm-dialer", "--state"]).arg(state);
    if let Some(m) = map {
        cmd.args(["--test-map", m]);
    }
    cmd.args(extra);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dialer");
    // A dialer that refuses before reading may close its side first: the write's error is not the test.
    let _ = child.stdin.take().expect("stdin").write_all(input);
    // stdin is closed here: the dialer relays the rest and ends when the server closes or answers.
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    let _ = child.wait();
    out
}

#[test]
fn the_dialer_reaches_only_the_mapped_loopback_server_refuses_inside_addresses_and_the_cut() {
    let port = server();
    let t = tempfile::tempdir().expect("tmp");
    let map = format!("registry.example:{port}=127.0.0.1:{port}");

    let ok = dial(
        t.path(),
        Some(&map),
        format!("registry.example:{port}\nGET / HTTP/1.0\r\n\r\n").as_bytes(),
    );
    assert!(ok.starts_with(&format!("OK 127.0.0.1:{port}\n")), "{ok}");
    assert!(ok.ends_with("dialer-ok-913"), "{ok}");

    // Not mapped: resolved normally (`localhost` from /etc/hosts; no test name goes to DNS); loopback, private
    // and metadata addresses are refused after resolution, by policy.
    for req in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "169.254.169.254:80".to_string(),
        "10.1.2.3:80".to_string(),
    ] {
        let r = dial(t.path(), Some(&map), format!("{req}\n").as_bytes());
        assert!(r.starts_with("DENY "), "{req}: {r}");
    }
    let r = dial(t.path(), Some(&map), b"no port here\n");
    assert!(r.starts_with("ERR the request is not host:port"), "{r}");

    // After the cut nothing connects, not even the mapped name.
    assert_eq!(dialer::cut(t.path()), 0);
    let r = dial(
        t.path(),
        Some(&map),
        format!("registry.example:{port}\n").as_bytes(),
    );
    assert_eq!(r, "DENY the install phase is over: the network was cut\n");

    let log = dialer::read_log(t.path());
    let events: Vec<(&str, &str)> = log
        .iter()
        .map(|r| (r.event.as_str(), r.request.as_str()))
        .collect();
    assert_eq!(
        events[0],
        ("connect", format!("registry.example:{port}").as_str())
    );
    assert_eq!(events[1].0, "close");
    assert!(log[1].bytes_down > 0 && log[1].bytes_up > 0, "{log:?}");
    let refused = log.iter().filter(|r| r.event == "refuse").count();
    assert_eq!(refused, 6, "{log:?}");
    // Five refusals by policy (four addresses and the cut), one failure (the unparsable request).
    assert_eq!(log.iter().filter(|r| r.policy).count(), 5, "{log:?}");
    assert!(
        log.iter()
            .any(|r| r.request == "169.254.169.254:80" && r.reason.contains("refuses")),
        "{log:?}"
    );
    // Every dialer unregistered itself.
    let left = std::fs::read_dir(t.path().join(dialer::PIDS_DIR))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);
}

#[test]
fn a_test_map_to_anything_but_loopback_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    let r = dial(t.path(), Some("registry.example:80=192.0.2.1:80"), b"x:1\n");
    assert!(
        r.starts_with("ERR --test-map `192.0.2.1:80`: a test mapping may only point to loopback"),
        "{r}"
    );
}

/// A loopback HTTP CONNECT proxy: records every CONNECT target, answers 403 to `denied.example:*`, and tunnels
/// everything else to the loopback port `to`.
fn connect_proxy(to: u16) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let seen = s2.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let target = text
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                seen.lock().expect("lock").push(target.clone());
                if target.starts_with("denied.example:") {
                    let _ = c.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
                    return;
                }
                let Ok(up) = TcpStream::connect(("127.0.0.1", to)) else {
                    return;
                };
                let _ = c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (Ok(mut c_rd), Ok(mut up_wr)) = (c.try_clone(), up.try_clone()) else {
                    return;
                };
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_rd, &mut up_wr);
                    let _ = up_wr.shutdown(std::net::Shutdown::Write);
                });
                let mut up = up;
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, seen)
}

#[test]
fn the_operators_allow_networks_reach_a_named_loopback_address_and_nothing_wider() {
    let port = server();
    let t = tempfile::tempdir().expect("tmp");
    let op = ["--allow-network", "127.0.0.1/32"];
    let ok = dial_with(
        t.path(),
        None,
        &op,
        format!("127.0.0.1:{port}\nGET / HTTP/1.0\r\n\r\n").as_bytes(),
    );
    assert!(ok.starts_with(&format!("OK 127.0.0.1:{port}\n")), "{ok}");
    assert!(ok.ends_with("dialer-ok-913"), "{ok}");
    // Another loopback address, metadata: still refused by policy.
    for req in [
        format!("127.0.0.2:{port}"),
        "169.254.169.254:80".to_string(),
    ] {
        let r = dial_with(t.path(), None, &op, format!("{req}\n").as_bytes());
        assert!(r.starts_with("DENY "), "{req}: {r}");
    }
    // Without the setting the same request is refused.
    let r = dial(t.path(), None, format!("127.0.0.1:{port}\n").as_bytes());
    assert!(
        r.starts_with("DENY 127.0.0.1 resolved (on the host) to an address the dialer refuses"),
        "{r}"
    );
    // A range over loopback is not a setting: the dialer says so and connects nothing.
    let r = dial_with(
        t.path(),
        None,
        &["--allow-network", "127.0.0.0/8"],
        b"x.example:1\n",
    );
    assert!(
        r.starts_with("ERR egress.allow_networks: `127.0.0.0/8`"),
        "{r}"
    );
    let log = dialer::read_log(t.path());
    assert_eq!(
        log.iter().filter(|r| r.event == "connect").count(),
        1,
        "{log:?}"
    );
    assert_eq!(
        log.iter()
            .filter(|r| r.event == "refuse" && r.policy)
            .count(),
        3,
        "{log:?}"
    );
}

#[test]
fn the_operators_upstream_proxy_carries_the_connection_and_its_403_is_a_refusal() {
    let port = server();
    let (up_port, seen) = connect_proxy(port);
    let t = tempfile::tempdir().expect("tmp");
    let url = format!("http://127.0.0.1:{up_port}");
    let op = ["--upstream-proxy", url.as_str()];
    // The name is the upstream's to resolve: this dialer never looks it up.
    let ok = dial_with(
        t.path(),
        None,
        &op,
        format!("registry.example:{port}\nGET / HTTP/1.0\r\n\r\n").as_bytes(),
    );
    assert!(
        ok.starts_with(&format!(
            "OK registry.example:{port} through the operator's upstream proxy {url}"
        )),
        "{ok}"
    );
    assert!(ok.ends_with("dialer-ok-913"), "{ok}");
    let r = dial_with(
        t.path(),
        None,
        &op,
        format!("denied.example:{port}\n").as_bytes(),
    );
    assert!(r.starts_with("DENY the operator's upstream proxy"), "{r}");
    // An IP literal the policy refuses never reaches the upstream.
    let r = dial_with(t.path(), None, &op, b"10.1.2.3:80\n");
    assert!(r.starts_with("DENY 10.1.2.3 resolved"), "{r}");
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![
            format!("registry.example:{port}"),
            format!("denied.example:{port}")
        ]
    );
    let log = dialer::read_log(t.path());
    assert!(
        log.iter().any(|r| r.event == "close" && r.bytes_down > 0),
        "{log:?}"
    );
    assert_eq!(
        log.iter()
            .filter(|r| r.event == "refuse" && r.policy)
            .count(),
        2,
        "{log:?}"
    );
}
