//! The one-line summary of the vector and oracle checks this `cargo test` run skipped, and why. Cargo runs
//! test binaries by package and then by name, so this one (the last name of the last package) runs after every
//! test that could skip; it reads the records `attestation::vectors::skip` appended under target/.

use std::io::Write;

#[test]
fn summary_of_skipped_vector_and_oracle_checks() {
    let line = attestation::vectors::skip_summary();
    // Written to the stderr handle, not through the captured `eprintln!`, so it shows in the run's output.
    let _ = writeln!(std::io::stderr(), "{line}");
    if attestation::vectors::required() {
        assert!(
            attestation::vectors::skips_of_this_run().is_empty(),
            "FENCED_RUN_REQUIRE_VECTORS=1 but checks were skipped: {line}"
        );
    }
}
