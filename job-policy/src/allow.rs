//! The allowlist's and the repository URL's host names: [`HostName`] (a name or IP literal in canonical form),
//! [`AllowEntry`] (one `[install] allow` entry, `host:port`, `*.suffix:port` or `[v6]:port`) and [`RepoUrl`].
//! The job loader, intake stage 1 and the egress proxy all normalise and match hosts here.

use crate::hostport::{split_host_port, HostPortError};
use serde::{Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;

/// Why a host, an allow entry or a repository URL was refused; the message names the text as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The `host:port` split failed.
    #[error(transparent)]
    HostPort(#[from] HostPortError),
    /// Nothing left once a trailing dot is removed.
    #[error("`{0}`: empty host name")]
    EmptyName(String),
    /// `a..b`, or two trailing dots.
    #[error("`{0}`: empty label")]
    EmptyLabel(String),
    /// Not a host name under IDNA's strict rules.
    #[error("`{0}` is not a valid (IDNA) host name")]
    NotIdna(String),
    /// Empty or longer than 253 bytes as ASCII.
    #[error("`{0}`: host name length out of range")]
    Length(String),
    /// Digits and dots only, or a hex last label (`127.1`, `0x7f.1`): an address in an odd spelling.
    #[error("`{0}` looks like a numeric address in a non-standard spelling")]
    OddNumeric(String),
    /// `*.` in front of an IP address.
    #[error("`{0}`: a wildcard over an IP address")]
    WildcardIp(String),
    /// `*.` in front of a single label.
    #[error(
        "`{0}`: a wildcard needs at least two labels after `*.` (not a whole top-level domain)"
    )]
    WildcardTld(String),
    /// `*` anywhere but as the whole first label.
    #[error("`{0}`: `*` is allowed only as a whole first label (`*.suffix`)")]
    StrayStar(String),
    /// A URL scheme this project does not know.
    #[error("unsupported URL scheme `{0}`")]
    UnsupportedScheme(String),
    /// A URL scheme with characters no scheme has.
    #[error("`{0}` has an invalid scheme")]
    InvalidScheme(String),
    /// `scheme://` with no host after it.
    #[error("URL has no host")]
    NoHost,
    /// A `repository.url` the fence does not fetch (scheme, credentials, query...); the text names why.
    #[error("{0}")]
    FetchUrl(String),
}

/// A repository given as a URL rather than a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RepoUrl {
    /// The scheme, lowercase (`https`, `http`, `git`, `ssh`).
    pub scheme: String,
    /// The host, normalised like an allow entry.
    pub host: HostName,
    /// The port given, or the scheme's default.
    pub port: u16,
}

impl RepoUrl {
    /// Parses the part of a URL after `scheme://` for a scheme this project knows.
    pub fn parse_authority(scheme: &str, rest: &str) -> Result<RepoUrl, HostError> {
        parse_url_authority(scheme, rest)
    }
}

fn parse_url_authority(scheme: &str, rest: &str) -> Result<RepoUrl, HostError> {
    let default_port = match scheme {
        "https" | "git+https" => 443,
        "http" | "git+http" => 80,
        "git" => 9418,
        "ssh" | "git+ssh" => 22,
        other => return Err(HostError::UnsupportedScheme(other.to_owned())),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = match authority.rsplit_once('@') {
        Some((_, h)) => h,
        None => authority,
    };
    if hostport.is_empty() {
        return Err(HostError::NoHost);
    }
    let (host, port) = split_host_port(hostport, Some(default_port))?;
    Ok(RepoUrl {
        scheme: scheme.to_string(),
        host: HostName::parse(host)?,
        port,
    })
}

/// A host name or IP literal in canonical form: lowercase, no trailing dot, IDNA (punycode) ASCII.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostName {
    /// A DNS name.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl HostName {
    /// Normalises a host as written in an allow entry, a URL or a CONNECT request (brackets around IPv6 allowed).
    pub fn parse(host: &str) -> Result<HostName, HostError> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(HostName::Ip(ip));
        }
        let trimmed = bare.strip_suffix('.').unwrap_or(bare);
        if trimmed.is_empty() {
            return Err(HostError::EmptyName(host.to_owned()));
        }
        if trimmed.ends_with('.') || trimmed.contains("..") {
            return Err(HostError::EmptyLabel(host.to_owned()));
        }
        let ascii = idna::domain_to_ascii_strict(trimmed)
            .map_err(|_| HostError::NotIdna(host.to_owned()))?;
        if ascii.is_empty() || ascii.len() > 253 {
            return Err(HostError::Length(host.to_owned()));
        }
        // A name made only of digits and dots is an IPv4 literal in some odd spelling (`0x7f.1`, `127.1`):
        // resolvers read these as addresses, so they are refused rather than treated as names.
        let last = ascii.rsplit('.').next().unwrap_or_default();
        if last.bytes().all(|b| b.is_ascii_digit())
            || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(HostError::OddNumeric(host.to_owned()));
        }
        Ok(HostName::Name(ascii))
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostName::Name(n) => f.write_str(n),
            HostName::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            HostName::Ip(a) => write!(f, "{a}"),
        }
    }
}

impl Serialize for HostName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The host part of an allow entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllowHost {
    /// Exactly this name.
    Exact(String),
    /// `*.suffix`: any name with at least one more label in front of `suffix` (never `suffix` itself).
    Suffix(String),
    /// An IP literal, allowed only because it is listed.
    Ip(IpAddr),
}

/// One `[install] allow` entry: `host:port`, `*.suffix:port` or `[v6]:port`, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AllowEntry {
    /// The host part.
    pub host: AllowHost,
    /// The one port allowed.
    pub port: u16,
}

impl AllowEntry {
    /// Parses and normalises an entry (lowercase, trailing dot stripped, IDNA, port required).
    pub fn parse(text: &str) -> Result<AllowEntry, HostError> {
        let (host, port) = split_host_port(text.trim(), None)?;
        let host = if let Some(suffix) = host.strip_prefix("*.") {
            match HostName::parse(suffix)? {
                HostName::Ip(_) => return Err(HostError::WildcardIp(text.to_owned())),
                HostName::Name(n) => {
                    if !n.contains('.') {
                        return Err(HostError::WildcardTld(text.to_owned()));
                    }
                    AllowHost::Suffix(n)
                }
            }
        } else if host.contains('*') {
            return Err(HostError::StrayStar(text.to_owned()));
        } else {
            match HostName::parse(host)? {
                HostName::Name(n) => AllowHost::Exact(n),
                HostName::Ip(ip) => AllowHost::Ip(ip),
            }
        };
        Ok(AllowEntry { host, port })
    }

    /// Whether a request for `host:port` (as a client wrote it; normalised here) is allowed by this entry.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        match HostName::parse(host) {
            Ok(h) => self.matches_normal(&h),
            Err(_) => false,
        }
    }

    /// Like [`AllowEntry::matches`] without the port, for an already normalised host.
    pub fn matches_normal(&self, host: &HostName) -> bool {
        match (&self.host, host) {
            (AllowHost::Exact(a), HostName::Name(b)) => a == b,
            (AllowHost::Suffix(s), HostName::Name(b)) => b
                .strip_suffix(s.as_str())
                .is_some_and(|front| front.len() > 1 && front.ends_with('.')),
            (AllowHost::Ip(a), HostName::Ip(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            AllowHost::Exact(n) => write!(f, "{n}:{}", self.port),
            AllowHost::Suffix(n) => write!(f, "*.{n}:{}", self.port),
            AllowHost::Ip(IpAddr::V6(a)) => write!(f, "[{a}]:{}", self.port),
            AllowHost::Ip(a) => write!(f, "{a}:{}", self.port),
        }
    }
}

impl Serialize for AllowEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
