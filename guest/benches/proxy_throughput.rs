//! Egress proxy throughput: one large download (256 MiB by default, `PROXY_BENCH_MIB` to change) from a loopback
//! origin, directly, through the proxy's Unix socket (CONNECT tunnel and plain-HTTP GET), and through the whole
//! install-phase path (TCP to the forwarder, Unix socket to the proxy, TCP to the origin).
//! Run: `cargo bench -p guest --bench proxy_throughput`.

#[path = "../tests/proxy_common/mod.rs"]
#[allow(missing_docs)]
mod proxy_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;

use criterion::{criterion_main, Criterion, Throughput};
use guest::fence::forwarder;
use proxy_common::{read_response, Fixture, MapResolver, Origin, RecordingDialer};

fn size() -> usize {
    let mib: usize = std::env::var("PROXY_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    mib << 20
}

/// Reads and discards exactly `n` bytes.
fn sink(r: &mut impl Read, mut n: usize) {
    let mut buf = vec![0u8; 256 * 1024];
    while n > 0 {
        let k = r.read(&mut buf[..n.min(256 * 1024)]).expect("read body");
        assert!(k > 0, "body ended {n} bytes short");
        n -= k;
    }
}

/// Reads a response head byte by byte (small), returns it.
fn head(r: &mut impl Read) -> String {
    let mut h = Vec::new();
    let mut b = [0u8; 1];
    while !h.ends_with(b"\r\n\r\n") {
        r.read_exact(&mut b).expect("head");
        h.push(b[0]);
    }
    String::from_utf8_lossy(&h).into_owned()
}

fn get_direct(origin: SocketAddr, n: usize) {
    let mut s = TcpStream::connect(origin).expect("connect origin");
    write!(s, "GET /big/{n} HTTP/1.1\r\nHost: registry.example\r\n\r\n").expect("write");
    let h = head(&mut s);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    sink(&mut s, n);
}

/// CONNECT, then a GET inside the tunnel (as an HTTPS client does, minus TLS).
fn get_tunnel<S: Read + Write>(mut s: S, port: u16, n: usize) {
    write!(
        s,
        "CONNECT registry.example:{port} HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n"
    )
    .expect("write");
    let h = head(&mut s);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    write!(s, "GET /big/{n} HTTP/1.1\r\nHost: registry.example\r\n\r\n").expect("write");
    let h = head(&mut s);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    sink(&mut s, n);
}

fn get_plain(socket: &Path, port: u16, n: usize) {
    let mut s = UnixStream::connect(socket).expect("connect proxy");
    write!(s, "GET http://registry.example:{port}/big/{n} HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n")
        .expect("write");
    let h = head(&mut s);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    sink(&mut s, n);
}

fn bench(c: &mut Criterion) {
    let n = size();
    let origin = Origin::start();
    let port = origin.addr.port();
    let resolver = MapResolver::new(&[("registry.example", &["127.0.0.1"])]);
    let allow = format!("registry.example:{port}");
    // The system dialer path is what runs in production; the recording dialer connects the same way on loopback.
    let fx = Fixture::start(&[&allow], resolver, RecordingDialer::new(&[]), true);
    let (fwd, stopper, thread) = forwarder::spawn(0, &fx.socket).expect("forwarder");

    // Sanity: the plain-HTTP path answers a small request correctly before timing anything.
    {
        let mut s = UnixStream::connect(&fx.socket).expect("connect proxy");
        write!(
            s,
            "GET http://registry.example:{port}/ HTTP/1.1\r\nHost: registry.example:{port}\r\n\r\n"
        )
        .expect("write");
        assert_eq!(read_response(&mut s).code, 200);
    }

    let mut g = c.benchmark_group("egress_proxy_download");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(n as u64));
    g.bench_function("direct_tcp", |b| b.iter(|| get_direct(origin.addr, n)));
    g.bench_function("proxy_connect_unix", |b| {
        b.iter(|| {
            get_tunnel(
                UnixStream::connect(&fx.socket).expect("connect proxy"),
                port,
                n,
            )
        })
    });
    g.bench_function("proxy_plain_http_unix", |b| {
        b.iter(|| get_plain(&fx.socket, port, n))
    });
    g.bench_function("forwarder_then_proxy_connect", |b| {
        b.iter(|| get_tunnel(TcpStream::connect(fwd).expect("connect forwarder"), port, n))
    });
    g.finish();

    stopper.stop();
    let _ = thread.join();
}

/// The criterion group (the macro's generated function carries no doc of its own).
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}

criterion_main!(group::benches);
