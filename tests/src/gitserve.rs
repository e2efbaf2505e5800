//! A loopback git server for the `[repository] url` tests: a repository with a base commit whose test fails
//! and a patch that fixes it, served over smart HTTP (`git http-backend` behind a tiny CGI server) or dumb HTTP
//! (`git update-server-info` and static files), on 127.0.0.1 only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The fix: `calc.sh` prints 4, as `test.sh` expects.
pub const FIX_PATCH: &str =
    "diff --git a/calc.sh b/calc.sh\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n-echo 5\n+echo 4\n";

/// The test: one test, passed or failed, in the plain `N passed, N failed` form.
pub const TEST_SH: &str = "if [ \"$(sh calc.sh)\" = 4 ]; then echo '1 passed, 0 failed'; else echo '0 passed, 1 failed'; exit 1; fi\n";

/// How the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Smart HTTP through `git http-backend` (a fetch by commit id is allowed: protocol v2).
    Smart,
    /// Dumb HTTP: static files, so a shallow fetch is refused and the fence falls back to a full fetch.
    Dumb,
}

/// A served repository.
pub struct GitServer {
    /// The directory holding everything (the work repository and the served bare one).
    pub dir: tempfile::TempDir,
    /// The loopback port.
    pub port: u16,
    /// The base commit (the one whose test fails), full id.
    pub base: String,
    /// Where a direct checkout of the base is (for the run outside the fence).
    pub work: PathBuf,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.example",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl GitServer {
    /// Makes the repository (an initial commit, then the base), serves it and returns the server.
    pub fn start(protocol: Protocol) -> GitServer {
        GitServer::start_with(protocol, 0)
    }

    /// [`GitServer::start`] with a file of `big` incompressible bytes in the base commit (`big.bin`), for the
    /// fetch's disk limit.
    pub fn start_with(protocol: Protocol, big: usize) -> GitServer {
        GitServer::start_custom(protocol, big, false, |_| {})
    }

    /// [`GitServer::start_with`], the repository made with `--object-format=sha256` when `sha256`, and `add`
    /// writing more files into the work tree before the base commit (hooks for stage 5, a symbolic link...).
    pub fn start_custom(
        protocol: Protocol,
        big: usize,
        sha256: bool,
        add: impl FnOnce(&Path),
    ) -> GitServer {
        let dir = tempfile::Builder::new()
            .prefix("gitserve-")
            .tempdir()
            .expect("tempdir");
        let work = dir.path().join("work");
        std::fs::create_dir(&work).expect("mkdir");
        if sha256 {
            git(&work, &["init", "-q", "--object-format=sha256"]);
        } else {
            git(&work, &["init", "-q"]);
        }
        std::fs::write(work.join("README"), "a test repository\n").expect("write");
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "initial"]);
        std::fs::write(work.join("calc.sh"), "echo 5\n").expect("write");
        std::fs::write(work.join("test.sh"), TEST_SH).expect("write");
        add(&work);
        if big > 0 {
            // xorshift64: bytes zlib cannot shrink, without a random number crate.
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            let bytes: Vec<u8> = (0..big)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            std::fs::write(work.join("big.bin"), bytes).expect("write");
        }
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "base: calc is wrong"]);
        let base = git(&work, &["rev-parse", "HEAD"]);
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        git(
            dir.path(),
            &[
                "clone",
                "-q",
                "--bare",
                work.to_str().expect("utf-8"),
                "root/repo.git",
            ],
        );
        git(&root.join("repo.git"), &["update-server-info"]);
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let root = root.clone();
                std::thread::spawn(move || {
                    let _ = serve(c, &root, protocol);
                });
            }
        });
        GitServer {
            dir,
            port,
            base,
            work,
        }
    }

    /// The counts of `sh test.sh` run directly, outside any fence, in a clone of the base (with the fix applied
    /// when `fix`): `(passed, failed)` from its summary line.
    pub fn direct(&self, fix: bool) -> (u64, u64) {
        let d = tempfile::tempdir().expect("tempdir");
        let w = d.path().join("w");
        git(
            d.path(),
            &[
                "clone",
                "-q",
                self.work.to_str().expect("utf-8"),
                w.to_str().expect("utf-8"),
            ],
        );
        if fix {
            std::fs::write(w.join("calc.sh"), "echo 4\n").expect("fix");
        }
        let out = Command::new("sh")
            .arg("test.sh")
            .current_dir(&w)
            .output()
            .expect("sh");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.contains("passed"))
            .expect("summary")
            .to_owned();
        let n = |word: &str| -> u64 {
            line.split(',')
                .find(|p| p.contains(word))
                .and_then(|p| p.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .expect("count")
        };
        (n("passed"), n("failed"))
    }

    /// A clone of the base (its `.git` with it) at `dest`: the same repository bundled instead of fetched.
    pub fn clone_base(&self, dest: &Path) {
        git(
            dest.parent().expect("parent"),
            &[
                "clone",
                "-q",
                self.work.to_str().expect("utf-8"),
                dest.to_str().expect("utf-8"),
            ],
        );
    }

    /// Where the served bare repositories are (`repo.git` under it): a static server of another kind (HTTPS)
    /// serves this directory as dumb HTTP.
    pub fn served_root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// The URL of the served repository, by the name `localhost`.
    pub fn url(&self) -> String {
        format!("http://localhost:{}/repo.git", self.port)
    }
}

/// One request (HTTP/1.0 semantics: one request per connection, closed after the response).
fn serve(c: TcpStream, root: &Path, protocol: Protocol) -> std::io::Result<()> {
    let mut rd = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    rd.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let target = words.next().unwrap_or_default().to_owned();
    // A proxy sends the absolute form; a direct client the origin form.
    let path_query = match target.strip_prefix("http://") {
        Some(rest) => rest
            .find('/')
            .map(|i| rest[i..].to_owned())
            .unwrap_or("/".into()),
        None => target.clone(),
    };
    let (path, query) = path_query
        .split_once('?')
        .map(|(p, q)| (p.to_owned(), q.to_owned()))
        .unwrap_or((path_query.clone(), String::new()));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if rd.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    rd.read_exact(&mut body)?;
    let mut out = c;
    if path.contains("..") {
        return out.write_all(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    }
    match protocol {
        Protocol::Dumb => {
            let file = root.join(path.trim_start_matches('/'));
            match std::fs::read(&file) {
                Ok(bytes) if method == "GET" => {
                    out.write_all(
                        format!(
                            "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                            bytes.len()
                        )
                        .as_bytes(),
                    )?;
                    out.write_all(&bytes)
                }
                _ => out.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
            }
        }
        Protocol::Smart => {
            let mut cmd = Command::new("git");
            cmd.arg("http-backend")
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("GIT_PROJECT_ROOT", root)
                .env("GIT_HTTP_EXPORT_ALL", "1")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("REQUEST_METHOD", &method)
                .env("PATH_INFO", &path)
                .env("QUERY_STRING", &query)
                .env("CONTENT_LENGTH", len.to_string())
                .env("REMOTE_ADDR", "127.0.0.1")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if let Some(t) = header("content-type") {
                cmd.env("CONTENT_TYPE", t);
            }
            if let Some(e) = header("content-encoding") {
                cmd.env("HTTP_CONTENT_ENCODING", e);
            }
            if let Some(p) = header("git-protocol") {
                cmd.env("GIT_PROTOCOL", p);
            }
            let mut child = cmd.spawn()?;
            if let Some(mut i) = child.stdin.take() {
                i.write_all(&body)?;
            }
            let mut cgi = Vec::new();
            if let Some(mut o) = child.stdout.take() {
                o.read_to_end(&mut cgi)?;
            }
            let _ = child.wait();
            let split = cgi
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|i| (i, 4))
                .or_else(|| cgi.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
            let Some((at, sep)) = split else {
                return out
                    .write_all(b"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n");
            };
            let head = String::from_utf8_lossy(&cgi[..at]).into_owned();
            let payload = &cgi[at + sep..];
            let mut status = "200 OK".to_owned();
            let mut lines = Vec::new();
            for h in head.lines() {
                match h.split_once(':') {
                    Some((k, v)) if k.eq_ignore_ascii_case("status") => {
                        status = v.trim().to_owned()
                    }
                    _ => lines.push(h.to_owned()),
                }
            }
            let mut resp = format!("HTTP/1.0 {status}\r\n");
            for h in lines {
                resp.push_str(&h);
                resp.push_str("\r\n");
            }
            resp.push_str(&format!("Content-Length: {}\r\n\r\n", payload.len()));
            out.write_all(resp.as_bytes())?;
            out.write_all(payload)
        }
    }
}
