//! A test build of `fenced-run run` for the workspace tests: the same helper dispatch and the same
//! `host::cli::run` code as the real binary, with a hand-rolled argument parser (no clap) so that the
//! integration tests of this crate can find it through `CARGO_BIN_EXE_fenced-run-e2e`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    guest::fence::helper::dispatch();
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("run") {
        eprintln!("usage: fenced-run-e2e run JOB [--json] [--evidence OUT] [--nonce HEX]");
        return ExitCode::from(2);
    }
    let mut job = None;
    let mut json = false;
    let mut evidence = None;
    let mut nonce = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--evidence" => evidence = args.next().map(PathBuf::from),
            "--nonce" => nonce = args.next(),
            _ if job.is_none() => job = Some(PathBuf::from(a)),
            other => {
                eprintln!("fenced-run-e2e: unexpected argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(job) = job else {
        eprintln!("fenced-run-e2e: missing JOB");
        return ExitCode::from(2);
    };
    host::cli::run::run(host::cli::run::Args {
        job,
        isolation: "process".into(),
        json,
        evidence,
        nonce,
    })
}
