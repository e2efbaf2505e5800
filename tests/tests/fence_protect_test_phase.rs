//! Protected tests stay out of the patch's reach through the test phase itself: repository code that runs
//! before the tests are read (a build script, an npm `pretest`, a root `conftest.py`, a `./build.sh` a
//! protected script calls) cannot change a protected path (the fence binds each read-only over the repository),
//! what was there at the end is hashed again for `inputs.test_tree` and any difference refuses the run; the
//! install phase cannot plant start-up hooks in the HOME the test phase gets. Each case ends with the protected
//! tests judging the patch.

use fenced_run_tests::fence::{is_root, skip, Case, Ran};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// The protected suite: it fails, as the repository has it.
const SUITE: &str = "echo '0 passed, 1 failed'\nexit 1\n";

/// A TOML basic string holding `s`.
fn toml(s: &str) -> String {
    serde_json::to_string(s).expect("string")
}

/// A patch (git's format) creating each `(path, text)`.
fn new_files_patch(files: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (path, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
            lines.len()
        ));
        for l in lines {
            out.push('+');
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

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
    let mut job = String::from("[repository]\npath = \"repo\"\n");
    if let Some(p) = patch {
        std::fs::write(c.path().join("fix.patch"), p).expect("patch");
        job.push_str("patch = \"fix.patch\"\n");
    }
    let globs: Vec<String> = protect.iter().map(|g| toml(g)).collect();
    job.push_str(&format!(
        "[test]\ncommand = {}\ntimeout_seconds = 120\nprotect = [{}]\n",
        toml(command),
        globs.join(", ")
    ));
    if let Some(i) = install {
        job.push_str(&format!(
            "[install]\ncommand = {}\ntimeout_seconds = 120\n",
            toml(i)
        ));
    }
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

/// The git tree of `files` alone, computed by git itself.
fn git_tree(files: &[(&str, &str)]) -> String {
    let d = tempfile::tempdir().expect("tempdir");
    for (rel, text) in files {
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
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["write-tree"])
}

/// Every attempt the attack script makes on the protected `dir`, each reported as `BLOCKED what` or
/// `DONE what` (shell).
fn attack_script(dir: &str, file: &str) -> String {
    let attempts = [
        (
            "rewrite",
            format!("printf 'echo 3 passed, 0 failed\\nexit 0\\n' > {dir}/{file}"),
        ),
        ("append", format!("echo 'exit 0' >> {dir}/{file}")),
        ("rename", format!("mv {dir}/{file} {dir}/moved.sh")),
        ("unlink", format!("rm -f {dir}/{file}")),
        ("chmod", format!("chmod 777 {dir}/{file}")),
        ("new-file", format!("echo 'exit 0' > {dir}/new.sh")),
        ("mkdir", format!("mkdir {dir}/newdir")),
        ("replace-dir", format!("mv {dir} {dir}.old")),
        ("truncate", format!("truncate -s 0 {dir}/{file}")),
        // A writable name for the protected bytes (then written through) must not exist either.
        ("hardlink", format!("ln {dir}/{file} alias.sh")),
        // The bind cannot be taken away to reveal the writable directory below it, nor from a new mount
        // namespace.
        (
            "umount",
            format!("umount -l /work/repo/{dir} && echo 'exit 0' > {dir}/{file}"),
        ),
        (
            "unshare-umount",
            format!(
                "unshare -m sh -c 'umount -l /work/repo/{dir} && echo \"exit 0\" > {dir}/{file}'"
            ),
        ),
    ];
    let mut s = String::new();
    for (name, cmd) in attempts {
        s.push_str(&format!(
            "if {cmd} 2>/dev/null; then echo DONE {name}; else echo BLOCKED {name}; fi\n"
        ));
    }
    s
}

fn assert_all_blocked(r: &Ran) {
    let tail = r.test_tail();
    assert!(
        !tail.contains("DONE "),
        "an attempt succeeded: {}",
        r.dump()
    );
    for name in [
        "rewrite",
        "append",
        "rename",
        "unlink",
        "chmod",
        "new-file",
        "mkdir",
        "replace-dir",
        "truncate",
        "hardlink",
        "umount",
        "unshare-umount",
    ] {
        assert!(
            tail.contains(&format!("BLOCKED {name}")),
            "{name} not attempted: {}",
            r.dump()
        );
    }
}

fn assert_judged_failed(r: &Ran) {
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert!(r.verdict["refusal"].is_null(), "{}", r.dump());
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
    c.repo_file("tests/test.sh", SUITE);
    c.repo_file("src/code.sh", "echo code\n");
    let patch = new_files_patch(&[("build.sh", &attack_script("tests", "test.sh"))]);
    let r = run_as(
        &c,
        "sh build.sh; sh tests/test.sh",
        &["tests/**"],
        Some(&patch),
        None,
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
    c.repo_file(
        "tests/test.sh",
        "sh ./build.sh\np=0; f=0\nfor t in tests/cases/*.sh; do if sh \"$t\"; then p=$((p+1)); else f=$((f+1)); fi; done\n\
         echo \"$p passed, $f failed\"\n[ \"$f\" = 0 ]\n",
    );
    c.repo_file("tests/cases/one.sh", "exit 1\n");
    c.repo_file("tests/cases/two.sh", "exit 1\n");
    c.repo_file("build.sh", "echo building\n");
    let patch = "diff --git a/build.sh b/build.sh\n--- a/build.sh\n+++ b/build.sh\n@@ -1 +1,3 @@\n echo building\n\
                 +for f in tests/cases/*.sh; do echo 'exit 0' > \"$f\" && echo DONE edit; done\n\
                 +echo 'exit 0' > tests/cases/three.sh && echo DONE add\n";
    let r = run(&c, "sh tests/test.sh", &["tests/**"], Some(patch), None);
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
        + &new_files_patch(&[("pre.sh", &attack_script("test", "run.sh"))]);
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
    c.repo_file(
        "tests/test_suite.py",
        "def test_one():\n    assert False\n\n\ndef test_two():\n    assert False\n",
    );
    let conftest = "import os\n\
                    for what, act in [\n\
                    \x20   ('rewrite', lambda: open('tests/test_suite.py', 'w').write('def test_one():\\n    pass\\n')),\n\
                    \x20   ('unlink', lambda: os.unlink('tests/test_suite.py')),\n\
                    \x20   ('rename', lambda: os.rename('tests/test_suite.py', 'tests/x.py')),\n\
                    \x20   ('new-file', lambda: open('tests/test_new.py', 'w').write('def test_n():\\n    pass\\n')),\n\
                    ]:\n\
                    \x20   try:\n\
                    \x20       act()\n\
                    \x20       print('DONE', what)\n\
                    \x20   except OSError as e:\n\
                    \x20       print('BLOCKED', what, e.errno)\n";
    let patch = new_files_patch(&[("conftest.py", conftest)]);
    let r = run(
        &c,
        "python3 -m pytest -s -p no:cacheprovider tests",
        &["tests/**"],
        Some(&patch),
        None,
    );
    let tail = r.test_tail();
    assert!(!tail.contains("DONE"), "{}", r.dump());
    // EROFS (30) for each: the file and its directory are on a read-only bind.
    for what in ["rewrite", "unlink", "rename", "new-file"] {
        assert!(
            tail.contains(&format!("BLOCKED {what} 30")),
            "{what}: {}",
            r.dump()
        );
    }
    assert!(tail.contains("2 failed"), "{}", r.dump());
    assert_judged_failed(&r);
}

#[test]
fn hooks_the_install_phase_writes_into_home_are_not_seen_by_the_test_phase() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("tests/test.sh", SUITE);
    // The install phase plants every hook, shows that python does run them there, and fills a cache. (The
    // scripts are repository files: intake refuses a job command that names a credential path such as ~/.npmrc.)
    let install = "set -e\n\
         site=$(python3 -c 'import site; print(site.getusersitepackages())')\n\
         mkdir -p \"$site\" ~/.cache/pip\n\
         echo 'print(\"USERCUSTOMIZE-RAN\")' > \"$site/usercustomize.py\"\n\
         echo 'import sys; sys.stdout.write(\"PTH-RAN\\n\")' > \"$site/zz-hook.pth\"\n\
         printf 'node-options=--require /work/repo/hook.js\\nmarker=NPMRC-SEEN\\n' > ~/.npmrc\n\
         printf '[core]\\n\\thooksPath = /work/repo/hooks\\n[marker]\\n\\tseen = GITCONFIG-SEEN\\n' > ~/.gitconfig\n\
         echo 'echo BASHRC-SEEN' > ~/.bashrc\n\
         echo cached > ~/.cache/pip/CACHE-CARRIED\n\
         echo left > /var/tmp/install-left\n\
         python3 -c 'print(1)'\n";
    let test = "python3 -c 'print(\"python ran\")'\n\
         cat ~/.npmrc ~/.gitconfig ~/.bashrc 2>/dev/null\n\
         git config --global --get marker.seen\n\
         ls ~/.cache/pip\n\
         echo \"var-tmp: [$(ls -A /var/tmp)]\"\n\
         d=$(mktemp -d /var/tmp/t.XXXXXX) && echo var-tmp-writable && rmdir \"$d\"\n\
         sh tests/test.sh";
    c.repo_file("install.sh", install);
    c.repo_file("check.sh", test);
    let r = run(
        &c,
        "sh check.sh",
        &["tests/**"],
        None,
        Some("sh install.sh"),
    );
    let install_tail = r.verdict["output_tail"]["install"].as_str().unwrap_or("");
    assert!(
        install_tail.contains("USERCUSTOMIZE-RAN") && install_tail.contains("PTH-RAN"),
        "the hooks work where they were written: {}",
        r.dump()
    );
    let tail = r.test_tail();
    assert!(tail.contains("python ran"), "{}", r.dump());
    for hook in [
        "USERCUSTOMIZE-RAN",
        "PTH-RAN",
        "NPMRC-SEEN",
        "GITCONFIG-SEEN",
        "BASHRC-SEEN",
    ] {
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
    let finding = r.verdict["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["kind"] == "home-not-carried"))
        .cloned()
        .unwrap_or_default();
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
