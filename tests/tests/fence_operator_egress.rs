//! The operator's `[egress]` table through the whole process tier (`fenced-run run --operator-config`): a name
//! on the job's allowlist that resolves to loopback is reached only when the operator names the address in
//! `allow_networks` (otherwise `403 Forbidden`, final, with the reason, and a refused record in the egress log);
//! with `upstream_proxy`, allowed connections go through the operator's CONNECT proxy (this test's, on loopback,
//! counting what it carries) and a name not on the allowlist never reaches it. The verdict records the settings.

use fenced_run_tests::fence::Case;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// A loopback HTTP server answering every request with `body`; returns its port.
fn server(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let _ = c.read(&mut buf);
                let _ = c.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    port
}

/// A loopback HTTP CONNECT proxy that records every CONNECT target and tunnels it to the loopback port `to`.
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
                let mut words = text.split_whitespace();
                let (method, target) = (
                    words.next().unwrap_or_default(),
                    words.next().unwrap_or_default(),
                );
                seen.lock()
                    .expect("lock")
                    .push(format!("{method} {target}"));
                let Ok(up) = TcpStream::connect(("127.0.0.1", to)) else {
                    return;
                };
                if method != "CONNECT"
                    || c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .is_err()
                {
                    return;
                }
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

fn attempts<'a>(v: &'a serde_json::Value, host: &str) -> Vec<&'a serde_json::Value> {
    v["install"]["egress"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["host"] == host).collect())
        .unwrap_or_default()
}

/// A case whose install phase fetches `http://NAME:PORT/` with curl (the status code and the body shown).
fn case(name: &str, port: u16, extra_allow: &str) -> Case {
    let c = Case::new(BIN);
    c.repo_file(
        "install.sh",
        &format!(
            "curl -sS -m 20 -o body -w 'code=%{{http_code}}\\n' http://{name}:{port}/; echo curl=$?; cat body; echo\n\
             curl -sS -m 20 -p -o tunnelled http://{name}:{port}/t; echo tunnel=$?; cat tunnelled; echo\n"
        ),
    );
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job(&format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\n\
         allow = [\"{name}:{port}\"{extra_allow}]\ntimeout_seconds = 60\n[test]\ncommand = \"sh test.sh\"\n"
    ));
    c
}

#[test]
fn allow_networks_reach_a_loopback_server_only_when_the_operator_names_it() {
    if fenced_run_tests::fence::skip() {
        return;
    }
    let port = server("operator-egress-body-3307");

    // With `allow_networks = ["127.0.0.1/32"]`: `localhost` (127.0.0.1 from /etc/hosts) is reached.
    let c = case("localhost", port, "");
    let op = c.path().join("operator.toml");
    std::fs::write(&op, "[egress]\nallow_networks = [\"127.0.0.1/32\"]\n").expect("operator file");
    let ran = c.run_with(&["--operator-config", op.to_str().expect("utf-8")], &[]);
    let v = &ran.verdict;
    let tail = v["output_tail"]["install"].as_str().unwrap_or_default();
    assert!(tail.contains("code=200"), "{}", ran.dump());
    assert!(tail.contains("operator-egress-body-3307"), "{}", ran.dump());
    assert!(tail.contains("tunnel=0"), "{}", ran.dump());
    let seen = attempts(v, "localhost");
    assert_eq!(seen.len(), 2, "{}", ran.dump());
    assert!(seen.iter().all(|e| e["allowed"] == true), "{}", ran.dump());
    assert!(
        seen.iter()
            .all(|e| e["bytes_down"].as_u64().unwrap_or(0) > 0),
        "{}",
        ran.dump()
    );
    assert_eq!(
        v["install"]["operator_egress"],
        serde_json::json!({"allow_networks": ["127.0.0.1/32"]}),
        "{}",
        ran.dump()
    );
    assert_eq!(v["outcome"], "tests_passed", "{}", ran.dump());

    // Without the operator's entry: refused by the address policy, 403 with the reason, nothing more tried.
    let c = case("localhost", port, "");
    let ran = c.run();
    let v = &ran.verdict;
    let tail = v["output_tail"]["install"].as_str().unwrap_or_default();
    assert!(tail.contains("code=403"), "{}", ran.dump());
    assert!(
        tail.contains("fenced-run egress proxy: localhost resolved to [127.0.0.1]"),
        "{}",
        ran.dump()
    );
    assert!(
        !tail.contains("operator-egress-body-3307"),
        "{}",
        ran.dump()
    );
    let seen = attempts(v, "localhost");
    assert_eq!(seen.len(), 2, "{}", ran.dump());
    for e in seen {
        assert_eq!(e["allowed"], false, "{e}");
        assert!(
            e["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("loopback"),
            "{e}"
        );
        assert_eq!(e["bytes_up"], 0, "{e}");
    }
    assert!(
        v["install"].get("operator_egress").is_none(),
        "{}",
        ran.dump()
    );

    // A range over loopback is an error naming the file and the entry; nothing runs.
    let c = case("localhost", port, "");
    let op = c.path().join("operator.toml");
    std::fs::write(&op, "[egress]\nallow_networks = [\"127.0.0.0/8\"]\n").expect("operator file");
    let ran = c.run_with(&["--operator-config", op.to_str().expect("utf-8")], &[]);
    assert_eq!(ran.code, 2, "{}", ran.dump());
    let shown = ran.verdict.to_string() + &ran.stderr;
    assert!(
        shown.contains("operator.toml: egress.allow_networks: `127.0.0.0/8`"),
        "{shown}"
    );
}

#[test]
fn the_upstream_proxy_carries_every_allowed_connection_and_nothing_else() {
    if fenced_run_tests::fence::skip() {
        return;
    }
    let port = server("upstream-body-6620");
    let (up_port, seen) = connect_proxy(port);
    let c = case("registry.example", port, "");
    // An extra request to a name that is not on the allowlist.
    c.repo_file(
        "install.sh",
        &format!(
            "curl -sS -m 20 -o body -w 'code=%{{http_code}}\\n' http://registry.example:{port}/; cat body; echo\n\
             curl -sS -m 20 -p -o tunnelled http://registry.example:{port}/t; echo tunnel=$?; cat tunnelled; echo\n\
             curl -sS -m 20 -o other -w 'other=%{{http_code}}\\n' http://unlisted.example:{port}/; echo\n"
        ),
    );
    let op = c.path().join("operator.toml");
    std::fs::write(
        &op,
        format!("[egress]\nupstream_proxy = \"http://127.0.0.1:{up_port}\"\n"),
    )
    .expect("operator file");
    let ran = c.run_with(&["--operator-config", op.to_str().expect("utf-8")], &[]);
    let v = &ran.verdict;
    let tail = v["output_tail"]["install"].as_str().unwrap_or_default();
    assert!(tail.contains("code=200"), "{}", ran.dump());
    assert!(tail.contains("tunnel=0"), "{}", ran.dump());
    assert_eq!(
        tail.matches("upstream-body-6620").count(),
        2,
        "{}",
        ran.dump()
    );
    assert!(tail.contains("other=403"), "{}", ran.dump());
    let targets = seen.lock().expect("lock").clone();
    let want = format!("CONNECT registry.example:{port}");
    assert_eq!(targets, vec![want.clone(), want], "{}", ran.dump());
    let ok = attempts(v, "registry.example");
    assert_eq!(ok.len(), 2, "{}", ran.dump());
    assert!(
        ok.iter().all(|e| e["allowed"] == true
            && e["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("upstream proxy")),
        "{}",
        ran.dump()
    );
    assert!(attempts(v, "unlisted.example")
        .iter()
        .all(|e| e["allowed"] == false));
    assert_eq!(
        v["install"]["operator_egress"]["upstream_proxy"],
        format!("http://127.0.0.1:{up_port}"),
        "{}",
        ran.dump()
    );
}
