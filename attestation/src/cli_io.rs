//! Input and output helpers the command-line tools share (`verify-attestation`, `measure-guest`): files are
//! size-checked before they are read into memory, and writing to a closed stdout ends the process quietly with
//! an error exit instead of a panic.

use std::io::{Read, Write};
use std::path::Path;

/// Largest evidence, quote, report, collateral or measurement-set file the tools read (64 MiB): real ones are
/// kilobytes (the evidence CBOR is bounded to 8 MiB by its reader), so anything near this is not one.
pub const MAX_INPUT: u64 = 64 * 1024 * 1024;

/// Exit status when stdout could not be written (a closed pipe, a full disk): quiet, and not 0.
pub const STDOUT_FAILED_EXIT: i32 = 1;

/// Why a capped read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than the limit; nothing was read.
    #[error("{path} is {size} bytes, more than the {limit} bytes accepted; not read")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size (as far as it was seen).
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// Reads `path` if it holds at most `limit` bytes: the size is checked from the metadata before anything is
/// read, and the read itself stops after `limit + 1` bytes (for files that grow, pipes and devices).
/// The path `-` means standard input (read up to the same limit).
pub fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.display().to_string(),
        source,
    };
    if path == Path::new("-") {
        let mut out = Vec::new();
        std::io::stdin()
            .lock()
            .take(limit.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|source| ReadError::Io {
                path: "standard input".into(),
                source,
            })?;
        if out.len() as u64 > limit {
            return Err(ReadError::TooLarge {
                path: "standard input".into(),
                size: out.len() as u64,
                limit,
            });
        }
        return Ok(out);
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_file() && meta.len() > limit {
        return Err(ReadError::TooLarge {
            path: path.display().to_string(),
            size: meta.len(),
            limit,
        });
    }
    let mut out = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(io)?;
    if out.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: path.display().to_string(),
            size: out.len() as u64,
            limit,
        });
    }
    Ok(out)
}

/// Writes `text` to stdout and flushes. If stdout is closed or fails, the process exits with
/// [`STDOUT_FAILED_EXIT`] without a message on stdout (one line on stderr, where it can still be written).
pub fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        let _ = writeln!(std::io::stderr(), "cannot write to stdout: {e}");
        std::process::exit(STDOUT_FAILED_EXIT);
    }
}

/// `println!` for the command-line tools: a closed stdout is an error exit, not a panic. The tools shadow
/// `println!` and `print!` with this and [`cli_print!`] (a `macro_rules!` of the same name at the top of the
/// module), so no output statement can panic.
#[macro_export]
macro_rules! cli_println {
    () => {
        $crate::cli_io::write_stdout("\n")
    };
    ($($t:tt)*) => {
        $crate::cli_io::write_stdout(&format!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` for the command-line tools (see [`cli_println!`]).
#[macro_export]
macro_rules! cli_print {
    ($($t:tt)*) => {
        $crate::cli_io::write_stdout(&format!($($t)*))
    };
}

/// True when the raw command line asks for JSON: `--json` appears before any `--`. The tools use it when their
/// argument parser failed (a usage error), so that even then `--json` gets exactly one JSON object on stdout.
pub fn json_requested<I, S>(args: I) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    args.into_iter()
        .map(|a| a.as_ref().to_owned())
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// The one JSON failure object every tool prints on stdout with `--json` when it cannot go on:
/// `{"<result_key>": false, "error": {"check": CHECK, "detail": DETAIL}, "failures": [the same]}`.
/// `result_key` is the tool's success key (`verified` for verify-attestation, `ok` for the others).
pub fn error_json(result_key: &str, check: &str, detail: &str) -> serde_json::Value {
    let error = serde_json::json!({ "check": check, "detail": detail });
    let mut o = serde_json::Map::new();
    o.insert(result_key.to_owned(), false.into());
    o.insert("error".into(), error.clone());
    o.insert("failures".into(), serde_json::Value::Array(vec![error]));
    serde_json::Value::Object(o)
}

/// A usage error's message as one readable paragraph for [`error_json`]: the parser's rendered text without
/// its `error: ` prefix, trailing blank lines and the `For more information` hint.
pub fn usage_detail(rendered: &str) -> String {
    let text = rendered.trim();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    text.lines()
        .filter(|l| !l.trim_start().starts_with("For more information"))
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a tool does when its argument parser refused the command line (or was asked for `--help` or
/// `--version`): with `--json` in the raw arguments, one JSON object on stdout (`{"<result_key>": false,
/// "error": {"check": "usage", ...}}` for an error, `{"help": TEXT}` for help and version); otherwise the
/// parser's text, escaped, on stderr for an error and stdout for help. Returns the exit code: 2 for an error,
/// 0 for help and version.
pub fn parse_failure(result_key: &str, is_error: bool, rendered: &str) -> u8 {
    let json = json_requested(std::env::args_os().skip(1));
    if json {
        let v = if is_error {
            error_json(result_key, "usage", &usage_detail(rendered))
        } else {
            serde_json::json!({ "help": rendered.trim_end() })
        };
        write_stdout(&format!("{}\n", crate::text::json_safe(&v.to_string())));
    } else if is_error {
        let _ = write!(std::io::stderr(), "{}", crate::text::escape_text(rendered));
    } else {
        write_stdout(&crate::text::escape_text(rendered));
    }
    if is_error {
        2
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_requested_only_before_a_double_dash() {
        assert!(json_requested(["evidence", "--json", "x"]));
        assert!(!json_requested(["evidence", "--", "--json"]));
        assert!(!json_requested(["evidence", "--json-x"]));
        let v = error_json("verified", "usage", "bad flag");
        assert_eq!(v["verified"], false);
        assert_eq!(v["error"]["check"], "usage");
        assert_eq!(v["failures"][0], v["error"]);
        assert_eq!(
            usage_detail("error: unexpected argument '--x' found\n\nUsage: t\n\nFor more information, try '--help'.\n"),
            "unexpected argument '--x' found\nUsage: t"
        );
    }

    #[test]
    fn a_sparse_file_above_the_limit_is_refused_without_reading() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("big");
        let f = std::fs::File::create(&p).expect("create");
        f.set_len(1 << 30).expect("sparse 1 GiB");
        match read_capped(&p, MAX_INPUT) {
            Err(ReadError::TooLarge { size, limit, .. }) => {
                assert_eq!(size, 1 << 30);
                assert_eq!(limit, MAX_INPUT);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        std::fs::write(&p, b"small").expect("write");
        assert_eq!(read_capped(&p, 5).expect("at the limit"), b"small");
        assert!(matches!(
            read_capped(&p, 4),
            Err(ReadError::TooLarge { .. })
        ));
    }
}
