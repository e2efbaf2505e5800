//! The guest image manifest (`manifest.json`, format `fenced-run-image/1`) that `fenced-run image build`
//! writes: the image's artifacts with their hashes and the measurements a launch of it must report. It lives
//! here so that `measure-guest pin --image` reads the same type the builder writes.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha384};
use std::path::Path;

/// The manifest's format name.
pub const MANIFEST_FORMAT: &str = "fenced-run-image/1";
/// The manifest file name inside an image directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Hashes of one artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// File name inside the image directory.
    pub file: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
    /// SHA-384, hex.
    pub sha384: String,
}

impl Artifact {
    /// The hashes of `bytes`, named `file`.
    pub fn of(file: &str, bytes: &[u8]) -> Artifact {
        Artifact {
            file: file.into(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
            sha384: hex::encode(Sha384::digest(bytes)),
        }
    }
}

/// The command line and its hashes (of the bytes followed by one NUL, as QEMU's SEV hashes table has them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cmdline {
    /// The command line.
    pub value: String,
    /// SHA-256 of the command line and a NUL byte.
    pub sha256: String,
    /// SHA-384 of the command line and a NUL byte.
    pub sha384: String,
}

/// A file of the build host copied into the initramfs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Included {
    /// Path in the guest.
    pub path: String,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
}

/// One expected SEV-SNP launch digest of the image (QEMU, `kernel-hashes=on`, the given OVMF).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnpMeasurement {
    /// SHA-256 of the OVMF image, hex.
    pub ovmf_sha256: String,
    /// vCPU count.
    pub vcpus: u32,
    /// vCPU type (its CPUID signature goes into each VMSA).
    pub vcpu_type: String,
    /// SEV_FEATURES of the VMSAs.
    pub guest_features: u64,
    /// The launch digest, hex.
    pub measurement: String,
}

/// One RTMR event digest the image's own bytes determine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtmrEvent {
    /// The RTMR the event extends (0-3).
    pub rtmr: u8,
    /// The TCG event type it is logged as.
    pub event_type: String,
    /// What was measured, and by whom.
    pub what: String,
    /// The SHA-384 digest extended, hex.
    pub digest: String,
}

/// Expected TDX measurements of the image under a TDX OVMF (TDVF).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TdxMeasurement {
    /// SHA-256 of the TDVF image, hex.
    pub ovmf_sha256: String,
    /// MRTD, hex: TDVF's sections as QEMU adds them (measurements::tdx::mrtd).
    pub mrtd: String,
    /// The RTMR1 and RTMR2 events of a direct boot of the image (measurements::tdx_boot), the kernel as is.
    pub rtmr_events: Vec<RtmrEvent>,
    /// RTMR0-3 values: RTMR1 and RTMR2 folded from [`TdxMeasurement::rtmr_events`] (QEMU 10.2 and later);
    /// RTMR0 (TD HOB, ACPI tables, firmware variables: the host's configuration) and RTMR3 (runtime) `None`.
    pub rtmrs: [Option<String>; 4],
    /// RTMR1 under QEMU 10.1, which patches the kernel's setup header before TDVF measures it, for a TD of
    /// [`TDX_MEMORY_MIB_MIN`] MiB or more (the launcher gives a TD at least that much).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtmr1_qemu_10_1: Option<String>,
    /// What is and is not computed, in one sentence.
    pub note: String,
}

/// The least memory a TD is launched with: from here up QEMU 10.1's kernel-header patch, and so RTMR1, does
/// not depend on the memory size (measurements::tdx_boot::QEMU_STABLE_MEMORY_MIB).
pub const TDX_MEMORY_MIB_MIN: u64 = crate::tdx_boot::QEMU_STABLE_MEMORY_MIB;

/// Expected measurements of the image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measurements {
    /// The `vm` tier's sim launch measurement (measurements::sim), hex: what the sim PSP signs for this image
    /// (over [`Manifest::vm_kernel`] where there is one, else [`Manifest::kernel`]).
    pub vm: String,
    /// SEV-SNP launch digests for the OVMF given at build time (empty without one).
    #[serde(default)]
    pub sev_snp: Vec<SnpMeasurement>,
    /// TDX measurements for the TDX OVMF given at build time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdx: Option<TdxMeasurement>,
}

/// The manifest (`manifest.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// The kernel.
    pub kernel: Artifact,
    /// The kernel the `vm` tier boots at its PVH entry: [`Manifest::kernel`]'s payload, decompressed at build
    /// time (absent when the kernel has none; the `vm` tier then boots [`Manifest::kernel`]).
    /// [`Measurements::vm`] covers this file when it is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_kernel: Option<Artifact>,
    /// The initramfs.
    pub initramfs: Artifact,
    /// The command line.
    pub cmdline: Cmdline,
    /// The agent binary (`/init`).
    pub agent: Included,
    /// Other files of the build host in the initramfs (busybox, git and its libraries, modules).
    pub included: Vec<Included>,
    /// Expected measurements.
    pub measurements: Measurements,
    /// The read-only toolchain root filesystem (`image build --toolchains`), absent without one. Its dm-verity
    /// root hash is also on [`Manifest::cmdline`], which every launch measurement covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolchains: Option<ToolchainImage>,
    /// How the agent was built, where the image builder knows it: what a second builder must match to reproduce
    /// [`Manifest::agent`]'s bytes, hence the measurements (docs/vm.md, "Reproducing the agent").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_build: Option<AgentBuild>,
}

/// The toolchain, target, profile and lockfile the guest agent was built with (not measured: a record for a
/// second builder).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentBuild {
    /// `release:` of `rustc -vV` (e.g. `1.95.0`).
    pub rustc_release: String,
    /// `commit-hash:` of `rustc -vV`.
    pub rustc_commit_hash: String,
    /// `host:` of `rustc -vV`.
    pub rustc_host: String,
    /// The target triple the agent was linked for.
    pub target: String,
    /// The cargo profile (`dev` for the README's commands, `release` for `cargo install` and the package).
    pub profile: String,
    /// SHA-256 of the workspace's Cargo.lock, hex.
    pub cargo_lock_sha256: String,
}

/// One Debian package unpacked into the toolchain image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebPackage {
    /// Package name.
    pub name: String,
    /// Exact version (as apt and dpkg spell it).
    pub version: String,
    /// Architecture (`amd64`, `all`).
    pub architecture: String,
    /// SHA-256 of the `.deb`, hex.
    pub sha256: String,
}

/// The toolchain image: an erofs file system followed by its dm-verity hash tree in one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolchainImage {
    /// The toolchain sets it holds (`go`, `node`, `python`, `rust`), sorted.
    pub toolchains: Vec<String>,
    /// The file inside the image directory, its size and hashes.
    pub image: Artifact,
    /// The file system (`erofs`).
    pub filesystem: String,
    /// Size of the file system in 4096-byte blocks; the hash tree starts right after it.
    pub data_blocks: u64,
    /// dm-verity root hash (SHA-256), hex.
    pub root_hash: String,
    /// dm-verity salt, hex.
    pub salt: String,
    /// The `SOURCE_DATE_EPOCH` every file's time was set to.
    pub source_date_epoch: u64,
    /// The packages unpacked, sorted by name.
    pub packages: Vec<DebPackage>,
}

impl Manifest {
    /// Reads `DIR/manifest.json`; errors name the file and what is wrong.
    pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
        let p = dir.join(MANIFEST_FILE);
        let path = || p.display().to_string();
        let text = attestation::cli_io::read_capped(&p, attestation::cli_io::MAX_INPUT).map_err(
            |source| ManifestError::Read {
                path: path(),
                source,
            },
        )?;
        let m: Manifest = serde_json::from_slice(&text).map_err(|source| ManifestError::Json {
            path: path(),
            source,
        })?;
        if m.format != MANIFEST_FORMAT {
            return Err(ManifestError::Format {
                path: path(),
                found: attestation::text::escape(&m.format).to_string(),
            });
        }
        Ok(m)
    }
}

/// Why an image's `manifest.json` could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file could not be read (missing, too large, an I/O error).
    #[error("{path}: {source}")]
    Read {
        /// The manifest's path.
        path: String,
        /// What reading it gave.
        source: attestation::cli_io::ReadError,
    },
    /// The file is not the manifest's JSON.
    #[error("{path}: {source}")]
    Json {
        /// The manifest's path.
        path: String,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// The `format` field names another format.
    #[error("{path}: format {found:?}, expected {MANIFEST_FORMAT:?}")]
    Format {
        /// The manifest's path.
        path: String,
        /// The format it names (escaped for a terminal).
        found: String,
    },
}

/// Why the TDX measurements of a kernel, initramfs and command line could not be computed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TdxMeasurementError {
    /// The TDVF image is not an OVMF build with a GUIDed table.
    #[error(transparent)]
    Firmware(#[from] crate::snp::OvmfError),
    /// Its TDVF metadata does not give an MRTD.
    #[error(transparent)]
    Tdvf(#[from] crate::tdx::TdvfError),
    /// The direct boot's events could not be computed from the kernel.
    #[error(transparent)]
    Boot(#[from] crate::tdx_boot::DirectBootError),
}

/// The note every [`TdxMeasurement`] carries.
pub const TDX_NOTE: &str = "MRTD is computed from the TDVF metadata; RTMR1 and RTMR2 are folded from the events a direct \
kernel boot under TDVF logs (the kernel's PE Authenticode SHA-384, the firmware's boot actions, then the Linux EFI \
stub's load options and initramfs), not checked against a TD here; RTMR0 (the host's TD HOB, ACPI tables and \
variables) and RTMR3 (runtime) are not computed.";

/// The TDX measurements of `kernel`, `initrd` and `cmdline` under the TDVF `tdvf`.
pub fn tdx_measurement(
    tdvf: &[u8],
    kernel: &[u8],
    initrd: &[u8],
    cmdline: &str,
) -> Result<TdxMeasurement, TdxMeasurementError> {
    use crate::tdx_boot::{direct_boot, KernelBlob};
    let ovmf = crate::snp::Ovmf::parse(tdvf.to_vec())?;
    let mrtd = crate::tdx::mrtd(&ovmf)?;
    let boot = direct_boot(kernel, initrd, cmdline, KernelBlob::AsFile)?;
    let patched = direct_boot(
        kernel,
        initrd,
        cmdline,
        KernelBlob::PatchedByQemu {
            memory_mib: TDX_MEMORY_MIB_MIN,
        },
    )?;
    Ok(TdxMeasurement {
        ovmf_sha256: hex::encode(Sha256::digest(tdvf)),
        mrtd: hex::encode(mrtd),
        rtmr_events: boot
            .events
            .iter()
            .map(|e| RtmrEvent {
                rtmr: e.rtmr,
                event_type: e.event_type.into(),
                what: e.what.clone(),
                digest: hex::encode(e.digest),
            })
            .collect(),
        rtmrs: [
            None,
            Some(hex::encode(boot.rtmr1)),
            Some(hex::encode(boot.rtmr2)),
            None,
        ],
        rtmr1_qemu_10_1: Some(hex::encode(patched.rtmr1)),
        note: TDX_NOTE.into(),
    })
}
