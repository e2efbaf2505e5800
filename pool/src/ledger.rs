//! The pool's own check of what a worker delivered (docs/pool.md, "Outcome only from verified evidence"): the
//! evidence is read from the store by the digest the worker named, its nonce must be one the ledger issued for
//! this run and attempt, its key must be the one that asked for that nonce, and the evidence must verify
//! (`verifier-lib`; the process and vm tiers' sim root with allow-simulated today, the launch measurement not
//! pinned, and the result says SIMULATED). Anything else is a rejected execution, never a status.

use crate::store::Store;
use serde::{Deserialize, Serialize};

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
pub async fn check_delivered(
    store: &Store,
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
        let opts = verifier_lib::evidence::EvidenceOptions {
            chain: verifier_lib::snp::ChainOptions {
                allow_simulated: true,
                ..Default::default()
            },
            nonce: Some(nonce),
            any_measurement: true,
            ..Default::default()
        };
        let v = verifier_lib::evidence::verify_evidence(&ev, &opts);
        match (&v.verdict, v.verified()) {
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
                    "verified by the pool: nonce of attempt {attempt} execution {}, key bound, verdict signed{}; \
                     launch measurement not pinned by the pool",
                    row.execution,
                    if v.simulated {
                        ", SIMULATED (sim root, allow-simulated)"
                    } else {
                        ""
                    }
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
