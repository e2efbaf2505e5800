//! The exit codes of `verify-attestation`, decided here and nowhere else: 0 verified (or, for `fetch`,
//! `bundle-sign` and `show`, done), 1 rejected (a check failed, or collateral or a measurement set was refused
//! before the evidence was looked at), 2 unusable input (an unreadable or malformed file, a usage error). Every
//! subcommand returns an [`Exit`] and prints its refusals with [`unusable`] and [`rejected`]; `src/main.rs` maps
//! the parser's errors the same way (a usage error is [`Exit::Unusable`], `--help` and `--version`
//! [`Exit::Success`]; `attestation::cli_io::parse_failure` prints the message).

use std::process::ExitCode;

/// What a subcommand ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Verified, or a command that verifies nothing completed (exit 0).
    Success,
    /// A check failed, or a trusted input was refused (exit 1).
    Rejected,
    /// An input is unusable (exit 2).
    Unusable,
}

impl Exit {
    /// The process exit code.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Rejected => 1,
            Exit::Unusable => 2,
        }
    }

    /// [`Exit::Success`] when verified, else [`Exit::Rejected`].
    pub const fn verified(verified: bool) -> Exit {
        if verified {
            Exit::Success
        } else {
            Exit::Rejected
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// Why collateral was refused before verification: how the command ends ([`Exit::Rejected`] or
/// [`Exit::Unusable`]), the check name, and the detail.
pub type Refusal = (Exit, &'static str, String);

/// Prints an unusable-input result and returns exit code 2: with `json` the one object
/// `{"verified": false, "error": {"check", "detail"}, "failures": [the error]}`, otherwise a message on stderr.
pub fn unusable(json: bool, check: &str, detail: String) -> ExitCode {
    if json {
        let v = attestation::cli_io::error_json("verified", check, &detail);
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        eprintln!("verify-attestation: {}", attestation::text::escape(&detail));
    }
    Exit::Unusable.into()
}

/// Prints a rejection found before verification (exit 1), e.g. a bundle without enough auditor signatures.
pub fn rejected(json: bool, check: &'static str, detail: String) -> ExitCode {
    if json {
        let v = serde_json::json!({ "verified": false, "failures": [verifier_lib::Failure::new(check, detail)] });
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        eprintln!(
            "verify-attestation: REJECTED: {}",
            attestation::text::escape(&detail)
        );
    }
    Exit::Rejected.into()
}

/// Prints a refusal of the collateral: exit 1 a rejection (`collateral-unsigned`), exit 2 unusable input.
pub fn refusal_exit(json: bool, (exit, check, why): Refusal) -> ExitCode {
    if exit == Exit::Rejected {
        rejected(json, check, why)
    } else {
        unusable(json, check, why)
    }
}
