//! The loopback registry runs of tests/tests/registry_e2e.rs in the vm tier: cargo (sparse index), pip (simple
//! index) and npm against the registry the test starts on the host's 127.0.0.1 (HTTPS with a test CA), each
//! project's base failing and its patch passing with the counts of a direct run outside the fence, on the
//! toolchain image. The operator's file (`allow_networks = ["127.0.0.1/32"]`, `ca_certificates`) reaches the
//! guest in the job header: the host dialer dials the registry and the guest's install sandbox trusts the CA;
//! the evidence verifies and its signed verdict records the CA's SHA-256. Without `allow_networks` the dialer
//! refuses the loopback address by policy (`DENY`, answered 403 in the guest), npm and pip stop at once and the
//! run is `environment_exhausted` naming the refusal.
//!
//! Eight TCG boots: skipped with a reason on stderr where QEMU, the kernel or the image tools are missing.

use fenced_run_tests::registry::{self, Fixture, ECOSYSTEMS};
use fenced_run_tests::vm::run_with_operator;
use host::image::Manifest;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");

fn skipped() -> bool {
    fenced_run_tests::vm::missing(&[
        "mkfs.erofs",
        "dump.erofs",
        "veritysetup",
        "apt-get",
        "dpkg-deb",
    ])
    .is_some()
        || registry::missing_toolchains().is_some()
}

#[test]
fn each_ecosystems_registry_run_matches_outside_the_fence_in_the_vm_tier_and_a_refused_registry_is_final(
) {
    if skipped() {
        return;
    }
    let image = registry::toolchain_image(BIN, Path::new(env!("CARGO_TARGET_TMPDIR")));
    let measurement = Manifest::load(&image).expect("manifest").measurements.vm;
    let fx = Fixture::start();
    let t = tempfile::tempdir().expect("tmp");
    let reach = t.path().join("operator.toml");
    std::fs::write(&reach, fx.operator_toml(true)).expect("operator file");
    let refuse = t.path().join("operator-refused.toml");
    std::fs::write(&refuse, fx.operator_toml(false)).expect("operator file");
    let ca_sha = registry::sha256_file(&fx.ca.ca_pem());
    // (ecosystem, patched, operator file reaches the registry)
    let mut runs: Vec<(&str, bool, bool)> = ECOSYSTEMS
        .iter()
        .flat_map(|e| [(*e, false, true), (*e, true, true)])
        .collect();
    runs.extend([("node", true, false), ("python", true, false)]);
    // Two guests at a time: more TCG guests at once on a loaded 2-core machine miss the kernel's timer check
    // at boot ("IO-APIC + timer doesn't work").
    let results: Vec<_> = runs
        .chunks(2)
        .flat_map(|chunk| {
            std::thread::scope(|s| {
                let hs: Vec<_> = chunk
                    .iter()
                    .map(|(eco, patched, reaches)| {
                        let (fx, t, image) = (&fx, t.path(), image.as_path());
                        let op = if *reaches {
                            reach.as_path()
                        } else {
                            refuse.as_path()
                        };
                        s.spawn(move || {
                            let name = format!(
                                "{eco}-{}{}",
                                if *patched { "patch" } else { "base" },
                                if *reaches { "" } else { "-refused" }
                            );
                            let bundle = fx.bundle(&t.join(&name), eco, *patched);
                            let evidence = t.join(format!("{name}.evidence"));
                            let started = std::time::Instant::now();
                            let v = run_with_operator(BIN, &bundle.join("job.toml"), image, op, &evidence);
                            eprintln!(
                            "{name}: vm tier {:.1} s, outcome {}, install {} ms, test {} ms, tests {}",
                            started.elapsed().as_secs_f64(),
                            v["outcome"],
                            v["install"]["duration_ms"],
                            v["test"]["duration_ms"],
                            v["tests"]
                        );
                            let direct = reaches.then(|| {
                                fx.direct(&t.join(format!("{name}-direct")), eco, *patched)
                            });
                            (v, direct, evidence)
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("run"))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for ((eco, patched, reaches), (v, direct, evidence)) in runs.iter().zip(&results) {
        let name = format!("{eco} {}", if *patched { "patched" } else { "base" });
        assert_eq!(v["isolation"], "vm", "{name}: {v}");
        if !reaches {
            assert_eq!(v["outcome"], "environment_exhausted", "{name} refused: {v}");
            assert!(v["test"].is_null(), "{name} refused: {v}");
            let refused: Vec<_> = v["install"]["egress"]
                .as_array()
                .expect("egress")
                .iter()
                .filter(|e| e["allowed"] == false && e["host"] == "localhost")
                .collect();
            assert!(!refused.is_empty(), "{name} refused: {v}");
            assert!(
                v["findings"]
                    .to_string()
                    .contains(&format!("localhost:{}", fx.server.port())),
                "{name} refused: {v}"
            );
            assert!(
                v["install"]["duration_ms"].as_u64().unwrap_or(u64::MAX) < 120_000,
                "{name} refused: the client did not stop at once: {v}"
            );
            continue;
        }
        let r = registry::recipe(eco);
        let want = if *patched {
            "tests_passed"
        } else {
            "tests_failed"
        };
        assert_eq!(v["outcome"], want, "{name}: {v}");
        assert_eq!(v["tests"]["parser"], r.parser, "{name}: {v}");
        let d = direct.as_ref().expect("a direct run");
        let log = &d.log;
        let direct = d
            .counts
            .unwrap_or_else(|| panic!("{name}: the direct run counted nothing:\n{log}"));
        assert_eq!(
            v["tests"]["passed"], direct.passed,
            "{name}: {v}\ndirect:\n{log}"
        );
        assert_eq!(
            v["tests"]["failed"], direct.failed,
            "{name}: {v}\ndirect:\n{log}"
        );
        assert_eq!(
            v["install"]["operator_egress"]["ca_certificates_sha256"], ca_sha,
            "{name}: {v}"
        );
        let out = fenced_run_tests::vm::verify_sim(VERIFY, evidence, &measurement);
        assert!(
            out.status.success(),
            "{name}: verify-attestation: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let verified: serde_json::Value = serde_json::from_slice(&out.stdout).expect("verify json");
        assert_eq!(
            verified["verdict"]["install"]["operator_egress"], v["install"]["operator_egress"],
            "{name}: the signed verdict records the operator's settings"
        );
    }
    let served = fx.server.requests();
    for path in [
        "GET /index/ti/ny/tinyadd 200",
        "GET /crates/tinyadd/0.1.0/download 200",
        "GET /files/tinycalc-1.0.0-py3-none-any.whl 200",
        "GET /tinyadd/-/tinyadd-1.0.0.tgz 200",
    ] {
        assert!(served.iter().any(|r| r == path), "{path} not in {served:?}");
    }
}
