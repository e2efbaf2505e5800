//! Times, per ecosystem, the patched fixture project of tests/src/registry.rs against the loopback registry
//! (HTTPS, test CA): a direct run outside the fence (the host's toolchains, install then test), the process tier
//! and the vm tier on the toolchain image (whole run, and the install and test phases' own durations from the
//! verdict; in the vm tier the other steps from `--progress json`: boot, attest, intake, cut, shutdown, and the
//! fixed overhead = whole run - install - test). Prints one markdown row per ecosystem and tier, medians over RUNS.
//!
//! `cargo bench -p fenced-run-tests --bench registries --profile dev -- [RUNS] [IMAGE_DIR]`
//! (IMAGE_DIR: a `--toolchains go,node,python,rust` image; default target/tmp/vm-image-toolchains, built when
//! missing). Needs root, QEMU and the image tools; says on stderr why it cannot run otherwise.

use fenced_run_tests::registry::{self, Fixture, ECOSYSTEMS};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// Per tier: whole runs, install phases, test phases (seconds) and the vm tier's step durations (ms).
type Samples = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<BTreeMap<String, u64>>);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// One fenced run: wall seconds, the verdict, and the vm tier's step durations (ms) by step.
fn fenced(
    tier: &str,
    bundle: &Path,
    image: &Path,
    op: &Path,
) -> (f64, serde_json::Value, BTreeMap<String, u64>) {
    let started = Instant::now();
    let o = Command::new(BIN)
        .args([
            "run",
            "--isolation",
            tier,
            "--json",
            "--progress",
            "json",
            "--image",
        ])
        .arg(image)
        .arg("--operator-config")
        .arg(op)
        .arg(bundle.join("job.toml"))
        .output()
        .expect("run");
    let wall = started.elapsed().as_secs_f64();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    let mut steps = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stderr).lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if e["event"] == "done" {
            if let (Some(step), Some(ms)) = (e["step"].as_str(), e["step_ms"].as_u64()) {
                steps.insert(step.to_owned(), ms);
            }
        }
    }
    (wall, v, steps)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1);
    if registry::missing_toolchains().is_some()
        || fenced_run_tests::vm::missing(&[
            "mkfs.erofs",
            "dump.erofs",
            "veritysetup",
            "apt-get",
            "dpkg-deb",
        ])
        .is_some()
    {
        return;
    }
    let image = match args.get(1) {
        Some(p) => PathBuf::from(p),
        None => registry::toolchain_image(
            BIN,
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp"),
        ),
    };
    let fx = Fixture::start();
    let t = tempfile::tempdir().expect("tmp");
    let op = t.path().join("operator.toml");
    std::fs::write(&op, fx.operator_toml(true)).expect("operator file");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average before: {}", load.trim());
    println!("| ecosystem | how | runs | whole run | install | test | vm fixed overhead (boot, attest, intake, cut, shutdown) |");
    println!("|---|---|---:|---:|---:|---:|---|");
    for eco in ECOSYSTEMS {
        let mut direct = (Vec::new(), Vec::new(), Vec::new());
        let mut tiers: BTreeMap<&str, Samples> = BTreeMap::new();
        for i in 0..runs {
            let d = t.path().join(format!("{eco}-direct-{i}"));
            let run = fx.direct(&d, eco, true);
            assert!(
                run.counts.is_some_and(|c| c.failed == 0 && c.passed == 3),
                "{eco} direct: {}",
                run.log
            );
            direct.0.push(run.install_secs + run.test_secs);
            direct.1.push(run.install_secs);
            direct.2.push(run.test_secs);
            for tier in ["process", "vm"] {
                let b = fx.bundle(&t.path().join(format!("{eco}-{tier}-{i}")), eco, true);
                let (wall, v, steps) = fenced(tier, &b, &image, &op);
                assert_eq!(v["outcome"], "tests_passed", "{eco} {tier}: {v}");
                let e = tiers.entry(tier).or_default();
                e.0.push(wall);
                e.1.push(v["install"]["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0);
                e.2.push(v["test"]["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0);
                e.3.push(steps);
            }
        }
        println!(
            "| {eco} | direct (host toolchains) | {runs} | {:.1} s | {:.1} s | {:.1} s | |",
            median(direct.0.clone()),
            median(direct.1.clone()),
            median(direct.2.clone())
        );
        for (tier, (wall, install, test, steps)) in &tiers {
            let (w, i, te) = (
                median(wall.clone()),
                median(install.clone()),
                median(test.clone()),
            );
            let fixed = if *tier == "vm" {
                let step = |name: &str| {
                    median(
                        steps
                            .iter()
                            .map(|s| s.get(name).copied().unwrap_or(0) as f64 / 1000.0)
                            .collect(),
                    )
                };
                format!(
                    "{:.1} s ({:.1}, {:.1}, {:.1}, {:.1}, {:.1})",
                    w - i - te,
                    step("boot"),
                    step("attest"),
                    step("intake"),
                    step("cut"),
                    step("shutdown")
                )
            } else {
                format!("{:.1} s (no VM)", w - i - te)
            };
            println!(
                "| {eco} | {tier} tier | {runs} | {w:.1} s | {i:.1} s | {te:.1} s | {fixed} |"
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average after: {}", load.trim());
}
