//! `fenced-run run` tells the operator what happened (docs/cli.md): the human summary shows the inputs and
//! nonce, the install phase with every denied egress attempt, the test phase, the counts, the output tail when
//! the run did not pass, and where the evidence went; `--evidence` is checked before anything runs; a toolchain
//! that cannot start is `test_command_unavailable`, never `tests_failed`; and a real `cargo test` of a tiny
//! crate runs in the fence with the read paths docs/job-file.md gives for a rustup-installed toolchain.

use fenced_run_tests::fence::{skip, Case};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn human(c: &Case, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("run")
        .arg(c.path().join("job.toml"))
        .args(extra)
        .env("TMPDIR", c.tmp())
        .output()
        .expect("spawn")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_summary_shows_install_egress_test_counts_tail_inputs_and_evidence() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo 'the failing line 4411'\necho '2 passed, 1 failed'\nexit 1\n",
    );
    // The install phase asks the proxy for a name the job did not allow: refused before any lookup.
    c.job(
        "[repository]\npath = \"repo\"\n\
         [install]\ncommand = \"curl -s -m 5 http://denied.example/pkg || true; echo installed\"\n\
         allow = [\"registry.example:443\"]\n\
         [test]\ncommand = \"sh test.sh\"\n",
    );
    let ev = c.path().join("out.evidence");
    let nonce = "00112233445566778899aabbccddeeff";
    let o = human(
        &c,
        &["--evidence", ev.to_str().expect("utf8"), "--nonce", nonce],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    for w in [
        "outcome: tests_failed",
        "inputs: commit",
        "job sha256",
        &format!("nonce: {nonce}"),
        "install: curl -s -m 5 http://denied.example/pkg",
        "(job), exit 0",
        "egress denied: denied.example:80",
        "test: sh test.sh (job), exit 1",
        "counts: 2 passed, 1 failed",
        "test output (last",
        "the failing line 4411",
        &format!("evidence: written to {}", ev.display()),
    ] {
        assert!(
            out.contains(w),
            "{w:?} missing from the summary:\n{out}\n{err}"
        );
    }
    assert!(!out.contains("Some(") && !out.contains("None"), "{out}");
    assert!(ev.is_file(), "evidence written");
}

#[test]
fn the_evidence_path_is_checked_before_anything_runs() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let cases: Vec<(PathBuf, &str)> = vec![
        (c.path().join("no-such-dir/out.evidence"), "does not exist"),
        (c.path().join("repo"), "is a directory"),
    ];
    for (out_path, why) in cases {
        let o = human(&c, &["--evidence", out_path.to_str().expect("utf8")]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{out}\n{err}");
        assert!(err.contains("--evidence") && err.contains(why), "{err}");
        assert!(
            !out.contains("outcome:"),
            "nothing may run before the check: {out}"
        );
        let j = Command::new(BIN)
            .arg("run")
            .arg(c.path().join("job.toml"))
            .args(["--json", "--evidence", out_path.to_str().expect("utf8")])
            .env("TMPDIR", c.tmp())
            .output()
            .expect("spawn");
        let v: serde_json::Value = serde_json::from_slice(&j.stdout).expect("one JSON object");
        assert_eq!(v["error"]["check"], "evidence-path", "{v}");
        assert!(v.get("outcome").is_none(), "no verdict: {v}");
    }
    let left: Vec<_> = std::fs::read_dir(c.path())
        .expect("case dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".fenced-run-evidence-probe"))
        .collect();
    assert!(left.is_empty(), "probe files left: {left:?}");
}

#[test]
fn a_toolchain_that_cannot_start_is_unavailable_not_failed() {
    if skip() {
        return;
    }
    // rustup's cargo proxy with no default toolchain (an empty RUSTUP_HOME), and a missing interpreter.
    let c = Case::new(BIN);
    c.repo_file(
        "fake-rustup.sh",
        "echo \"error: rustup could not choose a version of cargo to run, because one wasn't specified \
         explicitly, and no default is configured.\" >&2\n\
         echo \"help: run 'rustup default stable' to download the latest stable release of Rust\" >&2\nexit 1\n",
    );
    let cases = [
        (
            "sh fake-rustup.sh test",
            "the toolchain could not start",
            "no default is configured",
        ),
        (
            "python-that-is-not-installed -m pytest",
            "not found",
            "exit 127",
        ),
    ];
    for (command, why, detail) in cases {
        c.job(&format!(
            "[repository]\npath = \"repo\"\n[test]\ncommand = \"{command}\"\n"
        ));
        let r = c.run();
        assert_eq!(
            r.outcome(),
            "test_command_unavailable",
            "{command}: {}",
            r.dump()
        );
        let findings = r.verdict["findings"].to_string();
        assert!(
            findings.contains(why) && findings.contains(detail),
            "{command}: {findings}"
        );
        c.assert_clean(&r, &[]);
    }
    // A real rustup proxy without a default toolchain, when rustup is installed here.
    if let Some(cargo_bin) = fenced_run_tests::fence::rustup_cargo_bin() {
        let empty = tempfile::tempdir().expect("empty rustup home");
        let r = Command::new(&cargo_bin)
            .arg("--version")
            .env("RUSTUP_HOME", empty.path())
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
            .expect("rustup proxy");
        let said = String::from_utf8_lossy(&r.stderr);
        assert!(
            guest::fence::classify::toolchain_error(said.as_bytes()).is_some(),
            "rustup's own message is recognised: {said}"
        );
    }
}

#[test]
fn a_real_cargo_test_runs_in_the_fence_with_a_rustup_toolchain() {
    if skip() {
        return;
    }
    let Some(placed) = fenced_run_tests::fence::rustup_toolchain_for_sandbox(Path::new(env!(
        "CARGO_TARGET_TMPDIR"
    ))) else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Toolchain,
            "no rustup-installed toolchain under ~/.rustup (the recipe of docs/job-file.md needs one)",
        );
        return;
    };
    let tc = placed.dir.clone();
    let c = Case::new(BIN);
    c.repo_file(
        "Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    c.repo_file(
        "src/lib.rs",
        "pub fn add(a: u32, b: u32) -> u32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(2, 2), 4); }\n    #[test]\n    fn adds_zero() { assert_eq!(super::add(0, 7), 7); }\n}\n",
    );
    // The recipe of docs/job-file.md: the toolchain's own bin and lib directories (not rustup's proxies in
    // ~/.cargo/bin, which look for ~/.rustup under the sandbox's HOME and find no default toolchain).
    let bin = tc.join("bin");
    let lib = tc.join("lib");
    c.job(&format!(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"cargo test --offline\"\ntimeout_seconds = 600\n\
         [limits]\nmemory_mib = 2048\n[sandbox]\nread = [\"{}\", \"{}\"]\n",
        bin.display(),
        lib.display()
    ));
    let operator = c.operator(&format!("[sandbox]\nread = [\"{}\"]\n", tc.display()));
    let r = c.run_with(
        &["--operator-config", operator.to_str().expect("utf8")],
        &[],
    );
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["passed"], 2, "{}", r.dump());
    c.assert_clean(&r, &[]);
    drop(placed);
}
