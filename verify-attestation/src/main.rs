//! `verify-attestation`: a thin shell over `verifier_lib`. Exit 0 verified, 1 rejected, 2 unusable input.

use std::process::ExitCode;
use verify_attestation::cli;
use verify_attestation::cli::app::Command;
use verify_attestation::cli::exit::Exit;

/// The static build (`scripts/build-verifier.sh`, musl) allocates with dlmalloc: musl's own malloc returns memory
/// to the kernel after a few frees, so a verification paid for about 180 `mmap`/`munmap` calls; glibc's malloc
/// does not, and is kept where the binary links glibc.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    let cli = match cli::app::parse_env() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own message names the argument as given; with `--json` anywhere before `--` it becomes
            // the tool's one JSON error object on stdout.
            // The message is printed there; the code is decided in cli::exit: a usage error is unusable input,
            // `--help` and `--version` a success.
            let printed_an_error = attestation::cli_io::parse_failure(
                "verified",
                e.use_stderr(),
                &e.render().to_string(),
            ) != 0;
            return if printed_an_error {
                Exit::Unusable
            } else {
                Exit::Success
            }
            .into();
        }
    };
    match cli.command {
        Command::SnpReport(args) => cli::snp_report::run(args),
        Command::Evidence(args) => cli::evidence::run(args),
        Command::TdxQuote(args) => cli::tdx_quote::run(args),
        Command::Fetch(args) => cli::fetch::run(args),
        Command::BundleSign(args) => cli::fetch::run_sign(args),
        Command::Show(args) => cli::show::run(args),
    }
}
