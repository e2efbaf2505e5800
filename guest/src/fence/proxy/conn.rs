//! One client connection of the egress proxy: every request on it is judged on its own (allowlist, resolution,
//! address policy), then tunnelled (CONNECT) or forwarded (plain HTTP) to exactly the address that was checked,
//! and logged with the bytes moved each way.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use job_policy::addr::{self, AllowNetworks};
use job_policy::allow::{AllowEntry, HostName};
use job_policy::egress::UpstreamProxy;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::sni;
use super::wire::{self, BufIn, HeadError, RequestHead};
use super::{Counters, Dialer, Log, NameDialer, ProxyLimits, Resolver};

/// State shared by every connection.
pub(crate) struct Shared {
    pub allow: Vec<AllowEntry>,
    pub resolver: Arc<dyn Resolver>,
    pub dialer: Arc<dyn Dialer>,
    pub name_dialer: Option<Arc<dyn NameDialer>>,
    pub loopback_for_tests: bool,
    /// The operator's `allow_networks`.
    pub networks: AllowNetworks,
    /// The operator's upstream CONNECT proxy (ignored with a name dialer, whose side applies it).
    pub upstream: Option<UpstreamProxy>,
    pub limits: ProxyLimits,
    pub log: Arc<Log>,
}

/// Accepts until told to stop.
pub(crate) async fn accept_loop(
    listener: UnixListener,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections.max(1)));
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors or similar: back off instead of spinning on the error.
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                };
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            handle(stream, &shared).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        let reason = format!("more than {} connections at once", shared.limits.max_connections);
                        shared.log.record("", 0, false, reason.clone());
                        let mut stream = stream;
                        let _ = respond(&mut stream, 503, "Service Unavailable", &reason).await;
                    }
                }
            }
        }
    }
}

/// A refusal: the status sent to the client and the reason logged.
struct Refusal {
    status: u16,
    reason: String,
}

impl Refusal {
    fn forbidden(reason: String) -> Self {
        Self {
            status: 403,
            reason,
        }
    }
}

/// What the judge allowed: the normalised host, the entry that allowed it, and the checked addresses.
struct Allowed {
    host: String,
    name: HostName,
    entry: String,
    addrs: Vec<IpAddr>,
}

fn status_text(code: u16) -> &'static str {
    match code {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

async fn respond<W: AsyncWrite + Unpin>(
    w: &mut W,
    code: u16,
    text: &str,
    reason: &str,
) -> std::io::Result<()> {
    let body = format!("fenced-run egress proxy: {reason}\n");
    let head = format!(
        "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let send = async {
        w.write_all(head.as_bytes()).await?;
        w.write_all(body.as_bytes()).await?;
        w.flush().await
    };
    // A client that reads nothing cannot hold the connection open through an error answer.
    match tokio::time::timeout(std::time::Duration::from_secs(10), send).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "client not reading",
        )),
    }
}

async fn refuse<W: AsyncWrite + Unpin>(w: &mut W, log: &Log, host: &str, port: u16, r: Refusal) {
    log.record(host, port, false, r.reason.clone());
    let _ = respond(w, r.status, status_text(r.status), &r.reason).await;
}

/// Serves one client connection: requests one after another until one is refused, a tunnel ends, or either
/// side closes.
async fn handle(stream: UnixStream, shared: &Shared) {
    let (rd, mut wr) = stream.into_split();
    let mut input = BufIn::new(rd);
    let limits = &shared.limits;
    loop {
        let head = match input
            .read_request(limits.max_header_bytes, limits.header_timeout)
            .await
        {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(e) => {
                let status = match e {
                    HeadError::TooLarge(_) => 431,
                    HeadError::Timeout(_) => 408,
                    _ => 400,
                };
                // A connection closed before any request is not an attempt; anything else is logged.
                refuse(
                    &mut wr,
                    &shared.log,
                    "",
                    0,
                    Refusal {
                        status,
                        reason: format!("unreadable request: {e}"),
                    },
                )
                .await;
                return;
            }
        };
        if head.method.eq_ignore_ascii_case("CONNECT") {
            connect(head, input, wr, shared).await;
            return;
        }
        match forward(&head, &mut input, &mut wr, shared).await {
            Ok(true) => continue,
            Ok(false) => return,
            Err(()) => return,
        }
    }
}

/// Judges `host:port` as the client wrote it: allowlist, resolution, every answer against the address policy.
async fn judge(shared: &Shared, host_text: &str, port: u16) -> Result<Allowed, (String, Refusal)> {
    let host = match HostName::parse(host_text) {
        Ok(h) => h,
        Err(e) => {
            return Err((
                host_text.to_string(),
                Refusal::forbidden(format!("bad host name: {e}")),
            ))
        }
    };
    let shown = host.to_string();
    let Some(entry) = shared
        .allow
        .iter()
        .find(|e| e.port == port && e.matches_normal(&host))
    else {
        let reason = match host {
            HostName::Ip(ip) => {
                format!("IP literal {ip} port {port} is not listed in the allowlist")
            }
            _ => format!("{shown}:{port} is not in the allowlist"),
        };
        return Err((shown, Refusal::forbidden(reason)));
    };
    let addrs = match &host {
        HostName::Ip(ip) => vec![*ip],
        // Resolution happens on the name dialer's side, which applies its own address policy, or on the
        // operator's upstream proxy, which is handed the name.
        HostName::Name(_) if shared.name_dialer.is_some() || shared.upstream.is_some() => {
            return Ok(Allowed {
                name: host,
                host: shown,
                entry: entry.to_string(),
                addrs: Vec::new(),
            })
        }
        HostName::Name(name) => {
            match tokio::time::timeout(shared.limits.resolve_timeout, shared.resolver.resolve(name))
                .await
            {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => {
                    return Err((
                        shown.clone(),
                        Refusal {
                            status: 502,
                            reason: format!("resolving {shown}: {e}"),
                        },
                    ))
                }
                Err(_) => {
                    let reason = format!(
                        "resolving {shown}: no answer within {:?}",
                        shared.limits.resolve_timeout
                    );
                    return Err((
                        shown,
                        Refusal {
                            status: 504,
                            reason,
                        },
                    ));
                }
            }
        }
    };
    if addrs.is_empty() {
        return Err((
            shown.clone(),
            Refusal {
                status: 502,
                reason: format!("{shown} has no A or AAAA answer"),
            },
        ));
    }
    let mut bad = Vec::new();
    for ip in &addrs {
        if let Err(why) = check_addr(*ip, shared.loopback_for_tests, &shared.networks) {
            bad.push(why);
        }
    }
    if !bad.is_empty() {
        let all: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
        let reason = format!(
            "{shown} resolved to [{}]; refused because every answer must pass the address policy: {}",
            all.join(", "),
            bad.join("; ")
        );
        return Err((shown, Refusal::forbidden(reason)));
    }
    Ok(Allowed {
        name: host,
        host: shown,
        entry: entry.to_string(),
        addrs,
    })
}

/// The address policy ([`job_policy::addr`]) with the operator's `allow_networks`, and the one test-only
/// exception: plain loopback when the knob is set.
fn check_addr(
    ip: IpAddr,
    loopback_for_tests: bool,
    networks: &AllowNetworks,
) -> Result<(), String> {
    match addr::check_with(ip, networks) {
        Ok(()) => Ok(()),
        Err(_) if loopback_for_tests && ip.is_loopback() => Ok(()),
        Err(r) => Err(r.to_string()),
    }
}

/// Why dialing an allowlisted target did not give a connection.
pub(crate) struct DialError {
    /// A refusal by policy (the far dialer's address policy, the operator's upstream proxy answering 403): final,
    /// answered `403 Forbidden` and logged as refused. Otherwise a failure (`502 Bad Gateway`).
    pub(super) policy: bool,
    /// What happened.
    pub(super) reason: String,
}

impl DialError {
    pub(super) fn failed(reason: String) -> Self {
        Self {
            policy: false,
            reason,
        }
    }
}

/// `host:port` of a judged target as a CONNECT target or a name dialer's request (an IPv6 literal in brackets).
fn target_of(allowed: &Allowed) -> String {
    match &allowed.name {
        HostName::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => allowed.host.clone(),
    }
}

/// Dials the checked addresses in order, each with the connect timeout; the first that answers is used. With a
/// name dialer, the judged host and port go to it instead (IP literals too: the far side checks them again);
/// with the operator's upstream proxy, a `CONNECT host:port` tunnel through it. Returns the stream and what it
/// is connected to, for the log.
async fn dial(
    shared: &Shared,
    allowed: &Allowed,
    port: u16,
) -> Result<(TcpStream, String), DialError> {
    if let Some(nd) = &shared.name_dialer {
        let target = target_of(allowed);
        return match tokio::time::timeout(
            shared.limits.connect_timeout,
            nd.dial_name(&target, port),
        )
        .await
        {
            Ok(Ok((s, via))) => Ok((s, via)),
            Ok(Err(e)) => Err(DialError {
                policy: e.kind() == std::io::ErrorKind::PermissionDenied,
                reason: format!("{target}:{port}: {e}"),
            }),
            Err(_) => Err(DialError::failed(format!(
                "{target}:{port}: no answer from the dialer within {:?}",
                shared.limits.connect_timeout
            ))),
        };
    }
    if let Some(up) = &shared.upstream {
        return super::upstream::tunnel(shared, up, &target_of(allowed), port).await;
    }
    let mut errors = Vec::new();
    for ip in &allowed.addrs {
        let sa = SocketAddr::new(*ip, port);
        match tokio::time::timeout(shared.limits.connect_timeout, shared.dialer.dial(sa)).await {
            Ok(Ok(s)) => return Ok((s, sa.to_string())),
            Ok(Err(e)) => errors.push(format!("{sa}: {e}")),
            Err(_) => errors.push(format!(
                "{sa}: no answer within {:?}",
                shared.limits.connect_timeout
            )),
        }
    }
    Err(DialError::failed(errors.join("; ")))
}

/// A dial that gave no connection: a policy refusal is logged refused and answered 403 (final: a client does not
/// retry it), a failure logged with its reason and answered 502.
async fn dial_failed<W: AsyncWrite + Unpin>(
    w: &mut W,
    log: &Log,
    allowed: &Allowed,
    port: u16,
    e: DialError,
) {
    if e.policy {
        let reason = format!(
            "allowlisted by {}, but refused by policy: {}",
            allowed.entry, e.reason
        );
        log.record(&allowed.host, port, false, reason.clone());
        let _ = respond(w, 403, "Forbidden", &reason).await;
    } else {
        let reason = format!(
            "allowlisted by {}, but connecting failed: {}",
            allowed.entry, e.reason
        );
        log.record(&allowed.host, port, true, reason.clone());
        let _ = respond(w, 502, "Bad Gateway", &reason).await;
    }
}

/// CONNECT host:port: judged, dialed, then a byte-counting tunnel until both sides close.
async fn connect(
    head: RequestHead,
    input: BufIn<tokio::net::unix::OwnedReadHalf>,
    mut wr: tokio::net::unix::OwnedWriteHalf,
    shared: &Shared,
) {
    let (host_text, port) = match wire::split_authority(&head.target, None) {
        Ok(x) => x,
        Err(e) => {
            let r = Refusal {
                status: 400,
                reason: format!("CONNECT target: {e}"),
            };
            return refuse(&mut wr, &shared.log, &head.target, 0, r).await;
        }
    };
    let allowed = match judge(shared, host_text, port).await {
        Ok(a) => a,
        Err((host, r)) => return refuse(&mut wr, &shared.log, &host, port, r).await,
    };
    let (upstream, sa) = match dial(shared, &allowed, port).await {
        Ok(x) => x,
        Err(e) => return dial_failed(&mut wr, &shared.log, &allowed, port, e).await,
    };
    let reason = format!("allowlisted by {}; CONNECT to {sa}", allowed.entry);
    let counters = shared.log.record(&allowed.host, port, true, reason);
    if wr
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    // Bytes the client sent right after the CONNECT head (e.g. a TLS ClientHello) belong to the tunnel.
    let (client_rd, early) = input.into_parts();
    let (up_rd, up_wr) = upstream.into_split();
    let gate = Gate {
        expected: &allowed.name,
        early,
        shared,
    };
    tunnel(client_rd, wr, up_rd, up_wr, &counters, gate).await;
}

/// What the first client bytes of a tunnel are checked against.
struct Gate<'a> {
    /// The CONNECT host.
    expected: &'a HostName,
    /// Bytes already received after the CONNECT head.
    early: Vec<u8>,
    shared: &'a Shared,
}

impl Gate<'_> {
    /// Reads until the first bytes say whether this is TLS and which server it names; returns every byte read
    /// (to be sent upstream), or the reason to close the tunnel.
    async fn pass(
        self,
        client_rd: &mut tokio::net::unix::OwnedReadHalf,
    ) -> Result<Vec<u8>, String> {
        use tokio::io::AsyncReadExt;
        let mut seen = self.early;
        let limit = self.shared.limits.header_timeout;
        // The clock starts at the first byte: a client may wait for a server that speaks first.
        let mut deadline = (!seen.is_empty()).then(|| tokio::time::Instant::now() + limit);
        loop {
            match sni::inspect(&seen) {
                sni::Hello::NeedMore => {}
                sni::Hello::NotTls | sni::Hello::ServerName(None) => return Ok(seen),
                sni::Hello::ServerName(Some(name)) => {
                    return match HostName::parse(&name) {
                        Ok(n) if n == *self.expected => Ok(seen),
                        _ => Err(format!(
                            "TLS server name `{name}` differs from the CONNECT host `{}` (domain fronting)",
                            self.expected
                        )),
                    };
                }
                sni::Hello::Malformed(e) => return Err(format!("malformed TLS ClientHello: {e}")),
            }
            if seen.len() >= sni::MAX_HELLO_BYTES {
                return Err("no complete TLS ClientHello in the first 64 KiB".into());
            }
            let mut buf = vec![0u8; sni::MAX_HELLO_BYTES - seen.len()];
            let read = match deadline {
                Some(d) => tokio::time::timeout_at(d, client_rd.read(&mut buf)).await,
                None => Ok(client_rd.read(&mut buf).await),
            };
            let n = match read {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(format!("reading the ClientHello: {e}")),
                Err(_) => {
                    return Err("incomplete TLS ClientHello within the header time limit".into())
                }
            };
            if n == 0 && seen.is_empty() {
                // Closed without a byte: nothing to judge, the tunnel just ends.
                return Ok(seen);
            }
            deadline.get_or_insert_with(|| tokio::time::Instant::now() + limit);
            if n == 0 {
                // The client closed before finishing: nothing more can reach the server.
                return Err("the client closed in the middle of a TLS ClientHello".into());
            }
            seen.extend_from_slice(&buf[..n]);
        }
    }
}

async fn tunnel(
    mut client_rd: tokio::net::unix::OwnedReadHalf,
    client_wr: tokio::net::unix::OwnedWriteHalf,
    up_rd: tokio::net::tcp::OwnedReadHalf,
    mut up_wr: tokio::net::tcp::OwnedWriteHalf,
    counters: &Counters,
    gate: Gate<'_>,
) {
    let log = &gate.shared.log;
    let upward = async {
        // Nothing goes upstream before the first bytes are judged; the server may speak first meanwhile.
        let first = gate.pass(&mut client_rd).await?;
        if !first.is_empty() {
            up_wr.write_all(&first).await.map_err(|_| String::new())?;
            counters.up.fetch_add(first.len() as u64, Ordering::Relaxed);
        }
        let _ = wire::pump(client_rd, up_wr, &counters.up).await;
        Ok::<(), String>(())
    };
    let downward = wire::pump(up_rd, client_wr, &counters.down);
    tokio::pin!(upward, downward);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            r = &mut upward, if !up_done => {
                up_done = true;
                if let Err(reason) = r {
                    if !reason.is_empty() {
                        log.refuse_after(counters, reason);
                    }
                    // Dropping both directions closes the tunnel.
                    return;
                }
            }
            _ = &mut downward, if !down_done => down_done = true,
        }
    }
}

/// Headers never passed on: hop-by-hop ones, proxy credentials, and protocol switches.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Copies the headers of `headers` except the hop-by-hop ones and those named in `Connection`.
fn end_to_end(headers: &[(String, Vec<u8>)], out: &mut Vec<u8>, skip_framing: bool) {
    let named = wire::header_tokens(headers, "connection");
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || named.contains(&lower) {
            continue;
        }
        if skip_framing && (lower == "content-length" || lower == "transfer-encoding") {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The body framing of a message from its headers (RFC 9112 section 6), refusing ambiguous framing.
fn framing(headers: &[(String, Vec<u8>)], is_request: bool) -> Result<Body, String> {
    let te = wire::header_tokens(headers, "transfer-encoding");
    let cls: Vec<&[u8]> = wire::header_values(headers, "content-length").collect();
    if !te.is_empty() {
        if !cls.is_empty() {
            return Err(
                "both Transfer-Encoding and Content-Length (a request-smuggling shape)".into(),
            );
        }
        if te.last().map(String::as_str) == Some("chunked")
            && te.iter().filter(|t| *t == "chunked").count() == 1
        {
            return Ok(Body::Chunked);
        }
        if is_request {
            return Err(format!(
                "Transfer-Encoding `{}` is not supported in requests",
                te.join(", ")
            ));
        }
        return Ok(Body::UntilClose);
    }
    let mut len: Option<u64> = None;
    for v in cls {
        for part in String::from_utf8_lossy(v).split(',') {
            let p = part.trim();
            if p.is_empty() || p.len() > 19 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("Content-Length `{p}` is not a number"));
            }
            let n: u64 = p
                .parse()
                .map_err(|_| format!("Content-Length `{p}` out of range"))?;
            if len.is_some_and(|l| l != n) {
                return Err("conflicting Content-Length values".into());
            }
            len = Some(n);
        }
    }
    Ok(match (len, is_request) {
        (Some(n), _) => Body::Length(n),
        (None, true) => Body::None,
        (None, false) => Body::UntilClose,
    })
}

/// Plain HTTP: one absolute-URI request judged, forwarded on a fresh upstream connection to exactly the checked
/// address, its response relayed. `Ok(true)` when the client connection may carry another request.
async fn forward(
    head: &RequestHead,
    input: &mut BufIn<tokio::net::unix::OwnedReadHalf>,
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    shared: &Shared,
) -> Result<bool, ()> {
    let log = &shared.log;
    let limits = &shared.limits;
    let (authority, path) = match wire::split_http_uri(&head.target) {
        Ok(x) => x,
        Err(e) => {
            let r = Refusal {
                status: 400,
                reason: format!("{} {}: {e}", head.method, head.target),
            };
            refuse(wr, log, "", 0, r).await;
            return Err(());
        }
    };
    let (uri_host, uri_port) = match wire::split_authority(authority, Some(80)) {
        Ok(x) => x,
        Err(e) => {
            refuse(
                wr,
                log,
                authority,
                0,
                Refusal {
                    status: 400,
                    reason: format!("URI authority: {e}"),
                },
            )
            .await;
            return Err(());
        }
    };
    // The Host header must be present once and name the same host and port as the URI.
    let hosts: Vec<&[u8]> = wire::header_values(&head.headers, "host").collect();
    let host_header = match hosts.as_slice() {
        [one] => String::from_utf8_lossy(one).trim().to_string(),
        [] => {
            let r = Refusal::forbidden("request without a Host header".into());
            refuse(wr, log, uri_host, uri_port, r).await;
            return Err(());
        }
        _ => {
            let r = Refusal::forbidden("more than one Host header".into());
            refuse(wr, log, uri_host, uri_port, r).await;
            return Err(());
        }
    };
    let agrees = match (
        wire::split_authority(&host_header, Some(80)),
        HostName::parse(uri_host),
    ) {
        (Ok((h, p)), Ok(uri_norm)) => {
            p == uri_port && HostName::parse(h).is_ok_and(|hn| hn == uri_norm)
        }
        _ => false,
    };
    if !agrees {
        let reason =
            format!("Host header `{host_header}` disagrees with the URI authority `{authority}`");
        refuse(wr, log, uri_host, uri_port, Refusal::forbidden(reason)).await;
        return Err(());
    }
    let body = match framing(&head.headers, true) {
        Ok(b) => b,
        Err(e) => {
            refuse(
                wr,
                log,
                uri_host,
                uri_port,
                Refusal {
                    status: 400,
                    reason: e,
                },
            )
            .await;
            return Err(());
        }
    };
    let allowed = match judge(shared, uri_host, uri_port).await {
        Ok(a) => a,
        Err((host, r)) => {
            refuse(wr, log, &host, uri_port, r).await;
            return Err(());
        }
    };
    let (upstream, sa) = match dial(shared, &allowed, uri_port).await {
        Ok(x) => x,
        Err(e) => {
            dial_failed(wr, log, &allowed, uri_port, e).await;
            return Err(());
        }
    };
    let reason = format!("allowlisted by {}; {} to {sa}", allowed.entry, head.method);
    let counters = log.record(&allowed.host, uri_port, true, reason);

    let client_keep_alive = {
        let mut tokens = wire::header_tokens(&head.headers, "connection");
        tokens.extend(wire::header_tokens(&head.headers, "proxy-connection"));
        if head.version == 0 {
            tokens.iter().any(|t| t == "keep-alive")
        } else {
            !tokens.iter().any(|t| t == "close")
        }
    };

    // The request as sent upstream: origin form, end-to-end headers, a fresh connection closed after it.
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", head.method, path).as_bytes());
    end_to_end(&head.headers, &mut out, false);
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    let (up_rd, mut up_wr) = upstream.into_split();
    let sent = async {
        up_wr.write_all(&out).await?;
        counters.up.fetch_add(out.len() as u64, Ordering::Relaxed);
        match body {
            Body::None => Ok(()),
            Body::Length(n) => {
                input
                    .copy_exact(n, &mut up_wr, &counters.up, limits.io_idle_timeout)
                    .await
            }
            Body::Chunked => {
                input
                    .copy_chunked(&mut up_wr, &counters.up, limits.io_idle_timeout)
                    .await
            }
            Body::UntilClose => Ok(()),
        }
    }
    .await;
    if let Err(e) = sent {
        let _ = respond(
            wr,
            502,
            "Bad Gateway",
            &format!("sending the request upstream: {e}"),
        )
        .await;
        return Err(());
    }
    let _ = up_wr.flush().await;

    // The response: interim 1xx heads passed on, then the final head and its body.
    let mut up_in = BufIn::new(up_rd);
    loop {
        let resp = match up_in
            .read_response(limits.max_header_bytes, limits.io_idle_timeout)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let _ = respond(wr, 502, "Bad Gateway", &format!("upstream response: {e}")).await;
                return Err(());
            }
        };
        let interim = (100..200).contains(&resp.code) && resp.code != 101;
        let no_body = head.method.eq_ignore_ascii_case("HEAD")
            || resp.code == 204
            || resp.code == 304
            || interim;
        let rbody = if no_body {
            Body::None
        } else if resp.code == 101 {
            Body::UntilClose
        } else {
            match framing(&resp.headers, false) {
                Ok(b) => b,
                Err(e) => {
                    let _ =
                        respond(wr, 502, "Bad Gateway", &format!("upstream response: {e}")).await;
                    return Err(());
                }
            }
        };
        let keep = client_keep_alive && rbody != Body::UntilClose && !interim;
        let mut rhead = Vec::with_capacity(512);
        rhead.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", resp.code, resp.reason).as_bytes());
        end_to_end(&resp.headers, &mut rhead, false);
        if !interim {
            rhead.extend_from_slice(if keep {
                b"Connection: keep-alive\r\n" as &[u8]
            } else {
                b"Connection: close\r\n"
            });
        }
        rhead.extend_from_slice(b"\r\n");
        if wr.write_all(&rhead).await.is_err() {
            return Err(());
        }
        counters
            .down
            .fetch_add(rhead.len() as u64, Ordering::Relaxed);
        if interim {
            continue;
        }
        let relayed = match rbody {
            Body::None => Ok(()),
            Body::Length(n) => {
                up_in
                    .copy_exact(n, wr, &counters.down, limits.io_idle_timeout)
                    .await
            }
            Body::Chunked => {
                up_in
                    .copy_chunked(wr, &counters.down, limits.io_idle_timeout)
                    .await
            }
            Body::UntilClose => {
                up_in
                    .copy_to_eof(wr, &counters.down, limits.io_idle_timeout)
                    .await
            }
        };
        let _ = wr.flush().await;
        return match relayed {
            Ok(()) if keep => Ok(true),
            Ok(()) => {
                let _ = wr.shutdown().await;
                Ok(false)
            }
            Err(_) => Err(()),
        };
    }
}
