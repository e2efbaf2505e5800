//! The on-disk collateral cache: one JSON file per key (product/chip ID/TCB for SEV-SNP, FMSPC/CA/update for
//! TDX) holding the verified parts and the time they stop being usable (the earliest certificate expiry or
//! CRL/TCB Info/QE Identity `nextUpdate`). An entry is never served at or after that time. Writes go to a
//! temporary file in the same directory and are renamed into place, so a kill leaves no half file under the
//! entry's name; one lock file per key makes concurrent fetches of a key (threads or processes) wait for the
//! first one instead of asking the server again.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Marker of the entry format.
pub const ENTRY_FORMAT: &str = "fenced-run-collateral-cache-v1";

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A file or directory of the cache could not be read or written.
    #[error("collateral cache {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// No cache directory: neither `--cache` nor a user cache directory (XDG_CACHE_HOME, HOME).
    #[error(
        "no collateral cache directory: give --cache DIR (no XDG_CACHE_HOME or HOME to default to)"
    )]
    NoDir,
    /// Offline, and the entry is past its `expires` time.
    #[error("cached collateral {key} expired at {expired} (its earliest nextUpdate or certificate expiry); it is never used after that: fetch it again (--online)")]
    Stale {
        /// The key.
        key: String,
        /// When it expired (RFC 3339).
        expired: String,
    },
    /// Offline, and there is no entry.
    #[error("collateral {key} is not in the cache {dir} (fetch it with --online or `verify-attestation fetch`)")]
    Missing {
        /// The key.
        key: String,
        /// The cache directory.
        dir: String,
    },
}

/// One cached entry: named parts (bytes) and the time it stops being usable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Always [`ENTRY_FORMAT`].
    pub format: String,
    /// The key it was stored under.
    pub key: String,
    /// Unix seconds at which the entry was written.
    pub fetched: i64,
    /// Unix seconds from which the entry is never served.
    pub expires: i64,
    /// The URLs it came from.
    pub sources: Vec<String>,
    /// Parts, base64.
    pub parts: BTreeMap<String, String>,
}

impl Entry {
    /// A new entry.
    pub fn new(key: &str, fetched: i64, expires: i64, sources: Vec<String>) -> Entry {
        Entry {
            format: ENTRY_FORMAT.into(),
            key: key.into(),
            fetched,
            expires,
            sources,
            parts: BTreeMap::new(),
        }
    }

    /// Adds a part.
    pub fn with(mut self, name: &str, bytes: &[u8]) -> Entry {
        self.parts.insert(
            name.into(),
            base64::engine::general_purpose::STANDARD.encode(bytes),
        );
        self
    }

    /// A part's bytes.
    pub fn part(&self, name: &str) -> Option<Vec<u8>> {
        self.parts
            .get(name)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
    }

    /// Whether the entry may be served at `now`.
    pub fn fresh_at(&self, now: i64) -> bool {
        now < self.expires
    }
}

/// Where a lookup's answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Served from the cache.
    Cache,
    /// Fetched now (and stored when a cache is in use).
    Fetched,
}

/// A cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

fn io(path: &Path, source: std::io::Error) -> CacheError {
    CacheError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// RFC 3339 of unix seconds.
pub fn rfc3339(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("@{t}"))
}

impl Cache {
    /// The cache in `dir` (created when needed).
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    /// `dir`, or the user's cache directory (`$XDG_CACHE_HOME/fenced-run/collateral`, else
    /// `~/.cache/fenced-run/collateral`).
    pub fn at_or_default(dir: Option<&Path>) -> Result<Cache, CacheError> {
        match dir {
            Some(d) => Ok(Cache::new(d)),
            None => dirs::cache_dir()
                .map(|d| Cache::new(d.join("fenced-run").join("collateral")))
                .ok_or(CacheError::NoDir),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key` (`/` in keys become directories; anything but `[A-Za-z0-9._-]` becomes `_`).
    pub fn path_of(&self, key: &str) -> PathBuf {
        let mut p = self.dir.clone();
        for seg in key.split('/') {
            let s: String = seg
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let s = if s.is_empty() || s.chars().all(|c| c == '.') {
                "_".to_string()
            } else {
                s
            };
            p.push(s);
        }
        p.set_extension("json");
        p
    }

    /// Reads the entry of `key`, fresh or not; `None` when absent or unreadable (a torn or foreign file is
    /// treated as absent and replaced by the next store).
    pub fn read(&self, key: &str) -> Option<Entry> {
        let bytes = fs::read(self.path_of(key)).ok()?;
        let e: Entry = serde_json::from_slice(&bytes).ok()?;
        (e.format == ENTRY_FORMAT && e.key == key).then_some(e)
    }

    /// The entry of `key` if it may be served at `now`.
    pub fn get(&self, key: &str, now: i64) -> Option<Entry> {
        self.read(key).filter(|e| e.fresh_at(now))
    }

    /// The entry of `key` for an offline verification: absent and stale are named failures.
    pub fn get_offline(&self, key: &str, now: i64) -> Result<Entry, CacheError> {
        match self.read(key) {
            Some(e) if e.fresh_at(now) => Ok(e),
            Some(e) => Err(CacheError::Stale {
                key: key.into(),
                expired: rfc3339(e.expires),
            }),
            None => Err(CacheError::Missing {
                key: key.into(),
                dir: self.dir.display().to_string(),
            }),
        }
    }

    /// Stores `entry` atomically: written to a temporary file beside the final one, flushed, renamed.
    pub fn put(&self, entry: &Entry) -> Result<(), CacheError> {
        let path = self.path_of(&entry.key);
        let dir = path.parent().unwrap_or(&self.dir).to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let text = serde_json::to_vec_pretty(entry).map_err(|e| io(&path, e.into()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".partial-")
            .tempfile_in(&dir)
            .map_err(|e| io(&dir, e))?;
        tmp.write_all(&text).map_err(|e| io(tmp.path(), e))?;
        tmp.as_file().sync_all().map_err(|e| io(&path, e))?;
        tmp.persist(&path).map_err(|e| io(&path, e.error))?;
        sweep_partials(&dir);
        Ok(())
    }

    /// The entry of `key` if fresh at `now`, else runs `fetch` (which must return an already verified entry)
    /// under the key's lock and stores its answer. A second caller for the same key waits on the lock and
    /// then finds the first caller's entry: one request per key, however many callers.
    pub fn get_or_fetch<E: From<CacheError>>(
        &self,
        key: &str,
        now: i64,
        fetch: impl FnOnce() -> Result<Entry, E>,
    ) -> Result<(Entry, Origin), E> {
        if let Some(e) = self.get(key, now) {
            return Ok((e, Origin::Cache));
        }
        let lock_path = self.path_of(key).with_extension("lock");
        if let Some(d) = lock_path.parent() {
            fs::create_dir_all(d).map_err(|e| io(d, e))?;
        }
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io(&lock_path, e))?;
        let mut lock = fd_lock::RwLock::new(file);
        let _guard = lock.write().map_err(|e| io(&lock_path, e))?;
        if let Some(e) = self.get(key, now) {
            return Ok((e, Origin::Cache));
        }
        let entry = fetch()?;
        self.put(&entry)?;
        Ok((entry, Origin::Fetched))
    }
}

/// Removes temporary files an interrupted store left behind (older than ten minutes, so a store in progress
/// in another process is never touched).
fn sweep_partials(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with(".partial-") {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 600);
        if old {
            let _ = fs::remove_file(e.path());
        }
    }
}
