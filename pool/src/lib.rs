//! The hosted pool (docs/pool.md): fenced runs spread over many hosts by Temporal (a workflow per run, a task
//! queue per TEE class, heartbeats as leases, attempts bounded and recorded), with bundles and evidence kept in
//! PostgreSQL by their SHA-256 and every founder reading only their own runs.

pub mod cli;
pub mod coordinator;
pub mod founders;
pub mod gateway;
pub mod ledger;
pub mod store;
pub mod temporal;
pub mod worker;
pub mod workflow;

use sha2::{Digest, Sha256};

/// The content address of stored bytes: lower-case hex SHA-256.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
