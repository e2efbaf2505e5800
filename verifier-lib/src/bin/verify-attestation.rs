//! `verify-attestation`: a thin shell over `verifier_lib`. Exit 0 verified, 1 rejected, 2 unusable input.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use verifier_lib::cli;

/// Verify fenced-run evidence, SEV-SNP attestation reports and TDX quotes.
#[derive(Parser, Debug)]
#[command(name = "verify-attestation", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Verify a raw SEV-SNP ATTESTATION_REPORT against its VCEK/VLEK chain and a policy.
    SnpReport(cli::snp_report::Args),
    /// Verify a fenced-run evidence bundle: report, key binding, verdict signature, nonce, measurement.
    Evidence(cli::evidence::Args),
    /// Verify an Intel TDX DCAP quote against its PCK chain, collateral and a policy.
    TdxQuote(cli::tdx_quote::Args),
    /// Fetch (or convert) the collateral a report, quote or evidence needs: KDS/PCS, verified, cached, bundled.
    Fetch(cli::fetch::Args),
    /// Add an auditor's Ed25519 signature to a collateral bundle.
    BundleSign(cli::fetch::SignArgs),
    /// Decode a report, quote or evidence WITHOUT verifying it: every field, TCBs decoded, the verdict.
    Show(cli::show::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own message names the argument as given; with `--json` anywhere before `--` it becomes
            // the tool's one JSON error object on stdout.
            let code = attestation::cli_io::parse_failure(
                "verified",
                e.use_stderr(),
                &e.render().to_string(),
            );
            return ExitCode::from(code);
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
