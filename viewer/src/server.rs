//! The HTTP side: axum on a tokio runtime of its own thread, listening on 127.0.0.1 and ::1 (and, only with a
//! root-owned bind credential, the addresses it lists). Every request is checked in this order: its `Host` must
//! be an address and port the viewer listens on (or `localhost:PORT`), else 421; its path must start with the
//! per-run token, else 404 with nothing about the run. Every response carries a strict Content-Security-Policy,
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and `Cache-Control: no-store`.

use crate::bind::{check_bind, BindError, Credential};
use crate::docs::Docs;
use crate::model::Page;
use crate::render::{css_hash_source, docs_page, plain_page, Renderer};
use crate::token::Token;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// How to serve.
#[derive(Clone, Debug, Default)]
pub struct ServeConfig {
    /// The port (0: an ephemeral one, chosen by the system).
    pub port: u16,
    /// Stop after the first load of the page.
    pub once: bool,
    /// Stop on SIGINT (Ctrl-C).
    pub until_interrupt: bool,
    /// Addresses to listen on besides loopback; each must be listed by `credential`.
    pub extra: Vec<IpAddr>,
    /// The bind credential (from [`crate::bind::CREDENTIAL_PATH`]).
    pub credential: Option<Credential>,
}

/// Why the viewer could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The bind policy refused an address.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The system refused to listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The runtime could not start or stopped with an error.
    #[error("the viewer's server: {0}")]
    Runtime(String),
}

/// A running viewer.
pub struct Running {
    url: String,
    port: u16,
    addrs: Vec<SocketAddr>,
    token: Token,
    warnings: Vec<String>,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Running {
    /// The URL of the page (with the token), on 127.0.0.1.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every address listened on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The token.
    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// What did not work but did not stop the viewer (e.g. no IPv6 loopback).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Waits until the viewer stops (`--once` after the first page load, or SIGINT).
    pub fn wait(mut self) -> Result<(), ServeError> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(e))) => Err(ServeError::Runtime(e)),
            Some(Err(_)) => Err(ServeError::Runtime("the server thread panicked".into())),
        }
    }

    /// Stops the viewer and waits for it.
    pub fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(true);
        self.wait()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct App {
    token: Token,
    hosts: Vec<String>,
    page: String,
    docs: String,
    /// `check-input.json` of the browser check (`None`: a verdict JSON, nothing to check).
    check_input: Option<String>,
    /// verifier-wasm built for wasm32 (`None`: not found; the page then says the browser check did not run).
    module: Option<Vec<u8>>,
    csp: HeaderValue,
    once: bool,
    stop: tokio::sync::watch::Sender<bool>,
}

fn listen(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    let l =
        std::net::TcpListener::bind(addr).map_err(|source| ServeError::Listen { addr, source })?;
    l.set_nonblocking(true)
        .map_err(|source| ServeError::Listen { addr, source })?;
    Ok(l)
}

/// Renders `page` and serves it, with the verifier module [`crate::browser::find_module`] finds for the browser
/// check; returns once every listener is bound (the URL is then reachable).
pub fn start(page: &Page, cfg: ServeConfig) -> Result<Running, ServeError> {
    start_with_module(page, cfg, crate::browser::find_module().map(|(_, m)| m))
}

/// [`start`] with the browser check's module given (`None`: no module is served, and the page says the browser
/// check did not run).
pub fn start_with_module(
    page: &Page,
    cfg: ServeConfig,
    module: Option<Vec<u8>>,
) -> Result<Running, ServeError> {
    for a in &cfg.extra {
        check_bind(*a, cfg.credential.as_ref())?;
    }
    let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), cfg.port);
    check_bind(v4.ip(), None)?;
    let first = listen(v4)?;
    let port = first
        .local_addr()
        .map_err(|source| ServeError::Listen { addr: v4, source })?
        .port();
    let mut listeners = vec![first];
    let mut addrs = vec![SocketAddr::new(v4.ip(), port)];
    let mut warnings = Vec::new();
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port);
    match listen(v6) {
        Ok(l) => {
            listeners.push(l);
            addrs.push(v6);
        }
        Err(e) => warnings.push(format!("not listening on IPv6 loopback: {e}")),
    }
    for a in &cfg.extra {
        let sa = SocketAddr::new(*a, port);
        listeners.push(listen(sa)?);
        addrs.push(sa);
    }
    let mut hosts: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    hosts.push(format!("localhost:{port}"));

    let token = Token::random();
    let docs = Docs::verification();
    let html = Renderer::new(page, &docs).page();
    // The browser check: the page's one script (check.js) and the module it fetches with the input, all from
    // this origin; 'wasm-unsafe-eval' lets the script compile WebAssembly and nothing else.
    let csp = format!(
        "default-src 'none'; style-src {}; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        css_hash_source()
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        token: token.clone(),
        hosts,
        page: html,
        docs: docs_page(&docs),
        check_input: page.browser.as_ref().map(|b| b.input_json()),
        module: module.filter(|m| crate::browser::is_module(m)),
        csp: HeaderValue::from_str(&csp).map_err(|e| ServeError::Runtime(e.to_string()))?,
        once: cfg.once,
        stop: stop.clone(),
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Runtime(e.to_string()))?;
    let until_interrupt = cfg.until_interrupt;
    let stop_sig = stop.clone();
    let thread = std::thread::Builder::new()
        .name("fenced-run-view".into())
        .spawn(move || -> Result<(), String> {
            rt.block_on(async move {
                if until_interrupt {
                    tokio::spawn(async move {
                        if tokio::signal::ctrl_c().await.is_ok() {
                            let _ = stop_sig.send(true);
                        }
                    });
                }
                let router = axum::Router::new().fallback(handle).with_state(app);
                let mut tasks = Vec::new();
                for l in listeners {
                    let l = tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string())?;
                    let mut rx = rx.clone();
                    let router = router.clone();
                    tasks.push(tokio::spawn(async move {
                        axum::serve(l, router)
                            .with_graceful_shutdown(async move {
                                let _ = rx.wait_for(|s| *s).await;
                            })
                            .await
                    }));
                }
                for t in tasks {
                    t.await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .map_err(|e| ServeError::Runtime(e.to_string()))?;
    Ok(Running {
        url: format!("http://127.0.0.1:{port}/{}/", token.as_str()),
        port,
        addrs,
        token,
        warnings,
        stop,
        thread: Some(thread),
    })
}

fn respond(app: &App, status: StatusCode, body: String) -> Response {
    respond_typed(app, status, "text/html; charset=utf-8", body.into())
}

fn respond_typed(
    app: &App,
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, app.csp.clone());
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    r
}

fn not_found(app: &App) -> Response {
    respond(
        app,
        StatusCode::NOT_FOUND,
        plain_page("404 Not Found", "Nothing here."),
    )
}

/// The one handler: Host, then token, then the two documents.
async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    // HTTP/1.1 carries Host; an absolute-form request target carries an authority: both must be ours.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.to_ascii_lowercase());
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_ascii_lowercase());
    let ours = |h: &Option<String>| h.as_ref().is_some_and(|h| app.hosts.iter().any(|a| a == h));
    if !ours(&host) || (authority.is_some() && !ours(&authority)) {
        return respond(
            &app,
            StatusCode::MISDIRECTED_REQUEST,
            plain_page(
                "421 Misdirected Request",
                "This server answers only requests addressed to its loopback address and port.",
            ),
        );
    }
    let path = req.uri().path();
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (tok, tail) = match rest.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (rest, None),
    };
    if !app.token.matches(tok) {
        return not_found(&app);
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(
            &app,
            StatusCode::METHOD_NOT_ALLOWED,
            plain_page("405 Method Not Allowed", "Only GET."),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match tail {
        None => {
            let mut r = respond(&app, StatusCode::PERMANENT_REDIRECT, String::new());
            if let Ok(v) = HeaderValue::from_str(&format!("/{}/", app.token.as_str())) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Some("") => {
            let r = respond(&app, StatusCode::OK, app.page.clone());
            if app.once && req.method() == Method::GET {
                let _ = app.stop.send(true);
            }
            r
        }
        Some("docs/verification") => respond(&app, StatusCode::OK, app.docs.clone()),
        Some("check.js") if app.check_input.is_some() => respond_typed(
            &app,
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            crate::browser::SCRIPT.into(),
        ),
        Some("check-input.json") => match &app.check_input {
            Some(j) => respond_typed(
                &app,
                StatusCode::OK,
                "application/json",
                j.clone().into_bytes(),
            ),
            None => not_found(&app),
        },
        Some("verifier.wasm") => match (&app.check_input, &app.module) {
            (Some(_), Some(m)) => {
                respond_typed(&app, StatusCode::OK, "application/wasm", m.clone())
            }
            _ => not_found(&app),
        },
        Some(_) => not_found(&app),
    }
}
