//! Protected tests (`[test] protect`): whatever the patch or the install phase does to a protected path, the
//! test phase runs the repository's own copy, the verdict lists each change that was undone and records the
//! tree of what ran, and `verify-attestation evidence --protect-tree` pins that tree.

use fenced_run_tests::fence::{skip, Case, Ran};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");

/// The suite: one failing test, as the repository has it.
const SUITE: &str = "echo '0 passed, 1 failed'\nexit 1\n";

fn case() -> Case {
    let c = Case::new(BIN);
    c.repo_file("tests/test.sh", SUITE);
    c.repo_file("tests/lib/helpers.sh", "true\n");
    c.repo_file("src/code.sh", "echo code\n");
    c
}

fn job(extra_test: &str, install: &str) -> String {
    format!(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh tests/test.sh\"\ntimeout_seconds = 60\n\
         protect = [\"tests/**\"]\n{extra_test}\n{install}"
    )
}

fn with_patch(c: &Case, patch: &str, extra_test: &str) {
    std::fs::write(c.path().join("fix.patch"), patch).expect("patch");
    c.job(&format!(
        "[repository]\npath = \"repo\"\npatch = \"fix.patch\"\n[test]\ncommand = \"sh tests/test.sh\"\n\
         timeout_seconds = 60\nprotect = [\"tests/**\"]\n{extra_test}\n"
    ));
}

fn protected(r: &Ran) -> Vec<(String, String, String)> {
    r.verdict["protected"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    let f = |k: &str| p[k].as_str().unwrap_or("").to_owned();
                    (f("path"), f("change"), f("by"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The git tree of the protected files as the repository has them, computed by git itself in a scratch
/// repository holding only those files.
fn git_tree_of_suite() -> String {
    let d = tempfile::tempdir().expect("tempdir");
    for (rel, text) in [("tests/test.sh", SUITE), ("tests/lib/helpers.sh", "true\n")] {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(d.path())
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
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["write-tree"])
}

const PATCH_EDITS_TEST: &str = "\
--- a/tests/test.sh
+++ b/tests/test.sh
@@ -1,2 +1,2 @@
-echo '0 passed, 1 failed'
-exit 1
+echo '1 passed, 0 failed'
+exit 0
";

#[test]
fn a_patch_editing_a_protected_test_is_undone_and_the_tree_recorded() {
    if skip() {
        return;
    }
    let c = case();
    with_patch(&c, PATCH_EDITS_TEST, "");
    let r = c.run();
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(
        r.outcome(),
        "tests_failed",
        "the repository's own test ran: {}",
        r.dump()
    );
    assert_eq!(
        protected(&r),
        vec![("tests/test.sh".into(), "modified".into(), "patch".into())],
        "{}",
        r.dump()
    );
    assert_eq!(
        r.verdict["inputs"]["protect"],
        serde_json::json!(["tests/**"])
    );
    assert_eq!(
        r.verdict["inputs"]["test_tree"].as_str(),
        Some(git_tree_of_suite().as_str()),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
}

#[test]
fn a_patch_touching_a_protected_path_can_be_refused() {
    if skip() {
        return;
    }
    let c = case();
    with_patch(&c, PATCH_EDITS_TEST, "on_protected_change = \"refuse\"");
    let r = c.run();
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "patch", "{}", r.dump());
    let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("tests/test.sh (modified)"), "{}", r.dump());
    c.assert_clean(&r, &[]);
}

/// Runs the case with an install phase doing `script` in the repository.
fn install_does(script: &str) -> Ran {
    let c = case();
    c.job(&job(
        "",
        &format!("[install]\ncommand = \"{script}\"\ntimeout_seconds = 60\n"),
    ));
    let r = c.run();
    c.assert_clean(&r, &[]);
    r
}

#[test]
fn an_install_script_rewriting_a_protected_test_is_undone() {
    if skip() {
        return;
    }
    let r = install_does(
        "printf 'echo 5 passed, 0 failed\\\\n' > tests/test.sh && echo new > tests/extra.sh",
    );
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(
        protected(&r),
        vec![
            ("tests/extra.sh".into(), "added".into(), "install".into()),
            ("tests/test.sh".into(), "modified".into(), "install".into()),
        ],
        "{}",
        r.dump()
    );
    assert_eq!(
        r.verdict["inputs"]["test_tree"].as_str(),
        Some(git_tree_of_suite().as_str())
    );
}

#[test]
fn a_symbolic_link_swapped_in_for_a_protected_directory_is_replaced() {
    if skip() {
        return;
    }
    // The link points at a directory of the install phase's own making holding a passing "suite": were it
    // followed, the test phase would pass.
    let r = install_does(
        "mkdir -p ../evil && printf 'echo 9 passed, 0 failed\\\\n' > ../evil/test.sh; \
         rm -rf tests && mkdir evil2 && printf 'echo 9 passed, 0 failed\\\\n' > evil2/test.sh && ln -s evil2 tests",
    );
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    let p = protected(&r);
    // `tests/**` does not name `tests` itself: the link is reported through the paths it displaced.
    assert!(
        p.contains(&(
            "tests/test.sh".into(),
            "type_changed".into(),
            "install".into()
        )) && p.contains(&(
            "tests/lib/helpers.sh".into(),
            "type_changed".into(),
            "install".into()
        )),
        "{}",
        r.dump()
    );
}

#[test]
fn a_protected_directory_replaced_by_a_file_is_restored() {
    if skip() {
        return;
    }
    let r = install_does("rm -rf tests && echo 'not a directory' > tests");
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    let p = protected(&r);
    assert!(
        p.contains(&(
            "tests/test.sh".into(),
            "type_changed".into(),
            "install".into()
        )) && p.contains(&(
            "tests/lib/helpers.sh".into(),
            "type_changed".into(),
            "install".into()
        )),
        "{}",
        r.dump()
    );
}

#[test]
fn the_founder_pins_the_tree_the_tests_ran() {
    if skip() {
        return;
    }
    let c = case();
    with_patch(&c, PATCH_EDITS_TEST, "");
    let nonce = "00112233445566778899aabbccddeeff";
    let evidence = c.path().join("run.evidence");
    let r = c.run_with(
        &[
            "--evidence",
            evidence.to_str().expect("utf-8"),
            "--nonce",
            nonce,
        ],
        &[],
    );
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    let verify = |tree: &str| {
        let out = Command::new(VERIFY)
            .args(["evidence"])
            .arg(&evidence)
            .args([
                "--allow-simulated",
                "--any-measurement",
                "--nonce",
                nonce,
                "--protect-tree",
                tree,
                "--json",
            ])
            .output()
            .expect("verify");
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out.status.code(), json)
    };
    let (code, json) = verify(&git_tree_of_suite());
    assert_eq!(code, Some(0), "{json}");
    let (code, json) = verify(&"ab".repeat(20));
    assert_eq!(code, Some(1), "{json}");
    assert!(json.to_string().contains("pin-protect-tree"), "{json}");
}

#[test]
fn bad_protect_globs_are_refused_at_intake_with_the_line() {
    let c = case();
    for (glob, why) in [
        ("/etc/passwd", "absolute"),
        ("../outside/**", "`..`"),
        (".git/config", "`.git`"),
        ("tests/[", "not a valid glob"),
    ] {
        c.job(&format!(
            "[repository]\npath = \"repo\"\n[test]\ncommand = \"true\"\nprotect = [\"{glob}\"]\n"
        ));
        let out = Command::new(BIN)
            .args(["intake"])
            .arg(c.path().join("job.toml"))
            .output()
            .expect("intake");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(out.status.code(), Some(0), "{glob}: {text}");
        assert!(
            text.contains(why) && text.contains("job.toml:5:"),
            "{glob}: {text}"
        );
    }
}
