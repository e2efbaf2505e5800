//! The egress proxy of the install phase: allowlist, own resolution, address policy, egress log.
//!
//! It listens on a Unix socket that the fence makes reachable inside the sandbox (through the in-namespace
//! `forwarder`), judges every request (CONNECT or absolute-URI plain HTTP) against the job's
//! allowlist, resolves names itself, checks every answer with [`job_policy::addr`] (with the operator's
//! `allow_networks`) and dials exactly what it checked, or, with the operator's upstream proxy, hands the judged
//! `host:port` to it as a `CONNECT` tunnel. A refusal by policy is answered `403 Forbidden` with the reason.

mod conn;
pub mod net;
pub mod sni;
mod upstream;
pub mod wire;

use std::io;
use std::net::IpAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use attestation::verdict::EgressRecord;
use job_policy::allow::AllowEntry;
use job_policy::egress::OperatorEgress;

pub use net::{BoxFuture, Dialer, NameDialer, Resolver, SystemResolver, TcpDialer};

/// The egress log: every attempt, allowed or refused, in the order the requests arrived.
pub type EgressLog = Vec<EgressRecord>;

/// Size and time limits of the proxy.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyLimits {
    /// Largest request or response header block, in bytes.
    pub max_header_bytes: usize,
    /// Time allowed for a whole request head to arrive (also the keep-alive idle time between requests).
    pub header_timeout: Duration,
    /// Time allowed for resolving a name.
    pub resolve_timeout: Duration,
    /// Time allowed for each connection attempt.
    pub connect_timeout: Duration,
    /// Longest pause in a plain-HTTP body or response before the exchange is abandoned.
    pub io_idle_timeout: Duration,
    /// Most client connections handled at once; more are refused.
    pub max_connections: usize,
    /// Most records kept in the log; attempts past it are counted in one final record.
    pub max_log_records: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            max_header_bytes: 32 * 1024,
            header_timeout: Duration::from_secs(30),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(15),
            io_idle_timeout: Duration::from_secs(120),
            max_connections: 256,
            max_log_records: 10_000,
        }
    }
}

/// Everything the proxy needs: what is allowed, where to listen, and how to reach the network.
#[non_exhaustive]
pub struct ProxyConfig {
    /// The job's `[install] allow` entries.
    pub allow: Vec<AllowEntry>,
    /// The Unix socket to listen on (created by `start`; an existing socket file there is replaced).
    pub socket_path: PathBuf,
    /// Name resolution; `None` means hickory with the system configuration.
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Dialing; `None` means a plain TCP connect.
    pub dialer: Option<Arc<dyn Dialer>>,
    /// Dialing by name (the `vm` tier): when set, allowlisted names are not resolved here but handed as
    /// `host:port` to this dialer, which resolves and checks addresses on its side; IP literals are still
    /// checked against the address policy here first.
    pub name_dialer: Option<Arc<dyn NameDialer>>,
    /// Tests only: accept plain loopback answers (`127.0.0.0/8`, `::1`) for allowlisted names and listed
    /// literals, so that a test registry on loopback can be allowed explicitly. Never set from a job file.
    pub allow_loopback_for_tests: bool,
    /// The operator's `[egress]` settings: `allow_networks` widen the address policy for allowlisted names and
    /// listed literals; `upstream_proxy` takes the place of dialing (not used with a name dialer, whose side
    /// applies it). Never from a job file.
    pub operator: OperatorEgress,
    /// Size and time limits.
    pub limits: ProxyLimits,
}

impl ProxyConfig {
    /// A configuration with the system resolver, the TCP dialer and default limits.
    pub fn new(allow: Vec<AllowEntry>, socket_path: impl Into<PathBuf>) -> Self {
        Self {
            allow,
            socket_path: socket_path.into(),
            resolver: None,
            dialer: None,
            name_dialer: None,
            allow_loopback_for_tests: false,
            operator: OperatorEgress::default(),
            limits: ProxyLimits::default(),
        }
    }

    /// Injects a resolver.
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Injects a dialer.
    pub fn with_dialer(mut self, dialer: Arc<dyn Dialer>) -> Self {
        self.dialer = Some(dialer);
        self
    }

    /// Injects a name dialer (see [`ProxyConfig::name_dialer`]).
    pub fn with_name_dialer(mut self, dialer: Arc<dyn NameDialer>) -> Self {
        self.name_dialer = Some(dialer);
        self
    }

    /// Tests only: see [`ProxyConfig::allow_loopback_for_tests`].
    pub fn allow_loopback_for_tests(mut self, yes: bool) -> Self {
        self.allow_loopback_for_tests = yes;
        self
    }

    /// The operator's egress settings (see [`ProxyConfig::operator`]).
    pub fn with_operator_egress(mut self, operator: OperatorEgress) -> Self {
        self.operator = operator;
        self
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: ProxyLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The socket path exists and is not a socket.
    #[error("{0}: exists and is not a Unix socket; refusing to replace it")]
    PathInUse(PathBuf),
    /// Binding the Unix socket failed.
    #[error("binding {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The runtime or its thread could not be created.
    #[error("starting the proxy runtime: {0}")]
    Runtime(io::Error),
    /// The system resolver configuration could not be read.
    #[error("system resolver: {0}")]
    Resolver(io::Error),
}

/// One log record while the proxy runs: counters shared with the connection that moves the bytes.
struct LiveRecord {
    host: String,
    port: u16,
    allowed: bool,
    reason: String,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

/// The shared, bounded log.
#[derive(Default)]
pub(crate) struct Log {
    records: Mutex<Vec<LiveRecord>>,
    dropped: AtomicU64,
    max: usize,
}

/// Byte counters of one logged attempt.
#[derive(Clone)]
pub(crate) struct Counters {
    pub up: Arc<AtomicU64>,
    pub down: Arc<AtomicU64>,
    /// The record's position in the log (`None` past the log limit).
    pub index: Option<usize>,
}

impl Log {
    fn new(max: usize) -> Self {
        Self {
            records: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            max,
        }
    }

    /// Adds a record and returns its byte counters.
    pub(crate) fn record(&self, host: &str, port: u16, allowed: bool, reason: String) -> Counters {
        let mut c = Counters {
            up: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicU64::new(0)),
            index: None,
        };
        let mut records = match self.records.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if records.len() >= self.max {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            c.index = Some(records.len());
            records.push(LiveRecord {
                host: clip(host, 255),
                port,
                allowed,
                reason: clip(&reason, 2048),
                up: c.up.clone(),
                down: c.down.clone(),
            });
        }
        c
    }

    /// Turns an allowed record into a refused one when the tunnel is closed after a later check.
    pub(crate) fn refuse_after(&self, c: &Counters, why: String) {
        let Some(i) = c.index else { return };
        let mut records = match self.records.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(r) = records.get_mut(i) {
            r.allowed = false;
            r.reason = format!("{}; then closed: {why}", r.reason);
        }
    }

    fn snapshot(&self) -> EgressLog {
        let records = match self.records.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut out: EgressLog = records
            .iter()
            .map(|r| EgressRecord {
                host: r.host.clone(),
                port: r.port,
                allowed: r.allowed,
                reason: r.reason.clone(),
                bytes_up: r.up.load(Ordering::Relaxed),
                bytes_down: r.down.load(Ordering::Relaxed),
            })
            .collect();
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            out.push(EgressRecord {
                host: String::new(),
                port: 0,
                allowed: false,
                reason: format!(
                    "{dropped} further attempts not logged (log limit {} reached)",
                    self.max
                ),
                bytes_up: 0,
                bytes_down: 0,
            });
        }
        out
    }
}

/// At most `max` bytes of `s` (on a character boundary), marked when cut: client-chosen text stays small in the log.
fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The resolver of a proxy with a name dialer: never asked (names are not resolved on this side).
struct NoResolver;

impl Resolver for NoResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            Err(io::Error::other(format!(
                "{name}: this proxy does not resolve names (its name dialer does)"
            )))
        })
    }
}

/// The egress proxy.
pub struct EgressProxy;

impl EgressProxy {
    /// Binds the Unix socket and starts the proxy on its own thread with its own tokio runtime; returns once it
    /// is listening.
    pub fn start(config: ProxyConfig) -> Result<ProxyHandle, ProxyError> {
        let path = config.socket_path.clone();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() => {
                std::fs::remove_file(&path).map_err(|source| ProxyError::Bind {
                    path: path.clone(),
                    source,
                })?
            }
            Ok(_) => return Err(ProxyError::PathInUse(path)),
            Err(_) => {}
        }
        let std_listener =
            std::os::unix::net::UnixListener::bind(&path).map_err(|source| ProxyError::Bind {
                path: path.clone(),
                source,
            })?;
        std_listener
            .set_nonblocking(true)
            .map_err(|source| ProxyError::Bind {
                path: path.clone(),
                source,
            })?;

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ProxyError::Runtime)?;
        let (listener, resolver) = {
            let _guard = rt.enter();
            let listener = tokio::net::UnixListener::from_std(std_listener).map_err(|source| {
                ProxyError::Bind {
                    path: path.clone(),
                    source,
                }
            })?;
            let resolver: Arc<dyn Resolver> = match (config.resolver, &config.name_dialer) {
                (Some(r), _) => r,
                // Names go to the name dialer unresolved; there may be no resolver configuration here at all.
                (None, Some(_)) => Arc::new(NoResolver),
                // Names go to the operator's upstream proxy unresolved.
                (None, None) if config.operator.upstream_proxy.is_some() => Arc::new(NoResolver),
                (None, None) => {
                    Arc::new(SystemResolver::from_system_conf().map_err(ProxyError::Resolver)?)
                }
            };
            (listener, resolver)
        };
        let dialer: Arc<dyn Dialer> = config.dialer.unwrap_or_else(|| Arc::new(TcpDialer));
        let log = Arc::new(Log::new(config.limits.max_log_records.max(1)));
        let shared = Arc::new(conn::Shared {
            allow: config.allow,
            resolver,
            dialer,
            name_dialer: config.name_dialer,
            loopback_for_tests: config.allow_loopback_for_tests,
            networks: config.operator.allow_networks,
            upstream: config.operator.upstream_proxy,
            limits: config.limits,
            log: log.clone(),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("egress-proxy".into())
            .spawn(move || {
                rt.block_on(conn::accept_loop(listener, shared, stop_rx));
                // Dropping the runtime cancels every connection still open.
                drop(rt);
            })
            .map_err(ProxyError::Runtime)?;
        Ok(ProxyHandle {
            stop: Some(stop_tx),
            thread: Some(thread),
            log,
            socket_path: path,
        })
    }
}

/// A running proxy; [`ProxyHandle::shutdown`] stops it and returns the log.
pub struct ProxyHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    log: Arc<Log>,
    socket_path: PathBuf,
}

impl ProxyHandle {
    /// The Unix socket the proxy listens on.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The log so far, with byte counts as of now.
    pub fn snapshot(&self) -> EgressLog {
        self.log.snapshot()
    }

    /// Stops accepting, closes every open connection, removes the socket file and returns the whole log.
    pub fn shutdown(mut self) -> EgressLog {
        self.stop_now();
        self.log.snapshot()
    }

    fn stop_now(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}
