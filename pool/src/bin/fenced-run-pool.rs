//! `fenced-run-pool`: the pool commands (docs/pool.md); `fenced-run pool ARGS` executes this program.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match pool::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let text = attestation::text::escape_text(&e.render().to_string()).into_owned();
            if e.use_stderr() {
                eprint!("{text}");
                return ExitCode::from(2);
            }
            print!("{text}");
            return ExitCode::SUCCESS;
        }
    };
    pool::cli::main_with(cli)
}
