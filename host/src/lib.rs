//! The untrusted host: intake before anything runs, the guest image builder, the VM launcher and the
//! `fenced-run` CLI.

pub mod cli;
pub mod image;
pub mod nonce_exchange;
pub mod sim;
pub mod task;
pub mod vm;
