//! The proxy's ways out to the network, behind traits so that tests can inject their own: name resolution
//! (default: hickory from the system configuration) and dialing (default: a plain TCP connect to exactly the
//! address given), or, where this side cannot resolve (the `vm` tier's guest), a [`NameDialer`] that hands the
//! judged `host:port` to a dialer that resolves and checks addresses on its own side.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use tokio::net::TcpStream;

/// A boxed, sendable future (the traits below are object-safe so that tests can inject them).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves a host name to every A and AAAA answer.
pub trait Resolver: Send + Sync + 'static {
    /// All addresses `name` (normalised, ASCII, no trailing dot) resolves to; an empty list is allowed and refused
    /// by the proxy.
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// Opens a TCP connection to exactly the address the proxy checked.
pub trait Dialer: Send + Sync + 'static {
    /// Connects to `addr`; must never resolve or substitute another address in production.
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// Opens a TCP connection to an allowlisted `host:port` through a dialer that resolves the name itself and applies
/// its own address policy (the `vm` tier: the host's dialer behind QEMU's guestfwd). The proxy has judged the
/// name against the allowlist first; no resolution happens on this side.
pub trait NameDialer: Send + Sync + 'static {
    /// Connects to `host:port`; the `String` says what the far side connected to (for the egress log).
    fn dial_name<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<(TcpStream, String)>>;
}

/// The default resolver: hickory with the system configuration (`/etc/resolv.conf`, `/etc/hosts`).
pub struct SystemResolver {
    inner: hickory_resolver::TokioAsyncResolver,
}

impl SystemResolver {
    /// Reads the system configuration; must be called inside a tokio runtime.
    pub fn from_system_conf() -> io::Result<Self> {
        let inner =
            hickory_resolver::TokioAsyncResolver::tokio_from_system_conf().map_err(|e| {
                io::Error::other(format!("reading the system resolver configuration: {e}"))
            })?;
        Ok(Self { inner })
    }
}

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            // A trailing dot makes the name absolute: no search-domain suffixes are tried.
            let fqdn = format!("{name}.");
            let answers = self
                .inner
                .lookup_ip(fqdn.as_str())
                .await
                .map_err(|e| io::Error::other(e.to_string()))?;
            Ok(answers.iter().collect())
        })
    }
}

/// The default dialer: `TcpStream::connect` to the one address given.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpDialer;

impl Dialer for TcpDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(async move {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok(s)
        })
    }
}
