//! Attack suite, nothing of the runner reaches the sandbox: descriptors the runner's parent left open, the
//! runner's session keyring, system calls outside what a test suite needs, environment names and host paths
//! beyond what the operator allows, sockets under a read path, an `open_files` the runner cannot set, and a
//! planted link that would make the stale-run sweep unmount somebody else's file system. Each case runs as
//! root and, where it applies, as an unprivileged runner (`nobody`, started from root by the wrapper).

use fenced_run_tests::fence::{is_root, skip, Case, Ran};
use std::io::Read;
use std::path::{Path, PathBuf};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const WRAP: &str = include_str!("fence_inherit/wrap.py");
const PROBE: &str = include_str!("fence_inherit/probe.py");
const CALLS: &str = include_str!("fence_inherit/calls.py");

/// Writes the wrapper into the case directory and returns `python3 WRAP` plus `opts` and `--`.
fn wrapper(c: &Case, opts: &[String]) -> Vec<String> {
    let w = c.path().join("wrap.py");
    std::fs::write(&w, WRAP).expect("wrapper");
    let mut v = vec!["python3".to_owned(), w.display().to_string()];
    v.extend(opts.iter().cloned());
    v.push("--".into());
    v
}

fn run_wrapped(c: &Case, opts: &[String], extra: &[&str]) -> Ran {
    let w = wrapper(c, opts);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    c.run_via(&w, extra)
}

fn line<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

fn install_tail(r: &Ran) -> &str {
    r.verdict["output_tail"]["install"].as_str().unwrap_or("")
}

/// The phases see only descriptors 0, 1 and 2 although the runner was started holding a root-only file, a
/// directory of the host and a connected TCP socket; nothing written inside reaches the socket's peer.
fn descriptors_case(as_nobody: bool) {
    let c = Case::new(BIN);
    let secret = c.path().join("root-only.txt");
    std::fs::write(&secret, "SECRET-FD-5521\n").expect("secret");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .expect("timeout");
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    });
    c.repo_file("probe.py", PROBE);
    c.job(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"python3 probe.py install\"\n\
         [test]\ncommand = \"python3 probe.py test && echo '1 passed, 0 failed'\"\ntimeout_seconds = 60\n",
    );
    let mut opts = vec![
        "--fds".to_owned(),
        port.to_string(),
        secret.display().to_string(),
        "/etc".to_owned(),
    ];
    if as_nobody {
        opts.push("--as-nobody".into());
        c.give_to(65534);
    }
    // The secret stays root's own (0600 root) even in the nobody case: the wrapper opened it as root.
    std::os::unix::fs::chown(&secret, Some(0), Some(0)).expect("chown secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let r = run_wrapped(&c, &opts, &[]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(
        line(install_tail(&r), "fds-install:"),
        Some("[]"),
        "{}",
        r.dump()
    );
    assert_eq!(line(r.test_tail(), "fds-test:"), Some("[]"), "{}", r.dump());
    assert!(!r.verdict.to_string().contains("SECRET-FD-5521"));
    let got = peer.join().expect("peer");
    assert!(
        got.is_empty(),
        "the socket's peer received {:?}",
        String::from_utf8_lossy(&got)
    );
    c.assert_clean(&r, &[]);
}

#[test]
fn runner_descriptors_reach_neither_phase() {
    if skip() {
        return;
    }
    descriptors_case(false);
}

#[test]
fn runner_descriptors_reach_neither_phase_as_nobody() {
    if skip() || !is_root() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "the nobody variant is started from root",
        );
        return;
    }
    descriptors_case(true);
}

/// A key in the runner's session keyring cannot be read or found from either phase, nothing can be added
/// to any keyring inside, and the runner's key is untouched afterwards.
#[test]
fn runner_keyring_is_out_of_reach_and_nothing_added_remains() {
    if skip() || !is_root() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "as a user the key would be the command's own uid's",
        );
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("probe.py", PROBE);
    c.job(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"python3 probe.py install\"\n\
         [test]\ncommand = \"python3 probe.py test && echo '1 passed, 0 failed'\"\ntimeout_seconds = 60\n",
    );
    let serials = c.path().join("repo/keyring.txt");
    let r = run_wrapped(
        &c,
        &["--keyring".to_owned(), serials.display().to_string()],
        &[],
    );
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    for (phase, tail) in [("install", install_tail(&r)), ("test", r.test_tail())] {
        let read = line(tail, &format!("key-read-{phase}:")).unwrap_or("missing");
        assert!(
            read.starts_with("errno"),
            "{phase}: read {read}\n{}",
            r.dump()
        );
        assert!(!tail.contains("KEY-SECRET-4411"), "{}", r.dump());
        let req = line(tail, &format!("key-request-{phase}:")).unwrap_or("missing");
        assert!(req.starts_with("errno"), "{phase}: request {req}");
        for ring in ["-3", "-4", "-5"] {
            let add = line(tail, &format!("key-add-{phase}-{ring}:")).unwrap_or("missing");
            assert!(add.starts_with("errno"), "{phase}: add to {ring}: {add}");
        }
        assert_eq!(
            line(tail, &format!("proc-keys-{phase}:")),
            Some("secret=False runner-ring=False"),
            "{}",
            r.dump()
        );
    }
    assert_eq!(line(&r.stderr, "AFTER: own-key="), Some("KEY-SECRET-4411"));
    assert_eq!(line(&r.stderr, "AFTER: inside-keys="), Some("0"));
    c.assert_clean(&r, &[]);
}

/// The calls of the filter, as the probe's list: name, number, the flags argument.
fn calls_json() -> String {
    use guest::fence::seccomp::{DENIED_ENOSYS, DENIED_EPERM, DENIED_NEWUSER};
    let mut v: Vec<(String, i64, i64)> = Vec::new();
    for (n, nr, _) in DENIED_EPERM {
        v.push(((*n).into(), *nr, 0));
    }
    for (n, nr) in DENIED_NEWUSER {
        // CLONE_NEWUSER, and SIGCHLD for clone.
        let flags = 0x1000_0000 | if *n == "clone" { 17 } else { 0 };
        v.push(((*n).into(), *nr, flags));
    }
    for (n, nr) in DENIED_ENOSYS {
        v.push(((*n).into(), *nr, 0));
    }
    serde_json::to_string(&v).expect("json")
}

fn denied_calls_case(as_nobody: bool) {
    use guest::fence::seccomp::{DENIED_ENOSYS, DENIED_EPERM, DENIED_NEWUSER};
    let c = Case::new(BIN);
    c.repo_file("calls.py", CALLS);
    c.repo_file("calls.json", &calls_json());
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"python3 calls.py calls.json && echo '1 passed, 0 failed'\"\ntimeout_seconds = 60\n",
    );
    let mut opts = Vec::new();
    if as_nobody {
        opts.push("--as-nobody".to_owned());
        c.give_to(65534);
    }
    let r = run_wrapped(&c, &opts, &[]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let tail = r.test_tail();
    let eperm = format!("errno{}", 1);
    let enosys = format!("errno{}", 38);
    let expect = DENIED_EPERM
        .iter()
        .map(|(n, _, _)| (*n, &eperm))
        .chain(DENIED_NEWUSER.iter().map(|(n, _)| (*n, &eperm)))
        .chain(DENIED_ENOSYS.iter().map(|(n, _)| (*n, &enosys)));
    for (name, errno) in expect {
        assert_eq!(
            line(tail, &format!("call {name} ->")),
            Some(errno.as_str()),
            "{name}\n{}",
            r.dump()
        );
    }
    assert_eq!(line(tail, "ptrace pid1 ->"), Some(eperm.as_str()), "{tail}");
    assert_eq!(
        line(tail, "ordinary:"),
        Some("thread subprocess socket ptrace-own-child"),
        "{}",
        r.dump()
    );
    let sandbox = r.verdict["test"]["sandbox"].to_string();
    assert!(sandbox.contains("seccomp"), "{sandbox}");
    c.assert_clean(&r, &[]);
}

/// Every call the filter denies fails inside with the errno the filter gives, while threads, subprocesses,
/// loopback sockets and ptrace of the command's own child still work; PID 1 cannot be traced. A control run
/// on the host shows that the calls with harmless arguments succeed where nothing filters them.
#[test]
fn denied_calls_fail_inside_and_ordinary_work_runs() {
    if skip() {
        return;
    }
    if cfg!(not(target_arch = "x86_64")) {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Host,
            "the probe's control arguments are written for x86_64",
        );
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("calls.py"), CALLS).expect("w");
    std::fs::write(d.path().join("calls.json"), calls_json()).expect("w");
    let out = std::process::Command::new("python3")
        .arg(d.path().join("calls.py"))
        .arg(d.path().join("calls.json"))
        .arg("control")
        .output()
        .expect("control");
    let control = String::from_utf8_lossy(&out.stdout).to_string();
    for name in ["keyctl", "open_tree"] {
        assert_eq!(
            line(&control, &format!("call {name} ->")),
            Some("ok"),
            "control: {control}"
        );
    }
    denied_calls_case(false);
}

#[test]
fn denied_calls_fail_inside_as_nobody() {
    if skip() || !is_root() || cfg!(not(target_arch = "x86_64")) {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "the nobody variant is started from root (x86_64 probe)",
        );
        return;
    }
    denied_calls_case(true);
}

fn dev_stdout_case(as_nobody: bool) {
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo via-shell-stderr-7731 > /dev/stderr || exit 3\n\
         echo '2 passed, 0 failed' > /dev/stdout || exit 4\n",
    );
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 60\n",
    );
    let mut opts = Vec::new();
    if as_nobody {
        opts.push("--as-nobody".to_owned());
        c.give_to(65534);
    }
    let r = run_wrapped(&c, &opts, &[]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["passed"], 2, "{}", r.dump());
    assert!(
        r.test_tail().contains("via-shell-stderr-7731"),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
}

/// `/dev/stdout` and `/dev/stderr` open for the command: what a script writes there is seen and counted.
#[test]
fn dev_stdout_and_stderr_work_inside() {
    if skip() {
        return;
    }
    dev_stdout_case(false);
}

#[test]
fn dev_stdout_and_stderr_work_inside_as_nobody() {
    if skip() || !is_root() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "the nobody variant is started from root",
        );
        return;
    }
    dev_stdout_case(true);
}

fn assert_refused_at_normalise(r: &Ran, needle: &str) {
    assert_eq!(r.code, 1, "{}", r.dump());
    assert_eq!(r.outcome(), "refused", "{}", r.dump());
    assert_eq!(r.verdict["refusal"]["stage"], "normalise", "{}", r.dump());
    let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains(needle),
        "{needle} in {reason}\n{}",
        r.dump()
    );
    assert!(r.verdict["test"].is_null(), "nothing may run: {}", r.dump());
}

/// An `open_files` above what the runner may set is a stage 4 refusal naming the runner's limit (before,
/// setrlimit failed inside and the verdict said `test_command_unavailable`). As root, the wrapper takes
/// CAP_SYS_RESOURCE away (so the hard limit binds); as nobody, the hard limit binds anyway.
#[test]
fn open_files_above_the_runners_limit_is_refused_at_stage_4() {
    if skip() {
        return;
    }
    for as_nobody in [false, true] {
        if as_nobody && !is_root() {
            continue;
        }
        let c = Case::new(BIN);
        c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
        c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[limits]\nopen_files = 3500\n");
        let mut opts = vec!["--nofile".to_owned(), "3000".to_owned()];
        let mut wrap: Vec<String> = Vec::new();
        if as_nobody {
            opts.push("--as-nobody".into());
            c.give_to(65534);
        } else if is_root() {
            wrap = [
                "setpriv",
                "--bounding-set",
                "-sys_resource",
                "--inh-caps",
                "-all",
            ]
            .map(String::from)
            .to_vec();
        }
        wrap.extend(wrapper(&c, &opts));
        let w: Vec<&str> = wrap.iter().map(String::as_str).collect();
        let r = c.run_via(&w, &[]);
        assert_refused_at_normalise(
            &r,
            "limits.open_files = 3500 is above what this runner may set",
        );
        let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains("RLIMIT_NOFILE (3000"), "{reason}");
        c.assert_clean(&r, &[]);
    }
}

/// A passthrough name the operator does not allow is refused at stage 4, naming it, however it is set in the
/// runner's environment; a name the operator's file allows reaches the command.
#[test]
fn passthrough_beyond_the_operator_allowlist_is_refused() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo \"seen=$FENCE_OK_NAME\"\necho '1 passed, 0 failed'\n",
    );
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[env]\npassthrough = [\"FENCE_RUNNER_TOKEN\"]\n");
    let r = c.run_with(&[], &[("FENCE_RUNNER_TOKEN", "SECRET-ENV-8812")]);
    assert_refused_at_normalise(&r, "`FENCE_RUNNER_TOKEN` is not a name the operator allows");
    assert!(!r.verdict.to_string().contains("SECRET-ENV-8812"));
    c.assert_clean(&r, &[]);

    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo \"seen=$FENCE_OK_NAME\"\necho '1 passed, 0 failed'\n",
    );
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[env]\npassthrough = [\"FENCE_OK_NAME\", \"TERM\"]\n");
    let op = c.operator("[env]\npassthrough = [\"TERM\", \"FENCE_OK_*\"]\n");
    let op = op.display().to_string();
    let r = c.run_with(
        &["--operator-config", &op],
        &[("FENCE_OK_NAME", "value-8813"), ("TERM", "dumb")],
    );
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(line(r.test_tail(), "seen="), Some("value-8813"));
    c.assert_clean(&r, &[]);
}

/// A directory for read paths the loader accepts (see `fenced_run_tests::fence::read_area`).
fn read_area() -> tempfile::TempDir {
    fenced_run_tests::fence::read_area(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// `[sandbox] read` must lie under a path the operator allows; inside, a file keeps the protection of its
/// parents: a 0644 file under a 0700 directory is not readable by the command, one under 0755 parents is.
#[test]
fn read_paths_come_from_the_operator_and_keep_their_parents_modes() {
    if skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let area = read_area();
    let private = area.path().join("private-home");
    let open = area.path().join("open");
    for d in [private.join("tools"), open.join("tools")] {
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("tool.txt"), "TOOL-CONTENT-3301\n").expect("w");
        std::fs::set_permissions(d.join("tool.txt"), PermissionsExt::from_mode(0o644))
            .expect("chmod");
        std::fs::set_permissions(&d, PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    std::fs::set_permissions(&private, PermissionsExt::from_mode(0o700)).expect("chmod");
    std::fs::set_permissions(&open, PermissionsExt::from_mode(0o755)).expect("chmod");

    // Not allowed by the (default) operator configuration: refused at stage 4, naming the path.
    let c = Case::new(BIN);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    let job = format!(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[sandbox]\nread = [\"{}\", \"{}\"]\n",
        private.join("tools").display(),
        open.join("tools").display()
    );
    c.job(&job);
    let r = c.run();
    assert_refused_at_normalise(
        &r,
        &format!(
            "`{}` is not at or under a path the operator allows",
            private.join("tools").display()
        ),
    );
    c.assert_clean(&r, &[]);

    // Allowed: both shown, and the file under the 0700 parent stays unreadable to the command (as root the
    // command is uid 65534; the parent is root's own 0700).
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        &format!(
            "cat {p}/tool.txt >/dev/null 2>&1 && echo private=readable || echo private=denied\n\
             cat {o}/tool.txt >/dev/null 2>&1 && echo open=readable || echo open=denied\n\
             echo '1 passed, 0 failed'\n",
            p = private.join("tools").display(),
            o = open.join("tools").display()
        ),
    );
    c.job(&job);
    let op = c.operator(&format!(
        "[sandbox]\nread = [\"{}\"]\n",
        area.path().display()
    ));
    let op = op.display().to_string();
    let r = c.run_with(&["--operator-config", &op], &[]);
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert_eq!(
        line(r.test_tail(), "open="),
        Some("readable"),
        "{}",
        r.dump()
    );
    if is_root() {
        assert_eq!(
            line(r.test_tail(), "private="),
            Some("denied"),
            "{}",
            r.dump()
        );
    }
    c.assert_clean(&r, &[]);
}

/// A read path holding a Unix socket or a FIFO (anywhere below it) is refused before anything runs.
#[test]
fn read_path_holding_a_socket_or_fifo_is_refused() {
    if skip() {
        return;
    }
    let area = read_area();
    let with_socket = area.path().join("with-socket/deep");
    std::fs::create_dir_all(&with_socket).expect("mkdir");
    let _listener =
        std::os::unix::net::UnixListener::bind(with_socket.join("agent")).expect("bind socket");
    let with_fifo = area.path().join("with-fifo");
    std::fs::create_dir_all(&with_fifo).expect("mkdir");
    let st = std::process::Command::new("mkfifo")
        .arg(with_fifo.join("pipe"))
        .status()
        .expect("mkfifo");
    assert!(st.success());
    for (dir, kind) in [
        (area.path().join("with-socket"), "Unix socket"),
        (with_fifo, "FIFO"),
    ] {
        let c = Case::new(BIN);
        c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
        c.job(&format!(
            "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n[sandbox]\nread = [\"{}\"]\n",
            dir.display()
        ));
        let op = c.operator(&format!(
            "[sandbox]\nread = [\"{}\"]\n",
            area.path().display()
        ));
        let op = op.display().to_string();
        let r = c.run_with(&["--operator-config", &op], &[]);
        assert_eq!(r.outcome(), "refused", "{}", r.dump());
        assert_eq!(r.verdict["refusal"]["stage"], "sandbox", "{}", r.dump());
        let reason = r.verdict["refusal"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(kind), "{kind} in {reason}");
        assert!(r.verdict["test"].is_null(), "{}", r.dump());
        c.assert_clean(&r, &[]);
    }
}

fn mounted_at(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    guest::fence::rundir::parse_mountinfo(&info)
        .iter()
        .any(|m| m.point == p)
}

/// A dead run's directory whose `fs` is a link to another mount (planted both where the runs' parent is and
/// directly in TMPDIR, where the sweep used to look): the run sweeps the stale directory and the other
/// mount survives with its files.
#[test]
fn the_sweep_never_follows_a_planted_link() {
    if skip() || !is_root() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Root,
            "mounting the victim file system needs root",
        );
        return;
    }
    let c = Case::new(BIN);
    let victim = c.path().join("victim");
    std::fs::create_dir(&victim).expect("mkdir");
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "fenced-run"])
        .arg(&victim)
        .status()
        .expect("mount");
    assert!(st.success(), "mount the victim");
    let victim = std::fs::canonicalize(&victim).expect("canon");
    std::fs::write(victim.join("keep.txt"), "VICTIM-6610").expect("w");
    // A pid that cannot exist (above pid_max's ceiling) names the dead runner.
    let dead = "fenced-run-4999999-planted";
    let parent = c.tmp().join(guest::fence::rundir::RUNS_DIR);
    std::fs::DirBuilder::new().create(&parent).expect("parent");
    std::fs::set_permissions(&parent, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let planted: Vec<PathBuf> = vec![parent.join(dead), c.tmp().join(dead)];
    for p in &planted {
        std::fs::create_dir(p).expect("mkdir");
        std::os::unix::fs::symlink(&victim, p.join("fs")).expect("link");
    }
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let r = c.run();
    let survived = mounted_at(&victim);
    let kept = std::fs::read_to_string(victim.join("keep.txt")).unwrap_or_default();
    let _ = std::process::Command::new("umount").arg(&victim).status();
    let _ = std::fs::remove_dir_all(c.tmp().join(dead));
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert!(survived, "the victim mount was unmounted by the sweep");
    assert_eq!(kept, "VICTIM-6610");
    assert!(
        !parent.join(dead).exists(),
        "the stale run directory (a link inside) was swept"
    );
    c.assert_clean(&r, &[]);
}
