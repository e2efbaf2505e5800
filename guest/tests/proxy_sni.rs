//! Domain fronting through an allowed CONNECT: the TLS server name in the ClientHello must be the CONNECT host.
//! ClientHellos are built here byte by byte (RFC 8446 layout); the targets are loopback echo servers reached
//! through the recording dialer's redirect, so nothing leaves the machine.

mod proxy_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use guest::fence::proxy::sni::{inspect, Hello};
use proptest::prelude::*;
use proxy_common::*;

fn u16b(n: usize) -> [u8; 2] {
    u16::try_from(n).expect("fits u16").to_be_bytes()
}

/// A ClientHello handshake message (type, 24-bit length, body) with an optional server name.
fn client_hello(server_name: Option<&str>) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0x03, 0x03]);
    body.extend_from_slice(&[0x42; 32]);
    body.push(32);
    body.extend_from_slice(&[0x17; 32]);
    body.extend_from_slice(&u16b(4));
    body.extend_from_slice(&[0x13, 0x01, 0x13, 0x02]);
    body.extend_from_slice(&[1, 0]);
    let mut exts = Vec::new();
    // supported_versions: TLS 1.3.
    exts.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    if let Some(name) = server_name {
        let mut entry = vec![0u8];
        entry.extend_from_slice(&u16b(name.len()));
        entry.extend_from_slice(name.as_bytes());
        let mut list = u16b(entry.len()).to_vec();
        list.extend_from_slice(&entry);
        exts.extend_from_slice(&[0x00, 0x00]);
        exts.extend_from_slice(&u16b(list.len()));
        exts.extend_from_slice(&list);
    }
    body.extend_from_slice(&u16b(exts.len()));
    body.extend_from_slice(&exts);
    let mut msg = vec![0x01, 0, 0, 0];
    let len = u32::try_from(body.len()).expect("len").to_be_bytes();
    msg[1..4].copy_from_slice(&len[1..4]);
    msg.extend_from_slice(&body);
    msg
}

/// The handshake message in TLS records of at most `max` bytes each.
fn records(msg: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in msg.chunks(max) {
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&u16b(chunk.len()));
        out.extend_from_slice(chunk);
    }
    out
}

#[test]
fn inspect_table() {
    let hello = records(&client_hello(Some("Registry.Example")), 16384);
    assert_eq!(
        inspect(&hello),
        Hello::ServerName(Some("Registry.Example".into()))
    );
    assert_eq!(
        inspect(&records(&client_hello(None), 16384)),
        Hello::ServerName(None)
    );
    // Split over three records, and over TCP segments: every prefix needs more, the whole decides.
    let split = records(&client_hello(Some("registry.example")), 40);
    for cut in 0..split.len() {
        assert_eq!(inspect(&split[..cut]), Hello::NeedMore, "prefix {cut}");
    }
    assert_eq!(
        inspect(&split),
        Hello::ServerName(Some("registry.example".into()))
    );
    assert_eq!(inspect(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
    assert_eq!(inspect(b"SSH-2.0-client\r\n"), Hello::NotTls);
    // Malformed: not a ClientHello, a bad record, an extension longer than its container.
    let mut not_hello = client_hello(Some("a.example"));
    not_hello[0] = 0x02;
    assert!(matches!(
        inspect(&records(&not_hello, 16384)),
        Hello::Malformed(_)
    ));
    assert!(matches!(
        inspect(&[0x16, 0x03, 0x01, 0x00, 0x00]),
        Hello::Malformed(_)
    ));
    let mut bad_ext = client_hello(Some("a.example"));
    let n = bad_ext.len();
    bad_ext[n - 11] = 0xff; // the host_name length's high byte
    assert!(
        matches!(inspect(&records(&bad_ext, 16384)), Hello::Malformed(_)),
        "{:?}",
        inspect(&records(&bad_ext, 16384))
    );
}

proptest! {
    #[test]
    fn inspect_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4096), tls in any::<bool>()) {
        let mut b = bytes;
        if tls && b.len() > 2 {
            b[0] = 0x16;
            b[1] = 0x03;
        }
        let _ = inspect(&b);
    }
}

fn fronting_fixture() -> (Fixture, SocketAddr) {
    let echo = echo_server();
    let public = "93.184.216.34:443".parse().expect("addr");
    let resolver = MapResolver::new(&[("registry.example", &["93.184.216.34"])]);
    let dialer = RecordingDialer::new(&[(public, echo)]);
    (
        Fixture::start(&["registry.example:443"], resolver, dialer, false),
        echo,
    )
}

fn connect_ok(fx: &Fixture) -> std::os::unix::net::UnixStream {
    let mut c = fx.client();
    c.write_all(b"CONNECT registry.example:443 HTTP/1.1\r\nHost: registry.example:443\r\n\r\n")
        .expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut b).expect("head");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    c
}

#[test]
fn matching_server_name_passes_through() {
    let (mut fx, _) = fronting_fixture();
    let mut c = connect_ok(&fx);
    let hello = records(&client_hello(Some("REGISTRY.example.")), 100);
    c.write_all(&hello).expect("write");
    let mut got = vec![0u8; hello.len()];
    c.read_exact(&mut got).expect("echo of the hello");
    assert_eq!(got, hello);
    drop(c);
    let log = fx.shutdown();
    assert!(log[0].allowed, "{:?}", log[0]);
    assert_eq!(log[0].bytes_up, hello.len() as u64);
}

#[test]
fn fronted_server_name_closes_the_tunnel_before_a_byte_goes_up() {
    let (mut fx, _) = fronting_fixture();
    let mut c = connect_ok(&fx);
    c.write_all(&records(&client_hello(Some("evil.example")), 16384))
        .expect("write");
    // Closed with nothing echoed: the hello never reached the server.
    assert!(read_all(&mut c).is_empty());
    let log = fx.shutdown();
    assert!(!log[0].allowed);
    assert!(
        log[0].reason.contains("evil.example") && log[0].reason.contains("domain fronting"),
        "{}",
        log[0].reason
    );
    assert_eq!(log[0].bytes_up, 0);
}

#[test]
fn a_server_that_speaks_first_is_heard_before_the_client_sends() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let banner_addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            s.write_all(b"SSH-2.0-loopback\r\n").expect("banner");
            let mut r = s.try_clone().expect("clone");
            let _ = std::io::copy(&mut r, &mut s);
        }
    });
    let public = "93.184.216.34:22".parse().expect("addr");
    let resolver = MapResolver::new(&[("git.example", &["93.184.216.34"])]);
    let dialer = RecordingDialer::new(&[(public, banner_addr)]);
    let mut fx = Fixture::start(&["git.example:22"], resolver, dialer, false);
    let mut c = fx.client();
    c.write_all(b"CONNECT git.example:22 HTTP/1.1\r\n\r\n")
        .expect("write");
    let mut buf = vec![0u8; 39 + 18];
    c.read_exact(&mut buf).expect("200 then the banner");
    assert!(buf.starts_with(b"HTTP/1.1 200 Connection established\r\n\r\n"));
    assert!(buf.ends_with(b"SSH-2.0-loopback\r\n"));
    c.write_all(b"SSH-2.0-client\r\n").expect("write");
    let mut echo = [0u8; 16];
    c.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"SSH-2.0-client\r\n");
    drop(c);
    let log = fx.shutdown();
    assert!(log[0].allowed);
    assert_eq!(log[0].bytes_up, 16);
    assert_eq!(log[0].bytes_down, 18 + 16);
}
