//! The standard forms `verify-attestation evidence` writes besides its own output: `--emit-statement FILE
//! --statement-key KEY` (an in-toto statement in DSSE, [`super::statement`]) and `--ear FILE --ear-key KEY` (an
//! EAR, [`super::ear`]). The keys are read before the evidence is verified (an unusable key is exit 2 with
//! nothing verified); the files are written after it, and the output says what was written where.

use super::founder_key::{FounderKey, KeyError};
use super::run_facts::RunFacts;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The flags of the standard forms.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StandardArgs {
    /// Write the verified run as an in-toto Statement v1 (predicate test-result v0.1) in a DSSE envelope
    /// signed with --statement-key. Nothing is written when the verification fails (the output says so).
    #[arg(long, value_name = "FILE", requires = "statement_key")]
    pub emit_statement: Option<PathBuf>,
    /// The founder's ECDSA P-256 private key (PKCS#8 PEM) that signs the statement; its key id is the SHA-256
    /// of its DER public key.
    #[arg(long, value_name = "KEY", requires = "emit_statement")]
    pub statement_key: Option<PathBuf>,
    /// Write the appraisal as an EAR (draft-ietf-rats-ear: a JWT, ES256) signed with --ear-key; written for a
    /// failed verification too, with the status contraindicated.
    #[arg(long = "ear", value_name = "FILE", requires = "ear_key")]
    pub ear: Option<PathBuf>,
    /// The founder's ECDSA P-256 private key (PKCS#8 PEM) that signs the EAR (may be the statement's key).
    #[arg(long, value_name = "KEY", requires = "ear")]
    pub ear_key: Option<PathBuf>,
}

/// The forms asked for, with their keys loaded.
#[derive(Debug, Default)]
pub struct Forms {
    statement: Option<(PathBuf, FounderKey)>,
    ear: Option<(PathBuf, FounderKey)>,
}

/// What was written: one JSON value per form (for `--json`) and one line each (for the table).
#[derive(Debug, Default)]
pub struct Written {
    /// `("statement" | "ear", value)`.
    pub json: Vec<(&'static str, Value)>,
    /// One line per form.
    pub lines: Vec<String>,
}

impl StandardArgs {
    /// The flags given, by name (`fenced-run view` flattens these flags and refuses them).
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--emit-statement", self.emit_statement.is_some()),
            ("--statement-key", self.statement_key.is_some()),
            ("--ear", self.ear.is_some()),
            ("--ear-key", self.ear_key.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, g)| g.then_some(n))
        .collect()
    }

    /// Reads the keys of the forms asked for.
    pub fn load(&self) -> Result<Forms, KeyError> {
        let statement = match (&self.emit_statement, &self.statement_key) {
            (Some(f), Some(k)) => Some((f.clone(), FounderKey::load("--statement-key", k)?)),
            _ => None,
        };
        let ear = match (&self.ear, &self.ear_key) {
            (Some(f), Some(k)) => Some((f.clone(), FounderKey::load("--ear-key", k)?)),
            _ => None,
        };
        Ok(Forms { statement, ear })
    }
}

/// `verify-attestation X.Y.Z`, the verifier named in both forms.
pub fn verifier_build() -> String {
    format!("verify-attestation {}", env!("CARGO_PKG_VERSION"))
}

impl Forms {
    /// Whether any form was asked for.
    pub fn any(&self) -> bool {
        self.statement.is_some() || self.ear.is_some()
    }

    /// Writes the forms asked for. `Err((check, why))` when a file cannot be written or a verified run cannot
    /// be stated (unusable, exit 2); a statement withheld because the verification failed is not an error.
    pub fn write(&self, facts: &RunFacts<'_>, iat: i64) -> Result<Written, (&'static str, String)> {
        let mut out = Written::default();
        let build = verifier_build();
        if let Some((file, key)) = &self.statement {
            match super::statement::signed(facts, key, &build) {
                Ok(text) => {
                    write_file("emit-statement", file, text.as_bytes())?;
                    out.json.push((
                        "statement",
                        json!({"written": true, "file": file.display().to_string(), "keyid": key.keyid()}),
                    ));
                    out.lines.push(format!(
                        "statement   written to {} (in-toto test-result v0.1 in DSSE, ECDSA P-256 keyid {})",
                        file.display(),
                        key.keyid()
                    ));
                }
                Err(e @ super::statement::StatementError::NotVerified(_)) => {
                    out.json.push((
                        "statement",
                        json!({"written": false, "file": file.display().to_string(), "why": e.to_string()}),
                    ));
                    out.lines.push(format!(
                        "statement   NOT written to {}: {e}",
                        file.display()
                    ));
                }
                Err(e) => return Err(("emit-statement", e.to_string())),
            }
        }
        if let Some((file, key)) = &self.ear {
            let claims = super::ear::claims(facts, iat, &build);
            let status = super::ear::status(&super::ear::vector(facts), facts.verified());
            write_file("ear", file, super::ear::jwt(&claims, key).as_bytes())?;
            out.json.push((
                "ear",
                json!({"written": true, "file": file.display().to_string(), "keyid": key.keyid(), "status": status.as_str()}),
            ));
            out.lines.push(format!(
                "ear         written to {} (JWT ES256, keyid {}): ear.status {}",
                file.display(),
                key.keyid(),
                status.as_str()
            ));
        }
        Ok(out)
    }
}

fn write_file(
    check: &'static str,
    file: &std::path::Path,
    bytes: &[u8],
) -> Result<(), (&'static str, String)> {
    std::fs::write(file, bytes).map_err(|e| (check, format!("writing {}: {e}", file.display())))
}

#[cfg(test)]
mod tests {
    use super::super::evidence::{options, Args, OptionsError};
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    /// `options` is the door of `fenced-run view`, which writes no standard form: the flags are refused there,
    /// before the evidence is read.
    #[test]
    fn options_refuses_the_standard_forms_flags() {
        let cmd = Cmd::try_parse_from([
            "view",
            "/nonexistent/run.evidence",
            "--any-measurement",
            "--no-nonce",
            "--ear",
            "out.jwt",
            "--ear-key",
            "founder.pem",
        ])
        .expect("parses");
        match options(&cmd.args) {
            Err(OptionsError::Unusable(check, why)) => {
                assert_eq!(check, "flag-not-applicable");
                assert!(why.starts_with("--ear, --ear-key belong to"), "{why}");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        // Without them, the evidence is read (and here it is missing).
        let cmd = Cmd::try_parse_from([
            "view",
            "/nonexistent/run.evidence",
            "--any-measurement",
            "--no-nonce",
        ])
        .expect("parses");
        assert!(
            matches!(options(&cmd.args), Err(OptionsError::Unusable(c, _)) if c != "flag-not-applicable")
        );
    }
}
