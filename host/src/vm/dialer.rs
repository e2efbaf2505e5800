//! The host dialer of the `vm` tier's install-phase network: QEMU's `guestfwd=...-cmd:` starts one
//! `fenced-run vm-dialer` per guest connection with the connection on stdin/stdout. The guest's egress proxy
//! (measured code) has already judged the allowlist by name; it writes one request line `host:port`. The dialer
//! resolves the name itself, refuses loopback, private, link-local and metadata addresses (intake's address
//! policy, widened only by the operator's `[egress] allow_networks`) *after* that resolution, connects (or, with
//! the operator's `upstream_proxy`, opens a `CONNECT host:port` tunnel through it instead of resolving), answers
//! `OK <address>`, `DENY <why>` (refused by policy: final, the guest's proxy answers 403) or `ERR <why>` (a
//! failure: 502), relays bytes both ways and logs every connection as a JSON line in the VM's directory, which
//! the host reads back after the run.
//!
//! After the cut (the file [`CUT_FILE`] in the VM's directory) every new connection is refused and every
//! running dialer exits; the host also kills each dialer it finds registered under [`PIDS_DIR`].

use job_policy::addr::AllowNetworks;
use job_policy::egress::{OperatorEgress, UpstreamProxy};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The dialer log in the VM's directory (JSON lines, [`DialerRecord`]).
pub const LOG_FILE: &str = "dialer.log";
/// Present once the install phase is over: no dialer connects any more.
pub const CUT_FILE: &str = "network-cut";
/// One empty file per running dialer, named by its pid.
pub const PIDS_DIR: &str = "dialers";
/// Longest request line.
const MAX_REQUEST: usize = 512;
/// Time for the request line, the resolution and each connect.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);

/// One line of the dialer log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DialerRecord {
    /// The dialer's process id.
    pub pid: u32,
    /// `connect` (allowed, connected), `refuse` (not connected) or `close` (a connection ended).
    pub event: String,
    /// The request line as the guest sent it (escaped, at most 512 bytes).
    pub request: String,
    /// The address connected to, when one was.
    pub addr: Option<String>,
    /// Why refused, or what was connected.
    pub reason: String,
    /// On `refuse`: refused by policy (answered `DENY`), not a failure (`ERR`).
    #[serde(default)]
    pub policy: bool,
    /// Bytes guest -> server (on `close`).
    pub bytes_up: u64,
    /// Bytes server -> guest (on `close`).
    pub bytes_down: u64,
}

/// A test-only mapping of an allowlisted name and port to a loopback address (the tests' server); everything not
/// mapped is resolved and checked normally, and a mapping to anything but loopback is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestMap {
    /// The name (lower case, no trailing dot).
    pub host: String,
    /// The port the guest asked for.
    pub port: u16,
    /// The loopback address it goes to.
    pub to: SocketAddr,
}

impl TestMap {
    /// Parses `NAME:PORT=127.0.0.1:PORT`.
    pub fn parse(s: &str) -> Result<TestMap, String> {
        let (from, to) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected NAME:PORT=ADDRESS:PORT"))?;
        let (host, port) = job_policy::hostport::split_host_port(from, None)
            .map_err(|e| format!("{e} (expected NAME:PORT=ADDRESS:PORT)"))?;
        let to: SocketAddr = to
            .parse()
            .map_err(|_| format!("`{to}`: expected an IP address and port"))?;
        if !to.ip().is_loopback() {
            return Err(format!("`{to}`: a test mapping may only point to loopback"));
        }
        Ok(TestMap {
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            port,
            to,
        })
    }
}

/// The dialer's configuration (from its command line).
#[derive(Clone, Debug)]
pub struct DialerConfig {
    /// The VM's directory: log, cut marker, pid files.
    pub state: PathBuf,
    /// Test-only mappings.
    pub map: Vec<TestMap>,
    /// The operator's `[egress]` settings (`allow_networks`, `upstream_proxy`).
    pub egress: OperatorEgress,
}

/// Why a request got no connection: a refusal by policy (`DENY`) or a failure (`ERR`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoConnection {
    /// Refused by policy (final).
    pub policy: bool,
    /// Why.
    pub why: String,
}

impl NoConnection {
    fn policy(why: String) -> Self {
        NoConnection { policy: true, why }
    }

    fn failed(why: String) -> Self {
        NoConnection { policy: false, why }
    }

    /// The answer line sent to the guest.
    pub fn answer(&self) -> String {
        format!(
            "{} {}\n",
            if self.policy { "DENY" } else { "ERR" },
            self.why
        )
    }
}

/// Splits a request line `host:port` / `[v6]:port` with the one `host:port` parser
/// ([`job_policy::hostport::split_host_port`]) and checks the host's length and characters.
pub fn parse_request(line: &str) -> Result<(String, u16), String> {
    let (host, port) = job_policy::hostport::split_host_port(line, None).map_err(|e| {
        format!(
            "the request is not host:port: {}",
            attestation::text::escape(&e.to_string())
        )
    })?;
    if host.is_empty() || host.len() > 253 {
        return Err("the host is empty or longer than 253 bytes".into());
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':' || b == b'_')
    {
        return Err(
            "the host has characters outside letters, digits, `.`, `-`, `_` and `:`".into(),
        );
    }
    Ok((host.trim_end_matches('.').to_ascii_lowercase(), port))
}

/// Resolves `host:port` (the test map first) and checks every answer against the address policy: one bad answer
/// refuses the request (a name that also points inside is not dialled at all).
pub fn resolve_checked(host: &str, port: u16, map: &[TestMap]) -> Result<Vec<SocketAddr>, String> {
    resolve_checked_with(host, port, map, &AllowNetworks::none()).map_err(|n| n.why)
}

/// [`resolve_checked`] with the operator's `allow_networks`; says whether a refusal is by policy (an address
/// refused) or a failure (no answer).
pub fn resolve_checked_with(
    host: &str,
    port: u16,
    map: &[TestMap],
    networks: &AllowNetworks,
) -> Result<Vec<SocketAddr>, NoConnection> {
    if let Some(m) = map.iter().find(|m| m.host == host && m.port == port) {
        return Ok(vec![m.to]);
    }
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| NoConnection::failed(format!("resolving {host}: {e}")))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(NoConnection::failed(format!("{host} has no address")));
    }
    check_all(host, &addrs, networks)?;
    Ok(addrs)
}

/// Every address against the policy with `networks`: one refused address refuses them all.
fn check_all(
    host: &str,
    addrs: &[SocketAddr],
    networks: &AllowNetworks,
) -> Result<(), NoConnection> {
    let bad: Vec<String> = addrs
        .iter()
        .filter_map(|a| {
            job_policy::addr::check_with(a.ip(), networks)
                .err()
                .map(|r| format!("{}: {r}", a.ip()))
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(NoConnection::policy(format!(
        "{host} resolved (on the host) to an address the dialer refuses: {}",
        bad.join("; ")
    )))
}

/// Opens a `CONNECT host:port` tunnel through the operator's upstream proxy (an IP literal is checked against the
/// policy first; a name is the upstream's to resolve). Returns the stream and what it is connected through.
pub fn through_upstream(
    host: &str,
    port: u16,
    up: &UpstreamProxy,
    networks: &AllowNetworks,
) -> Result<(TcpStream, String), NoConnection> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        check_all(host, &[SocketAddr::new(ip, port)], networks)?;
    }
    let url = up.url();
    let addrs: Vec<SocketAddr> = (up.host.as_str(), up.port)
        .to_socket_addrs()
        .map_err(|e| {
            NoConnection::failed(format!(
                "resolving the operator's upstream proxy {url}: {e}"
            ))
        })?
        .collect();
    let mut errors = Vec::new();
    let mut conn = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, STEP_TIMEOUT) {
            Ok(s) => {
                conn = Some((s, *a));
                break;
            }
            Err(e) => errors.push(format!("{a}: {e}")),
        }
    }
    let Some((mut s, at)) = conn else {
        return Err(NoConnection::failed(format!(
            "connecting to the operator's upstream proxy {url}: {}",
            errors.join("; ")
        )));
    };
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let fail =
        |why: String| NoConnection::failed(format!("the operator's upstream proxy {url}: {why}"));
    let _ = s.set_read_timeout(Some(STEP_TIMEOUT));
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .map_err(|e| fail(e.to_string()))?;
    // The answer head byte by byte: nothing of the tunnel after it is consumed.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && !head.ends_with(b"\n\n") {
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => {
                return Err(fail(
                    "closed before the end of its answer to CONNECT".into(),
                ))
            }
            Ok(_) => head.push(b[0]),
            Err(e) => return Err(fail(format!("reading its answer to CONNECT: {e}"))),
        }
        if head.len() > 16 * 1024 {
            return Err(fail("an answer head longer than 16 KiB".into()));
        }
    }
    let _ = s.set_read_timeout(None);
    let text = String::from_utf8_lossy(&head);
    let line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    let shown = attestation::text::escape(&line).into_owned();
    let mut parts = line.split_whitespace();
    let code = match (parts.next(), parts.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(c))) if v.starts_with("HTTP/1.") => c,
        _ => return Err(fail(format!("answered `{shown}`, not an HTTP status"))),
    };
    match code {
        200..=299 => Ok((
            s,
            format!("{target} through the operator's upstream proxy {url} ({at})"),
        )),
        403 => Err(NoConnection::policy(format!(
            "the operator's upstream proxy {url} refused CONNECT {target}: `{shown}`"
        ))),
        _ => Err(fail(format!("answered CONNECT {target} with `{shown}`"))),
    }
}

fn append_log(state: &Path, r: &DialerRecord) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut line) = serde_json::to_vec(r) else {
        return;
    };
    line.push(b'\n');
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(state.join(LOG_FILE))
    {
        // One write per line with O_APPEND: lines of concurrent dialers do not interleave.
        let _ = f.write_all(&line);
    }
}

/// Reads the dialer log of a VM directory (lines that do not parse are skipped).
pub fn read_log(state: &Path) -> Vec<DialerRecord> {
    std::fs::read_to_string(state.join(LOG_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Marks the install network cut and kills every dialer still registered; returns how many were killed.
pub fn cut(state: &Path) -> usize {
    let _ = std::fs::write(state.join(CUT_FILE), b"");
    kill_registered(state)
}

/// Kills every registered dialer of `state` whose command line still names `state` (no stray pid is hit).
pub fn kill_registered(state: &Path) -> usize {
    let needle = state.to_string_lossy().into_owned();
    let mut killed = 0;
    let Ok(rd) = std::fs::read_dir(state.join(PIDS_DIR)) else {
        return 0;
    };
    for e in rd.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if pid > 1 && String::from_utf8_lossy(&cmd).contains(&needle) {
            let p = nix::unistd::Pid::from_raw(pid);
            if nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
        let _ = std::fs::remove_file(e.path());
    }
    killed
}

struct Registration(PathBuf);

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Serves one guest connection on stdin/stdout; returns the exit code.
pub fn serve(cfg: &DialerConfig) -> u8 {
    use std::os::fd::AsFd;
    let pid = std::process::id();
    let dup = |fd: std::os::fd::BorrowedFd<'_>| fd.try_clone_to_owned().map(std::fs::File::from);
    let (Ok(mut guest_in), Ok(mut guest_out)) = (
        dup(std::io::stdin().as_fd()),
        dup(std::io::stdout().as_fd()),
    ) else {
        return 2;
    };
    if !cfg.state.is_dir() {
        let _ = guest_out.write_all(b"ERR the VM's directory is gone\n");
        return 2;
    }
    let pids = cfg.state.join(PIDS_DIR);
    let _ = std::fs::create_dir_all(&pids);
    let reg = pids.join(pid.to_string());
    let _ = std::fs::write(&reg, b"");
    let _reg = Registration(reg);
    let mut record = DialerRecord {
        pid,
        event: "refuse".into(),
        request: String::new(),
        addr: None,
        reason: String::new(),
        policy: false,
        bytes_up: 0,
        bytes_down: 0,
    };
    let refuse = |mut record: DialerRecord, out: &mut std::fs::File, no: NoConnection| {
        let _ = out.write_all(no.answer().as_bytes());
        record.reason = no.why;
        record.policy = no.policy;
        append_log(&cfg.state, &record);
        1
    };
    // The request line, byte by byte (nothing after it is consumed), bounded in size and time.
    let line = match read_line(&mut guest_in) {
        Ok(l) => l,
        Err(why) => return refuse(record, &mut guest_out, NoConnection::failed(why)),
    };
    record.request = attestation::text::escape(&line).into_owned();
    if cfg.state.join(CUT_FILE).exists() {
        return refuse(
            record,
            &mut guest_out,
            NoConnection::policy("the install phase is over: the network was cut".into()),
        );
    }
    let (host, port) = match parse_request(&line) {
        Ok(x) => x,
        Err(why) => return refuse(record, &mut guest_out, NoConnection::failed(why)),
    };
    let networks = &cfg.egress.allow_networks;
    let mapped = cfg.map.iter().any(|m| m.host == host && m.port == port);
    let connected = match &cfg.egress.upstream_proxy {
        Some(up) if !mapped => {
            through_upstream(&host, port, up, networks).map(|(s, what)| (s, what.clone(), what))
        }
        _ => resolve_checked_with(&host, port, &cfg.map, networks).and_then(|addrs| {
            let mut errors = Vec::new();
            for a in &addrs {
                match TcpStream::connect_timeout(a, STEP_TIMEOUT) {
                    Ok(s) => {
                        let why = format!("resolved {host} to [{}] and connected", list(&addrs));
                        return Ok((s, a.to_string(), why));
                    }
                    Err(e) => errors.push(format!("{a}: {e}")),
                }
            }
            Err(NoConnection::failed(format!(
                "connecting failed: {}",
                errors.join("; ")
            )))
        }),
    };
    let (up, addr, why) = match connected {
        Ok(x) => x,
        Err(no) => return refuse(record, &mut guest_out, no),
    };
    let _ = up.set_nodelay(true);
    if guest_out
        .write_all(format!("OK {addr}\n").as_bytes())
        .is_err()
    {
        return 1;
    }
    record.event = "connect".into();
    record.addr = Some(addr);
    record.reason = why;
    append_log(&cfg.state, &record);

    // The cut, or the VM's directory gone, ends this dialer too.
    let state = cfg.state.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        if !state.is_dir() || state.join(CUT_FILE).exists() {
            std::process::exit(0);
        }
    });
    let (up_rd, mut up_wr) = match up.try_clone() {
        Ok(c) => (up, c),
        Err(_) => return 1,
    };
    let upward = std::thread::spawn(move || {
        let n = std::io::copy(&mut guest_in, &mut up_wr).unwrap_or(0);
        let _ = up_wr.shutdown(std::net::Shutdown::Write);
        n
    });
    let mut up_rd = up_rd;
    let down = std::io::copy(&mut up_rd, &mut guest_out).unwrap_or(0);
    let _ = up_rd.shutdown(std::net::Shutdown::Both);
    let up_bytes = upward.join().unwrap_or(0);
    record.event = "close".into();
    record.bytes_up = up_bytes;
    record.bytes_down = down;
    record.reason = "the connection ended".into();
    append_log(&cfg.state, &record);
    0
}

fn list(a: &[SocketAddr]) -> String {
    a.iter()
        .map(|a| a.ip().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn read_line(r: &mut std::fs::File) -> Result<String, String> {
    use std::os::fd::AsFd;
    let mut line = Vec::new();
    let deadline = std::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(
            r.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(0) => return Err("no request line within 15 s".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("reading the request: {e}")),
        }
        let mut b = [0u8; 1];
        match r.read(&mut b) {
            Ok(0) => return Err("the guest closed before a complete request line".into()),
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => line.push(b[0]),
            Err(e) => return Err(format!("reading the request: {e}")),
        }
        if line.len() > MAX_REQUEST {
            return Err(format!(
                "the request line is longer than {MAX_REQUEST} bytes"
            ));
        }
    }
    String::from_utf8(line).map_err(|_| "the request line is not UTF-8".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_odd_ones_are_refused() {
        assert_eq!(
            parse_request("Registry.Example:443").expect("ok"),
            ("registry.example".to_string(), 443)
        );
        assert_eq!(
            parse_request("[2001:db8::1]:80").expect("v6"),
            ("2001:db8::1".to_string(), 80)
        );
        assert!(parse_request("no-port").is_err());
        assert!(parse_request("a b:80").is_err());
        assert!(parse_request(":80").is_err());
        assert!(parse_request("x:99999").is_err());
        // The one host:port parser's rules: IPv6 only in brackets, ports from 1.
        assert!(parse_request("2001:db8::1:80").is_err());
        assert!(parse_request("x.example:0").is_err());
        let e = parse_request("no-port").expect_err("no port");
        assert!(e.starts_with("the request is not host:port"), "{e}");
    }

    #[test]
    fn the_address_policy_applies_after_resolution() {
        for (h, p) in [
            ("127.0.0.1", 80),
            ("localhost", 80),
            ("10.0.0.1", 80),
            ("192.168.1.1", 80),
            ("169.254.169.254", 80),
            ("::1", 80),
            ("fe80::1", 80),
        ] {
            let e = resolve_checked(h, p, &[]).expect_err(h);
            assert!(e.contains("refuses"), "{h}: {e}");
        }
        // A public literal passes the policy (nothing is dialled here).
        assert_eq!(
            resolve_checked("1.1.1.1", 443, &[]).expect("public"),
            vec!["1.1.1.1:443".parse::<SocketAddr>().expect("sa")]
        );
    }

    #[test]
    fn test_maps_go_to_loopback_only_and_only_for_their_name_and_port() {
        let m = TestMap::parse("registry.example:80=127.0.0.1:8080").expect("map");
        assert_eq!(
            resolve_checked("registry.example", 80, std::slice::from_ref(&m)).expect("mapped"),
            vec!["127.0.0.1:8080".parse::<SocketAddr>().expect("sa")]
        );
        assert!(resolve_checked("registry.example", 81, std::slice::from_ref(&m)).is_err());
        assert!(TestMap::parse("x.example:80=192.0.2.1:80").is_err());
        assert!(TestMap::parse("x.example=127.0.0.1:80").is_err());
    }
}
