//! The one HTTP client every collateral fetch goes through: ureq with rustls, connect and overall timeouts, a
//! body size cap, `Retry-After` honoured on 429 and 503 with a bounded backoff, and `HTTPS_PROXY` (with
//! `NO_PROXY`) from the environment. Every error names the URL and, when there was an answer, its status.

use std::io::Read;
use std::time::{Duration, SystemTime};

/// How the client behaves: timeouts, retries and the body cap.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time allowed for one whole request (connect, send, read the body).
    pub timeout: Duration,
    /// Retries after a 429 or 503 (0: none).
    pub max_retries: u32,
    /// The longest wait before one retry; a `Retry-After` asking for more is refused, not waited out.
    pub max_retry_wait: Duration,
    /// The wait before the first retry when the server gives no `Retry-After` (doubled each retry).
    pub backoff: Duration,
    /// The largest body accepted.
    pub max_body: u64,
    /// Proxy for https (and http) URLs, e.g. `http://proxy.example:3128`; hosts in `no_proxy` bypass it.
    pub proxy: Option<String>,
    /// Host names (or `.suffix`es) reached directly; `*` disables the proxy.
    pub no_proxy: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            max_retries: 3,
            max_retry_wait: Duration::from_secs(60),
            backoff: Duration::from_secs(1),
            max_body: 8 << 20,
            proxy: None,
            no_proxy: Vec::new(),
        }
    }
}

impl HttpOptions {
    /// The defaults with the proxy taken from `HTTPS_PROXY`/`https_proxy` and `NO_PROXY`/`no_proxy`.
    pub fn from_env() -> Self {
        let var = |a: &str, b: &str| {
            std::env::var(a)
                .ok()
                .or_else(|| std::env::var(b).ok())
                .filter(|v| !v.trim().is_empty())
        };
        HttpOptions {
            proxy: var("HTTPS_PROXY", "https_proxy"),
            no_proxy: var("NO_PROXY", "no_proxy")
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            ..HttpOptions::default()
        }
    }
}

/// Why a fetch failed; every variant names the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The server answered with a status other than 200.
    #[error("GET {url}: HTTP {status}{}", detail_suffix(.detail))]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// What the server or the client added (body excerpt, retry count).
        detail: String,
    },
    /// Still 429/503 after every retry, or the server asked for a wait longer than allowed.
    #[error("GET {url}: HTTP {status} (rate limited or unavailable): {detail}")]
    GaveUp {
        /// The URL.
        url: String,
        /// The last status.
        status: u16,
        /// Retries made and the last Retry-After.
        detail: String,
    },
    /// No answer: connection refused, timeout, TLS, proxy.
    #[error("GET {url}: {detail}")]
    Transport {
        /// The URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The body could not be read whole (cut short, too large).
    #[error("GET {url}: HTTP 200 but the body is unusable: {detail}")]
    Body {
        /// The URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The proxy setting is not a usable proxy URL.
    #[error("proxy {proxy}: {detail}")]
    Proxy {
        /// The proxy as configured.
        proxy: String,
        /// What is wrong.
        detail: String,
    },
}

fn detail_suffix(d: &str) -> String {
    if d.is_empty() {
        String::new()
    } else {
        format!(": {d}")
    }
}

/// One successful answer: the body and the response headers the collateral code reads.
#[derive(Debug, Clone)]
pub struct Response {
    /// The URL that served the body: the one asked for, or where its redirects (at most 3) led. This is the
    /// URL collateral records as its source, never merely the one asked for.
    pub url: String,
    /// The body.
    pub body: Vec<u8>,
    /// Response headers (name lowercased, value).
    pub headers: Vec<(String, String)>,
}

impl Response {
    /// The first header of this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The HTTP client.
pub struct Client {
    direct: ureq::Agent,
    proxied: Option<ureq::Agent>,
    opts: HttpOptions,
    requests: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("opts", &self.opts).finish()
    }
}

/// Parses a `Retry-After` value: delay seconds or an HTTP date (RFC 9110 section 10.2.3; IMF-fixdate and the
/// two obsolete forms), as the wait from now; a date in the past is no wait. `None`: neither form.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    parse_retry_after_at(v, SystemTime::now())
}

/// [`parse_retry_after`] relative to `now`.
pub fn parse_retry_after_at(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

impl Client {
    /// Builds the client.
    pub fn new(opts: HttpOptions) -> Result<Client, HttpError> {
        let builder = || {
            ureq::AgentBuilder::new()
                .timeout_connect(opts.connect_timeout)
                .timeout(opts.timeout)
                .redirects(3)
                .user_agent(concat!(
                    "fenced-run-verify-attestation/",
                    env!("CARGO_PKG_VERSION")
                ))
        };
        let proxied = match &opts.proxy {
            None => None,
            Some(p) => {
                let proxy = ureq::Proxy::new(p).map_err(|e| HttpError::Proxy {
                    proxy: p.clone(),
                    detail: e.to_string(),
                })?;
                Some(builder().proxy(proxy).build())
            }
        };
        Ok(Client {
            direct: builder().build(),
            proxied,
            opts,
            requests: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// How many requests this client has sent (retries included).
    pub fn requests_sent(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn agent_for(&self, url: &str) -> &ureq::Agent {
        let Some(p) = &self.proxied else {
            return &self.direct;
        };
        let authority = url
            .split_once("://")
            .map(|(_, r)| r)
            .unwrap_or(url)
            .split(['/', '?', '#'])
            .next()
            .unwrap_or("");
        let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        // The host without its port ([v6] literals keep their brackets off).
        let host = if let Some(rest) = authority.strip_prefix('[') {
            rest.split(']').next().unwrap_or("")
        } else {
            authority.rsplit_once(':').map_or(authority, |(h, _)| h)
        }
        .to_ascii_lowercase();
        let bypass = self.opts.no_proxy.iter().any(|n| {
            n == "*" || host == *n || host.ends_with(&format!(".{}", n.trim_start_matches('.')))
        });
        if bypass {
            &self.direct
        } else {
            p
        }
    }

    /// GETs `url`, retrying 429/503 as `Retry-After` says (bounded), and returns a 200 answer's body.
    pub fn get(&self, url: &str) -> Result<Response, HttpError> {
        let mut attempt = 0u32;
        let mut backoff = self.opts.backoff;
        loop {
            self.requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match self.agent_for(url).get(url).call() {
                Ok(resp) => return self.read(url, resp),
                Err(ureq::Error::Status(status, resp)) => {
                    let retry_after = resp.header("retry-after").map(str::to_string);
                    let excerpt = body_excerpt(resp);
                    if status != 429 && status != 503 {
                        return Err(HttpError::Status {
                            url: url.to_string(),
                            status,
                            detail: excerpt,
                        });
                    }
                    if attempt >= self.opts.max_retries {
                        return Err(HttpError::GaveUp {
                            url: url.to_string(),
                            status,
                            detail: format!(
                                "gave up after {} retr{} (last Retry-After: {})",
                                attempt,
                                if attempt == 1 { "y" } else { "ies" },
                                retry_after.as_deref().unwrap_or("none")
                            ),
                        });
                    }
                    let wait = match retry_after.as_deref().map(parse_retry_after) {
                        Some(Some(d)) => d,
                        Some(None) | None => backoff,
                    };
                    if wait > self.opts.max_retry_wait {
                        // Capped: a wait past max_retry_wait is not waited out (a server, or a clock, asking
                        // for hours would hang the verifier); the error says what was asked and the cap.
                        return Err(HttpError::GaveUp {
                            url: url.to_string(),
                            status,
                            detail: format!(
                                "the server asks to wait {}s (Retry-After: {}), more than the cap of {}s on one \
                                 wait, so it was not waited out (after {} retr{}); try again later",
                                wait.as_secs(),
                                retry_after.as_deref().unwrap_or("none"),
                                self.opts.max_retry_wait.as_secs(),
                                attempt,
                                if attempt == 1 { "y" } else { "ies" },
                            ),
                        });
                    }
                    std::thread::sleep(wait);
                    attempt += 1;
                    backoff = backoff.saturating_mul(2).min(self.opts.max_retry_wait);
                }
                Err(ureq::Error::Transport(t)) => {
                    return Err(HttpError::Transport {
                        url: url.to_string(),
                        detail: transport_detail(&t),
                    })
                }
            }
        }
    }

    fn read(&self, asked: &str, resp: ureq::Response) -> Result<Response, HttpError> {
        // The URL that answered, after redirects; errors name it too, with the one asked for when they differ.
        let served = resp.get_url().to_string();
        let url = if served == asked {
            served.clone()
        } else {
            format!("{served} (redirected from {asked})")
        };
        let url = url.as_str();
        let headers = resp
            .headers_names()
            .into_iter()
            .filter_map(|n| {
                resp.header(&n)
                    .map(|v| (n.to_ascii_lowercase(), v.to_string()))
            })
            .collect();
        let declared: Option<u64> = resp
            .header("content-length")
            .and_then(|v| v.trim().parse().ok());
        if let Some(n) = declared {
            if n > self.opts.max_body {
                return Err(HttpError::Body {
                    url: url.to_string(),
                    detail: format!(
                        "Content-Length {n} is over the {} byte limit",
                        self.opts.max_body
                    ),
                });
            }
        }
        let mut body = Vec::new();
        resp.into_reader()
            .take(self.opts.max_body + 1)
            .read_to_end(&mut body)
            .map_err(|e| HttpError::Body {
                url: url.to_string(),
                detail: format!("reading the body failed after {} bytes: {e}", body.len()),
            })?;
        if body.len() as u64 > self.opts.max_body {
            return Err(HttpError::Body {
                url: url.to_string(),
                detail: format!("more than the {} byte limit", self.opts.max_body),
            });
        }
        if let Some(n) = declared {
            if body.len() as u64 != n {
                return Err(HttpError::Body {
                    url: url.to_string(),
                    detail: format!("cut short: {} of {n} bytes", body.len()),
                });
            }
        }
        Ok(Response {
            url: served,
            body,
            headers,
        })
    }
}

fn transport_detail(t: &ureq::Transport) -> String {
    let mut s = t.kind().to_string();
    if let Some(m) = t.message() {
        s.push_str(": ");
        s.push_str(m);
    }
    let mut src = std::error::Error::source(t);
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}

fn body_excerpt(resp: ureq::Response) -> String {
    let mut buf = Vec::new();
    let _ = resp.into_reader().take(200).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let t: String = text
        .chars()
        .filter(|c| !c.is_control() || *c == ' ')
        .collect();
    t.trim().to_string()
}
