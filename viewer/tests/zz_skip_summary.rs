//! The suite's closing line: how many tests this `cargo test` run skipped for a missing component, by kind, and
//! why. Every skipping test calls `attestation::vectors::skip_for`, which appends a record under target/; this
//! test reads back the records of its own run and prints one line.
//!
//! It must run after every test that can skip. Cargo runs the test binaries of `cargo test --workspace`
//! package by package in the order of the package names, and within a package the library's unit tests, then
//! the binaries', then `tests/*.rs` by file name; `viewer` is the last package name of the workspace and this
//! file the last of its tests. `the_closing_line_runs_last` checks both, so a new package or test file that
//! would sort after it fails here instead of going uncounted.

use attestation::vectors::{required_but_skipped, skip_summary, skips_of_this_run};
use std::io::Write;
use std::path::Path;

#[test]
fn summary_of_skipped_tests_by_kind() {
    let line = skip_summary();
    // Written to the stderr handle, not through the captured `eprintln!`, so it shows in the run's output.
    let _ = writeln!(std::io::stderr(), "{line}");
    let required = required_but_skipped(&skips_of_this_run());
    assert!(
        required.is_empty(),
        "{} set, but tests skipped: {line}",
        required
            .iter()
            .map(|k| format!("{}=1", k.require_var()))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The quoted strings of the workspace's `members = [...]`.
fn members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members = [") else {
        panic!("no `members = [` in the workspace's Cargo.toml");
    };
    let rest = &manifest[start + "members = [".len()..];
    let list = &rest[..rest.find(']').expect("the members list ends")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The `name` of a package manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let package = &manifest[manifest.find("[package]")?..];
    package.lines().find_map(|l| {
        let v = l
            .trim()
            .strip_prefix("name")?
            .trim_start()
            .strip_prefix('=')?;
        Some(v.trim().trim_matches('"').to_string())
    })
}

#[test]
fn the_closing_line_runs_last() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ws = here.join("..");
    let read =
        |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let members = members(&read(&ws.join("Cargo.toml")));
    assert!(members.len() > 1, "{members:?}");
    let mut names: Vec<String> = members
        .iter()
        .map(|m| {
            let p = ws.join(m).join("Cargo.toml");
            package_name(&read(&p)).unwrap_or_else(|| panic!("{}: no package name", p.display()))
        })
        .collect();
    names.sort();
    assert_eq!(
        names.last().map(String::as_str),
        Some(env!("CARGO_PKG_NAME")),
        "cargo runs the packages' tests in name order; the closing skip line must be in the last: {names:?}"
    );
    let mut tests: Vec<String> = std::fs::read_dir(here.join("tests"))
        .expect("viewer/tests")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    tests.sort();
    assert_eq!(
        tests.last().map(String::as_str),
        Some("zz_skip_summary.rs"),
        "the closing skip line must be the package's last test file: {tests:?}"
    );
}
