//! What a job may be and where it may reach: the job file's schema and its one loader ([`job`]), the
//! allowlist's host names ([`allow`]), the address policy ([`addr`]) and the operator's egress settings ([`egress`]), the one `host:port` parser
//! ([`hostport`]) and the isolation tiers ([`Isolation`]). Intake, the fence, its egress proxy and the
//! verdict all use these, so a rule is written once. Nothing here touches the network or runs anything.
//!
//! Without the default `job` feature only [`addr`], [`hostport`] and [`Isolation`] are built (serde and thiserror
//! only; not [`egress`], whose CA certificates need an X.509 parser): that is what the `attestation` crate, and so
//! the founder's verifier, depends on.

#![forbid(unsafe_code)]

pub mod addr;
#[cfg(feature = "job")]
pub mod egress;
pub mod hostport;
mod isolation;

#[cfg(feature = "job")]
pub mod allow;
#[cfg(feature = "job")]
pub mod job;

pub use isolation::Isolation;
