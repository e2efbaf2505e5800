//! Stage 1: receive. What the input is (a directory or an archive), whether it is within the size limit,
//! and whether a repository given as a URL points at an address the address policy refuses. Names are
//! resolved (through an injectable [`Resolver`]) but nothing is fetched.

use crate::addr;
use crate::job::{HostName, RepoUrl, MAX_JOB_FILE_BYTES};
use crate::report::IntakeLimits;
use crate::unpack::{self, ArchiveFormat, OpenedArchive};
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;

/// Resolves host names for the repository-URL check; tests inject their own.
pub trait Resolver: Send + Sync {
    /// Every address `host` resolves to.
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>>;

    /// Whether names are resolved only when a connection is made, by what dials it (a guest, which has no
    /// resolver of its own: the host dialer resolves and checks every answer against the same address policy):
    /// [`check_repository_url`] then checks IP literals only.
    fn at_connect(&self) -> bool {
        false
    }
}

/// The resolver of a guest (`vm` and confidential tiers): names are resolved and their addresses checked by
/// the host dialer when the fetch connects, never here.
#[derive(Debug, Clone, Copy, Default)]
pub struct AtConnect;

impl Resolver for AtConnect {
    fn resolve(&self, host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
        Err(io::Error::other(format!(
            "{host}: names are resolved when the connection is made, not here"
        )))
    }

    fn at_connect(&self) -> bool {
        true
    }
}

/// The system resolver (`getaddrinfo` through the standard library).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok((host, port).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// What the input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BundleKind {
    /// A directory holding `job.toml`.
    Directory,
    /// An archive of that format.
    Archive(ArchiveFormat),
    /// A job file on its own (`fenced-run run JOB.toml`): what it names is read in place, relative to its
    /// directory, under the same rules as inside a bundle.
    JobFile,
}

/// A received bundle.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Received {
    /// Directory or archive.
    pub kind: BundleKind,
    /// The archive's bytes, held so that every later pass reads the same bytes (`None` for a directory).
    pub bytes: Option<Vec<u8>>,
}

/// Why stage 1 did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    /// The input cannot be used at all (exit 2).
    #[error("unusable input: {0}")]
    Unusable(String),
    /// The input is refused (exit 1).
    #[error("{0}")]
    Refused(String),
}

/// Stage 1 on the input path: its kind and size.
pub fn receive(input: &Path, limits: &IntakeLimits) -> Result<Received, ReceiveError> {
    let meta = std::fs::metadata(input)
        .map_err(|e| ReceiveError::Unusable(format!("{}: {e}", input.display())))?;
    if meta.is_dir() {
        return Ok(Received {
            kind: BundleKind::Directory,
            bytes: None,
        });
    }
    if !meta.is_file() {
        return Err(ReceiveError::Unusable(format!(
            "{}: neither a directory nor a regular file",
            input.display()
        )));
    }
    if meta.len() > limits.max_bundle_bytes {
        return Err(ReceiveError::Refused(format!(
            "bundle is {} bytes, more than max_bundle_bytes = {}",
            meta.len(),
            limits.max_bundle_bytes
        )));
    }
    let bytes = unpack::read_limited(input, limits.max_bundle_bytes)
        .map_err(|e| ReceiveError::Unusable(format!("{}: {e}", input.display())))?
        .ok_or_else(|| {
            ReceiveError::Refused(format!(
                "bundle grew past max_bundle_bytes = {} while being read",
                limits.max_bundle_bytes
            ))
        })?;
    let Some(format) = ArchiveFormat::detect(&bytes) else {
        if input.extension().is_some_and(|e| e == "toml") {
            if bytes.len() as u64 > MAX_JOB_FILE_BYTES {
                return Err(ReceiveError::Refused(format!(
                    "job file is {} bytes, more than {MAX_JOB_FILE_BYTES}",
                    bytes.len()
                )));
            }
            return Ok(Received {
                kind: BundleKind::JobFile,
                bytes: Some(bytes),
            });
        }
        return Err(ReceiveError::Unusable(format!(
            "{}: not a bundle (a directory, .tar, .tar.gz or .zip) nor a job file (.toml)",
            input.display()
        )));
    };
    Ok(Received {
        kind: BundleKind::Archive(format),
        bytes: Some(bytes),
    })
}

/// Why a repository URL's host is refused; each names the host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepoUrlError {
    /// The resolver failed for the name.
    #[error("repository host `{host}` does not resolve: {source}")]
    DoesNotResolve {
        /// The name.
        host: String,
        /// What the resolver said.
        source: io::Error,
    },
    /// The resolver gave no address.
    #[error("repository host `{host}` resolves to no address")]
    NoAddress {
        /// The name.
        host: String,
    },
    /// An answer (or the IP literal) is not a public address.
    #[error("repository host `{host}` resolves to {}: {}", refused.addr, refused.why)]
    Refused {
        /// The host as written in the URL (normalised).
        host: HostName,
        /// The address policy's refusal.
        refused: addr::Refused,
    },
}

/// Checks a repository URL's host against the address policy with the operator's `allow_networks` (the rule
/// the egress proxy applies, [`addr::check_with`]): an IP literal directly, a name through the resolver (every
/// answer must pass; a name that does not resolve is refused). Returns the addresses. Nothing is fetched.
pub fn check_repository_url(
    url: &RepoUrl,
    resolver: &dyn Resolver,
    networks: &addr::AllowNetworks,
) -> Result<Vec<IpAddr>, RepoUrlError> {
    let addrs = match &url.host {
        HostName::Ip(ip) => vec![*ip],
        HostName::Name(_) if resolver.at_connect() => Vec::new(),
        HostName::Name(n) => {
            let a =
                resolver
                    .resolve(n, url.port)
                    .map_err(|source| RepoUrlError::DoesNotResolve {
                        host: n.clone(),
                        source,
                    })?;
            if a.is_empty() {
                return Err(RepoUrlError::NoAddress { host: n.clone() });
            }
            a
        }
    };
    for ip in &addrs {
        addr::check_with(*ip, networks).map_err(|refused| RepoUrlError::Refused {
            host: url.host.clone(),
            refused,
        })?;
    }
    Ok(addrs)
}

/// The bytes of the bundle's `job.toml`, if they can be found cheaply: a directory's, a lone job file's own,
/// or through the [`OpenedArchive`] (a zip's central directory, a tar whose headers pass the bounded raw
/// check); `None` otherwise (stage 3 reads it from intake's copy).
pub fn peek_job(
    input: &Path,
    received: &Received,
    archive: Option<&OpenedArchive<'_>>,
) -> Option<Vec<u8>> {
    match (&received.kind, &received.bytes) {
        (BundleKind::Directory, _) => {
            let p = input.join("job.toml");
            let m = std::fs::symlink_metadata(&p).ok()?;
            if !m.is_file() {
                return None;
            }
            unpack::read_limited(&p, MAX_JOB_FILE_BYTES).ok().flatten()
        }
        (BundleKind::JobFile, Some(bytes)) => Some(bytes.clone()),
        (BundleKind::Archive(_), Some(_)) => archive?.peek_file("job.toml"),
        _ => None,
    }
}
