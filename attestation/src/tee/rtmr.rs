//! TDX runtime measurement register RTMR3 through the kernel's measurement sysfs (Linux 6.16,
//! Documentation/ABI/testing/sysfs-devices-virtual-misc-tdx_guest): `rtmr3:sha384` under
//! `/sys/class/misc/tdx_guest/measurements` reads as the register's 48 bytes and, written with exactly 48 bytes
//! in one write, extends it (`TDG.MR.RTMR.EXTEND`: `RTMR3 = SHA-384(RTMR3 || digest)`). The fence transcript
//! extends each event's digest here as the event is written (docs/transcript.md).

use super::TeeError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Where the kernel exposes the TD's measurement registers.
pub const DEFAULT_TDX_MEASUREMENTS: &str = "/sys/class/misc/tdx_guest/measurements";
/// The attribute of RTMR3 in that directory.
pub const RTMR3_ATTRIBUTE: &str = "rtmr3:sha384";

/// RTMR3 of this TD, through its sysfs attribute.
#[derive(Clone, Debug)]
pub struct SysfsRtmr3 {
    path: PathBuf,
}

impl SysfsRtmr3 {
    /// RTMR3 under `measurements` (a directory laid out as the kernel's; tests give a fake one). `None` when
    /// the attribute does not exist (no TDX guest driver with measurement registers).
    pub fn at(measurements: &Path) -> Option<SysfsRtmr3> {
        let path = measurements.join(RTMR3_ATTRIBUTE);
        path.exists().then_some(SysfsRtmr3 { path })
    }

    /// The attribute's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Extends RTMR3 with `digest`: 48 bytes in one write (the kernel refuses any other length).
    pub fn extend(&self, digest: &[u8; 48]) -> Result<(), TeeError> {
        let io = |op, source| TeeError::Io {
            op,
            path: self.path.clone(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| io("open", e))?;
        let n = f.write(digest).map_err(|e| io("write", e))?;
        if n != digest.len() {
            return Err(TeeError::Malformed {
                source_name: self.path.display().to_string(),
                detail: format!("the kernel took {n} of the digest's 48 bytes"),
            });
        }
        Ok(())
    }

    /// Reads RTMR3's current value (48 bytes).
    pub fn read(&self) -> Result<[u8; 48], TeeError> {
        let mut buf = Vec::new();
        std::fs::File::open(&self.path)
            .and_then(|f| f.take(49).read_to_end(&mut buf))
            .map_err(|source| TeeError::Io {
                op: "read",
                path: self.path.clone(),
                source,
            })?;
        buf.as_slice().try_into().map_err(|_| TeeError::Malformed {
            source_name: self.path.display().to_string(),
            detail: format!("{} bytes, not the 48 of a SHA-384 register", buf.len()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a fake measurements directory: each extend is one 48-byte write of the digest, read back whole.
    #[test]
    fn extends_with_one_48_byte_write_and_reads_back() {
        let d = tempfile::tempdir().expect("tmp");
        assert!(SysfsRtmr3::at(d.path()).is_none());
        std::fs::write(d.path().join(RTMR3_ATTRIBUTE), [0u8; 48]).expect("fake");
        let r = SysfsRtmr3::at(d.path()).expect("present");
        assert_eq!(r.read().expect("read"), [0u8; 48]);
        r.extend(&[7u8; 48]).expect("extend");
        // The fake is a plain file: the write replaced its bytes with exactly the digest.
        assert_eq!(
            std::fs::read(d.path().join(RTMR3_ATTRIBUTE)).expect("read"),
            vec![7u8; 48]
        );
        std::fs::write(d.path().join(RTMR3_ATTRIBUTE), [0u8; 47]).expect("short");
        let e = r.read().expect_err("short").to_string();
        assert!(e.contains("47 bytes"), "{e}");
        std::fs::remove_file(d.path().join(RTMR3_ATTRIBUTE)).expect("rm");
        let e = r.extend(&[1; 48]).expect_err("gone").to_string();
        assert!(e.contains("rtmr3:sha384"), "{e}");
    }
}
