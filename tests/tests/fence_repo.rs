//! Attack suite, repository preparation: a repository whose `.git` names a program under every key git runs
//! programs from (and a partial clone missing its HEAD commit, which makes git "lazily fetch" through the
//! promisor's `uploadpack`), as a directory, a tarball and (what a bundle can carry) a git bundle. Nothing of
//! it may run outside the sandbox: no marker file appears, no payload process is left, and every git the
//! runner starts (seen through a logging `git` first on PATH) has a `GIT_DIR` of the runner's own and no
//! system, global or lazy-fetch configuration. Also: the `commit` claim binds the tree.

use fenced_run_tests::fence::{processes_with, skip, Case, Ran};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.example"])
        .args(["-c", "init.defaultBranch=main"])
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

fn executable(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The attack kit of a case: `bin/pwn` writes `PWNED-<key>` and leaves a process naming the case directory;
/// `bin/git` logs every git the runner starts and runs the real one.
struct Kit {
    case: PathBuf,
    pwn: PathBuf,
    path_env: String,
}

impl Kit {
    fn new(c: &Case) -> Kit {
        let case = c.path().to_path_buf();
        let pwn = case.join("bin/pwn");
        executable(
            &pwn,
            &format!(
                "#!/bin/sh\ntouch {case}/PWNED-\"${{1:-x}}\"\nsetsid sh -c 'sleep 60' {case}/daemon >/dev/null 2>&1 &\nexit 0\n",
                case = case.display()
            ),
        );
        let real = String::from_utf8(
            Command::new("sh")
                .args(["-c", "command -v git"])
                .output()
                .expect("which git")
                .stdout,
        )
        .expect("utf8");
        executable(
            &case.join("bin/git"),
            &format!(
                "#!/bin/sh\nprintf '%s|%s|%s:%s:%s|%s\\n' \"$PWD\" \"$GIT_DIR\" \"$GIT_CONFIG_NOSYSTEM\" \
                 \"$GIT_CONFIG_GLOBAL\" \"$GIT_NO_LAZY_FETCH\" \"$*\" >> {log}\nexec {real} \"$@\"\n",
                log = case.join("git.log").display(),
                real = real.trim()
            ),
        );
        let path_env = format!(
            "{}:{}",
            case.join("bin").display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        Kit {
            case,
            pwn,
            path_env,
        }
    }

    /// `pwn <key>` as a config value.
    fn cmd(&self, key: &str) -> String {
        format!("{} {key}", self.pwn.display())
    }

    fn run(&self, c: &Case) -> Ran {
        c.run_with(&[], &[("PATH", &self.path_env)])
    }

    /// Asserts that no payload ran and that every git the runner started used a git directory of its own.
    fn assert_nothing_ran(&self, r: &Ran, c: &Case) {
        let pwned: Vec<_> = fs::read_dir(&self.case)
            .expect("case")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("PWNED"))
            .collect();
        assert!(
            pwned.is_empty(),
            "the repository's git data ran a program on the host: {pwned:?}\n{}",
            r.dump()
        );
        let daemon = self.case.join("daemon").display().to_string();
        let left = processes_with(&[&daemon]);
        assert!(left.is_empty(), "payload processes: {left:?}");
        let log = fs::read_to_string(self.case.join("git.log")).unwrap_or_default();
        if r.outcome() != "refused" {
            // The logging git is really in the way: the patch was applied through it.
            assert!(log.contains(" apply "), "no git apply logged: {log}");
        }
        for line in log.lines() {
            let f: Vec<&str> = line.splitn(4, '|').collect();
            assert_eq!(f.len(), 4, "{line}");
            let (git_dir, env, args) = (f[1], f[2], f[3]);
            assert_eq!(env, "1:/dev/null:1", "isolation env missing: {line}");
            let ours = git_dir.contains("/fenced-run-git-")
                || (args.contains(" init -q --template= ") && git_dir.is_empty())
                || ((args.contains(" bundle unbundle ") || args.contains(" read-tree HEAD"))
                    && git_dir.ends_with("/fs/repo/.git"));
            assert!(
                ours,
                "git ran with a git directory not the runner's own: {line}"
            );
            assert!(
                !args.contains("rev-parse") && !args.contains("clone"),
                "{line}"
            );
        }
        c.assert_clean(r, &[&daemon]);
    }
}

/// Writes into `repo/.git` a program under every key git runs programs from, executable hooks in both
/// `.git/hooks` and a `core.hooksPath`, attributes naming the filter and diff drivers, and an included
/// configuration file doing the same.
fn arm(kit: &Kit, repo: &Path) {
    let hooks = kit.case.join("hooks");
    for h in [
        "pre-commit",
        "post-checkout",
        "post-merge",
        "post-index-change",
        "reference-transaction",
        "pre-auto-gc",
        "fsmonitor-watchman",
        "post-rewrite",
        "pre-push",
        "applypatch-msg",
        "pre-applypatch",
        "post-applypatch",
    ] {
        let body = format!("#!/bin/sh\n{}\n", kit.cmd(&format!("hook-{h}")));
        executable(&hooks.join(h), &body);
        executable(&repo.join(".git/hooks").join(h), &body);
    }
    let included = kit.case.join("included.config");
    fs::write(
        &included,
        format!(
            "[core]\n\tfsmonitor = \"{}\"\n",
            kit.cmd("included-fsmonitor")
        ),
    )
    .expect("included");
    let q = |k: &str| format!("\"{}\"", kit.cmd(k));
    let mut config = fs::read_to_string(repo.join(".git/config")).expect("config");
    config.push_str(&format!(
        "[core]\n\tfsmonitor = {}\n\tsshCommand = {}\n\thooksPath = {}\n\tpager = {}\n\teditor = {}\n\
         \taskPass = {}\n\tgitProxy = {}\n\talternateRefsCommand = {}\n\
         [remote \"origin\"]\n\turl = {case}/nowhere.git\n\tuploadpack = {}\n\treceivepack = {}\n\tpromisor = true\n\
         [filter \"x\"]\n\tclean = {}\n\tsmudge = {}\n\tprocess = {}\n\
         [diff]\n\texternal = {}\n[diff \"x\"]\n\ttextconv = {}\n[merge \"x\"]\n\tdriver = {}\n\
         [credential]\n\thelper = {}\n[gpg]\n\tprogram = {}\n[sequence]\n\teditor = {}\n\
         [uploadpack]\n\tpackObjectsHook = {}\n[include]\n\tpath = {inc}\n[includeIf \"gitdir:/\"]\n\tpath = {inc}\n\
         [alias]\n\tst = \"!{}\"\n",
        q("fsmonitor"),
        q("sshcommand"),
        hooks.display(),
        q("pager"),
        q("editor"),
        q("askpass"),
        q("gitproxy"),
        q("alternaterefs"),
        q("uploadpack"),
        q("receivepack"),
        q("filter-clean"),
        q("filter-smudge"),
        q("filter-process"),
        q("diff-external"),
        q("textconv"),
        q("merge-driver"),
        q("credential"),
        q("gpg"),
        q("sequence-editor"),
        q("packobjectshook"),
        kit.cmd("alias"),
        case = kit.case.display(),
        inc = included.display(),
    ));
    fs::write(repo.join(".git/config"), config).expect("config");
    fs::create_dir_all(repo.join(".git/info")).expect("info");
    fs::write(
        repo.join(".git/info/attributes"),
        "* filter=x diff=x merge=x\n",
    )
    .expect("attributes");
}

/// A committed repository in the case's `repo/`: `calc.txt` and a test that passes once the patch is applied.
fn committed(c: &Case) -> String {
    c.repo_file("calc.txt", "a\n");
    c.repo_file(
        "test.sh",
        "grep -q b calc.txt && echo '1 passed, 0 failed'\n",
    );
    c.repo_file(".gitattributes", "* filter=x diff=x\n");
    let repo = c.path().join("repo");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "init"]);
    fs::write(
        c.path().join("fix.patch"),
        "--- a/calc.txt\n+++ b/calc.txt\n@@ -1 +1 @@\n-a\n+b\n",
    )
    .expect("patch");
    git(&repo, &["rev-parse", "HEAD"])
}

fn job(path: &str, commit: Option<&str>) -> String {
    let commit = commit
        .map(|c| format!("commit = \"{c}\"\n"))
        .unwrap_or_default();
    format!(
        "[repository]\npath = \"{path}\"\n{commit}patch = \"fix.patch\"\n[test]\ncommand = \"sh test.sh\"\n"
    )
}

fn tar(c: &Case, name: &str) {
    let st = Command::new("tar")
        .current_dir(c.path().join("repo"))
        .args(["czf", &format!("../{name}"), "."])
        .status()
        .expect("tar");
    assert!(st.success());
}

#[test]
fn repository_git_programs_never_run_on_the_host_directory_and_tarball() {
    if skip() {
        return;
    }
    for form in ["directory", "tarball"] {
        let c = Case::new(BIN);
        let kit = Kit::new(&c);
        let head = committed(&c);
        arm(&kit, &c.path().join("repo"));
        let path = if form == "tarball" {
            tar(&c, "repo.tar.gz");
            "repo.tar.gz"
        } else {
            "repo"
        };
        c.job(&job(path, Some(&head)));
        let r = kit.run(&c);
        kit.assert_nothing_ran(&r, &c);
        assert_eq!(r.outcome(), "tests_passed", "{form}: {}", r.dump());
        assert_eq!(r.verdict["inputs"]["commit"], head.as_str(), "{form}");
        // Intake said so before anything ran: each program key is a contained finding.
        let findings = r.verdict["findings"].to_string();
        for key in [
            "remote.origin.uploadpack",
            "core.fsmonitor",
            "core.sshcommand",
            "core.hookspath",
            "filter.x.clean",
            "diff.external",
            "credential.helper",
            "include.path",
            "gpg.program",
            "remote.origin.promisor",
        ] {
            assert!(
                findings.contains(key),
                "{form}: no finding for {key}: {findings}"
            );
        }
        assert!(findings.contains(".git/hooks/post-checkout"), "{findings}");
    }
}

/// A partial clone whose HEAD commit object is missing: any git reading the repository would fetch it
/// through the promisor remote, running its `uploadpack` as a shell command. The runner reads the object
/// store itself and never fetches: with a `commit` claim the run is refused at stage `commit`; without
/// one the run goes on with no `inputs.commit` and a finding saying why.
#[test]
fn partial_clone_with_a_missing_head_fetches_nothing() {
    if skip() {
        return;
    }
    for (form, claim) in [("directory", true), ("tarball", true), ("directory", false)] {
        let c = Case::new(BIN);
        let kit = Kit::new(&c);
        let head = committed(&c);
        let repo = c.path().join("repo");
        arm(&kit, &repo);
        let mut config = fs::read_to_string(repo.join(".git/config")).expect("config");
        config = config.replace("repositoryformatversion = 0", "repositoryformatversion = 1");
        config.push_str("[extensions]\n\tpartialClone = origin\n");
        fs::write(repo.join(".git/config"), config).expect("config");
        fs::remove_file(repo.join(".git/objects").join(&head[..2]).join(&head[2..]))
            .expect("remove the HEAD commit object");
        // Proof that the attack is real: the host's own git, in this repository, runs the payload.
        let out = Command::new("git")
            .current_dir(&repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["cat-file", "-t", &head])
            .output()
            .expect("git");
        assert!(!out.status.success(), "the object came back: {out:?}");
        let proof = c.path().join("PWNED-uploadpack");
        assert!(
            proof.exists(),
            "the attack does not work on this git, so it proves nothing"
        );
        fs::remove_file(&proof).expect("rm proof");
        // The payload starts its daemon in the background (setsid, then exec): wait until it is there, kill it,
        // and wait until it is gone, so the fenced run below is judged alone. Bounded; never a fixed sleep.
        let marker = c.path().join("daemon").display().to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = false;
        loop {
            let left = processes_with(&[&marker]);
            for p in &left {
                if let Some(pid) = p.split(':').next() {
                    let _ = Command::new("kill").arg(pid).status();
                }
            }
            seen |= !left.is_empty();
            if (seen && left.is_empty()) || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::yield_now();
        }
        assert!(seen, "the proof's payload daemon never appeared");
        assert!(
            processes_with(&[&marker]).is_empty(),
            "the proof's payload daemon survived kill"
        );
        let path = if form == "tarball" {
            tar(&c, "repo.tar.gz");
            "repo.tar.gz"
        } else {
            "repo"
        };
        c.job(&job(path, claim.then_some(head.as_str())));
        let r = kit.run(&c);
        kit.assert_nothing_ran(&r, &c);
        if claim {
            assert_eq!(
                (r.code, r.outcome()),
                (1, "refused"),
                "{form}: {}",
                r.dump()
            );
            assert_eq!(r.verdict["refusal"]["stage"], "commit", "{}", r.dump());
            let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
            assert!(reason.contains("missing"), "{reason}");
            assert!(r.verdict["test"].is_null(), "{}", r.dump());
        } else {
            assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
            assert!(r.verdict["inputs"]["commit"].is_null(), "{}", r.dump());
            assert!(
                r.verdict["findings"]
                    .to_string()
                    .contains("commit-unverified"),
                "{}",
                r.dump()
            );
        }
        let findings = r.verdict["findings"].to_string();
        assert!(findings.contains("extensions.partialclone"), "{findings}");
    }
}

/// A bundle carries no configuration, but its tree can carry `.gitattributes` naming filter drivers and a
/// `.gitmodules` whose `update` is a command: unbundled, checked out and patched by the runner, none runs.
#[test]
fn a_bundle_is_unpacked_and_checked_out_without_running_it() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    let kit = Kit::new(&c);
    c.repo_file(
        ".gitmodules",
        &format!(
            "[submodule \"s\"]\n\tpath = s\n\turl = ext::{}\n\tupdate = !{}\n",
            kit.cmd("submodule-url"),
            kit.cmd("submodule-update")
        ),
    );
    // git's own checkout would rewrite these files' line ends; the runner writes the bytes as stored.
    c.repo_file(
        "sub/.gitattributes",
        "* filter=lfs diff=lfs merge=lfs eol=crlf\n",
    );
    c.repo_file("sub/lines.txt", "one\ntwo\n");
    let head = committed(&c);
    git(
        &c.path().join("repo"),
        &["bundle", "create", "-q", "../repo.bundle", "HEAD", "main"],
    );
    c.job(&job("repo.bundle", Some(&head)));
    let r = kit.run(&c);
    kit.assert_nothing_ran(&r, &c);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["inputs"]["commit"], head.as_str());
    let log = fs::read_to_string(c.path().join("git.log")).expect("git ran");
    assert!(log.contains("bundle unbundle"), "{log}");
}

/// The `commit` claim binds the tree: a file changed, added or removed after the commit is `refused` at
/// stage `commit` naming the path; a gitfile `.git` and replace refs are refused; without a claim the run
/// goes on and `inputs.commit` stays empty.
#[test]
fn the_commit_claim_binds_the_tree() {
    if skip() {
        return;
    }
    type Change = fn(&Path);
    let cases: [(&str, Change, &str); 5] = [
        (
            "modified",
            |r| fs::write(r.join("calc.txt"), "b\n").expect("w"),
            "calc.txt",
        ),
        (
            "untracked",
            |r| fs::write(r.join("extra.txt"), "x\n").expect("w"),
            "extra.txt",
        ),
        (
            "removed",
            |r| fs::remove_file(r.join("test.sh")).expect("rm"),
            "test.sh",
        ),
        (
            "gitfile",
            |r| {
                fs::remove_dir_all(r.join(".git")).expect("rm");
                fs::write(r.join(".git"), "gitdir: /etc\n").expect("w");
            },
            "gitfile",
        ),
        (
            "replace ref",
            |r| {
                let head = git(r, &["rev-parse", "HEAD"]);
                fs::create_dir_all(r.join(".git/refs/replace")).expect("mkdir");
                fs::write(r.join(".git/refs/replace").join(&head), format!("{head}\n")).expect("w");
            },
            "replace",
        ),
    ];
    for (what, change, needle) in cases {
        let c = Case::new(BIN);
        let head = committed(&c);
        change(&c.path().join("repo"));
        c.job(&job("repo", Some(&head)));
        let r = c.run();
        assert_eq!(
            (r.code, r.outcome()),
            (1, "refused"),
            "{what}: {}",
            r.dump()
        );
        assert_eq!(
            r.verdict["refusal"]["stage"],
            "commit",
            "{what}: {}",
            r.dump()
        );
        let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(needle), "{what}: {reason}");
        assert!(r.verdict["inputs"]["commit"].is_null(), "{what}");
        assert!(r.verdict["test"].is_null(), "{what}: {}", r.dump());
        c.assert_clean(&r, &[]);
        if what == "untracked" {
            c.job(&job("repo", None));
            let r = c.run();
            assert_eq!(r.outcome(), "tests_passed", "{what}: {}", r.dump());
            assert!(r.verdict["inputs"]["commit"].is_null(), "{}", r.dump());
            assert!(
                r.verdict["findings"].to_string().contains("extra.txt"),
                "{}",
                r.dump()
            );
            c.assert_clean(&r, &[]);
        }
    }
}
