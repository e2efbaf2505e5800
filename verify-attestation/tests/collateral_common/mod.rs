//! A loopback fake of AMD's KDS and Intel's PCS for the collateral tests: a plain HTTP/1.1 server on
//! 127.0.0.1 answering routes (path and query) with scripted replies (status, headers, body, a delay before
//! answering, a body cut short), counting the requests per route, serving the real vectors' certificates and
//! collateral from $FENCED_RUN_VECTORS. Nothing leaves loopback.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wait this long before answering (a slow server).
    pub delay: Duration,
    /// Send only this many body bytes (Content-Length still says the whole), then close.
    pub cut_at: Option<usize>,
}

impl Reply {
    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![],
            body: body.into(),
            delay: Duration::ZERO,
            cut_at: None,
        }
    }
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::ok(format!("status {status}"))
        }
    }
    pub fn header(mut self, n: &str, v: &str) -> Reply {
        self.headers.push((n.into(), v.into()));
        self
    }
    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
    pub fn cut(mut self, n: usize) -> Reply {
        self.cut_at = Some(n);
        self
    }
}

#[derive(Default)]
struct State {
    /// Route -> replies; the first is served and removed while more than one remain.
    routes: HashMap<String, Vec<Reply>>,
    hits: HashMap<String, usize>,
}

/// The running server; stopped (and its thread joined) on drop.
pub struct FakeServer {
    pub base: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub fn start() -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut workers = Vec::new();
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                workers.push(std::thread::spawn(move || serve(conn, &st)));
            }
            for w in workers {
                let _ = w.join();
            }
        });
        FakeServer {
            base: format!("http://{addr}"),
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// Sets the replies of a route (`/path?query`): served in order, the last one repeated.
    pub fn route(&self, route: &str, replies: Vec<Reply>) {
        self.state
            .lock()
            .expect("state")
            .routes
            .insert(route.into(), replies);
    }

    /// Requests seen for a route.
    pub fn hits(&self, route: &str) -> usize {
        *self
            .state
            .lock()
            .expect("state")
            .hits
            .get(route)
            .unwrap_or(&0)
    }

    /// Requests seen in all.
    pub fn total_hits(&self) -> usize {
        self.state.lock().expect("state").hits.values().sum()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.base.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
    }
    let reply = {
        let mut s = state.lock().expect("state");
        *s.hits.entry(target.clone()).or_insert(0) += 1;
        match s.routes.get_mut(&target) {
            Some(v) if v.len() > 1 => Some(v.remove(0)),
            Some(v) => v.first().cloned(),
            None => None,
        }
    }
    .unwrap_or_else(|| Reply::status(404));
    if !reply.delay.is_zero() {
        std::thread::sleep(reply.delay);
    }
    let mut conn = conn;
    let reason = match reply.status {
        200 => "OK",
        404 => "Not Found",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let body = match reply.cut_at {
        Some(n) => &reply.body[..n.min(reply.body.len())],
        None => &reply.body[..],
    };
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body);
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

/// The vectors directory, or None after a `vectors` skip (a failure with FENCED_RUN_REQUIRE_VECTORS=1).
pub fn vectors() -> Option<PathBuf> {
    let dir = std::env::var_os("FENCED_RUN_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"));
    if dir.join("snp").is_dir() && dir.join("tdx").is_dir() {
        return Some(dir);
    }
    attestation::vectors::skip(&format!(
        "no test vectors at {} (set FENCED_RUN_VECTORS)",
        dir.display()
    ));
    None
}

pub fn read(p: impl AsRef<std::path::Path>) -> Vec<u8> {
    let p = p.as_ref();
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The PCS routes of a TDX vector's collateral, served as PCS v4 answers (body + issuer chain header).
pub struct PcsVector {
    pub quote: Vec<u8>,
    pub collateral_json: Vec<u8>,
    pub fmspc: String,
    pub reference_time: i64,
    pub file: serde_json::Value,
}

pub fn tdx_vector(vectors: &std::path::Path, name: &str) -> PcsVector {
    let dir = vectors.join("tdx").join(name);
    let exp: serde_json::Value =
        serde_json::from_slice(&read(dir.join("expected.json"))).expect("expected.json");
    let cj = read(dir.join("collateral.json"));
    PcsVector {
        quote: read(dir.join("quote.bin")),
        file: serde_json::from_slice(&cj).expect("collateral.json"),
        collateral_json: cj,
        fmspc: exp["pck_cert"]["fmspc"]
            .as_str()
            .expect("fmspc")
            .to_string(),
        reference_time: exp["reference_time_unix"].as_i64().expect("reference time"),
    }
}

pub fn enc(pem: &str) -> String {
    percent_encoding::utf8_percent_encode(pem, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub const TCB_ROUTE_PREFIX: &str = "/tdx/certification/v4/tcb?fmspc=";
pub const QE_ROUTE: &str = "/tdx/certification/v4/qe/identity?update=standard";
pub const PCK_CRL_ROUTE: &str = "/sgx/certification/v4/pckcrl?ca=platform&encoding=der";
pub const ROOT_CRL_ROUTE: &str = "/root/IntelSGXRootCA.der";

pub fn tcb_route(fmspc: &str) -> String {
    format!("{TCB_ROUTE_PREFIX}{fmspc}&update=standard")
}

impl PcsVector {
    fn s(&self, k: &str) -> String {
        self.file[k].as_str().expect(k).to_string()
    }
    pub fn tcb_reply(&self) -> Reply {
        Reply::ok(format!(
            "{{\"tcbInfo\":{},\"signature\":\"{}\"}}",
            self.s("tcb_info"),
            self.s("tcb_info_signature")
        ))
        .header(
            "TCB-Info-Issuer-Chain",
            &enc(&self.s("tcb_info_issuer_chain")),
        )
    }
    pub fn qe_reply(&self) -> Reply {
        Reply::ok(format!(
            "{{\"enclaveIdentity\":{},\"signature\":\"{}\"}}",
            self.s("qe_identity"),
            self.s("qe_identity_signature")
        ))
        .header(
            "SGX-Enclave-Identity-Issuer-Chain",
            &enc(&self.s("qe_identity_issuer_chain")),
        )
    }
    pub fn pck_crl_reply(&self) -> Reply {
        Reply::ok(hex::decode(self.s("pck_crl")).expect("hex")).header(
            "SGX-PCK-CRL-Issuer-Chain",
            &enc(&self.s("pck_crl_issuer_chain")),
        )
    }
    pub fn root_crl_reply(&self) -> Reply {
        Reply::ok(hex::decode(self.s("root_ca_crl")).expect("hex"))
    }
    /// Serves every part on `srv`.
    pub fn serve_all(&self, srv: &FakeServer) {
        srv.route(&tcb_route(&self.fmspc), vec![self.tcb_reply()]);
        srv.route(QE_ROUTE, vec![self.qe_reply()]);
        srv.route(PCK_CRL_ROUTE, vec![self.pck_crl_reply()]);
        srv.route(ROOT_CRL_ROUTE, vec![self.root_crl_reply()]);
    }
}

/// A fast client for tests: short timeouts, retries with no long waits.
pub fn client(timeout: Duration, retries: u32) -> verifier_lib::collateral::http::Client {
    verifier_lib::collateral::http::Client::new(verifier_lib::collateral::http::HttpOptions {
        connect_timeout: timeout,
        timeout,
        max_retries: retries,
        max_retry_wait: Duration::from_secs(5),
        backoff: Duration::from_millis(50),
        max_body: 1 << 20,
        proxy: None,
        no_proxy: vec![],
    })
    .expect("client")
}

pub fn pcs<'a>(
    http: &'a verifier_lib::collateral::http::Client,
    srv: &FakeServer,
    cache: Option<&'a verifier_lib::collateral::cache::Cache>,
) -> verifier_lib::collateral::pcs::Pcs<'a> {
    verifier_lib::collateral::pcs::Pcs {
        http,
        base: srv.base.clone(),
        root_crl_url: Some(format!("{}{ROOT_CRL_ROUTE}", srv.base)),
        update: Default::default(),
        cache,
    }
}

pub fn kds<'a>(
    http: &'a verifier_lib::collateral::http::Client,
    srv: &FakeServer,
    cache: Option<&'a verifier_lib::collateral::cache::Cache>,
) -> verifier_lib::collateral::kds::Kds<'a> {
    verifier_lib::collateral::kds::Kds {
        http,
        base: srv.base.clone(),
        cache,
        allow_simulated: false,
    }
}

/// KDS routes for an SEV-SNP vector (cert_chain and its VCEK), returned: (report, cert_chain route, vcek route).
pub fn serve_snp(
    srv: &FakeServer,
    vectors: &std::path::Path,
    name: &str,
    product: &str,
) -> (Vec<u8>, String, String) {
    let dir = vectors.join("snp").join(name);
    let report = read(dir.join("report.bin"));
    let exp: serde_json::Value =
        serde_json::from_slice(&read(dir.join("expected.json"))).expect("expected");
    let chain = [read(dir.join("ask.pem")), read(dir.join("ark.pem"))].concat();
    let chain_route = format!("/vcek/v1/{product}/cert_chain");
    srv.route(&chain_route, vec![Reply::ok(chain)]);
    let t = &exp["reported_tcb_decoded"];
    let vcek_route = format!(
        "/vcek/v1/{product}/{}?blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
        exp["fields"]["chip_id"].as_str().expect("chip"),
        t["bootloader"].as_u64().expect("bl"),
        t["tee"].as_u64().expect("tee"),
        t["snp"].as_u64().expect("snp"),
        t["microcode"].as_u64().expect("ucode"),
    );
    srv.route(&vcek_route, vec![Reply::ok(read(dir.join("vcek.der")))]);
    (report, chain_route, vcek_route)
}

/// Runs the verify-attestation binary; (exit code, stdout, stderr).
pub fn cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
        .args(args)
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .expect("run verify-attestation");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
