//! The subcommands of `fenced-run`, one module each; the binary only dispatches.

pub mod demo;
pub mod image;
pub mod intake;
pub mod run;
pub mod vm;
