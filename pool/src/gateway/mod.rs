//! The founder gateway (docs/pool.md, "The founder gateway"): the only service founders talk to. Each request
//! carries a founder's bearer token (`Authorization: Bearer ...`, issued by `pool founder add`); the gateway
//! finds the founder by the token's SHA-256, then the store's row of the run, and acts on Temporal or the store
//! only when the run is that founder's. Another founder's run and a run that does not exist get the same
//! answer: 404 "not found". Run IDs are scoped to their founder (`FOUNDER:ID`), so a founder cannot even learn
//! that another founder used an ID.
//!
//! The API (JSON errors `{"error": "..."}` with the status code):
//!
//! | request | answer |
//! |---|---|
//! | `POST /v1/runs?run_id&nonce&queue&isolation&kind&max_attempts&heartbeat_seconds&budget_seconds`, body: the bundle | 201, the started run (`cli::Submitted`) |
//! | `GET /v1/runs/{id}?format=text\|json` | 200, what `pool status` prints |
//! | `GET /v1/runs/{id}/result?wait=S` | 200, the workflow's result (`RunResult`); 202 when not final within S (at most 60) s |
//! | `GET /v1/runs/{id}/evidence` | 200, the accepted attempt's evidence, its number in `x-pool-attempt`; 409 when there is none |
//! | `GET /v1/runs/{id}/ledger` | 200, the run's execution ledger signed with the gateway's `--pool-key`; 409 without one |
//! | `POST /v1/runs/{id}/cancel?wait=S` | 200, `{"run_id", "why"}` |

pub mod client;

use crate::founders::Founders;
use crate::store::Store;
use crate::workflow::{PoolRun, RunResult};
use attestation::text::escape;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `pool gateway`.
#[derive(clap::Args, Debug)]
pub struct GatewayArgs {
    /// Where to listen: HOST:PORT (port 0: any free port) or unix:PATH. The address is printed on stdout
    /// (`listening on ADDR`) once the gateway accepts.
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// The Temporal frontend, HOST:PORT (the gateway and the workers reach it; founders never do).
    #[arg(long, value_name = "HOST:PORT")]
    pub temporal: String,
    /// The Temporal namespace.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// The store, a PostgreSQL connection URL (the pool's own role).
    #[arg(long, value_name = "URL")]
    pub store: String,
    /// TLS: the server's certificate chain, PEM (with --tls-key; TCP only).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS: the server's private key, PEM.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The largest bundle a founder may upload, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_bundle_mib: u64,
    /// The pool's ledger-signing key (from `pool key`): with it, founders fetch their run's signed execution
    /// ledger (`GET /v1/runs/{id}/ledger`); without it that request is answered 409.
    #[arg(long, value_name = "FILE")]
    pub pool_key: Option<PathBuf>,
}

/// The most connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take to send a request's body (a bundle).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest a `result` request waits for the run to end.
pub const MAX_RESULT_WAIT: u64 = 60;
/// The longest a `cancel` request waits for the workflow to confirm.
pub const MAX_CANCEL_WAIT: u64 = 300;
/// The longest attempt budget (the job's own phase budgets, seconds) the gateway accepts: seven days.
pub const MAX_BUDGET_SECONDS: u64 = 7 * 24 * 3600;

/// The query of a submit: everything but the bundle, which is the body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitQuery {
    /// The run ID the founder chose (scoped to the founder by the gateway).
    pub run_id: String,
    /// The founder's nonce, hex.
    pub nonce: String,
    /// The task queue.
    pub queue: String,
    /// The isolation tier.
    pub isolation: String,
    /// The bundle's kind: `tar`, `tar.gz` or `zip`.
    pub kind: String,
    /// Most attempts (1 to 20).
    pub max_attempts: u32,
    /// The lease in seconds (1 to 3600).
    pub heartbeat_seconds: u64,
    /// The job's own phase budgets in seconds, as intake read them on the founder's machine (1 to 7 days).
    pub budget_seconds: u64,
}

struct Gateway {
    store_url: String,
    temporal: temporalio_client::Client,
    max_bundle: usize,
    pool_key: Option<ed25519_dalek::SigningKey>,
}

/// An error answer: a status code and a message, sent as `{"error": msg}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    msg: String,
}

impl ApiError {
    fn new(status: StatusCode, msg: impl Into<String>) -> ApiError {
        ApiError {
            status,
            msg: msg.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "error": self.msg }).to_string(),
        )
            .into_response()
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what}: {}", escape(&e.to_string())),
    )
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("run {}: not found", escape(id)),
    )
}

/// The pool's run ID for a founder's `id`: `FOUNDER:ID`, unless `id` already starts with `FOUNDER:`. A founder
/// name never contains `:`, so no founder's IDs can name another founder's runs.
pub fn scoped_run_id(founder: &str, id: &str) -> String {
    let prefix = format!("{founder}:");
    if id.starts_with(&prefix) {
        id.to_owned()
    } else {
        format!("{prefix}{id}")
    }
}

fn check_scoped(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "run ID {}: use A-Z a-z 0-9 - _ . : (at most 200 with the founder's prefix)",
                escape(id)
            ),
        ))
    }
}

/// The founder a request's token belongs to, and the store connection that found it. 401 without a token, with
/// one the store does not know, or with an expired one (saying that it expired and when).
async fn authenticate(g: &Gateway, headers: &HeaderMap) -> Result<(Founders, String), ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "no valid founder token: send `Authorization: Bearer TOKEN` with the token `pool founder add` issued",
        )
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= crate::founders::MAX_TOKEN_LEN)
        .ok_or_else(refused)?;
    let founders = Founders::connect(&g.store_url)
        .await
        .map_err(|e| unavailable("the store", e))?;
    match founders.authenticate(token).await {
        Ok(crate::founders::TokenCheck::Valid(f)) => Ok((founders, f)),
        // Said apart from a wrong token: the founder held a real one and needs a new one from the operator.
        Ok(crate::founders::TokenCheck::Expired(f, at)) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "the founder token of {f} expired at {at}; ask the operator for a new one (`pool founder add {f} --replace`)"
            ),
        )),
        Ok(crate::founders::TokenCheck::Unknown) => Err(refused()),
        Err(e) => Err(unavailable("the store", e)),
    }
}

/// Authenticates the request and checks that the run `id` (scoped to the founder) is the founder's: the
/// founder and the pool's run ID. Another founder's run is "not found", exactly as a run that does not exist.
async fn own_run(g: &Gateway, headers: &HeaderMap, id: &str) -> Result<(String, String), ApiError> {
    let (founders, founder) = authenticate(g, headers).await?;
    let run_id = scoped_run_id(&founder, id);
    check_scoped(&run_id)?;
    match founders.owner_of(&run_id).await {
        Ok(Some(owner)) if owner == founder => Ok((founder, run_id)),
        Ok(_) => Err(not_found(id)),
        Err(e) => Err(unavailable("the store", e)),
    }
}

fn query<T: serde::de::DeserializeOwned>(uri: &axum::http::Uri) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("query: {}", escape(&e.body_text())),
            )
        })
}

async fn submit(State(g): State<Arc<Gateway>>, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    // The token first: nothing of the request is read or acted on for an unknown caller.
    let (founders, founder) = authenticate(&g, &parts.headers).await?;
    let q: SubmitQuery = query(&parts.uri)?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, m);
    let nonce = host::cli::parse_nonce(&q.nonce)
        .map_err(|e| bad(format!("nonce: {}", escape(&e.to_string()))))?;
    if !matches!(q.kind.as_str(), "tar" | "tar.gz" | "zip") {
        return Err(bad(format!(
            "kind {}: expected tar, tar.gz or zip",
            escape(&q.kind)
        )));
    }
    if !matches!(q.isolation.as_str(), "process" | "vm") {
        return Err(bad(format!(
            "isolation {}: only `process` and `vm` run today",
            escape(&q.isolation)
        )));
    }
    let queue_ok = !q.queue.is_empty()
        && q.queue.len() <= 100
        && q.queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !queue_ok {
        return Err(bad(format!(
            "queue {}: use 1 to 100 of A-Z a-z 0-9 - _ .",
            escape(&q.queue)
        )));
    }
    if !(1..=20).contains(&q.max_attempts) {
        return Err(bad(format!(
            "max_attempts {}: from 1 to 20",
            q.max_attempts
        )));
    }
    if !(1..=3600).contains(&q.heartbeat_seconds) {
        return Err(bad(format!(
            "heartbeat_seconds {}: from 1 to 3600",
            q.heartbeat_seconds
        )));
    }
    if !(1..=MAX_BUDGET_SECONDS).contains(&q.budget_seconds) {
        return Err(bad(format!(
            "budget_seconds {}: from 1 to {MAX_BUDGET_SECONDS}",
            q.budget_seconds
        )));
    }
    let run_id = scoped_run_id(&founder, &q.run_id);
    check_scoped(&run_id)?;
    // IDs are scoped to the founder, so a taken ID is one of the caller's own runs.
    match founders.owner_of(&run_id).await {
        Ok(None) => {}
        Ok(Some(_)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "run ID {}: already submitted; a run ID is used once",
                    escape(&run_id)
                ),
            ))
        }
        Err(e) => return Err(unavailable("the store", e)),
    }
    drop(founders);
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, read_bundle(body, g.max_bundle)).await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the bundle did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            ))
        }
        Ok(Err(e)) => return Err(e),
        Ok(Ok(b)) => b,
    };
    if bytes.is_empty() {
        return Err(bad("the bundle (the request body) is empty".into()));
    }
    let mut store = Store::connect(&g.store_url)
        .await
        .map_err(|e| unavailable("the store", e))?;
    let new = crate::cli::NewRun {
        founder: &founder,
        run_id: &run_id,
        kind: &q.kind,
        bytes: &bytes,
        nonce: &nonce,
        queue: &q.queue,
        isolation: &q.isolation,
        max_attempts: q.max_attempts,
        heartbeat_seconds: q.heartbeat_seconds,
        attempt_seconds: q.budget_seconds + 180,
    };
    match crate::cli::start_run(&mut store, &g.temporal, &new).await {
        Ok(digest) => {
            let s = crate::cli::Submitted {
                run_id,
                bundle_digest: digest,
                founder,
                queue: q.queue,
            };
            Ok((
                StatusCode::CREATED,
                [(header::CONTENT_TYPE, "application/json")],
                serde_json::to_string(&s).unwrap_or_default(),
            )
                .into_response())
        }
        Err((1, e)) => Err(ApiError::new(StatusCode::CONFLICT, e)),
        Err((_, e)) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e)),
    }
}

/// The most of an oversized bundle read (and dropped) before the gateway answers 413, so that the client,
/// still sending, reads the answer instead of a reset connection; beyond it the connection is cut.
pub const DRAIN_LIMIT: usize = 1024 * 1024 * 1024;

/// Reads the request body, at most `limit` bytes kept: 413 for more (the rest read and dropped up to
/// [`DRAIN_LIMIT`], or 4 x `limit` if that is less), 400 for a body cut off.
async fn read_bundle(body: axum::body::Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut kept = Vec::new();
    let mut total: usize = 0;
    let drain = limit.saturating_mul(4).min(DRAIN_LIMIT);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("the bundle was cut off: {}", escape(&e.to_string())),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            total = total.saturating_add(data.len());
            if total <= limit {
                kept.extend_from_slice(&data);
            } else if total > drain {
                break;
            }
        }
    }
    if total > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the bundle ({total}{} bytes) is larger than this gateway takes ({} MiB, --max-bundle-mib)",
                if total > drain { "+" } else { "" },
                limit / (1024 * 1024)
            ),
        ));
    }
    Ok(kept)
}

#[derive(Deserialize)]
struct FormatQuery {
    format: Option<String>,
}

async fn status(
    State(g): State<Arc<Gateway>>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let (_, run_id) = own_run(&g, req.headers(), &id).await?;
    let f: FormatQuery = query(req.uri())?;
    let json = match f.format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("format {}: expected text or json", escape(other)),
            ))
        }
    };
    // Temporal first, then the store (crate::store::read_status says why).
    let v = crate::store::read_status(
        crate::temporal::workflow_state(&g.temporal, &run_id),
        &g.store_url,
        &run_id,
    )
    .await
    .map_err(|e| match e {
        crate::store::StatusReadError::Connect(e)
        | crate::store::StatusReadError::Run(e)
        | crate::store::StatusReadError::Executions(e) => unavailable("the store", e),
    })?;
    let out = crate::cli::render_status(&v.run, &v.attempts, &v.executions, &v.workflow, json);
    let ct = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    Ok(([(header::CONTENT_TYPE, ct)], out).into_response())
}

#[derive(Deserialize)]
struct WaitQuery {
    wait: Option<u64>,
}

async fn result(
    State(g): State<Arc<Gateway>>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let (_, run_id) = own_run(&g, req.headers(), &id).await?;
    let w: WaitQuery = query(req.uri())?;
    let wait = w.wait.unwrap_or(30).min(MAX_RESULT_WAIT);
    let handle = g.temporal.get_workflow_handle::<PoolRun>(run_id.clone());
    match tokio::time::timeout(
        Duration::from_secs(wait),
        handle.get_result(Default::default()),
    )
    .await
    {
        Err(_) => Ok((
            StatusCode::ACCEPTED,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "run_id": run_id, "pending": true }).to_string(),
        )
            .into_response()),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("run {}: {}", escape(&run_id), escape(&e.to_string())),
        )),
        Ok(Ok(_)) => {
            // The workflow ended: the answer is the store's record (the coordinator's), never the workflow's
            // result, which anyone who reaches Temporal could have written.
            let store = Store::connect(&g.store_url)
                .await
                .map_err(|e| unavailable("the store", e))?;
            let r: RunResult = store
                .run_result(&run_id)
                .await
                .map_err(|e| unavailable("the store", e))?
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        format!(
                            "run {}: its workflow ended but the store records no end for it: not reported",
                            escape(&run_id)
                        ),
                    )
                })?;
            Ok((
                [(header::CONTENT_TYPE, "application/json")],
                serde_json::to_string(&r).unwrap_or_default(),
            )
                .into_response())
        }
    }
}

async fn evidence(
    State(g): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, run_id) = own_run(&g, &headers, &id).await?;
    let store = Store::connect(&g.store_url)
        .await
        .map_err(|e| unavailable("the store", e))?;
    let (run, _) = store
        .status(&run_id)
        .await
        .map_err(|e| unavailable("the store", e))?;
    if run.accepted_attempt.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "run {}: no accepted evidence yet ({})",
                escape(&run_id),
                escape(run.ended_why.as_deref().unwrap_or("the run is still going"))
            ),
        ));
    }
    match store.accepted_evidence(&run_id).await {
        Ok((attempt, bytes)) => Ok((
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                (
                    header::HeaderName::from_static("x-pool-attempt"),
                    attempt.to_string(),
                ),
            ],
            bytes,
        )
            .into_response()),
        Err(e) => Err(unavailable("the store", e)),
    }
}

/// The run's execution ledger, signed with the gateway's pool key.
async fn ledger(
    State(g): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, run_id) = own_run(&g, &headers, &id).await?;
    let Some(key) = &g.pool_key else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this gateway holds no pool key (--pool-key), so it signs no ledger",
        ));
    };
    let store = Store::connect(&g.store_url)
        .await
        .map_err(|e| unavailable("the store", e))?;
    let l = store
        .ledger(&run_id)
        .await
        .map_err(|e| unavailable("the store", e))?;
    let signed = l
        .sign(key)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], signed).into_response())
}

async fn cancel(
    State(g): State<Arc<Gateway>>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let (_, run_id) = own_run(&g, req.headers(), &id).await?;
    let w: WaitQuery = query(req.uri())?;
    let wait = w.wait.unwrap_or(60).min(MAX_CANCEL_WAIT);
    match crate::cli::cancel_run(&g.temporal, &run_id, wait).await {
        Ok(why) => Ok((
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "run_id": run_id, "cancelled": true, "why": why }).to_string(),
        )
            .into_response()),
        Err((_, e)) => Err(ApiError::new(StatusCode::BAD_GATEWAY, e)),
    }
}

async fn no_route(headers: HeaderMap, State(g): State<Arc<Gateway>>) -> ApiError {
    // Unknown paths answer 404 too, but only to a founder: without a token it is 401, as everywhere.
    match authenticate(&g, &headers).await {
        Ok(_) => ApiError::new(StatusCode::NOT_FOUND, "no such request (see docs/pool.md)"),
        Err(e) => e,
    }
}

fn router(g: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1/runs", post(submit))
        .route("/v1/runs/{id}", get(status))
        .route("/v1/runs/{id}/result", get(result))
        .route("/v1/runs/{id}/evidence", get(evidence))
        .route("/v1/runs/{id}/ledger", get(ledger))
        .route("/v1/runs/{id}/cancel", post(cancel))
        .fallback(no_route)
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(g)
}

/// Where the gateway listens.
enum Listener {
    Tcp(tokio::net::TcpListener, Option<tokio_rustls::TlsAcceptor>),
    Unix(tokio::net::UnixListener, PathBuf),
}

fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: no certificate in it",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

async fn bind(a: &GatewayArgs) -> Result<(Listener, String), String> {
    if let Some(path) = a.listen.strip_prefix("unix:") {
        if a.tls_cert.is_some() {
            return Err(
                "--tls-cert: TLS is for a TCP --listen; a Unix socket is guarded by its file mode"
                    .into(),
            );
        }
        let path = PathBuf::from(path);
        // A socket file left by a gateway that was killed: removed when nobody answers on it.
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::FileTypeExt;
            if meta.file_type().is_socket()
                && std::os::unix::net::UnixStream::connect(&path).is_err()
            {
                let _ = std::fs::remove_file(&path);
            }
        }
        let l = tokio::net::UnixListener::bind(&path)
            .map_err(|e| format!("--listen unix:{}: {e}", path.display()))?;
        let shown = format!("unix:{}", path.display());
        return Ok((Listener::Unix(l, path), shown));
    }
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(tls_acceptor(c, k)?),
        _ => None,
    };
    let addr: std::net::SocketAddr = a.listen.parse().map_err(|_| {
        format!(
            "--listen {}: expected HOST:PORT (an IP address and a port) or unix:PATH",
            escape(&a.listen)
        )
    })?;
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--listen {addr}: {e}"))?;
    let local = l
        .local_addr()
        .map_err(|e| format!("--listen {addr}: {e}"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    Ok((Listener::Tcp(l, tls), format!("{scheme}://{local}")))
}

async fn serve_io<I>(io: I, app: Router)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await;
}

/// `pool gateway`: binds, connects to Temporal and the store, then serves until SIGTERM or SIGINT.
pub async fn main(a: GatewayArgs) -> ExitCode {
    let fail = |msg: &str| {
        eprintln!("fenced-run pool gateway: {msg}");
        ExitCode::from(2)
    };
    if let Err(e) = crate::temporal::target(&a.temporal) {
        return fail(&e);
    }
    // The schema (the store's and the founders' table) before the first request.
    match Store::connect(&a.store).await {
        Ok(mut s) => {
            if let Err(e) = s.migrate().await {
                return fail(&e);
            }
        }
        Err(e) => return fail(&e),
    }
    match Founders::connect(&a.store).await {
        Ok(mut f) => {
            if let Err(e) = f.migrate().await {
                return fail(&e.to_string());
            }
        }
        Err(e) => return fail(&e.to_string()),
    }
    let temporal = match crate::temporal::connect(
        &a.temporal,
        &a.namespace,
        "fenced-run-pool-gateway",
    )
    .await
    {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let max_bundle = usize::try_from(a.max_bundle_mib * 1024 * 1024).unwrap_or(usize::MAX);
    let pool_key = match &a.pool_key {
        Some(p) => match attestation::pool_ledger::load_signing_key(p) {
            Ok(k) => Some(k),
            Err(e) => return fail(&format!("--pool-key {}: {e}", p.display())),
        },
        None => None,
    };
    let (listener, shown) = match bind(&a).await {
        Ok(x) => x,
        Err(e) => return fail(&e),
    };
    let app = router(Arc::new(Gateway {
        store_url: a.store.clone(),
        temporal,
        max_bundle,
        pool_key,
    }));
    println!("listening on {shown}");
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let stop = async {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut t), Ok(mut i)) => {
                tokio::select! { _ = t.recv() => {}, _ = i.recv() => {} }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(stop);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let app = app.clone();
        match &listener {
            Listener::Tcp(l, tls) => {
                let accepted = tokio::select! { a = l.accept() => a, _ = &mut stop => break };
                match accepted {
                    Ok((sock, _)) => {
                        let tls = tls.clone();
                        tokio::spawn(async move {
                            let _permit = permit;
                            match tls {
                                None => serve_io(sock, app).await,
                                Some(acceptor) => {
                                    if let Ok(Ok(s)) =
                                        tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(sock))
                                            .await
                                    {
                                        serve_io(s, app).await
                                    }
                                }
                            }
                        });
                    }
                    Err(e) => {
                        eprintln!("fenced-run pool gateway: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            Listener::Unix(l, _) => {
                let accepted = tokio::select! { a = l.accept() => a, _ = &mut stop => break };
                match accepted {
                    Ok((sock, _)) => {
                        tokio::spawn(async move {
                            let _permit = permit;
                            serve_io(sock, app).await
                        });
                    }
                    Err(e) => {
                        eprintln!("fenced-run pool gateway: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
    eprintln!("fenced-run pool gateway: stopped");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_scoped_to_their_founder() {
        assert_eq!(scoped_run_id("alice", "run-1"), "alice:run-1");
        assert_eq!(scoped_run_id("alice", "alice:run-1"), "alice:run-1");
        // Another founder's full ID stays inside the caller's own scope.
        assert_eq!(scoped_run_id("alice", "bob:run-1"), "alice:bob:run-1");
        assert!(check_scoped("alice:run-1").is_ok());
        assert!(check_scoped("alice:../x/y").is_err());
        assert!(check_scoped(&format!("alice:{}", "a".repeat(200))).is_err());
    }
}
