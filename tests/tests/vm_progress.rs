//! Progress of a vm-tier run, through the command (issue 36: a line at least every few seconds on every step): a
//! job whose install phase and test phase each take about 12 s (`sleep 12`), run with `fenced-run run --isolation
//! vm` and stderr not a terminal (progress `auto`, so plain lines), must show on stderr at least two lines for
//! each of those phases naming it, among them the guest's own phase forwarded over the job channel (`Progress`
//! frames); stdout carries the verdict and no progress line. What is asserted is that the lines exist, not when
//! they came.
//!
//! Skips with `skipped: ...` on stderr where QEMU, the kernel or root is missing, unless FENCED_RUN_REQUIRE_VM=1.

use fenced_run_tests::vm;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

/// The lines of `err` that name `phase`: the host's step lines (`vm          PHASE: ...`, `vm          still
/// PHASE: ...`) and the guest's (`guest: its PHASE phase started`, `the guest is in its PHASE phase`).
fn lines_naming<'a>(err: &'a str, phase: &str) -> Vec<&'a str> {
    err.lines()
        .filter(|l| l.starts_with("vm          "))
        .filter(|l| {
            l.starts_with(&format!("vm          {phase}: "))
                || l.starts_with(&format!("vm          still {phase}: "))
                || l.contains(&format!("its {phase} phase"))
        })
        .collect()
}

#[test]
fn a_long_install_and_test_phase_each_show_several_lines_naming_them_and_the_guests_phase() {
    if vm::missing(&[]).is_some() {
        return;
    }
    let image = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image");
    vm::build_image(BIN, None, &image);
    let jobs = tempfile::tempdir().expect("tmp");
    let dir = jobs.path().join("slow");
    std::fs::create_dir_all(dir.join("repo")).expect("repo");
    std::fs::write(
        dir.join("job.toml"),
        "[repository]\npath = \"repo\"\n\
         [install]\ncommand = \"sleep 12\"\ntimeout_seconds = 120\n\
         [test]\ncommand = \"sh t.sh\"\ntimeout_seconds = 120\n",
    )
    .expect("job");
    std::fs::write(
        dir.join("repo/t.sh"),
        "sleep 12\necho '1 passed, 0 failed'\n",
    )
    .expect("t.sh");
    let o = Command::new(BIN)
        .args(["run", "--isolation", "vm", "--image"])
        .arg(&image)
        .arg(&dir)
        .output()
        .expect("run");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("tests_passed"), "{out}\n{err}");
    // stdout is the verdict's (its `vm          tcg (agent ready ...)` summary line included): no progress line.
    let steps = [
        "boot", "attest", "transfer", "intake", "install", "cut", "test", "shutdown",
    ];
    let progress_line = |l: &str| {
        l.starts_with("vm          still ")
            || l.starts_with("vm          guest: ")
            || l.starts_with("vm          done in ")
            || steps
                .iter()
                .any(|s| l.starts_with(&format!("vm          {s}: ")))
    };
    assert!(
        !out.lines().any(progress_line),
        "a progress line on stdout: {out}\n{err}"
    );
    for phase in ["install", "test"] {
        let named = lines_naming(&err, phase);
        assert!(
            named.len() >= 2,
            "fewer than two lines name the {phase} phase:\n{err}"
        );
        // The guest's own report of the phase came over the channel.
        assert!(
            named
                .iter()
                .any(|l| l.contains(&format!("guest: its {phase} phase started"))),
            "the guest's {phase} phase was not forwarded:\n{err}"
        );
        assert!(
            named.iter().any(|l| l.contains(&format!("still {phase}: "))
                && l.contains(&format!("the guest is in its {phase} phase"))),
            "no \"still\" line with the guest's {phase} phase:\n{err}"
        );
    }
    // Every step of the host's side is named as it starts.
    for step in steps {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("vm          {step}: "))),
            "no line for the {step} step:\n{err}"
        );
    }
}
