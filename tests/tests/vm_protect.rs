//! The attacks on protected tests (issue 33) in the `vm` tier: the fence in the guest binds each protected path
//! read-only through the test phase and gives the test phase a fresh HOME, as in the process tier
//! (fence_protect_test_phase.rs, whose jobs these are: tests/src/protect.rs).
//!
//! - Shell, on the plain image: the build-script attack (a patched script the test command runs first tries
//!   every way to change `tests/test.sh`) and a protected `tests/test.sh` calling a patched `./build.sh` that
//!   edits `tests/cases/*`. Two boots, run at once.
//! - Python, on the image with the `python` toolchain image (`[image] toolchains = ["python"]`; the plain
//!   initramfs has no python): one job, one boot, with both Python attacks: the install phase writes
//!   `usercustomize.py` and a `.pth` (and `~/.npmrc`, `~/.gitconfig`, `~/.bashrc`) into HOME, and the patch adds
//!   a root `conftest.py` rewriting the protected test file.
//!
//! Each ends with the protected tests judging the patch (`tests_failed`), `inputs.test_tree` the tree of the
//! protected files as received, the evidence verified against the manifest's measurement, and (for the HOME
//! hooks) the `home-not-carried` finding naming them. After each run nothing of it is left on the host.
//!
//! Skips with `skipped: ...` on stderr where QEMU, the kernel, root or (Python) the toolchain image's tools are
//! missing, unless FENCED_RUN_REQUIRE_VM=1.

use fenced_run_tests::fence::{Case, Ran};
use fenced_run_tests::protect::{
    self, build_script_attack, build_sh_attack, conftest_attack, git_tree, home_hooks_attack,
    Attack, CONFTEST_ATTEMPTS, HOOK_MARKERS, PYTEST_SUITE,
};
use fenced_run_tests::vm::{self, NONCE};
use host::image::Manifest;
use std::path::{Path, PathBuf};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");

/// The toolchain image's tools (vm_toolchains.rs).
const TOOLCHAIN_TOOLS: &[&str] = &[
    "mkfs.erofs",
    "dump.erofs",
    "veritysetup",
    "apt-get",
    "dpkg-deb",
];

/// The plain image, built under CARGO_TARGET_TMPDIR.
fn plain_image() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image");
    vm::build_image(BIN, None, &out);
    out
}

/// The image with the `python` toolchain image, built under CARGO_TARGET_TMPDIR (the toolchain image is kept
/// between runs while its packages are the same).
fn python_image() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image-python");
    vm::build_image(BIN, Some("python"), &out);
    out
}

/// Writes `attack` (its job with `extra` tables) into a new case and runs it in the vm tier on `image`, with
/// evidence; the run leaves nothing behind. Returns the case (its directory holds `evidence`) and the run.
fn run_vm(attack: &Attack, extra: &str, image: &Path) -> (Case, Ran) {
    let c = Case::new(BIN);
    for (path, text) in &attack.files {
        c.repo_file(path, text);
    }
    if let Some(p) = &attack.patch {
        std::fs::write(c.path().join("fix.patch"), p).expect("patch");
    }
    c.job(&attack.job(extra));
    let evidence = c.path().join("evidence");
    let (image, evidence) = (
        image.to_string_lossy().into_owned(),
        evidence.to_string_lossy().into_owned(),
    );
    let started = std::time::Instant::now();
    let r = c.run_with(
        &[
            "--isolation",
            "vm",
            "--nonce",
            NONCE,
            "--image",
            &image,
            "--evidence",
            &evidence,
        ],
        &[],
    );
    eprintln!(
        "vm run of {}: {:.1} s",
        attack.command,
        started.elapsed().as_secs_f64()
    );
    c.assert_clean(&r, &[]);
    (c, r)
}

/// The protected tests judged the patch: `tests_failed`, nothing refused, `inputs.test_tree` the tree of
/// `pristine` (the protected files as received), and the same in the evidence, verified against the image's
/// measurement.
fn assert_judged_failed(c: &Case, r: &Ran, image: &Path, pristine: &str) {
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert!(r.verdict["refusal"].is_null(), "{}", r.dump());
    assert_eq!(r.verdict["isolation"], "vm", "{}", r.dump());
    assert_eq!(
        r.verdict["inputs"]["test_tree"].as_str(),
        Some(pristine),
        "the tree of what ran, as received: {}",
        r.dump()
    );
    let m = Manifest::load(image).expect("manifest");
    let o = vm::verify_sim(VERIFY, &c.path().join("evidence"), &m.measurements.vm);
    assert!(
        o.status.success(),
        "verify-attestation rejected the evidence: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).expect("verify json");
    assert_eq!(out["verdict"]["outcome"], "tests_failed", "{out}");
    assert_eq!(
        out["verdict"]["inputs"]["test_tree"].as_str(),
        Some(pristine),
        "{out}"
    );
}

#[test]
fn shell_attacks_on_protected_tests_fail_in_the_vm_tier() {
    if vm::missing(&[]).is_some() {
        return;
    }
    let image = plain_image();
    let build_script = build_script_attack();
    let build_sh = build_sh_attack();
    // Both VMs at once (two TCG guests share the cores in about the time of one).
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run_vm(&build_script, "", &image));
        let b = s.spawn(|| run_vm(&build_sh, "", &image));
        (a.join().expect("vm run"), b.join().expect("vm run"))
    });

    // A patched script the test command runs before the suite: every attempt on tests/ fails.
    let (c, r) = a;
    if let Some(what) = protect::not_all_blocked(r.test_tail()) {
        panic!("build script in the vm: {what}: {}", r.dump());
    }
    assert!(
        r.test_tail().contains("0 passed, 1 failed"),
        "the protected suite ran as received: {}",
        r.dump()
    );
    assert_judged_failed(
        &c,
        &r,
        &image,
        &build_script.pristine_tree(&["tests/test.sh"]),
    );
    let lines = r.verdict["test"]["sandbox"].to_string();
    assert!(
        lines.contains("read-only ([test] protect): /work/repo/tests"),
        "{}",
        r.dump()
    );

    // A protected tests/test.sh calling the patched ./build.sh: no case edited or added.
    let (c, r) = b;
    assert!(!r.test_tail().contains("DONE"), "{}", r.dump());
    assert!(r.test_tail().contains("0 passed, 2 failed"), "{}", r.dump());
    assert_judged_failed(
        &c,
        &r,
        &image,
        &build_sh.pristine_tree(&["tests/test.sh", "tests/cases/one.sh", "tests/cases/two.sh"]),
    );
}

#[test]
fn python_attacks_on_protected_tests_fail_in_the_vm_tier() {
    if vm::missing(TOOLCHAIN_TOOLS).is_some() {
        return;
    }
    let image = python_image();
    // One job, one boot: the install phase plants the HOME hooks; the patch adds the root conftest.py; the test
    // phase looks for the hooks, then runs pytest on the protected suite.
    let conftest = conftest_attack();
    let hooks = home_hooks_attack(conftest.command);
    let attack = Attack {
        files: conftest.files.into_iter().chain(hooks.files).collect(),
        patch: conftest.patch,
        command: hooks.command,
        protect: conftest.protect,
        install: hooks.install,
    };
    let (c, r) = run_vm(
        &attack,
        "[image]\ntoolchains = [\"python\"]\n[limits]\nmemory_mib = 1024\ndisk_mib = 512\n",
        &image,
    );
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
    // The conftest's every attempt fails with EROFS (30); the protected tests run as received.
    assert!(!tail.contains("DONE"), "{}", r.dump());
    for what in CONFTEST_ATTEMPTS {
        assert!(
            tail.contains(&format!("BLOCKED {what} 30")),
            "{what}: {}",
            r.dump()
        );
    }
    assert!(tail.contains("2 failed"), "{}", r.dump());
    assert_judged_failed(
        &c,
        &r,
        &image,
        &git_tree(&[("tests/test_suite.py", PYTEST_SUITE)]),
    );
    let finding = protect::home_not_carried(&r.verdict);
    let detail = finding["detail"].as_str().unwrap_or("");
    for name in [
        "usercustomize.py",
        "zz-hook.pth",
        ".npmrc",
        ".gitconfig",
        ".bashrc",
    ] {
        assert!(detail.contains(name), "{name} not named: {}", r.dump());
    }
    assert_eq!(finding["stage"], "cut", "{}", r.dump());
}
