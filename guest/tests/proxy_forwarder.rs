//! The in-namespace forwarder: TCP on 127.0.0.1 relayed byte for byte to a Unix socket, half-closes carried
//! across, many connections at once on one thread, a clean stop, and the whole chain forwarder -> proxy ->
//! loopback target with the egress log it produces.

mod proxy_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::Duration;

use guest::fence::forwarder;
use proxy_common::*;

/// A Unix-socket echo server.
fn unix_echo(path: &Path) {
    let listener = UnixListener::bind(path).expect("bind unix echo");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut r = conn.try_clone().expect("clone");
                let _ = std::io::copy(&mut r, &mut conn);
                let _ = conn.shutdown(Shutdown::Write);
            });
        }
    });
}

fn tcp(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect forwarder");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

/// Writes `data` on a second thread while reading the echo on this one; returns what came back.
fn echo_roundtrip(mut s: TcpStream, data: Vec<u8>) -> Vec<u8> {
    let mut w = s.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(Shutdown::Write).expect("half close");
    });
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read echo");
    writer.join().expect("writer");
    got
}

#[test]
fn relays_large_transfers_both_ways_and_carries_the_half_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("echo.sock");
    unix_echo(&sock);
    let (addr, stopper, thread) = forwarder::spawn(0, &sock).expect("forwarder");
    assert!(addr.ip().is_loopback());
    let data: Vec<u8> = (0..(3 << 20))
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let got = echo_roundtrip(tcp(addr), data.clone());
    assert_eq!(got.len(), data.len());
    assert!(got == data, "echo differs");
    stopper.stop();
    let stats = thread.join().expect("join").expect("serve");
    assert_eq!(stats.accepted, 1);
    assert_eq!(stats.proxy_unreachable, 0);
    assert_eq!(
        (stats.bytes_up, stats.bytes_down),
        (data.len() as u64, data.len() as u64)
    );
}

#[test]
fn many_connections_at_once_on_one_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("echo.sock");
    unix_echo(&sock);
    let (addr, stopper, thread) = forwarder::spawn(0, &sock).expect("forwarder");
    // Open all first, so that they are relayed concurrently.
    let conns: Vec<TcpStream> = (0..40).map(|_| tcp(addr)).collect();
    let workers: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            std::thread::spawn(move || {
                let data = format!("connection {i} ").repeat(1000).into_bytes();
                (echo_roundtrip(s, data.clone()), data)
            })
        })
        .collect();
    for w in workers {
        let (got, want) = w.join().expect("worker");
        assert!(got == want, "a connection's echo differs");
    }
    stopper.stop();
    let stats = thread.join().expect("join").expect("serve");
    assert_eq!(stats.accepted, 40);
}

#[test]
fn unreachable_proxy_closes_the_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-proxy.sock");
    let (addr, stopper, thread) = forwarder::spawn(0, &missing).expect("forwarder");
    let mut s = tcp(addr);
    let mut buf = [0u8; 16];
    // Closed at once: end of file (or a reset), never data.
    match s.read(&mut buf) {
        Ok(n) => assert_eq!(n, 0),
        Err(e) => assert_ne!(
            e.kind(),
            std::io::ErrorKind::WouldBlock,
            "timed out instead of closing"
        ),
    }
    stopper.stop();
    let stats = thread.join().expect("join").expect("serve");
    assert_eq!((stats.accepted, stats.proxy_unreachable), (1, 1));
}

#[test]
fn stop_closes_open_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("echo.sock");
    unix_echo(&sock);
    let (addr, stopper, thread) = forwarder::spawn(0, &sock).expect("forwarder");
    let mut s = tcp(addr);
    s.write_all(b"before stop").expect("write");
    let mut got = [0u8; 11];
    s.read_exact(&mut got).expect("echo");
    stopper.stop();
    thread.join().expect("join").expect("serve");
    let mut rest = Vec::new();
    // The forwarder closed its side: end of file.
    s.read_to_end(&mut rest).expect("eof after stop");
    assert!(rest.is_empty());
}

#[test]
fn dropping_every_stopper_stops_the_forwarder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("echo.sock");
    let (_addr, stopper, thread) = forwarder::spawn(0, &sock).expect("forwarder");
    drop(stopper);
    let stats = thread.join().expect("join").expect("serve");
    assert_eq!(stats.accepted, 0);
}

#[test]
fn whole_chain_forwarder_proxy_loopback_target() {
    let echo = echo_server();
    let resolver = MapResolver::new(&[("registry.example", &["127.0.0.1"])]);
    let dialer = RecordingDialer::new(&[]);
    let allow = format!("registry.example:{}", echo.port());
    let mut fx = Fixture::start(&[&allow], resolver, dialer.clone(), true);
    let (addr, stopper, thread) = forwarder::spawn(0, &fx.socket).expect("forwarder");

    // What a package manager with HTTPS_PROXY=http://127.0.0.1:<port> does.
    let mut s = tcp(addr);
    write!(
        s,
        "CONNECT registry.example:{0} HTTP/1.1\r\nHost: registry.example:{0}\r\n\r\n",
        echo.port()
    )
    .expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).expect("head");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let payload = vec![7u8; 100_000];
    let got = echo_roundtrip(s, payload.clone());
    assert!(got == payload);

    // And one it must not get.
    let mut s = tcp(addr);
    write!(
        s,
        "CONNECT metadata.example:80 HTTP/1.1\r\nHost: metadata.example:80\r\n\r\n"
    )
    .expect("write");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 403"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    stopper.stop();
    thread.join().expect("join").expect("serve");
    let log = fx.shutdown();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[0].allowed && log[0].host == "registry.example");
    assert_eq!((log[0].bytes_up, log[0].bytes_down), (100_000, 100_000));
    assert!(!log[1].allowed && log[1].host == "metadata.example");
    assert_eq!(dialer.calls().len(), 1);
}
