//! The subcommands of `fenced-run`, one module each; the binary only dispatches.

pub mod demo;
pub mod intake;
pub mod run;

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
