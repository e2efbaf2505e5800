//! Intel TDX: the types of [`crate::verify_tdx_quote`]'s result, the TDX policy, and the quote verification the
//! `verify-attestation tdx-quote` command line runs on a quote it has parsed already (it adds an event log's
//! replay and its own rows). Everything else of the TDX checks is internal.

pub use crate::tdx::collateral::{CollateralError, CollateralSource, CollateralUsed};
pub use crate::tdx::pck::PckExtensions;
pub use crate::tdx::{
    Authenticity, CollateralChecks, Policy, Root, TcbEvaluation, TcbStatus, TdxError,
    TdxVerification,
};

/// Verifies a TDX quote already parsed from `raw` (the bytes as received) with its collateral given as
/// `collateral.json` bytes, at `at` (Unix seconds), under `policy`; `allow_simulated` accepts a PCK chain that ends
/// in a root other than Intel's. `Err`: the collateral does not parse (nothing of the quote is reported then).
pub fn verify_parsed_quote(
    raw: &[u8],
    quote: attestation::tdx::Quote,
    collateral_json: Option<&[u8]>,
    at: i64,
    policy: &Policy,
    allow_simulated: bool,
) -> Result<TdxVerification, CollateralError> {
    let opts = crate::tdx::VerifyOptions {
        collateral: None,
        at,
        policy,
        allow_simulated,
    };
    crate::tdx::verify_quote_received_json(raw, quote, collateral_json, &opts)
}

/// The SGX extensions (FMSPC, TCB, PCE-ID, ...) of the PCK certificate a quote carries, if it carries a readable
/// chain; for showing a quote. Nothing is verified.
pub fn pck_extensions(q: &attestation::tdx::Quote) -> Option<PckExtensions> {
    let pem = q.pck_chain_pem()?;
    let chain = crate::tdx::x509::parse_pem_chain("PCK chain", pem).ok()?;
    PckExtensions::from_cert(chain.first()?).ok()
}
