//! Where the real hardware vectors live, for the tests of every crate: `$FENCED_RUN_VECTORS`, by default
//! `../shared/vectors` beside the workspace. A missing vector is skipped with a printed reason, unless
//! `FENCED_RUN_REQUIRE_VECTORS=1` (as in CI), where it fails the test.

use std::path::PathBuf;

/// The vectors root: `$FENCED_RUN_VECTORS`, else `../shared/vectors` beside the workspace.
pub fn root() -> PathBuf {
    match std::env::var_os("FENCED_RUN_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"),
    }
}

/// Whether a missing vector or oracle must fail the run (`FENCED_RUN_REQUIRE_VECTORS=1`).
pub fn required() -> bool {
    std::env::var("FENCED_RUN_REQUIRE_VECTORS").as_deref() == Ok("1")
}

/// Prints `skipped: <why>` to stderr, or panics with `why` when vectors are [`required`]. For tests only.
///
/// The line is written to the stderr handle, not through `eprintln!`, so the test harness does not capture it
/// and a user sees why a test passed without checking anything.
pub fn skip(why: &str) {
    use std::io::Write;
    assert!(!required(), "FENCED_RUN_REQUIRE_VECTORS=1 but {why}");
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

/// The directory `sub` under the [`root`] (`"snp"`, `"tdx/<vector>"`), or `None` after [`skip`] when absent.
pub fn dir(sub: &str) -> Option<PathBuf> {
    let d = root().join(sub);
    if d.is_dir() {
        Some(d)
    } else {
        skip(&format!("no vectors at {}", d.display()));
        None
    }
}
