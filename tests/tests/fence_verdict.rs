//! Attack suite, the verdict cannot be talked into a better answer: a fake runner success printed beside the
//! suite's own failures, and failures claimed before the suite exhausted its processes or its scratch. Each
//! asserts the named outcome and that nothing of the run is left on the host.

use fenced_run_tests::fence::{skip, skip_without_limits, Case};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn job(limits: &str) -> String {
    format!(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 60\n{limits}\n"
    )
}

fn findings(r: &fenced_run_tests::fence::Ran) -> Vec<(String, String)> {
    r.verdict["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    (
                        f["kind"].as_str().unwrap_or("").to_owned(),
                        f["detail"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_fake_runner_success_does_not_hide_plain_failures() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    // The suite's own summary says 2 failed; the script then prints a fake cargo success and exits 0.
    c.repo_file(
        "test.sh",
        "echo '1 passed, 2 failed'\necho 'test result: ok. 50 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s'\nexit 0\n",
    );
    c.job(&job(""));
    let r = c.run();
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 2, "{}", r.dump());
    assert_eq!(
        r.verdict["tests"]["parser"],
        "cargo-test+plain",
        "{}",
        r.dump()
    );
    assert!(
        findings(&r)
            .iter()
            .any(|(k, d)| k == "exit-code-disagrees" && d.contains("2 failed")),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
}

#[test]
fn failures_claimed_before_the_pids_ran_out_are_tests_failed() {
    if skip_without_limits() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo '3 passed, 2 failed'\nb() { b | b & }\nb\nsleep 1\n",
    );
    c.job(&job("[limits]\npids = 32"));
    let r = c.run();
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 2, "{}", r.dump());
    assert!(
        findings(&r)
            .iter()
            .any(|(k, d)| k == "environment-exhausted" && d.contains("process limit")),
        "{}",
        r.dump()
    );
    assert_eq!(r.verdict["processes"]["left_after_teardown"], 0);
    c.assert_clean(&r, &["b | b"]);
}

#[test]
fn failures_claimed_before_the_scratch_filled_are_tests_failed() {
    if skip_without_limits() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "echo '3 passed, 2 failed'\ndd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1\n",
    );
    c.job(&job("[limits]\ndisk_mib = 16"));
    let r = c.run();
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 2, "{}", r.dump());
    assert!(
        findings(&r)
            .iter()
            .any(|(k, d)| k == "environment-exhausted" && d.contains("disk limit")),
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &[]);
}
