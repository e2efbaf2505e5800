//! The pool's own check of what a worker delivered (docs/pool.md, "Outcome only from verified evidence"): the
//! evidence is read from the store by the digest the worker named, its nonce must be one the ledger issued for
//! this run and attempt, its key must be the one that asked for that nonce, and the evidence must verify
//! (`verifier-lib`; the process and vm tiers' sim root with allow-simulated today, the result then says
//! SIMULATED) with the launch measurement in the coordinator's measurement set ([`MeasurementPin`]), unless the
//! operator said `--any-measurement`. Anything else is a rejected execution, never a status. This module is the
//! pool's one user of `verifier_lib::EvidenceOptions`.

use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Marks a check's `why` whose evidence chain ends in a simulated root.
pub const SIMULATED_MARK: &str = ", SIMULATED (sim root, allow-simulated)";

/// What the pool's check requires of the launch measurement: the coordinator's `--measurements` set (signed
/// by enough of its `--auditor-key`s), or nothing, when the operator said `--any-measurement`.
#[derive(Clone)]
pub enum MeasurementPin {
    /// Not pinned, on the operator's word (`--any-measurement`).
    Any,
    /// The launch measurement must be an entry of this set (of the run's tier, for sim evidence).
    Set(Arc<measurements::set::TrustedSet>),
}

impl MeasurementPin {
    /// How the check is described in every result: the set's name and digest, or that nothing was pinned.
    pub fn describe(&self) -> String {
        match self {
            MeasurementPin::Any => {
                "launch measurement not pinned (the coordinator runs with --any-measurement)"
                    .to_owned()
            }
            MeasurementPin::Set(t) => format!(
                "launch measurement in measurement set {} (SHA-256 {})",
                t.name(),
                hex::encode(t.set.digest())
            ),
        }
    }
}

/// The verifier's options for one delivered result: the sim root accepted (the process and vm tiers; the
/// result says SIMULATED), the issued nonce, and the launch measurement as `pin` requires. The one place the
/// pool builds `verifier_lib::EvidenceOptions`.
fn evidence_options(nonce: Vec<u8>, pin: &MeasurementPin) -> verifier_lib::EvidenceOptions {
    let (any_measurement, measurement_set) = match pin {
        MeasurementPin::Any => (true, None),
        MeasurementPin::Set(t) => (false, Some(t.clone())),
    };
    verifier_lib::EvidenceOptions {
        chain: verifier_lib::sev_snp::ChainOptions {
            allow_simulated: true,
            ..Default::default()
        },
        nonce: Some(nonce),
        any_measurement,
        measurement_set,
        ..Default::default()
    }
}

/// What the pool's check concluded about one delivered result.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Checked {
    /// Whether the evidence verified as this attempt's execution.
    pub verified: bool,
    /// The execution it belongs to, when its nonce was issued for this run.
    pub execution: Option<u32>,
    /// The verified verdict's outcome.
    pub outcome: Option<String>,
    /// The verified verdict (JSON), from the evidence itself, never from the worker's message.
    pub verdict: Option<serde_json::Value>,
    /// The nonce the ledger issued to that execution, hex.
    pub nonce: Option<String>,
    /// Whether the evidence's chain ends in a simulated root (the verdict is then SIMULATED).
    pub simulated: bool,
    /// What the check said: why it was rejected, or how it verified.
    pub why: String,
}

fn rejected(execution: Option<u32>, why: String) -> Checked {
    Checked {
        verified: false,
        execution,
        why,
        ..Checked::default()
    }
}

/// Checks the evidence `evidence_digest` a worker delivered for `attempt` of `run_id` and fills the ledger row
/// of its execution (verified or rejected) when it names one of this attempt's executions that has no result
/// yet. `Err` only when the store could not be read or written (the caller retries).
#[allow(clippy::too_many_arguments)]
pub async fn check_delivered(
    store: &Store,
    pin: &MeasurementPin,
    run_id: &str,
    founder: &str,
    isolation: &str,
    attempt: u32,
    evidence_digest: &str,
) -> Result<Checked, String> {
    use attestation::evidence::Evidence;
    use attestation::pool_ledger::RESULT_NONE;
    let digest_shown = attestation::text::escape(evidence_digest);
    let Some(bytes) = store.evidence(founder, evidence_digest).await? else {
        return Ok(rejected(
            None,
            format!("the evidence {digest_shown} the result names is not in the store"),
        ));
    };
    let ev = match Evidence::from_cbor(&bytes) {
        Ok(ev) => ev,
        Err(e) => return Ok(rejected(None, format!("not evidence: {e}"))),
    };
    let nonce = match ev.verify_verdict_signature() {
        Ok(v) => v.inputs.nonce,
        Err(e) => return Ok(rejected(None, format!("the verdict's signature: {e}"))),
    };
    let rows = store.executions(run_id).await?;
    let Some(row) = rows.iter().find(|r| r.nonce == hex::encode(&nonce)) else {
        return Ok(rejected(
            None,
            "its nonce was never issued for this run (no execution in the ledger has it)".into(),
        ));
    };
    let execution = u32::try_from(row.execution).ok();
    if i64::from(row.attempt) != i64::from(attempt) {
        return Ok(rejected(
            None,
            format!(
                "it is the evidence of attempt {} execution {}, not of attempt {attempt}",
                row.attempt, row.execution
            ),
        ));
    }
    if row.result != RESULT_NONE {
        return Ok(rejected(
            None,
            format!(
                "execution {} of attempt {attempt} already has a result ({})",
                row.execution, row.result
            ),
        ));
    }
    let attempt_i = i32::try_from(attempt).unwrap_or(i32::MAX);
    let key = hex::encode(attestation::pool_ledger::key_sha256(&ev.key()));
    let mut checked = if key != row.key_sha256 {
        rejected(
            execution,
            format!(
                "its key (SHA-256 {key}) is not the key that asked for execution {}'s nonce ({})",
                row.execution, row.key_sha256
            ),
        )
    } else {
        let nonce_hex = hex::encode(&nonce);
        let expired = match pin {
            MeasurementPin::Set(t) => t
                .check_current(time::OffsetDateTime::now_utc().unix_timestamp())
                .err()
                .map(|e| e.to_string()),
            MeasurementPin::Any => None,
        };
        let opts = evidence_options(nonce, pin);
        let v = verifier_lib::verify_evidence_with(&ev, &opts);
        match (&v.verdict, v.verified()) {
            _ if expired.is_some() => rejected(
                execution,
                format!(
                    "the coordinator's measurement set is no longer current: {}",
                    expired.unwrap_or_default()
                ),
            ),
            (Some(verdict), true) if verdict.isolation.to_string() != isolation => rejected(
                execution,
                format!(
                    "the verdict's isolation is {}, the run asked for {}",
                    verdict.isolation,
                    attestation::text::escape(isolation)
                ),
            ),
            (Some(verdict), true) => Checked {
                verified: true,
                execution,
                outcome: Some(verdict.outcome.as_str().to_owned()),
                verdict: Some(verdict.to_json_value()),
                nonce: Some(nonce_hex),
                simulated: v.simulated,
                why: format!(
                    "verified by the pool: nonce of attempt {attempt} execution {}, key bound, verdict signed{}; {}",
                    row.execution,
                    if v.simulated { SIMULATED_MARK } else { "" },
                    pin.describe()
                ),
            },
            _ => rejected(
                execution,
                format!(
                    "the evidence does not verify: {}",
                    v.failures
                        .iter()
                        .map(|f| format!("{}: {}", f.check, f.detail))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ),
        }
    };
    let result = if checked.verified {
        attestation::pool_ledger::RESULT_VERIFIED
    } else {
        attestation::pool_ledger::RESULT_REJECTED
    };
    if let Err(e) = store
        .execution_result(
            run_id,
            attempt_i,
            row.execution,
            result,
            checked.outcome.as_deref(),
            Some(evidence_digest),
            &checked.why,
        )
        .await
    {
        // A concurrent fill (a second delivery racing this one) wins; this delivery is then not accepted.
        checked = rejected(execution, format!("recording the result: {e}"));
    }
    Ok(checked)
}
