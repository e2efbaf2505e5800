//! The founder's side of the gateway: `pool submit/status/fetch/cancel --gateway URL` send their requests here
//! (HTTP/1.1 over TCP, TLS or a Unix socket), with the founder's token as a bearer credential.

use super::SubmitQuery;
use crate::cli::Submitted;
use crate::workflow::RunResult;
use attestation::text::escape;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest answer read from the gateway (evidence is tens of KiB; a status is a few).
pub const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// How long a request may take beyond what it asks the gateway to wait.
const SLACK: Duration = Duration::from_secs(120);

enum Target {
    Http(String),
    Https {
        addr: String,
        name: rustls::pki_types::ServerName<'static>,
        config: Arc<rustls::ClientConfig>,
    },
    Unix(PathBuf),
}

/// A client of one gateway, with one founder's token.
pub struct GatewayClient {
    url: String,
    target: Target,
    token: String,
}

/// Why a gateway request failed: the exit status it gives (1: not found, not final, already used; 2: anything
/// else), the message, and whether the gateway could not be reached at all.
#[derive(Debug)]
pub struct Failure {
    /// The command's exit status.
    pub code: u8,
    /// What went wrong, naming the gateway.
    pub msg: String,
    /// True when no answer came (connection refused or cut): the gateway may be restarting.
    pub unreachable: bool,
}

fn tls_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(f) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(f)
                .map_err(|e| format!("--gateway-ca {}: {e}", f.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--gateway-ca {}: {e}", f.display()))?;
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| format!("--gateway-ca {}: {e}", f.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "--gateway-ca {}: no certificate in it",
                    f.display()
                ));
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(
                    "--gateway https://...: TLS: no trusted roots on this system; give --gateway-ca FILE".into(),
                );
            }
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

impl GatewayClient {
    /// A client of the gateway at `url` (`http://HOST:PORT`, `https://HOST:PORT` or `unix:PATH`) sending
    /// `token`; `ca` is the PEM file of the certificates to trust for `https` (default: the system's roots).
    pub fn new(url: &str, token: &str, ca: Option<&Path>) -> Result<GatewayClient, String> {
        let shown = escape(url).into_owned();
        if token.is_empty()
            || token.len() > crate::founders::MAX_TOKEN_LEN
            || !token.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(
                "the founder token is empty, too long or not printable ASCII (it is the line `pool founder add` printed)"
                    .into(),
            );
        }
        let host_port = |rest: &str| -> Result<String, String> {
            let rest = rest.trim_end_matches('/');
            match rest.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0) => {
                    Ok(rest.to_owned())
                }
                _ => Err(format!(
                    "--gateway {shown}: expected HOST:PORT after the scheme"
                )),
            }
        };
        let target = if let Some(p) = url.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(format!("--gateway {shown}: expected unix:PATH"));
            }
            if ca.is_some() {
                return Err("--gateway-ca: only for an https:// gateway".into());
            }
            Target::Unix(PathBuf::from(p))
        } else if let Some(rest) = url.strip_prefix("http://") {
            if ca.is_some() {
                return Err("--gateway-ca: only for an https:// gateway".into());
            }
            Target::Http(host_port(rest)?)
        } else if let Some(rest) = url.strip_prefix("https://") {
            let addr = host_port(rest)?;
            let host = addr
                .rsplit_once(':')
                .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
                .unwrap_or_default();
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| format!("--gateway {shown}: {e}"))?;
            Target::Https {
                addr,
                name,
                config: tls_config(ca)?,
            }
        } else {
            return Err(format!(
                "--gateway {shown}: expected http://HOST:PORT, https://HOST:PORT or unix:PATH"
            ));
        };
        Ok(GatewayClient {
            url: url.to_owned(),
            target,
            token: token.to_owned(),
        })
    }

    fn failure(&self, code: u8, msg: impl std::fmt::Display, unreachable: bool) -> Failure {
        Failure {
            code,
            msg: format!("gateway {}: {msg}", escape(&self.url)),
            unreachable,
        }
    }

    async fn exchange<I>(
        io: I,
        req: Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String>
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        sender.send_request(req).await.map_err(|e| e.to_string())
    }

    /// One request: the status, the headers and the body (at most [`MAX_ANSWER`] bytes) of the answer.
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Vec<u8>,
        limit: Duration,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), Failure> {
        let host = match &self.target {
            Target::Http(a) | Target::Https { addr: a, .. } => a.clone(),
            Target::Unix(_) => "localhost".to_owned(),
        };
        let req = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(hyper::header::HOST, host)
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| self.failure(2, e, false))?;
        let exchange = async {
            let resp = match &self.target {
                Target::Http(addr) => {
                    let s = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| (true, e.to_string()))?;
                    Self::exchange(s, req).await.map_err(|e| (true, e))?
                }
                Target::Https { addr, name, config } => {
                    let s = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| (true, e.to_string()))?;
                    let tls = tokio_rustls::TlsConnector::from(config.clone())
                        .connect(name.clone(), s)
                        .await
                        .map_err(|e| (false, format!("TLS: {e}")))?;
                    Self::exchange(tls, req).await.map_err(|e| (true, e))?
                }
                Target::Unix(path) => {
                    let s = tokio::net::UnixStream::connect(path)
                        .await
                        .map_err(|e| (true, e.to_string()))?;
                    Self::exchange(s, req).await.map_err(|e| (true, e))?
                }
            };
            let (parts, body) = resp.into_parts();
            let bytes = Limited::new(body, MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| (false, format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, (bool, String)>((parts.status, parts.headers, bytes))
        };
        match tokio::time::timeout(limit, exchange).await {
            Err(_) => {
                Err(self.failure(2, format!("no answer within {} s", limit.as_secs()), false))
            }
            Ok(Err((unreachable, e))) => Err(self.failure(2, e, unreachable)),
            Ok(Ok(x)) => Ok(x),
        }
    }

    /// The failure an error answer stands for: 404 and 409 exit 1 (not found or not yours, already used, no
    /// evidence yet), everything else 2.
    fn refused(&self, status: StatusCode, body: &[u8]) -> Failure {
        let msg = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        let code = match status {
            StatusCode::NOT_FOUND | StatusCode::CONFLICT => 1,
            _ => 2,
        };
        self.failure(code, format!("{status}: {}", escape(&msg)), false)
    }

    fn path(id: &str, tail: &str) -> String {
        // Run IDs are checked (A-Z a-z 0-9 - _ . :) before they get here; none needs escaping in a path.
        format!("/v1/runs/{id}{tail}")
    }

    /// Uploads the bundle and starts the run.
    pub async fn submit(&self, q: &SubmitQuery, bundle: Vec<u8>) -> Result<Submitted, Failure> {
        let query = serde_urlencoded::to_string(q).map_err(|e| self.failure(2, e, false))?;
        let (status, _, body) = self
            .send(
                Method::POST,
                &format!("/v1/runs?{query}"),
                bundle,
                SLACK * 5,
            )
            .await?;
        if status != StatusCode::CREATED {
            return Err(self.refused(status, &body));
        }
        serde_json::from_slice(&body)
            .map_err(|e| self.failure(2, format!("its answer: {e}"), false))
    }

    /// What `pool status` prints for the run, rendered by the gateway (escaped again here).
    pub async fn status(&self, run_id: &str, json: bool) -> Result<String, Failure> {
        let format = if json { "json" } else { "text" };
        let (status, _, body) = self
            .send(
                Method::GET,
                &Self::path(run_id, &format!("?format={format}")),
                Vec::new(),
                SLACK,
            )
            .await?;
        if status != StatusCode::OK {
            return Err(self.refused(status, &body));
        }
        let text = String::from_utf8_lossy(&body);
        Ok(if json {
            attestation::text::json_safe(&text).into_owned()
        } else {
            attestation::text::escape_text(&text).into_owned()
        })
    }

    /// Waits up to `limit` for the run's result: None when it is not final by then. A gateway that cannot be
    /// reached (restarting) is asked again every second until then.
    pub async fn wait_result(
        &self,
        run_id: &str,
        limit: Duration,
    ) -> Result<Option<RunResult>, Failure> {
        let deadline = Instant::now() + limit;
        let mut said = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let wait = left.as_secs().clamp(1, 30);
            match self
                .send(
                    Method::GET,
                    &Self::path(run_id, &format!("/result?wait={wait}")),
                    Vec::new(),
                    Duration::from_secs(wait) + SLACK,
                )
                .await
            {
                Ok((StatusCode::OK, _, body)) => {
                    return serde_json::from_slice(&body)
                        .map(Some)
                        .map_err(|e| self.failure(2, format!("its answer: {e}"), false))
                }
                Ok((StatusCode::ACCEPTED, _, _)) => {}
                Ok((status, _, body)) => return Err(self.refused(status, &body)),
                Err(f) if f.unreachable => {
                    if !said {
                        eprintln!(
                            "fenced-run pool: {}; asking again until --wait-timeout",
                            f.msg
                        );
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1).min(left)).await;
                }
                Err(f) => return Err(f),
            }
        }
    }

    /// The accepted attempt's evidence and that attempt's number.
    pub async fn evidence(&self, run_id: &str) -> Result<(i32, Vec<u8>), Failure> {
        let (status, headers, body) = self
            .send(
                Method::GET,
                &Self::path(run_id, "/evidence"),
                Vec::new(),
                SLACK,
            )
            .await?;
        if status != StatusCode::OK {
            return Err(self.refused(status, &body));
        }
        let attempt = headers
            .get("x-pool-attempt")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
            .ok_or_else(|| {
                self.failure(2, "its answer names no attempt (x-pool-attempt)", false)
            })?;
        Ok((attempt, body.to_vec()))
    }

    /// The run's execution ledger, signed by the gateway's pool key (the file `verify-attestation --pool-ledger`
    /// reads).
    pub async fn ledger(&self, run_id: &str) -> Result<Vec<u8>, Failure> {
        let (status, _, body) = self
            .send(
                Method::GET,
                &Self::path(run_id, "/ledger"),
                Vec::new(),
                SLACK,
            )
            .await?;
        if status != StatusCode::OK {
            return Err(self.refused(status, &body));
        }
        Ok(body.to_vec())
    }

    /// Cancels the run; why it ended (or that it had not within `wait_seconds`).
    pub async fn cancel(&self, run_id: &str, wait_seconds: u64) -> Result<String, Failure> {
        let (status, _, body) = self
            .send(
                Method::POST,
                &Self::path(run_id, &format!("/cancel?wait={wait_seconds}")),
                Vec::new(),
                Duration::from_secs(wait_seconds) + SLACK,
            )
            .await?;
        if status != StatusCode::OK {
            return Err(self.refused(status, &body));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| self.failure(2, format!("its answer: {e}"), false))?;
        Ok(v["why"].as_str().unwrap_or_default().to_owned())
    }
}
