//! `fenced-run-pool`: the pool commands (docs/pool.md); `fenced-run pool ARGS` executes this program.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match pool::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // As the other tools: with `--json` anywhere before `--`, a usage error is one JSON object on stdout.
            let code =
                attestation::cli_io::parse_failure("ok", e.use_stderr(), &e.render().to_string());
            return ExitCode::from(code);
        }
    };
    pool::cli::main_with(cli)
}
