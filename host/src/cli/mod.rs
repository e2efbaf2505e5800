//! The subcommands of `fenced-run`, one module each; the binary only dispatches.

/// `println!` for what the commands print on stdout, without its panic when stdout is a pipe that was closed
/// (`fenced-run demo | head`): a closed pipe ends the printing, not the run (which still cleans up after
/// itself); any other write error is reported once on stderr.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` as [`outln!`] does it.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

pub mod demo;
pub mod doctor;
pub mod image;
pub mod intake;
pub mod pool;
pub mod run;
pub mod view;
pub mod vm;

/// The operator's configuration named by `--operator-config` (the built-in defaults without one), or a
/// message naming the flag and the file.
pub fn operator_policy(
    path: Option<&std::path::Path>,
) -> Result<::intake::operator::OperatorPolicy, String> {
    match path {
        None => Ok(::intake::operator::OperatorPolicy::default()),
        Some(p) => ::intake::operator::OperatorPolicy::load(p)
            .map_err(|e| format!("--operator-config: {e}")),
    }
}

/// Parses a founder's nonce given as hex: 16 to 64 bytes, as the evidence binding requires (the same rule as
/// `verify-attestation evidence --nonce`), so a run never produces evidence no founder could verify.
pub fn parse_nonce(hex_text: &str) -> Result<Vec<u8>, attestation::binding::NonceTextError> {
    attestation::binding::parse_nonce_hex(hex_text)
}

/// Writes to stdout for [`outln!`] and [`out!`]: a broken pipe is ignored, as is everything printed after it;
/// any other error is named once on stderr.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    static FAILED: AtomicBool = AtomicBool::new(false);
    if FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        FAILED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("fenced-run: cannot write to stdout: {e}");
        }
    }
}
