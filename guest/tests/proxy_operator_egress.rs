//! The egress proxy with the operator's `[egress]` settings: `allow_networks` opens the named networks (and only
//! them) for allowlisted names, an upstream CONNECT proxy takes the place of dialing (the name handed to it
//! unresolved), and a refusal by policy on the far side (the host dialer's `DENY`, the upstream's 403) is final:
//! `403 Forbidden` with the reason, logged as refused. Nothing leaves loopback: the dialers here connect only to
//! this test's servers.

use guest::fence::proxy::{BoxFuture, Dialer, EgressProxy, NameDialer, ProxyConfig, Resolver};
use intake::job::AllowEntry;
use job_policy::egress::OperatorEgress;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

/// A loopback server answering each request with `body`; returns its port.
fn server(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    port
}

/// A loopback HTTP CONNECT proxy: records every CONNECT target, answers 403 to `denied.example:*`, and tunnels
/// everything else to the loopback port `to`. Returns its port and the targets it saw.
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
                    let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                    return;
                };
                let _ = c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut a, mut b2) = (
                    c.try_clone().expect("clone"),
                    up.try_clone().expect("clone"),
                );
                let (mut c, mut up) = (c, up);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b2);
                    let _ = b2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, seen)
}

fn request(sock: &std::path::Path, text: &str) -> String {
    let mut c = UnixStream::connect(sock).expect("connect");
    c.write_all(text.as_bytes()).expect("write");
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The test's DNS.
struct Names;

impl Resolver for Names {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let answer: Option<Vec<IpAddr>> = match name {
            "mirror.example" => Some(vec![[10, 20, 0, 5].into()]),
            "intercepted.example" => Some(vec![[192, 0, 2, 10].into()]),
            "loop.example" => Some(vec![[127, 0, 0, 1].into()]),
            "metadata.example" => Some(vec![[169, 254, 169, 254].into()]),
            _ => None,
        };
        Box::pin(async move { answer.ok_or_else(|| std::io::Error::other("no such name")) })
    }
}

/// Records every address it is asked for and connects to the loopback server instead.
struct ToServer {
    port: u16,
    dialed: Mutex<Vec<SocketAddr>>,
}

impl Dialer for ToServer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, std::io::Result<tokio::net::TcpStream>> {
        self.dialed.lock().expect("lock").push(addr);
        Box::pin(async move {
            // Upstream proxies of these tests are on loopback: dialled as asked.
            if addr.ip().is_loopback() {
                return tokio::net::TcpStream::connect(addr).await;
            }
            tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await
        })
    }
}

fn get(host: &str, port: u16) -> String {
    format!(
        "GET http://{host}:{port}/x HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    )
}

#[test]
fn allow_networks_open_the_named_networks_and_nothing_sensitive() {
    let port = server("mirror-body-4410");
    let run = |operator: OperatorEgress| {
        let dir = tempfile::tempdir().expect("tmp");
        let sock = dir.path().join("p.sock");
        let dialer = Arc::new(ToServer {
            port,
            dialed: Mutex::new(Vec::new()),
        });
        let allow: Vec<AllowEntry> = [
            "mirror.example",
            "intercepted.example",
            "loop.example",
            "metadata.example",
        ]
        .iter()
        .map(|h| AllowEntry::parse(&format!("{h}:{port}")).expect("entry"))
        .collect();
        let proxy = EgressProxy::start(
            ProxyConfig::new(allow, &sock)
                .with_resolver(Arc::new(Names))
                .with_dialer(dialer.clone())
                .with_operator_egress(operator),
        )
        .expect("proxy");
        let answers: Vec<String> = [
            "mirror.example",
            "intercepted.example",
            "loop.example",
            "metadata.example",
        ]
        .iter()
        .map(|h| request(&sock, &get(h, port)))
        .collect();
        let log = proxy.shutdown();
        let dialed = dialer.dialed.lock().expect("lock").clone();
        (answers, log, dialed)
    };

    let op = OperatorEgress::parse(&["10.20.0.0/16", "192.0.2.0/24"], None).expect("settings");
    let (answers, log, dialed) = run(op);
    assert!(answers[0].ends_with("mirror-body-4410"), "{}", answers[0]);
    assert!(answers[1].ends_with("mirror-body-4410"), "{}", answers[1]);
    for (i, what) in [(2, "loopback"), (3, "cloud metadata service")] {
        assert!(
            answers[i].starts_with("HTTP/1.1 403 Forbidden"),
            "{}",
            answers[i]
        );
        assert!(answers[i].contains(what), "{}", answers[i]);
        assert!(!log[i].allowed, "{:?}", log[i]);
    }
    assert_eq!(
        dialed,
        vec![
            SocketAddr::from(([10, 20, 0, 5], port)),
            SocketAddr::from(([192, 0, 2, 10], port))
        ]
    );

    // Without the operator's networks the same names are refused, nothing is dialled.
    let (answers, log, dialed) = run(OperatorEgress::default());
    assert!(
        answers.iter().all(|a| a.starts_with("HTTP/1.1 403")),
        "{answers:?}"
    );
    assert!(log.iter().all(|r| !r.allowed), "{log:?}");
    assert!(
        log[0].reason.contains("10.20.0.5") && log[0].reason.contains("private"),
        "{:?}",
        log[0]
    );
    assert!(dialed.is_empty(), "{dialed:?}");
}

#[test]
fn the_upstream_proxy_carries_allowed_connections_and_its_403_is_final() {
    let port = server("through-upstream-7731");
    let (up_port, seen) = connect_proxy(port);
    let dir = tempfile::tempdir().expect("tmp");
    let sock = dir.path().join("p.sock");
    let dialer = Arc::new(ToServer {
        port,
        dialed: Mutex::new(Vec::new()),
    });
    let allow: Vec<AllowEntry> = ["registry.example", "denied.example"]
        .iter()
        .map(|h| AllowEntry::parse(&format!("{h}:{port}")).expect("entry"))
        .collect();
    let op = OperatorEgress::parse::<&str>(&[], Some(&format!("http://127.0.0.1:{up_port}")))
        .expect("settings");
    // No resolver given: with an upstream proxy, names are never resolved on this side.
    let proxy = EgressProxy::start(
        ProxyConfig::new(allow, &sock)
            .with_dialer(dialer.clone())
            .with_operator_egress(op),
    )
    .expect("proxy");
    // Plain HTTP, sent through a CONNECT tunnel of the upstream.
    let plain = request(&sock, &get("registry.example", port));
    assert!(plain.ends_with("through-upstream-7731"), "{plain}");
    // CONNECT: a tunnel through the upstream's tunnel.
    let mut c = UnixStream::connect(&sock).expect("connect");
    c.write_all(
        format!(
            "CONNECT registry.example:{port} HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\nGET / HTTP/1.0\r\n\r\n"
        )
        .as_bytes(),
    )
    .expect("write");
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let tunnelled = String::from_utf8_lossy(&out);
    assert!(
        tunnelled.starts_with("HTTP/1.1 200 Connection established"),
        "{tunnelled}"
    );
    assert!(tunnelled.ends_with("through-upstream-7731"), "{tunnelled}");
    // Not on the allowlist: refused here, the upstream never asked.
    let unlisted = request(&sock, &get("other.example", port));
    assert!(unlisted.starts_with("HTTP/1.1 403"), "{unlisted}");
    // The upstream refuses: final, 403 with the reason.
    let denied = request(&sock, &get("denied.example", port));
    assert!(denied.starts_with("HTTP/1.1 403 Forbidden"), "{denied}");
    assert!(
        denied.contains("refused CONNECT denied.example"),
        "{denied}"
    );
    let log = proxy.shutdown();

    let targets = seen.lock().expect("lock").clone();
    let want = format!("registry.example:{port}");
    assert_eq!(
        targets,
        vec![want.clone(), want, format!("denied.example:{port}")],
        "every allowed connection went through the upstream, nothing else did"
    );
    // The only address dialled is the upstream's.
    let up = SocketAddr::from(([127, 0, 0, 1], up_port));
    assert!(dialer.dialed.lock().expect("lock").iter().all(|a| *a == up));
    assert_eq!(log.len(), 4, "{log:?}");
    assert!(
        log[0].allowed && log[0].reason.contains("upstream proxy"),
        "{:?}",
        log[0]
    );
    assert!(log[1].allowed && log[1].bytes_down > 0, "{:?}", log[1]);
    assert!(!log[2].allowed, "{:?}", log[2]);
    assert!(
        !log[3].allowed && log[3].reason.contains("refused by policy"),
        "{:?}",
        log[3]
    );
}

/// A name dialer standing in for the host dialer: `deny.example` is refused by policy (the host's `DENY`),
/// `gone.example` fails (`ERR`).
struct HostLike;

impl NameDialer for HostLike {
    fn dial_name<'a>(
        &'a self,
        host: &'a str,
        _port: u16,
    ) -> BoxFuture<'a, std::io::Result<(tokio::net::TcpStream, String)>> {
        Box::pin(async move {
            if host == "deny.example" {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "the host dialer refused by policy: deny.example resolved (on the host) to 10.0.0.1 (private)",
                ));
            }
            Err(std::io::Error::other(
                "the host dialer refused: connecting failed: refused",
            ))
        })
    }
}

#[test]
fn a_policy_refusal_of_the_far_dialer_is_403_and_a_failure_502() {
    let dir = tempfile::tempdir().expect("tmp");
    let sock = dir.path().join("p.sock");
    let allow = vec![
        AllowEntry::parse("deny.example:80").expect("entry"),
        AllowEntry::parse("gone.example:80").expect("entry"),
    ];
    let proxy =
        EgressProxy::start(ProxyConfig::new(allow, &sock).with_name_dialer(Arc::new(HostLike)))
            .expect("proxy");
    let denied = request(
        &sock,
        "CONNECT deny.example:80 HTTP/1.1\r\nHost: deny.example:80\r\n\r\n",
    );
    assert!(denied.starts_with("HTTP/1.1 403 Forbidden"), "{denied}");
    assert!(denied.contains("10.0.0.1 (private)"), "{denied}");
    let gone = request(
        &sock,
        "GET http://gone.example/ HTTP/1.1\r\nHost: gone.example\r\n\r\n",
    );
    assert!(gone.starts_with("HTTP/1.1 502 Bad Gateway"), "{gone}");
    let log = proxy.shutdown();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        !log[0].allowed && log[0].reason.contains("refused by policy"),
        "{:?}",
        log[0]
    );
    assert!(log[1].reason.contains("connecting failed"), "{:?}", log[1]);
}
