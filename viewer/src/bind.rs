//! Where the viewer may listen. Loopback (127.0.0.1, ::1) always; any other address only when a credential file
//! that root owns and nobody else can read lists it. There is no flag and no environment variable for a wider
//! bind: the only way is [`CREDENTIAL_PATH`], whose format docs/viewer.md gives.

use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The one file that may allow a wider bind (TOML, see [`Credential`]).
pub const CREDENTIAL_PATH: &str = "/etc/fenced-run/viewer-bind.toml";

/// The `format` line a credential file must carry.
pub const CREDENTIAL_FORMAT: &str = "fenced-run-viewer-bind/1";

/// Why an address may not be listened on, or why a credential file is not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BindError {
    /// A non-loopback address without a credential.
    #[error("refusing to listen on {addr}: the viewer listens on loopback only (127.0.0.1, ::1); a wider bind needs an address listed in the bind credential {path}, which does not exist or was not given")]
    NotLoopback {
        /// The address refused.
        addr: IpAddr,
        /// Where the credential is looked for.
        path: String,
    },
    /// A non-loopback address the credential does not list.
    #[error("refusing to listen on {addr}: the bind credential {path} does not list it")]
    NotListed {
        /// The address refused.
        addr: IpAddr,
        /// The credential file.
        path: String,
    },
    /// The credential file exists but is not acceptable.
    #[error("bind credential {path}: {why}")]
    Credential {
        /// The credential file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
}

/// A bind credential: the addresses beyond loopback that root allowed the viewer to listen on.
///
/// ```toml
/// format = "fenced-run-viewer-bind/1"
/// addresses = ["192.0.2.10"]
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// The file it was read from.
    pub path: PathBuf,
    /// The addresses allowed besides loopback.
    pub addresses: Vec<IpAddr>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialFile {
    format: String,
    addresses: Vec<String>,
}

/// The largest credential file read.
const MAX_CREDENTIAL: u64 = 64 * 1024;

impl Credential {
    /// Reads the credential at `path`: `Ok(None)` when there is no file, an error when it is a symbolic link, not
    /// a regular file, not owned by root (uid 0), readable or writable by group or others, in a directory that
    /// is not root's or that group or others may write, or not in the format above.
    pub fn load(path: &Path) -> Result<Option<Credential>, BindError> {
        let bad = |why: String| BindError::Credential {
            path: path.display().to_string(),
            why,
        };
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(format!("cannot be read: {e}"))),
        };
        if meta.file_type().is_symlink() {
            return Err(bad("is a symbolic link; it must be a regular file".into()));
        }
        if !meta.is_file() {
            return Err(bad("is not a regular file".into()));
        }
        if meta.uid() != 0 {
            return Err(bad(format!(
                "is owned by uid {}, not by root (uid 0)",
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "has mode {mode:03o}: group and others must have no access (chmod 600)"
            )));
        }
        if let Some(dir) = path.parent() {
            let d = std::fs::metadata(dir).map_err(|e| {
                bad(format!(
                    "its directory {} cannot be read: {e}",
                    dir.display()
                ))
            })?;
            if d.uid() != 0 || d.permissions().mode() & 0o022 != 0 {
                return Err(bad(format!(
                    "its directory {} must be owned by root and writable by root alone",
                    dir.display()
                )));
            }
        }
        if meta.len() > MAX_CREDENTIAL {
            return Err(bad(format!(
                "is {} bytes, more than {MAX_CREDENTIAL}",
                meta.len()
            )));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
        let f: CredentialFile = toml::from_str(&text)
            .map_err(|e| bad(format!("not the credential format: {}", e.message())))?;
        if f.format != CREDENTIAL_FORMAT {
            return Err(bad(format!(
                "format is {:?}, expected {CREDENTIAL_FORMAT:?}",
                f.format
            )));
        }
        let addresses = f
            .addresses
            .iter()
            .map(|a| {
                a.trim()
                    .parse::<IpAddr>()
                    .map_err(|_| bad(format!("{a:?} in addresses is not an IP address")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Credential {
            path: path.to_path_buf(),
            addresses,
        }))
    }
}

/// Whether the viewer may listen on `addr`: loopback always, anything else only when `credential` lists it.
pub fn check_bind(addr: IpAddr, credential: Option<&Credential>) -> Result<(), BindError> {
    if addr.is_loopback() {
        return Ok(());
    }
    match credential {
        None => Err(BindError::NotLoopback {
            addr,
            path: CREDENTIAL_PATH.to_string(),
        }),
        Some(c) if c.addresses.contains(&addr) => Ok(()),
        Some(c) => Err(BindError::NotListed {
            addr,
            path: c.path.display().to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_allowed_and_wildcards_are_not() {
        assert!(check_bind("127.0.0.1".parse().expect("ip"), None).is_ok());
        assert!(check_bind("::1".parse().expect("ip"), None).is_ok());
        for a in ["0.0.0.0", "::", "192.0.2.7", "10.1.2.3", "::ffff:127.0.0.1"] {
            let e = check_bind(a.parse().expect("ip"), None).expect_err("refused");
            assert!(matches!(e, BindError::NotLoopback { .. }), "{a}: {e}");
        }
    }

    #[test]
    fn a_credential_allows_only_what_it_lists() {
        let c = Credential {
            path: "/x".into(),
            addresses: vec!["192.0.2.7".parse().expect("ip")],
        };
        assert!(check_bind("192.0.2.7".parse().expect("ip"), Some(&c)).is_ok());
        let e = check_bind("0.0.0.0".parse().expect("ip"), Some(&c)).expect_err("refused");
        assert!(matches!(e, BindError::NotListed { .. }), "{e}");
    }
}
