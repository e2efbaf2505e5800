//! The vm tier's host dialer (`fenced-run vm-dialer`, started by QEMU's guestfwd per guest connection) without a
//! VM: the connection is this test's pipe. It reaches an allowlisted name only through the test-only map to a
//! loopback server, refuses loopback/private/link-local/metadata addresses after its own resolution, refuses
//! every connection once the network is cut, and logs each attempt in the VM directory's dialer log.

use host::vm::dialer;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

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
    let mut cmd = Command::new(BIN);
    cmd.args(["vm-dialer", "--state"]).arg(state);
    if let Some(m) = map {
        cmd.args(["--test-map", m]);
    }
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
    // and metadata addresses are refused after resolution.
    for req in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "169.254.169.254:80".to_string(),
        "10.1.2.3:80".to_string(),
    ] {
        let r = dial(t.path(), Some(&map), format!("{req}\n").as_bytes());
        assert!(r.starts_with("ERR "), "{req}: {r}");
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
    assert_eq!(r, "ERR the install phase is over: the network was cut\n");

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
