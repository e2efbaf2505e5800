//! Task bundles in the `vm` tier: stage 6 builds the environment on the host (as in the process tier), the
//! erofs is attached as the guest's verity disk with its root hash and image id on the measured command line,
//! and the guest agent runs the solution and the pristine tests on it. A passing and a failing bundle, two
//! boots; the evidence is verified.
//!
//! Needs what tests/tests/task_bundle.rs needs and what the vm tier needs (QEMU, the kernel under
//! target/vm-kernel, a guest image built with `--toolchains`, which carries the dm-verity modules); skips with a
//! printed reason otherwise, unless FENCED_RUN_REQUIRE_TASKS=1 and FENCED_RUN_REQUIRE_VM=1.

use fenced_run_tests::task::{skip_reason, Bundle, Registry};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const NONCE: &str = "00112233445566778899aabbccddeeff";

fn vm_missing() -> Option<String> {
    let on_path = |t: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file()))
    };
    let why = if !on_path("qemu-system-x86_64") {
        Some("qemu-system-x86_64 is not installed (.ci/run installs it)".to_owned())
    } else if host::cli::image::default_kernel().is_none() {
        Some("no kernel under target/vm-kernel (.ci/run extracts it)".to_owned())
    } else {
        None
    };
    if let Some(w) = &why {
        if std::env::var_os("FENCED_RUN_REQUIRE_VM").is_some_and(|v| v == "1") {
            panic!("FENCED_RUN_REQUIRE_VM=1 but the vm tier cannot run task bundles here: {w}");
        }
        attestation::vectors::skip_for(attestation::vectors::SkipKind::Vm, w);
    }
    why
}

/// A guest image with the dm-verity modules (built with `--toolchains python`), made once under the target
/// directory and reused while it is there.
fn guest_image() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image-task");
    let o = Command::new(BIN)
        .args(["image", "build", "--toolchains", "python", "--out"])
        .arg(&out)
        .output()
        .expect("run fenced-run image build");
    assert!(
        o.status.success(),
        "image build --toolchains python: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn run(image: &Path, b: &Bundle, reg: &Registry, evidence: &Path) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("run")
        .arg(b.path())
        .args([
            "--isolation",
            "vm",
            "--json",
            "--progress",
            "none",
            "--nonce",
            NONCE,
        ])
        .arg("--image")
        .arg(image)
        .arg("--evidence")
        .arg(evidence)
        .args(reg.args())
        .output()
        .expect("run fenced-run");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no verdict: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn task_bundles_pass_and_fail_in_the_vm_tier() {
    if skip_reason().is_some() || vm_missing().is_some() {
        return;
    }
    let image = guest_image();
    let reg = Registry::start();
    let dockerfile = format!(
        "FROM base@{}\nRUN echo built > /etc/task-env\n",
        reg.base_digest
    );
    let work = tempfile::Builder::new()
        .prefix("fenced-run-test-task-vm-")
        .tempdir()
        .expect("tempdir");
    let evidence = work.path().join("run.evidence");

    let pass = Bundle::standard(
        "[solution]\ncommand = \"sh solution/solve.sh\"\n[test]\ntimeout_seconds = 120\n",
        &dockerfile,
    );
    pass.file("solution/solve.sh", "echo 'echo $(($1 + $2))' > add.sh\n");
    let v = run(&image, &pass, &reg, &evidence);
    assert_eq!(v["outcome"], "tests_passed", "{v:#}");
    assert_eq!(v["isolation"], "vm", "{v:#}");
    let digest = v["image"]["digest"].as_str().unwrap_or_default();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{v:#}");
    let tests_tree = guest::fence::repo::tree_hash(&pass.path().join("tests")).expect("tree");
    assert_eq!(v["inputs"]["test_tree"], tests_tree.as_str(), "{v:#}");
    let verified = Command::new(VERIFY)
        .arg("evidence")
        .arg(&evidence)
        .args(["--allow-simulated", "--any-measurement", "--nonce", NONCE])
        .args(["--protect-tree", &tests_tree, "--json"])
        .output()
        .expect("verify");
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );

    let fail = Bundle::standard("[test]\ntimeout_seconds = 120\n", &dockerfile);
    let v = run(&image, &fail, &reg, &evidence);
    assert_eq!(v["outcome"], "tests_failed", "{v:#}");
    assert!(
        v["output_tail"]["test"]
            .as_str()
            .unwrap_or_default()
            .contains("add.sh 2 3 printed -1"),
        "{v:#}"
    );
}
