//! The configuration of collateral fetching (feature `fetch`).

use super::{http, pcs};
use serde::Deserialize;
use std::path::Path;

/// Where collateral comes from: base URLs, the root CA CRL URL, `update`, and the HTTP client's settings.
/// Flags override a config file (`--fetch-config FILE`, TOML with the field names below).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchConfig {
    /// AMD KDS base URL (default [`super::kds::DEFAULT_KDS_URL`]).
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

/// Why a fetch configuration could not be used; the text names the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchConfigError {
    /// The file could not be read, is not UTF-8, or is not a configuration (unknown keys are refused).
    #[error("{path}: {detail}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// `update` is neither `standard` nor `early`.
    #[error(transparent)]
    Update(#[from] pcs::UnknownUpdate),
}

impl FetchConfig {
    /// Reads a config file.
    pub fn load(path: &Path) -> Result<FetchConfig, FetchConfigError> {
        let file = |detail: String| FetchConfigError::File {
            path: path.display().to_string(),
            detail,
        };
        let bytes =
            attestation::cli_io::read_capped(path, 1 << 20).map_err(|e| file(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| file("not UTF-8".into()))?;
        toml::from_str(&text).map_err(|e| file(e.message().to_string()))
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
    pub fn update(&self) -> Result<pcs::Update, FetchConfigError> {
        self.update
            .as_deref()
            .map(str::parse)
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(FetchConfigError::Update)
    }
}
