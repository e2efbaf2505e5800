//! The operator's upstream HTTP CONNECT proxy (`[egress] upstream_proxy` of the operator's configuration): an
//! allowlisted `host:port`, judged by name on this side, is reached through a `CONNECT host:port` tunnel of that
//! proxy instead of being dialled; the upstream resolves the name. Its `200` opens the tunnel; a `403` is a
//! refusal by the operator's policy (final), anything else a failure.

use std::net::{IpAddr, SocketAddr};

use job_policy::egress::UpstreamProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::conn::{DialError, Shared};

/// Opens a tunnel to `target:port` (`target` already bracketed when it is an IPv6 literal) through `up`.
pub(crate) async fn tunnel(
    shared: &Shared,
    up: &UpstreamProxy,
    target: &str,
    port: u16,
) -> Result<(TcpStream, String), DialError> {
    let limits = &shared.limits;
    let url = up.url();
    let addrs: Vec<SocketAddr> = match up.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, up.port)],
        Err(_) => match tokio::time::timeout(
            limits.resolve_timeout,
            tokio::net::lookup_host((up.host.as_str(), up.port)),
        )
        .await
        {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => {
                return Err(DialError::failed(format!(
                    "resolving the operator's upstream proxy {url}: {e}"
                )))
            }
            Err(_) => {
                return Err(DialError::failed(format!(
                    "resolving the operator's upstream proxy {url}: no answer within {:?}",
                    limits.resolve_timeout
                )))
            }
        },
    };
    let mut errors = Vec::new();
    let mut conn = None;
    for sa in addrs {
        match tokio::time::timeout(limits.connect_timeout, shared.dialer.dial(sa)).await {
            Ok(Ok(s)) => {
                conn = Some((s, sa));
                break;
            }
            Ok(Err(e)) => errors.push(format!("{sa}: {e}")),
            Err(_) => errors.push(format!(
                "{sa}: no answer within {:?}",
                limits.connect_timeout
            )),
        }
    }
    let Some((mut s, sa)) = conn else {
        return Err(DialError::failed(format!(
            "connecting to the operator's upstream proxy {url}: {}",
            if errors.is_empty() {
                "its name has no address".to_string()
            } else {
                errors.join("; ")
            }
        )));
    };
    let request = format!("CONNECT {target}:{port} HTTP/1.1\r\nHost: {target}:{port}\r\n\r\n");
    let exchange = async {
        s.write_all(request.as_bytes()).await?;
        read_head(&mut s, limits.max_header_bytes).await
    };
    let head = match tokio::time::timeout(limits.header_timeout, exchange).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            return Err(DialError::failed(format!(
                "the operator's upstream proxy {url} ({sa}): {e}"
            )))
        }
        Err(_) => {
            return Err(DialError::failed(format!(
                "the operator's upstream proxy {url} ({sa}): no answer to CONNECT within {:?}",
                limits.header_timeout
            )))
        }
    };
    let status_line = head.lines().next().unwrap_or_default();
    let shown =
        attestation::text::escape(&status_line.chars().take(200).collect::<String>()).into_owned();
    let mut parts = status_line.split_whitespace();
    let code = match (parts.next(), parts.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(c))) if v.starts_with("HTTP/1.") => c,
        _ => {
            return Err(DialError::failed(format!(
                "the operator's upstream proxy {url} answered `{shown}`, not an HTTP status"
            )))
        }
    };
    match code {
        200..=299 => Ok((
            s,
            format!("the operator's upstream proxy {url} ({sa}), CONNECT {target}:{port}"),
        )),
        403 => Err(DialError {
            policy: true,
            reason: format!(
                "the operator's upstream proxy {url} refused CONNECT {target}:{port}: `{shown}`"
            ),
        }),
        _ => Err(DialError::failed(format!(
            "the operator's upstream proxy {url} answered CONNECT {target}:{port} with `{shown}`"
        ))),
    }
}

/// Reads a response head up to its blank line, byte by byte (nothing of the tunnel after it is consumed).
async fn read_head(s: &mut TcpStream, max: usize) -> std::io::Result<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && !head.ends_with(b"\n\n") {
        let mut b = [0u8; 1];
        if s.read(&mut b).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before the end of its answer",
            ));
        }
        head.push(b[0]);
        if head.len() > max {
            return Err(std::io::Error::other(format!(
                "an answer head longer than {max} bytes"
            )));
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}
