//! What the standard forms (the in-toto statement, the EAR) are made from: one verified evidence bundle's claim
//! rows and result, with the evidence's digest and what the founder allowed. Gathered once by `evidence`,
//! read by [`super::statement`] and [`super::ear`].

use attestation::evidence::TeeLabel;
use attestation::verdict::Verdict;
use verifier_lib::{Claim, ClaimStatus, Detail, EvidenceVerification, Verification};

/// One evidence verification, as the standard forms read it.
#[derive(Clone, Copy, Debug)]
pub struct RunFacts<'a> {
    /// The claim rows, in the order of `verifier_lib::output::CLAIMS`.
    pub claims: &'a [Claim],
    /// The evidence's result (its failures, the verdict once its signature verified, the TEE label).
    pub evidence: &'a EvidenceVerification,
    /// SHA-256 of the evidence file as received.
    pub evidence_sha256: [u8; 32],
    /// The fence transcript's final chain hash (SHA-384, docs/transcript.md), when the evidence carries one
    /// (`None` otherwise: the field is then left out).
    pub transcript_sha384: Option<[u8; 48]>,
    /// The founder accepted a debug guest (`--allow-debug`): the host may read its memory.
    pub allow_debug: bool,
}

/// Why a [`Verification`] gives no [`RunFacts`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    /// The verification is of a bare report or quote, not of evidence.
    #[error(
        "the standard forms are made from an evidence verification, not a bare report or quote"
    )]
    NotEvidence,
}

impl<'a> RunFacts<'a> {
    /// The facts of a [`Verification`] by `verifier_lib::verify_evidence`.
    pub fn from_verification(
        v: &'a Verification,
        evidence_sha256: [u8; 32],
        allow_debug: bool,
    ) -> Result<RunFacts<'a>, FactsError> {
        match &v.detail {
            Detail::Evidence(e) => Ok(RunFacts {
                claims: &v.claims,
                evidence: e,
                evidence_sha256,
                transcript_sha384: None,
                allow_debug,
            }),
            _ => Err(FactsError::NotEvidence),
        }
    }

    /// Whether every check passed and every claim row held or was not pinned.
    pub fn verified(&self) -> bool {
        self.evidence.verified() && self.claims.iter().all(|c| c.status != ClaimStatus::Failed)
    }

    /// The status of the claim `name`, if the verification has that row.
    pub fn status(&self, name: &str) -> Option<ClaimStatus> {
        self.claims
            .iter()
            .find(|c| c.claim == name)
            .map(|c| c.status)
    }

    /// Whether the claim `name` failed.
    pub fn failed(&self, name: &str) -> bool {
        self.status(name) == Some(ClaimStatus::Failed)
    }

    /// Whether the claim `name` held.
    pub fn held(&self, name: &str) -> bool {
        self.status(name) == Some(ClaimStatus::Held)
    }

    /// The verdict, once its signature verified with the bound key.
    pub fn verdict(&self) -> Option<&'a Verdict> {
        self.evidence.verdict.as_ref()
    }

    /// The TEE label the evidence carries.
    pub fn tee(&self) -> TeeLabel {
        self.evidence.label
    }

    /// Whether the chain ends in a root that is not the vendor's (sim evidence).
    pub fn simulated(&self) -> bool {
        self.evidence.simulated
    }

    /// The claim rows as JSON objects (`claim`, `status`, `anchor`), for the forms' own extension fields.
    pub fn claims_json(&self) -> serde_json::Value {
        self.claims
            .iter()
            .map(|c| {
                serde_json::json!({
                    "claim": c.claim,
                    "status": c.status.as_str(),
                    "anchor": c.anchor,
                })
            })
            .collect()
    }
}

/// For the statement's and the EAR's unit tests: a verification result of `label` with every check held and
/// nothing verified of the report (the writers read the verdict and the claim rows, not the report).
#[cfg(test)]
pub(crate) fn test_evidence(
    label: attestation::evidence::TeeLabel,
    simulated: bool,
    verdict: Option<attestation::verdict::Verdict>,
) -> EvidenceVerification {
    EvidenceVerification {
        label,
        simulated,
        report: verifier_lib::ReportVerification::Unverified,
        verdict,
        measurement_pinned: true,
        pinned_registers: Vec::new(),
        outcome_pinned: false,
        pins: Vec::new(),
        failed_count_unpinned: false,
        set_signers: Vec::new(),
        nonce_checked: true,
        failures: Vec::new(),
        transcript: Default::default(),
    }
}
