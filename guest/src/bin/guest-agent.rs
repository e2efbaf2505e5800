//! `guest-agent`: the guest's init and job agent. As PID 1 (the `vm` tier's `/init`) it runs the job protocol
//! of docs/vm.md (`guest::agent`); re-executed as the fence helper it runs that; and `guest-agent fence
//! JOB.toml|BUNDLE` runs intake and then the job in the process tier and prints the verdict JSON.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The re-executed fence helper must start before any thread exists.
    guest::fence::helper::dispatch();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if std::process::id() == 1 {
        guest::agent::pid1_main(&args);
    }
    match args.as_slice() {
        [cmd, job] if cmd == "fence" => {
            let opts = guest::fence::run::RunOptions::new(
                PathBuf::from("/proc/self/exe"),
                guest::fence::run::random_nonce(),
            );
            // Intake again in here: the guest trusts no host.
            let v = match guest::fence::input::run_input(std::path::Path::new(job), &opts) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!(
                        "guest-agent: {}: {}",
                        attestation::text::escape(job),
                        attestation::text::escape(&e.to_string())
                    );
                    return ExitCode::from(2);
                }
            };
            println!("{}", attestation::text::json_safe(&v.to_json_pretty()));
            if v.judged {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        _ => {
            eprintln!(
                "usage: guest-agent fence JOB.toml   (as PID 1 it runs the vm tier's job protocol)"
            );
            ExitCode::from(2)
        }
    }
}
