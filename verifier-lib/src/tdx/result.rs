//! What verifying a quote takes and gives: [`VerifyOptions`] in, [`TdxVerification`] (authenticity, collateral,
//! TCB, failures) or [`TdxError`] out. Below [`super::verify`], which fills them.

use attestation::tdx::{Quote, QuoteError};
use serde::Serialize;

use super::collateral::{self, Collateral, CollateralError};
use super::pck;
use super::policy::Policy;
use super::tcb::{TcbEvaluation, TcbStatus};
use crate::failure::Failure;

/// Which root the PCK chain ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Root {
    /// The Intel SGX Root CA (pinned key).
    Intel,
    /// Any other self-signed root: a simulated (or foreign) chain.
    Simulated,
}

/// The authenticity checks and their results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Authenticity {
    /// The quote signature over header and body verifies with the attestation key.
    pub quote_signature: bool,
    /// The QE report signature verifies with the PCK leaf key.
    pub qe_report_signature: bool,
    /// QE report data = SHA-256(attestation key || QE auth data) || 32 zero bytes.
    pub qe_report_data_binding: bool,
    /// Every certificate of the PCK chain is signed by the next, the root by itself.
    pub pck_chain_signatures: bool,
    /// Every certificate of the PCK chain is valid at the verification time.
    pub pck_chain_time: bool,
    /// The PCK chain passes path validation: exactly PCK leaf <- PCK CA <- root, issuers are CAs with
    /// keyCertSign, the leaf is not a CA, path lengths hold (docs/verification.md, "Path validation").
    pub pck_chain_path: bool,
    /// The root the chain ends in (None when the chain is unreadable).
    pub root: Option<Root>,
}

/// The collateral checks and their results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CollateralChecks {
    /// TCB Info signed over its exact text by the TCB signing key.
    pub tcb_info_signature: bool,
    /// TCB signing chain signed up to the same root as the PCK chain, and valid at the time.
    pub tcb_info_chain: bool,
    /// QE Identity signed over its exact text.
    pub qe_identity_signature: bool,
    /// QE Identity chain good.
    pub qe_identity_chain: bool,
    /// Root CA CRL signed by the root.
    pub root_ca_crl_signature: bool,
    /// PCK CRL signed by the PCK CA of the quote's chain.
    pub pck_crl_signature: bool,
    /// No certificate of the chains revoked.
    pub none_revoked: bool,
    /// FMSPC and PCE-ID of TCB Info equal the PCK certificate's.
    pub fmspc_match: bool,
    /// Every collateral window (TCB Info, QE Identity, CRLs) contains the verification time.
    pub fresh: bool,
}

/// The outcome of verifying one quote: every check result, every failure, and the parsed quote.
#[derive(Debug, Clone)]
pub struct TdxVerification {
    /// The parsed quote.
    pub quote: Quote,
    /// Whether the PCK chain ends in a root other than Intel's (decided by the root key, nothing else).
    pub simulated: bool,
    /// Authenticity results.
    pub authenticity: Authenticity,
    /// Collateral results (None without collateral).
    pub collateral: Option<CollateralChecks>,
    /// Which collateral was used (source, issue dates, next updates); None without collateral.
    pub collateral_used: Option<collateral::CollateralUsed>,
    /// The PCK certificate's SGX extensions (None when unreadable).
    pub pck: Option<pck::PckExtensions>,
    /// The TCB evaluation (None without collateral or PCK extensions).
    pub tcb: Option<TcbEvaluation>,
    /// The verification time (unix seconds).
    pub at: i64,
    /// Every failed check; empty means verified.
    pub failures: Vec<Failure>,
}

impl TdxVerification {
    /// Whether every check passed.
    pub fn verified(&self) -> bool {
        self.failures.is_empty()
    }

    /// The converged TCB status, if it was computed.
    pub fn tcb_status(&self) -> Option<TcbStatus> {
        self.tcb.as_ref().map(|t| t.status)
    }

    /// Whether any failure is of `check` (exact name or a check below it, see [`Failure::is`]).
    pub fn failed(&self, check: &str) -> bool {
        self.failures.iter().any(|f| f.is(check))
    }
}

/// Input that cannot be verified at all (exit 2), as opposed to a quote that fails its checks (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TdxError {
    /// The quote is not a readable TDX quote.
    #[error("quote: {0}")]
    Quote(#[from] QuoteError),
    /// The collateral is not readable.
    #[error("collateral: {0}")]
    Collateral(#[from] CollateralError),
}

/// How to verify: collateral, time, policy, and whether simulated chains are accepted.
#[derive(Debug, Clone, Copy)]
pub struct VerifyOptions<'a> {
    /// Collateral (TCB Info, QE Identity, CRLs), or None.
    pub collateral: Option<&'a Collateral>,
    /// Verification time, unix seconds.
    pub at: i64,
    /// The policy.
    pub policy: &'a Policy,
    /// Accept a chain that ends in a root other than Intel's (the result says simulated).
    pub allow_simulated: bool,
}
