//! Stage 6 starts buildah with the fence's hardening: a task build started by a runner that holds an open
//! root-only file, a host directory and a TCP connection (descriptors 50-52) and has a key in its session
//! keyring (set up by [`WRAP`], as tests/tests/fence_inherit/wrap.py does for the fence) shows a `RUN` step
//! none of them, and a `RUN setsid sleep ... &` step leaves no process and no cgroup behind once `fenced-run` returns.
//!
//! Skips with a printed reason where buildah, docker-registry or root are missing, unless
//! FENCED_RUN_REQUIRE_TASKS=1 (set by .ci/run).

use fenced_run_tests::fence::processes_with;
use fenced_run_tests::task::{skip_reason, Bundle, Registry};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
/// Starts `-- RUNNER ARGS...` holding fd 50 (a root-only file), 51 (a host directory) and 52 (a TCP
/// connection to PORT), in a session keyring of its own with a secret key; prints the key read back
/// afterwards on stderr (`AFTER: own-key=`).
const WRAP: &str = r#"
import ctypes, os, socket, subprocess, sys
port, secret, hostdir, cut = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv.index("--")
cmd = sys.argv[cut + 1:]
libc = ctypes.CDLL(None, use_errno=True)
for fd, path, flags in ((50, secret, os.O_RDONLY), (51, hostdir, os.O_RDONLY | os.O_DIRECTORY)):
    f = os.open(path, flags)
    os.dup2(f, fd)
    os.close(f)
s = socket.create_connection(("127.0.0.1", int(port)))
os.dup2(s.fileno(), 52)
s.close()
# keyctl(JOIN_SESSION_KEYRING, name), add_key("user", desc, data, KEY_SPEC_SESSION_KEYRING)
kr = libc.syscall(250, ctypes.c_long(1), ctypes.c_char_p(b"task-hardening-runner"))
key = libc.syscall(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"fenced-run-secret"),
                   ctypes.c_char_p(b"KEY-SECRET-4411"), ctypes.c_size_t(15), ctypes.c_long(-3))
if kr < 0 or key < 0:
    sys.exit("keyring setup failed: errno %d" % ctypes.get_errno())
r = subprocess.run(cmd, stdout=subprocess.PIPE, pass_fds=(50, 51, 52))
sys.stdout.buffer.write(r.stdout)
buf = ctypes.create_string_buffer(64)
n = libc.syscall(250, ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_size_t(64))
print("AFTER: own-key=%s" % (buf.raw[:n].decode() if n > 0 else "unreadable"), file=sys.stderr)
sys.exit(r.returncode)
"#;
const NONCE: &str = "0123456789abcdef0123456789abcdef";
/// The `sleep` a `RUN` step leaves running in its own session (a number no other test uses).
const SLEEP_MARKER: &str = "sleep 3171";

fn line<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

/// Cgroups of a runner that is gone (`fenced-run-<dead pid>-build-...`), anywhere under /sys/fs/cgroup.
fn stale_build_cgroups(dir: &Path, depth: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.filter_map(Result::ok) {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().to_string();
        if name.contains("-build-") && guest::fence::cgroup::stale_name(&name) {
            out.push(e.path());
        }
        if depth > 0 {
            out.extend(stale_build_cgroups(&e.path(), depth - 1));
        }
    }
    out
}

#[test]
fn a_build_sees_no_inherited_descriptor_or_key_and_leaves_no_process() {
    if skip_reason().is_some() {
        return;
    }
    let reg = Registry::start();
    let b = Bundle::standard(
        "[task]\nname = \"hardening\"\n[environment]\nbuild_timeout_seconds = 600\n\
         [solution]\ncommand = \"sh solution/solve.sh\"\n[test]\ntimeout_seconds = 60\n",
        &format!(
            "FROM base@{}\nRUN echo built > /etc/task-env\n\
             RUN for f in /proc/self/fd/*; do echo \"fd $f -> $(readlink $f)\"; \
                 n=${{f##*/}}; if [ \"$n\" -gt 2 ] && [ -f \"$f\" ]; then cat \"$f\"; fi; \
                 done > /etc/fds.txt 2>&1; \
                 cat /proc/keys > /etc/keys.txt 2>&1; echo \"keys-exit=$?\" >> /etc/keys.txt\n\
             RUN setsid {SLEEP_MARKER} </dev/null >/dev/null 2>&1 & echo started > /etc/sleep.txt\n",
            reg.base_digest
        ),
    );
    b.file("solution/solve.sh", "echo 'echo $(($1 + $2))' > add.sh\n");
    b.file(
        "tests/test.sh",
        "echo '--- fds'; cat /etc/fds.txt; echo '--- keys'; cat /etc/keys.txt; echo '--- sleep'; \
         cat /etc/sleep.txt; echo '1 passed, 0 failed'\n",
    );

    let work = tempfile::tempdir().expect("tempdir");
    let secret = work.path().join("root-only.txt");
    std::fs::write(&secret, "SECRET-FD-7730\n").expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(std::time::Duration::from_secs(900)))
            .expect("timeout");
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    });
    let wrap = work.path().join("wrap.py");
    std::fs::write(&wrap, WRAP).expect("wrapper");
    let out = Command::new("python3")
        .arg(&wrap)
        .arg(port.to_string())
        .arg(&secret)
        .arg("/etc")
        .arg("--")
        .arg(BIN)
        .arg("run")
        .arg(b.path())
        .args(["--isolation", "process", "--json", "--nonce", NONCE])
        .args(reg.args())
        .output()
        .expect("run the wrapper");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no verdict: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    // No process of the build is alive now that fenced-run has returned, and its cgroup is gone.
    let left = processes_with(&[SLEEP_MARKER]);
    assert!(left.is_empty(), "the build left {left:?}\n{v:#}");
    let cgroups = stale_build_cgroups(Path::new("/sys/fs/cgroup"), 6);
    assert!(cgroups.is_empty(), "build cgroups left: {cgroups:?}");

    assert_eq!(v["outcome"], "tests_passed", "{v:#}\n{stderr}");
    let tail = v["output_tail"]["test"].as_str().unwrap_or_default();
    // The probes ran and could have seen something: /proc/self/fd lists the step's own descriptors, and
    // /proc/keys was read; the sleep was started.
    assert!(tail.contains("fd /proc/self/fd/0 -> "), "{tail}");
    assert_eq!(line(tail, "keys-exit="), Some("0"), "{tail}");
    assert_eq!(line(tail, "--- sleep"), Some(""), "{tail}");
    assert!(tail.contains("started"), "{tail}");
    // ... and saw nothing of the runner's.
    for leaked in [
        "SECRET-FD-7730",
        secret.to_string_lossy().as_ref(),
        "socket:",
        "fd /proc/self/fd/50 ",
        "fd /proc/self/fd/51 ",
        "fd /proc/self/fd/52 ",
        "fenced-run-secret",
        "KEY-SECRET-4411",
    ] {
        assert!(!tail.contains(leaked), "a RUN step saw {leaked:?}:\n{tail}");
    }
    assert!(
        !tail.lines().any(|l| l.trim_end().ends_with("-> /etc")),
        "a RUN step saw the runner's /etc descriptor:\n{tail}"
    );
    // The runner's key was there all along (the wrapper reads it back after the run).
    assert_eq!(
        line(&stderr, "AFTER: own-key="),
        Some("KEY-SECRET-4411"),
        "{stderr}"
    );
    drop(reg);
    assert!(
        peer.join().expect("peer").is_empty(),
        "something reached the runner's TCP connection"
    );
}

/// SIGTERM to the runner in the middle of a build: every process of the build (a `RUN` step still running,
/// and one it started in a session of its own) is killed and the build's files are removed before the runner
/// ends by that signal.
#[test]
fn an_interrupted_build_leaves_no_process_and_no_files() {
    if skip_reason().is_some() {
        return;
    }
    let reg = Registry::start();
    let b = Bundle::standard(
        "[environment]\nbuild_timeout_seconds = 600\n",
        &format!(
            "FROM base@{}\nRUN echo built > /etc/task-env\n\
             RUN setsid sleep 3174 </dev/null >/dev/null 2>&1 & sleep 3173\n",
            reg.base_digest
        ),
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(BIN)
        .arg("run")
        .arg(b.path())
        .args(["--isolation", "process", "--json", "--nonce", NONCE])
        .args(reg.args())
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn fenced-run");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !(sleeping("3173") && sleeping("3174")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the RUN step did not start"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "fenced-run ended before the RUN step started"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = child.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "{status:?}");
    let left = processes_with(&["sleep 3173", "sleep 3174"]);
    assert!(left.is_empty(), "the build left {left:?}");
    let files: Vec<_> = walk_names(tmp.path());
    assert!(
        !files.iter().any(|n| n.contains("fenced-run-task-build-")),
        "build files left: {files:?}"
    );
    let cgroups = stale_build_cgroups(Path::new("/sys/fs/cgroup"), 6);
    assert!(cgroups.is_empty(), "build cgroups left: {cgroups:?}");
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.filter_map(Result::ok) {
            out.push(e.file_name().to_string_lossy().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk_names(&e.path()));
            }
        }
    }
    out
}

/// Whether a process whose command line is exactly `sleep SECONDS` exists.
fn sleeping(seconds: &str) -> bool {
    let want = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc").is_ok_and(|rd| {
        rd.filter_map(Result::ok)
            .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
    })
}
