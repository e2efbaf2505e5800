//! The run workflow: one Temporal workflow per pooled run (workflow ID = run ID). It carries digests only; each
//! attempt is an activity on the run's task queue whose every execution asks the pool's ledger for its own nonce
//! (docs/pool.md), with a heartbeat timeout (the lease) and
//! no server-side retry, so every attempt and why it ended is an event of the workflow's history and a line of
//! `pool status`. A test outcome ends the run; a host failure starts the next attempt, up to a bound.

// The SDK's macros add a constant per workflow or activity method and leave it undocumented; every item written
// here is documented.
#![allow(missing_docs)]

use crate::coordinator::CoordinatorActivities;
use crate::worker::AttemptActivities;
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
    /// The task queue whose workers (execution hosts) run the attempts; the workflow itself runs on its
    /// coordinator queue ([`crate::temporal::coordinator_queue`]).
    #[serde(default)]
    pub queue: String,
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
    /// The isolation tier.
    pub isolation: String,
}

/// What the pool's check of a delivered result is given (a local activity): the digest the worker named.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct VerifyInput {
    /// The run ID.
    pub run_id: String,
    /// The founder's role.
    pub founder: String,
    /// The isolation tier the run asked for.
    pub isolation: String,
    /// The attempt the result is for.
    pub attempt: u32,
    /// SHA-256 of the evidence the worker says it stored.
    pub evidence_digest: String,
}

/// An attempt, named (a local activity's input).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AttemptRef {
    /// The run ID.
    pub run_id: String,
    /// The attempt.
    pub attempt: u32,
}

/// What an attempt that judged returns: the worker, the verdict and the digest of the evidence it stored.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AttemptResult {
    /// The attempt number it ran.
    pub attempt: u32,
    /// The execution of the attempt whose evidence this is (the pool's ledger, docs/pool.md).
    #[serde(default)]
    pub execution: u32,
    /// Whether the evidence verified against a simulated root (the verdict is then SIMULATED).
    #[serde(default)]
    pub simulated: bool,
    /// What the pool's own verification of the evidence said.
    #[serde(default)]
    pub checked: String,
    /// The worker's identity.
    pub worker: String,
    /// The verdict's outcome (one of the eight).
    pub outcome: String,
    /// The verdict as JSON (the contract form).
    pub verdict: serde_json::Value,
    /// SHA-256 of the evidence in the store.
    pub evidence_digest: String,
    /// The nonce the ledger issued to the execution, hex.
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

/// How the `why` of a cancelled run begins.
pub const CANCELLED_WHY: &str = "cancelled by request";

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
    // The check and the store writes run as local activities, in the coordinator (the process that runs the
    // workflow task, never an execution host), with their own cancellation token so that they still happen
    // when the run is cancelled.
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
        let max = input.max_attempts.max(1);
        let mut why = String::new();
        for attempt in 1..=max {
            let opts = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(
                input.attempt_seconds.max(1),
            ))
            .activity_id(format!("attempt-{attempt}"))
            // The hosts' queue: the coordinator, which runs this workflow, never takes an attempt.
            .task_queue(input.queue.clone())
            .heartbeat_timeout(Duration::from_secs(input.heartbeat_seconds.max(1)))
            // One server-side try per attempt: a retry is a new attempt decided here; every execution asks the
            // pool's ledger for its own nonce.
            .retry_policy(RetryPolicy::builder().maximum_attempts(1).build())
            .cancellation_type(ActivityCancellationType::WaitCancellationCompleted)
            .build();
            let result = ctx
                .execute_activity(
                    AttemptActivities::run_attempt,
                    AttemptInput {
                        run_id: input.run_id.clone(),
                        founder: input.founder.clone(),
                        attempt,
                        bundle_digest: input.bundle_digest.clone(),
                        isolation: input.isolation.clone(),
                    },
                    opts,
                )
                .await;
            match result {
                Ok(r) if r.attempt == attempt => {
                    // The worker's message is a claim: only the evidence, verified here against the ledger,
                    // becomes a status.
                    let checked = ctx
                        .execute_local_activity(
                            CoordinatorActivities::verify_execution,
                            VerifyInput {
                                run_id: input.run_id.clone(),
                                founder: input.founder.clone(),
                                isolation: input.isolation.clone(),
                                attempt,
                                evidence_digest: r.evidence_digest.clone(),
                            },
                            bookkeeping(),
                        )
                        .await?;
                    match (checked.verified, checked.outcome, checked.verdict) {
                        (true, Some(outcome), Some(verdict)) => {
                            let accepted = AttemptResult {
                                attempt,
                                execution: checked.execution.unwrap_or(0),
                                simulated: checked.simulated,
                                checked: checked.why.clone(),
                                worker: r.worker,
                                outcome: outcome.clone(),
                                verdict,
                                evidence_digest: r.evidence_digest,
                                nonce: checked.nonce.unwrap_or_default(),
                            };
                            let shown = if checked.simulated {
                                format!("{outcome} (SIMULATED)")
                            } else {
                                outcome.clone()
                            };
                            let why = format!("final: {shown}");
                            ctx.execute_local_activity(
                                CoordinatorActivities::record_attempt,
                                AttemptEnd {
                                    run_id: input.run_id.clone(),
                                    attempt,
                                    outcome: Some(outcome.clone()),
                                    why: format!(
                                        "judged: {shown} (a test outcome is final); {}",
                                        checked.why
                                    ),
                                    evidence_digest: Some(accepted.evidence_digest.clone()),
                                },
                                bookkeeping(),
                            )
                            .await?;
                            ctx.execute_local_activity(
                                CoordinatorActivities::record_run,
                                RunEnd {
                                    run_id: input.run_id.clone(),
                                    accepted: Some(accepted.clone()),
                                    why: why.clone(),
                                },
                                bookkeeping(),
                            )
                            .await?;
                            return Ok(RunResult {
                                run_id: input.run_id,
                                accepted: Some(accepted),
                                attempts: attempt,
                                why,
                                cancelled: false,
                            });
                        }
                        _ => {
                            why = format!(
                                "rejected execution{}: {} (the worker's result is not a status)",
                                checked
                                    .execution
                                    .map(|n| format!(" {n}"))
                                    .unwrap_or_default(),
                                checked.why
                            );
                        }
                    }
                }
                Ok(r) => {
                    why = format!(
                        "rejected: the result names attempt {}, not attempt {attempt}",
                        r.attempt
                    );
                }
                Err(ActivityExecutionError::Cancelled(_)) => {
                    let why =
                        format!("{CANCELLED_WHY}; the worker killed the run and removed its files");
                    ctx.execute_local_activity(
                        CoordinatorActivities::record_attempt,
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
                        CoordinatorActivities::record_run,
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
                Err(e) => {
                    // A host failure is accepted as the reason for another attempt only when no guest of this
                    // attempt got a nonce; otherwise its executions stay in the ledger without a result, and
                    // the founder's verification counts them.
                    let base = failure_why(&e);
                    let open = ctx
                        .execute_local_activity(
                            CoordinatorActivities::open_executions,
                            AttemptRef {
                                run_id: input.run_id.clone(),
                                attempt,
                            },
                            bookkeeping(),
                        )
                        .await?;
                    why = if open == 0 {
                        format!("{base} (no nonce was issued for this attempt: accepted as a host failure)")
                    } else {
                        format!(
                            "{base}; {open} execution(s) of this attempt got a nonce and delivered no result \
                             (shown as such; the founder's verification counts them)"
                        )
                    };
                }
            }
            ctx.execute_local_activity(
                CoordinatorActivities::record_attempt,
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
            CoordinatorActivities::record_run,
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
