//! The egress proxy's policy end to end over its Unix socket: allowlist, own resolution, every answer checked
//! before any dial, exact address dialed, Host/URI agreement, keep-alive requests judged one by one, bounded
//! headers, and an egress log with the bytes each way. Targets are loopback listeners only; private and
//! metadata addresses appear only as injected resolver answers, and the recording dialer proves no dial happened.

mod proxy_common;

use std::io::Write;
use std::net::SocketAddr;

use proxy_common::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// CONNECT and read the proxy's answer head.
fn connect(fx: &Fixture, target: &str) -> (std::os::unix::net::UnixStream, Resp) {
    let mut c = fx.client();
    write!(c, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("write");
    let r = read_connect_answer(&mut c);
    (c, r)
}

/// The answer to a CONNECT: a 200 head with no body, or a refusal with a body until close.
fn read_connect_answer(c: &mut std::os::unix::net::UnixStream) -> Resp {
    let r = read_response_head_only(c);
    if r.code == 200 {
        return r;
    }
    let mut rest = read_all(c);
    let mut body = r.body;
    body.append(&mut rest);
    Resp { body, ..r }
}

fn read_response_head_only(c: &mut std::os::unix::net::UnixStream) -> Resp {
    use std::io::Read;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Resp {
        code,
        raw_len: head.len(),
        head,
        body: Vec::new(),
    }
}

#[test]
fn allowed_connect_to_loopback_registry_with_explicit_test_allowance() {
    use std::io::Read;
    let echo = echo_server();
    let resolver = MapResolver::new(&[("registry.example", &["127.0.0.1"])]);
    let dialer = RecordingDialer::new(&[]);
    let allow = format!("registry.example:{}", echo.port());
    let mut fx = Fixture::start(&[&allow], resolver.clone(), dialer.clone(), true);

    let (mut c, r) = connect(&fx, &format!("Registry.EXAMPLE.:{}", echo.port()));
    assert_eq!(r.code, 200, "{}", r.head);
    c.write_all(b"ping through the tunnel").expect("write");
    let mut got = [0u8; 23];
    c.read_exact(&mut got).expect("echo");
    assert_eq!(&got, b"ping through the tunnel");
    c.shutdown(std::net::Shutdown::Write).expect("half close");
    assert!(read_all(&mut c).is_empty());

    assert_eq!(resolver.asked(), vec!["registry.example"]);
    assert_eq!(
        dialer.calls(),
        vec![sa(&format!("127.0.0.1:{}", echo.port()))]
    );
    let log = fx.shutdown();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].host, "registry.example");
    assert_eq!(log[0].port, echo.port());
    assert!(log[0].allowed);
    assert_eq!((log[0].bytes_up, log[0].bytes_down), (23, 23), "{log:?}");
}

#[test]
fn allowed_name_resolving_to_loopback_is_refused_without_the_test_knob() {
    let resolver = MapResolver::new(&[("registry.example", &["127.0.0.1"])]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer.clone(), false);
    let (_c, r) = connect(&fx, "registry.example:443");
    assert_eq!(r.code, 403, "{}", r.head);
    assert!(dialer.calls().is_empty(), "dialed {:?}", dialer.calls());
    let log = fx.shutdown();
    assert_eq!(log.len(), 1);
    assert!(!log[0].allowed);
    assert!(
        log[0].reason.contains("127.0.0.1") && log[0].reason.contains("loopback"),
        "{}",
        log[0].reason
    );
}

#[test]
fn non_allowlisted_name_and_port_are_refused_before_resolution() {
    let resolver = MapResolver::new(&[
        ("other.example", &["93.184.216.34"]),
        ("registry.example", &["93.184.216.34"]),
    ]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(
        &["registry.example:443", "*.cdn.example:443"],
        resolver.clone(),
        dialer.clone(),
        false,
    );
    for target in [
        "other.example:443",
        "registry.example:80",
        "cdn.example:443",
        "evilcdn.example:443",
        "registry.example.evil.example:443",
    ] {
        let (_c, r) = connect(&fx, target);
        assert_eq!(r.code, 403, "{target}: {}", r.head);
        assert!(
            String::from_utf8_lossy(&r.body).contains("not in the allowlist"),
            "{target}"
        );
    }
    assert!(resolver.asked().is_empty(), "asked {:?}", resolver.asked());
    assert!(dialer.calls().is_empty());
    let log = fx.shutdown();
    assert_eq!(log.len(), 5);
    assert!(log
        .iter()
        .all(|r| !r.allowed && r.bytes_up == 0 && r.bytes_down == 0));
}

#[test]
fn wildcard_matches_on_a_label_boundary_and_dials_the_checked_address() {
    let echo = echo_server();
    let public = sa("93.184.216.34:443");
    let resolver = MapResolver::new(&[(
        "a.cdn.example",
        &["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    )]);
    let dialer = RecordingDialer::new(&[(public, echo)]);
    let mut fx = Fixture::start(&["*.cdn.example:443"], resolver, dialer.clone(), false);
    let (_c, r) = connect(&fx, "A.Cdn.Example:443");
    assert_eq!(r.code, 200, "{}", r.head);
    // Exactly the first checked answer, nothing re-resolved, nothing else.
    assert_eq!(dialer.calls(), vec![public]);
    let log = fx.shutdown();
    assert!(
        log[0].allowed && log[0].reason.contains("*.cdn.example:443"),
        "{:?}",
        log[0]
    );
}

#[test]
fn ip_literals_are_refused_unless_listed() {
    let echo = echo_server();
    let listed = sa("93.184.216.34:443");
    let resolver = MapResolver::new(&[]);
    let dialer = RecordingDialer::new(&[(listed, echo)]);
    let mut fx = Fixture::start(
        &["93.184.216.34:443", "registry.example:443"],
        resolver.clone(),
        dialer.clone(),
        false,
    );
    for target in [
        "93.184.216.35:443",
        "[2606:2800:220:1:248:1893:25c8:1946]:443",
        "93.184.216.34:80",
        "1572395042:443",
    ] {
        let (_c, r) = connect(&fx, target);
        assert_eq!(r.code, 403, "{target}: {}", r.head);
    }
    assert!(dialer.calls().is_empty());
    let (_c, r) = connect(&fx, "93.184.216.34:443");
    assert_eq!(r.code, 200, "{}", r.head);
    assert_eq!(dialer.calls(), vec![listed]);
    assert!(resolver.asked().is_empty(), "literals are never resolved");
    let log = fx.shutdown();
    assert_eq!(log.iter().filter(|r| r.allowed).count(), 1);
}

#[test]
fn private_metadata_and_embedded_answers_are_refused_before_any_dial() {
    let bad: &[&str] = &[
        "169.254.169.254",
        "100.100.100.200",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "127.0.0.1",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "64:ff9b::a9fe:a9fe",
        "2002:a00:1::1",
        "fd00:ec2::254",
    ];
    for answer in bad {
        let resolver = MapResolver::new(&[("registry.example", &[answer])]);
        let dialer = RecordingDialer::new(&[]);
        let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer.clone(), false);
        let (_c, r) = connect(&fx, "registry.example:443");
        assert_eq!(r.code, 403, "{answer}: {}", r.head);
        assert!(
            dialer.calls().is_empty(),
            "{answer}: dialed {:?}",
            dialer.calls()
        );
        let log = fx.shutdown();
        assert!(!log[0].allowed, "{answer}");
        let shown: std::net::IpAddr = answer.parse().expect("ip");
        assert!(
            log[0].reason.contains(&shown.to_string()),
            "{answer}: {}",
            log[0].reason
        );
    }
}

#[test]
fn the_test_knob_admits_plain_loopback_only() {
    for answer in [
        "::ffff:127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "64:ff9b::7f00:1",
    ] {
        let resolver = MapResolver::new(&[("registry.example", &[answer])]);
        let dialer = RecordingDialer::new(&[]);
        let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer.clone(), true);
        let (_c, r) = connect(&fx, "registry.example:443");
        assert_eq!(r.code, 403, "{answer}: {}", r.head);
        assert!(dialer.calls().is_empty(), "{answer}");
        fx.shutdown();
    }
}

#[test]
fn one_bad_answer_among_good_ones_refuses_the_name() {
    let resolver = MapResolver::new(&[(
        "registry.example",
        &[
            "93.184.216.34",
            "2606:2800:220:1:248:1893:25c8:1946",
            "10.0.0.1",
        ],
    )]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer.clone(), false);
    let (_c, r) = connect(&fx, "registry.example:443");
    assert_eq!(r.code, 403);
    assert!(dialer.calls().is_empty());
    let log = fx.shutdown();
    assert!(
        log[0].reason.contains("10.0.0.1") && log[0].reason.contains("private"),
        "{}",
        log[0].reason
    );
}

#[test]
fn unresolvable_and_empty_answers_are_refused() {
    let resolver = MapResolver::new(&[("empty.example", &[])]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(
        &["empty.example:443", "nx.example:443"],
        resolver,
        dialer.clone(),
        false,
    );
    let (_c, r) = connect(&fx, "empty.example:443");
    assert_eq!(r.code, 502);
    let (_c, r) = connect(&fx, "nx.example:443");
    assert_eq!(r.code, 502);
    assert!(dialer.calls().is_empty());
    let log = fx.shutdown();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|r| !r.allowed));
}

fn origin_fixture(knob: bool) -> (Origin, Fixture, std::sync::Arc<RecordingDialer>) {
    let origin = Origin::start();
    let resolver = MapResolver::new(&[("registry.example", &["127.0.0.1"])]);
    let dialer = RecordingDialer::new(&[]);
    let allow = format!("registry.example:{}", origin.addr.port());
    let fx = Fixture::start(&[&allow], resolver, dialer.clone(), knob);
    (origin, fx, dialer)
}

#[test]
fn plain_http_get_is_forwarded_in_origin_form_with_exact_byte_counts() {
    let (origin, mut fx, dialer) = origin_fixture(true);
    let port = origin.addr.port();
    let mut c = fx.client();
    write!(c, "GET http://registry.example:{port}/index?x=1 HTTP/1.1\r\nHost: registry.example:{port}\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\nAccept: */*\r\n\r\n")
        .expect("write");
    let r = read_response(&mut c);
    assert_eq!(r.code, 200, "{}", r.head);
    assert_eq!(r.body, ORIGIN_BODY);
    drop(c);
    assert_eq!(dialer.calls(), vec![origin.addr]);
    let log = fx.shutdown();
    let got = origin.wait_received(1);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].head.starts_with("GET /index?x=1 HTTP/1.1\r\n"),
        "{}",
        got[0].head
    );
    let lower = got[0].head.to_ascii_lowercase();
    assert!(
        !lower.contains("proxy-authorization") && !lower.contains("proxy-connection"),
        "{}",
        got[0].head
    );
    assert!(lower.contains("connection: close"));
    assert_eq!(log.len(), 1);
    assert!(log[0].allowed);
    assert_eq!(
        log[0].bytes_up, got[0].total as u64,
        "bytes up = what the origin received"
    );
    assert_eq!(
        log[0].bytes_down, r.raw_len as u64,
        "bytes down = what the client received"
    );
}

#[test]
fn keep_alive_requests_are_each_judged_and_a_smuggled_connect_is_refused() {
    let (origin, mut fx, dialer) = origin_fixture(true);
    let port = origin.addr.port();
    let mut c = fx.client();
    // Two GETs on one connection, the second for a chunked body: both judged, both served.
    write!(
        c,
        "GET http://registry.example:{port}/a HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n"
    )
    .expect("write");
    let r1 = read_response(&mut c);
    assert_eq!((r1.code, r1.body.as_slice()), (200, ORIGIN_BODY));
    assert!(
        r1.head
            .to_ascii_lowercase()
            .contains("connection: keep-alive"),
        "{}",
        r1.head
    );
    write!(c, "GET http://registry.example:{port}/chunked HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n")
        .expect("write");
    let r2 = read_response(&mut c);
    assert_eq!(
        (r2.code, r2.body.as_slice()),
        (200, b"hello, world".as_slice())
    );
    // A GET and a CONNECT in one write: the GET is served, the CONNECT judged on its own and refused.
    write!(
        c,
        "GET http://registry.example:{port}/b HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\nCONNECT metadata.example:80 HTTP/1.1\r\nHost: metadata.example:80\r\n\r\n"
    )
    .expect("write");
    let r3 = read_response(&mut c);
    assert_eq!(r3.code, 200);
    let r4 = read_response(&mut c);
    assert_eq!(r4.code, 403, "{}", r4.head);
    assert!(
        String::from_utf8_lossy(&r4.body).contains("metadata.example:80 is not in the allowlist")
    );
    drop(c);
    assert_eq!(
        dialer.calls().len(),
        3,
        "one dial per allowed request, none for the CONNECT"
    );
    let log = fx.shutdown();
    let got = origin.wait_received(3);
    assert_eq!(got.len(), 3);
    for g in &got {
        assert!(
            !g.head.contains("CONNECT"),
            "smuggled bytes reached the origin: {}",
            g.head
        );
        assert_eq!(
            g.total,
            g.head.len(),
            "the origin received exactly one request head"
        );
    }
    let summary: Vec<(bool, &str)> = log.iter().map(|r| (r.allowed, r.host.as_str())).collect();
    assert_eq!(
        summary,
        vec![
            (true, "registry.example"),
            (true, "registry.example"),
            (true, "registry.example"),
            (false, "metadata.example")
        ]
    );
}

#[test]
fn host_header_must_agree_with_the_uri() {
    let (origin, mut fx, dialer) = origin_fixture(true);
    let port = origin.addr.port();
    let cases = [
        format!("GET http://registry.example:{port}/ HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n"),
        format!("GET http://registry.example:{port}/ HTTP/1.1\r\nHost: registry.example\r\n\r\n"),
        format!("GET http://registry.example:{port}/ HTTP/1.1\r\nAccept: */*\r\n\r\n"),
        format!("GET http://registry.example:{port}/ HTTP/1.1\r\nHost: registry.example:{port}\r\nHost: evil.example\r\n\r\n"),
        format!("GET http://user@registry.example:{port}/ HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n"),
        format!("GET /relative HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n"),
        format!("GET https://registry.example:{port}/ HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n"),
    ];
    for req in &cases {
        let mut c = fx.client();
        c.write_all(req.as_bytes()).expect("write");
        let r = read_response(&mut c);
        assert!(r.code == 403 || r.code == 400, "{req:?}: {}", r.head);
    }
    // Case and a trailing dot do not make a mismatch.
    let mut c = fx.client();
    write!(
        c,
        "GET http://REGISTRY.example:{port}/ HTTP/1.1\r\nHost: registry.example.:{port}\r\n\r\n"
    )
    .expect("write");
    assert_eq!(read_response(&mut c).code, 200);
    drop(c);
    assert_eq!(dialer.calls().len(), 1);
    let log = fx.shutdown();
    assert_eq!(log.len(), cases.len() + 1);
    assert!(log[0].reason.contains("disagrees"), "{}", log[0].reason);
    assert_eq!(origin.wait_received(1).len(), 1);
}

#[test]
fn ambiguous_framing_is_refused() {
    let (origin, mut fx, dialer) = origin_fixture(true);
    let port = origin.addr.port();
    let mut c = fx.client();
    write!(
        c,
        "POST http://registry.example:{port}/ HTTP/1.1\r\nHost: registry.example:{port}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    .expect("write");
    assert_eq!(read_response(&mut c).code, 400);
    assert!(dialer.calls().is_empty());
    fx.shutdown();
}

#[test]
fn request_bodies_are_forwarded_exactly() {
    let (origin, mut fx, _dialer) = origin_fixture(true);
    let port = origin.addr.port();
    let mut c = fx.client();
    write!(
        c,
        "POST http://registry.example:{port}/upload HTTP/1.1\r\nHost: registry.example:{port}\r\nContent-Length: 11\r\n\r\nhello worldGARBAGE\r\n\r\n"
    )
    .expect("write");
    assert_eq!(read_response(&mut c).code, 200);
    // The bytes after the body are not a request: the proxy refuses them as such.
    let r = read_response(&mut c);
    assert_eq!(r.code, 400, "{}", r.head);
    let log = fx.shutdown();
    let got = origin.wait_received(1);
    assert_eq!(got[0].body, b"hello world");
    assert_eq!(got[0].total as u64, log[0].bytes_up);
}

#[test]
fn oversized_headers_are_refused() {
    let resolver = MapResolver::new(&[("registry.example", &["93.184.216.34"])]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer.clone(), false);
    let mut c = fx.client();
    let big = "a".repeat(40 * 1024);
    // The proxy may close before reading everything; a failed write is fine.
    let _ = write!(
        c,
        "CONNECT registry.example:443 HTTP/1.1\r\nX-Big: {big}\r\n\r\n"
    );
    let r = read_response(&mut c);
    assert_eq!(r.code, 431, "{}", r.head);
    assert!(dialer.calls().is_empty());
    let log = fx.shutdown();
    assert_eq!(log.len(), 1);
    assert!(
        !log[0].allowed && log[0].reason.contains("larger than"),
        "{}",
        log[0].reason
    );
}

#[test]
fn malformed_requests_are_logged_and_refused() {
    let resolver = MapResolver::new(&[]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer.clone(), false);
    for req in [
        "CONNECT registry.example HTTP/1.1\r\n\r\n".to_string(),
        "CONNECT registry.example:99999 HTTP/1.1\r\n\r\n".to_string(),
        "CONNECT [::1:443 HTTP/1.1\r\n\r\n".to_string(),
        "\u{1}\u{2}garbage\r\n\r\n".to_string(),
    ] {
        let mut c = fx.client();
        c.write_all(req.as_bytes()).expect("write");
        let r = read_response(&mut c);
        assert_eq!(r.code, 400, "{req:?}: {}", r.head);
    }
    assert!(dialer.calls().is_empty());
    let log = fx.shutdown();
    assert_eq!(log.len(), 4);
}

#[test]
fn shutdown_closes_open_tunnels_and_removes_the_socket() {
    let echo = echo_server();
    let resolver = MapResolver::new(&[("registry.example", &["127.0.0.1"])]);
    let dialer = RecordingDialer::new(&[]);
    let allow = format!("registry.example:{}", echo.port());
    let mut fx = Fixture::start(&[&allow], resolver, dialer, true);
    let (mut c, r) = connect(&fx, &format!("registry.example:{}", echo.port()));
    assert_eq!(r.code, 200);
    c.write_all(b"abc").expect("write");
    let mut got = [0u8; 3];
    std::io::Read::read_exact(&mut c, &mut got).expect("echo");
    let socket = fx.socket.clone();
    let log = fx.shutdown();
    assert!(!socket.exists());
    assert_eq!((log[0].bytes_up, log[0].bytes_down), (3, 3));
    // The tunnel was closed by the shutdown: the client sees end of file.
    assert!(read_all(&mut c).is_empty());
}

#[test]
fn unicode_allow_entries_match_their_idna_form() {
    let echo = echo_server();
    let public = sa("93.184.216.34:443");
    let resolver = MapResolver::new(&[("xn--bcher-kva.example", &["93.184.216.34"])]);
    let dialer = RecordingDialer::new(&[(public, echo)]);
    let mut fx = Fixture::start(
        &["Bücher.Example.:443"],
        resolver.clone(),
        dialer.clone(),
        false,
    );
    let (_c, r) = connect(&fx, "XN--BCHER-KVA.example:443");
    assert_eq!(r.code, 200, "{}", r.head);
    assert_eq!(resolver.asked(), vec!["xn--bcher-kva.example"]);
    assert_eq!(dialer.calls(), vec![public]);
    let log = fx.shutdown();
    assert_eq!(log[0].host, "xn--bcher-kva.example");
}

#[test]
fn chunked_request_bodies_are_forwarded_verbatim() {
    let (origin, mut fx, _dialer) = origin_fixture(true);
    let port = origin.addr.port();
    let mut c = fx.client();
    let body = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    write!(
        c,
        "POST http://registry.example:{port}/up HTTP/1.1\r\nHost: registry.example:{port}\r\nTransfer-Encoding: chunked\r\n\r\n{body}"
    )
    .expect("write");
    assert_eq!(read_response(&mut c).code, 200);
    drop(c);
    let log = fx.shutdown();
    let got = origin.wait_received(1);
    // The origin reads only the head (it does not decode chunks); everything after it is the body as sent.
    assert_eq!(got[0].total - got[0].head.len(), body.len());
    assert_eq!(got[0].total as u64, log[0].bytes_up);
}

#[test]
fn production_resolver_and_dialer_with_a_listed_loopback_literal() {
    use guest::fence::proxy::{EgressProxy, ProxyConfig};
    use std::io::Read;
    // The system resolver is built (not asked: a listed literal is never resolved, and the refused name below
    // is refused before resolution), and the TCP dialer connects to the loopback echo server.
    let echo = echo_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("proxy.sock");
    let allow =
        vec![intake::job::AllowEntry::parse(&format!("127.0.0.1:{}", echo.port())).expect("entry")];
    let handle =
        EgressProxy::start(ProxyConfig::new(allow, &socket).allow_loopback_for_tests(true))
            .expect("proxy with the system resolver");
    let mut c = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    write!(c, "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).expect("write");
    assert!(read_response_head_only(&mut c)
        .head
        .starts_with("HTTP/1.1 200"));
    c.write_all(b"x").expect("write");
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("echo");
    drop(c);
    let mut c = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    write!(c, "CONNECT unlisted.example:443 HTTP/1.1\r\n\r\n").expect("write");
    assert!(read_response_head_only(&mut c)
        .head
        .starts_with("HTTP/1.1 403"));
    let log = handle.shutdown();
    assert_eq!(log.len(), 2);
    assert!(log[0].allowed && log[0].host == "127.0.0.1" && log[0].bytes_up == 1);
    assert!(!log[1].allowed);
}

#[test]
fn client_chosen_text_is_clipped_in_the_log() {
    let resolver = MapResolver::new(&[]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(&["registry.example:443"], resolver, dialer, false);
    let long = format!("{}.example", "a".repeat(5000));
    let (_c, r) = connect(&fx, &format!("{long}:443"));
    assert_eq!(r.code, 403);
    let log = fx.shutdown();
    assert!(
        log[0].host.len() <= 258 && log[0].host.ends_with("..."),
        "{}",
        log[0].host.len()
    );
    assert!(log[0].reason.len() <= 2051, "{}", log[0].reason.len());
}
