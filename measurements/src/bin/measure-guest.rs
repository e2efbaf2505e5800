//! `measure-guest`: expected launch measurements (not built yet: it refuses to run rather than pretend).

fn main() -> std::process::ExitCode {
    eprintln!("measure-guest: not implemented yet");
    std::process::ExitCode::from(2)
}
