//! The run viewer over HTTP: pages for a passing, a failing and a refused run, for rejected and for simulated
//! evidence; binds beyond loopback refused; a foreign or missing `Host` refused; a missing or wrong token a 404
//! that says nothing about the run; hostile strings in every field rendered as text; and `fenced-run view
//! --once` as a command, on evidence and on a verdict JSON.

use attestation::verdict::Outcome;
use fenced_run_tests::viewer::{evidence, founder_options, raw_get, verdict, NONCE};
use viewer::{Page, ServeConfig};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn serve(page: &Page) -> viewer::Running {
    viewer::start(page, ServeConfig::default()).expect("the viewer starts on loopback")
}

/// The response headers a test looks at.
struct Headers(Vec<(String, String)>);

impl Headers {
    fn header(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn get(url: &str) -> (u16, String, Headers) {
    let r = match ureq::get(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let code = r.status();
    let headers = Headers(
        r.headers_names()
            .into_iter()
            .filter_map(|k| {
                r.header(&k)
                    .map(|v| (k.to_ascii_lowercase(), v.to_string()))
            })
            .collect(),
    );
    let body = r.into_string().expect("body");
    (code, body, headers)
}

fn page_of(outcome: Outcome, opts_for: impl Fn([u8; 48]) -> verifier_lib::EvidenceOptions) -> Page {
    let (bytes, m) = evidence(&verdict(outcome, "plain"));
    Page::from_bytes("run.evidence", &bytes, &opts_for(m)).expect("a page")
}

/// The page's one script tag: the browser check (docs/viewer.md).
const OWN_SCRIPT: &str = "<script src=\"check.js\" defer></script>";

#[test]
fn a_passing_run_says_so_first_with_counts_and_simulated() {
    let page = page_of(Outcome::TestsPassed, founder_options);
    let v = serve(&page);
    let (code, body, r) = get(v.url());
    assert_eq!(code, 200);
    let csp = r.header("content-security-policy").expect("CSP");
    assert!(
        csp.starts_with("default-src 'none'; style-src 'sha256-"),
        "{csp}"
    );
    // Scripts only from the viewer itself (check.js, the browser check), WebAssembly compiled by it, and no
    // inline script or eval.
    assert!(
        csp.contains("; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self';"),
        "{csp}"
    );
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("'unsafe-eval'"),
        "{csp}"
    );
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    // The answer comes first: status, outcome, meaning, counts, before the inputs and phases.
    let at = |s: &str| {
        body.find(s)
            .unwrap_or_else(|| panic!("{s} missing:\n{body}"))
    };
    assert!(at(">SIMULATED<") < at("Outcome: <code>tests_passed</code>"));
    assert!(at("Outcome: <code>tests_passed</code>") < at("the patch broke none"));
    assert!(at("3 passed, 0 failed, 1 skipped") < at("id=\"inputs\""));
    assert!(at("id=\"inputs\"") < at("id=\"phase-install\""));
    assert!(
        !body.contains(">VERIFIED<") && !body.contains(">REJECTED<"),
        "sim evidence is never VERIFIED"
    );
    // Inputs, phases, egress with the denied row marked, processes, the chain drawn, the measurement pinned.
    for s in [
        "0123456789abcdef0123456789abcdef01234567",
        &hex::encode(NONCE),
        "install-command plain",
        "test-command plain",
        "ENV plain",
        "sandbox-line plain",
        "<tr class=\"denied\">",
        "DENIED",
        "denied.example",
        "left after teardown",
        "<svg",
        "ARK (not AMD's: simulated)",
        "SEV-VCEK",
        "compared",
        "not pinned (no --expect-outcome)",
    ] {
        assert!(body.contains(s), "{s} missing");
    }
    // Every claim links to its check and to the docs section that explains it, served here.
    assert!(body.contains("href=\"docs/verification#authenticity-checks-verifier-lib-snp-chain\""));
    assert!(
        body.contains("<code>report-signature</code>") && body.contains("<code>key-binding</code>")
    );
    let (code, docs, _) = get(&format!("{}docs/verification", v.url()));
    assert_eq!(code, 200);
    assert!(docs.contains("id=\"authenticity-checks-verifier-lib-snp-chain\""));
    // Nothing is fetched from elsewhere: one script, the viewer's own check.js, and no external URL in src/href.
    assert_eq!(body.matches("<script").count(), 1);
    assert!(body.contains(OWN_SCRIPT), "{body}");
    assert!(
        !body.contains("src=\"http")
            && !body.contains("href=\"http")
            && !body.contains("href=\"//")
    );
    v.stop().expect("stops");
}

#[test]
fn a_failing_run_blames_the_patch_and_a_refused_run_does_not() {
    let page = page_of(Outcome::TestsFailed, founder_options);
    let v = serve(&page);
    let (_, body, _) = get(v.url());
    assert!(body.contains("<code>tests_failed</code>"));
    assert!(body.contains("may mean the patch is at fault"));
    assert!(body.contains("3 passed, 1 failed, 1 skipped"));
    assert!(!body.contains("NO TEST RAN"), "tests ran: {body}");
    drop(v);

    let page = page_of(Outcome::Refused, founder_options);
    let v = serve(&page);
    let (_, body, _) = get(v.url());
    assert!(body.contains("<code>refused</code>"));
    assert!(body.contains("says nothing about the patch"));
    assert!(!body.contains("at fault"));
    assert!(
        body.contains("Refused at <code>stage plain</code>: reason plain"),
        "{body}"
    );
    assert!(body.contains("No test phase ran"));
    // No test counted: the answer says so on its own line.
    assert!(
        body.contains("id=\"no-tests\"><strong>NO TEST RAN: "),
        "{body}"
    );
}

#[test]
fn rejected_evidence_shows_the_failed_checks_where_their_claims_are() {
    // The founder's nonce differs from the run's, and the outcome pin does not hold.
    let page = page_of(Outcome::TestsPassed, |m| {
        let mut o = founder_options(m);
        o.nonce = Some(vec![9; 24]);
        o.pins.expect_outcome = vec![Outcome::TestsFailed];
        o
    });
    let v = serve(&page);
    let (_, body, _) = get(v.url());
    assert!(body.contains(">REJECTED<"));
    assert!(!body.contains(">SIMULATED<") || body.contains(">REJECTED<"));
    assert!(body.contains("✗ FAILED"));
    for check in ["key-binding", "nonce", "pin-outcome"] {
        assert!(body.contains(&format!("<code>{check}</code>")), "{check}");
    }
    assert!(body.contains("NOT held"));
    // Without the sim allowance the same evidence is rejected as simulated.
    let page = page_of(Outcome::TestsPassed, |m| {
        let mut o = founder_options(m);
        o.chain.allow_simulated = false;
        o
    });
    let v2 = serve(&page);
    let (_, body, _) = get(v2.url());
    assert!(body.contains(">REJECTED<") && body.contains("<code>simulated</code>"));
    drop((v, v2));
}

#[test]
fn a_verdict_json_alone_is_shown_not_verified() {
    let j = verdict(Outcome::TestsPassed, "plain").to_json_pretty();
    let page =
        Page::from_bytes("verdict.json", j.as_bytes(), &founder_options([0; 48])).expect("page");
    let v = serve(&page);
    let (_, body, _) = get(v.url());
    assert!(body.contains(">NOT VERIFIED<") && body.contains("tests_passed"));
    assert!(!body.contains("✓ checked"));
    let e = Page::from_bytes("x", b"\x00\x01 not evidence", &founder_options([0; 48]))
        .expect_err("refused");
    assert!(
        e.to_string().starts_with("x: not fenced-run evidence"),
        "{e}"
    );
}

#[test]
fn binds_beyond_loopback_are_refused_without_a_credential() {
    let page = page_of(Outcome::TestsPassed, founder_options);
    for a in ["0.0.0.0", "::", "192.0.2.10", "10.0.0.5"] {
        let cfg = ServeConfig {
            extra: vec![a.parse().expect("ip")],
            ..ServeConfig::default()
        };
        let e = viewer::start(&page, cfg)
            .err()
            .unwrap_or_else(|| panic!("{a} must be refused"));
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("refusing to listen on {a}")),
            "{msg}"
        );
        assert!(msg.contains(viewer::bind::CREDENTIAL_PATH), "{msg}");
    }
}

#[test]
fn a_credential_must_be_roots_and_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("viewer-bind.toml");
    std::fs::write(
        &p,
        "format = \"fenced-run-viewer-bind/1\"\naddresses = [\"192.0.2.10\"]\n",
    )
    .expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let root = nix::unistd::geteuid().is_root();
    let e = viewer::bind::Credential::load(&p)
        .expect_err("refused")
        .to_string();
    if root {
        assert!(e.contains("mode 644"), "{e}");
    } else {
        assert!(e.contains("not by root"), "{e}");
    }
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if root {
        // Owned by someone else: refused.
        nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
        let e = viewer::bind::Credential::load(&p)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
        nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(0)), None).expect("chown");
        let c = viewer::bind::Credential::load(&p)
            .expect("accepted")
            .expect("present");
        assert!(viewer::bind::check_bind("192.0.2.10".parse().expect("ip"), Some(&c)).is_ok());
        assert!(viewer::bind::check_bind("0.0.0.0".parse().expect("ip"), Some(&c)).is_err());
    } else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "the root-owned half of this test needs root",
        );
    }
    assert_eq!(
        viewer::bind::Credential::load(&dir.path().join("absent")),
        Ok(None)
    );
}

#[test]
fn a_foreign_or_missing_host_is_refused() {
    let page = page_of(Outcome::TestsPassed, founder_options);
    let v = serve(&page);
    let port = v.port();
    let path = format!("/{}/", v.token());
    let good = [
        format!("Host: 127.0.0.1:{port}"),
        format!("Host: localhost:{port}"),
        format!("Host: [::1]:{port}"),
    ];
    for h in &good {
        let (code, body) = raw_get(port, &path, &[h]);
        assert_eq!(code, 200, "{h}");
        assert!(body.contains("tests_passed"));
    }
    for h in [
        "Host: evil.example".to_string(),
        format!("Host: evil.example:{port}"),
        format!("Host: 127.0.0.1:{}", port.wrapping_add(1)),
        "Host: 127.0.0.1".to_string(),
        format!("Host: 192.0.2.1:{port}"),
    ] {
        let (code, body) = raw_get(port, &path, &[&h]);
        assert_eq!(code, 421, "{h}: {body}");
        assert!(
            !body.contains("tests_passed") && !body.contains(&hex::encode(NONCE)),
            "{h}"
        );
    }
    let (code, body) = raw_get(port, &path, &[]);
    assert!(
        code == 421 || code == 400,
        "no Host at all is refused: {body}"
    );
}

#[test]
fn a_missing_or_wrong_token_is_a_404_about_nothing() {
    let page = page_of(Outcome::TestsPassed, founder_options);
    let v = serve(&page);
    let base = format!("http://127.0.0.1:{}", v.port());
    let mut wrong = v.token().to_string();
    wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
    for path in [
        "/".to_string(),
        format!("/{wrong}/"),
        format!("/{}/", &v.token()[..63]),
        "/favicon.ico".into(),
        format!("/{wrong}/docs/verification"),
    ] {
        let (code, body, r) = get(&format!("{base}{path}"));
        assert_eq!(code, 404, "{path}");
        assert!(r.header("content-security-policy").is_some());
        for secret in [
            "tests_passed",
            "passed",
            "0123456789abcdef",
            &hex::encode(NONCE),
            "SIMULATED",
            "install-command",
        ] {
            assert!(!body.contains(secret), "{path} leaks {secret}: {body}");
        }
    }
    let (code, _, _) = get(&format!("{base}/{}/", v.token()));
    assert_eq!(code, 200);
}

#[test]
fn hostile_strings_in_every_field_render_as_text() {
    let evil = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>\x1b[31mRED\x1b]0;title\x07\u{202e}&amp;";
    let (bytes, m) = evidence(&verdict(Outcome::TestsPassed, evil));
    let page = Page::from_bytes("<b>evil</b>.evidence", &bytes, &founder_options(m)).expect("page");
    let v = serve(&page);
    let (_, body, _) = get(v.url());
    let lower = body.replace(OWN_SCRIPT, "").to_ascii_lowercase();
    assert!(
        !lower.contains("<script") && !lower.contains("<img") && !lower.contains("<b>"),
        "markup got through"
    );
    assert!(
        !body.contains('\x1b') && !body.contains('\x07') && !body.contains('\u{202e}'),
        "a control character got through"
    );
    // Each field is there, as text.
    for field in [
        "install-command",
        "install-source",
        "allowed-host",
        "allowed-reason",
        "denied-reason",
        "ENV",
        "sandbox-line",
        "test-command",
        "test-source",
        "TESTENV",
        "test-sandbox-line",
        "parser",
        "finding-stage",
        "finding-path",
        "finding-kind",
        "finding-detail",
        "RLIMIT",
    ] {
        let shown = format!("{field} &lt;script&gt;alert(1)&lt;/script&gt;&quot;'&gt;&lt;img src=x onerror=alert(2)&gt;\\x1b[31mRED");
        assert!(body.contains(&shown), "{field} not shown as text");
    }
    // Output tails: colours stripped, the rest as text.
    assert!(body.contains("install-tail &lt;script&gt;alert(1)&lt;/script&gt;&quot;'&gt;&lt;img src=x onerror=alert(2)&gt;RED\\u{202e}&amp;amp;"));
    assert!(body.contains("&lt;b&gt;evil&lt;/b&gt;.evidence"));
}

#[test]
fn view_once_prints_one_url_and_exits_after_the_first_load() {
    use std::io::BufRead;
    let (bytes, m) = evidence(&verdict(Outcome::TestsPassed, "plain"));
    let dir = tempfile::tempdir().expect("tmp");
    let ev = dir.path().join("run.evidence");
    std::fs::write(&ev, &bytes).expect("write");
    let mut child = std::process::Command::new(BIN)
        .args([
            "view",
            ev.to_str().expect("utf8"),
            "--once",
            "--allow-simulated",
            "--nonce",
            &hex::encode(NONCE),
        ])
        .args(["--measurement", &hex::encode(m)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let url = line.trim();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with('/'),
        "{line:?}"
    );
    let token = url.trim_end_matches('/').rsplit('/').next().expect("token");
    assert_eq!(token.len(), 64, "a 256-bit token");
    let (code, body, _) = get(url);
    assert_eq!(code, 200);
    assert!(
        body.contains(">SIMULATED<") && body.contains("tests_passed"),
        "{body}"
    );
    let status = child.wait().expect("exits after the first load");
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("rest");
    assert_eq!(rest, "", "one line on stdout");

    // Unusable input: a clear message, exit 2, no Debug text.
    let o = std::process::Command::new(BIN)
        .args([
            "view",
            dir.path().join("missing.evidence").to_str().expect("utf8"),
            "--once",
        ])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("fenced-run view: input: evidence:") && err.contains("missing.evidence"),
        "{err}"
    );
    assert!(
        !err.contains("Some(") && !err.contains("Error {") && !err.contains("kind:"),
        "{err}"
    );
}

/// Starts `fenced-run view ARGS --once` (with `stdin` written to its standard input when given), reads the URL it
/// prints (as `{"url": ...}` with `--json`), GETs the page once over loopback and waits for the exit.
fn view_once(args: &[&str], stdin: Option<&[u8]>) -> (u16, String) {
    use std::io::{BufRead, Write};
    let json = args.contains(&"--json");
    let mut child = std::process::Command::new(BIN)
        .arg("view")
        .args(args)
        .args(["--once", "--port", "0"])
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    if let Some(bytes) = stdin {
        let mut i = child.stdin.take().expect("stdin");
        i.write_all(bytes).expect("write stdin");
    }
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a line");
    if line.is_empty() {
        let o = child.wait_with_output().expect("exit");
        panic!(
            "view {args:?} printed no URL ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let url = if json {
        let j: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
        j["url"].as_str().expect("url").to_string()
    } else {
        line.trim().to_string()
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{line:?}");
    let (code, body, _) = get(&url);
    let status = child.wait().expect("exits after the first load");
    assert!(status.success(), "{status}");
    (code, body)
}

/// `fenced-run view VERDICT.json` through the command: what `run --json` prints (a file, or standard input) and
/// the `verdict` of `demo --json`'s object are served as the NOT VERIFIED page with the outcome; evidence on
/// standard input is still verified; a JSON that is no verdict is refused (exit 2), naming the file.
#[test]
fn view_of_a_verdict_json_serves_the_not_verified_page() {
    let dir = tempfile::tempdir().expect("tmp");
    let v = verdict(Outcome::TestsFailed, "plain");
    let run_json = dir.path().join("verdict.json");
    std::fs::write(&run_json, v.to_json_pretty()).expect("write");
    let demo_json = dir.path().join("demo.json");
    let demo =
        serde_json::json!({"isolation": "process", "verified": true, "verdict": v.to_json_value()});
    std::fs::write(&demo_json, demo.to_string()).expect("write");
    let run_path = run_json.to_str().expect("utf8");
    let json_bytes = v.to_json_pretty().into_bytes();
    let nonce = hex::encode(NONCE);
    for (args, stdin) in [
        (vec![run_path], None),
        (vec![demo_json.to_str().expect("utf8"), "--json"], None),
        // Pins are not used on a verdict JSON: there is nothing they could be checked against.
        (vec!["-", "--nonce", &nonce], Some(json_bytes.as_slice())),
    ] {
        let (code, body) = view_once(&args, stdin);
        assert_eq!(code, 200, "{args:?}");
        assert!(body.contains(">NOT VERIFIED<"), "{args:?}: {body}");
        assert!(body.contains("tests_failed"), "{args:?}: the outcome");
        assert!(!body.contains(">VERIFIED<") && !body.contains(">SIMULATED<"));
        assert!(!body.contains("✓ checked"), "{args:?}");
    }

    // Evidence on standard input is verified as from a file.
    let (bytes, m) = evidence(&verdict(Outcome::TestsPassed, "plain"));
    let measurement = hex::encode(m);
    let (code, body) = view_once(
        &[
            "-",
            "--allow-simulated",
            "--nonce",
            &nonce,
            "--measurement",
            &measurement,
        ],
        Some(&bytes),
    );
    assert_eq!(code, 200);
    assert!(
        body.contains(">SIMULATED<") && body.contains("tests_passed"),
        "{body}"
    );

    // A JSON object that is no verdict: refused before anything is served.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, br#"{"outcome": "nonsense"}"#).expect("write");
    let o = std::process::Command::new(BIN)
        .args(["view", bad.to_str().expect("utf8"), "--once"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("fenced-run view: ")
            && err.contains("bad.json")
            && err.contains("not a valid fenced-run verdict JSON"),
        "{err}"
    );
}

#[test]
fn demo_view_serves_the_demo_until_interrupted() {
    use std::io::BufRead;
    if fenced_run_tests::fence::skip() {
        return;
    }
    let mut child = std::process::Command::new(BIN)
        .args(["demo", "--view"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = out.lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("http://127.0.0.1:"))
        .expect("the demo prints the viewer's URL");
    let (code, body, _) = get(&url);
    assert_eq!(code, 200);
    assert!(
        body.contains(">SIMULATED<"),
        "the demo's evidence verifies as simulated"
    );
    assert!(body.contains("Outcome: <code>"), "{body}");
    // Served until SIGINT, then a clean exit.
    let (code, _, _) = get(&url);
    assert_eq!(code, 200, "still served after a load without --once");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = child.wait().expect("exits on SIGINT");
    assert!(
        status.code().is_some(),
        "exited by itself, not killed: {status}"
    );
}

#[test]
fn view_without_pins_shows_why_it_is_rejected() {
    use std::io::BufRead;
    let (bytes, _) = evidence(&verdict(Outcome::TestsPassed, "plain"));
    let dir = tempfile::tempdir().expect("tmp");
    let ev = dir.path().join("run.evidence");
    std::fs::write(&ev, &bytes).expect("write");
    let mut child = std::process::Command::new(BIN)
        .args(["view", ev.to_str().expect("utf8"), "--once", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a line");
    let j: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
    let (_, body, _) = get(j["url"].as_str().expect("url"));
    assert!(body.contains(">REJECTED<"));
    for check in ["measurement-unpinned", "nonce-unpinned", "simulated"] {
        assert!(body.contains(&format!("<code>{check}</code>")), "{check}");
    }
    assert!(child.wait().expect("exit").success());
}

#[test]
fn run_view_serves_the_run_it_just_made() {
    use std::io::BufRead;
    if fenced_run_tests::fence::skip() {
        return;
    }
    let c = fenced_run_tests::fence::Case::new(BIN);
    c.repo_file("test.sh", "echo '2 passed, 1 failed'; exit 1\n");
    let job = c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let out = c.path().join("run.evidence");
    let mut child = std::process::Command::new(BIN)
        .args([
            "run",
            job.to_str().expect("utf8"),
            "--evidence",
            out.to_str().expect("utf8"),
            "--view",
        ])
        .env("TMPDIR", c.tmp())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let url = lines
        .map_while(Result::ok)
        .find(|l| l.starts_with("http://127.0.0.1:"))
        .expect("the run prints the viewer's URL");
    let (code, body, _) = get(&url);
    assert_eq!(code, 200);
    assert!(
        body.contains("Outcome: <code>tests_failed</code>"),
        "{body}"
    );
    assert!(
        body.contains(">SIMULATED<") && !body.contains(">REJECTED<"),
        "nonce and measurement pinned: {body}"
    );
    assert!(body.contains("2 passed, 1 failed"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = child.wait().expect("exits on SIGINT");
    assert_eq!(status.code(), Some(0), "the run judged: exit 0");
}

/// The browser check's files: the script, the input (the evidence as given, the request the server verified
/// with, and the server's result, which is the library's on the same input) and the module, each on the viewer's
/// origin behind the token; no module (not built) is a 404 that the page's script reports as "did not run".
#[test]
fn the_browser_check_files_are_served_behind_the_token() {
    use base64::Engine as _;
    let (bytes, m) = evidence(&verdict(Outcome::TestsPassed, "plain"));
    let page = Page::from_bytes("run.evidence", &bytes, &founder_options(m)).expect("page");
    let module = b"\0asm\x01\0\0\0".to_vec();
    let v = viewer::start_with_module(&page, viewer::ServeConfig::default(), Some(module.clone()))
        .expect("viewer");
    let (code, body, _) = get(v.url());
    assert_eq!(code, 200);
    assert!(
        body.contains("id=\"browser-check\"") && body.contains("The browser check did not run")
    );
    let (code, js, r) = get(&format!("{}check.js", v.url()));
    assert_eq!(code, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert!(js.contains("fencedRunCheck"));
    let (code, input, _) = get(&format!("{}check-input.json", v.url()));
    assert_eq!(code, 200);
    let input: serde_json::Value = serde_json::from_str(&input).expect("json");
    let evidence = base64::engine::general_purpose::STANDARD
        .decode(input["evidence"].as_str().expect("evidence"))
        .expect("base64");
    assert_eq!(evidence, bytes);
    let request: verifier_wasm::Request =
        serde_json::from_value(input["request"].clone()).expect("request");
    assert_eq!(input["server"], verifier_wasm::verify(&bytes, &request));
    assert_eq!(input["server"]["verified"], true);
    let r = ureq::get(&format!("{}verifier.wasm", v.url()))
        .call()
        .expect("module");
    assert_eq!(r.header("content-type"), Some("application/wasm"));
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut r.into_reader(), &mut got).expect("read");
    assert_eq!(got, module);
    // The token guards these too.
    let base = v
        .url()
        .trim_end_matches('/')
        .rsplit_once('/')
        .map(|(b, _)| b.to_string())
        .expect("base");
    for f in ["check.js", "check-input.json", "verifier.wasm"] {
        let (code, _, _) = get(&format!("{base}/{}/{f}", "0".repeat(64)));
        assert_eq!(code, 404, "{f} without the token");
    }
    v.stop().expect("stop");
    // Without a module: the page and the input are served, the module is not.
    let v = viewer::start_with_module(&page, viewer::ServeConfig::default(), None).expect("viewer");
    let (code, _, _) = get(&format!("{}verifier.wasm", v.url()));
    assert_eq!(code, 404);
    let (code, _, _) = get(&format!("{}check-input.json", v.url()));
    assert_eq!(code, 200);
    v.stop().expect("stop");
}
