//! `fenced-run pool ...`: the hosted pool's commands live in the `pool` crate's `fenced-run-pool` program (it
//! depends on this crate's runner, so it cannot be linked into `fenced-run`); like a git external subcommand,
//! `fenced-run pool ARGS` executes `fenced-run-pool ARGS`, from beside `fenced-run` or else from PATH.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `fenced-run pool`: everything after `pool`, passed on unchanged.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The pool command and its arguments (`fenced-run pool --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The program that carries out `fenced-run pool`.
pub const POOL_PROGRAM: &str = "fenced-run-pool";

fn program() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(POOL_PROGRAM)))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(POOL_PROGRAM))
}

/// Runs the subcommand: replaces this process with `fenced-run-pool ARGS`.
pub fn run(args: Args) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let prog = program();
    let err = std::process::Command::new(&prog).args(&args.args).exec();
    super::run::fail(
        attestation::cli_io::json_requested(&args.args),
        "pool",
        "pool-program",
        &format!(
            "cannot run {}: {err} (build it with `cargo build -p pool`, or put it on PATH)",
            prog.display()
        ),
        2,
    )
}
