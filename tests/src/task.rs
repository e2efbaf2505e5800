//! Task bundles in tests: a local OCI registry (Debian's `docker-registry`) on loopback, a base image built
//! here from a busybox tree (nothing pulled from anywhere), and a writer for bundles.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the busybox binary the base image holds is looked for.
const BUSYBOX: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// `Some(reason)` (after a `tasks` skip: `attestation::vectors::skip_for`) when stage 6 cannot be tested here;
/// with `FENCED_RUN_REQUIRE_TASKS=1` that is a failure.
pub fn skip_reason() -> Option<String> {
    let why = if !nix::unistd::geteuid().is_root() {
        Some("not root (stage 6 maps the build's ids and makes its network namespace)".to_owned())
    } else if let Some(t) = [
        "buildah",
        "docker-registry",
        "unshare",
        "nsenter",
        "mkfs.erofs",
        "veritysetup",
    ]
    .into_iter()
    .find(|t| !on_path(t) && !Path::new("/usr/sbin").join(t).is_file())
    {
        Some(format!(
            "{t} is not installed (.ci/run installs buildah, docker-registry, erofs-utils, cryptsetup-bin)"
        ))
    } else if !BUSYBOX.iter().any(|b| Path::new(b).is_file()) {
        Some("no static busybox for the test's base image (busybox-static)".to_owned())
    } else {
        crate::fence::skip_reason()
    };
    if let Some(w) = &why {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Tasks,
            &format!("task bundles cannot be tested: {w}"),
        );
    }
    why
}

/// A `docker-registry` on 127.0.0.1, its storage in a temporary directory; stopped on drop.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: SocketAddr,
    /// The image the test pushed: `sha256:...` of `base`.
    pub base_digest: String,
    _dir: tempfile::TempDir,
}

fn buildah(dir: &Path) -> Command {
    let mut c = Command::new("buildah");
    c.arg(format!("--root={}", dir.join("storage").display()))
        .arg(format!("--runroot={}", dir.join("runroot").display()))
        .arg("--storage-driver=vfs")
        .arg(format!(
            "--registries-conf-dir={}",
            dir.join("registries.d").display()
        ))
        .env("HOME", dir)
        .env("XDG_RUNTIME_DIR", dir);
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.stdin(Stdio::null()).output().expect("run a command");
    assert!(
        out.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl Registry {
    /// Starts the registry and pushes `base`: a busybox tree (`/bin/sh` and a few applets) made here.
    pub fn start() -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("fenced-run-test-registry-")
            .tempdir()
            .expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("registry config");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let mut reg = Registry {
            child,
            addr,
            base_digest: String::new(),
            _dir: dir,
        };
        // Ready when it accepts a connection (bounded).
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        reg.base_digest = reg.push_base();
        reg
    }

    fn push_base(&self) -> String {
        let dir = self._dir.path().join("build");
        let tree = dir.join("rootfs");
        for d in ["bin", "etc", "usr/bin", "tmp"] {
            std::fs::create_dir_all(tree.join(d)).expect("mkdir");
        }
        let busybox = BUSYBOX
            .iter()
            .find(|b| Path::new(b).is_file())
            .expect("busybox");
        std::fs::copy(busybox, tree.join("bin/busybox")).expect("copy busybox");
        for applet in [
            "sh", "cat", "echo", "test", "[", "printf", "mkdir", "rm", "cp", "wget", "grep", "ls",
            "id", "readlink", "setsid", "sleep",
        ] {
            std::os::unix::fs::symlink("busybox", tree.join("bin").join(applet)).expect("applet");
        }
        std::fs::write(tree.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
        std::fs::create_dir_all(dir.join("registries.d")).expect("mkdir");
        let c = ok(buildah(&dir).args(["from", "scratch"]));
        ok(buildah(&dir)
            .args(["copy", &c])
            .arg(format!("{}/", tree.display()))
            .arg("/"));
        ok(buildah(&dir).args(["commit", "-q", &c, "fenced-run-test-base"]));
        let digest_file = dir.join("digest");
        ok(buildah(&dir)
            .args(["push", "--tls-verify=false", "--digestfile"])
            .arg(&digest_file)
            .arg("fenced-run-test-base")
            .arg(format!("docker://{}/base:1", self.addr)));
        let d = std::fs::read_to_string(&digest_file).expect("digest");
        let _ = buildah(&dir).args(["rm", &c]).output();
        d.trim().to_owned()
    }

    /// `--registry ADDR --registry-plain-http`.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--registry".into(),
            self.addr.to_string(),
            "--registry-plain-http".into(),
        ]
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A task bundle in a temporary directory, written file by file.
pub struct Bundle {
    dir: tempfile::TempDir,
}

impl Bundle {
    /// An empty bundle directory.
    pub fn new() -> Bundle {
        Bundle {
            dir: tempfile::Builder::new()
                .prefix("fenced-run-test-task-")
                .tempdir()
                .expect("tempdir"),
        }
    }

    /// The bundle's root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `rel` (parents made) with `text`.
    pub fn file(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    /// The four required files with `task_toml` and `dockerfile` (at `environment/Dockerfile`), a buggy
    /// `workspace/add.sh`, and a `tests/test.sh` that needs `add.sh 2 3` to print 5 and the image's
    /// `/etc/task-env` to exist.
    pub fn standard(task_toml: &str, dockerfile: &str) -> Bundle {
        let b = Bundle::new();
        b.file(
            "instruction.md",
            "Make `sh add.sh A B` print the sum of A and B.\n",
        );
        b.file("task.toml", task_toml);
        b.file("environment/Dockerfile", dockerfile);
        b.file("workspace/add.sh", "echo $(($1 - $2))\n");
        b.file(
            "tests/test.sh",
            "test -f /etc/task-env || { echo 'the environment image is not the root'; echo '0 passed, 1 failed'; exit 1; }\n\
             r=$(sh add.sh 2 3)\n\
             if [ \"$r\" = 5 ]; then echo '1 passed, 0 failed'; exit 0; fi\n\
             echo \"add.sh 2 3 printed $r\"; echo '0 passed, 1 failed'; exit 1\n",
        );
        b
    }
}

impl Default for Bundle {
    fn default() -> Self {
        Bundle::new()
    }
}
