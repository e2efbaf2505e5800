//! The install phase's way out: the trait a runner implements to start an egress proxy on a Unix socket,
//! and the fence's own proxy behind it.

use crate::fence::proxy::{EgressProxy, ProxyConfig, ProxyError, ProxyHandle};
use attestation::verdict::EgressRecord;
use intake::job::AllowEntry;
use job_policy::egress::OperatorEgress;
use std::path::Path;
use std::sync::Arc;

/// A running egress proxy for one install phase.
pub trait EgressSession: Send {
    /// Stops the proxy (closing every connection) and returns every attempt it saw, in order.
    fn finish(self: Box<Self>) -> Vec<EgressRecord>;
}

/// Why the install phase's egress proxy did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressStartError {
    /// The proxy itself could not start (its socket, its runtime).
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// The install network can be started once per run, and it already was.
    #[error("the install phase's network was already used once")]
    AlreadyUsed,
    /// The job channel to the host failed while announcing the install phase.
    #[error("job channel: {0}")]
    Channel(String),
    /// The operator set `[egress]` and this provider cannot apply it (it would be ignored otherwise).
    #[error("the operator's [egress] settings ({0}) cannot be applied by this egress provider")]
    OperatorEgress(String),
}

/// Something that can start the install phase's egress proxy on a Unix socket.
pub trait EgressProvider: Send + Sync {
    /// Starts listening on `socket` with `allow` as the allowlist.
    fn start(
        &self,
        allow: &[AllowEntry],
        socket: &Path,
    ) -> Result<Box<dyn EgressSession>, EgressStartError>;

    /// Starts listening with the operator's `[egress]` settings applied too. A provider that cannot apply them
    /// refuses to start when there are any (never silently without them).
    fn start_with(
        &self,
        allow: &[AllowEntry],
        socket: &Path,
        operator: &OperatorEgress,
    ) -> Result<Box<dyn EgressSession>, EgressStartError> {
        if operator.is_empty() {
            self.start(allow, socket)
        } else {
            Err(EgressStartError::OperatorEgress(
                operator.encode().trim().replace('\n', "; "),
            ))
        }
    }
}

/// What the verdict records of the operator's egress settings (`install.operator_egress`): `None` when there
/// are none.
pub fn operator_record(operator: &OperatorEgress) -> Option<attestation::verdict::OperatorEgress> {
    (!operator.is_empty()).then(|| attestation::verdict::OperatorEgress {
        allow_networks: operator.allow_networks.entries(),
        upstream_proxy: operator.upstream_proxy.as_ref().map(|u| u.url()),
        ca_certificates_sha256: operator.ca_certificates.as_ref().map(|c| c.sha256_hex()),
    })
}

/// The fence's egress proxy ([`super::proxy::EgressProxy`]), with a hook to adjust its configuration
/// (tests inject a resolver that sends an allowed name to a loopback registry).
#[derive(Clone)]
pub struct ProxyEgress {
    configure: Arc<dyn Fn(ProxyConfig) -> ProxyConfig + Send + Sync>,
}

impl ProxyEgress {
    /// The proxy with the system resolver and a plain TCP dialer.
    pub fn system() -> ProxyEgress {
        ProxyEgress {
            configure: Arc::new(|c| c),
        }
    }

    /// The proxy with its configuration passed through `configure` first.
    pub fn with(
        configure: impl Fn(ProxyConfig) -> ProxyConfig + Send + Sync + 'static,
    ) -> ProxyEgress {
        ProxyEgress {
            configure: Arc::new(configure),
        }
    }
}

struct ProxySession(ProxyHandle);

impl EgressSession for ProxySession {
    fn finish(self: Box<Self>) -> Vec<EgressRecord> {
        self.0.shutdown()
    }
}

impl EgressProvider for ProxyEgress {
    fn start(
        &self,
        allow: &[AllowEntry],
        socket: &Path,
    ) -> Result<Box<dyn EgressSession>, EgressStartError> {
        self.start_with(allow, socket, &OperatorEgress::default())
    }

    fn start_with(
        &self,
        allow: &[AllowEntry],
        socket: &Path,
        operator: &OperatorEgress,
    ) -> Result<Box<dyn EgressSession>, EgressStartError> {
        let base = ProxyConfig::new(allow.to_vec(), socket).with_operator_egress(operator.clone());
        let config = (self.configure)(base);
        let handle = EgressProxy::start(config)?;
        Ok(Box::new(ProxySession(handle)))
    }
}
