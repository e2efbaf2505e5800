//! The fence (namespaces, egress proxy, limits, teardown, outcome classification, test-count parsers) and the
//! guest agent.

pub mod fence;

pub mod agent;
pub mod channel;
