//! Protected tests stay out of the patch's reach through the test phase itself: repository code that runs
//! before the tests are read (a build script, an npm `pretest`, a root `conftest.py`, a `./build.sh` a
//! protected script calls) cannot change a protected path (the fence binds each read-only over the repository),
//! what was there at the end is hashed again for `inputs.test_tree` and any difference refuses the run; the
//! install phase cannot plant start-up hooks in the HOME the test phase gets. Each case ends with the protected
//! tests judging the patch.

use fenced_run_tests::fence::{is_root, skip, Case, Ran};
use fenced_run_tests::protect::{
    self, build_script_attack, build_sh_attack, conftest_attack, git_tree, home_hooks_attack,
    new_files_patch, Attack, CONFTEST_ATTEMPTS, HOOK_MARKERS, SUITE,
};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// Writes the job (with the patch, when given) and runs it; the run leaves nothing behind.
fn run(
    c: &Case,
    command: &str,
    protect: &[&str],
    patch: Option<&str>,
    install: Option<&str>,
) -> Ran {
    run_as(c, command, protect, patch, install, false)
}

/// [`run`], as `nobody` (uid 65534, from root) when `as_nobody`: the runner without root, the sandbox in a user
/// namespace of the runner's.
fn run_as(
    c: &Case,
    command: &str,
    protect: &[&str],
    patch: Option<&str>,
    install: Option<&str>,
    as_nobody: bool,
) -> Ran {
    if let Some(p) = patch {
        std::fs::write(c.path().join("fix.patch"), p).expect("patch");
    }
    let job = protect::job_toml(command, protect, patch.is_some(), install, "");
    c.job(&job);
    let r = if as_nobody {
        c.give_to(65534);
        c.run_via(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            &[],
        )
    } else {
        c.run()
    };
    c.assert_clean(&r, &[]);
    r
}

fn assert_all_blocked(r: &Ran) {
    if let Some(what) = protect::not_all_blocked(r.test_tail()) {
        panic!("{what}: {}", r.dump());
    }
}

/// Writes the attack's repository files into the case; its patch, when it has one.
fn setup(c: &Case, a: &Attack) -> Option<String> {
    for (path, text) in &a.files {
        c.repo_file(path, text);
    }
    a.patch.clone()
}

fn assert_judged_failed(r: &Ran) {
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert!(r.verdict["refusal"].is_null(), "{}", r.dump());
}

/// The verdict flags `path` for the reviewer as code that runs at test time.
fn assert_flagged(r: &Ran, path: &str) {
    let flagged = r.verdict["findings"].as_array().is_some_and(|f| {
        f.iter().any(|f| {
            f["kind"] == "runs-at-test-time"
                && f["detail"].as_str().is_some_and(|d| d.contains(path))
        })
    });
    assert!(flagged, "{path} is flagged runs-at-test-time: {}", r.dump());
}

#[test]
fn a_build_script_the_test_command_runs_first_cannot_touch_the_protected_tests() {
    if skip() {
        return;
    }
    build_script_case(false);
}

#[test]
fn a_build_script_cannot_touch_the_protected_tests_as_nobody() {
    if skip() || !is_root() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "the nobody variant is started from root",
        );
        return;
    }
    build_script_case(true);
}

fn build_script_case(as_nobody: bool) {
    // The cargo attack without cargo: the test command runs a repository script (a `build.rs` stand-in, added
    // by the patch), then the protected suite.
    let c = Case::new(BIN);
    let a = build_script_attack();
    let patch = setup(&c, &a);
    let r = run_as(
        &c,
        a.command,
        &a.protect,
        patch.as_deref(),
        a.install,
        as_nobody,
    );
    assert_all_blocked(&r);
    assert_judged_failed(&r);
    assert_eq!(
        r.verdict["inputs"]["test_tree"].as_str(),
        Some(git_tree(&[("tests/test.sh", SUITE)]).as_str()),
        "the tree of what ran, as received: {}",
        r.dump()
    );
    let lines = r.verdict["test"]["sandbox"].to_string();
    assert!(
        lines.contains("read-only ([test] protect): /work/repo/tests"),
        "{}",
        r.dump()
    );
}

#[test]
fn a_protected_test_script_calling_a_patched_build_script_cannot_edit_its_cases() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    let a = build_sh_attack();
    let patch = setup(&c, &a);
    let r = run(&c, a.command, &a.protect, patch.as_deref(), a.install);
    assert!(!r.test_tail().contains("DONE"), "{}", r.dump());
    assert!(r.test_tail().contains("0 passed, 2 failed"), "{}", r.dump());
    assert_judged_failed(&r);
}

#[test]
fn an_npm_pretest_script_cannot_edit_the_protected_test_directory() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test/run.sh", SUITE);
    c.repo_file(
        "package.json",
        "{\"name\": \"p\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"sh test/run.sh\"}}\n",
    );
    // The patch adds a `pretest` (npm runs it before `test`).
    let patch = "diff --git a/package.json b/package.json\n--- a/package.json\n+++ b/package.json\n@@ -1 +1 @@\n\
                 -{\"name\": \"p\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"sh test/run.sh\"}}\n\
                 +{\"name\": \"p\", \"version\": \"1.0.0\", \"scripts\": {\"pretest\": \"sh pre.sh\", \"test\": \"sh test/run.sh\"}}\n"
        .to_owned()
        + &new_files_patch(&[("pre.sh", &protect::attack_script("test", "run.sh"))]);
    let npm = std::path::Path::new("/usr/bin/npm").is_file();
    let command = if npm {
        "npm test"
    } else {
        eprintln!("note: no /usr/bin/npm: the pretest runs through a shell stand-in");
        "sh pre.sh; sh test/run.sh"
    };
    let r = run(&c, command, &["test/"], Some(&patch), None);
    assert_all_blocked(&r);
    assert_judged_failed(&r);
    assert_flagged(&r, "package.json");
}

#[test]
fn a_root_conftest_cannot_rewrite_a_protected_test_file() {
    if skip() {
        return;
    }
    let pytest = Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success());
    if !pytest {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Toolchain,
            "/usr/bin/python3 has no pytest (python3-pytest, .ci/run installs it)",
        );
        return;
    }
    let c = Case::new(BIN);
    let a = conftest_attack();
    let patch = setup(&c, &a);
    let r = run(&c, a.command, &a.protect, patch.as_deref(), a.install);
    let tail = r.test_tail();
    assert!(!tail.contains("DONE"), "{}", r.dump());
    // EROFS (30) for each: the file and its directory are on a read-only bind.
    for what in CONFTEST_ATTEMPTS {
        assert!(
            tail.contains(&format!("BLOCKED {what} 30")),
            "{what}: {}",
            r.dump()
        );
    }
    assert!(tail.contains("2 failed"), "{}", r.dump());
    assert_judged_failed(&r);
    assert_flagged(&r, "conftest.py");
}

#[test]
fn hooks_the_install_phase_writes_into_home_are_not_seen_by_the_test_phase() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("tests/test.sh", SUITE);
    // The install phase plants every hook, shows that python does run them there, and fills a cache.
    let a = home_hooks_attack("sh tests/test.sh");
    setup(&c, &a);
    let r = run(&c, a.command, &a.protect, None, a.install);
    let install_tail = r.verdict["output_tail"]["install"].as_str().unwrap_or("");
    assert!(
        install_tail.contains("USERCUSTOMIZE-RAN") && install_tail.contains("PTH-RAN"),
        "the hooks work where they were written: {}",
        r.dump()
    );
    let tail = r.test_tail();
    assert!(tail.contains("python ran"), "{}", r.dump());
    for hook in HOOK_MARKERS {
        assert!(
            !tail.contains(hook),
            "{hook} reached the test phase: {}",
            r.dump()
        );
    }
    assert!(
        tail.contains("CACHE-CARRIED"),
        "the pip cache is carried: {}",
        r.dump()
    );
    assert!(
        tail.contains("var-tmp: []"),
        "/var/tmp starts empty: {}",
        r.dump()
    );
    assert!(tail.contains("var-tmp-writable"), "{}", r.dump());
    assert_judged_failed(&r);
    let finding = protect::home_not_carried(&r.verdict);
    let detail = finding["detail"].as_str().unwrap_or("");
    for name in [
        ".npmrc",
        ".gitconfig",
        ".bashrc",
        "usercustomize.py",
        "zz-hook.pth",
    ] {
        assert!(detail.contains(name), "{name} not named: {}", r.dump());
    }
    assert_eq!(finding["stage"], "cut", "{}", r.dump());
}

#[test]
fn a_protected_file_swapped_in_by_renaming_its_parent_makes_the_run_refused() {
    if skip() {
        return;
    }
    // Only single files are protected: their directory is writable, so it can be renamed away (the bind goes
    // with it) and a passing copy put in its place. The check after the phase sees it and refuses the run.
    let c = Case::new(BIN);
    c.repo_file("tests/unit/a_test.sh", SUITE);
    c.repo_file("tests/unit/helper.sh", "true\n");
    let swap = "if echo 'exit 0' > tests/unit/a_test.sh 2>/dev/null; then echo DONE write; fi\n\
                mv tests/unit tests/old && mkdir tests/unit && printf 'echo 1 passed, 0 failed\\n' > tests/unit/a_test.sh\n";
    let patch = new_files_patch(&[("build.sh", swap)]);
    let r = run(
        &c,
        "sh build.sh; sh tests/unit/a_test.sh",
        &["tests/unit/*_test.sh"],
        Some(&patch),
        None,
    );
    assert!(!r.test_tail().contains("DONE"), "{}", r.dump());
    assert!(
        r.test_tail().contains("1 passed"),
        "the swap ran: {}",
        r.dump()
    );
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "test", "{}", r.dump());
    let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("tests/unit/a_test.sh (modified)"),
        "{}",
        r.dump()
    );
    let swapped = git_tree(&[("tests/unit/a_test.sh", "echo 1 passed, 0 failed\n")]);
    assert_eq!(
        r.verdict["inputs"]["test_tree"].as_str(),
        Some(swapped.as_str()),
        "the tree of what was there at the end: {}",
        r.dump()
    );
}

/// The build script of the attack with real cargo: it tries to rewrite the protected test and to add one, and
/// says what the kernel answered (`cargo:warning` lines reach the test phase's output).
const CARGO_BUILD_RS: &str = "fn main() {\n\
    let dir = std::path::PathBuf::from(std::env::var(\"CARGO_MANIFEST_DIR\").unwrap_or_default());\n\
    let w = std::fs::write(dir.join(\"tests/it.rs\"), \"#[test]\\nfn adds() {}\\n#[test]\\nfn adds_one() {}\\n\");\n\
    println!(\"cargo:warning=BUILD-RS-REWRITE {:?}\", w.err().and_then(|e| e.raw_os_error()));\n\
    let n = std::fs::write(dir.join(\"tests/extra.rs\"), \"#[test]\\nfn extra() {}\\n\");\n\
    println!(\"cargo:warning=BUILD-RS-NEW {:?}\", n.err().and_then(|e| e.raw_os_error()));\n\
}\n";

/// The issue's own case with real cargo: `protect = ["tests/**", "Cargo.toml"]`, a suite that fails 0/2, and a
/// patch that only adds a `build.rs` rewriting `tests/it.rs` to pass. cargo compiles and runs the build script
/// before it compiles the tests; both writes fail with EROFS on the read-only binds, the protected tests judge
/// the patch (`tests_failed`, 0 passed, 2 failed), `inputs.test_tree` is the tree as received, and the verdict
/// names `build.rs` as code that runs at test time.
#[test]
fn a_real_cargo_build_script_cannot_rewrite_the_protected_tests() {
    if skip() {
        return;
    }
    let Some(tc) = fenced_run_tests::fence::rustup_toolchain_for_sandbox(std::path::Path::new(
        env!("CARGO_TARGET_TMPDIR"),
    )) else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Toolchain,
            "no rustup-installed toolchain under ~/.rustup (the build-script attack needs real cargo)",
        );
        return;
    };
    let cargo_toml =
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n";
    let it = "#[test]\nfn adds() { assert_eq!(tiny::add(2, 2), 4); }\n\
              #[test]\nfn adds_one() { assert_eq!(tiny::add(3, 1), 4); }\n";
    let c = Case::new(BIN);
    c.repo_file("Cargo.toml", cargo_toml);
    // The bug the patch does not fix: add subtracts.
    c.repo_file(
        "src/lib.rs",
        "pub fn add(a: u32, b: u32) -> u32 { a - b }\n",
    );
    c.repo_file("tests/it.rs", it);
    std::fs::write(
        c.path().join("fix.patch"),
        new_files_patch(&[("build.rs", CARGO_BUILD_RS)]),
    )
    .expect("patch");
    let extra = format!(
        "[limits]\nmemory_mib = 2048\n[sandbox]\nread = [\"{}\", \"{}\"]\n",
        tc.dir.join("bin").display(),
        tc.dir.join("lib").display()
    );
    c.job(&protect::job_toml(
        "cargo test --offline",
        &["tests/**", "Cargo.toml"],
        true,
        None,
        &extra,
    ));
    let operator = c.operator(&format!("[sandbox]\nread = [\"{}\"]\n", tc.dir.display()));
    let r = c.run_with(
        &["--operator-config", operator.to_str().expect("utf8")],
        &[],
    );
    c.assert_clean(&r, &[]);
    let tail = r.test_tail();
    assert!(
        tail.contains("BUILD-RS-REWRITE Some(30)") && tail.contains("BUILD-RS-NEW Some(30)"),
        "the build script ran and both writes failed with EROFS: {}",
        r.dump()
    );
    assert_judged_failed(&r);
    assert_eq!(r.verdict["tests"]["passed"], 0, "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 2, "{}", r.dump());
    assert_eq!(
        r.verdict["inputs"]["test_tree"].as_str(),
        Some(git_tree(&[("Cargo.toml", cargo_toml), ("tests/it.rs", it)]).as_str()),
        "{}",
        r.dump()
    );
    assert_flagged(&r, "build.rs");
    drop(tc);
}
