//! SEV-SNP ATTESTATION_REPORT: typed parsing and byte-exact serialisation, TCB_VERSION per product.
//!
//! The layout follows the AMD SEV-SNP ABI specification (table "ATTESTATION_REPORT Structure"); versions 2, 3
//! and 5 are accepted and every reserved range is checked to be zero, so a parsed report always writes back
//! to the exact bytes it came from.

mod report;
mod tcb;

pub use report::{
    AttestationReport, Cpuid, FirmwareVersion, GuestPolicy, KeyInfo, PlatformInfo, ReportError,
    Signature, SigningKey, REPORT_LEN, SIGNATURE_ALGO_ECDSA_P384_SHA384, SIGNED_LEN,
    SUPPORTED_VERSIONS,
};
pub use tcb::{Product, TcbParts, TcbVersion};
