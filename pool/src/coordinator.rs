//! The coordinator: the operator's own process (docs/pool.md, "Roles"), trusted, the only one that decides
//! and records outcomes. `fenced-run pool coordinator` registers the run workflow and these local activities on
//! the queue's coordinator task queue ([`crate::temporal::coordinator_queue`]) and connects to the store as its
//! owner; execution hosts (`pool worker`) register only the attempt activity and hold a role that can write no
//! table. Every outcome the coordinator records comes from its own check of the evidence in the store
//! (`crate::ledger::check_delivered`: digest, ledger row, verifier, measurement set), never from what the
//! workflow's input or a worker's completion claims.

// The SDK's macros add a constant per workflow or activity method and leave it undocumented; every item written
// here is documented.
#![allow(missing_docs)]

use crate::ledger::MeasurementPin;
use crate::store::Store;
use crate::workflow::{AttemptEnd, AttemptRef, RunEnd, VerifyInput};
use std::sync::Arc;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

/// The coordinator's local activities: the pool's check of a delivered result and the store writes.
pub struct CoordinatorActivities {
    /// The store's connection URL (its owner's role).
    pub store_url: String,
    /// What the check requires of the launch measurement.
    pub pin: MeasurementPin,
}

fn failure(msg: impl Into<String>) -> ActivityError {
    ActivityError::from(std::io::Error::other(msg.into()))
}

#[activities]
impl CoordinatorActivities {
    /// The pool's own check of a delivered result (a local activity of the workflow): the evidence from the
    /// store, verified against the ledger's nonce and key for its execution and the measurement set.
    #[activity]
    pub async fn verify_execution(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: VerifyInput,
    ) -> Result<crate::ledger::Checked, ActivityError> {
        let store = Store::connect(&self.store_url).await.map_err(failure)?;
        crate::ledger::check_delivered(
            &store,
            &self.pin,
            &input.run_id,
            &input.founder,
            &input.isolation,
            input.attempt,
            &input.evidence_digest,
        )
        .await
        .map_err(failure)
    }

    /// How many executions of an attempt got a nonce and have no result (a local activity of the workflow).
    #[activity]
    pub async fn open_executions(
        self: Arc<Self>,
        _ctx: ActivityContext,
        a: AttemptRef,
    ) -> Result<u32, ActivityError> {
        let store = Store::connect(&self.store_url).await.map_err(failure)?;
        let rows = store.executions(&a.run_id).await.map_err(failure)?;
        Ok(rows
            .iter()
            .filter(|r| {
                i64::from(r.attempt) == i64::from(a.attempt)
                    && r.result == attestation::pool_ledger::RESULT_NONE
            })
            .count() as u32)
    }

    /// Writes how an attempt ended, as the workflow decided (a local activity of the workflow).
    #[activity]
    pub async fn record_attempt(
        self: Arc<Self>,
        _ctx: ActivityContext,
        end: AttemptEnd,
    ) -> Result<(), ActivityError> {
        let mut store = Store::connect(&self.store_url).await.map_err(failure)?;
        let attempt = i32::try_from(end.attempt).map_err(|_| failure("attempt out of range"))?;
        store
            .attempt_ended(
                &end.run_id,
                attempt,
                end.outcome.as_deref(),
                &end.why,
                end.evidence_digest.as_deref(),
            )
            .await
            .map_err(failure)
    }

    /// Writes how the run ended (a local activity of the workflow). An accepted result is written only when
    /// the ledger holds it as verified by the coordinator's check (the execution's row: `verified`, the same
    /// attempt, evidence and outcome): the workflow's word alone records no outcome.
    #[activity]
    pub async fn record_run(
        self: Arc<Self>,
        _ctx: ActivityContext,
        end: RunEnd,
    ) -> Result<(), ActivityError> {
        let store = Store::connect(&self.store_url).await.map_err(failure)?;
        if let Some(a) = &end.accepted {
            let rows = store.executions(&end.run_id).await.map_err(failure)?;
            let backed = rows.iter().any(|r| {
                i64::from(r.attempt) == i64::from(a.attempt)
                    && i64::from(r.execution) == i64::from(a.execution)
                    && r.result == attestation::pool_ledger::RESULT_VERIFIED
                    && r.evidence_digest.as_deref() == Some(a.evidence_digest.as_str())
                    && r.outcome.as_deref() == Some(a.outcome.as_str())
            });
            if !backed {
                return Err(failure(format!(
                    "run {}: attempt {} execution {} is not verified in the ledger with this evidence and \
                     outcome; no outcome is recorded",
                    attestation::text::escape(&end.run_id),
                    a.attempt,
                    a.execution
                )));
            }
        }
        let accepted = end.accepted.as_ref().map(|a| {
            (
                i32::try_from(a.attempt).unwrap_or(i32::MAX),
                a.outcome.as_str(),
                a.evidence_digest.as_str(),
                &a.verdict,
            )
        });
        store
            .run_ended(&end.run_id, accepted, &end.why)
            .await
            .map_err(failure)
    }
}
