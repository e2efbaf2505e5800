//! `guest-agent`: the guest's init and job agent. The VM job protocol is not built yet; today it runs the fence
//! helper when re-executed as one, and `guest-agent fence JOB.toml|BUNDLE` runs intake and then the job in the process tier and prints
//! the verdict JSON (the same code the VM will run).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The re-executed fence helper must start before any thread exists.
    guest::fence::helper::dispatch();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, job] if cmd == "fence" => {
            let opts = guest::fence::run::RunOptions::new(
                PathBuf::from("/proc/self/exe"),
                guest::fence::run::random_nonce(),
            );
            // Intake again in here: the guest trusts no host.
            let v = match guest::fence::run::run_input(std::path::Path::new(job), &opts) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!(
                        "guest-agent: {}: {}",
                        attestation::text::escape(job),
                        attestation::text::escape(&e)
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
                "usage: guest-agent fence JOB.toml   (the VM job protocol is not implemented yet)"
            );
            ExitCode::from(2)
        }
    }
}
