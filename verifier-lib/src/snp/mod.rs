//! SEV-SNP verification: authenticity (chain, signature) in `chain`, acceptability (policy) in `policy`.
//!
//! [`verify_report`] runs both over a parsed report and its certificates and collects every failure;
//! [`verify_report_with_chain`] reuses a chain already checked (one VCEK signs many reports).

pub mod certs;
pub mod chain;
pub mod policy;

use crate::output::Failure;
use attestation::snp::{AttestationReport, Product};
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

/// Verifies `report` with the certificates of `bundle` under `opts` (time, CRL, simulated) and `policy`.
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
pub fn verify_report_with_chain(
    report: &AttestationReport,
    chain: &ChainOutcome,
    policy: &Policy,
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
    let (signature_valid, auth) = chain::verify_report_against_chain(report, chain);
    failures.extend(auth);
    failures.extend(policy.check(report, chain.product));
    SnpVerification {
        report: report.clone(),
        chain: chain.clone(),
        signature_valid,
        failures,
    }
}
