//! The subcommands of `verify-attestation`, one module each; the binary only dispatches.

pub mod evidence;
pub mod snp_report;
pub mod tdx_quote;
