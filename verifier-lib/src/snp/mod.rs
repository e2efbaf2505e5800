//! SEV-SNP verification: authenticity (chain, signature) in `chain`, acceptability (policy) in `policy`.
//!
//! The shape every verifier of this crate shares (TDX's too): [`verify`] takes the input as received and
//! options and answers "is it authentic?" with a typed result carrying every failure; [`validate`] adds
//! "is it acceptable?" (policy, measurement, TCB) to that result. [`verify_report`] runs both over a parsed
//! report; [`verify_report_with_chain`] reuses a chain already checked (one VCEK signs many reports), and
//! [`crate::Verifier`] caches chains for callers that verify many reports.

pub mod certs;
pub mod chain;
pub mod policy;
mod roots;

use crate::failure::Failure;
use attestation::snp::{AttestationReport, Product, ReportError};
pub use certs::CertBundle;
pub use chain::{verify_chain, ChainOptions, ChainOutcome, RootKind};
pub use policy::Policy;

/// The full result of verifying one SEV-SNP report.
#[derive(Clone, Debug)]
pub struct SnpVerification {
    /// The report that was verified.
    pub report: AttestationReport,
    /// The chain outcome (root kind, product, leaf facts, per-signature results).
    pub chain: ChainOutcome,
    /// The report signature verified with the VCEK/VLEK key.
    pub signature_valid: bool,
    /// Every failed check: chain, report authenticity, then policy.
    pub failures: Vec<Failure>,
}

impl SnpVerification {
    /// Whether every check passed.
    pub fn verified(&self) -> bool {
        self.failures.is_empty()
    }

    /// The product the report was verified as.
    pub fn product(&self) -> Option<Product> {
        self.chain.product
    }

    /// Whether the chain ends in a root that is not AMD's.
    pub fn simulated(&self) -> bool {
        self.chain.root.is_simulated()
    }
}

/// What SEV-SNP verification reads: the report exactly as received and the certificates of its chain.
#[derive(Clone, Copy, Debug)]
pub struct SnpInput<'a> {
    /// The 1184-byte report as received (its signature is checked over bytes 0x000..0x2A0 of these).
    pub report: &'a [u8],
    /// The ARK, ASK/ASVK and VCEK/VLEK.
    pub certs: &'a CertBundle,
}

/// Authenticity: parses the report and checks the chain (under `opts`: time, CRL, simulated) and the report's
/// signature over its bytes as received, its signing key, TCB extensions and hwID. No policy is applied; see
/// [`validate`]. A report that does not parse is an error, not a failed check.
pub fn verify(input: &SnpInput<'_>, opts: &ChainOptions) -> Result<SnpVerification, ReportError> {
    let report = AttestationReport::from_bytes(input.report)?;
    Ok(verify_parsed(report, input, opts))
}

/// [`verify`] of a report parsed earlier from `input.report` (evidence parses it once,
/// `crate::evidence::Decoded`); the signature is still checked over `input.report`, the bytes as received.
pub(crate) fn verify_parsed(
    report: AttestationReport,
    input: &SnpInput<'_>,
    opts: &ChainOptions,
) -> SnpVerification {
    // One verification: each distinct signature checked once (crate::sigcache::within_one_verification).
    crate::sigcache::within_one_verification(|| {
        let chain = verify_chain(input.certs, opts, report.product_from_cpuid());
        verify_with_chain(report, input.report, &chain)
    })
}

/// Acceptability: adds the failures of `policy` (guest policy, TCB minimums, measurement, report data, ...) to
/// an authenticity result.
pub fn validate(v: &mut SnpVerification, policy: &Policy) {
    let product = v.chain.product;
    v.failures.extend(policy.check(&v.report, product));
}

/// Authenticity of a report parsed from `raw` against a chain checked earlier.
pub(crate) fn verify_with_chain(
    report: AttestationReport,
    raw: &[u8],
    chain: &ChainOutcome,
) -> SnpVerification {
    let mut failures = chain.failures.clone();
    if let (Some(c), Some(p)) = (report.product_from_cpuid(), chain.product) {
        if c != p && !failures.iter().any(|f| f.check == chain::checks::PRODUCT) {
            failures.push(Failure::new(
                chain::checks::PRODUCT,
                format!("CPUID names {c}, the chain was verified for {p}"),
            ));
        }
    }
    let (signature_valid, auth) = chain::verify_received_against_chain(&report, raw, chain);
    failures.extend(auth);
    SnpVerification {
        report,
        chain: chain.clone(),
        signature_valid,
        failures,
    }
}

/// Verifies and validates a report given as bytes (authenticity, then the policy).
pub fn verify_report_bytes(
    input: &SnpInput<'_>,
    opts: &ChainOptions,
    policy: &Policy,
) -> Result<SnpVerification, ReportError> {
    let mut v = verify(input, opts)?;
    validate(&mut v, policy);
    Ok(v)
}

/// Verifies `report` with the certificates of `bundle` under `opts` (time, CRL, simulated) and `policy`. A
/// report made in memory is checked over its own encoding; one read from bytes should go through
/// [`verify_report_bytes`], which checks the bytes as received.
#[cfg(any(test, feature = "internals"))]
pub fn verify_report(
    report: &AttestationReport,
    bundle: &CertBundle,
    opts: &ChainOptions,
    policy: &Policy,
) -> SnpVerification {
    let chain = verify_chain(bundle, opts, report.product_from_cpuid());
    verify_report_with_chain(report, &chain, policy)
}

/// Verifies `report` against a chain checked earlier (its failures are carried into the result).
#[cfg(any(test, feature = "internals"))]
pub fn verify_report_with_chain(
    report: &AttestationReport,
    chain: &ChainOutcome,
    policy: &Policy,
) -> SnpVerification {
    let mut v = verify_with_chain(report.clone(), &report.to_bytes(), chain);
    validate(&mut v, policy);
    v
}
