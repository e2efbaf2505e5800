//! Shared helpers for the workspace-level end-to-end tests.

pub mod fence;
pub mod viewer;
