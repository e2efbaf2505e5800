//! `fenced-run`: the host CLI. Exit 0 judged or accepted, 1 refused, 2 unusable input.

use clap::{Parser, Subcommand};
use host::cli;
use std::process::ExitCode;

/// Run a stranger's tests in a fence and bind the verdict to an attestation report.
#[derive(Parser, Debug)]
#[command(name = "fenced-run", version, about, long_about = None)]
struct Cli {
    /// Where the vm tier's files are kept: the static agent, the kernel, the guest image (default
    /// $FENCED_RUN_DATA_DIR, else the checkout's target/ in a build tree, else $XDG_DATA_HOME/fenced-run or
    /// ~/.local/share/fenced-run; docs/install.md).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job on an embedded demo bundle: intake, the fence, evidence, verification, end to end.
    Demo(cli::demo::Args),
    /// Run a job (a job file or a bundle) in the fence and print its verdict.
    Run(cli::run::Args),
    /// Run intake stages 1-5 on a bundle (nothing is executed) and print every finding.
    Intake(cli::intake::Args),
    /// Build the vm tier's guest image (kernel, initramfs with guest-agent as /init, manifest).
    Image(cli::image::Args),
    /// The vm tier's host dialer, started by QEMU per install-phase connection (not for direct use).
    #[command(name = "vm-dialer", hide = true)]
    VmDialer(cli::vm::DialerArgs),
    /// Verify evidence and show the run as a page in a browser, on loopback only (docs/viewer.md).
    View(cli::view::Args),
    /// What this host can run (process, vm, sev-snp, tdx), and for each what is missing.
    Doctor(cli::doctor::Args),
    /// The hosted pool (Temporal + PostgreSQL): runs `fenced-run-pool ARGS` (docs/pool.md).
    Pool(cli::pool::Args),
}

fn main() -> ExitCode {
    // The re-executed fence helper must start before clap, tokio or any thread exists.
    guest::fence::helper::dispatch();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own message names the argument as given; with `--json` anywhere before `--` it becomes
            // the tool's one JSON error object on stdout.
            let code =
                attestation::cli_io::parse_failure("ok", e.use_stderr(), &e.render().to_string());
            return ExitCode::from(code);
        }
    };
    if let Some(d) = cli.data_dir {
        host::image::datadir::set_flag(d);
    }
    match cli.command {
        Command::Demo(args) => cli::demo::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Intake(args) => cli::intake::run(args),
        Command::Image(args) => cli::image::run(args),
        Command::VmDialer(args) => cli::vm::dialer_main(args),
        Command::View(args) => cli::view::run(args),
        Command::Doctor(args) => cli::doctor::run(args),
        Command::Pool(args) => cli::pool::run(args),
    }
}
