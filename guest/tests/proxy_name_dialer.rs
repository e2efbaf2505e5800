//! The egress proxy with a name dialer (the `vm` tier's guest, where the host dialer resolves): an allowlisted
//! name goes to the dialer as `host:port` unresolved (the resolver is never asked), a name not on the allowlist
//! never reaches the dialer, and the dialer's refusal is logged. The dialer here connects only to a loopback
//! server, whatever it is asked for.

use guest::fence::proxy::{BoxFuture, EgressProxy, NameDialer, ProxyConfig, Resolver};
use intake::job::AllowEntry;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

struct Recording {
    to: u16,
    asked: Mutex<Vec<(String, u16)>>,
}

impl NameDialer for Recording {
    fn dial_name<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<(tokio::net::TcpStream, String)>> {
        self.asked
            .lock()
            .expect("lock")
            .push((host.to_string(), port));
        Box::pin(async move {
            if host == "refused.example" {
                return Err(std::io::Error::other("the far side refused: test"));
            }
            let s = tokio::net::TcpStream::connect(("127.0.0.1", self.to)).await?;
            Ok((
                s,
                format!("the test dialer, which connected to 127.0.0.1:{}", self.to),
            ))
        })
    }
}

struct NeverAsked(Mutex<u32>);

impl Resolver for NeverAsked {
    fn resolve<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        *self.0.lock().expect("lock") += 1;
        Box::pin(async { Err(std::io::Error::other("must not be asked")) })
    }
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

#[test]
fn allowlisted_names_go_to_the_name_dialer_unresolved_and_others_never_do() {
    let server = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in server.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = [0u8; 2048];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nnamed-1",
            );
        }
    });
    let dir = tempfile::tempdir().expect("tmp");
    let sock = dir.path().join("p.sock");
    let dialer = Arc::new(Recording {
        to: port,
        asked: Mutex::new(Vec::new()),
    });
    let resolver = Arc::new(NeverAsked(Mutex::new(0)));
    let allow = vec![
        AllowEntry::parse("registry.example:80").expect("entry"),
        AllowEntry::parse("refused.example:80").expect("entry"),
    ];
    let proxy = EgressProxy::start(
        ProxyConfig::new(allow, &sock)
            .with_resolver(resolver.clone())
            .with_name_dialer(dialer.clone()),
    )
    .expect("proxy");
    let ok = request(
        &sock,
        "GET http://registry.example/a HTTP/1.1\r\nHost: registry.example\r\nConnection: close\r\n\r\n",
    );
    assert!(ok.ends_with("named-1"), "{ok}");
    let no = request(
        &sock,
        "GET http://other.example/ HTTP/1.1\r\nHost: other.example\r\n\r\n",
    );
    assert!(no.starts_with("HTTP/1.1 403"), "{no}");
    let refused = request(
        &sock,
        "GET http://refused.example/ HTTP/1.1\r\nHost: refused.example\r\n\r\n",
    );
    assert!(refused.starts_with("HTTP/1.1 502"), "{refused}");
    let log = proxy.shutdown();
    assert_eq!(
        *dialer.asked.lock().expect("lock"),
        vec![
            ("registry.example".to_string(), 80),
            ("refused.example".to_string(), 80)
        ]
    );
    assert_eq!(
        *resolver.0.lock().expect("lock"),
        0,
        "the resolver was asked"
    );
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(
        log[0].allowed
            && log[0]
                .reason
                .contains("the test dialer, which connected to")
    );
    assert!(
        !log[1].allowed && log[1].reason.contains("not in the allowlist"),
        "{log:?}"
    );
    assert!(
        log[2].reason.contains("the far side refused: test"),
        "{log:?}"
    );
}
