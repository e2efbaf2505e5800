//! Attack suite, escaping the tree: the host's files, home directories, environment and `/proc` of the
//! runner are out of sight; nothing outside the repository, HOME and TMPDIR can be written; the original
//! repository is never touched.

use fenced_run_tests::fence::{skip, Case};
use std::io::Write;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

#[test]
fn host_files_environment_and_runner_proc_are_out_of_sight() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    let secret = c.path().join("secret.txt");
    std::fs::write(&secret, "SECRET-917200").expect("secret");
    c.repo_file(
        "test.sh",
        &format!(
            "bad=0\n\
             cat {secret} 2>/dev/null && bad=1\n\
             ls /home 2>/dev/null && bad=1\n\
             ls /root 2>/dev/null && bad=1\n\
             ls /run 2>/dev/null && bad=1\n\
             ls /var/run/docker.sock 2>/dev/null && bad=1\n\
             env | grep -q SECRET-917201 && bad=1\n\
             cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -q SECRET-917201 && bad=1\n\
             for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'fenced-run-e2e run' && bad=1; done\n\
             echo bad=$bad\n\
             [ $bad = 0 ] && echo '1 passed, 0 failed' || {{ echo '0 passed, 1 failed'; exit 1; }}\n",
            secret = secret.display()
        ),
    );
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 60\n",
    );
    let r = c.run_with(&[], &[("FENCE_TEST_SECRET", "SECRET-917201")]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let names = r.verdict["test"]["env_names"].as_array().expect("names");
    assert!(
        !names.iter().any(|n| n == "FENCE_TEST_SECRET"),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
}

#[test]
fn nothing_outside_the_tree_is_writable() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("orig.txt", "original\n");
    c.repo_file(
        "test.sh",
        "bad=0\n\
         for f in /x /etc/x /usr/x /work/x /proc/x /dev/x /bin/x; do touch $f 2>/dev/null && { echo wrote $f; bad=1; }; done\n\
         touch /work/repo/ok $HOME/ok /tmp/ok || bad=1\n\
         echo changed > orig.txt || bad=1\n\
         echo bad=$bad\n\
         [ $bad = 0 ] && echo '1 passed, 0 failed' || { echo '0 passed, 1 failed'; exit 1; }\n",
    );
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let orig = std::fs::read_to_string(c.path().join("repo/orig.txt")).expect("orig");
    assert_eq!(
        orig, "original\n",
        "the run wrote into the original repository"
    );
    assert!(!c.path().join("repo/ok").exists());
    c.assert_clean(&r, &[]);
}

#[test]
fn credential_read_paths_are_refused() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[sandbox]\nread = [\"~/.ssh\"]\n");
    let r = c.run();
    assert_eq!(r.code, 1, "{}", r.dump());
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn sandbox_read_paths_are_visible_read_only_and_on_path() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    // Not under /tmp (which the job loader refuses as a read path), wherever the clone lives.
    let tool_dir =
        fenced_run_tests::fence::read_area(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let tool = tool_dir.path().join("toolchain");
    std::fs::create_dir_all(tool.join("bin")).expect("mkdir");
    std::fs::write(
        tool.join("bin/faketool-917400"),
        "#!/bin/sh\necho '1 passed, 0 failed'\n",
    )
    .expect("w");
    let st = std::process::Command::new("chmod")
        .args(["-R", "a+rX,a+x"])
        .arg(&tool)
        .status()
        .expect("chmod");
    assert!(st.success());
    c.repo_file(
        "test.sh",
        &format!(
            "touch {bin}/x 2>/dev/null && {{ echo wrote; exit 1; }}\nfaketool-917400\n",
            bin = tool.join("bin").display()
        ),
    );
    c.job(&format!(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[sandbox]\nread = [\"{}\"]\n",
        tool.join("bin").display()
    ));
    // The operator allows the toolchain; the job chooses its bin directory.
    let op = c.operator(&format!("[sandbox]\nread = [\"{}\"]\n", tool.display()));
    let r = c.run_with(&["--operator-config", &op.display().to_string()], &[]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert!(!tool.join("bin/x").exists());
    let sandbox = r.verdict["test"]["sandbox"].to_string();
    assert!(sandbox.contains("[sandbox] read"), "{sandbox}");
    c.assert_clean(&r, &[]);
}

/// A repository whose own `.git/config` defines a filter driver, with `.git/info/attributes` applying it to
/// every file: the runner applies the patch as root outside the fence, and must never run that driver.
#[test]
fn repository_git_config_never_runs_on_the_host() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("calc.txt", "a\n");
    c.repo_file(
        "test.sh",
        "grep -q b calc.txt && echo '1 passed, 0 failed'\n",
    );
    let repo = c.path().join("repo");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@t.example"])
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    let marker = c.path().join("PWNED");
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(repo.join(".git/config"))
        .expect("config");
    writeln!(
        config,
        // Quoted: in git config an unquoted `;` starts a comment.
        "[filter \"x\"]\n\tclean = \"sh -c 'touch {m}-clean; cat'\"\n\tsmudge = \"sh -c 'touch {m}-smudge; cat'\"\n\
         [diff]\n\texternal = \"sh -c 'touch {m}-diff'\"",
        m = marker.display()
    )
    .expect("write config");
    std::fs::create_dir_all(repo.join(".git/info")).expect("info");
    std::fs::write(repo.join(".git/info/attributes"), "* filter=x\n").expect("attributes");
    std::fs::write(
        c.path().join("fix.patch"),
        "--- a/calc.txt\n+++ b/calc.txt\n@@ -1 +1 @@\n-a\n+b\n",
    )
    .expect("patch");
    c.job(
        "[repository]\npath = \"repo\"\npatch = \"fix.patch\"\n[test]\ncommand = \"sh test.sh\"\n",
    );
    let r = c.run();
    let ran: Vec<_> = std::fs::read_dir(c.path())
        .expect("case dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("PWNED"))
        .collect();
    assert!(
        ran.is_empty(),
        "the repository's git config ran on the host: {ran:?}\n{}",
        r.dump()
    );
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    c.assert_clean(&r, &[]);
}

/// The command runs in a user namespace of its own (as root the runner builds the sandbox from the host's user
/// namespace, then the command enters one as its unprivileged uid), where only its uid is mapped.
#[test]
fn the_command_has_its_own_user_namespace() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo \"userns=$(readlink /proc/self/ns/user)\"\n\
         echo \"uidmap=$(cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //')\"\n\
         echo \"uid=$(id -u)\"\n\
         echo '1 passed, 0 failed'\n",
    );
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let tail = r.test_tail();
    let host_ns = std::fs::read_link("/proc/self/ns/user").expect("host user ns");
    let line = |key: &str| {
        tail.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let inside = line("userns=");
    assert!(inside.starts_with("user:["), "{}", r.dump());
    assert_ne!(
        inside,
        host_ns.to_string_lossy(),
        "same user namespace as the host"
    );
    let uid = line("uid=");
    assert_ne!(uid, "0", "the command must not be root: {}", r.dump());
    // Exactly one mapping, of the command's own uid (as root: 65534 to itself; as a user: the user ns maps 0).
    let uidmap = line("uidmap=");
    let map: Vec<&str> = uidmap.split_whitespace().collect();
    assert_eq!(map.len(), 3, "one uid mapping: {}", r.dump());
    assert_eq!(map[2], "1", "a single uid is mapped: {}", r.dump());
    c.assert_clean(&r, &[]);
}
