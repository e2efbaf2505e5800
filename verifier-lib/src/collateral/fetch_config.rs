//! The errors and the configuration of collateral fetching (feature `fetch`).

use super::{cache, http, kds, pcs};
use serde::Deserialize;
use std::path::Path;

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
    #[error("{}", kds::VLEK_ADVICE)]
    VlekNotFetchable {
        /// The ARK, ASVK (in `ask`) and CRL fetched.
        partial: Box<kds::SnpFetched>,
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

/// Where collateral comes from: base URLs, the root CA CRL URL, `update`, and the HTTP client's settings.
/// Flags override a config file (`--fetch-config FILE`, TOML with the field names below).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchConfig {
    /// AMD KDS base URL (default [`kds::DEFAULT_KDS_URL`]).
    pub kds_url: Option<String>,
    /// Intel PCS (or PCCS) base URL (default [`pcs::DEFAULT_PCS_URL`]).
    pub pcs_url: Option<String>,
    /// The Intel root CA CRL URL (default: the root certificate's CRL distribution point).
    pub root_crl_url: Option<String>,
    /// `standard` or `early`.
    pub update: Option<String>,
    /// Per-request timeout, seconds.
    pub timeout_secs: Option<u64>,
    /// Retries after 429/503.
    pub max_retries: Option<u32>,
    /// Longest single wait for Retry-After, seconds.
    pub max_retry_wait_secs: Option<u64>,
}

impl FetchConfig {
    /// Reads a config file.
    pub fn load(path: &Path) -> Result<FetchConfig, String> {
        let bytes = attestation::cli_io::read_capped(path, 1 << 20)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let text =
            String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))
    }

    /// The HTTP options: the environment's proxy, this file's timeouts and retries.
    pub fn http_options(&self) -> http::HttpOptions {
        let mut o = http::HttpOptions::from_env();
        if let Some(t) = self.timeout_secs {
            o.timeout = std::time::Duration::from_secs(t);
        }
        if let Some(r) = self.max_retries {
            o.max_retries = r;
        }
        if let Some(w) = self.max_retry_wait_secs {
            o.max_retry_wait = std::time::Duration::from_secs(w);
        }
        o
    }

    /// The `update` value.
    pub fn update(&self) -> Result<pcs::Update, String> {
        self.update
            .as_deref()
            .map(str::parse)
            .transpose()
            .map(Option::unwrap_or_default)
    }
}
