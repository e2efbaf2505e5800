//! The one `host:port` parser: allow entries, repository URLs, CONNECT targets, absolute-URI authorities and
//! `Host` headers are all split here, so the loader and the egress proxy can never read one text two ways.

/// Why an authority (`host:port`, `[v6]:port`, or `host` with a default port) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostPortError {
    /// `[` without its `]`.
    #[error("`{0}`: unclosed `[`")]
    UnclosedBracket(String),
    /// Something other than `:port` after `]`.
    #[error("`{0}`: junk after `]`")]
    JunkAfterBracket(String),
    /// More than one `:` outside brackets.
    #[error("`{0}`: an IPv6 address must be written in brackets, `[addr]:port`")]
    UnbracketedV6(String),
    /// Nothing before the port.
    #[error("`{0}`: empty host")]
    EmptyHost(String),
    /// `user@` in front of the host.
    #[error("`{0}`: user information in the authority")]
    UserInfo(String),
    /// The port is not 1 to 5 decimal digits.
    #[error("`{text}`: port `{port}` is not a decimal number")]
    PortNotDecimal {
        /// The whole authority.
        text: String,
        /// The port as written.
        port: String,
    },
    /// The port is 0 or above 65535.
    #[error("`{text}`: port `{port}` is not from 1 to 65535")]
    PortOutOfRange {
        /// The whole authority.
        text: String,
        /// The port as written.
        port: String,
    },
    /// No port and no default.
    #[error("`{0}`: a port is required (`host:port`)")]
    PortRequired(String),
}

/// Splits an authority `host:port`, `[v6]:port` or `host` (the port optional only when `default_port` is
/// given) into the host (brackets removed) and the port. The port must be decimal digits from 1 to 65535; an
/// empty host, user information (`@`) and an IPv6 address outside brackets are refused.
pub fn split_host_port(s: &str, default_port: Option<u16>) -> Result<(&str, u16), HostPortError> {
    let (host, port) = if let Some(inner) = s.strip_prefix('[') {
        let (h, after) = inner
            .split_once(']')
            .ok_or_else(|| HostPortError::UnclosedBracket(s.to_owned()))?;
        match after {
            "" => (h, None),
            p => match p.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None => return Err(HostPortError::JunkAfterBracket(s.to_owned())),
            },
        }
    } else if s.matches(':').count() > 1 {
        return Err(HostPortError::UnbracketedV6(s.to_owned()));
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err(HostPortError::EmptyHost(s.to_owned()));
    }
    if host.contains('@') {
        return Err(HostPortError::UserInfo(s.to_owned()));
    }
    let port = match (port, default_port) {
        (Some(p), _) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HostPortError::PortNotDecimal {
                    text: s.to_owned(),
                    port: p.to_owned(),
                });
            }
            match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(HostPortError::PortOutOfRange {
                        text: s.to_owned(),
                        port: p.to_owned(),
                    })
                }
            }
        }
        (None, Some(d)) => d,
        (None, None) => return Err(HostPortError::PortRequired(s.to_owned())),
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_refuses() {
        assert_eq!(
            split_host_port("a.example:443", None),
            Ok(("a.example", 443))
        );
        assert_eq!(split_host_port("[::1]:80", None), Ok(("::1", 80)));
        assert_eq!(
            split_host_port("a.example", Some(9418)),
            Ok(("a.example", 9418))
        );
        for (bad, err) in [
            ("a.example", HostPortError::PortRequired("a.example".into())),
            ("::1:80", HostPortError::UnbracketedV6("::1:80".into())),
            ("[::1", HostPortError::UnclosedBracket("[::1".into())),
            ("[::1]x", HostPortError::JunkAfterBracket("[::1]x".into())),
            (":80", HostPortError::EmptyHost(":80".into())),
            (
                "u@a.example:80",
                HostPortError::UserInfo("u@a.example:80".into()),
            ),
        ] {
            assert_eq!(split_host_port(bad, None), Err(err), "{bad}");
        }
        for bad in ["a.example:+80", "a.example:", "a.example:123456"] {
            assert!(matches!(
                split_host_port(bad, None),
                Err(HostPortError::PortNotDecimal { .. })
            ));
        }
        for bad in ["a.example:0", "a.example:65536"] {
            assert!(matches!(
                split_host_port(bad, None),
                Err(HostPortError::PortOutOfRange { .. })
            ));
        }
    }
}
