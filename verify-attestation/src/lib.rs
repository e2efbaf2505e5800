//! The `verify-attestation` CLI: argument parsing, reading files, printing tables and JSON, fetching collateral.
//! Every check it prints is `verifier_lib`'s; this crate only gathers the inputs and shows the results.

pub mod cli;
