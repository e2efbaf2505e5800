//! Identity entries of a measurement set: an entry pins a guest image by its identity (the SHA-256 of its kernel,
//! initramfs and command line, and the toolchain image's dm-verity root hash) and lists the launch profiles it
//! admits (vCPU counts as ranges, vCPU types, VMM types, guest features, OVMF builds). The verifier computes
//! the expected SEV-SNP launch digest for each admitted profile at verification time, from what the entry
//! records of each OVMF build (the digest after OVMF's pages, its SEV metadata sections, its SEV-ES reset vector
//! and the address of its SEV hashes table), so a new vCPU count within the admitted range needs no new signature
//! round. For TDX the entry records each TDVF build's MRTD (computed from the build's metadata) and the image's
//! RTMR1/RTMR2 (folded from the kernel's Authenticode hash, the initramfs and the command line, which the SHA-256
//! identity alone does not give), and a quote must match one build's MRTD and the image's RTMRs.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha384};

use crate::set::{Hex, HexU64};
use crate::snp::{self, KernelHashes, LaunchDigest, Ovmf, SectionKind, SnpConfig, VmmType};

/// The highest vCPU count an identity entry may admit.
pub const MAX_VCPUS: u32 = 512;
/// The most launch profiles (vCPU counts x types x VMMs x guest features x OVMF builds) one identity entry
/// may admit: the verifier computes a digest for each, so this bounds its work (one launch digest per range
/// and combination, then one SHA-384 of a PAGE_INFO per further vCPU count; 57 ms for 8192 measured).
pub const MAX_PROFILES: u64 = 8192;
/// The most SEV metadata sections an OVMF build may list.
pub const MAX_SECTIONS: usize = 64;

/// Why a vCPU range does not parse ([`VcpuRange::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VcpuRangeError {
    /// One end is not a count.
    #[error("vCPU range {range:?}: {part:?} is not a count: {source}")]
    NotACount {
        /// The range as given.
        range: String,
        /// The end that is not a count.
        part: String,
        /// Why it is not.
        source: std::num::ParseIntError,
    },
    /// The ends are out of order, zero or above [`MAX_VCPUS`].
    #[error("vCPU range {range:?}: want 1 <= first <= last <= {MAX_VCPUS}")]
    OutOfBounds {
        /// The range as given.
        range: String,
    },
}

/// Why an OVMF build's record gives no stand-in image ([`SnpFirmware::stand_in`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StandInError {
    /// More sections than [`MAX_SECTIONS`].
    #[error("{count} sections, at most {MAX_SECTIONS}")]
    TooManySections {
        /// How many the record lists.
        count: usize,
    },
    /// A section's kind is not one SNP defines.
    #[error("section {index}: unknown kind {kind:?}")]
    UnknownKind {
        /// The section's position (from 1).
        index: usize,
        /// The kind recorded.
        kind: String,
    },
    /// A recorded address or size does not fit in the 32 bits the metadata has for it.
    #[error("{field} {value:#x} does not fit in 32 bits")]
    Not32Bits {
        /// Which value (`section gpa`, `section size`, `sev_hashes_table`, `sev_es_reset_eip`).
        field: &'static str,
        /// The value recorded.
        value: u64,
    },
    /// The GUIDed table and the metadata do not fit in the stand-in's one page.
    #[error("the sections do not fit in one page")]
    DoesNotFit,
    /// The stand-in does not parse as an OVMF image that measures a kernel.
    #[error(transparent)]
    Ovmf(#[from] snp::OvmfError),
}

/// What is wrong with an identity entry or its SNP profiles ([`IdentityEntry::check`]; the caller adds which
/// entry).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// The recorded command line's hash is not `cmdline_sha256`.
    #[error("cmdline_sha256 is {recorded}, but SHA-256 of the cmdline with its NUL is {computed}")]
    CmdlineHash {
        /// `cmdline_sha256` as recorded.
        recorded: Hex<32>,
        /// SHA-256 of the recorded command line and its NUL.
        computed: Hex<32>,
    },
    /// The toolchain root hash is not on the recorded command line.
    #[error("toolchain_root_hash {root} is not on the command line")]
    RootHashNotOnCmdline {
        /// `toolchain_root_hash`.
        root: Hex<32>,
    },
    /// Neither SNP nor TDX profiles.
    #[error("admits no launch (no snp or tdx profiles)")]
    NoLaunch,
    /// An SNP list (vcpus, vmm, guest_features, ovmf) is empty.
    #[error("snp: vcpus, vmm, guest_features and ovmf must each list at least one")]
    SnpEmptyList,
    /// A VMM type is not one the verifier knows.
    #[error(transparent)]
    Vmm(#[from] snp::UnknownVmmType),
    /// QEMU is admitted but no vCPU type is.
    #[error("snp: vmm QEMU needs at least one vcpu_types entry")]
    QemuWithoutVcpuTypes,
    /// A vCPU type whose signature the verifier does not know.
    #[error("snp: unknown vcpu_type {vcpu_type:?}")]
    UnknownVcpuType {
        /// The type recorded.
        vcpu_type: String,
    },
    /// More launch profiles than [`MAX_PROFILES`].
    #[error(
        "snp: admits {count} launch profiles, more than the {MAX_PROFILES} the verifier computes; split the \
         entry or narrow its ranges"
    )]
    TooManyProfiles {
        /// How many the entry admits.
        count: u64,
    },
    /// An OVMF build's record gives no stand-in.
    #[error("snp ovmf {index}: {source}")]
    Ovmf {
        /// The build's position (from 1).
        index: usize,
        /// Why.
        source: StandInError,
    },
    /// TDX profiles without a TDVF build.
    #[error("tdx: firmware must list at least one TDVF build")]
    TdxNoFirmware,
}

/// Why the admitted SNP profiles could not be searched ([`IdentityEntry::find_snp`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnpSearchError {
    /// An OVMF build's record gives no stand-in.
    #[error(transparent)]
    StandIn(#[from] StandInError),
    /// A VMM type is not one the verifier knows.
    #[error(transparent)]
    Vmm(#[from] snp::UnknownVmmType),
    /// A vCPU type whose signature the verifier does not know.
    #[error("unknown vcpu_type {vcpu_type:?}")]
    UnknownVcpuType {
        /// The type recorded.
        vcpu_type: String,
    },
    /// A launch digest could not be computed.
    #[error(transparent)]
    Digest(#[from] snp::OvmfError),
}

/// Why no identity entry could be made of an image ([`entry_for_image`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageEntryError {
    /// The image's manifest could not be loaded.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// A file could not be read.
    #[error("{what}: {source}")]
    Read {
        /// What the file is (`kernel`, `initramfs`, `OVMF`, `TDVF`).
        what: &'static str,
        /// Why.
        source: attestation::cli_io::ReadError,
    },
    /// A file's SHA-256 is not the one its manifest lists.
    #[error(
        "{}: sha256 {computed}, but the manifest lists {}",
        path.display(),
        attestation::text::escape(listed)
    )]
    Sha256Mismatch {
        /// The file.
        path: std::path::PathBuf,
        /// Its SHA-256 (hex).
        computed: String,
        /// What the manifest lists, as written.
        listed: String,
    },
    /// The manifest's toolchain root hash is not 32 bytes of hex.
    #[error("{}: toolchains.root_hash is not 32 bytes of hex", dir.display())]
    RootHash {
        /// The image directory.
        dir: std::path::PathBuf,
    },
    /// An OVMF build does not parse, or gives no digest.
    #[error("OVMF {}: {source}", path.display())]
    Ovmf {
        /// The OVMF file.
        path: std::path::PathBuf,
        /// Why.
        source: snp::OvmfError,
    },
    /// An OVMF build's record gives no stand-in.
    #[error("OVMF {}: {source}", path.display())]
    OvmfStandIn {
        /// The OVMF file.
        path: std::path::PathBuf,
        /// Why.
        source: StandInError,
    },
    /// The stand-in made of an OVMF build's record gives another digest than the file.
    #[error("OVMF {}: the recorded metadata does not reproduce the file's digest", path.display())]
    OvmfNotReproduced {
        /// The OVMF file.
        path: std::path::PathBuf,
    },
    /// A TDVF build gives no TDX registers for the image.
    #[error("TDVF {}: {source}", path.display())]
    Tdvf {
        /// The TDVF file.
        path: std::path::PathBuf,
        /// Why.
        source: crate::manifest::TdxMeasurementError,
    },
    /// A TDVF build gives no value for one register.
    #[error("TDVF {}: no {register} computed", path.display())]
    TdvfRegister {
        /// The TDVF file.
        path: std::path::PathBuf,
        /// The register (`MRTD`, `RTMR1`, `RTMR1 (QEMU 10.1)`, `RTMR2`).
        register: &'static str,
    },
    /// The entry made is inconsistent.
    #[error(transparent)]
    Entry(#[from] EntryError),
}

/// An inclusive range of vCPU counts, written `"1-16"` (or `"8"`, or a plain integer on input).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VcpuRange {
    /// The lowest count.
    pub first: u32,
    /// The highest count (>= `first`).
    pub last: u32,
}

impl VcpuRange {
    /// Parses `N` or `N-M`.
    pub fn parse(s: &str) -> Result<Self, VcpuRangeError> {
        let t = s.trim();
        let num = |x: &str| {
            x.trim()
                .parse::<u32>()
                .map_err(|source| VcpuRangeError::NotACount {
                    range: s.to_owned(),
                    part: x.to_owned(),
                    source,
                })
        };
        let (first, last) = match t.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(t)?;
                (n, n)
            }
        };
        if first == 0 || first > last || last > MAX_VCPUS {
            return Err(VcpuRangeError::OutOfBounds {
                range: s.to_owned(),
            });
        }
        Ok(VcpuRange { first, last })
    }

    /// How many counts it holds.
    pub fn len(&self) -> u64 {
        u64::from(self.last) - u64::from(self.first) + 1
    }

    /// Whether it holds no count (never, for a parsed range).
    pub fn is_empty(&self) -> bool {
        self.last < self.first
    }
}

impl fmt::Display for VcpuRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

impl Serialize for VcpuRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for VcpuRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        let s = match Raw::deserialize(d)? {
            Raw::Int(v) => v.to_string(),
            Raw::Str(s) => s,
        };
        VcpuRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// One section of an OVMF build's SEV metadata, as the entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareSection {
    /// The edk2 name of its type (`SNP_SEC_MEM`, `SNP_SECRETS`, `CPUID`, `SVSM_CAA`, `SNP_KERNEL_HASHES`).
    pub kind: String,
    /// Guest physical address.
    pub gpa: HexU64,
    /// Size in bytes (whole pages).
    pub size: HexU64,
}

/// What the verifier needs of one OVMF build to compute SNP digests without the file (as sev-snp-measure's
/// `--snp-ovmf-hash` mode, with the metadata recorded too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnpFirmware {
    /// SHA-256 of the OVMF image (names the build).
    pub ovmf_sha256: Hex<32>,
    /// The launch digest after OVMF's own pages (`measure-guest snp --mode snp:ovmf-hash`).
    pub ovmf_hash: Hex<48>,
    /// The SEV-ES AP reset vector (SEV_ES_RESET_BLOCK entry of the GUIDed table).
    pub sev_es_reset_eip: HexU64,
    /// GPA of the SEV hashes table (SEV_HASH_TABLE_RV entry).
    pub sev_hashes_table: HexU64,
    /// The SEV metadata sections, in file order.
    pub sections: Vec<FirmwareSection>,
}

/// The SEV-SNP launch profiles an identity entry admits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnpProfiles {
    /// vCPU counts (ranges).
    pub vcpus: Vec<VcpuRange>,
    /// QEMU CPU model names (their signatures go into QEMU's VMSAs; EC2 and GCE use none).
    pub vcpu_types: Vec<String>,
    /// VMM types (`QEMU`, `ec2`, `gce`).
    pub vmm: Vec<String>,
    /// SEV_FEATURES values.
    pub guest_features: Vec<HexU64>,
    /// The guest policy a report must carry.
    pub policy: HexU64,
    /// The OVMF builds.
    pub ovmf: Vec<SnpFirmware>,
}

/// One TDVF build and the TDX registers of the image under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TdxFirmware {
    /// SHA-256 of the TDVF image.
    pub ovmf_sha256: Hex<32>,
    /// MRTD of the build.
    pub mrtd: Hex<48>,
    /// RTMR1 of a direct boot of the image (QEMU 10.2 and later: the kernel as is).
    pub rtmr1: Hex<48>,
    /// RTMR1 under QEMU 10.1 (which patches the kernel's setup header first), when admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtmr1_qemu_10_1: Option<Hex<48>>,
    /// RTMR2 (command line, initramfs).
    pub rtmr2: Hex<48>,
}

/// The TDX launch profiles an identity entry admits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TdxProfiles {
    /// The TDVF builds.
    pub firmware: Vec<TdxFirmware>,
}

/// An entry that pins an image's identity and the launch profiles it admits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityEntry {
    /// SHA-256 of the kernel.
    pub kernel_sha256: Hex<32>,
    /// SHA-256 of the initramfs.
    pub initramfs_sha256: Hex<32>,
    /// SHA-256 of the command line followed by one NUL byte.
    pub cmdline_sha256: Hex<32>,
    /// The command line, verbatim (optional, for review; checked against its hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// The toolchain image's dm-verity root hash (on the command line, which the launch digest covers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolchain_root_hash: Option<Hex<32>>,
    /// SEV-SNP profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snp: Option<SnpProfiles>,
    /// TDX profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdx: Option<TdxProfiles>,
}

const KINDS: [(SectionKind, u32); 5] = [
    (SectionKind::SnpSecMem, 1),
    (SectionKind::SnpSecrets, 2),
    (SectionKind::Cpuid, 3),
    (SectionKind::SvsmCaa, 4),
    (SectionKind::SnpKernelHashes, 0x10),
];

fn kind_code(name: &str) -> Option<u32> {
    KINDS
        .iter()
        .find(|(k, _)| k.name() == name)
        .map(|(_, c)| *c)
}

impl SnpFirmware {
    /// What an identity entry records of a parsed OVMF image whose SHA-256 is `sha256`.
    pub fn of(ovmf: &Ovmf, sha256: [u8; 32]) -> Result<Self, snp::OvmfError> {
        ovmf.kernel_hashes_offset()?;
        let (base, _) = ovmf.sev_hashes_table()?;
        Ok(SnpFirmware {
            ovmf_sha256: Hex(sha256),
            ovmf_hash: Hex(snp::ovmf_hash(ovmf)),
            sev_es_reset_eip: HexU64(u64::from(ovmf.sev_es_reset_eip()?)),
            sev_hashes_table: HexU64(u64::from(base)),
            sections: ovmf
                .sections()
                .iter()
                .map(|s| FirmwareSection {
                    kind: s.kind.name().to_owned(),
                    gpa: HexU64(u64::from(s.gpa)),
                    size: HexU64(u64::from(s.size)),
                })
                .collect(),
        })
    }

    /// A one-page stand-in image whose GUIDed table and SEV metadata give exactly the recorded sections, reset
    /// vector and hashes table, so [`snp::launch_digest`] (seeded with [`Self::ovmf_hash`]) computes the digest
    /// of the real build without its file.
    pub fn stand_in(&self) -> Result<Ovmf, StandInError> {
        const PAGE: usize = 4096;
        const META_AT: usize = 0x100;
        let u32_of = |field: &'static str, value: u64| {
            u32::try_from(value).map_err(|_| StandInError::Not32Bits { field, value })
        };
        if self.sections.len() > MAX_SECTIONS {
            return Err(StandInError::TooManySections {
                count: self.sections.len(),
            });
        }
        let mut sections = Vec::with_capacity(self.sections.len());
        for (i, s) in self.sections.iter().enumerate() {
            let code = kind_code(&s.kind).ok_or_else(|| StandInError::UnknownKind {
                index: i + 1,
                kind: s.kind.clone(),
            })?;
            sections.push((
                u32_of("section gpa", s.gpa.0)?,
                u32_of("section size", s.size.0)?,
                code,
            ));
        }
        let mut ht = u32_of("sev_hashes_table", self.sev_hashes_table.0)?
            .to_le_bytes()
            .to_vec();
        ht.extend_from_slice(&0x400u32.to_le_bytes());
        let entries = [
            (
                snp::SEV_ES_RESET_BLOCK_GUID,
                u32_of("sev_es_reset_eip", self.sev_es_reset_eip.0)?
                    .to_le_bytes()
                    .to_vec(),
            ),
            (snp::SEV_HASH_TABLE_RV_GUID, ht),
        ];
        let mut img = vec![0u8; PAGE];
        snp::write_ovmf_tables(&mut img, META_AT, &sections, &entries)
            .ok_or(StandInError::DoesNotFit)?;
        let ovmf = Ovmf::parse(img)?;
        ovmf.kernel_hashes_offset()?;
        Ok(ovmf)
    }
}

/// One admitted SEV-SNP launch profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpProfile {
    /// vCPU count.
    pub vcpus: u32,
    /// vCPU type (QEMU only).
    pub vcpu_type: Option<String>,
    /// VMM.
    pub vmm: VmmType,
    /// SEV_FEATURES.
    pub guest_features: u64,
    /// The OVMF build (its SHA-256).
    pub ovmf_sha256: Hex<32>,
}

impl fmt::Display for SnpProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vcpus={} vcpu_type={} vmm={} guest_features={:#x} ovmf_sha256={}",
            self.vcpus,
            self.vcpu_type.as_deref().unwrap_or("-"),
            self.vmm,
            self.guest_features,
            self.ovmf_sha256
        )
    }
}

impl SnpProfiles {
    /// How many launch profiles these admit (types count once for a VMM other than QEMU).
    pub fn count(&self) -> u64 {
        let counts: u64 = self.vcpus.iter().map(VcpuRange::len).sum();
        let per_vmm: u64 = self
            .vmm
            .iter()
            .map(|v| match v.parse::<VmmType>() {
                Ok(VmmType::Qemu) => self.vcpu_types.len() as u64,
                _ => 1,
            })
            .sum();
        counts
            .saturating_mul(per_vmm)
            .saturating_mul(self.guest_features.len() as u64)
            .saturating_mul(self.ovmf.len() as u64)
    }

    /// "vcpus 1-16, types EPYC-Milan/EPYC-Genoa, vmm QEMU, guest_features 0x1, 1 OVMF build, policy 0x30000".
    pub fn summary(&self) -> String {
        let j = |v: Vec<String>| v.join("/");
        format!(
            "vcpus {}, types {}, vmm {}, guest_features {}, {} OVMF build(s), policy {:#x}",
            j(self.vcpus.iter().map(|r| r.to_string()).collect()),
            j(self.vcpu_types.clone()),
            j(self.vmm.clone()),
            j(self
                .guest_features
                .iter()
                .map(|g| format!("{:#x}", g.0))
                .collect()),
            self.ovmf.len(),
            self.policy.0
        )
    }

    fn check(&self) -> Result<(), EntryError> {
        if self.vcpus.is_empty()
            || self.vmm.is_empty()
            || self.guest_features.is_empty()
            || self.ovmf.is_empty()
        {
            return Err(EntryError::SnpEmptyList);
        }
        let mut qemu = false;
        for v in &self.vmm {
            qemu |= v.parse::<VmmType>()? == VmmType::Qemu;
        }
        if qemu && self.vcpu_types.is_empty() {
            return Err(EntryError::QemuWithoutVcpuTypes);
        }
        for t in &self.vcpu_types {
            if snp::vcpu_sig_for_type(t).is_none() {
                return Err(EntryError::UnknownVcpuType {
                    vcpu_type: t.clone(),
                });
            }
        }
        let count = self.count();
        if count > MAX_PROFILES {
            return Err(EntryError::TooManyProfiles { count });
        }
        for (i, fw) in self.ovmf.iter().enumerate() {
            fw.stand_in().map_err(|source| EntryError::Ovmf {
                index: i + 1,
                source,
            })?;
        }
        Ok(())
    }

    /// Every admitted profile, each with its digest, in order (OVMF build, VMM, type, guest features, vCPU
    /// count); stops at the first digest `stop` accepts.
    fn search(
        &self,
        hashes: &KernelHashes,
        mut stop: impl FnMut(&LaunchDigest) -> bool,
    ) -> Result<Option<SnpProfile>, SnpSearchError> {
        for fw in &self.ovmf {
            let stand_in = fw.stand_in()?;
            for v in &self.vmm {
                let vmm = v.parse::<VmmType>()?;
                let types: Vec<Option<&String>> = if vmm == VmmType::Qemu {
                    self.vcpu_types.iter().map(Some).collect()
                } else {
                    vec![None]
                };
                for t in types {
                    let sig = match t {
                        Some(t) => snp::vcpu_sig_for_type(t).ok_or_else(|| {
                            SnpSearchError::UnknownVcpuType {
                                vcpu_type: t.clone(),
                            }
                        })?,
                        None => 0,
                    };
                    for gf in &self.guest_features {
                        for r in &self.vcpus {
                            // The digest of the range's first count, then one AP VMSA more per count.
                            let cfg = SnpConfig {
                                vcpus: r.first,
                                vcpu_sig: sig,
                                guest_features: gf.0,
                                vmm,
                                ovmf_hash: Some(fw.ovmf_hash.0),
                            };
                            let mut ld = snp::launch_digest(&stand_in, Some(hashes), &cfg)?;
                            let ap_eip = fw.sev_es_reset_eip.0;
                            let ap: [u8; 48] =
                                Sha384::digest(&snp::vmsa_page(ap_eip, &cfg)[..]).into();
                            for vcpus in r.first..=r.last {
                                if vcpus > r.first {
                                    if ap_eip == 0 {
                                        break;
                                    }
                                    ld = add_vmsa(&ld, &ap);
                                }
                                if stop(&ld) {
                                    return Ok(Some(SnpProfile {
                                        vcpus,
                                        vcpu_type: t.cloned(),
                                        vmm,
                                        guest_features: gf.0,
                                        ovmf_sha256: fw.ovmf_sha256,
                                    }));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(None)
    }
}

/// The GPA the PSP records for a VMSA page (as `snp` uses it).
const VMSA_GPA: u64 = 0xFFFF_FFFF_F000;

/// One more VMSA page folded into a launch digest: LD = SHA-384(PAGE_INFO) with PAGE_INFO = LD || SHA-384 of the
/// page || length 0x70 || type VMSA (2) || IMI 0 || permissions 0 || GPA (the SNP firmware ABI, as
/// [`snp::launch_digest`] folds each vCPU's VMSA; the tests check both give the same digests).
fn add_vmsa(ld: &LaunchDigest, page_hash: &[u8; 48]) -> LaunchDigest {
    let mut info = [0u8; 0x70];
    info[0..48].copy_from_slice(ld);
    info[48..96].copy_from_slice(page_hash);
    info[96..98].copy_from_slice(&0x70u16.to_le_bytes());
    info[98] = 2;
    info[104..112].copy_from_slice(&VMSA_GPA.to_le_bytes());
    Sha384::digest(info).into()
}

impl IdentityEntry {
    /// The kernel hashes QEMU puts in the SEV hashes table for this image.
    pub fn kernel_hashes(&self) -> KernelHashes {
        KernelHashes {
            cmdline: self.cmdline_sha256.0,
            initrd: self.initramfs_sha256.0,
            kernel: self.kernel_sha256.0,
        }
    }

    /// Checks the entry; the message names what is wrong (the caller adds which entry).
    pub fn check(&self) -> Result<(), EntryError> {
        if let Some(c) = &self.cmdline {
            let h = crate::sim::cmdline_sha256(c);
            if h != self.cmdline_sha256.0 {
                return Err(EntryError::CmdlineHash {
                    recorded: self.cmdline_sha256,
                    computed: Hex(h),
                });
            }
            if let Some(r) = &self.toolchain_root_hash {
                if !c.contains(&r.to_string()) {
                    return Err(EntryError::RootHashNotOnCmdline { root: *r });
                }
            }
        }
        if self.snp.is_none() && self.tdx.is_none() {
            return Err(EntryError::NoLaunch);
        }
        if let Some(s) = &self.snp {
            s.check()?;
        }
        if let Some(t) = &self.tdx {
            if t.firmware.is_empty() {
                return Err(EntryError::TdxNoFirmware);
            }
        }
        Ok(())
    }

    /// The admitted SNP profile whose digest is `measurement` (`Ok(None)` when none is).
    pub fn find_snp(&self, measurement: &[u8; 48]) -> Result<Option<SnpProfile>, SnpSearchError> {
        match &self.snp {
            Some(s) => s.search(&self.kernel_hashes(), |ld| ld == measurement),
            None => Ok(None),
        }
    }

    /// The TDVF build and QEMU variant whose registers the quote's MRTD and RTMR1/RTMR2 equal.
    pub fn find_tdx(&self, mrtd: &[u8; 48], rtmrs: &[[u8; 48]; 4]) -> Option<TdxMatch> {
        let t = self.tdx.as_ref()?;
        t.firmware.iter().find_map(|fw| {
            if &fw.mrtd.0 != mrtd || fw.rtmr2.0 != rtmrs[2] {
                return None;
            }
            let qemu = if fw.rtmr1.0 == rtmrs[1] {
                "10.2 or later"
            } else if fw.rtmr1_qemu_10_1.as_ref().is_some_and(|r| r.0 == rtmrs[1]) {
                "10.1"
            } else {
                return None;
            };
            Some(TdxMatch {
                ovmf_sha256: fw.ovmf_sha256,
                qemu,
            })
        })
    }

    /// "kernel_sha256 <first 16 hex digits>…".
    pub fn label(&self) -> String {
        format!(
            "identity kernel_sha256={} initramfs_sha256={}",
            &self.kernel_sha256.to_string()[..16],
            &self.initramfs_sha256.to_string()[..16]
        )
    }
}

/// The TDVF build and QEMU variant an identity entry matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdxMatch {
    /// The TDVF build.
    pub ovmf_sha256: Hex<32>,
    /// The QEMU versions whose RTMR1 it is.
    pub qemu: &'static str,
}

/// Writes identity entries as TOML (the set writer's part for `[[identity]]`).
pub(crate) fn write_toml(entries: &[IdentityEntry], t: &mut String) {
    let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let list = |v: Vec<String>| format!("[{}]", v.join(", "));
    if !entries.is_empty() {
        t.push_str("\n# Identity entries: an image (by the hashes of its kernel, initramfs and command line) and the launch\n");
        t.push_str("# profiles it admits; the verifier computes the expected SNP digest of each admitted profile, and\n");
        t.push_str(
            "# matches TDX quotes against each TDVF build's MRTD and the image's RTMR1/RTMR2.\n",
        );
    }
    for e in entries {
        t.push_str(&format!(
            "\n[[identity]]\nkernel_sha256 = \"{}\"\ninitramfs_sha256 = \"{}\"\n",
            e.kernel_sha256, e.initramfs_sha256
        ));
        if let Some(c) = &e.cmdline {
            t.push_str(&format!("cmdline = {}\n", q(c)));
        }
        t.push_str(&format!("cmdline_sha256 = \"{}\"\n", e.cmdline_sha256));
        if let Some(r) = &e.toolchain_root_hash {
            t.push_str(&format!("toolchain_root_hash = \"{r}\"\n"));
        }
        if let Some(s) = &e.snp {
            t.push_str(&format!(
                "\n[identity.snp]\nvcpus = {}\nvcpu_types = {}\nvmm = {}\nguest_features = {}\npolicy = \"{:#x}\"\n",
                list(s.vcpus.iter().map(|r| q(&r.to_string())).collect()),
                list(s.vcpu_types.iter().map(|x| q(x)).collect()),
                list(s.vmm.iter().map(|x| q(x)).collect()),
                list(s.guest_features.iter().map(|g| format!("\"{:#x}\"", g.0)).collect()),
                s.policy.0
            ));
            for fw in &s.ovmf {
                t.push_str(&format!(
                    "\n[[identity.snp.ovmf]]\novmf_sha256 = \"{}\"\novmf_hash = \"{}\"\nsev_es_reset_eip = \"{:#x}\"\nsev_hashes_table = \"{:#x}\"\nsections = [\n",
                    fw.ovmf_sha256, fw.ovmf_hash, fw.sev_es_reset_eip.0, fw.sev_hashes_table.0
                ));
                for sec in &fw.sections {
                    t.push_str(&format!(
                        "  {{ kind = {}, gpa = \"{:#x}\", size = \"{:#x}\" }},\n",
                        q(&sec.kind),
                        sec.gpa.0,
                        sec.size.0
                    ));
                }
                t.push_str("]\n");
            }
        }
        if let Some(td) = &e.tdx {
            t.push_str("\n[identity.tdx]\n");
            for fw in &td.firmware {
                t.push_str(&format!(
                    "\n[[identity.tdx.firmware]]\novmf_sha256 = \"{}\"\nmrtd = \"{}\"\nrtmr1 = \"{}\"\n",
                    fw.ovmf_sha256, fw.mrtd, fw.rtmr1
                ));
                if let Some(r) = &fw.rtmr1_qemu_10_1 {
                    t.push_str(&format!("rtmr1_qemu_10_1 = \"{r}\"\n"));
                }
                t.push_str(&format!("rtmr2 = \"{}\"\n", fw.rtmr2));
            }
        }
    }
}

/// The launch profiles to admit, as `measure-guest identity` takes them.
#[derive(Debug, Clone)]
pub struct ProfileSpec {
    /// vCPU counts.
    pub vcpus: Vec<VcpuRange>,
    /// vCPU types (QEMU).
    pub vcpu_types: Vec<String>,
    /// VMM types.
    pub vmm: Vec<VmmType>,
    /// SEV_FEATURES values.
    pub guest_features: Vec<u64>,
    /// The guest policy a report must carry.
    pub policy: u64,
    /// Also admit QEMU 10.1's RTMR1 (its kernel-header patch) for TDX.
    pub tdx_qemu_10_1: bool,
}

fn read_capped(what: &'static str, p: &std::path::Path) -> Result<Vec<u8>, ImageEntryError> {
    attestation::cli_io::read_capped(p, 4 << 30)
        .map_err(|source| ImageEntryError::Read { what, source })
}

/// The identity entry of the image in `dir` (`fenced-run image build --out DIR`): its manifest's kernel,
/// initramfs and command line (each file checked against the manifest's SHA-256) and toolchain root hash, the
/// SNP profiles of `spec` for each OVMF build in `ovmf`, and for each TDVF build in `tdvf` its MRTD and the
/// image's RTMR1/RTMR2. Every SNP stand-in is checked against the real file: the digest it gives for the
/// first admitted profile must equal the one computed from the file.
pub fn entry_for_image(
    dir: &std::path::Path,
    ovmf: &[std::path::PathBuf],
    tdvf: &[std::path::PathBuf],
    spec: &ProfileSpec,
) -> Result<IdentityEntry, ImageEntryError> {
    use sha2::{Digest, Sha256};
    let m = crate::manifest::Manifest::load(dir)?;
    let file = |name: &str, want: &str, what: &'static str| -> Result<Vec<u8>, ImageEntryError> {
        let p = dir.join(name);
        let bytes = read_capped(what, &p)?;
        let have = hex::encode(Sha256::digest(&bytes));
        if have != want {
            return Err(ImageEntryError::Sha256Mismatch {
                path: p,
                computed: have,
                listed: want.to_owned(),
            });
        }
        Ok(bytes)
    };
    let kernel = file(&m.kernel.file, &m.kernel.sha256, "kernel")?;
    let initrd = file(&m.initramfs.file, &m.initramfs.sha256, "initramfs")?;
    let cmdline = m.cmdline.value.clone();
    let toolchain_root_hash = match &m.toolchains {
        Some(t) => {
            let v = hex::decode(&t.root_hash)
                .ok()
                .and_then(|v| <[u8; 32]>::try_from(v).ok())
                .ok_or_else(|| ImageEntryError::RootHash {
                    dir: dir.to_owned(),
                })?;
            Some(Hex(v))
        }
        None => None,
    };
    let mut entry = IdentityEntry {
        kernel_sha256: Hex(Sha256::digest(&kernel).into()),
        initramfs_sha256: Hex(Sha256::digest(&initrd).into()),
        cmdline_sha256: Hex(crate::sim::cmdline_sha256(&cmdline)),
        cmdline: Some(cmdline.clone()),
        toolchain_root_hash,
        snp: None,
        tdx: None,
    };
    if !ovmf.is_empty() {
        let mut firmware = Vec::new();
        for p in ovmf {
            let bytes = read_capped("OVMF", p)?;
            let sha: [u8; 32] = Sha256::digest(&bytes).into();
            let ovmf_error = |source| ImageEntryError::Ovmf {
                path: p.clone(),
                source,
            };
            let o = Ovmf::parse(bytes).map_err(ovmf_error)?;
            let fw = SnpFirmware::of(&o, sha).map_err(ovmf_error)?;
            // The stand-in must give the real file's digest.
            let stand_in = fw
                .stand_in()
                .map_err(|source| ImageEntryError::OvmfStandIn {
                    path: p.clone(),
                    source,
                })?;
            let hashes = entry.kernel_hashes();
            let vmm = spec.vmm.first().copied().unwrap_or_default();
            let cfg = SnpConfig {
                vcpus: spec.vcpus.first().map_or(1, |r| r.first),
                vcpu_sig: spec
                    .vcpu_types
                    .first()
                    .and_then(|t| snp::vcpu_sig_for_type(t))
                    .unwrap_or(0),
                guest_features: spec.guest_features.first().copied().unwrap_or(1),
                vmm,
                ovmf_hash: None,
            };
            let real = snp::launch_digest(&o, Some(&hashes), &cfg).map_err(ovmf_error)?;
            let seeded = SnpConfig {
                ovmf_hash: Some(fw.ovmf_hash.0),
                ..cfg
            };
            let via = snp::launch_digest(&stand_in, Some(&hashes), &seeded).map_err(ovmf_error)?;
            if real != via {
                return Err(ImageEntryError::OvmfNotReproduced { path: p.clone() });
            }
            firmware.push(fw);
        }
        let profiles = SnpProfiles {
            vcpus: spec.vcpus.clone(),
            vcpu_types: spec.vcpu_types.clone(),
            vmm: spec.vmm.iter().map(|v| v.to_string()).collect(),
            guest_features: spec.guest_features.iter().map(|g| HexU64(*g)).collect(),
            policy: HexU64(spec.policy),
            ovmf: firmware,
        };
        profiles.check()?;
        entry.snp = Some(profiles);
    }
    if !tdvf.is_empty() {
        let mut firmware = Vec::new();
        for p in tdvf {
            let bytes = read_capped("TDVF", p)?;
            let t = crate::manifest::tdx_measurement(&bytes, &kernel, &initrd, &cmdline).map_err(
                |source| ImageEntryError::Tdvf {
                    path: p.clone(),
                    source,
                },
            )?;
            let h48 =
                |register: &'static str, s: Option<&str>| -> Result<Hex<48>, ImageEntryError> {
                    s.and_then(|s| hex::decode(s).ok())
                        .and_then(|v| <[u8; 48]>::try_from(v).ok())
                        .map(Hex)
                        .ok_or_else(|| ImageEntryError::TdvfRegister {
                            path: p.clone(),
                            register,
                        })
                };
            firmware.push(TdxFirmware {
                ovmf_sha256: Hex(Sha256::digest(&bytes).into()),
                mrtd: h48("MRTD", Some(&t.mrtd))?,
                rtmr1: h48("RTMR1", t.rtmrs[1].as_deref())?,
                rtmr1_qemu_10_1: if spec.tdx_qemu_10_1 {
                    Some(h48("RTMR1 (QEMU 10.1)", t.rtmr1_qemu_10_1.as_deref())?)
                } else {
                    None
                },
                rtmr2: h48("RTMR2", t.rtmrs[2].as_deref())?,
            });
        }
        entry.tdx = Some(TdxProfiles { firmware });
    }
    entry.check()?;
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_ovmf() -> Option<Ovmf> {
        let p = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
        match std::fs::read(&p) {
            Ok(b) => Some(Ovmf::parse(b).expect("shared OVMF parses")),
            Err(_) => {
                attestation::vectors::skip(&format!(
                    "shared AmdSev OVMF not found at {}",
                    p.display()
                ));
                None
            }
        }
    }

    fn hashes() -> KernelHashes {
        KernelHashes::new(b"kernel", Some(b"initrd"), Some("console=ttyS0"))
    }

    #[test]
    fn vcpu_ranges_parse_and_bound() {
        assert_eq!(
            VcpuRange::parse("1-16").expect("range"),
            VcpuRange { first: 1, last: 16 }
        );
        assert_eq!(VcpuRange::parse(" 8 ").expect("one").to_string(), "8");
        assert_eq!(VcpuRange::parse("2-4").expect("range").len(), 3);
        for bad in ["0", "0-4", "5-4", "1-513", "x", "1-", "-3", ""] {
            assert!(VcpuRange::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn errors_name_what_is_wrong_by_variant() {
        assert_eq!(
            VcpuRange::parse("5-4"),
            Err(VcpuRangeError::OutOfBounds {
                range: "5-4".into()
            })
        );
        let e = VcpuRange::parse("1-x").expect_err("not a count");
        assert!(
            matches!(&e, VcpuRangeError::NotACount { part, .. } if part == "x"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string().split(": ").nth(1),
            Some("\"x\" is not a count")
        );
        let fw = SnpFirmware {
            ovmf_sha256: Hex([1; 32]),
            ovmf_hash: Hex([2; 48]),
            sev_es_reset_eip: HexU64(1 << 33),
            sev_hashes_table: HexU64(0x80c000),
            sections: vec![],
        };
        assert_eq!(
            fw.stand_in().expect_err("reset vector"),
            StandInError::Not32Bits {
                field: "sev_es_reset_eip",
                value: 1 << 33
            }
        );
        let mut p = profiles(fw, "1-512");
        p.guest_features = (0..9).map(HexU64).collect();
        assert_eq!(p.check(), Err(EntryError::TooManyProfiles { count: 9216 }));
        p.vmm = vec!["xen".into()];
        assert_eq!(
            p.check(),
            Err(EntryError::Vmm(snp::UnknownVmmType { name: "xen".into() }))
        );
    }

    #[test]
    fn the_stand_in_gives_the_real_firmware_digest() {
        let Some(ovmf) = shared_ovmf() else { return };
        let fw = SnpFirmware::of(&ovmf, [7; 32]).expect("record");
        let stand_in = fw.stand_in().expect("stand-in");
        assert_eq!(stand_in.sections(), ovmf.sections());
        for (vcpus, vmm, sig, features) in [
            (1, VmmType::Qemu, snp::vcpu_sig_for_type("EPYC-Milan"), 1),
            (8, VmmType::Qemu, snp::vcpu_sig_for_type("EPYC-Genoa"), 0x21),
            (3, VmmType::Ec2, None, 1),
            (2, VmmType::Gce, None, 1),
        ] {
            let cfg = SnpConfig {
                vcpus,
                vcpu_sig: sig.unwrap_or(0),
                guest_features: features,
                vmm,
                ovmf_hash: None,
            };
            let real = snp::launch_digest(&ovmf, Some(&hashes()), &cfg).expect("real");
            let via = snp::launch_digest(
                &stand_in,
                Some(&hashes()),
                &SnpConfig {
                    ovmf_hash: Some(fw.ovmf_hash.0),
                    ..cfg
                },
            )
            .expect("stand-in");
            assert_eq!(real, via, "{vcpus} vCPUs {vmm}");
        }
    }

    fn profiles(fw: SnpFirmware, vcpus: &str) -> SnpProfiles {
        SnpProfiles {
            vcpus: vec![VcpuRange::parse(vcpus).expect("range")],
            vcpu_types: vec!["EPYC-Milan".into(), "EPYC-Genoa".into()],
            vmm: vec!["QEMU".into()],
            guest_features: vec![HexU64(1)],
            policy: HexU64(0x30000),
            ovmf: vec![fw],
        }
    }

    #[test]
    fn profiles_are_counted_bounded_and_searched() {
        let fw = SnpFirmware {
            ovmf_sha256: Hex([1; 32]),
            ovmf_hash: Hex([2; 48]),
            sev_es_reset_eip: HexU64(0x80b004),
            sev_hashes_table: HexU64(0x80c000),
            sections: vec![FirmwareSection {
                kind: "SNP_KERNEL_HASHES".into(),
                gpa: HexU64(0x80c000),
                size: HexU64(0x1000),
            }],
        };
        let p = profiles(fw.clone(), "1-16");
        assert_eq!(p.count(), 32);
        p.check().expect("within bounds");
        let mut big = profiles(fw.clone(), "1-512");
        big.guest_features = (0..9).map(HexU64).collect();
        let e = big.check().expect_err("too many").to_string();
        assert!(
            e.contains("admits 9216 launch profiles, more than the 8192"),
            "{e}"
        );
        let mut bad = fw.clone();
        bad.sections[0].kind = "BOGUS".into();
        let e = profiles(bad, "1").check().expect_err("kind").to_string();
        assert!(e.contains("unknown kind \"BOGUS\""), "{e}");
        // The search finds the digest of the 11th vCPU count of the second type, and nothing for 17.
        let want = {
            let cfg = SnpConfig {
                vcpus: 11,
                vcpu_sig: snp::vcpu_sig_for_type("EPYC-Genoa").expect("sig"),
                guest_features: 1,
                vmm: VmmType::Qemu,
                ovmf_hash: Some([2; 48]),
            };
            snp::launch_digest(&fw.stand_in().expect("stand-in"), Some(&hashes()), &cfg)
                .expect("digest")
        };
        let found = p.search(&hashes(), |ld| ld == &want).expect("search");
        let found = found.expect("found");
        assert_eq!(
            (found.vcpus, found.vcpu_type.as_deref()),
            (11, Some("EPYC-Genoa"))
        );
        assert!(p
            .search(&hashes(), |ld| ld == &[0; 48])
            .expect("search")
            .is_none());
    }

    #[test]
    fn the_incremental_search_gives_launch_digest_for_every_count() {
        let Some(ovmf) = shared_ovmf() else { return };
        let fw = SnpFirmware::of(&ovmf, [7; 32]).expect("record");
        let mut p = profiles(fw, "3-9");
        p.vmm = vec!["QEMU".into(), "ec2".into(), "gce".into()];
        p.guest_features = vec![HexU64(1), HexU64(0x21)];
        let mut seen = Vec::new();
        p.search(&hashes(), |ld| {
            seen.push(*ld);
            false
        })
        .expect("search");
        assert_eq!(seen.len() as u64, p.count());
        let mut want = Vec::new();
        for vmm in [VmmType::Qemu, VmmType::Ec2, VmmType::Gce] {
            let types: &[Option<&str>] = if vmm == VmmType::Qemu {
                &[Some("EPYC-Milan"), Some("EPYC-Genoa")]
            } else {
                &[None]
            };
            for t in types {
                for gf in [1, 0x21] {
                    for vcpus in 3..=9 {
                        let cfg = SnpConfig {
                            vcpus,
                            vcpu_sig: t.and_then(snp::vcpu_sig_for_type).unwrap_or(0),
                            guest_features: gf,
                            vmm,
                            ovmf_hash: None,
                        };
                        want.push(
                            snp::launch_digest(&ovmf, Some(&hashes()), &cfg).expect("digest"),
                        );
                    }
                }
            }
        }
        assert_eq!(seen, want);
    }

    #[test]
    fn inconsistent_identity_entries_are_refused_naming_why() {
        let fw = SnpFirmware {
            ovmf_sha256: Hex([1; 32]),
            ovmf_hash: Hex([2; 48]),
            sev_es_reset_eip: HexU64(0x80b004),
            sev_hashes_table: HexU64(0x80c000),
            sections: vec![FirmwareSection {
                kind: "SNP_KERNEL_HASHES".into(),
                gpa: HexU64(0x80c000),
                size: HexU64(0x1000),
            }],
        };
        let cmdline = "console=ttyS0 fenced_run.toolchains=".to_owned() + &"ab".repeat(32);
        let good = IdentityEntry {
            kernel_sha256: Hex([3; 32]),
            initramfs_sha256: Hex([4; 32]),
            cmdline_sha256: Hex(crate::sim::cmdline_sha256(&cmdline)),
            cmdline: Some(cmdline.clone()),
            toolchain_root_hash: Some(Hex([0xab; 32])),
            snp: Some(profiles(fw.clone(), "1-4")),
            tdx: None,
        };
        good.check().expect("consistent");
        let refused = |e: IdentityEntry, want: &str| {
            let m = e.check().expect_err(want).to_string();
            assert!(m.contains(want), "{m} (wanted {want:?})");
        };
        let mut e = good.clone();
        e.cmdline = Some("other".into());
        refused(e, "cmdline_sha256 is");
        let mut e = good.clone();
        e.toolchain_root_hash = Some(Hex([0xcd; 32]));
        refused(e, "is not on the command line");
        let mut e = good.clone();
        e.snp = None;
        refused(e, "admits no launch");
        let mut e = good.clone();
        e.tdx = Some(TdxProfiles { firmware: vec![] });
        refused(e, "tdx: firmware must list at least one");
        let with = |f: &dyn Fn(&mut SnpProfiles)| {
            let mut e = good.clone();
            if let Some(p) = e.snp.as_mut() {
                f(p);
            }
            e
        };
        refused(with(&|p| p.vcpus.clear()), "must each list at least one");
        refused(
            with(&|p| p.vcpu_types.clear()),
            "vmm QEMU needs at least one vcpu_types",
        );
        refused(
            with(&|p| p.vcpu_types = vec!["Pentium".into()]),
            "unknown vcpu_type \"Pentium\"",
        );
        refused(with(&|p| p.vmm = vec!["xen".into()]), "unknown VMM type");
        refused(
            with(&|p| p.ovmf[0].sev_es_reset_eip = HexU64(1 << 40)),
            "sev_es_reset_eip 0x10000000000 does not fit in 32 bits",
        );
        refused(
            with(&|p| p.ovmf[0].sections = vec![p.ovmf[0].sections[0].clone(); 65]),
            "65 sections, at most 64",
        );
        refused(
            with(&|p| p.ovmf[0].sections[0].size = HexU64(0x2000)),
            "not one page",
        );
        // Non-QEMU VMMs count one type.
        let p = with(&|p| p.vmm = vec!["QEMU".into(), "ec2".into()])
            .snp
            .expect("snp");
        assert_eq!(p.count(), 4 * 2 + 4);
    }
}
