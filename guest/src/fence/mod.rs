//! The fence: two phases (install behind an allowlisting proxy, then tests with no network), limits, teardown,
//! outcome classification.

pub mod counts;
pub mod proxy;
