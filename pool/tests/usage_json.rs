//! The pool's side of the one output contract (docs/cli.md): with `--json`, a usage error of `fenced-run-pool` is
//! one JSON object on stdout with exit 2, as for every other tool. Needs no server.

use std::process::Command;

const POOL: &str = env!("CARGO_BIN_EXE_fenced-run-pool");

#[test]
fn usage_errors_with_json_print_one_json_object() {
    let cases: &[&[&str]] = &[
        &["--json"],
        &["status", "--json"],
        &["submit", "--json", "--bogus"],
        &["worker", "--json"],
        &["coordinator", "--json"],
    ];
    for args in cases {
        let o = Command::new(POOL)
            .args(*args)
            .output()
            .expect("run fenced-run-pool");
        let stdout = String::from_utf8_lossy(&o.stdout);
        let j: serde_json::Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not one JSON object ({e}): {stdout}"));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stdout}");
        assert_eq!(j["ok"], false, "{args:?}: {j}");
        assert_eq!(j["error"]["check"], "usage", "{args:?}: {j}");
        assert!(
            j["error"]["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{args:?}: {j}"
        );
    }
}
