//! Real package managers against a loopback registry, in the process tier: for cargo (a sparse index), pip (a
//! PEP 503 simple index) and npm (packuments and tarballs), one tiny project with one dependency from the
//! registry the test starts (tests/src/registry.rs: HTTPS on 127.0.0.1 with a test CA), run as docs/job-file.md's
//! recipes on the toolchain image. The operator's file names the registry's address (`allow_networks =
//! ["127.0.0.1/32"]`) and the test CA (`ca_certificates`); the job's allowlist names `localhost:PORT`. The base
//! fails and the patch passes, with the counts of a direct run of the same project outside the fence; the
//! verdict records the CA's SHA-256. Without `allow_networks` the registry is refused by policy and npm and pip
//! stop at once: `environment_exhausted` naming the refusal. Without the CA, npm cannot verify the registry.

use fenced_run_tests::fence::skip;
use fenced_run_tests::registry::{self, Fixture, ECOSYSTEMS};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn skipped() -> bool {
    skip() || registry::missing_toolchains().is_some()
}

/// `fenced-run run --isolation process --image IMAGE --operator-config OP BUNDLE/job.toml --json`.
fn run(bundle: &Path, image: &Path, operator: &Path) -> serde_json::Value {
    let o = Command::new(BIN)
        .args(["run", "--isolation", "process", "--json", "--image"])
        .arg(image)
        .arg("--operator-config")
        .arg(operator)
        .arg(bundle.join("job.toml"))
        .output()
        .expect("run");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\n{}\n{}",
            bundle.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn findings(v: &serde_json::Value) -> String {
    v["findings"].to_string()
}

#[test]
fn each_ecosystems_base_fails_and_its_patch_passes_through_the_loopback_registry_as_outside_the_fence(
) {
    if skipped() {
        return;
    }
    let image = registry::toolchain_tree(BIN, Path::new(env!("CARGO_TARGET_TMPDIR")));
    let fx = Fixture::start();
    let t = tempfile::tempdir().expect("tmp");
    let op = t.path().join("operator.toml");
    std::fs::write(&op, fx.operator_toml(true)).expect("operator file");
    let ca_sha = registry::sha256_file(&fx.ca.ca_pem());
    let runs: Vec<(&str, bool)> = ECOSYSTEMS
        .iter()
        .flat_map(|e| [(*e, false), (*e, true)])
        .collect();
    // Every run at once: the installs wait on the network, the compiles share the cores.
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = runs
            .iter()
            .map(|(eco, patched)| {
                let (fx, t, image, op) = (&fx, t.path(), image.as_path(), op.as_path());
                s.spawn(move || {
                    let name = format!("{eco}-{}", if *patched { "patch" } else { "base" });
                    let bundle = fx.bundle(&t.join(&name), eco, *patched);
                    let started = std::time::Instant::now();
                    let v = run(&bundle, image, op);
                    eprintln!(
                        "{name}: process tier {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    let started = std::time::Instant::now();
                    let direct = fx.direct(&t.join(format!("{name}-direct")), eco, *patched);
                    eprintln!("{name}: direct {:.1} s", started.elapsed().as_secs_f64());
                    (v, direct)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("run")).collect()
    });
    for ((eco, patched), (v, d)) in runs.iter().zip(&results) {
        let (direct, log) = (d.counts, &d.log);
        let r = registry::recipe(eco);
        let name = format!("{eco} {}", if *patched { "patched" } else { "base" });
        let want = if *patched {
            "tests_passed"
        } else {
            "tests_failed"
        };
        assert_eq!(v["outcome"], want, "{name}: {v}");
        assert_eq!(v["tests"]["parser"], r.parser, "{name}: {v}");
        let direct =
            direct.unwrap_or_else(|| panic!("{name}: the direct run counted nothing:\n{log}"));
        assert_eq!(
            (direct.passed, direct.failed),
            if *patched { (3, 0) } else { (1, 2) },
            "{name}: direct run:\n{log}"
        );
        assert_eq!(
            v["tests"]["passed"], direct.passed,
            "{name}: {v}\ndirect:\n{log}"
        );
        assert_eq!(
            v["tests"]["failed"], direct.failed,
            "{name}: {v}\ndirect:\n{log}"
        );
        let install = &v["install"];
        assert_eq!(install["exit_code"], 0, "{name}: {v}");
        assert_eq!(
            install["operator_egress"]["allow_networks"],
            serde_json::json!(["127.0.0.1/32"]),
            "{name}: {v}"
        );
        assert_eq!(
            install["operator_egress"]["ca_certificates_sha256"], ca_sha,
            "{name}: {v}"
        );
        let egress = install["egress"].as_array().expect("egress log");
        assert!(
            !egress.is_empty()
                && egress.iter().all(|e| e["host"] == "localhost"
                    && e["port"] == fx.server.port()
                    && e["allowed"] == true),
            "{name}: every attempt to the registry, allowed: {v}"
        );
        let sandbox = install["sandbox"].to_string();
        assert!(
            sandbox.contains("CA bundle: /etc/ssl/certs/ca-certificates.crt")
                && sandbox.contains(&ca_sha),
            "{name}: {sandbox}"
        );
        let env = install["env_names"].to_string();
        for var in [
            "SSL_CERT_FILE",
            "NODE_EXTRA_CA_CERTS",
            "PIP_CERT",
            "CARGO_HTTP_CAINFO",
        ] {
            assert!(env.contains(var), "{name}: {var} not in {env}");
        }
        assert!(
            !v["test"]["env_names"].to_string().contains("SSL_CERT_FILE"),
            "{name}: the test phase has no network and no CA variables: {v}"
        );
    }
    // The dependency came from this registry, in and outside the fence.
    let served = fx.server.requests();
    for path in [
        "GET /index/config.json 200",
        "GET /index/ti/ny/tinyadd 200",
        "GET /crates/tinyadd/0.1.0/download 200",
        "GET /simple/tinycalc/ 200",
        "GET /files/tinycalc-1.0.0-py3-none-any.whl 200",
        "GET /tinyadd 200",
        "GET /tinyadd/-/tinyadd-1.0.0.tgz 200",
    ] {
        assert!(served.iter().any(|r| r == path), "{path} not in {served:?}");
    }
}

/// npm and pip against the registry when the operator did not name its address: the proxy refuses
/// `localhost` (loopback) by policy with a 403, each client stops at once (retries off in the recipe), and the
/// run is `environment_exhausted` naming the refusal, with no test phase.
#[test]
fn an_install_whose_registry_is_refused_by_policy_is_environment_exhausted_at_once() {
    if skipped() {
        return;
    }
    let image = registry::toolchain_tree(BIN, Path::new(env!("CARGO_TARGET_TMPDIR")));
    let fx = Fixture::start();
    let t = tempfile::tempdir().expect("tmp");
    let op = t.path().join("operator.toml");
    std::fs::write(&op, fx.operator_toml(false)).expect("operator file");
    for eco in ["node", "python"] {
        let bundle = fx.bundle(&t.path().join(eco), eco, true);
        let started = std::time::Instant::now();
        let v = run(&bundle, &image, &op);
        let took = started.elapsed();
        eprintln!("{eco} refused: {:.1} s", took.as_secs_f64());
        assert_eq!(v["outcome"], "environment_exhausted", "{eco}: {v}");
        assert!(v["tests"].is_null() && v["test"].is_null(), "{eco}: {v}");
        let refused: Vec<_> = v["install"]["egress"]
            .as_array()
            .expect("egress")
            .iter()
            .filter(|e| e["allowed"] == false && e["host"] == "localhost")
            .collect();
        assert!(!refused.is_empty(), "{eco}: {v}");
        assert!(
            refused.iter().all(|e| {
                let why = e["reason"].as_str().unwrap_or_default();
                why.contains("127.0.0.1") || why.contains("::1")
            }),
            "{eco}: the refusal names the loopback address: {v}"
        );
        assert!(
            findings(&v).contains(&format!("localhost:{}", fx.server.port())),
            "{eco}: the finding names the refused registry: {}",
            findings(&v)
        );
        // A client that retried would still be backing off here (npm's default is minutes).
        assert!(
            v["install"]["duration_ms"].as_u64().unwrap_or(u64::MAX) < 60_000,
            "{eco}: {v}"
        );
    }
    assert!(
        fx.server.requests().is_empty(),
        "{:?}",
        fx.server.requests()
    );
}

/// The same npm project with the address allowed but without the operator's CA: the client cannot verify the
/// registry's certificate, so the CA is what made the runs above work.
#[test]
fn without_the_operators_ca_npm_cannot_verify_the_loopback_registry() {
    if skipped() {
        return;
    }
    let image = registry::toolchain_tree(BIN, Path::new(env!("CARGO_TARGET_TMPDIR")));
    let fx = Fixture::start();
    let t = tempfile::tempdir().expect("tmp");
    let op = t.path().join("operator.toml");
    std::fs::write(&op, "[egress]\nallow_networks = [\"127.0.0.1/32\"]\n").expect("operator file");
    let bundle = fx.bundle(&t.path().join("node"), "node", true);
    let v = run(&bundle, &image, &op);
    assert_ne!(v["outcome"], "tests_passed", "{v}");
    assert!(v["test"].is_null(), "{v}");
    assert!(
        v["install"]["operator_egress"]
            .get("ca_certificates_sha256")
            .is_none(),
        "{v}"
    );
    let tail = v["output_tail"]["install"].as_str().unwrap_or_default();
    assert!(
        tail.contains("certificate") || tail.contains("CERT"),
        "npm names the certificate it could not verify: {tail}"
    );
    assert!(
        !v["install"]["env_names"]
            .to_string()
            .contains("NODE_EXTRA_CA_CERTS"),
        "{v}"
    );
}
