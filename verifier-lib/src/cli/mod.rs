//! The subcommands of `verify-attestation`, one module each; the binary only dispatches.

// Every subcommand prints through these (they shadow std's): a closed stdout is a quiet error exit, not a panic.
macro_rules! println {
    ($($t:tt)*) => {
        attestation::cli_println!($($t)*)
    };
}
macro_rules! print {
    ($($t:tt)*) => {
        attestation::cli_print!($($t)*)
    };
}

pub mod evidence;
pub mod fetch;
pub mod snp_report;
pub mod tdx_quote;

use std::path::Path;
use std::process::ExitCode;

/// Reads the file an optional flag names. `Err` carries the exit (2, unusable input) after printing which
/// flag and file could not be read, as JSON when `json`.
pub(crate) fn read_flag_file(
    json: bool,
    flag: &str,
    path: Option<&Path>,
) -> Result<Option<Vec<u8>>, ExitCode> {
    match path {
        None => Ok(None),
        Some(p) => read_input(p)
            .map(Some)
            .map_err(|e| snp_report::unusable(json, "input", format!("{flag}: {e}"))),
    }
}

/// Reads an input file of at most [`attestation::cli_io::MAX_INPUT`] bytes, checking the size before reading.
pub(crate) fn read_input(path: &Path) -> Result<Vec<u8>, attestation::cli_io::ReadError> {
    attestation::cli_io::read_capped(path, attestation::cli_io::MAX_INPUT)
}

/// The time of `--at`, or now (to the second) when it is absent.
pub(crate) fn at_or_now(at: Option<time::OffsetDateTime>) -> time::OffsetDateTime {
    at.unwrap_or_else(|| {
        let now = time::OffsetDateTime::now_utc();
        now.replace_nanosecond(0).unwrap_or(now)
    })
}
