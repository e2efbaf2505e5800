//! Why collateral could not be had (feature `fetch`), and the partial fetch a VLEK-signed report leaves: below
//! every fetcher ([`super::kds`], [`super::pcs`]) and the configuration, which all name it.

use super::cache::{self, Origin};
use super::http;
use attestation::snp::Product;

/// Why collateral could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The server could not be reached or answered with an error.
    #[error(transparent)]
    Http(#[from] http::HttpError),
    /// The cache could not be used, or (offline) holds nothing fresh for the key.
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    /// A fetched response failed verification; nothing of it was cached.
    #[error("{what} from {url} rejected: {detail}")]
    Rejected {
        /// Where it came from.
        url: String,
        /// What it was.
        what: String,
        /// Why it was refused.
        detail: String,
    },
    /// The report, quote or a local file does not allow the fetch.
    #[error("{0}")]
    Input(String),
    /// A VLEK-signed report: the ASVK chain (and CRL) were fetched and verified, but the VLEK itself is only
    /// issued to the cloud provider; `partial` holds what was fetched (its `vcek` is empty).
    #[error("{}", VLEK_ADVICE)]
    VlekNotFetchable {
        /// The ARK, ASVK (in `ask`) and CRL fetched.
        partial: Box<SnpFetched>,
    },
}

impl FetchError {
    /// The stable check name of this failure in verify output.
    pub fn check(&self) -> &'static str {
        match self {
            FetchError::Http(_) => "collateral-fetch",
            FetchError::Cache(cache::CacheError::Stale { .. }) => "collateral-stale",
            FetchError::Cache(cache::CacheError::Missing { .. }) => "collateral-missing",
            FetchError::Cache(_) => "collateral-cache",
            FetchError::Rejected { .. } => "collateral-rejected",
            FetchError::Input(_) => "collateral-input",
            FetchError::VlekNotFetchable { .. } => "collateral-vlek",
        }
    }
}

/// What the founder must do for a VLEK-signed report: KDS gives the ASVK chain and CRL to anyone, the VLEK
/// only to the cloud provider.
pub const VLEK_ADVICE: &str = "the report's KEY_INFO.SIGNING_KEY is VLEK: it is signed by a Versioned Loaded \
Endorsement Key, which AMD's KDS issues only to the cloud provider (the request needs the provider's \
credentials), so it cannot be fetched. Get the VLEK certificate from the host or cloud provider (the VLEK entry, \
GUID a8074bc2-a25a-483e-aae6-39c045a0b8a1, of the extended report's certificate table, or the provider's \
attestation service) and give it with `fetch --vlek FILE`, or put it as vlek.der beside ark.pem and asvk.pem \
and verify with `snp-report --certs DIR`";

/// What KDS gave for one report, verified.
#[derive(Debug, Clone)]
pub struct SnpFetched {
    /// The product.
    pub product: Product,
    /// ARK, DER.
    pub ark: Vec<u8>,
    /// ASK, DER.
    pub ask: Vec<u8>,
    /// VCEK, DER.
    pub vcek: Vec<u8>,
    /// The product's CRL (DER), when asked for.
    pub crl: Option<Vec<u8>>,
    /// Where each part came from: (what, URL, cache or fetched).
    pub origins: Vec<(String, String, Origin)>,
}
