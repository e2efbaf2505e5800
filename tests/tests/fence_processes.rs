//! Attack suite, processes: daemons, a SIGTERM-ignoring process, a fork bomb, a memory bomb, a disk fill,
//! endless output, a grandchild holding stdout, an install-phase daemon, a time-out. Each asserts the named
//! outcome and that nothing of the run is left on the host.

use fenced_run_tests::fence::{skip, skip_without_limits, Case};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

fn job(test: &str, timeout: u64, limits: &str) -> String {
    format!("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = {timeout}\n{limits}\n")
        .replace("{test}", test)
}

#[test]
fn daemons_and_sigterm_ignorers_are_killed_and_counted() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "setsid sleep 917001 &\n(sleep 917002 &)\nsh -c 'trap \"\" TERM; exec sleep 917003' &\necho '3 passed, 0 failed'\n",
    );
    c.job(&job("", 30, ""));
    let r = c.run();
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let p = &r.verdict["processes"];
    assert!(
        p["running_at_end"].as_u64().expect("running") >= 3,
        "{}",
        r.dump()
    );
    assert!(p["started"].as_u64().expect("started") >= 4, "{}", r.dump());
    assert_eq!(p["left_after_teardown"], 0, "{}", r.dump());
    c.assert_clean(&r, &["917001", "917002", "917003"]);
}

#[test]
fn fork_bomb_is_environment_exhausted() {
    if skip_without_limits() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "b() { b | b & }\nb\nsleep 1\necho '1 passed, 0 failed'\n",
    );
    c.job(&job("", 30, "[limits]\npids = 32"));
    let r = c.run();
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    assert_eq!(r.verdict["processes"]["left_after_teardown"], 0);
    c.assert_clean(&r, &["b | b"]);
}

#[test]
fn memory_bomb_is_environment_exhausted() {
    if skip_without_limits() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "python3 -c 'x = []\nwhile True: x.append(bytearray(8 << 20))'\necho '1 passed, 0 failed'\n");
    c.job(&job("", 60, "[limits]\nmemory_mib = 64"));
    let r = c.run();
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    c.assert_clean(&r, &["bytearray(8 << 20)"]);
}

#[test]
fn disk_fill_is_environment_exhausted() {
    if skip_without_limits() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1\necho '1 passed, 0 failed'\n",
    );
    c.job(&job("", 60, "[limits]\ndisk_mib = 16"));
    let r = c.run();
    assert_eq!(r.outcome(), "environment_exhausted", "{}", r.dump());
    c.assert_clean(&r, &[]);
}

#[test]
fn endless_output_is_budget_expired_with_a_bounded_tail() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "yes 917010\n");
    c.job(&job("", 2, ""));
    let r = c.run();
    assert_eq!(r.outcome(), "budget_expired", "{}", r.dump());
    assert!(
        r.test_tail().len() <= 3 * 64 * 1024,
        "tail of {} bytes",
        r.test_tail().len()
    );
    assert!(r.test_tail().contains("917010"));
    c.assert_clean(&r, &["917010"]);
}

#[test]
fn timeout_kills_the_whole_namespace() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "sleep 917020 &\nsleep 917021\n");
    c.job(&job("", 1, ""));
    let t = std::time::Instant::now();
    let r = c.run();
    assert_eq!(r.outcome(), "budget_expired", "{}", r.dump());
    assert!(t.elapsed().as_secs() < 20, "the run took {:?}", t.elapsed());
    assert!(
        r.verdict["processes"]["running_at_end"]
            .as_u64()
            .expect("n")
            >= 2,
        "{}",
        r.dump()
    );
    c.assert_clean(&r, &["917020", "917021"]);
}

#[test]
fn grandchild_holding_stdout_does_not_hold_the_run() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "(sleep 917030 &)\necho '1 passed, 0 failed'\n");
    c.job(&job("", 600, ""));
    let t = std::time::Instant::now();
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert!(
        t.elapsed().as_secs() < 60,
        "the run waited for the grandchild: {:?}",
        t.elapsed()
    );
    c.assert_clean(&r, &["917030"]);
}

#[test]
fn install_phase_daemon_does_not_survive_the_cut() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("install.sh", "setsid sh -c 'while :; do date +%s%N > /work/repo/beacon; sleep 0.05; done; : 917040' &\nsleep 0.3\n");
    c.repo_file(
        "test.sh",
        "a=$(cat beacon); sleep 0.5; b=$(cat beacon)\n\
         n=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'while [:]')\n\
         echo \"beacon $a $b procs $n\"\n\
         if [ -n \"$a\" ] && [ \"$a\" = \"$b\" ] && [ \"$n\" -eq 0 ]; then echo '1 passed, 0 failed'; else echo '0 passed, 1 failed'; exit 1; fi\n",
    );
    c.job("[repository]\npath = \"repo\"\n[install]\ncommand = \"sh install.sh\"\ntimeout_seconds = 30\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 30\n");
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert!(r.verdict["install"]["exit_code"] == 0, "{}", r.dump());
    assert!(
        r.verdict["test"]["sandbox"].to_string().contains("cut: "),
        "{}",
        r.dump()
    );
    assert_eq!(r.verdict["processes"]["left_after_teardown"], 0);
    c.assert_clean(&r, &["917040"]);
}

/// Polls `cond` until it holds or `secs` pass; returns whether it held.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond()
}

#[test]
fn a_killed_runner_takes_its_sandbox_down_and_the_next_run_sweeps_its_remains() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file("test.sh", "sleep 917600\n");
    c.job(&job("", 600, ""));
    let mut first = c.spawn();
    let first_pid = first.id();
    assert!(
        wait_for(30, || !fenced_run_tests::fence::processes_with(&["917600"])
            .is_empty()),
        "the sandboxed command never started"
    );
    first.kill().expect("kill the runner");
    let _ = first.wait();
    // PR_SET_PDEATHSIG chain: runner -> helper -> PID 1 -> the whole namespace.
    assert!(
        wait_for(10, || fenced_run_tests::fence::processes_with(&["917600"])
            .is_empty()),
        "the sandbox outlived its runner: {:?}",
        fenced_run_tests::fence::processes_with(&["917600"])
    );
    // Exiting tasks leave their cgroup a moment after they are gone from /proc.
    let empty = |d: &std::path::PathBuf| {
        std::fs::read_to_string(d.join("cgroup.procs"))
            .map(|t| t.trim().is_empty())
            .unwrap_or(true)
    };
    assert!(wait_for(10, || fenced_run_tests::fence::cgroups_of(
        first_pid
    )
    .iter()
    .all(empty)));
    // The next run in the same TMPDIR removes the dead runner's directory, mount and cgroups.
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job(&job("", 60, ""));
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    assert!(
        fenced_run_tests::fence::cgroups_of(first_pid).is_empty(),
        "{:?}",
        fenced_run_tests::fence::cgroups_of(first_pid)
    );
    c.assert_clean(&r, &["917600"]);
}
