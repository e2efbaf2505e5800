//! The subcommands of `fenced-run`, one module each; the binary only dispatches.

pub mod demo;
pub mod doctor;
pub mod image;
pub mod intake;
pub mod run;
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
pub fn parse_nonce(hex_text: &str) -> Result<Vec<u8>, String> {
    let t = hex_text.trim();
    let n = hex::decode(t.strip_prefix("0x").unwrap_or(t)).map_err(|e| format!("not hex: {e}"))?;
    attestation::binding::check_nonce(&n).map_err(|e| e.to_string())?;
    Ok(n)
}
