//! The Linux configfs-tsm report interface (Documentation/ABI/testing/configfs-tsm), for SEV-SNP and TDX.
//!
//! A report is requested by creating a directory under `/sys/kernel/config/tsm/report`, writing 64 bytes to
//! `inblob` (and optionally `privlevel`), then reading `outblob` (the SNP report or TDX quote) and `auxblob`
//! (the SNP certificate table). `generation` counts writes; it is read before and after so that a concurrent
//! writer to the same entry is detected, and the directory is removed afterwards whatever happened.

use super::certtable::{certs_in_evidence_order, parse_cert_table};
use super::{RawEvidence, Tee, TeeError};
use crate::evidence::TeeLabel;
use rand::RngCore;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the kernel mounts the report directory.
pub const DEFAULT_TSM_REPORT_ROOT: &str = "/sys/kernel/config/tsm/report";

/// Largest `outblob` or `auxblob` read (the kernel caps outblob at 32 KiB today; quotes with certificates grow).
pub const MAX_BLOB_LEN: usize = 1024 * 1024;

/// Attempts before giving up when `generation` keeps changing.
const MAX_ATTEMPTS: u32 = 3;

/// Highest privilege level the ABI defines (`privlevel` is 0..=3; for SNP it is the VMPL).
pub const MAX_PRIVLEVEL: u32 = 3;

/// The file operations configfs-tsm needs, so tests can stand in for the kernel.
pub trait ConfigfsOps: Send + Sync {
    /// Creates a report entry directory.
    fn mkdir(&self, path: &Path) -> std::io::Result<()>;
    /// Removes a report entry directory.
    fn rmdir(&self, path: &Path) -> std::io::Result<()>;
    /// Writes an attribute in one write.
    fn write(&self, path: &Path, data: &[u8]) -> std::io::Result<()>;
    /// Reads an attribute, at most `max` bytes (more is an error).
    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>>;
    /// Whether a path exists.
    fn exists(&self, path: &Path) -> bool;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl ConfigfsOps for RealFs {
    fn mkdir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir(path)
    }

    fn rmdir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        let n = f.write(data)?;
        if n != data.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes", data.len()),
            ));
        }
        Ok(())
    }

    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        let f = std::fs::File::open(path)?;
        let mut out = Vec::new();
        f.take(max as u64 + 1).read_to_end(&mut out)?;
        if out.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("more than {max} bytes"),
            ));
        }
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

/// The configfs-tsm backend.
#[derive(Clone)]
pub struct ConfigfsTsm {
    root: PathBuf,
    ops: Arc<dyn ConfigfsOps>,
    privlevel: Option<u32>,
    label: TeeLabel,
    provider: String,
}

impl std::fmt::Debug for ConfigfsTsm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigfsTsm")
            .field("root", &self.root)
            .field("privlevel", &self.privlevel)
            .field("label", &self.label)
            .field("provider", &self.provider)
            .finish()
    }
}

/// Removes the report entry when dropped.
struct EntryGuard<'a> {
    ops: &'a dyn ConfigfsOps,
    path: PathBuf,
}

impl Drop for EntryGuard<'_> {
    fn drop(&mut self) {
        // Nothing useful can be done if the kernel refuses; the entry holds no secret.
        let _ = self.ops.rmdir(&self.path);
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> TeeError + 'a {
    move |source| TeeError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

impl ConfigfsTsm {
    /// Opens the report root on the real file system and learns the provider (probing one entry).
    pub fn open(root: &Path) -> Result<ConfigfsTsm, TeeError> {
        ConfigfsTsm::with_ops(root, Arc::new(RealFs))
    }

    /// Opens the report root through `ops` (tests use a fake kernel).
    pub fn with_ops(root: &Path, ops: Arc<dyn ConfigfsOps>) -> Result<ConfigfsTsm, TeeError> {
        if !ops.exists(root) {
            return Err(TeeError::NotPresent(format!(
                "{} does not exist",
                root.display()
            )));
        }
        let mut tsm = ConfigfsTsm {
            root: root.to_owned(),
            ops,
            privlevel: None,
            label: TeeLabel::SevSnp,
            provider: String::new(),
        };
        let dir = tsm.new_entry()?;
        let guard = EntryGuard {
            ops: tsm.ops.as_ref(),
            path: dir.clone(),
        };
        let provider = read_text(guard.ops, &dir.join("provider"))?;
        drop(guard);
        tsm.label = label_for_provider(&provider)?;
        tsm.provider = provider;
        Ok(tsm)
    }

    /// Requests reports at privilege level `level` (0..=3; the SNP VMPL). Without it the kernel's default applies.
    pub fn with_privlevel(mut self, level: u32) -> Result<ConfigfsTsm, TeeError> {
        if level > MAX_PRIVLEVEL {
            return Err(TeeError::Unsupported(format!(
                "privlevel {level} is above the maximum {MAX_PRIVLEVEL}"
            )));
        }
        self.privlevel = Some(level);
        Ok(self)
    }

    /// The provider the kernel named (`sev_guest`, `tdx_guest`).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    fn new_entry(&self) -> Result<PathBuf, TeeError> {
        let mut rnd = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut rnd);
        let dir = self.root.join(format!(
            "fenced-run-{}-{}",
            std::process::id(),
            hex::encode(rnd)
        ));
        self.ops.mkdir(&dir).map_err(io("mkdir", &dir))?;
        Ok(dir)
    }

    fn attempt(&self, report_data: &[u8; 64]) -> Result<Option<RawEvidence>, TeeError> {
        let dir = self.new_entry()?;
        let guard = EntryGuard {
            ops: self.ops.as_ref(),
            path: dir.clone(),
        };
        let ops = guard.ops;
        if let Some(level) = self.privlevel {
            let p = dir.join("privlevel");
            ops.write(&p, format!("{level}\n").as_bytes())
                .map_err(io("write", &p))?;
        }
        let inblob = dir.join("inblob");
        ops.write(&inblob, report_data)
            .map_err(io("write", &inblob))?;
        let generation = dir.join("generation");
        let before = read_generation(ops, &generation)?;
        let provider = read_text(ops, &dir.join("provider"))?;
        if provider != self.provider {
            return Err(TeeError::Malformed {
                source_name: dir.display().to_string(),
                detail: format!("provider changed from {:?} to {provider:?}", self.provider),
            });
        }
        let outblob = dir.join("outblob");
        let report = ops
            .read(&outblob, MAX_BLOB_LEN)
            .map_err(io("read", &outblob))?;
        let auxblob = dir.join("auxblob");
        let aux = if self.label == TeeLabel::SevSnp && ops.exists(&auxblob) {
            match ops.read(&auxblob, MAX_BLOB_LEN) {
                Ok(b) => b,
                // The host supplied no certificate table.
                Err(e) if is_absent(&e) => Vec::new(),
                Err(e) => return Err(io("read", &auxblob)(e)),
            }
        } else {
            Vec::new()
        };
        let after = read_generation(ops, &generation)?;
        if before != after {
            return Ok(None);
        }
        drop(guard);
        if report.is_empty() {
            return Err(TeeError::Malformed {
                source_name: outblob.display().to_string(),
                detail: "empty".into(),
            });
        }
        if super::report_data_of(self.label, &report).as_ref() != Some(report_data) {
            return Err(TeeError::Malformed {
                source_name: outblob.display().to_string(),
                detail: "the report's REPORT_DATA is not the data written to inblob".into(),
            });
        }
        let certs = certs_in_evidence_order(&parse_cert_table(&aux)?);
        Ok(Some(RawEvidence {
            report,
            certs,
            collateral: None,
        }))
    }
}

fn is_absent(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
        || e.kind() == std::io::ErrorKind::Unsupported
        || matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOENT)
        )
}

fn label_for_provider(provider: &str) -> Result<TeeLabel, TeeError> {
    match provider {
        "sev_guest" => Ok(TeeLabel::SevSnp),
        "tdx_guest" => Ok(TeeLabel::Tdx),
        other => Err(TeeError::Unsupported(format!(
            "configfs-tsm provider {other:?} is not sev_guest or tdx_guest"
        ))),
    }
}

fn read_text(ops: &dyn ConfigfsOps, path: &Path) -> Result<String, TeeError> {
    let raw = ops.read(path, 4096).map_err(io("read", path))?;
    let text = String::from_utf8(raw).map_err(|_| TeeError::Malformed {
        source_name: path.display().to_string(),
        detail: "not UTF-8".into(),
    })?;
    Ok(text.trim().to_owned())
}

fn read_generation(ops: &dyn ConfigfsOps, path: &Path) -> Result<u64, TeeError> {
    let text = read_text(ops, path)?;
    text.parse().map_err(|_| TeeError::Malformed {
        source_name: path.display().to_string(),
        detail: format!("generation {text:?} is not a number"),
    })
}

impl Tee for ConfigfsTsm {
    fn label(&self) -> TeeLabel {
        self.label
    }

    fn get_report(&self, report_data: &[u8; 64]) -> Result<RawEvidence, TeeError> {
        for _ in 0..MAX_ATTEMPTS {
            if let Some(raw) = self.attempt(report_data)? {
                return Ok(raw);
            }
        }
        Err(TeeError::GenerationChanged {
            path: self.root.clone(),
            attempts: MAX_ATTEMPTS,
        })
    }
}
