//! Reading a subcommand's inputs: files capped in size, the main input sniffed for its kind, `--crl`, `--at`.
//! A refusal is printed through [`super::exit`] and carried as its exit code.

use std::path::Path;
use std::process::ExitCode;

use super::exit::unusable;
use super::kind;

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
            .map_err(|e| unusable(json, "input", format!("{flag}: {e}"))),
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

/// Reads the main input of a subcommand (`-` is standard input), decodes it when it was given as hex or base64
/// text, and refuses it with a hint when it is plainly another kind of file than `wanted` (a TDX quote given
/// to `snp-report`, a PEM or JSON file given as evidence, ...). `Err` carries exit 2 after printing why.
pub(crate) fn read_main_input(
    json: bool,
    what: &str,
    path: &Path,
    wanted: kind::Kind,
) -> Result<Vec<u8>, ExitCode> {
    main_input(what, path, wanted).map_err(|(check, e)| unusable(json, check, e))
}

/// [`read_main_input`] without the printing: `Err` is the check name and what is wrong.
pub(crate) fn main_input(
    what: &str,
    path: &Path,
    wanted: kind::Kind,
) -> Result<Vec<u8>, (&'static str, String)> {
    let raw = read_input(path).map_err(|e| ("input", format!("{what}: {e}")))?;
    let (bytes, _encoding) = kind::decode_text(&raw);
    let found = kind::sniff(&bytes);
    if let Some(hint) = kind::wrong_kind_hint(&found, &wanted) {
        return Err((
            "input-kind",
            format!(
                "{what} {}: {hint}",
                attestation::text::shown(path.display())
            ),
        ));
    }
    Ok(bytes)
}

/// Reads `--crl FILE` and checks that it holds at least one parsable DER or PEM CRL: anything else is unusable
/// input (exit 2) naming the file and what it holds instead, never a failed check of the chain.
pub(crate) fn read_crl(json: bool, path: Option<&Path>) -> Result<Option<Vec<u8>>, ExitCode> {
    crl_input(path).map_err(|(check, e)| unusable(json, check, e))
}

/// [`read_crl`] without the printing: `Err` is the check name and what is wrong.
pub(crate) fn crl_input(path: Option<&Path>) -> Result<Option<Vec<u8>>, (&'static str, String)> {
    let Some(p) = path else {
        return Ok(None);
    };
    let bytes = read_input(p).map_err(|e| ("input", format!("--crl: {e}")))?;
    let shown = attestation::text::shown(p.display());
    let not_crl = |why: String| {
        let found = kind::sniff(&bytes);
        let what = match found {
            kind::Kind::Binary | kind::Kind::Text => String::new(),
            k => format!(" (the file is {})", k.describe()),
        };
        (
            "input-kind",
            format!("--crl {shown}: not a CRL{what}: {why}"),
        )
    };
    verifier_lib::sev_snp::check_crl_file(&bytes).map_err(|e| not_crl(e.to_string()))?;
    Ok(Some(bytes))
}

/// Parses a verification time: RFC 3339 (`2025-01-01T00:00:00Z`) or Unix seconds.
pub fn parse_time(s: &str) -> Result<time::OffsetDateTime, String> {
    if let Ok(secs) = s.parse::<i64>() {
        return time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| format!("`{s}`: {e}"));
    }
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{s}` is neither RFC 3339 nor Unix seconds ({e})"))
}
