//! Shared fixtures of the proxy tests: a map resolver, a recording dialer that only ever connects to loopback,
//! loopback origin and echo servers, and a small blocking HTTP client over the proxy's Unix socket.
//! Nothing here can send a packet off this machine: the dialer refuses every non-loopback destination it has
//! not been told to redirect to a loopback listener.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use guest::fence::proxy::{BoxFuture, Dialer, EgressProxy, ProxyConfig, ProxyHandle, Resolver};
use intake::job::AllowEntry;

/// A resolver answering from a fixed map and recording every question.
#[derive(Default)]
pub struct MapResolver {
    pub map: HashMap<String, Vec<IpAddr>>,
    pub asked: Mutex<Vec<String>>,
}

impl MapResolver {
    pub fn new(entries: &[(&str, &[&str])]) -> Arc<Self> {
        let map = entries
            .iter()
            .map(|(n, ips)| {
                (
                    n.to_string(),
                    ips.iter().map(|s| s.parse().expect("test ip")).collect(),
                )
            })
            .collect();
        Arc::new(Self {
            map,
            asked: Mutex::new(Vec::new()),
        })
    }
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("lock").clone()
    }
}

impl Resolver for MapResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.asked.lock().expect("lock").push(name.to_string());
        let r = self.map.get(name).cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name}: NXDOMAIN (test map)"),
            )
        });
        Box::pin(async move { r })
    }
}

/// A dialer that records every address it is asked for and connects only to loopback: directly for loopback
/// addresses, through `redirect` for the public addresses a test stands in for.
#[derive(Default)]
pub struct RecordingDialer {
    pub redirect: HashMap<SocketAddr, SocketAddr>,
    pub calls: Mutex<Vec<SocketAddr>>,
}

impl RecordingDialer {
    pub fn new(redirect: &[(SocketAddr, SocketAddr)]) -> Arc<Self> {
        for (_, to) in redirect {
            assert!(to.ip().is_loopback(), "tests redirect only to loopback");
        }
        Arc::new(Self {
            redirect: redirect.iter().copied().collect(),
            calls: Mutex::new(Vec::new()),
        })
    }
    pub fn calls(&self) -> Vec<SocketAddr> {
        self.calls.lock().expect("lock").clone()
    }
}

impl Dialer for RecordingDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<tokio::net::TcpStream>> {
        self.calls.lock().expect("lock").push(addr);
        let target = if let Some(to) = self.redirect.get(&addr) {
            Some(*to)
        } else if addr.ip().is_loopback() {
            Some(addr)
        } else {
            None
        };
        Box::pin(async move {
            match target {
                Some(t) if t.ip().is_loopback() => tokio::net::TcpStream::connect(t).await,
                _ => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("{addr}: no route in tests"),
                )),
            }
        })
    }
}

/// A running proxy with its temp dir.
pub struct Fixture {
    pub handle: Option<ProxyHandle>,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fixture {
    pub fn start(
        allow: &[&str],
        resolver: Arc<MapResolver>,
        dialer: Arc<RecordingDialer>,
        loopback_for_tests: bool,
    ) -> Fixture {
        Self::start_with(allow, resolver, dialer, loopback_for_tests, |c| c)
    }

    pub fn start_with(
        allow: &[&str],
        resolver: Arc<MapResolver>,
        dialer: Arc<RecordingDialer>,
        loopback_for_tests: bool,
        adjust: impl FnOnce(ProxyConfig) -> ProxyConfig,
    ) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("proxy.sock");
        let allow: Vec<AllowEntry> = allow
            .iter()
            .map(|a| AllowEntry::parse(a).expect("allow entry"))
            .collect();
        let config = ProxyConfig::new(allow, &socket)
            .with_resolver(resolver)
            .with_dialer(dialer)
            .allow_loopback_for_tests(loopback_for_tests);
        let handle = EgressProxy::start(adjust(config)).expect("proxy starts");
        Fixture {
            handle: Some(handle),
            socket,
            _dir: dir,
        }
    }

    pub fn client(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).expect("connect to proxy");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s
    }

    pub fn shutdown(&mut self) -> Vec<attestation::verdict::EgressRecord> {
        self.handle.take().expect("running").shutdown()
    }
}

/// Reads everything until the peer closes.
pub fn read_all(s: &mut UnixStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A response read by the test client.
pub struct Resp {
    pub code: u16,
    pub head: String,
    pub body: Vec<u8>,
    /// Every byte of the response as received.
    pub raw_len: usize,
}

fn read_line(s: &mut impl Read, raw: &mut Vec<u8>) -> Vec<u8> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(1) => {
                raw.push(b[0]);
                line.push(b[0]);
                if b[0] == b'\n' {
                    return line;
                }
            }
            _ => return line,
        }
    }
}

/// Reads one response (Content-Length, chunked, or until close) without reading past it.
pub fn read_response(s: &mut impl Read) -> Resp {
    let mut raw = Vec::new();
    let mut head = String::new();
    loop {
        let line = read_line(s, &mut raw);
        if line.is_empty() {
            break;
        }
        let text = String::from_utf8_lossy(&line).to_string();
        head.push_str(&text);
        if text == "\r\n" {
            break;
        }
    }
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(cl) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
    {
        let n: usize = cl.trim().parse().expect("content-length");
        body.resize(n, 0);
        s.read_exact(&mut body).expect("body");
        raw.extend_from_slice(&body);
    } else if lower.contains("transfer-encoding: chunked") {
        loop {
            let line = read_line(s, &mut raw);
            let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16)
                .expect("chunk size");
            if size == 0 {
                let end = read_line(s, &mut raw);
                assert_eq!(end, b"\r\n");
                break;
            }
            let mut chunk = vec![0u8; size + 2];
            s.read_exact(&mut chunk).expect("chunk");
            raw.extend_from_slice(&chunk);
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        s.read_to_end(&mut body).expect("body to close");
        raw.extend_from_slice(&body);
    }
    Resp {
        code,
        head,
        body,
        raw_len: raw.len(),
    }
}

/// What the origin server received on one connection.
#[derive(Debug, Clone)]
pub struct Received {
    pub head: String,
    pub body: Vec<u8>,
    /// Every byte received on the connection, until the proxy closed it.
    pub total: usize,
}

/// A loopback HTTP origin: answers `/chunked` with a chunked body, `/big/N` with N bytes, anything else with a
/// fixed body, then closes; records what it received.
pub struct Origin {
    pub addr: SocketAddr,
    pub received: Arc<(Mutex<Vec<Received>>, Condvar)>,
}

pub const ORIGIN_BODY: &[u8] = b"hello from the loopback origin\n";

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind origin");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let rec = received.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let rec = rec.clone();
                std::thread::spawn(move || serve_origin(conn, &rec));
            }
        });
        Origin { addr, received }
    }
    /// Waits (at most 20 s) until `n` connections have been recorded, then returns all recorded so far.
    pub fn wait_received(&self, n: usize) -> Vec<Received> {
        let (lock, cv) = &*self.received;
        let guard = lock.lock().expect("lock");
        let (guard, _) = cv
            .wait_timeout_while(guard, Duration::from_secs(20), |v| v.len() < n)
            .expect("lock");
        guard.clone()
    }
}

fn serve_origin(mut conn: TcpStream, rec: &(Mutex<Vec<Received>>, Condvar)) {
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut raw = Vec::new();
    let mut head = String::new();
    loop {
        let line = read_line(&mut conn, &mut raw);
        if line.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&line).to_string();
        head.push_str(&text);
        if text == "\r\n" {
            break;
        }
    }
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(cl) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
    {
        let n: usize = cl.trim().parse().expect("content-length");
        body.resize(n, 0);
        conn.read_exact(&mut body).expect("request body");
        raw.extend_from_slice(&body);
    }
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let result = if path == "/chunked" {
        conn.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n")
    } else if let Some(n) = path.strip_prefix("/big/") {
        let n: usize = n.parse().expect("size");
        let mut r =
            conn.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes());
        let block = vec![b'z'; 1 << 20];
        let mut left = n;
        while r.is_ok() && left > 0 {
            let k = left.min(block.len());
            r = conn.write_all(&block[..k]);
            left -= k;
        }
        r
    } else {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            ORIGIN_BODY.len()
        )
        .into_bytes();
        out.extend_from_slice(ORIGIN_BODY);
        conn.write_all(&out)
    };
    let _ = result;
    let _ = conn.shutdown(std::net::Shutdown::Write);
    // Count whatever else the proxy sends on this connection until it closes (must be nothing).
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
    raw.extend_from_slice(&rest);
    rec.0.lock().expect("lock").push(Received {
        head,
        body,
        total: raw.len(),
    });
    rec.1.notify_all();
}

/// A loopback echo server (the CONNECT target); returns its address.
pub fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut r = conn.try_clone().expect("clone");
                let _ = io::copy(&mut r, &mut conn);
                let _ = conn.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}
