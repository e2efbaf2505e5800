//! HTTP/1.x wire handling for the egress proxy: a bounded buffered reader, request and response heads parsed
//! with httparse, authority and absolute-URI splitting, and byte-counting relays for fixed-length, chunked and
//! until-close bodies and for CONNECT tunnels. Every size is bounded; nothing here decides policy.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The most headers a request or response may carry.
pub const MAX_HEADERS: usize = 100;
/// Size of each relay read.
const CHUNK: usize = 64 * 1024;
/// Longest chunk-size line of a chunked body.
const MAX_CHUNK_LINE: usize = 4096;
/// Largest trailer section of a chunked body.
const MAX_TRAILERS: usize = 16 * 1024;

/// Why a head could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeadError {
    /// The peer closed the connection before a whole head arrived.
    #[error("connection closed in the middle of a header block ({0} bytes received)")]
    Truncated(usize),
    /// The header block is larger than the limit.
    #[error("header block larger than {0} bytes")]
    TooLarge(usize),
    /// No complete head within the time limit.
    #[error("no complete header block within {0:?}")]
    Timeout(Duration),
    /// httparse rejected the head.
    #[error("malformed header block: {0}")]
    Malformed(String),
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
}

/// A parsed request head, owned.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// The method (`GET`, `CONNECT`, ...).
    pub method: String,
    /// The request target as sent (absolute URI, authority, or origin form).
    pub target: String,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// Header names and values in order, values as raw bytes.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// A parsed response head, owned.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// The status code.
    pub code: u16,
    /// The reason phrase.
    pub reason: String,
    /// Header names and values in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Every value of the header `name` (case-insensitive).
pub fn header_values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// The comma-separated tokens of every `name` header, trimmed and lowercased.
pub fn header_tokens(headers: &[(String, Vec<u8>)], name: &str) -> Vec<String> {
    header_values(headers, name)
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|t| !t.is_empty())
        .collect()
}

/// A reader with its own bounded buffer of bytes received but not yet consumed.
pub struct BufIn<R> {
    io: R,
    buf: Vec<u8>,
    scratch: Box<[u8]>,
}

impl<R: AsyncRead + Unpin> BufIn<R> {
    /// Wraps a reader.
    pub fn new(io: R) -> Self {
        Self {
            io,
            buf: Vec::new(),
            scratch: vec![0u8; CHUNK].into_boxed_slice(),
        }
    }

    /// The bytes received and not yet consumed (e.g. pipelined after a head).
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Gives back the reader and the unconsumed bytes.
    pub fn into_parts(self) -> (R, Vec<u8>) {
        (self.io, self.buf)
    }

    fn consume(&mut self, n: usize) {
        self.buf.drain(..n.min(self.buf.len()));
    }

    async fn fill(&mut self, limit: usize) -> io::Result<usize> {
        let want = limit.clamp(1, CHUNK);
        let n = self.io.read(&mut self.scratch[..want]).await?;
        self.buf.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    async fn fill_timeout(&mut self, limit: usize, timeout: Duration) -> io::Result<usize> {
        match tokio::time::timeout(timeout, self.fill(limit)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no data within {timeout:?}"),
            )),
        }
    }

    /// Reads one request head; `Ok(None)` when the peer closed cleanly before sending any byte of it.
    pub async fn read_request(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<Option<RequestHead>, HeadError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if !self.buf.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut req = httparse::Request::new(&mut headers);
                let limit = self.buf.len().min(max);
                match req.parse(&self.buf[..limit]) {
                    Ok(httparse::Status::Complete(n)) => {
                        let head = RequestHead {
                            method: req.method.unwrap_or_default().to_string(),
                            target: req.path.unwrap_or_default().to_string(),
                            version: req.version.unwrap_or(1),
                            headers: req
                                .headers
                                .iter()
                                .map(|h| (h.name.to_string(), h.value.to_vec()))
                                .collect(),
                        };
                        self.consume(n);
                        return Ok(Some(head));
                    }
                    Ok(httparse::Status::Partial) if self.buf.len() >= max => {
                        return Err(HeadError::TooLarge(max))
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(httparse::Error::TooManyHeaders) => {
                        return Err(HeadError::Malformed(format!(
                            "more than {MAX_HEADERS} headers"
                        )))
                    }
                    Err(e) => return Err(HeadError::Malformed(e.to_string())),
                }
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let n = match self
                .fill_timeout(max + 1 - self.buf.len().min(max), left)
                .await
            {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    return Err(HeadError::Timeout(timeout))
                }
                Err(e) => return Err(HeadError::Io(e)),
            };
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(HeadError::Truncated(self.buf.len()));
            }
        }
    }

    /// Reads one response head.
    pub async fn read_response(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<ResponseHead, HeadError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if !self.buf.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut resp = httparse::Response::new(&mut headers);
                let limit = self.buf.len().min(max);
                match resp.parse(&self.buf[..limit]) {
                    Ok(httparse::Status::Complete(n)) => {
                        let head = ResponseHead {
                            code: resp.code.unwrap_or(0),
                            reason: resp.reason.unwrap_or_default().to_string(),
                            headers: resp
                                .headers
                                .iter()
                                .map(|h| (h.name.to_string(), h.value.to_vec()))
                                .collect(),
                        };
                        self.consume(n);
                        return Ok(head);
                    }
                    Ok(httparse::Status::Partial) if self.buf.len() >= max => {
                        return Err(HeadError::TooLarge(max))
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(e) => return Err(HeadError::Malformed(e.to_string())),
                }
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let n = match self
                .fill_timeout(max + 1 - self.buf.len().min(max), left)
                .await
            {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    return Err(HeadError::Timeout(timeout))
                }
                Err(e) => return Err(HeadError::Io(e)),
            };
            if n == 0 {
                return Err(HeadError::Truncated(self.buf.len()));
            }
        }
    }

    /// Copies exactly `n` body bytes to `w`, counting them; an early end is an error.
    pub async fn copy_exact<W: AsyncWrite + Unpin>(
        &mut self,
        mut n: u64,
        w: &mut W,
        counter: &AtomicU64,
        idle: Duration,
    ) -> io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && self.fill_timeout(CHUNK, idle).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("body ended {n} bytes short"),
                ));
            }
            let take = self.buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            w.write_all(&self.buf[..take]).await?;
            counter.fetch_add(take as u64, Ordering::Relaxed);
            self.consume(take);
            n -= take as u64;
        }
        Ok(())
    }

    /// Copies everything until the peer closes, counting it.
    pub async fn copy_to_eof<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        counter: &AtomicU64,
        idle: Duration,
    ) -> io::Result<()> {
        loop {
            if self.buf.is_empty() && self.fill_timeout(CHUNK, idle).await? == 0 {
                return Ok(());
            }
            w.write_all(&self.buf).await?;
            counter.fetch_add(self.buf.len() as u64, Ordering::Relaxed);
            self.buf.clear();
        }
    }

    async fn read_line(&mut self, max: usize, idle: Duration) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                if i + 1 > max {
                    break;
                }
                let line: Vec<u8> = self.buf[..=i].to_vec();
                self.consume(i + 1);
                return Ok(line);
            }
            if self.buf.len() > max {
                break;
            }
            if self.fill_timeout(max + 1 - self.buf.len(), idle).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "chunked body ended early",
                ));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("chunked body line longer than {max} bytes"),
        ))
    }

    /// Copies one chunked body verbatim (sizes, data, trailers), checking its framing as it goes.
    pub async fn copy_chunked<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        counter: &AtomicU64,
        idle: Duration,
    ) -> io::Result<()> {
        loop {
            let line = self.read_line(MAX_CHUNK_LINE, idle).await?;
            let size = parse_chunk_size(&line)?;
            w.write_all(&line).await?;
            counter.fetch_add(line.len() as u64, Ordering::Relaxed);
            if size == 0 {
                break;
            }
            self.copy_exact(size, w, counter, idle).await?;
            let crlf = self.read_line(2, idle).await?;
            if crlf != b"\r\n" && crlf != b"\n" {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "chunk data not followed by CRLF",
                ));
            }
            w.write_all(&crlf).await?;
            counter.fetch_add(crlf.len() as u64, Ordering::Relaxed);
        }
        // Trailers up to the empty line.
        let mut total = 0usize;
        loop {
            let line = self.read_line(MAX_CHUNK_LINE, idle).await?;
            total += line.len();
            if total > MAX_TRAILERS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "chunked trailers too large",
                ));
            }
            w.write_all(&line).await?;
            counter.fetch_add(line.len() as u64, Ordering::Relaxed);
            if line == b"\r\n" || line == b"\n" {
                return Ok(());
            }
        }
    }
}

fn parse_chunk_size(line: &[u8]) -> io::Result<u64> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed chunk-size line");
    let text = std::str::from_utf8(line).map_err(|_| bad())?;
    let text = text.trim_end_matches(['\r', '\n']);
    let hex = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim_end_matches([' ', '\t']);
    if hex.is_empty() || hex.len() > 15 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(hex, 16).map_err(|_| bad())
}

/// Copies `r` to `w` until `r` ends, counting bytes, then shuts down `w`'s write side.
pub async fn pump<R, W>(mut r: R, mut w: W, counter: &AtomicU64) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Splits an authority `host:port` or `[v6]:port` (port optional when `default_port` is given): the one
/// parser, [`job_policy::hostport::split_host_port`], that the job loader's allow entries go through too.
pub use job_policy::hostport::split_host_port as split_authority;

/// Splits an absolute `http://authority/path` URI into the authority and the origin-form path (`/` when empty).
pub fn split_http_uri(uri: &str) -> Result<(&str, String), String> {
    let scheme_end = uri
        .find("://")
        .ok_or_else(|| format!("`{uri}` is not an absolute URI"))?;
    let scheme = &uri[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "scheme `{scheme}` is not plain http (use CONNECT for TLS)"
        ));
    }
    let rest = &uri[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return Err(format!("`{uri}`: user information in the URI"));
    }
    let mut path = rest[end..].split('#').next().unwrap_or("").to_string();
    if path.is_empty() {
        path = "/".to_string();
    } else if path.starts_with('?') {
        path.insert(0, '/');
    }
    Ok((authority, path))
}
