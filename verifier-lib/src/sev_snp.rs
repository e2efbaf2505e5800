//! SEV-SNP: the types of [`crate::verify_snp_report`]'s input and result, the SEV-SNP policy, and the option-level
//! verification the `verify-attestation snp-report` command line runs (it adds a TCB baseline and its own rows).
//! Everything else of the SEV-SNP checks is internal.

pub use crate::snp::certs::{CertBundle, CertError, KdsExtensions, LeafInfo};
pub use crate::snp::chain::{ChainOptions, ChainOutcome, RootKind};
pub use crate::snp::policy::{AbiVersion, Policy, PolicyValueError, TcbMinimum};
pub use crate::snp::{verify_report_bytes, SnpInput, SnpVerification};

/// The product the VCEK/VLEK certificate `der` names (`SEV-Milan`, `SEV-VLEK-Genoa`, ...), if it parses as one;
/// for showing a report without CPUID fields in the right TCB layout. Nothing is verified.
pub fn leaf_product(der: &[u8]) -> Option<attestation::snp::Product> {
    let cert = crate::snp::certs::parse_cert(der, "VCEK/VLEK").ok()?;
    LeafInfo::from_cert(&cert).ok()?.product()
}

/// Why a file is not a CRL file as `--crl` takes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrlFileError {
    /// Neither DER nor PEM with `X509 CRL` blocks.
    #[error("{0}")]
    File(String),
    /// A block is not a DER CertificateList.
    #[error("not a DER CertificateList ({0})")]
    Der(String),
}

/// Checks that `bytes` is a CRL file as `--crl` takes it (DER, or PEM with `X509 CRL` blocks, each a DER
/// CertificateList). Nothing is verified: the chain check does that.
pub fn check_crl_file(bytes: &[u8]) -> Result<(), CrlFileError> {
    let ders =
        crate::pki::crls_from_file_bytes(bytes).map_err(|e| CrlFileError::File(e.to_string()))?;
    for der in &ders {
        use x509_parser::prelude::FromDer;
        if let Err(e) = x509_parser::revocation_list::CertificateRevocationList::from_der(der) {
            return Err(CrlFileError::Der(crate::pki::der_error(&e)));
        }
    }
    Ok(())
}
