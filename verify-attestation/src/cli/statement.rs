//! `--emit-statement`: a verified run as an in-toto Statement v1 with the `test-result` v0.1 predicate, in a DSSE
//! envelope signed with the founder's key (docs/verification.md, "Standard forms").
//!
//! The subjects are what was tested: the base commit (`gitCommit`), the repository's tree after the patch
//! (`gitTree`) and the patch (`sha256`). The predicate's `result` is the outcome mapped to PASSED, WARNED or
//! FAILED; `configuration` the job file and the protected test tree; fenced-run's own fields sit in the
//! extension field `fencedRun` (the in-toto parsing rules let producers add fields to any object, and consumers
//! ignore the ones they do not know). Only a run whose verification held is written.

use super::founder_key::FounderKey;
use super::run_facts::RunFacts;
use attestation::verdict::Outcome;
use base64::Engine;
use serde_json::{json, Map, Value};

/// The Statement's `_type`.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate type: in-toto's test-result, version 0.1.
pub const TEST_RESULT_PREDICATE: &str = "https://in-toto.io/attestation/test-result/v0.1";
/// The DSSE payload type of an in-toto Statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The extension field of the predicate that holds fenced-run's own fields.
pub const EXTENSION_FIELD: &str = "fencedRun";

/// Why no statement was made.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    /// The verification failed: a statement says a run was verified, so none is made.
    #[error(
        "the verification failed ({0}): no statement is written for a run that did not verify"
    )]
    NotVerified(String),
    /// The verdict names no commit, tree or patch: the statement would have no subject.
    #[error("the verdict names no commit, tree or patch: an in-toto statement needs at least one subject")]
    NoSubject,
    /// A digest of the verdict's inputs is not the hex an in-toto digest set holds.
    #[error(
        "the verdict's inputs.{field} `{value}` is not {want}: it cannot be an in-toto digest"
    )]
    BadDigest {
        /// The input (`commit`, `tree`, `patch_sha256`, `job_sha256`, `test_tree`).
        field: &'static str,
        /// The value, shortened.
        value: String,
        /// What a digest of that kind is.
        want: &'static str,
    },
}

/// `value` in lowercase when it is hex of one of `lens` digits, else [`StatementError::BadDigest`].
fn digest(field: &'static str, value: &str, lens: &[usize]) -> Result<String, StatementError> {
    if lens.contains(&value.len()) && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(StatementError::BadDigest {
            field,
            value: value.chars().take(80).collect(),
            want: if lens == GIT {
                "a git object id (40 or 64 hex digits)"
            } else {
                "a SHA-256 (64 hex digits)"
            },
        })
    }
}

/// Git object ids: SHA-1 or SHA-256.
const GIT: &[usize] = &[40, 64];
/// A SHA-256.
const SHA256: &[usize] = &[64];

/// The test-result `result` of an outcome: `PASSED` for `tests_passed`; `WARNED` for `no_tests_observed` and
/// `counts_unparsed` (the command finished with no failure counted, but no pass was counted either); `FAILED`
/// for every other outcome (`tests_failed`, and the runs whose tests did not complete: `refused`,
/// `test_command_unavailable`, `environment_exhausted`, `budget_expired`).
pub fn test_result(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::TestsPassed => "PASSED",
        Outcome::NoTestsObserved | Outcome::CountsUnparsed => "WARNED",
        _ => "FAILED",
    }
}

/// The Statement of a verified run (JSON), or why none is made.
pub fn statement(facts: &RunFacts<'_>, verifier: &str) -> Result<Value, StatementError> {
    if !facts.verified() {
        let failed: Vec<String> = facts
            .evidence
            .failures
            .iter()
            .map(|f| f.check.to_string())
            .chain(
                facts
                    .claims
                    .iter()
                    .filter(|c| c.status == verifier_lib::ClaimStatus::Failed)
                    .map(|c| c.claim.to_string()),
            )
            .collect();
        return Err(StatementError::NotVerified(if failed.is_empty() {
            "no verdict".into()
        } else {
            failed.join(", ")
        }));
    }
    // A verified run has a verdict whose signature held; without one nothing can be stated.
    let verdict = facts
        .verdict()
        .ok_or_else(|| StatementError::NotVerified("no verdict".into()))?;
    let inputs = &verdict.inputs;
    let mut subject = Vec::new();
    if let Some(c) = &inputs.commit {
        let mut d = json!({"name": "commit", "digest": {"gitCommit": digest("commit", c, GIT)?}});
        if let Some(r) = &verdict.repository {
            d["uri"] = Value::String(r.url.clone());
        }
        subject.push(d);
    }
    if let Some(t) = &inputs.tree {
        subject.push(json!({"name": "tree", "digest": {"gitTree": digest("tree", t, GIT)?}}));
    }
    if let Some(p) = &inputs.patch_sha256 {
        subject.push(
            json!({"name": "patch", "digest": {"sha256": digest("patch_sha256", p, SHA256)?}}),
        );
    }
    if subject.is_empty() {
        return Err(StatementError::NoSubject);
    }
    let mut configuration = Vec::new();
    if let Some(j) = &inputs.job_sha256 {
        configuration
            .push(json!({"name": "job", "digest": {"sha256": digest("job_sha256", j, SHA256)?}}));
    }
    if let Some(t) = &inputs.test_tree {
        configuration.push(json!({
            "name": "protected test paths",
            "digest": {"gitTree": digest("test_tree", t, GIT)?},
            "annotations": {"paths": inputs.protect},
        }));
    }
    let mut own = Map::new();
    own.insert("outcome".into(), verdict.outcome.as_str().into());
    own.insert("judged".into(), verdict.judged.into());
    if let Some(t) = &verdict.tests {
        own.insert(
            "counts".into(),
            json!({"passed": t.passed, "failed": t.failed, "skipped": t.skipped, "parser": t.parser}),
        );
    }
    own.insert("tier".into(), verdict.isolation.as_str().into());
    own.insert("tee".into(), facts.tee().as_str().into());
    own.insert("simulated".into(), facts.simulated().into());
    own.insert(
        "evidenceSha256".into(),
        hex::encode(facts.evidence_sha256).into(),
    );
    if let Some(t) = facts.transcript_sha384 {
        own.insert("transcriptSha384".into(), hex::encode(t).into());
    }
    own.insert("nonce".into(), hex::encode(&inputs.nonce).into());
    own.insert("verifier".into(), verifier.into());
    own.insert("claims".into(), facts.claims_json());
    Ok(json!({
        "_type": STATEMENT_TYPE,
        "subject": subject,
        "predicateType": TEST_RESULT_PREDICATE,
        "predicate": {
            "result": test_result(verdict.outcome),
            "configuration": configuration,
            EXTENSION_FIELD: own,
        },
    }))
}

/// DSSE's pre-authentication encoding: `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, lengths in ASCII
/// decimal.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The DSSE envelope of `payload` (standard base64 with padding), signed over its PAE with `key`.
pub fn envelope(payload: &[u8], key: &FounderKey) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let sig = key.sign_der(&pae(PAYLOAD_TYPE, payload));
    json!({
        "payloadType": PAYLOAD_TYPE,
        "payload": b64.encode(payload),
        "signatures": [{"keyid": key.keyid(), "sig": b64.encode(sig)}],
    })
}

/// The signed statement of a verified run: the envelope's JSON text (pretty, with a final newline).
pub fn signed(
    facts: &RunFacts<'_>,
    key: &FounderKey,
    verifier: &str,
) -> Result<String, StatementError> {
    let s = statement(facts, verifier)?;
    // Serializing a `Value` cannot fail.
    let payload = serde_json::to_vec(&s).unwrap_or_default();
    let env = envelope(&payload, key);
    Ok(format!(
        "{}\n",
        serde_json::to_string_pretty(&env).unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_reference_example() {
        // The worked example of the DSSE protocol: type "http://example.com/HelloWorld", body "hello world".
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    use attestation::evidence::TeeLabel;
    use attestation::verdict::{Inputs, Isolation, Verdict};
    use verifier_lib::{Claim, ClaimStatus, EvidenceVerification};

    fn evidence(verdict: Verdict) -> EvidenceVerification {
        crate::cli::run_facts::test_evidence(TeeLabel::Tdx, false, Some(verdict))
    }

    fn claims(status: ClaimStatus) -> Vec<Claim> {
        vec![Claim {
            claim: "measurement",
            status,
            anchor: None,
            detail: String::new(),
        }]
    }

    fn facts<'a>(ev: &'a EvidenceVerification, claims: &'a [Claim]) -> RunFacts<'a> {
        RunFacts {
            claims,
            evidence: ev,
            evidence_sha256: [0xEE; 32],
            transcript_sha384: Some([0x7A; 48]),
            allow_debug: false,
        }
    }

    #[test]
    fn the_transcript_hash_and_the_test_tree_when_present() {
        let inputs = Inputs {
            commit: Some("12".repeat(20)),
            tree: Some("AB".repeat(20)),
            job_sha256: Some("cd".repeat(32)),
            test_tree: Some("ef".repeat(20)),
            protect: vec!["tests/".into()],
            nonce: vec![1; 16],
            ..Inputs::default()
        };
        let mut verdict = Verdict::new(Outcome::NoTestsObserved, Isolation::Tdx, inputs, "test");
        verdict.repository = Some(attestation::verdict::RepositorySource {
            url: "https://git.example/repo.git".into(),
            fetch: "shallow".into(),
            duration_ms: 1,
            egress: Vec::new(),
        });
        let ev = evidence(verdict);
        let c = claims(ClaimStatus::Held);
        let s = statement(&facts(&ev, &c), "verify-attestation test").expect("statement");
        assert_eq!(
            s["subject"],
            json!([
                {"name": "commit", "uri": "https://git.example/repo.git", "digest": {"gitCommit": "12".repeat(20)}},
                {"name": "tree", "digest": {"gitTree": "ab".repeat(20)}},
            ])
        );
        assert_eq!(s["predicate"]["result"], "WARNED");
        assert_eq!(
            s["predicate"]["configuration"][1],
            json!({"name": "protected test paths", "digest": {"gitTree": "ef".repeat(20)},
                   "annotations": {"paths": ["tests/"]}})
        );
        let own = &s["predicate"][EXTENSION_FIELD];
        assert_eq!(own["transcriptSha384"], "7a".repeat(48));
        assert_eq!(own["evidenceSha256"], "ee".repeat(32));
        assert_eq!(own["tee"], "tdx");
        assert_eq!(own["simulated"], false);
        assert!(own.get("counts").is_none());
    }

    #[test]
    fn no_statement_without_a_subject_or_for_a_failed_claim() {
        let ev = evidence(Verdict::new(
            Outcome::TestsPassed,
            Isolation::Tdx,
            Inputs::default(),
            "test",
        ));
        let held = claims(ClaimStatus::Held);
        assert!(matches!(
            statement(&facts(&ev, &held), "v"),
            Err(StatementError::NoSubject)
        ));
        let mut odd = Verdict::new(
            Outcome::TestsPassed,
            Isolation::Tdx,
            Inputs::default(),
            "test",
        );
        odd.inputs.tree = Some("not a tree id".into());
        let ev_odd = evidence(odd);
        match statement(&facts(&ev_odd, &held), "v") {
            Err(e @ StatementError::BadDigest { field: "tree", .. }) => {
                assert!(e.to_string().contains("40 or 64 hex digits"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        let failed = claims(ClaimStatus::Failed);
        match statement(&facts(&ev, &failed), "v") {
            Err(StatementError::NotVerified(why)) => assert_eq!(why, "measurement"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_outcome_maps_to_one_result() {
        let want = [
            (Outcome::Refused, "FAILED"),
            (Outcome::TestsPassed, "PASSED"),
            (Outcome::TestsFailed, "FAILED"),
            (Outcome::NoTestsObserved, "WARNED"),
            (Outcome::CountsUnparsed, "WARNED"),
            (Outcome::TestCommandUnavailable, "FAILED"),
            (Outcome::EnvironmentExhausted, "FAILED"),
            (Outcome::BudgetExpired, "FAILED"),
        ];
        assert_eq!(want.len(), Outcome::ALL.len());
        for (o, r) in want {
            assert_eq!(test_result(o), r, "{o:?}");
        }
    }
}
