//! Collateral a verification needs but the evidence may lack: [`Bundle`] is the offline bundle auditors sign,
//! [`Baseline`] the SEV-SNP TCB floor file (`--tcb-baseline`); both are checks on bytes the founder hands in.
//!
//! With the feature `fetch` (off by default; the verify-attestation CLI turns it on) it is also fetched from
//! AMD's KDS and Intel's PCS (`Kds`, `Pcs`, one HTTP `Client`), verified before use, and kept in an
//! on-disk `Cache` until the earliest expiry or `nextUpdate`. Without it the library has no HTTP client and no
//! cache layout.

// The parts are internal (public only with the unstable feature `internals`); what the CLI needs is below.
interior!(baseline);
interior!(bundle);
interior!(
    #[cfg(feature = "fetch")]
    cache
);
interior!(
    #[cfg(feature = "fetch")]
    http
);
interior!(
    #[cfg(feature = "fetch")]
    kds
);
interior!(
    #[cfg(feature = "fetch")]
    pcs
);

#[cfg(feature = "fetch")]
mod error;
#[cfg(feature = "fetch")]
mod fetch_config;

/// The `collateral.json` layout (dcap-qvl's QuoteCollateralV3) that `from_responses` (feature `fetch`) assembles and
/// [`crate::Collateral::tdx`] takes.
pub use crate::tdx::collateral::CollateralFile;
pub use baseline::{Baseline, BaselineError, Floor, Shortfall, BASELINE_FORMAT};
pub use bundle::{
    key_id, Bundle, BundleError, BundleSignature, Content, SignatureCheck, SnpPart, BUNDLE_FORMAT,
};
#[cfg(feature = "fetch")]
pub use cache::{rfc3339, Cache, CacheError, Origin};
#[cfg(feature = "fetch")]
pub use error::{FetchError, SnpFetched, VLEK_ADVICE};
#[cfg(feature = "fetch")]
pub use fetch_config::{FetchConfig, FetchConfigError};
#[cfg(feature = "fetch")]
pub use http::{Client, HttpError, HttpOptions};
#[cfg(feature = "fetch")]
pub use kds::{vlek_error, Endorsement, Kds, DEFAULT_KDS_URL};
#[cfg(feature = "fetch")]
pub use pcs::{
    from_responses, Pcs, QuoteNeeds, TdxFetched, UnknownUpdate, Update, DEFAULT_PCS_URL,
};
