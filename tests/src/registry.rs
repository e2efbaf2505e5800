//! A loopback package registry for the end-to-end tests: a test CA and a server certificate for `localhost`
//! (made with the `openssl` CLI), an HTTPS static file server on 127.0.0.1 serving one directory (stopped on
//! drop), and builders that write an npm registry (packuments with `dist.tarball` and `dist.integrity`), a PyPI
//! simple index (PEP 503 HTML linking a pure-Python wheel with its `#sha256=`) and a cargo sparse index
//! (`config.json` with `dl`, index lines at the sparse paths, `.crate` files with their checksums) into it.
//!
//! The server answers `GET` and `HEAD` only; a directory is answered with its `index.html` or `index.json`; it
//! records every path asked for, so a test can tell that its client really fetched from it.

use sha2::Digest;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Why the registry fixture cannot run here (`None`: it can): the `openssl` CLI is missing.
pub fn missing() -> Option<String> {
    match Command::new("openssl").arg("version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("the openssl CLI is not installed (it makes the test CA)".into()),
    }
}

/// A test CA and a certificate it issued for `localhost` and `127.0.0.1`, in a directory of their own.
pub struct TestCa {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        o.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl TestCa {
    /// Makes a P-256 CA (`CN=fenced-run test registry CA`, basicConstraints CA:TRUE) and a server certificate
    /// for `localhost` signed by it, valid for two days.
    pub fn create() -> TestCa {
        let dir = tempfile::Builder::new()
            .prefix("registry-ca-")
            .tempdir()
            .expect("ca dir");
        let d = dir.path();
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=fenced-run test registry CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        openssl(
            d,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        );
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("ext");
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        TestCa { dir }
    }

    /// The CA certificate (PEM): what the operator's `[egress] ca_certificates` names.
    pub fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = vec![
            CertificateDer::from_pem_file(self.dir.path().join("server.pem")).expect("server.pem"),
        ];
        let key = PrivateKeyDer::from_pem_file(self.dir.path().join("server.key")).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server certificate");
        Arc::new(config)
    }
}

/// An HTTPS static file server on 127.0.0.1 serving `root`; stopped (and its thread joined) on drop.
pub struct HttpsServer {
    port: u16,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpsServer {
    /// Starts serving `root` with `ca`'s server certificate on a free loopback port.
    pub fn start(ca: &TestCa, root: &Path) -> HttpsServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let config = ca.server_config();
        let root = root.to_path_buf();
        let (stop2, requests2) = (stop.clone(), requests.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (config, root, requests) = (config.clone(), root.clone(), requests2.clone());
                std::thread::spawn(move || serve(conn, config, &root, &requests));
            }
        });
        HttpsServer {
            port,
            stop,
            requests,
            thread: Some(thread),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://localhost:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// Every `METHOD PATH STATUS` served so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection: TLS, then requests until the client closes or one fails.
fn serve(
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    root: &Path,
    requests: &Mutex<Vec<String>>,
) {
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let stream = rustls::StreamOwned::new(tls, conn);
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut head_lines = Vec::new();
        loop {
            let mut h = String::new();
            match reader.read_line(&mut h) {
                Ok(0) | Err(_) => return,
                Ok(_) if h == "\r\n" || h == "\n" => break,
                Ok(_) => head_lines.push(h.to_ascii_lowercase()),
            }
        }
        let close = head_lines
            .iter()
            .any(|h| h.starts_with("connection:") && h.contains("close"));
        let mut words = line.split_whitespace();
        let (method, target) = (
            words.next().unwrap_or_default().to_owned(),
            words.next().unwrap_or_default().to_owned(),
        );
        let (status, body, kind) = answer(&method, &target, root);
        if let Ok(mut r) = requests.lock() {
            r.push(format!("{method} {target} {status}"));
        }
        let stream = reader.get_mut();
        let reason = if status == 200 { "OK" } else { "Not Found" };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        let sent = stream.write_all(head.as_bytes()).and_then(|()| {
            if method == "HEAD" {
                Ok(())
            } else {
                stream.write_all(&body)
            }
        });
        if sent.and_then(|()| stream.flush()).is_err() || close {
            stream.conn.send_close_notify();
            let _ = stream.flush();
            return;
        }
    }
}

/// The status, body and content type for `target` under `root`.
fn answer(method: &str, target: &str, root: &Path) -> (u16, Vec<u8>, &'static str) {
    let not_found = (404, b"not found\n".to_vec(), "text/plain");
    if method != "GET" && method != "HEAD" {
        return not_found;
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let rel = Path::new(path.trim_start_matches('/'));
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return not_found;
    }
    let mut file = root.join(rel);
    if file.is_dir() {
        file = ["index.html", "index.json"]
            .iter()
            .map(|n| file.join(n))
            .find(|f| f.is_file())
            .unwrap_or(file);
    }
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    };
    match std::fs::read(&file) {
        Ok(body) if file.is_file() => (200, body, kind),
        _ => not_found,
    }
}

/// A gzip-compressed tar of `files` (path, text), every entry 0644 with a fixed mtime.
pub fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    for (path, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, text.as_bytes())
            .expect("tar entry");
    }
    b.into_inner().expect("tar").finish().expect("gzip")
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Writes an npm package `name@version` (unscoped) whose tarball holds `files` under `package/` into the
/// registry at `root` served as `url`: the packument at `/NAME` (`NAME/index.json`) with `dist.tarball` and
/// `dist.integrity` (sha512), the tarball at `/NAME/-/NAME-VERSION.tgz`.
pub fn npm_package(root: &Path, url: &str, name: &str, version: &str, files: &[(&str, &str)]) {
    let entries: Vec<(String, &str)> = files
        .iter()
        .map(|(p, t)| (format!("package/{p}"), *t))
        .collect();
    let refs: Vec<(&str, &str)> = entries.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let tgz = tar_gz(&refs);
    use base64::Engine;
    let integrity = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&tgz))
    );
    let file = format!("{name}-{version}.tgz");
    write(&root.join(name).join("-").join(&file), &tgz);
    let packument = serde_json::json!({
        "name": name,
        "dist-tags": {"latest": version},
        "versions": {
            version: {
                "name": name,
                "version": version,
                "dist": {"tarball": format!("{url}/{name}/-/{file}"), "integrity": integrity},
            }
        },
    });
    write(
        &root.join(name).join("index.json"),
        packument.to_string().as_bytes(),
    );
}

/// Writes a pure-Python wheel `NAME-VERSION-py3-none-any.whl` holding `files` (module paths) and its
/// `.dist-info` (METADATA, WHEEL, RECORD with each file's hash) into `root/files/`, and the PEP 503 simple
/// index for it: `root/simple/index.html` and `root/simple/NAME/index.html` linking the wheel with `#sha256=`.
/// `name` is already normalised (lowercase, `-`), and a valid module name with `-` made `_`.
pub fn pypi_wheel(root: &Path, name: &str, version: &str, files: &[(&str, &str)]) {
    use base64::Engine;
    let dist = name.replace('-', "_");
    let info = format!("{dist}-{version}.dist-info");
    let mut entries: Vec<(String, String)> = files
        .iter()
        .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
        .collect();
    entries.push((
        format!("{info}/METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"),
    ));
    entries.push((
        format!("{info}/WHEEL"),
        "Wheel-Version: 1.0\nGenerator: fenced-run-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n".into(),
    ));
    let mut record = String::new();
    for (p, t) in &entries {
        let h = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(sha2::Sha256::digest(t.as_bytes()));
        record.push_str(&format!("{p},sha256={h},{}\n", t.len()));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    entries.push((format!("{info}/RECORD"), record));
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .last_modified_time(zip::DateTime::default());
    for (p, t) in &entries {
        zip.start_file(p.as_str(), opts).expect("zip entry");
        zip.write_all(t.as_bytes()).expect("zip write");
    }
    let wheel = zip.finish().expect("zip").into_inner();
    let file = format!("{dist}-{version}-py3-none-any.whl");
    write(&root.join("files").join(&file), &wheel);
    let sha = hex::encode(sha2::Sha256::digest(&wheel));
    write(
        &root.join("simple").join(name).join("index.html"),
        format!(
            "<!DOCTYPE html>\n<html><body>\n<a href=\"../../files/{file}#sha256={sha}\">{file}</a>\n</body></html>\n"
        )
        .as_bytes(),
    );
    write(
        &root.join("simple").join("index.html"),
        format!("<!DOCTYPE html>\n<html><body>\n<a href=\"{name}/\">{name}</a>\n</body></html>\n")
            .as_bytes(),
    );
}

/// The sparse index path of a crate name (`1/a`, `2/ab`, `3/a/abc`, `ab/cd/abcd...`), lowercase.
pub fn sparse_path(name: &str) -> String {
    let n = name.to_ascii_lowercase();
    match n.len() {
        1 => format!("1/{n}"),
        2 => format!("2/{n}"),
        3 => format!("3/{}/{n}", &n[..1]),
        _ => format!("{}/{}/{n}", &n[..2], &n[2..4]),
    }
}

/// Writes a crate `name` `version` without dependencies, whose `src/lib.rs` is `lib_rs`, into the cargo sparse
/// registry at `root` served as `url`: `root/index/config.json` (`dl` = `URL/crates`), the index line at its
/// sparse path with the `.crate`'s SHA-256 as `cksum`, and the `.crate` at `/crates/NAME/VERSION/download`.
/// The registry's URL for cargo is `sparse+URL/index/`.
pub fn cargo_crate(root: &Path, url: &str, name: &str, version: &str, lib_rs: &str) {
    let top = format!("{name}-{version}");
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"{version}\"\nedition = \"2021\"\n\n[lib]\npath = \"src/lib.rs\"\n"
    );
    let krate = tar_gz(&[
        (&format!("{top}/Cargo.toml"), &manifest),
        (&format!("{top}/src/lib.rs"), lib_rs),
    ]);
    let cksum = hex::encode(sha2::Sha256::digest(&krate));
    write(
        &root
            .join("crates")
            .join(name)
            .join(version)
            .join("download"),
        &krate,
    );
    let line = serde_json::json!({
        "name": name, "vers": version, "deps": [], "cksum": cksum, "features": {}, "yanked": false,
    });
    write(
        &root.join("index").join(sparse_path(name)),
        format!("{line}\n").as_bytes(),
    );
    write(
        &root.join("index").join("config.json"),
        serde_json::json!({"dl": format!("{url}/crates"), "api": null})
            .to_string()
            .as_bytes(),
    );
}

/// The ecosystems with a fixture project: each has a dependency from the loopback registry and a base whose
/// tests fail (1 passed, 2 failed) that its patch fixes (3 passed).
pub const ECOSYSTEMS: &[&str] = &["rust", "python", "node"];

/// What each ecosystem's fixture project needs from the job and the verdict.
#[derive(Clone, Copy, Debug)]
pub struct Recipe {
    /// The ecosystem (`rust`, `python`, `node`).
    pub name: &'static str,
    /// The `[image] toolchains` entry.
    pub toolchain: &'static str,
    /// The install command (the job's and the direct run's; `python3` is the image's or the host's).
    pub install: &'static str,
    /// The test command.
    pub test: &'static str,
    /// The counts parser the verdict names.
    pub parser: &'static str,
}

/// The recipes of [`ECOSYSTEMS`] (docs/job-file.md's, with the registry named in the repository's own client
/// configuration and the client's retries off so that a refusal ends the install at once).
pub fn recipe(name: &str) -> Recipe {
    match name {
        "rust" => Recipe {
            name: "rust",
            toolchain: "rust",
            install: "cargo fetch",
            test: "cargo test --offline",
            parser: "cargo-test",
        },
        "python" => Recipe {
            name: "python",
            toolchain: "python",
            install:
                "python3 -m venv --system-site-packages .venv && .venv/bin/pip install --no-input \
                      --disable-pip-version-check --retries 0 --timeout 20 -r requirements.txt",
            test: ".venv/bin/python -m pytest -p no:cacheprovider",
            parser: "pytest",
        },
        "node" => Recipe {
            name: "node",
            toolchain: "node",
            install: "npm install --no-audit --no-fund",
            test: "npm test",
            parser: "node-tap",
        },
        other => panic!("no fixture project for {other}"),
    }
}

/// A loopback registry serving one package per ecosystem (`tinyadd` for cargo and npm, `tinycalc` for pip)
/// over HTTPS with a test CA; stopped on drop.
pub struct Fixture {
    /// The test CA (and the server's certificate).
    pub ca: TestCa,
    /// The served directory.
    pub root: tempfile::TempDir,
    /// The server.
    pub server: HttpsServer,
}

/// The repository files of `eco`'s project at the base (`patched` false) or with its patch applied; `url` is
/// the registry's.
fn project_files(eco: &str, url: &str, patched: bool) -> Vec<(&'static str, String)> {
    let fix = |base: &str, fixed: &str| if patched { fixed } else { base }.to_owned();
    match eco {
        "rust" => vec![
            (
                "Cargo.toml",
                "[package]\nname = \"fixture\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                 [dependencies]\ntinyadd = \"0.1\"\n"
                    .into(),
            ),
            (
                ".cargo/config.toml",
                format!(
                    "[source.crates-io]\nreplace-with = \"loopback\"\n\n[source.loopback]\n\
                     registry = \"sparse+{url}/index/\"\n\n[net]\nretry = 0\n"
                ),
            ),
            (
                "src/lib.rs",
                format!(
                    "pub fn double(x: u32) -> u32 {{\n    {}\n}}\n\n#[cfg(test)]\nmod tests {{\n    \
                     #[test]\n    fn adds() {{\n        assert_eq!(tinyadd::add(1, 2), 3);\n    }}\n\n    \
                     #[test]\n    fn doubles() {{\n        assert_eq!(super::double(2), 4);\n    }}\n\n    \
                     #[test]\n    fn doubles_zero() {{\n        assert_eq!(super::double(0), 0);\n    }}\n}}\n",
                    fix("tinyadd::add(x, x) + 1", "tinyadd::add(x, x)")
                ),
            ),
        ],
        "python" => vec![
            (
                "requirements.txt",
                format!("--index-url {url}/simple/\ntinycalc==1.0.0\n"),
            ),
            (
                "stats.py",
                format!(
                    "from tinycalc import add\n\n\ndef total(values):\n    result = {}\n    for v in values:\n        \
                     result = add(result, v)\n    return result\n",
                    fix("1", "0")
                ),
            ),
            (
                "test_stats.py",
                "from tinycalc import add\nfrom stats import total\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n\
                 def test_total():\n    assert total([1, 2, 3]) == 6\n\n\ndef test_total_empty():\n    assert total([]) == 0\n"
                    .into(),
            ),
        ],
        "node" => vec![
            (
                ".npmrc",
                format!(
                    "registry={url}/\nfetch-retries=0\nfetch-timeout=20000\naudit=false\nfund=false\n\
                     update-notifier=false\n"
                ),
            ),
            (
                "package.json",
                r#"{"name": "fixture", "version": "1.0.0", "private": true, "dependencies": {"tinyadd": "1.0.0"}, "scripts": {"test": "node --test"}}"#
                    .into(),
            ),
            (
                "total.js",
                format!(
                    "const {{ add }} = require('tinyadd');\n\nexports.total = (xs) => xs.reduce((a, b) => add(a, b), {});\n",
                    fix("1", "0")
                ),
            ),
            (
                "test/total.test.js",
                "const test = require('node:test');\nconst assert = require('node:assert');\n\
                 const { add } = require('tinyadd');\nconst { total } = require('../total.js');\n\n\
                 test('adds', () => assert.strictEqual(add(2, 3), 5));\n\
                 test('totals', () => assert.strictEqual(total([1, 2, 3]), 6));\n\
                 test('totals nothing', () => assert.strictEqual(total([]), 0));\n"
                    .into(),
            ),
        ],
        other => panic!("no fixture project for {other}"),
    }
}

/// The patch of `eco`'s project (a unified diff, `a/` and `b/` prefixes).
fn project_patch(eco: &str) -> &'static str {
    match eco {
        "rust" => "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n pub fn double(x: u32) -> u32 {\n\
                   -    tinyadd::add(x, x) + 1\n+    tinyadd::add(x, x)\n }\n",
        "python" => "--- a/stats.py\n+++ b/stats.py\n@@ -3,6 +3,6 @@\n \n def total(values):\n\
                     -    result = 1\n+    result = 0\n     for v in values:\n         result = add(result, v)\n     return result\n",
        "node" => "--- a/total.js\n+++ b/total.js\n@@ -1,3 +1,3 @@\n const { add } = require('tinyadd');\n \n\
                   -exports.total = (xs) => xs.reduce((a, b) => add(a, b), 1);\n\
                   +exports.total = (xs) => xs.reduce((a, b) => add(a, b), 0);\n",
        other => panic!("no fixture project for {other}"),
    }
}

/// A direct run of a fixture project outside the fence ([`Fixture::direct`]).
#[derive(Debug)]
pub struct DirectRun {
    /// The test command's counts (`None`: unparsed).
    pub counts: Option<guest::fence::counts::Counts>,
    /// Both commands' output.
    pub log: String,
    /// The install command's wall-clock seconds.
    pub install_secs: f64,
    /// The test command's wall-clock seconds.
    pub test_secs: f64,
}

impl Fixture {
    /// Makes the CA, starts the server and writes the three registries' packages.
    pub fn start() -> Fixture {
        let ca = TestCa::create();
        let root = tempfile::Builder::new()
            .prefix("registry-root-")
            .tempdir()
            .expect("registry root");
        let server = HttpsServer::start(&ca, root.path());
        let url = server.url();
        cargo_crate(
            root.path(),
            &url,
            "tinyadd",
            "0.1.0",
            "pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n",
        );
        pypi_wheel(
            root.path(),
            "tinycalc",
            "1.0.0",
            &[("tinycalc/__init__.py", "def add(a, b):\n    return a + b\n")],
        );
        npm_package(
            root.path(),
            &url,
            "tinyadd",
            "1.0.0",
            &[
                (
                    "package.json",
                    r#"{"name": "tinyadd", "version": "1.0.0", "main": "index.js"}"#,
                ),
                ("index.js", "exports.add = (a, b) => a + b;\n"),
            ],
        );
        Fixture { ca, root, server }
    }

    /// The `localhost:PORT` the job's allowlist names.
    pub fn allow_entry(&self) -> String {
        format!("localhost:{}", self.server.port())
    }

    /// The operator's file: the CA always, `allow_networks = ["127.0.0.1/32"]` when `reach` (without it the
    /// address policy refuses the loopback registry).
    pub fn operator_toml(&self, reach: bool) -> String {
        format!(
            "[egress]\n{}ca_certificates = {:?}\n",
            if reach {
                "allow_networks = [\"127.0.0.1/32\"]\n"
            } else {
                ""
            },
            self.ca.ca_pem().display().to_string()
        )
    }

    /// Writes `eco`'s bundle into `dir` (created): `job.toml`, `repo/` at the base, and with `patched` the
    /// patch `fix.patch` the job names. Returns `dir`.
    pub fn bundle(&self, dir: &Path, eco: &str, patched: bool) -> PathBuf {
        let r = recipe(eco);
        for (rel, text) in project_files(eco, &self.server.url(), false) {
            write(&dir.join("repo").join(rel), text.as_bytes());
        }
        if patched {
            write(&dir.join("fix.patch"), project_patch(eco).as_bytes());
        }
        let job = format!(
            "[repository]\npath = \"repo\"\n{}[image]\ntoolchains = [\"{}\"]\n\
             [install]\ncommand = {:?}\nallow = [\"{}\"]\ntimeout_seconds = 600\n\
             [test]\ncommand = {:?}\ntimeout_seconds = 600\n\
             [limits]\nmemory_mib = 1024\ndisk_mib = 512\n",
            if patched {
                "patch = \"fix.patch\"\n"
            } else {
                ""
            },
            r.toolchain,
            r.install,
            self.allow_entry(),
            r.test,
        );
        write(&dir.join("job.toml"), job.as_bytes());
        dir.to_path_buf()
    }

    /// Runs `eco`'s project (base, or `patched`) directly on this machine, outside any fence, with the host's
    /// toolchains (Python: `/usr/bin/python3`, whose system site has pytest), a fresh HOME under `scratch` and
    /// the test CA given to each client; returns the test command's counts, both commands' output and their
    /// durations.
    pub fn direct(&self, scratch: &Path, eco: &str, patched: bool) -> DirectRun {
        let r = recipe(eco);
        let repo = scratch.join("repo");
        let home = scratch.join("home");
        std::fs::create_dir_all(&home).expect("home");
        for (rel, text) in project_files(eco, &self.server.url(), patched) {
            write(&repo.join(rel), text.as_bytes());
        }
        // The system bundle and the test CA, as the fence gives the install phase; the runner's own CA and
        // package-manager settings (its environment, npm's global `cafile`, pip's `cert`) are overridden.
        let ca = scratch.join("ca-bundle.crt");
        let mut bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
        bundle.push(b'\n');
        bundle.extend(std::fs::read(self.ca.ca_pem()).expect("ca.pem"));
        write(&ca, &bundle);
        let real_home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let rustup = std::env::var_os("RUSTUP_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| real_home.join(".rustup"));
        let install = if eco == "python" {
            r.install.replacen("python3 ", "/usr/bin/python3 ", 1)
        } else {
            r.install.to_owned()
        };
        let run = |command: &str| {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", command])
                .current_dir(&repo)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("LANG", "C.UTF-8")
                .env("HOME", &home)
                .env("CARGO_HOME", home.join(".cargo"))
                .env("RUSTUP_HOME", &rustup)
                .env("npm_config_cache", home.join(".npm"))
                .env("npm_config_cafile", &ca);
            for var in [
                "SSL_CERT_FILE",
                "NODE_EXTRA_CA_CERTS",
                "PIP_CERT",
                "REQUESTS_CA_BUNDLE",
                "CARGO_HTTP_CAINFO",
                "GIT_SSL_CAINFO",
            ] {
                cmd.env(var, &ca);
            }
            let o = cmd.output().expect("sh");
            let mut out = o.stdout;
            out.extend_from_slice(&o.stderr);
            (o.status.code(), out)
        };
        let started = std::time::Instant::now();
        let (code, mut log) = run(&install);
        let install_secs = started.elapsed().as_secs_f64();
        assert_eq!(
            code,
            Some(0),
            "direct {eco} install failed:\n{}",
            String::from_utf8_lossy(&log)
        );
        let started = std::time::Instant::now();
        let (code, out) = run(r.test);
        let test_secs = started.elapsed().as_secs_f64();
        let counts = guest::fence::counts::parse(&out, code, None)
            .counted()
            .map(|c| c.counts);
        log.extend_from_slice(&out);
        DirectRun {
            counts,
            log: String::from_utf8_lossy(&log).into_owned(),
            install_secs,
            test_secs,
        }
    }
}

/// `Some(reason)` (said on stderr through `skip_for`, kind Toolchain) when the process tier's registry runs
/// cannot happen here: no openssl CLI, or a host toolchain the direct run needs (cargo, npm, Debian's
/// `/usr/bin/python3` with pytest and venv), or the tools that build the toolchain image.
pub fn missing_toolchains() -> Option<String> {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/sbin").join(name).is_file()
    };
    let why = missing().or_else(|| {
        [
            "cargo",
            "npm",
            "node",
            "mkfs.erofs",
            "veritysetup",
            "apt-get",
            "dpkg-deb",
        ]
        .into_iter()
        .find(|t| !on_path(t))
        .map(|t| format!("{t} is not installed"))
    });
    let why = why.or_else(|| {
        let ok = Command::new("/usr/bin/python3")
            .args(["-c", "import pytest, venv, ensurepip"])
            .output()
            .is_ok_and(|o| o.status.success());
        (!ok).then(|| {
            "/usr/bin/python3 with pytest, venv and ensurepip is not installed (python3-pytest, python3-venv)"
                .to_string()
        })
    });
    if let Some(w) = &why {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Toolchain,
            &format!("loopback registry runs: {w}"),
        );
    }
    why
}

/// The `go,node,python,rust` toolchain image under `target_tmp` (`vm-image-toolchains`, the directory
/// tests/tests/vm_toolchains.rs uses), built by `bin` once and reused while its packages are the same.
pub fn toolchain_image(bin: &str, target_tmp: &Path) -> PathBuf {
    static IMAGE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let out = target_tmp.join("vm-image-toolchains");
            crate::vm::build_image(bin, Some("go,node,python,rust"), &out);
            out
        })
        .clone()
}

/// For the process tier, which uses only the image's toolchain tree: the image under `target_tmp` as it is when
/// it already holds one (whatever agent it was built with), else [`toolchain_image`].
pub fn toolchain_tree(bin: &str, target_tmp: &Path) -> PathBuf {
    let out = target_tmp.join("vm-image-toolchains");
    if out.join("toolchains.tree/usr/bin").is_dir() && out.join("manifest.json").is_file() {
        out
    } else {
        toolchain_image(bin, target_tmp)
    }
}

/// SHA-256 (hex) of a file.
pub fn sha256_file(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    hex::encode(sha2::Sha256::digest(&bytes))
}
