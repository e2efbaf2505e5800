//! Intel TDX DCAP quotes (versions 4 and 5): typed parsing and byte-exact serialisation.
//! The layouts follow Intel's "TDX DCAP Quote Generation/Verification Library" appendix: a 48-byte header, a
//! TD report body (TD 1.0, 584 bytes; TD 1.5, 648 bytes), then ECDSA-P256 signature data with nested
//! certification data (type 6 QE report, holding type 5, the PEM PCK chain). Nothing here verifies anything.

mod body;
mod quote;

pub use body::{EnclaveReport, TdAttributes, TdReport10, TdReport15};
pub use quote::{
    CertificationData, PckCertData, QeReportCertData, Quote, QuoteBody, QuoteHeader, SignatureData,
};

/// Length of the quote header.
pub const HEADER_LEN: usize = 48;
/// Length of the TD 1.0 report body (v4 quotes, and v5 body type 2).
pub const TD10_BODY_LEN: usize = 584;
/// Length of the TD 1.5 report body (v5 body type 3).
pub const TD15_BODY_LEN: usize = 648;
/// Length of an SGX enclave report (the QE report).
pub const ENCLAVE_REPORT_LEN: usize = 384;
/// `tee_type` of a TDX quote.
pub const TEE_TYPE_TDX: u32 = 0x81;
/// `att_key_type` for ECDSA-256 with P-256.
pub const ATT_KEY_TYPE_ECDSA_P256: u16 = 2;
/// v5 body type of a TD 1.0 report.
pub const BODY_TYPE_TD10: u16 = 2;
/// v5 body type of a TD 1.5 report.
pub const BODY_TYPE_TD15: u16 = 3;
/// Certification data type: PCK certificate chain, PEM, leaf first.
pub const CERT_TYPE_PCK_CHAIN: u16 = 5;
/// Certification data type: QE report certification data.
pub const CERT_TYPE_QE_REPORT: u16 = 6;

/// Why a byte string is not a TDX quote we can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuoteError {
    /// The quote ends before a field its own lengths announce.
    #[error(
        "quote truncated: {field} at offset {offset} needs {needed} bytes, only {available} left"
    )]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Its offset in the quote.
        offset: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes that remain.
        available: usize,
    },
    /// The header version is not 4 or 5.
    #[error("unsupported quote version {0} at offset 0 (4 and 5 are supported)")]
    UnsupportedVersion(u16),
    /// The attestation key type is not ECDSA-256 (2).
    #[error("unsupported attestation key type {0} at offset 2 (only 2, ECDSA-256-with-P-256, is supported)")]
    UnsupportedKeyType(u16),
    /// The TEE type is not TDX (0x81).
    #[error("unsupported tee_type {0:#x} at offset 4 (only 0x81, TDX, is supported)")]
    UnsupportedTeeType(u32),
    /// The v5 body type is not a TD report.
    #[error("unsupported v5 body type {0} at offset 48 (2 = TD 1.0, 3 = TD 1.5)")]
    UnsupportedBodyType(u16),
    /// The v5 body size disagrees with its type.
    #[error("v5 body size {size} at offset 50 does not match body type {body_type} (expected {expected})")]
    BodySizeMismatch {
        /// The body type read.
        body_type: u16,
        /// The size read.
        size: u32,
        /// The size that type has.
        expected: usize,
    },
    /// A length field does not fit the quote (or this platform's address space).
    #[error("{field} at offset {offset} is {value}, larger than the quote")]
    LengthOverflow {
        /// The length field.
        field: &'static str,
        /// Its offset.
        offset: usize,
        /// Its value.
        value: u64,
    },
    /// Any other failure of the byte reader (`attestation::wire`), as it names it.
    #[error("{0}")]
    Wire(crate::wire::WireError),
    /// A serialised length would not fit its field.
    #[error("{field} is {len} bytes, too long for its length field")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
}

impl From<crate::wire::WireError> for QuoteError {
    fn from(e: crate::wire::WireError) -> Self {
        use crate::wire::WireError;
        match e {
            WireError::Truncated {
                field,
                offset,
                needed,
                available,
                ..
            } => QuoteError::Truncated {
                field,
                offset,
                needed,
                available,
            },
            WireError::LengthOverflow {
                field,
                offset,
                value,
                ..
            } => QuoteError::LengthOverflow {
                field,
                offset,
                value,
            },
            other => QuoteError::Wire(other),
        }
    }
}
