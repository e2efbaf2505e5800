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

pub mod app;
pub mod ear;
pub mod evidence;
pub mod exit;
mod explain_hint;
pub mod fetch;
pub mod founder_key;
pub(crate) mod input;
pub mod kind;
pub mod policy_args;
pub mod policy_file;
pub mod run_facts;
pub mod show;
pub mod snp_report;
pub mod standard;
pub mod statement;
pub mod tdx_quote;
