//! The run workflow: one Temporal workflow per pooled run (workflow ID = run ID). It carries digests only; each
//! attempt is an activity on the run's task queue with its own derived nonce, a heartbeat timeout (the lease) and
//! no server-side retry, so every attempt and why it ended is an event of the workflow's history and a line of
//! `pool status`. A test outcome ends the run; a host failure starts the next attempt, up to a bound.

// The SDK's macros add a constant per workflow or activity method and leave it undocumented; every item written
// here is documented.
#![allow(missing_docs)]

use crate::worker::PoolActivities;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use temporalio_common::error::TimeoutType;
use temporalio_common::RetryPolicy;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityCancellationType, ActivityExecutionError, ActivityOptions, LocalActivityOptions,
    WorkflowCancellationToken, WorkflowContext, WorkflowContextView, WorkflowResult,
};

/// What `pool submit` starts a workflow with: digests and parameters, never bundle or evidence bytes.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunInput {
    /// The run ID (also the workflow ID).
    pub run_id: String,
    /// The founder's role in the store.
    pub founder: String,
    /// SHA-256 of the bundle in the store.
    pub bundle_digest: String,
    /// The founder's nonce, hex.
    pub nonce: String,
    /// The isolation tier the run must get (`process`, `vm`, ...); a worker of another tier does not run it.
    pub isolation: String,
    /// Most attempts before the run ends without a verdict.
    pub max_attempts: u32,
    /// The lease: an attempt whose worker has not heartbeat within this many seconds is lost.
    pub heartbeat_seconds: u64,
    /// The longest one attempt may take, start to close, in seconds.
    pub attempt_seconds: u64,
}

/// What the attempt activity is given.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AttemptInput {
    /// The run ID.
    pub run_id: String,
    /// The founder's role.
    pub founder: String,
    /// The attempt number (1, 2, ...).
    pub attempt: u32,
    /// SHA-256 of the bundle in the store.
    pub bundle_digest: String,
    /// This attempt's nonce, hex: derived from the founder's nonce and `attempt`.
    pub nonce: String,
    /// The isolation tier.
    pub isolation: String,
}

/// What an attempt that judged returns: the worker, the verdict and the digest of the evidence it stored.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AttemptResult {
    /// The attempt number it ran.
    pub attempt: u32,
    /// The worker's identity.
    pub worker: String,
    /// The verdict's outcome (one of the eight).
    pub outcome: String,
    /// The verdict as JSON (the contract form).
    pub verdict: serde_json::Value,
    /// SHA-256 of the evidence in the store.
    pub evidence_digest: String,
    /// The nonce the attempt ran with, hex.
    pub nonce: String,
}

/// What the workflow writes to the store about one attempt's end (a local activity).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AttemptEnd {
    /// The run ID.
    pub run_id: String,
    /// The attempt number.
    pub attempt: u32,
    /// Its outcome, when it judged.
    pub outcome: Option<String>,
    /// Why it ended.
    pub why: String,
    /// Its evidence, when accepted.
    pub evidence_digest: Option<String>,
}

/// What the workflow writes to the store about the run's end (a local activity).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunEnd {
    /// The run ID.
    pub run_id: String,
    /// The accepted attempt, when one judged.
    pub accepted: Option<AttemptResult>,
    /// Why the run ended.
    pub why: String,
}

/// The workflow's result (what `pool submit --wait` receives).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RunResult {
    /// The run ID.
    pub run_id: String,
    /// The accepted attempt, when one judged.
    pub accepted: Option<AttemptResult>,
    /// How many attempts were made.
    pub attempts: u32,
    /// Why the run ended.
    pub why: String,
    /// True when the run was cancelled.
    pub cancelled: bool,
}

/// The workflow of one pooled run.
#[workflow]
#[derive(Default)]
pub struct PoolRun {
    input: RunInput,
}

/// Why a failed attempt ended, in words for `pool status`.
fn failure_why(e: &ActivityExecutionError) -> String {
    if let Some(t) = e.as_timeout() {
        let kind = match t.timeout_type() {
            TimeoutType::Heartbeat => "no heartbeat within the lease",
            TimeoutType::StartToClose => "the attempt's deadline passed",
            _ => "timed out",
        };
        return format!(
            "lease lost: {kind}; the worker kills its run, and any result it reports is rejected"
        );
    }
    match e.failure() {
        Some(f) => {
            let mut msg = f.message.clone();
            let mut cause = f.cause.as_deref();
            while let Some(c) = cause {
                if !c.message.is_empty() {
                    msg = format!("{msg}: {}", c.message);
                }
                cause = c.cause.as_deref();
            }
            format!("host failure: {msg}")
        }
        None => format!("host failure: {e}"),
    }
}

fn bookkeeping() -> LocalActivityOptions {
    // Store writes run as local activities (on the worker that runs the workflow task, outside the run slots),
    // with their own cancellation token so that they still happen when the run is cancelled.
    LocalActivityOptions::builder()
        .start_to_close_timeout(Duration::from_secs(30))
        .cancellation_token(WorkflowCancellationToken::new())
        .build()
}

#[workflow_methods]
impl PoolRun {
    #[init]
    fn new(_ctx: &WorkflowContextView, input: RunInput) -> Self {
        Self { input }
    }

    /// Runs attempts until one judges, the run is cancelled, or the attempts are exhausted.
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>) -> WorkflowResult<RunResult> {
        let input = ctx.state(|s| s.input.clone());
        let nonce = hex::decode(&input.nonce).unwrap_or_default();
        let max = input.max_attempts.max(1);
        let mut why = String::new();
        for attempt in 1..=max {
            let derived = attestation::pool_nonce::attempt_nonce(&nonce, attempt);
            let opts = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(
                input.attempt_seconds.max(1),
            ))
            .activity_id(format!("attempt-{attempt}"))
            .heartbeat_timeout(Duration::from_secs(input.heartbeat_seconds.max(1)))
            // One server-side try per attempt: a retry is a new attempt with a new nonce, decided here.
            .retry_policy(RetryPolicy::builder().maximum_attempts(1).build())
            .cancellation_type(ActivityCancellationType::WaitCancellationCompleted)
            .build();
            let result = ctx
                .execute_activity(
                    PoolActivities::run_attempt,
                    AttemptInput {
                        run_id: input.run_id.clone(),
                        founder: input.founder.clone(),
                        attempt,
                        bundle_digest: input.bundle_digest.clone(),
                        nonce: hex::encode(&derived),
                        isolation: input.isolation.clone(),
                    },
                    opts,
                )
                .await;
            match result {
                Ok(r) if r.attempt == attempt && r.nonce == hex::encode(&derived) => {
                    let why = format!("final: {}", r.outcome);
                    ctx.execute_local_activity(
                        PoolActivities::record_attempt,
                        AttemptEnd {
                            run_id: input.run_id.clone(),
                            attempt,
                            outcome: Some(r.outcome.clone()),
                            why: format!("judged: {} (a test outcome is final)", r.outcome),
                            evidence_digest: Some(r.evidence_digest.clone()),
                        },
                        bookkeeping(),
                    )
                    .await?;
                    ctx.execute_local_activity(
                        PoolActivities::record_run,
                        RunEnd {
                            run_id: input.run_id.clone(),
                            accepted: Some(r.clone()),
                            why: why.clone(),
                        },
                        bookkeeping(),
                    )
                    .await?;
                    return Ok(RunResult {
                        run_id: input.run_id,
                        accepted: Some(r),
                        attempts: attempt,
                        why,
                        cancelled: false,
                    });
                }
                Ok(r) => {
                    why = format!(
                        "rejected: the result names attempt {} and nonce {}, not attempt {attempt}'s",
                        r.attempt, r.nonce
                    );
                }
                Err(ActivityExecutionError::Cancelled(_)) => {
                    let why =
                        "cancelled by request; the worker killed the run and removed its files"
                            .to_owned();
                    ctx.execute_local_activity(
                        PoolActivities::record_attempt,
                        AttemptEnd {
                            run_id: input.run_id.clone(),
                            attempt,
                            outcome: None,
                            why: why.clone(),
                            evidence_digest: None,
                        },
                        bookkeeping(),
                    )
                    .await?;
                    ctx.execute_local_activity(
                        PoolActivities::record_run,
                        RunEnd {
                            run_id: input.run_id.clone(),
                            accepted: None,
                            why: why.clone(),
                        },
                        bookkeeping(),
                    )
                    .await?;
                    return Ok(RunResult {
                        run_id: input.run_id,
                        accepted: None,
                        attempts: attempt,
                        why,
                        cancelled: true,
                    });
                }
                Err(e) => why = failure_why(&e),
            }
            ctx.execute_local_activity(
                PoolActivities::record_attempt,
                AttemptEnd {
                    run_id: input.run_id.clone(),
                    attempt,
                    outcome: None,
                    why: why.clone(),
                    evidence_digest: None,
                },
                bookkeeping(),
            )
            .await?;
        }
        let why = format!("no attempt judged after {max} attempt(s); last: {why}");
        ctx.execute_local_activity(
            PoolActivities::record_run,
            RunEnd {
                run_id: input.run_id.clone(),
                accepted: None,
                why: why.clone(),
            },
            bookkeeping(),
        )
        .await?;
        Ok(RunResult {
            run_id: input.run_id,
            accepted: None,
            attempts: max,
            why,
            cancelled: false,
        })
    }
}
