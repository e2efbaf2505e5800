//! Intel TDX DCAP quote verification, authenticity kept apart from acceptability: `verify` checks the quote
//! signature, the QE report, its binding and the PCK chain to the pinned Intel SGX Root CA; `collateral` and
//! `tcb` judge TCB Info, QE Identity and CRLs at a given time with Intel's QVL rules; `policy` says what is
//! acceptable. Every failure is collected and names the check, the value seen and the value wanted.

pub mod collateral;
pub mod pck;
pub mod policy;
mod result;
pub mod tcb;
mod verify;
pub mod x509;

// What the crate's tests, benches and the fuzz targets (feature `internals`) name through this module.
#[cfg(any(test, feature = "internals"))]
pub use crate::failure::Failure;
#[cfg(any(test, feature = "internals"))]
pub use collateral::{CollateralError, CollateralSource, CollateralUsed};
#[cfg(any(test, feature = "internals"))]
pub use verify::{
    validate, verify, verify_quote_for_evidence, verify_quote_parsed, verify_quote_received,
    INTEL_QE_VENDOR_ID,
};

pub use collateral::Collateral;
pub use policy::Policy;
pub use result::{Authenticity, CollateralChecks, Root, TdxError, TdxVerification, VerifyOptions};
pub use tcb::{TcbEvaluation, TcbStatus};
pub use verify::{verify_quote, verify_quote_for_evidence_chosen, verify_quote_received_json};
