//! `verify-attestation tdx-quote` (not built yet: it refuses to run rather than pretend).

use std::process::ExitCode;

/// Arguments of this subcommand.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input file.
    pub input: std::path::PathBuf,
}

/// Runs the subcommand; this one is not implemented yet and exits 2.
pub fn run(_args: Args) -> ExitCode {
    eprintln!("verify-attestation tdx-quote: not implemented yet");
    ExitCode::from(2)
}
