//! The `vm` tier end to end: `fenced-run image build` (reproducible), a QEMU boot of the image, the demo job
//! through the job channel, evidence checked by `verify-attestation evidence --allow-simulated --measurement`
//! with the manifest's measurement; a changed initramfs, a guest that never answers, garbage on the channel and a
//! truncated bundle. Every boot is bounded; after each run no QEMU process and no VM directory is left.
//!
//! Skips with a printed reason where QEMU or the kernel (.ci/run) is missing, unless FENCED_RUN_REQUIRE_VM=1.

use host::image::{self, Manifest};
use host::vm::{self, Fault, VmOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
use fenced_run_tests::vm::NONCE;

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/demo")
}

/// `Some(reason)` when the vm tier cannot run here (said on stderr and counted; a failure where it is required).
fn missing() -> Option<String> {
    fenced_run_tests::vm::missing(&[])
}

fn build_image(out: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["image", "build", "--out"])
        .arg(out)
        .output()
        .expect("run fenced-run image build")
}

/// The image every boot test uses, built once per test binary under CARGO_TARGET_TMPDIR.
fn shared_image() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image");
        let o = build_image(&out);
        assert!(
            o.status.success(),
            "image build: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

/// A fresh parent for VM directories; after a run it must be empty and no process may name it.
struct Work(tempfile::TempDir);

impl Work {
    fn new() -> Work {
        Work(
            tempfile::Builder::new()
                .prefix("vm-tier-test-")
                .tempdir()
                .expect("tmp"),
        )
    }

    fn options(&self, image: &Path) -> VmOptions {
        let mut o = VmOptions::new(image.to_path_buf());
        o.work_parent = Some(self.0.path().to_path_buf());
        o.timeouts.boot = Duration::from_secs(120);
        o.timeouts.test = Duration::from_secs(240);
        o
    }

    fn assert_clean(&self) {
        let left: Vec<_> = std::fs::read_dir(self.0.path()).expect("read").collect();
        assert!(left.is_empty(), "VM files left behind: {left:?}");
        let needle = self.0.path().to_string_lossy().into_owned();
        for p in std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(Result::ok)
        {
            let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&cmd).contains(&needle),
                "a process still names {needle}: {}",
                String::from_utf8_lossy(&cmd)
            );
        }
    }
}

fn verify(evidence: &Path, measurement: &str) -> std::process::Output {
    fenced_run_tests::vm::verify_sim(VERIFY, evidence, measurement)
}

fn run_cli(job: &Path, image: &Path, evidence: &Path) -> std::process::Output {
    Command::new(BIN)
        .args([
            "run",
            "--isolation",
            "vm",
            "--json",
            "--nonce",
            NONCE,
            "--image",
        ])
        .arg(image)
        .arg("--evidence")
        .arg(evidence)
        .arg(job)
        .output()
        .expect("run fenced-run run")
}

fn outcome_of(stdout: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(stdout)));
    v["outcome"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn image_build_is_reproducible_and_its_manifest_matches_its_files() {
    if missing().is_some() {
        return;
    }
    let a = shared_image();
    let other = tempfile::tempdir().expect("tmp");
    let b = other.path().join("elsewhere/image");
    let o = build_image(&b);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        image::KERNEL_FILE,
        image::VM_KERNEL_FILE,
        image::INITRAMFS_FILE,
        image::MANIFEST_FILE,
    ] {
        let (x, y) = (
            std::fs::read(a.join(f)).expect("a"),
            std::fs::read(b.join(f)).expect("b"),
        );
        assert!(x == y, "{f} differs between two builds");
    }
    let m = Manifest::load(a).expect("manifest");
    // Debian's kernel has a PVH entry: the vm tier boots its decompressed payload, and the measurement covers it.
    let vm_kernel = m.vm_kernel.as_ref().expect("a PVH kernel for the vm tier");
    let k = std::fs::read(a.join(image::VM_KERNEL_FILE)).expect("vm kernel");
    assert_eq!(
        vm_kernel.sha256,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&k))
    );
    assert_eq!(
        image::pvh::extract(&std::fs::read(a.join(image::KERNEL_FILE)).expect("kernel")),
        Ok(k.clone())
    );
    let i = std::fs::read(a.join(image::INITRAMFS_FILE)).expect("initramfs");
    let want = measurements::sim::vm_launch_measurement(&k, &i, &m.cmdline.value);
    assert_eq!(m.measurements.vm, hex::encode(want));
    assert!(i.starts_with(b"070701"), "newc");
    // The agent embeds no path of the machine that built it (Rust and C alike), so an auditor's rebuild elsewhere
    // gives the same bytes.
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))
        .expect("a cargo home");
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in [home, workspace] {
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let needle = format!("{}/", dir.display());
        assert!(
            !i.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "the initramfs embeds the build path {needle}"
        );
    }
    // One byte of the initramfs changed: another measurement.
    let mut j = i.clone();
    let at = j.len() / 2;
    j[at] ^= 1;
    assert_ne!(
        measurements::sim::vm_launch_measurement(&k, &j, &m.cmdline.value),
        want
    );
}

#[test]
fn demo_in_the_vm_gives_verified_evidence_pass_and_fail_and_a_changed_initramfs_fails_the_pin() {
    if missing().is_some() {
        return;
    }
    let image = shared_image();
    let m = Manifest::load(image).expect("manifest");
    let t = tempfile::tempdir().expect("tmp");

    // Passing: the demo with its fix.
    let ev = t.path().join("pass.evidence");
    let started = Instant::now();
    let o = run_cli(&demo_dir(), image, &ev);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(outcome_of(&o.stdout), "tests_passed");
    eprintln!("vm demo run took {:.1} s", started.elapsed().as_secs_f64());
    let v = verify(&ev, &m.measurements.vm);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    let out: serde_json::Value = serde_json::from_slice(&v.stdout).expect("verify json");
    assert_eq!(out["verdict"]["outcome"], "tests_passed", "{out}");
    assert_eq!(out["verdict"]["isolation"], "vm", "{out}");
    // Pinned to another measurement, the same evidence is rejected.
    let mut other = m.measurements.vm.clone().into_bytes();
    other[0] = if other[0] == b'0' { b'1' } else { b'0' };
    let v = verify(&ev, std::str::from_utf8(&other).expect("hex"));
    assert_eq!(
        v.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );

    // Failing: the demo without its patch.
    let bundle = t.path().join("nofix");
    std::fs::create_dir_all(&bundle).expect("dir");
    let job = std::fs::read_to_string(demo_dir().join("job.toml")).expect("job");
    std::fs::write(
        bundle.join("job.toml"),
        job.replace("patch = \"fix.patch\"\n", ""),
    )
    .expect("job");
    copy_dir(&demo_dir().join("repo"), &bundle.join("repo"));
    let ev2 = t.path().join("fail.evidence");
    let o = run_cli(&bundle, image, &ev2);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(outcome_of(&o.stdout), "tests_failed");
    let v = verify(&ev2, &m.measurements.vm);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    let out: serde_json::Value = serde_json::from_slice(&v.stdout).expect("verify json");
    assert_eq!(out["verdict"]["outcome"], "tests_failed", "{out}");

    // One byte of the initramfs changed (inside /etc/group, so it still boots): the sim PSP signs the
    // measurement of what was launched, which is not the manifest's, and the pinned check fails.
    let bad = t.path().join("tampered");
    std::fs::create_dir_all(&bad).expect("dir");
    for f in [
        image::KERNEL_FILE,
        image::VM_KERNEL_FILE,
        image::INITRAMFS_FILE,
        image::MANIFEST_FILE,
    ] {
        std::fs::copy(image.join(f), bad.join(f)).expect("copy");
    }
    let mut i = std::fs::read(bad.join(image::INITRAMFS_FILE)).expect("initramfs");
    let at = i
        .windows(7)
        .position(|w| w == b"nogroup")
        .expect("nogroup in /etc/group")
        + 6;
    i[at] = b'q';
    std::fs::write(bad.join(image::INITRAMFS_FILE), &i).expect("write");
    let ev3 = t.path().join("tampered.evidence");
    let o = run_cli(&demo_dir(), &bad, &ev3);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = verify(&ev3, &m.measurements.vm);
    assert_eq!(
        v.status.code(),
        Some(1),
        "tampered image accepted: {}",
        String::from_utf8_lossy(&v.stdout)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from)
        .expect("read")
        .filter_map(Result::ok)
    {
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

fn demo_bundle() -> (guest::channel::BundleKind, Vec<u8>) {
    vm::bundle::pack(&demo_dir()).expect("pack demo")
}

#[test]
fn a_guest_that_never_answers_ends_in_a_clear_error_within_its_budget() {
    if missing().is_some() {
        return;
    }
    // An image whose /init is a shell that sleeps: the kernel boots, nothing ever opens the channel.
    let t = tempfile::tempdir().expect("tmp");
    let mut tree = image::cpio::Tree::new();
    tree.add("dev/console", image::cpio::Entry::CharDev(5, 1));
    tree.add(
        "bin/busybox",
        image::cpio::Entry::File(std::fs::read("/bin/busybox").expect("busybox"), true),
    );
    tree.add("bin/sh", image::cpio::Entry::Symlink("busybox".into()));
    tree.add("bin/sleep", image::cpio::Entry::Symlink("busybox".into()));
    tree.add(
        "init",
        image::cpio::Entry::File(
            b"#!/bin/sh\necho silent init\nexec sleep 600\n".to_vec(),
            true,
        ),
    );
    let mut cpio = Vec::new();
    tree.write(&mut cpio).expect("cpio");
    let img = t.path().join("silent");
    std::fs::create_dir_all(&img).expect("dir");
    for f in [image::KERNEL_FILE, image::VM_KERNEL_FILE] {
        std::fs::copy(shared_image().join(f), img.join(f)).expect("kernel");
    }
    std::fs::write(img.join(image::INITRAMFS_FILE), &cpio).expect("initramfs");
    let mut m = Manifest::load(shared_image()).expect("manifest");
    m.initramfs.sha256.clear();
    std::fs::write(
        img.join(image::MANIFEST_FILE),
        serde_json::to_vec(&m).expect("json"),
    )
    .expect("manifest");

    let w = Work::new();
    let mut o = w.options(&img);
    o.timeouts.boot = Duration::from_secs(25);
    let (kind, bytes) = demo_bundle();
    let start = Instant::now();
    let err = vm::run(kind, &bytes, &hex::decode(NONCE).expect("hex"), &o).expect_err("must fail");
    eprintln!("host error: {err}");
    assert!(matches!(err, vm::VmError::Timeout(_)), "{err:?}");
    let err = err.to_string();
    let took = start.elapsed();
    assert!(
        err.contains("the agent's hello did not arrive from the guest within 25 s"),
        "{err}"
    );
    assert!(
        err.contains("silent init"),
        "the console tail is in the error: {err}"
    );
    assert!(took < Duration::from_secs(40), "took {took:?}");
    w.assert_clean();
}

#[test]
fn garbage_instead_of_the_job_header_ends_in_the_agents_named_failure() {
    if missing().is_some() {
        return;
    }
    let w = Work::new();
    let mut o = w.options(shared_image());
    o.fault = Fault::GarbageHeader;
    let (kind, bytes) = demo_bundle();
    let err = vm::run(kind, &bytes, &hex::decode(NONCE).expect("hex"), &o).expect_err("must fail");
    eprintln!("host error: {err}");
    assert!(matches!(err, vm::VmError::Guest(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains(
            "the guest agent could not produce evidence: job header: unknown frame type 0x42"
        ),
        "{err}"
    );
    w.assert_clean();
}

#[test]
fn a_truncated_bundle_ends_in_a_clear_host_error() {
    if missing().is_some() {
        return;
    }
    let w = Work::new();
    let mut o = w.options(shared_image());
    o.fault = Fault::TruncatedBundle;
    o.timeouts.intake = Duration::from_secs(30);
    o.timeouts.test = Duration::from_secs(30);
    let (kind, bytes) = demo_bundle();
    let start = Instant::now();
    let err = vm::run(kind, &bytes, &hex::decode(NONCE).expect("hex"), &o)
        .expect_err("must fail")
        .to_string();
    eprintln!("host error: {err}");
    assert!(
        err.contains("job channel") || err.contains("QEMU exited"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(200),
        "{:?}",
        start.elapsed()
    );
    w.assert_clean();
}

/// A bundle directory under `parent`: `job.toml`, and `repo/` with `files`.
fn bundle(parent: &Path, name: &str, job: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(dir.join("repo")).expect("mkdir");
    std::fs::write(dir.join("job.toml"), job).expect("job");
    for (rel, text) in files {
        let p = dir.join("repo").join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
    }
    dir
}

/// A job whose test phase never ends by itself (5 s budget).
fn hanging_job(parent: &Path) -> PathBuf {
    bundle(
        parent,
        "hang",
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh t.sh\"\ntimeout_seconds = 5\n",
        &[("t.sh", "echo started\nsleep 600\n")],
    )
}

#[test]
fn ctrl_c_during_the_test_phase_kills_the_vm_and_removes_its_files() {
    if missing().is_some() {
        return;
    }
    let image = shared_image();
    let w = Work::new();
    let jobs = tempfile::tempdir().expect("tmp");
    let job = hanging_job(jobs.path());
    let mut child = Command::new(BIN)
        .args(["run", "--isolation", "vm", "--progress", "json", "--image"])
        .arg(image)
        .arg(&job)
        .env("TMPDIR", w.0.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Read the progress lines as they come; interrupt once the test phase has started in the guest.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(l) => {
                let v: serde_json::Value = match serde_json::from_str(&l) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                if v["step"] == "test" && v["event"] == "start" {
                    break;
                }
            }
            Err(_) => {
                assert!(Instant::now() < deadline, "the test phase never started");
                assert!(
                    child.try_wait().expect("wait").is_none(),
                    "fenced-run ended early"
                );
            }
        }
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let stopped = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(15),
            "fenced-run did not stop after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = reader.join().expect("reader");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("interrupted; the VM was killed"), "{err}");
    // The progress stream names every step up to the test phase, each as one JSON object.
    let steps: Vec<String> = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "start")
        .map(|v| v["step"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(steps, ["boot", "attest", "transfer", "test"], "{err}");
    assert!(err.contains(r#""event":"failed""#), "{err}");
    w.assert_clean();
}

/// A loopback HTTP server; returns its port and the request lines it saw.
fn registry(body: &'static str) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let mut r = std::io::BufReader::new(c);
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
            }
            s2.lock().expect("lock").push(first.trim().to_owned());
            let mut c = r.into_inner();
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

#[test]
fn the_install_phase_reaches_an_allowlisted_server_through_the_host_dialer_and_the_test_phase_has_no_network(
) {
    if missing().is_some() {
        return;
    }
    let image = shared_image();
    let (port, seen) = registry("vm-net-body-7731");
    let jobs = tempfile::tempdir().expect("tmp");
    let job = format!(
        "[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\n\
         allow = [\"registry.example:{port}\"]\ntimeout_seconds = 60\n\
         [test]\ncommand = \"sh t.sh\"\ntimeout_seconds = 60\n"
    );
    let install = format!(
        "wget -q -O dl.txt http://registry.example:{port}/pkg; echo allowed=$?\n\
         wget -q -O - http://denied.example:{port}/x; echo denied=$?\n"
    );
    let test = format!(
        "p=0; f=0\n\
         if grep -q vm-net-body-7731 dl.txt; then p=$((p+1)); else f=$((f+1)); fi\n\
         if wget -q -T 3 -O /dev/null http://registry.example:{port}/again; then f=$((f+1)); else p=$((p+1)); fi\n\
         if wget -q -T 3 -O /dev/null http://10.0.2.100:3128/; then f=$((f+1)); else p=$((p+1)); fi\n\
         echo \"$p passed, $f failed\"\n[ $f -eq 0 ]\n"
    );
    let dir = bundle(
        jobs.path(),
        "net",
        &job,
        &[("install.sh", &install), ("t.sh", &test)],
    );
    let w = Work::new();
    let ev = jobs.path().join("net.evidence");
    let o = Command::new(BIN)
        .args([
            "run",
            "--isolation",
            "vm",
            "--json",
            "--progress",
            "json",
            "--nonce",
            NONCE,
            "--test-dialer-map",
            &format!("registry.example:{port}=127.0.0.1:{port}"),
            "--image",
        ])
        .arg(image)
        .arg("--evidence")
        .arg(&ev)
        .arg(&dir)
        .env("TMPDIR", w.0.path())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{err}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(v["outcome"], "tests_passed", "{v}\n{err}");
    assert_eq!(v["tests"]["passed"], 3, "{v}");
    let install_out = v["output_tail"]["install"].as_str().unwrap_or_default();
    assert!(install_out.contains("allowed=0"), "{install_out}");
    assert!(!install_out.contains("denied=0"), "{install_out}");
    let egress = v["install"]["egress"].as_array().expect("egress log");
    let allowed: Vec<_> = egress
        .iter()
        .filter(|e| e["host"] == "registry.example")
        .collect();
    assert_eq!(allowed.len(), 1, "{egress:?}");
    assert_eq!(allowed[0]["allowed"], true);
    assert!(
        allowed[0]["bytes_down"].as_u64().unwrap_or(0) > 0,
        "{egress:?}"
    );
    assert!(
        allowed[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("the host dialer, which connected to 127.0.0.1"),
        "{egress:?}"
    );
    let denied: Vec<_> = egress
        .iter()
        .filter(|e| e["host"] == "denied.example")
        .collect();
    assert_eq!(denied.len(), 1, "{egress:?}");
    assert_eq!(denied[0]["allowed"], false);
    assert!(
        denied[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not in the allowlist"),
        "{egress:?}"
    );
    // The guest's cut left no complaint, and the host dialer saw exactly the one allowed connection.
    let findings = v["findings"].as_array().cloned().unwrap_or_default();
    assert!(
        !findings.iter().any(|f| f["kind"] == "network"),
        "{findings:?}"
    );
    assert!(
        err.contains(&format!("host dialer connect registry.example:{port}")),
        "{err}"
    );
    assert!(!err.contains("denied.example"), "{err}");
    // At the cut the host removed QEMU's user network itself (QMP netdev_del), beside the guest's own cut.
    assert!(
        err.contains("host cut: QEMU's install network removed (QMP netdev_del net0)"),
        "{err}"
    );
    assert_eq!(
        *seen.lock().expect("lock"),
        vec!["GET /pkg HTTP/1.1".to_string()]
    );
    let steps: Vec<String> = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "done")
        .map(|v| v["step"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        steps,
        ["boot", "attest", "transfer", "intake", "install", "cut", "test", "shutdown"],
        "{err}"
    );
    w.assert_clean();
}

/// Runs `job` in `tier` through the CLI; returns (outcome, counts).
fn outcome_and_counts(tier: &str, job: &Path, work: &Path) -> (String, serde_json::Value) {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--isolation", tier, "--json"]);
    if tier == "vm" {
        cmd.arg("--image").arg(shared_image());
    }
    let o = cmd.arg(job).env("TMPDIR", work).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{tier} {}: {e}\n{}\n{}",
            job.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (
        v["outcome"].as_str().unwrap_or_default().to_owned(),
        v["tests"].clone(),
    )
}

#[test]
fn the_process_and_vm_tiers_give_the_same_outcomes_and_counts() {
    if missing().is_some() {
        return;
    }
    let jobs = tempfile::tempdir().expect("tmp");
    let nofix = jobs.path().join("nofix");
    std::fs::create_dir_all(&nofix).expect("dir");
    let demo_job = std::fs::read_to_string(demo_dir().join("job.toml")).expect("job");
    std::fs::write(
        nofix.join("job.toml"),
        demo_job.replace("patch = \"fix.patch\"\n", ""),
    )
    .expect("job");
    copy_dir(&demo_dir().join("repo"), &nofix.join("repo"));
    let memory = bundle(
        jobs.path(),
        "memory",
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh t.sh\"\ntimeout_seconds = 60\n\
         [limits]\nmemory_mib = 64\npids = 64\ndisk_mib = 16\n",
        &[(
            "t.sh",
            "x=$(yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 400000000)\necho \"1 passed, 0 failed\"\n",
        )],
    );
    let cases = [
        ("pass", demo_dir(), "tests_passed"),
        ("fail", nofix, "tests_failed"),
        ("hang", hanging_job(jobs.path()), "budget_expired"),
        ("memory", memory, "environment_exhausted"),
    ];
    let w = Work::new();
    // Two VMs at a time (two TCG guests share the two cores in the time of one).
    let vm: Vec<(String, serde_json::Value)> = std::thread::scope(|s| {
        let mut out = Vec::new();
        for pair in cases.chunks(2) {
            let hs: Vec<_> = pair
                .iter()
                .map(|(_, job, _)| s.spawn(|| outcome_and_counts("vm", job, w.0.path())))
                .collect();
            out.extend(hs.into_iter().map(|h| h.join().expect("vm run")));
        }
        out
    });
    for ((name, job, want), vm) in cases.iter().zip(vm) {
        let process = outcome_and_counts("process", job, w.0.path());
        eprintln!("{name}: process {process:?}, vm {vm:?}");
        assert_eq!(process.0, *want, "{name} in the process tier");
        assert_eq!(
            vm, process,
            "{name}: the vm tier differs from the process tier"
        );
    }
    w.assert_clean();
}

#[test]
fn operator_config_in_the_vm_tier_is_refused_with_a_clear_error() {
    let t = tempfile::tempdir().expect("tmp");
    let cfg = t.path().join("operator.toml");
    std::fs::write(&cfg, "[env]\npassthrough = [\"TERM\"]\n").expect("cfg");
    let o = Command::new(BIN)
        .args(["run", "--isolation", "vm", "--operator-config"])
        .arg(&cfg)
        .arg(demo_dir())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--operator-config") && err.contains("cannot apply there"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn an_operator_config_with_only_egress_is_taken_by_the_vm_tier() {
    // Accepted (its settings go to the host dialer and the guest); this run then stops at the missing image,
    // before anything boots. A range over loopback in the same table is refused, naming the entry.
    let t = tempfile::tempdir().expect("tmp");
    let cfg = t.path().join("operator.toml");
    let run = |text: &str| {
        std::fs::write(&cfg, text).expect("cfg");
        let o = Command::new(BIN)
            .args(["run", "--isolation", "vm", "--operator-config"])
            .arg(&cfg)
            .arg("--image")
            .arg(t.path())
            .arg(demo_dir())
            .output()
            .expect("run");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run("[egress]\nallow_networks = [\"10.20.0.0/16\", \"127.0.0.1/32\"]\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no guest image there"), "{err}");
    assert!(!err.contains("cannot apply there"), "{err}");
    let (code, err) = run("[egress]\nallow_networks = [\"127.0.0.0/8\"]\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("egress.allow_networks: `127.0.0.0/8`"),
        "{err}"
    );
}

#[test]
fn manifest_snp_digests_equal_sev_snp_measure_for_the_same_image() {
    // The shared firmware and the oracle venv from FENCED_RUN_SHARED / FENCED_RUN_VECTORS and
    // FENCED_RUN_ORACLE_VENV (a clone anywhere finds them), else beside the checkout.
    let ovmf = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
    let oracle = attestation::vectors::oracle_venv().join("bin/sev-snp-measure");
    if !ovmf.is_file() || !oracle.is_file() {
        if std::env::var_os("FENCED_RUN_REQUIRE_VM").is_some_and(|v| v == "1") {
            panic!(
                "FENCED_RUN_REQUIRE_VM=1 but {} or {} is missing",
                ovmf.display(),
                oracle.display()
            );
        }
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vm,
            "the shared AmdSev OVMF or the sev-snp-measure venv (.ci/run) is missing",
        );
        return;
    }
    if missing().is_some() {
        return;
    }
    let t = tempfile::tempdir().expect("tmp");
    let out = t.path().join("image");
    let o = Command::new(BIN)
        .args(["image", "build", "--out"])
        .arg(&out)
        .arg("--ovmf")
        .arg(&ovmf)
        .output()
        .expect("image build");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = Manifest::load(&out).expect("manifest");
    assert_eq!(
        m.measurements
            .sev_snp
            .iter()
            .map(|s| s.vcpus)
            .collect::<Vec<_>>(),
        image::SNP_VCPUS
    );
    for s in &m.measurements.sev_snp {
        let r = Command::new(&oracle)
            .args([
                "--mode",
                "snp",
                "--vcpus",
                &s.vcpus.to_string(),
                "--vcpu-type",
                &s.vcpu_type,
            ])
            .arg("--ovmf")
            .arg(&ovmf)
            .arg("--kernel")
            .arg(out.join(image::KERNEL_FILE))
            .arg("--initrd")
            .arg(out.join(image::INITRAMFS_FILE))
            .args([
                "--append",
                &m.cmdline.value,
                "--guest-features",
                &format!("{:#x}", s.guest_features),
            ])
            .output()
            .expect("sev-snp-measure");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(
            String::from_utf8_lossy(&r.stdout).trim(),
            s.measurement,
            "{} vCPUs",
            s.vcpus
        );
    }
}

#[test]
fn the_demo_runs_in_the_vm_tier_and_its_json_is_exactly_one_object() {
    if missing().is_some() {
        return;
    }
    let w = Work::new();
    let o = Command::new(BIN)
        .args(["demo", "--json", "--progress", "json", "--image"])
        .arg(shared_image())
        .env("TMPDIR", w.0.path())
        .output()
        .expect("demo");
    let err = String::from_utf8_lossy(&o.stderr);
    // On failure stdout's JSON error carries the guest console's last lines.
    assert!(
        o.status.success(),
        "{err}\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // stdout is one JSON object and nothing else.
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stdout));
    });
    assert!(v.is_object());
    assert_eq!(v["isolation"], "vm", "{v}");
    assert_eq!(v["verified"], true, "{v}");
    assert_eq!(v["verdict"]["outcome"], "tests_passed", "{v}");
    assert_eq!(v["verdict"]["isolation"], "vm", "{v}");
    let m = Manifest::load(shared_image()).expect("manifest");
    assert_eq!(
        v["measurement"], m.measurements.vm,
        "pinned to the manifest's vm measurement"
    );
    // The summary and the progress went to stderr.
    assert!(err.starts_with("isolation   vm: "), "{err}");
    assert!(err.contains(r#""step":"boot""#), "{err}");
    w.assert_clean();
}

#[test]
fn without_qemu_the_demo_runs_the_process_tier_and_its_first_line_says_why() {
    if skip_fence() {
        return;
    }
    // PATH with everything of /usr/bin and /bin but QEMU.
    let t = tempfile::tempdir().expect("tmp");
    let bin = t.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    for d in ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        for e in std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            let name = e.file_name();
            if name.to_string_lossy().starts_with("qemu-system") || bin.join(&name).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), bin.join(&name));
        }
    }
    let script =
        std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/vm-setup.sh"))
            .expect("scripts/vm-setup.sh");
    let not_installed = format!(
        "qemu-system-x86_64 is not installed (to install it from bookworm-backports: sudo {})",
        script.display()
    );
    // The set-up the demo runs where QEMU is missing, replaced by one that records its argument and fails.
    let log = t.path().join("setup.log");
    let fake = t.path().join("fake-setup.sh");
    std::fs::write(
        &fake,
        format!(
            "echo \"$1\" >>{}\necho 'vm-setup: apt said no' >&2\nexit 7\n",
            log.display()
        ),
    )
    .expect("fake setup");
    let demo = |extra: &[&str]| {
        let o = Command::new(BIN)
            .arg("demo")
            .args(extra)
            .env("PATH", &bin)
            .env("FENCED_RUN_VM_SETUP", &fake)
            .output()
            .expect("demo");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{out}\n{err}");
        assert!(out.contains("outcome     tests_passed"), "{out}");
        assert!(out.contains("verified    SIMULATED"), "{out}");
        (out, err)
    };

    // --no-setup: nothing is installed, the first line names the command that would.
    let (out, _) = demo(&["--no-setup"]);
    assert_eq!(
        out.lines().next().unwrap_or_default(),
        format!("isolation   process: the vm tier cannot run here: {not_installed}")
    );
    assert!(!log.exists(), "--no-setup ran the set-up");

    // By default, as root (with apt-get on PATH) the demo runs the set-up first; its failure is named.
    let (out, err) = demo(&[]);
    let first = out.lines().next().unwrap_or_default();
    if nix::unistd::geteuid().is_root() {
        assert_eq!(
            first,
            format!(
                "isolation   process: the vm tier cannot run here: {not_installed}, and scripts/vm-setup.sh \
                 failed (exit status: 7; its messages are above on stderr)"
            )
        );
        assert!(err.contains("vm-setup: apt said no"), "{err}");
        let target = std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
            .expect("target");
        let ran = std::fs::read_to_string(&log).expect("the set-up ran");
        let ran = std::fs::canonicalize(ran.trim()).expect("its target argument exists");
        assert_eq!(ran, target, "the set-up's target directory");
    } else {
        assert_eq!(
            first,
            format!("isolation   process: the vm tier cannot run here: {not_installed}")
        );
        assert!(!log.exists(), "the set-up ran without root");
    }
}

fn skip_fence() -> bool {
    fenced_run_tests::fence::skip()
}

/// A real git checkout (`.git` is its first entry by name) given as a job file with `[repository] commit`
/// pinned: the host packs the repository's own directory, the guest's intake unpacks it, and the run reaches
/// its tests, with the same outcome, counts and commit as the process tier.
#[test]
fn a_git_checkout_given_as_a_job_file_runs_its_tests_in_the_vm_tier() {
    if missing().is_some() {
        return;
    }
    let jobs = tempfile::tempdir().expect("tmp");
    let repo = jobs.path().join("repo");
    copy_dir(&demo_dir().join("repo"), &repo);
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@t.example"])
            .args(args)
            .output()
            .expect("git");
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
    let commit = git(&["rev-parse", "HEAD"]);
    std::fs::copy(demo_dir().join("fix.patch"), jobs.path().join("fix.patch")).expect("patch");
    let demo_job = std::fs::read_to_string(demo_dir().join("job.toml")).expect("job");
    let job = jobs.path().join("job.toml");
    std::fs::write(
        &job,
        demo_job.replace(
            "patch = \"fix.patch\"\n",
            &format!("patch = \"fix.patch\"\ncommit = \"{commit}\"\n"),
        ),
    )
    .expect("job");
    let names: Vec<_> = std::fs::read_dir(&repo)
        .expect("repo")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        names.iter().min().map(|n| n.as_os_str()),
        Some(std::ffi::OsStr::new(".git")),
        "the checkout's first entry by name"
    );

    let w = Work::new();
    let run = |tier: &str| -> serde_json::Value {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--isolation", tier, "--json"]);
        if tier == "vm" {
            cmd.arg("--image").arg(shared_image());
        }
        let o = cmd
            .arg(&job)
            .env("TMPDIR", w.0.path())
            .output()
            .expect("run");
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "{tier}: {e}\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    };
    let vm = run("vm");
    assert_eq!(vm["outcome"], "tests_passed", "{vm}");
    assert_eq!(vm["inputs"]["commit"], commit.as_str(), "{vm}");
    assert!(vm["tests"]["passed"].as_u64().unwrap_or(0) > 0, "{vm}");
    let process = run("process");
    assert_eq!(process["outcome"], vm["outcome"], "{process}");
    assert_eq!(process["tests"], vm["tests"], "{process}");
    assert_eq!(process["inputs"]["commit"], vm["inputs"]["commit"]);
    w.assert_clean();
}

/// A nonce source that records the key hash it was asked for and answers with `answer`.
struct Recording {
    asked: std::sync::Arc<std::sync::Mutex<Vec<[u8; 32]>>>,
    answer: Result<Vec<u8>, String>,
}

impl host::nonce_exchange::NonceSource for Recording {
    fn nonce_for(&mut self, key_sha256: &[u8; 32]) -> Result<Vec<u8>, String> {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(*key_sha256);
        self.answer.clone()
    }
}

/// The guest announces its evidence key before it has a nonce (`KeyAnnounce`): the host asks its nonce source
/// once, with that key's hash, the evidence is sealed with that key and bound to the nonce the source gave; a
/// source that gives no nonce ends the run with an error naming the key, the VM killed and its files removed.
#[test]
fn the_guest_announces_its_key_and_the_nonce_is_obtained_for_it() {
    if missing().is_some() {
        return;
    }
    let image = shared_image();
    let (kind, bytes) = demo_bundle();
    let issued = vec![0x6b; 24];
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let w = Work::new();
    let out = vm::run_for_key(
        kind,
        &bytes,
        Box::new(Recording {
            asked: asked.clone(),
            answer: Ok(issued.clone()),
        }),
        &w.options(image),
    )
    .expect("a run with a nonce issued for the announced key");
    let asked = asked.lock().expect("lock").clone();
    assert_eq!(
        asked,
        vec![out.key_sha256],
        "asked once, for the announced key"
    );
    let evidence = attestation::evidence::Evidence::from_cbor(&out.evidence_bytes).expect("cbor");
    assert_eq!(
        attestation::pool_ledger::key_sha256(&evidence.key()),
        out.key_sha256,
        "the evidence is sealed with the announced key"
    );
    assert_eq!(out.nonce, issued);
    assert_eq!(out.verdict.inputs.nonce, issued);
    let evdir = tempfile::tempdir().expect("tmp");
    let ev = evdir.path().join("issued.evidence");
    std::fs::write(&ev, &out.evidence_bytes).expect("write");
    let m = Manifest::load(image).expect("manifest").measurements.vm;
    let o = Command::new(VERIFY)
        .arg("evidence")
        .arg(&ev)
        .args(["--allow-simulated", "--measurement", &m, "--nonce"])
        .arg(hex::encode(&issued))
        .output()
        .expect("verify");
    assert!(
        o.status.success(),
        "the evidence verifies with the issued nonce: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    w.assert_clean();

    let w = Work::new();
    let err = vm::run_for_key(
        kind,
        &bytes,
        Box::new(Recording {
            asked: Default::default(),
            answer: Err("the pool refused: the run has ended".into()),
        }),
        &w.options(image),
    )
    .expect_err("no nonce");
    eprintln!("host error: {err}");
    assert!(matches!(err, vm::VmError::Nonce(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("no nonce for the guest's evidence key") && err.contains("the run has ended"),
        "{err}"
    );
    w.assert_clean();
}
