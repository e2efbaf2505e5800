//! Task bundles end to end in the process tier: a local registry on loopback serving a base image made here,
//! stage 6 building each bundle's environment with buildah (rootless ids, chroot isolation, network only
//! through the egress proxy), the solution in the first phase, the bundle's pristine tests/test.sh in the
//! second; the verdict's image digest and test tree checked, and the evidence verified.
//!
//! Skips with a printed reason where buildah, docker-registry or root are missing, unless
//! FENCED_RUN_REQUIRE_TASKS=1 (set by .ci/run).

use fenced_run_tests::task::{skip_reason, Bundle, Registry};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const NONCE: &str = "0123456789abcdef0123456789abcdef";

fn run(b: &Bundle, reg: &Registry, evidence: Option<&std::path::Path>) -> serde_json::Value {
    let mut c = Command::new(BIN);
    c.arg("run")
        .arg(b.path())
        .args(["--isolation", "process", "--json", "--nonce", NONCE])
        .args(reg.args());
    if let Some(e) = evidence {
        c.arg("--evidence").arg(e);
    }
    let out = c.output().expect("run fenced-run");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no verdict: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn dockerfile(reg: &Registry, extra: &str) -> String {
    format!(
        "FROM base@{}\nRUN echo built > /etc/task-env\n{extra}",
        reg.base_digest
    )
}

/// One registry for every scenario (started and stopped here), so nothing outlives the test.
#[test]
fn task_bundles_pass_fail_and_refuse_a_build_that_reaches_out() {
    if skip_reason().is_some() {
        return;
    }
    let reg = Registry::start();

    // 1. Passing: the solution fixes add.sh; tests/test.sh runs from the pristine copy on the built image.
    let pass = Bundle::standard(
        "[task]\nname = \"add\"\n[solution]\ncommand = \"sh solution/solve.sh\"\n[test]\ntimeout_seconds = 60\n",
        &dockerfile(&reg, ""),
    );
    pass.file("solution/solve.sh", "echo 'echo $(($1 + $2))' > add.sh\n");
    let evidence = pass.path().join("..").join(format!(
        "{}.evidence",
        pass.path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("task")
    ));
    let v = run(&pass, &reg, Some(&evidence));
    assert_eq!(v["outcome"], "tests_passed", "{v:#}");
    assert_eq!(v["tests"]["passed"], 1, "{v:#}");
    let digest = v["image"]["digest"].as_str().unwrap_or_default();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{v:#}");
    let root_hash = v["image"]["root_hash"].as_str().unwrap_or_default();
    assert_eq!(root_hash.len(), 64, "{v:#}");
    let tests_tree = guest::fence::repo::tree_hash(&pass.path().join("tests")).expect("tree");
    assert_eq!(v["inputs"]["test_tree"], tests_tree.as_str(), "{v:#}");
    let install_lines = v["install"]["sandbox"].to_string();
    assert!(!install_lines.contains("/work/tests"), "{install_lines}");
    assert!(
        v["test"]["sandbox"].to_string().contains("/work/tests"),
        "{v:#}"
    );
    // The founder's check: sim evidence verifies, and pins the tests' tree.
    let verify = |tree: &str| {
        Command::new(VERIFY)
            .arg("evidence")
            .arg(&evidence)
            .args(["--allow-simulated", "--any-measurement", "--nonce", NONCE])
            .args(["--protect-tree", tree, "--json"])
            .output()
            .expect("verify")
    };
    let ok = verify(&tests_tree);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains(digest));
    assert_eq!(verify(&"ab".repeat(20)).status.code(), Some(1));
    // The viewer takes the verdict (with its image digest) and shows the run.
    let page = viewer::Page::from_verdict_json("task.json", v.to_string().as_bytes())
        .expect("the viewer reads a task's verdict");
    let html = viewer::render::Renderer::new(&page, &viewer::docs::Docs::verification()).page();
    assert!(
        html.contains("tests_passed") || html.contains("passed"),
        "{html}"
    );
    let _ = std::fs::remove_file(&evidence);

    // 2. Failing, and cheating: the solution leaves the bug, rewrites a tests/ of its own in the work tree and
    //    tries the path the tests are shown at in the next phase; the pristine tests still judge it.
    let fail = Bundle::standard(
        "[solution]\ncommand = \"sh solution/solve.sh\"\n",
        &dockerfile(&reg, ""),
    );
    fail.file(
        "solution/solve.sh",
        "mkdir -p tests && echo \"echo '1 passed, 0 failed'\" > tests/test.sh\n\
         mkdir -p /work/tests 2>/dev/null && echo 'exit 0' > /work/tests/test.sh 2>/dev/null\n\
         ls /work/tests 2>&1 || echo 'no /work/tests in this phase'\n",
    );
    let v = run(&fail, &reg, None);
    assert_eq!(v["outcome"], "tests_failed", "{v:#}");
    assert!(
        v["output_tail"]["test"]
            .as_str()
            .unwrap_or_default()
            .contains("add.sh 2 3 printed -1"),
        "{v:#}"
    );
    assert!(
        v["output_tail"]["install"]
            .as_str()
            .unwrap_or_default()
            .contains("no /work/tests in this phase"),
        "{v:#}"
    );

    // 3. A build reaching a host outside [environment] allow: refused at stage 6 with the egress log.
    let reach = Bundle::standard(
        "[environment]\nallow = [\"mirror.example:443\"]\n",
        &dockerfile(
            &reg,
            "RUN wget -q -O /tmp/x http://not-allowed.example/tool\n",
        ),
    );
    let v = run(&reach, &reg, None);
    assert_eq!(v["outcome"], "refused", "{v:#}");
    assert_eq!(v["refusal"]["stage"], "environment", "{v:#}");
    let text = v.to_string();
    assert!(
        text.contains("build-egress-denied") && text.contains("not-allowed.example:80"),
        "{v:#}"
    );
}
