//! The founder's check of a hosted-pool run's execution ledger (docs/pool.md, docs/verification.md):
//! `verify-attestation evidence FILE --nonce N --pool-ledger LEDGER --pool-key PUB [--max-executions K]`.
//!
//! The ledger must be signed by the pinned pool key and be the ledger of the founder's run (its
//! `founder_nonce_sha256`); the evidence's nonce must be one the pool issued, and the evidence's key the one that
//! asked for it; the run's executions are counted, and more than K (default 1) is the failure
//! [`POOL_EXECUTIONS`] naming every one. The evidence itself is then verified against the issued nonce.

use crate::Failure;
use attestation::evidence::Evidence;
use attestation::pool_ledger::{key_sha256, Ledger};
use sha2::{Digest, Sha256};

/// The ledger is not usable as this run's proof: signature, key, run, a nonce not issued, a key mismatch.
pub const POOL_LEDGER: &str = "pool-ledger";
/// The run had more executions than the founder accepts.
pub const POOL_EXECUTIONS: &str = "pool-executions";

/// What the ledger check found: which execution the evidence is, how many the run had, and the failures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolLedgerCheck {
    /// The run the ledger is of (empty when the ledger did not verify).
    pub run_id: String,
    /// The pinned pool key, hex.
    pub pool_key: String,
    /// The attempt and execution the evidence's nonce was issued to.
    pub execution: Option<(u32, u32)>,
    /// Every execution of the run: "attempt A execution E: RESULT".
    pub executions: Vec<String>,
    /// Most executions the founder accepts (`--max-executions`).
    pub max_executions: u32,
    /// The nonce the evidence must carry: the issued one, once found.
    pub nonce: Option<Vec<u8>>,
    /// Failed checks (`pool-ledger`, `pool-executions`).
    pub failures: Vec<Failure>,
}

/// Checks `signed` (a signed ledger file's bytes) with the pinned `pool_key` against the founder's nonce and the
/// evidence bytes. Never fails as a whole: everything wrong is a failure in the result.
pub fn check(
    signed: &[u8],
    pool_key: &ed25519_dalek::VerifyingKey,
    founder_nonce: &[u8],
    evidence: &[u8],
    max_executions: u32,
) -> PoolLedgerCheck {
    let mut out = PoolLedgerCheck {
        pool_key: hex::encode(pool_key.as_bytes()),
        max_executions,
        ..Default::default()
    };
    let ledger = match Ledger::verify(signed, pool_key) {
        Ok(l) => l,
        Err(e) => {
            out.failures.push(Failure::new(POOL_LEDGER, e.to_string()));
            return out;
        }
    };
    out.run_id = attestation::text::escape(&ledger.run_id).into_owned();
    out.executions = ledger
        .executions
        .iter()
        .map(|e| {
            format!(
                "attempt {} execution {}: {}{}",
                e.attempt,
                e.execution,
                attestation::text::escape(&e.result),
                e.outcome
                    .as_deref()
                    .map(|o| format!(" {}", attestation::text::escape(o)))
                    .unwrap_or_default()
            )
        })
        .collect();
    let want = hex::encode(Sha256::digest(founder_nonce));
    if ledger.founder_nonce_sha256 != want {
        out.failures.push(Failure::seen_wanted(
            POOL_LEDGER,
            format!(
                "the ledger of run {} for founder nonce SHA-256 {}",
                out.run_id,
                attestation::text::escape(&ledger.founder_nonce_sha256)
            ),
            format!("the ledger of the run of --nonce (SHA-256 {want})"),
        ));
        return out;
    }
    let ev = match Evidence::from_cbor(evidence) {
        Ok(ev) => ev,
        Err(e) => {
            out.failures.push(Failure::new(
                POOL_LEDGER,
                format!("the evidence cannot be read to find its execution: {e}"),
            ));
            return out;
        }
    };
    // The nonce only selects the ledger row; the evidence is verified against that row's nonce afterwards.
    let nonce = match ev.verify_verdict_signature() {
        Ok(v) => v.inputs.nonce,
        Err(e) => {
            out.failures.push(Failure::new(
                POOL_LEDGER,
                format!("the verdict's nonce cannot be read: {e}"),
            ));
            return out;
        }
    };
    let Some(row) = ledger.by_nonce(&nonce) else {
        out.failures.push(Failure::new(
            POOL_LEDGER,
            format!(
                "the evidence's nonce {} was not issued by the pool for run {}",
                hex::encode(&nonce),
                out.run_id
            ),
        ));
        return out;
    };
    out.execution = Some((row.attempt, row.execution));
    out.nonce = Some(nonce);
    let key = hex::encode(key_sha256(&ev.key()));
    if row.key_sha256 != key {
        out.failures.push(Failure::seen_wanted(
            POOL_LEDGER,
            format!("evidence key SHA-256 {key}"),
            format!(
                "the key that asked for attempt {} execution {}'s nonce ({})",
                row.attempt,
                row.execution,
                attestation::text::escape(&row.key_sha256)
            ),
        ));
    }
    if ledger.executions.len() > max_executions as usize {
        out.failures.push(Failure::seen_wanted(
            POOL_EXECUTIONS,
            format!(
                "{} executions of run {} ({})",
                ledger.executions.len(),
                out.run_id,
                out.executions.join("; ")
            ),
            format!("at most {max_executions} (--max-executions)"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use attestation::pool_ledger::{Execution, LEDGER_FORMAT, RESULT_NONE, RESULT_VERIFIED};

    struct Fixture {
        pool: ed25519_dalek::SigningKey,
        founder_nonce: Vec<u8>,
        evidence: Vec<u8>,
        key_hash: String,
        nonce: Vec<u8>,
    }

    /// Sim evidence of a run with `nonce` (the process tier's sim PSP in a temporary state directory).
    fn fixture() -> Fixture {
        let psp = attestation::sim::SimPsp::open_default(attestation::snp::Product::Milan)
            .expect("sim psp");
        let tee = attestation::sim::SimSnpTee::new(psp, [7u8; 48]);
        let nonce = vec![0x5a; 32];
        let keyed = attestation::session::KeyFirst::new();
        let key_hash = hex::encode(keyed.key_sha256());
        let session = keyed.begin(&tee, &nonce).expect("session");
        let verdict = attestation::verdict::Verdict::new(
            attestation::verdict::Outcome::TestsPassed,
            attestation::verdict::Isolation::Process,
            attestation::verdict::Inputs {
                nonce: nonce.clone(),
                ..Default::default()
            },
            "test",
        );
        let evidence = session
            .seal(&verdict)
            .expect("seal")
            .to_cbor()
            .expect("cbor");
        Fixture {
            pool: ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]),
            founder_nonce: vec![0x11; 32],
            evidence,
            key_hash,
            nonce,
        }
    }

    fn exec(attempt: u32, execution: u32, key: &str, nonce: &[u8], result: &str) -> Execution {
        Execution {
            attempt,
            execution,
            key_sha256: key.into(),
            nonce: hex::encode(nonce),
            issued_at: "2026-12-05T13:00:00Z".into(),
            worker: "w1".into(),
            result: result.into(),
            outcome: None,
            evidence_sha256: None,
            detail: None,
        }
    }

    fn ledger(f: &Fixture, executions: Vec<Execution>) -> Vec<u8> {
        Ledger {
            format: LEDGER_FORMAT.into(),
            run_id: "run-1".into(),
            founder_nonce_sha256: hex::encode(Sha256::digest(&f.founder_nonce)),
            run_ended: true,
            exported_at: "2026-12-05T13:01:00Z".into(),
            executions,
        }
        .sign(&f.pool)
        .expect("sign")
    }

    fn checks(c: &PoolLedgerCheck) -> Vec<&str> {
        c.failures.iter().map(|f| f.check.as_ref()).collect()
    }

    #[test]
    fn one_issued_execution_passes_and_a_second_is_counted() {
        let f = fixture();
        let one = ledger(&f, vec![exec(1, 1, &f.key_hash, &f.nonce, RESULT_VERIFIED)]);
        let c = check(
            &one,
            &f.pool.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            1,
        );
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert_eq!(c.execution, Some((1, 1)));
        assert_eq!(c.nonce.as_deref(), Some(&f.nonce[..]));

        let two = ledger(
            &f,
            vec![
                exec(1, 1, &hex::encode([9u8; 32]), &[0x22; 32], RESULT_NONE),
                exec(1, 2, &f.key_hash, &f.nonce, RESULT_VERIFIED),
            ],
        );
        let c = check(
            &two,
            &f.pool.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            1,
        );
        assert_eq!(checks(&c), vec![POOL_EXECUTIONS]);
        assert!(c.failures[0]
            .detail
            .contains("attempt 1 execution 1: no result delivered"));
        assert_eq!(c.execution, Some((1, 2)));
        let c = check(
            &two,
            &f.pool.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            2,
        );
        assert!(c.failures.is_empty(), "{:?}", c.failures);
    }

    #[test]
    fn forged_ledger_and_wrong_key_are_refused() {
        let f = fixture();
        let signed = ledger(&f, vec![exec(1, 1, &f.key_hash, &f.nonce, RESULT_VERIFIED)]);
        let other = ed25519_dalek::SigningKey::from_bytes(&[4u8; 32]);
        let c = check(
            &signed,
            &other.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            1,
        );
        assert_eq!(checks(&c), vec![POOL_LEDGER]);
        assert!(c.nonce.is_none());
        // The text edited after signing (a second execution removed by the host, say).
        let mut file: serde_json::Value = serde_json::from_slice(&signed).expect("json");
        let text = file["ledger"].as_str().expect("text").replace("w1", "w2");
        file["ledger"] = text.into();
        let forged = serde_json::to_vec(&file).expect("bytes");
        let c = check(
            &forged,
            &f.pool.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            1,
        );
        assert_eq!(checks(&c), vec![POOL_LEDGER]);
        assert!(
            c.failures[0].detail.contains("signature"),
            "{:?}",
            c.failures
        );
    }

    #[test]
    fn nonce_not_issued_key_mismatch_and_another_run_fail() {
        let f = fixture();
        let not_issued = ledger(
            &f,
            vec![exec(1, 1, &f.key_hash, &[0x33; 32], RESULT_VERIFIED)],
        );
        let c = check(
            &not_issued,
            &f.pool.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            1,
        );
        assert_eq!(checks(&c), vec![POOL_LEDGER]);
        assert!(c.failures[0].detail.contains("was not issued"));

        let other_key = ledger(
            &f,
            vec![exec(
                1,
                1,
                &hex::encode([8u8; 32]),
                &f.nonce,
                RESULT_VERIFIED,
            )],
        );
        let c = check(
            &other_key,
            &f.pool.verifying_key(),
            &f.founder_nonce,
            &f.evidence,
            1,
        );
        assert_eq!(checks(&c), vec![POOL_LEDGER]);
        assert!(c.failures[0].detail.contains("key"), "{:?}", c.failures);

        let c = check(
            &other_key,
            &f.pool.verifying_key(),
            &[0x12; 32],
            &f.evidence,
            1,
        );
        assert_eq!(checks(&c), vec![POOL_LEDGER]);
        assert!(c.failures[0].detail.contains("founder nonce"));
    }
}
