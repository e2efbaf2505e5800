//! The sim state directory: where sim keys and certificates live, written atomically with mode 0600.
//!
//! Default: `$XDG_STATE_HOME/fenced-run/sim`, else `~/.local/state/fenced-run/sim`. A lock file serialises
//! first-use generation between processes, so concurrent tests never see half a chain.

use super::SimError;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default state directory of the sim backends.
pub fn default_state_dir() -> Result<PathBuf, SimError> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("fenced-run").join("sim"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/state/fenced-run/sim")),
        None => Err(SimError::NoStateDir),
    }
}

/// Creates `dir` (and parents) with mode 0700 where it does not exist.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), SimError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| SimError::Io {
            op: "create directory",
            path: dir.to_owned(),
            source,
        })
}

/// Writes `data` to `path` atomically (temp file in the same directory, fsync, rename), mode 0600.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<(), SimError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let io = |op: &'static str, p: &Path| {
        let p = p.to_owned();
        move |source| SimError::Io {
            op,
            path: p,
            source,
        }
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    f.write_all(data).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("sync", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io("rename", path))?;
    Ok(())
}

/// Reads `path` if it exists (`None` when it does not).
pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, SimError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SimError::Io {
            op: "read",
            path: path.to_owned(),
            source,
        }),
    }
}

/// An exclusive lock on `dir/.lock`, held until dropped.
pub(crate) struct StateLock {
    _lock: nix::fcntl::Flock<File>,
}

impl StateLock {
    /// Takes the lock (blocking).
    pub(crate) fn take(dir: &Path) -> Result<StateLock, SimError> {
        ensure_dir(dir)?;
        let path = dir.join(".lock");
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| SimError::Io {
                op: "open lock",
                path: path.clone(),
                source,
            })?;
        let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).map_err(
            |(_, errno)| SimError::Io {
                op: "lock",
                path: path.clone(),
                source: std::io::Error::from(errno),
            },
        )?;
        Ok(StateLock { _lock: lock })
    }
}
