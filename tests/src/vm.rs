//! Helpers of the vm-tier tests (vm_tier.rs, vm_toolchains.rs, vm_registry.rs, vm_repo_url.rs): a run with an
//! operator file, the founder's check of sim evidence.

use std::path::Path;
use std::process::{Command, Output};

/// The nonce the vm-tier tests run their jobs with.
pub const NONCE: &str = "00112233445566778899aabbccddeeff0011223344556677";

/// `BIN run --isolation vm --json --nonce NONCE --image IMAGE --operator-config OPERATOR --evidence EVIDENCE JOB`
/// (`bin` is an integration test's `CARGO_BIN_EXE_fenced-run-e2e`): the run's JSON, or a panic naming the job
/// with both output streams.
pub fn run_with_operator(
    bin: &str,
    job: &Path,
    image: &Path,
    operator: &Path,
    evidence: &Path,
) -> serde_json::Value {
    let o = Command::new(bin)
        .args(["run", "--isolation", "vm", "--json", "--nonce", NONCE])
        .arg("--image")
        .arg(image)
        .arg("--operator-config")
        .arg(operator)
        .arg("--evidence")
        .arg(evidence)
        .arg(job)
        .output()
        .expect("run fenced-run");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\n{}\n{}",
            job.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// `verify-attestation evidence --allow-simulated --json --nonce NONCE --measurement MEASUREMENT EVIDENCE`, run
/// with the binary `verify` (an integration test's `CARGO_BIN_EXE_verify-attestation-e2e`).
pub fn verify_sim(verify: &str, evidence: &Path, measurement: &str) -> Output {
    Command::new(verify)
        .args([
            "evidence",
            "--allow-simulated",
            "--json",
            "--nonce",
            NONCE,
            "--measurement",
            measurement,
        ])
        .arg(evidence)
        .output()
        .expect("run verify-attestation")
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
        || Path::new("/usr/sbin").join(name).is_file()
}

/// `Some(reason)` when the vm tier cannot run here: QEMU, the kernel (target/vm-kernel) or root missing, or one
/// of `tools` (more programs the test needs, such as the toolchain image's `mkfs.erofs`) not on the PATH. The
/// reason goes through `attestation::vectors::skip_for` (stderr, counted by kind; with FENCED_RUN_REQUIRE_VM=1 a
/// missing piece fails the test instead).
pub fn missing(tools: &[&str]) -> Option<String> {
    let why = if !on_path("qemu-system-x86_64") {
        Some("qemu-system-x86_64 is not installed (.ci/run installs it)".to_string())
    } else if host::cli::image::default_kernel().is_none() {
        Some("no kernel under target/vm-kernel (.ci/run extracts it)".to_string())
    } else if !nix::unistd::geteuid().is_root() {
        Some("not root (the image's agent build and the vm tests assume it)".to_string())
    } else {
        tools
            .iter()
            .find(|t| !on_path(t))
            .map(|t| format!("{t} is not installed (.ci/run installs it)"))
    };
    if let Some(w) = &why {
        // On stderr, counted by kind in the closing skip line; a failure under FENCED_RUN_REQUIRE_VM=1.
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vm,
            &format!("vm tier: {w}"),
        );
    }
    why
}

/// `fenced-run image build [--toolchains T] --out OUT` with the binary `bin`; panics naming the build's
/// stderr when it fails.
pub fn build_image(bin: &str, toolchains: Option<&str>, out: &Path) {
    let mut cmd = Command::new(bin);
    cmd.args(["image", "build"]);
    if let Some(t) = toolchains {
        cmd.args(["--toolchains", t]);
    }
    let o = cmd
        .arg("--out")
        .arg(out)
        .output()
        .expect("run fenced-run image build");
    assert!(
        o.status.success(),
        "image build {toolchains:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
