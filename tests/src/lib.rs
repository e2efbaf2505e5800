//! Shared helpers for the workspace-level end-to-end tests.

pub mod cli;
pub mod fence;
pub mod gitserve;
pub mod protect;
pub mod registry;
pub mod task;
pub mod viewer;
pub mod vm;
