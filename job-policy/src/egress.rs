//! The operator's `[egress]` settings (a host-side file, never the job's): networks the address policy then
//! accepts ([`crate::addr::AllowNetworks`]) and an HTTP CONNECT proxy that the side that dials forwards allowed
//! connections through ([`UpstreamProxy`]). The allowlist is still judged by name before either applies.

use crate::addr::{AllowNetworks, NetworkEntryError};

/// The operator's HTTP CONNECT proxy, `http://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamProxy {
    /// The proxy's host: a name, an IPv4 address or an IPv6 address (without brackets).
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// Why an `upstream_proxy` value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}`: {why} (expected http://HOST:PORT)")]
pub struct UpstreamProxyError {
    /// The value as written.
    pub value: String,
    /// What is wrong.
    pub why: String,
}

impl UpstreamProxy {
    /// Parses `http://HOST:PORT` (a trailing `/` allowed; no path, no user information, no other scheme).
    pub fn parse(value: &str) -> Result<UpstreamProxy, UpstreamProxyError> {
        let err = |why: &str| UpstreamProxyError {
            value: value.to_owned(),
            why: why.to_owned(),
        };
        let rest = value
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case("http://"))
            .map(|_| &value[7..])
            .ok_or_else(|| {
                err("the scheme must be http:// (the proxy is spoken to with CONNECT)")
            })?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('/') || authority.contains('?') || authority.contains('#') {
            return Err(err("a proxy URL has no path"));
        }
        let (host, port) =
            crate::hostport::split_host_port(authority, None).map_err(|e| err(&e.to_string()))?;
        if host.len() > 253
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'))
        {
            return Err(err(
                "the host must be a name or an IP address (letters, digits, `.`, `-`, `_`, `:`)",
            ));
        }
        Ok(UpstreamProxy {
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            port,
        })
    }

    /// `host:port`, an IPv6 address in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.authority())
    }
}

/// The operator's `[egress]` table, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OperatorEgress {
    /// Networks the address policy accepts for allowlisted names.
    pub allow_networks: AllowNetworks,
    /// The HTTP CONNECT proxy allowed connections go through, if any.
    pub upstream_proxy: Option<UpstreamProxy>,
}

/// Why the `[egress]` settings cannot be used: names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EgressSettingError {
    /// An `allow_networks` entry.
    #[error("egress.allow_networks: {0}")]
    Network(#[from] NetworkEntryError),
    /// The `upstream_proxy` value.
    #[error("egress.upstream_proxy: {0}")]
    Upstream(#[from] UpstreamProxyError),
    /// A line of the encoded form that is neither.
    #[error("egress settings: line `{0}` is not `network CIDR` or `upstream URL`")]
    Line(String),
}

impl OperatorEgress {
    /// Parses the table's two keys.
    pub fn parse<S: AsRef<str>>(
        allow_networks: &[S],
        upstream_proxy: Option<&str>,
    ) -> Result<OperatorEgress, EgressSettingError> {
        Ok(OperatorEgress {
            allow_networks: AllowNetworks::parse(allow_networks)?,
            upstream_proxy: upstream_proxy.map(UpstreamProxy::parse).transpose()?,
        })
    }

    /// Whether no setting is in force.
    pub fn is_empty(&self) -> bool {
        self.allow_networks.is_empty() && self.upstream_proxy.is_none()
    }

    /// The settings as text lines (`network CIDR`, `upstream URL`), the form the `vm` tier's job header carries.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for n in self.allow_networks.entries() {
            out.push_str(&format!("network {n}\n"));
        }
        if let Some(u) = &self.upstream_proxy {
            out.push_str(&format!("upstream {}\n", u.url()));
        }
        out
    }

    /// Parses [`OperatorEgress::encode`]'s form, every entry checked again.
    pub fn decode(text: &str) -> Result<OperatorEgress, EgressSettingError> {
        let mut nets = Vec::new();
        let mut upstream = None;
        for line in text.lines().filter(|l| !l.is_empty()) {
            match line.split_once(' ') {
                Some(("network", n)) => nets.push(n),
                Some(("upstream", u)) if upstream.is_none() => upstream = Some(u),
                _ => return Err(EgressSettingError::Line(line.chars().take(80).collect())),
            }
        }
        OperatorEgress::parse(nets.as_slice(), upstream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_proxies_parse_and_odd_ones_are_refused() {
        let u = UpstreamProxy::parse("http://Proxy.Example:3128/").expect("ok");
        assert_eq!((u.host.as_str(), u.port), ("proxy.example", 3128));
        assert_eq!(u.url(), "http://proxy.example:3128");
        let v6 = UpstreamProxy::parse("http://[fd12::1]:8080").expect("v6");
        assert_eq!(v6.authority(), "[fd12::1]:8080");
        for bad in [
            "https://proxy.example:3128",
            "proxy.example:3128",
            "http://proxy.example",
            "http://proxy.example:3128/path",
            "http://user:pw@proxy.example:3128",
            "http://proxy.example:0",
            "http://pro xy.example:80",
            "",
        ] {
            let e = UpstreamProxy::parse(bad).expect_err(bad).to_string();
            assert!(e.starts_with(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn settings_round_trip_through_their_encoded_form() {
        let s = OperatorEgress::parse(&["10.20.0.0/16", "127.0.0.1"], Some("http://10.0.0.5:3128"))
            .expect("parse");
        let text = s.encode();
        assert_eq!(
            text,
            "network 10.20.0.0/16\nnetwork 127.0.0.1/32\nupstream http://10.0.0.5:3128\n"
        );
        assert_eq!(OperatorEgress::decode(&text).expect("decode"), s);
        assert!(OperatorEgress::decode("").expect("empty").is_empty());
        for bad in [
            "network 127.0.0.0/8\n",
            "upstream ftp://x:1\n",
            "other x\n",
            "upstream http://a.example:1\nupstream http://b.example:2\n",
        ] {
            assert!(OperatorEgress::decode(bad).is_err(), "{bad}");
        }
    }
}
