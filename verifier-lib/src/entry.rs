//! The library's entry points: one per kind of input, each taking the same [`Input`] (the bytes as received,
//! the founder's pins, the policy, the collateral, the time) and giving the same [`Verification`] (one row per
//! claim: held, failed or not pinned, each held claim with its anchor; every failed check; the kind's own
//! detailed result). An input that cannot be verified at all (bytes that are not a report, a quote or evidence,
//! collateral that does not parse, no certificates for a bare SEV-SNP report) is a [`VerifyError`], never a
//! failed check.

use std::sync::Arc;

use crate::evidence::{Decoded, EvidenceOptions, EvidenceVerification, RunPins};
use crate::failure::Failure;
use crate::output::{Claim, ClaimContext};
use crate::snp::{CertBundle, ChainOptions, SnpInput, SnpVerification};
use crate::tdx::{TdxVerification, VerifyOptions};

/// What the founder pins that no report policy holds: the nonce sent with the job, the auditor-signed
/// measurement set, the run's own facts (outcome, commit, tree, patch, job, test tree, isolation). They apply to
/// evidence; a bare report or quote is pinned through its [`Policy`] (measurement, REPORT_DATA).
#[derive(Clone, Debug, Default)]
pub struct Pins {
    /// The founder's nonce; without it (and without [`Self::no_nonce`]) the `nonce` claim fails.
    pub nonce: Option<Vec<u8>>,
    /// Skip the nonce on purpose: the verdict may then be a replay of an older run.
    pub no_nonce: bool,
    /// A measurement set whose auditor signatures were already checked; the launch measurement must be one of
    /// its entries.
    pub measurement_set: Option<Arc<measurements::set::TrustedSet>>,
    /// Skip the launch-measurement pin on purpose (any guest code could then have produced the verdict).
    pub any_measurement: bool,
    /// TDX: accept an image pin that leaves RTMR1/RTMR2 unpinned, on purpose.
    pub leave_rtmrs_unpinned: bool,
    /// The pins on the run itself.
    pub run: RunPins,
}

/// What the founder accepts: what applies whatever the TEE (launch measurements, debugging, REPORT_DATA), the
/// SEV-SNP policy and the TDX policy (each its own type, complete on its own: an input of one TEE is judged by
/// that TEE's policy and the shared part, never by the other TEE's policy), and whether a chain that ends in a
/// root other than the vendor's is accepted (the result then says simulated).
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Every kind of input: its `measurements` are SEV-SNP MEASUREMENTs or TDX MRTDs (on TDX evidence they pin
    /// the firmware only: a `measurement-incomplete` failure unless [`Pins::leave_rtmrs_unpinned`]), its
    /// `allow_debug` and `report_data` apply to either TEE, as `--measurement`, `--allow-debug` and
    /// `--report-data` do.
    pub shared: crate::evidence::SharedPolicy,
    /// SEV-SNP reports and SEV-SNP evidence.
    pub snp: crate::snp::Policy,
    /// TDX quotes and TDX evidence.
    pub tdx: crate::tdx::Policy,
    /// Accept a simulated chain.
    pub allow_simulated: bool,
}

/// What verifies the chain and the TCB when the input does not carry it, and where it came from.
#[derive(Clone, Debug, Default)]
pub struct Collateral {
    /// SEV-SNP: the ARK, ASK/ASVK and VCEK/VLEK. Required for a bare report; for evidence they replace the
    /// certificates the evidence carries.
    pub snp_certs: Option<CertBundle>,
    /// SEV-SNP: a CRL (DER or PEM) signed by the ARK; without it revocation is not checked.
    pub snp_crl: Option<Vec<u8>>,
    /// TDX: collateral in the `collateral.json` layout (TCB Info, QE Identity, CRLs, issuer chains). For
    /// evidence it wins over the collateral the evidence carries.
    pub tdx: Option<Vec<u8>>,
    /// Where the collateral came from and what else shapes the claims (collateral source and URLs, TCB
    /// baseline, pool ledger), for the anchors the claims name.
    pub context: ClaimContext,
}

/// One verification's input, the same for every kind.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The bytes exactly as received: a 1184-byte SEV-SNP ATTESTATION_REPORT, a TDX DCAP quote, or fenced-run
    /// evidence (CBOR).
    pub bytes: &'a [u8],
    /// The founder's pins.
    pub pins: Pins,
    /// The policy.
    pub policy: Policy,
    /// The collateral.
    pub collateral: Collateral,
    /// The verification time (certificate validity, CRL and collateral windows, measurement-set expiry).
    pub at: time::OffsetDateTime,
}

impl<'a> Input<'a> {
    /// `bytes` with nothing pinned, the default policies, no collateral, verified at `at`.
    pub fn new(bytes: &'a [u8], at: time::OffsetDateTime) -> Input<'a> {
        Input {
            bytes,
            pins: Pins::default(),
            policy: Policy::default(),
            collateral: Collateral::default(),
            at,
        }
    }

    fn chain_options(&self) -> ChainOptions {
        ChainOptions {
            at: self.at,
            crl: self.collateral.snp_crl.clone(),
            allow_simulated: self.policy.allow_simulated,
        }
    }

    /// The evidence options this input describes.
    fn evidence_options(&self) -> EvidenceOptions {
        EvidenceOptions {
            chain: self.chain_options(),
            shared: self.policy.shared.clone(),
            policy: self.policy.snp.clone(),
            nonce: self.pins.nonce.clone(),
            any_measurement: self.pins.any_measurement,
            measurement_set: self.pins.measurement_set.clone(),
            tdx_collateral: self.collateral.tdx.clone(),
            snp_certs: self.collateral.snp_certs.clone(),
            no_nonce: self.pins.no_nonce,
            tdx_policy: self.policy.tdx.clone(),
            leave_rtmrs_unpinned: self.pins.leave_rtmrs_unpinned,
            pins: self.pins.run.clone(),
        }
    }
}

/// Which entry point gave a [`Verification`], with that kind's detailed result.
#[derive(Debug)]
#[non_exhaustive]
pub enum Detail {
    /// [`verify_snp_report`].
    SnpReport(Box<SnpVerification>),
    /// [`verify_tdx_quote`].
    TdxQuote(Box<TdxVerification>),
    /// [`verify_evidence`].
    Evidence(Box<EvidenceVerification>),
}

/// The result of every entry point: one row per claim, every failed check, and the detailed result.
#[derive(Debug)]
pub struct Verification {
    /// One row per claim the founder relies on, in the order the CLI prints them: a bare report has `chain`,
    /// `tcb`, `policy`, `measurement` and `collateral`; evidence adds key binding, verdict signature, nonce, pool
    /// attempt, outcome, commit, tree, patch, job, test tree and isolation.
    pub claims: Vec<Claim>,
    /// Every failed check, in the order of the checks; empty means verified.
    pub failures: Vec<Failure>,
    /// The kind's own result.
    pub detail: Detail,
}

impl Verification {
    /// Whether every check passed.
    pub fn verified(&self) -> bool {
        self.failures.is_empty()
    }

    /// The row of one claim (`chain`, `nonce`, ...), if this kind of input has it.
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.claims.iter().find(|c| c.claim == name)
    }
}

/// An input that cannot be verified at all (the CLI's exit 2), as opposed to one that fails its checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The bytes are not an SEV-SNP report.
    #[error("SEV-SNP report: {0}")]
    Report(#[from] attestation::snp::ReportError),
    /// A bare SEV-SNP report was given without [`Collateral::snp_certs`].
    #[error("SEV-SNP report: no certificates given (the ARK, ASK/ASVK and VCEK/VLEK)")]
    NoCertificates,
    /// The bytes are not a TDX quote, or the TDX collateral does not parse.
    #[error("TDX {0}")]
    Tdx(#[from] crate::tdx::TdxError),
    /// The bytes are not fenced-run evidence.
    #[error("evidence: {0}")]
    Evidence(#[from] attestation::evidence::EvidenceError),
}

/// Verifies a bare SEV-SNP report: the chain from [`Collateral::snp_certs`] to a pinned AMD ARK (CRL from
/// [`Collateral::snp_crl`]), the report's signature over its bytes as received, then [`Policy::snp`] with
/// [`Policy::shared`].
pub fn verify_snp_report(input: &Input<'_>) -> Result<Verification, VerifyError> {
    let certs = input
        .collateral
        .snp_certs
        .as_ref()
        .ok_or(VerifyError::NoCertificates)?;
    let opts = input.chain_options();
    let snp_input = SnpInput {
        report: input.bytes,
        certs,
    };
    let policy = input.policy.shared.snp_policy(&input.policy.snp);
    let v = crate::snp::verify_report_bytes(&snp_input, &opts, &policy)?;
    let claims = crate::output::snp_claims(&v, &opts, &policy, &input.collateral.context);
    Ok(Verification {
        claims,
        failures: v.failures.clone(),
        detail: Detail::SnpReport(Box::new(v)),
    })
}

/// Verifies a bare TDX quote: the PCK chain it carries to the pinned Intel root, the QE report and the quote's
/// signature, the collateral of [`Collateral::tdx`] (signatures, windows, revocation, TCB status), then
/// [`Policy::tdx`] with [`Policy::shared`] (its measurements as MRTDs).
pub fn verify_tdx_quote(input: &Input<'_>) -> Result<Verification, VerifyError> {
    let collateral = input
        .collateral
        .tdx
        .as_deref()
        .map(crate::tdx::Collateral::from_json)
        .transpose()
        .map_err(crate::tdx::TdxError::Collateral)?;
    let policy = input.policy.shared.tdx_policy(&input.policy.tdx);
    let opts = VerifyOptions {
        collateral: collateral.as_ref(),
        at: input.at.unix_timestamp(),
        policy: &policy,
        allow_simulated: input.policy.allow_simulated,
    };
    let v = crate::tdx::verify_quote(input.bytes, &opts)?;
    let claims = crate::output::tdx_claims(&v, &policy, &input.collateral.context);
    Ok(Verification {
        claims,
        failures: v.failures.clone(),
        detail: Detail::TdxQuote(Box::new(v)),
    })
}

/// Verifies fenced-run evidence: the CBOR decoded once and the SEV-SNP report in it parsed once, the report or
/// quote as [`verify_snp_report`] and [`verify_tdx_quote`] do (with the evidence's certificates and collateral
/// unless [`Collateral`] gives them), the key binding, the verdict's signature, the nonce, the measurement and
/// the run pins of [`Pins`].
pub fn verify_evidence(input: &Input<'_>) -> Result<Verification, VerifyError> {
    let opts = input.evidence_options();
    let decoded = Decoded::from_cbor(input.bytes)?;
    let v = crate::evidence::verify_decoded(&decoded, &opts);
    let claims = crate::output::evidence_claims(&v, &opts, &input.collateral.context);
    Ok(Verification {
        claims,
        failures: v.failures.clone(),
        detail: Detail::Evidence(Box::new(v)),
    })
}
