//! The SEV-SNP launch digest of a QEMU/KVM (or EC2, GCE) guest booted from OVMF, as the AMD PSP computes it.
//! Every page the VMM hands to SNP_LAUNCH_UPDATE is folded into a SHA-384 chain of PAGE_INFO structures:
//! the OVMF image, the sections of its SEV metadata, the SEV hashes table page and one VMSA per vCPU.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sha2::{Digest, Sha256, Sha384};

/// Length of an SNP launch digest (SHA-384).
pub const LD_LEN: usize = 48;
/// An SNP launch digest, as it appears in the MEASUREMENT field of an attestation report.
pub type LaunchDigest = [u8; LD_LEN];

const PAGE: usize = 4096;
const FOUR_GIB: u64 = 1 << 32;
/// The GPA the PSP records for a VMSA page: (u64)-1, page aligned, bits above 51 cleared.
const VMSA_GPA: u64 = 0xFFFF_FFFF_F000;
/// Reset vector of the bootstrap processor.
const BSP_EIP: u64 = 0xFFFF_FFF0;
const FOOTER_ENTRY_LEN: usize = 18;

/// Turns a textual GUID into the little-endian byte layout EFI stores on disk.
pub(crate) const fn guid_le(s: &str) -> [u8; 16] {
    const fn nib(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => panic!("bad hex digit in GUID constant"),
        }
    }
    let b = s.as_bytes();
    let mut raw = [0u8; 16];
    let mut i = 0;
    let mut o = 0;
    while i < b.len() {
        if b[i] == b'-' {
            i += 1;
            continue;
        }
        raw[o] = (nib(b[i]) << 4) | nib(b[i + 1]);
        o += 1;
        i += 2;
    }
    [
        raw[3], raw[2], raw[1], raw[0], raw[5], raw[4], raw[7], raw[6], raw[8], raw[9], raw[10],
        raw[11], raw[12], raw[13], raw[14], raw[15],
    ]
}

/// GUID of the footer that closes OVMF's GUIDed table (32 bytes before the end of the image).
pub const OVMF_TABLE_FOOTER_GUID: [u8; 16] = guid_le("96b582de-1fb2-45f7-baea-a366c55a082d");
/// GUID of the entry giving the GPA and size of the SEV hashes table.
pub const SEV_HASH_TABLE_RV_GUID: [u8; 16] = guid_le("7255371f-3a3b-4b04-927b-1da6efa8d454");
/// GUID of the entry giving the SEV-ES AP reset vector.
pub const SEV_ES_RESET_BLOCK_GUID: [u8; 16] = guid_le("00f771de-1a7e-4fcb-890e-68c77e2fb44e");
/// GUID of the entry giving the offset (from the end) of the SEV metadata.
pub const OVMF_SEV_METADATA_GUID: [u8; 16] = guid_le("dc886566-984a-4798-a75e-5585a7bf67cc");
/// GUID of the entry giving the offset (from the end) of the TDX (TDVF) metadata.
pub const TDX_METADATA_GUID: [u8; 16] = guid_le("e47a6535-984a-4798-865e-4685a7bf8ec2");
const SEV_HASH_TABLE_HEADER_GUID: [u8; 16] = guid_le("9438d606-4f22-4cc9-b479-a793d411fd21");
const SEV_KERNEL_ENTRY_GUID: [u8; 16] = guid_le("4de79437-abd2-427f-b835-d5b172d2045b");
const SEV_INITRD_ENTRY_GUID: [u8; 16] = guid_le("44baf731-3a2f-4bd7-9af1-41e29169781d");
const SEV_CMDLINE_ENTRY_GUID: [u8; 16] = guid_le("97d02dd8-bd20-4c94-aa78-e7714d36ab2a");

/// What is wrong with an OVMF image, or with what was asked of it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum OvmfError {
    /// The image is not a whole number of 4 KiB pages.
    #[error("size {0} bytes is not a multiple of 4096")]
    NotPageAligned(usize),
    /// The image is larger than the 4 GiB below which it is mapped.
    #[error("size {0} bytes does not fit below 4 GiB")]
    TooLarge(usize),
    /// The GUIDed table is cut short or inconsistent.
    #[error("GUID table: {0}")]
    GuidTable(String),
    /// The image's GUIDed table has no entry with this GUID.
    #[error("GUID table has no {0} entry")]
    MissingEntry(&'static str),
    /// The SEV metadata is cut short or inconsistent.
    #[error("SEV metadata: {0}")]
    SevMetadata(String),
    /// A SEV metadata section type that SNP does not define.
    #[error("SEV metadata section {index} has unknown type {kind:#x}")]
    UnknownSection {
        /// Position of the section in the metadata.
        index: usize,
        /// The type found.
        kind: u32,
    },
    /// A kernel was given but the firmware cannot measure one.
    #[error("{0}, it cannot measure a kernel")]
    CannotMeasureKernel(String),
    /// More than one vCPU but no AP reset vector.
    #[error("SEV-ES reset block gives AP reset vector 0, cannot start {0} vCPUs")]
    NoApResetVector(u32),
}

/// Type of a section in OVMF's SEV metadata (edk2 OvmfPkg/ResetVector/X64/OvmfSevMetadata.asm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SectionKind {
    /// SNP_SEC_MEM: pre-validated memory, measured as zero pages (unmeasured on GCE).
    SnpSecMem,
    /// SNP_SECRETS: the secrets page.
    SnpSecrets,
    /// CPUID: the CPUID page.
    Cpuid,
    /// SVSM_CAA: the SVSM calling area, measured as zero pages.
    SvsmCaa,
    /// SNP_KERNEL_HASHES: the page that holds the SEV hashes table.
    SnpKernelHashes,
}

impl SectionKind {
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::SnpSecMem,
            2 => Self::SnpSecrets,
            3 => Self::Cpuid,
            4 => Self::SvsmCaa,
            0x10 => Self::SnpKernelHashes,
            _ => return None,
        })
    }

    /// The name edk2 gives the section type.
    pub fn name(self) -> &'static str {
        match self {
            Self::SnpSecMem => "SNP_SEC_MEM",
            Self::SnpSecrets => "SNP_SECRETS",
            Self::Cpuid => "CPUID",
            Self::SvsmCaa => "SVSM_CAA",
            Self::SnpKernelHashes => "SNP_KERNEL_HASHES",
        }
    }
}

/// One section of OVMF's SEV metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SevSection {
    /// Guest physical address of the section.
    pub gpa: u32,
    /// Size in bytes.
    pub size: u32,
    /// What the section holds.
    pub kind: SectionKind,
}

/// A GUIDed-table entry: its GUID and where its data lies in the image.
type TableEntry = ([u8; 16], std::ops::Range<usize>);

/// An OVMF image with its GUIDed table and SEV metadata parsed.
#[derive(Debug, Clone)]
pub struct Ovmf {
    data: Vec<u8>,
    table: Vec<TableEntry>,
    sections: Vec<SevSection>,
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Writes into `img` what [`Ovmf::parse`] reads: the SEV metadata block (`ASEV`, version 1) at `meta_at` with
/// `sections` as `(gpa, size, kind code)`, and the GUIDed table that ends 32 bytes before the image's end: the SEV
/// metadata entry (pointing at `meta_at`) followed by `entries`, laid out backwards up to the footer. The
/// inverse of the parser, for an identity entry's stand-in image (crate::identity) and for the tests' synthetic
/// builds. `None` when it does not fit in `img` (or overlaps the metadata).
pub fn write_ovmf_tables(
    img: &mut [u8],
    meta_at: usize,
    sections: &[(u32, u32, u32)],
    entries: &[([u8; 16], Vec<u8>)],
) -> Option<()> {
    let len = img.len();
    let size = 16 + 12 * sections.len();
    let meta_end = meta_at.checked_add(size)?;
    let meta = img.get_mut(meta_at..meta_end)?;
    meta[0..4].copy_from_slice(b"ASEV");
    meta[4..8].copy_from_slice(&u32::try_from(size).ok()?.to_le_bytes());
    meta[8..12].copy_from_slice(&1u32.to_le_bytes());
    meta[12..16].copy_from_slice(&u32::try_from(sections.len()).ok()?.to_le_bytes());
    for (i, (gpa, sz, kind)) in sections.iter().enumerate() {
        let at = 16 + 12 * i;
        meta[at..at + 4].copy_from_slice(&gpa.to_le_bytes());
        meta[at + 4..at + 8].copy_from_slice(&sz.to_le_bytes());
        meta[at + 8..at + 12].copy_from_slice(&kind.to_le_bytes());
    }
    let from_end = u32::try_from(len.checked_sub(meta_at)?).ok()?;
    let metadata_entry = (OVMF_SEV_METADATA_GUID, from_end.to_le_bytes().to_vec());
    let mut table = Vec::new();
    for (guid, data) in std::iter::once(&metadata_entry).chain(entries).rev() {
        table.extend_from_slice(data);
        table.extend_from_slice(&u16::try_from(data.len() + 18).ok()?.to_le_bytes());
        table.extend_from_slice(guid);
    }
    let footer_at = len.checked_sub(32 + 18)?;
    let start = footer_at.checked_sub(table.len())?;
    if start < meta_end {
        return None;
    }
    img[start..footer_at].copy_from_slice(&table);
    img[footer_at..footer_at + 2]
        .copy_from_slice(&u16::try_from(table.len() + 18).ok()?.to_le_bytes());
    img[footer_at + 2..footer_at + 18].copy_from_slice(&OVMF_TABLE_FOOTER_GUID);
    Some(())
}

impl Ovmf {
    /// Parses an image: the GUIDed table that ends 32 bytes before its end, and the SEV metadata it points to.
    /// An image without the table is accepted (the OVMF-hash mode needs none); lookups then fail by name.
    pub fn parse(data: Vec<u8>) -> Result<Self, OvmfError> {
        if data.len() % PAGE != 0 {
            return Err(OvmfError::NotPageAligned(data.len()));
        }
        if data.len() as u64 > FOUR_GIB {
            return Err(OvmfError::TooLarge(data.len()));
        }
        let table = parse_guid_table(&data)?;
        let mut ovmf = Ovmf {
            data,
            table,
            sections: Vec::new(),
        };
        ovmf.sections = ovmf.parse_sev_metadata()?;
        Ok(ovmf)
    }

    /// The image bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The guest physical address the image is mapped at (it ends at 4 GiB).
    pub fn gpa(&self) -> u64 {
        FOUR_GIB - self.data.len() as u64
    }

    /// The sections of the SEV metadata, in file order.
    pub fn sections(&self) -> &[SevSection] {
        &self.sections
    }

    /// The data of the GUIDed-table entry with this GUID (on-disk byte order), if present.
    pub fn table_entry(&self, guid: &[u8; 16]) -> Option<&[u8]> {
        self.table
            .iter()
            .find(|(g, _)| g == guid)
            .and_then(|(_, r)| self.data.get(r.clone()))
    }

    /// The SEV-ES AP reset vector from the SEV-ES reset block.
    pub fn sev_es_reset_eip(&self) -> Result<u32, OvmfError> {
        let e = self
            .table_entry(&SEV_ES_RESET_BLOCK_GUID)
            .ok_or(OvmfError::MissingEntry("SEV_ES_RESET_BLOCK"))?;
        le_u32(e, 0).ok_or_else(|| {
            OvmfError::GuidTable("SEV_ES_RESET_BLOCK entry shorter than 4 bytes".into())
        })
    }

    /// The SEV hashes table's base GPA and size, from the SEV_HASH_TABLE_RV entry.
    pub fn sev_hashes_table(&self) -> Result<(u32, u32), OvmfError> {
        let e = self
            .table_entry(&SEV_HASH_TABLE_RV_GUID)
            .ok_or(OvmfError::MissingEntry("SEV_HASH_TABLE_RV"))?;
        match (le_u32(e, 0), le_u32(e, 4)) {
            (Some(base), Some(size)) => Ok((base, size)),
            (Some(base), None) => Ok((base, 0)),
            _ => Err(OvmfError::GuidTable(
                "SEV_HASH_TABLE_RV entry shorter than 4 bytes".into(),
            )),
        }
    }

    /// Whether the SEV metadata lists a section of this kind.
    pub fn has_section(&self, kind: SectionKind) -> bool {
        self.sections.iter().any(|s| s.kind == kind)
    }

    /// Why this firmware cannot measure a kernel, or `Ok` if it can (the page offset of the hashes table).
    pub fn kernel_hashes_offset(&self) -> Result<usize, OvmfError> {
        let (base, _size) = match self.sev_hashes_table() {
            Ok(v) => v,
            Err(OvmfError::MissingEntry(_)) => {
                return Err(OvmfError::CannotMeasureKernel(
                    "GUID table has no SEV hashes table entry".into(),
                ))
            }
            Err(e) => return Err(e),
        };
        if base == 0 {
            return Err(OvmfError::CannotMeasureKernel(
                "SEV hashes table has base 0".into(),
            ));
        }
        let Some(section) = self
            .sections
            .iter()
            .find(|s| s.kind == SectionKind::SnpKernelHashes)
        else {
            return Err(OvmfError::CannotMeasureKernel(
                "SEV metadata has no SNP_KERNEL_HASHES section".into(),
            ));
        };
        if section.size as usize != PAGE {
            return Err(OvmfError::CannotMeasureKernel(format!(
                "SNP_KERNEL_HASHES section is {:#x} bytes, not one page",
                section.size
            )));
        }
        let offset = (base as usize) & (PAGE - 1);
        if offset + HASHES_TABLE_LEN > PAGE {
            return Err(OvmfError::CannotMeasureKernel(format!(
                "SEV hashes table at {base:#x} would cross its page"
            )));
        }
        Ok(offset)
    }

    fn parse_sev_metadata(&self) -> Result<Vec<SevSection>, OvmfError> {
        let Some(entry) = self.table_entry(&OVMF_SEV_METADATA_GUID) else {
            return Ok(Vec::new());
        };
        let bad = |m: String| OvmfError::SevMetadata(m);
        let from_end = le_u32(entry, 0)
            .ok_or_else(|| bad("pointer entry shorter than 4 bytes".into()))?
            as usize;
        let start = self.data.len().checked_sub(from_end).ok_or_else(|| {
            bad(format!(
                "offset {from_end:#x} from the end lies before the image"
            ))
        })?;
        let hdr = self
            .data
            .get(start..start + 16)
            .ok_or_else(|| bad(format!("header at {start:#x} runs past the end")))?;
        if &hdr[0..4] != b"ASEV" {
            return Err(bad(format!("signature at {start:#x} is not \"ASEV\"")));
        }
        let size = le_u32(hdr, 4).unwrap_or(0) as usize;
        let version = le_u32(hdr, 8).unwrap_or(0);
        let count = le_u32(hdr, 12).unwrap_or(0) as usize;
        if version != 1 {
            return Err(bad(format!("version {version}, expected 1")));
        }
        let items = self
            .data
            .get(start + 16..start.saturating_add(size))
            .ok_or_else(|| {
                bad(format!(
                    "size {size:#x} runs past the image or is below the header"
                ))
            })?;
        let mut out = Vec::with_capacity(count.min(64));
        for index in 0..count {
            let at = index * 12;
            let (Some(gpa), Some(sz), Some(kind)) = (
                le_u32(items, at),
                le_u32(items, at + 4),
                le_u32(items, at + 8),
            ) else {
                return Err(bad(format!(
                    "{count} sections do not fit in {size:#x} bytes"
                )));
            };
            let kind =
                SectionKind::from_u32(kind).ok_or(OvmfError::UnknownSection { index, kind })?;
            if sz as usize % PAGE != 0 {
                return Err(bad(format!(
                    "section {index} ({}) size {sz:#x} is not whole pages",
                    kind.name()
                )));
            }
            out.push(SevSection {
                gpa,
                size: sz,
                kind,
            });
        }
        Ok(out)
    }
}

/// Parses the GUIDed table: entries (data, u16 size, GUID) laid out backwards from the footer.
fn parse_guid_table(data: &[u8]) -> Result<Vec<TableEntry>, OvmfError> {
    let Some(footer_at) = data.len().checked_sub(32 + FOOTER_ENTRY_LEN) else {
        return Ok(Vec::new());
    };
    let footer = &data[footer_at..footer_at + FOOTER_ENTRY_LEN];
    if footer[2..18] != OVMF_TABLE_FOOTER_GUID {
        return Ok(Vec::new());
    }
    let footer_size = le_u16(footer, 0).unwrap_or(0) as usize;
    let Some(table_len) = footer_size.checked_sub(FOOTER_ENTRY_LEN) else {
        return Ok(Vec::new());
    };
    let table_start = footer_at.checked_sub(table_len).ok_or_else(|| {
        OvmfError::GuidTable(format!(
            "footer size {footer_size} runs before the image start"
        ))
    })?;
    let mut end = footer_at;
    let mut out = Vec::new();
    while end - table_start >= FOOTER_ENTRY_LEN {
        let hdr = &data[end - FOOTER_ENTRY_LEN..end];
        let size = le_u16(hdr, 0).unwrap_or(0) as usize;
        let mut guid = [0u8; 16];
        guid.copy_from_slice(&hdr[2..18]);
        if size < FOOTER_ENTRY_LEN {
            return Err(OvmfError::GuidTable(format!(
                "entry at {:#x} has size {size} < 18",
                end - FOOTER_ENTRY_LEN
            )));
        }
        if size > end - table_start {
            return Err(OvmfError::GuidTable(format!(
                "entry at {:#x} has size {size}, more than the {} bytes left in the table",
                end - FOOTER_ENTRY_LEN,
                end - table_start
            )));
        }
        out.push((guid, end - size..end - FOOTER_ENTRY_LEN));
        end -= size;
    }
    Ok(out)
}

/// The VMM that launches the guest: each sets up the VMSAs and the metadata pages its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum VmmType {
    /// QEMU/KVM.
    #[default]
    Qemu,
    /// Amazon EC2.
    Ec2,
    /// Google Compute Engine.
    Gce,
}

/// A VMM type name that is not QEMU, ec2 or gce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown VMM type {name:?} (expected QEMU, ec2 or gce)")]
pub struct UnknownVmmType {
    /// The name given.
    pub name: String,
}

impl FromStr for VmmType {
    type Err = UnknownVmmType;
    fn from_str(s: &str) -> Result<Self, UnknownVmmType> {
        match s.to_ascii_lowercase().as_str() {
            "qemu" => Ok(Self::Qemu),
            "ec2" => Ok(Self::Ec2),
            "gce" => Ok(Self::Gce),
            _ => Err(UnknownVmmType { name: s.to_owned() }),
        }
    }
}

impl fmt::Display for VmmType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Qemu => "QEMU",
            Self::Ec2 => "ec2",
            Self::Gce => "gce",
        })
    }
}

/// The CPUID Fn0000_0001_EAX signature for a family, model and stepping (AMD publication 25481).
pub fn vcpu_sig(family: u32, model: u32, stepping: u32) -> u32 {
    let (family_low, family_high) = if family > 0xf {
        (0xf, (family - 0xf) & 0xff)
    } else {
        (family, 0)
    };
    (family_high << 20)
        | (((model >> 4) & 0xf) << 16)
        | (family_low << 8)
        | ((model & 0xf) << 4)
        | (stepping & 0xf)
}

/// QEMU's EPYC CPU models (lower case) and the family, model and stepping each reports: the table of the `sev`
/// crate's `CpuType` (a unit test holds the two equal), kept here so that a verifier checking measurement sets
/// does not link the `sev` crate.
const VCPU_TYPES: [(&str, (u32, u32, u32)); 18] = [
    ("epyc", (23, 1, 2)),
    ("epyc-v1", (23, 1, 2)),
    ("epyc-v2", (23, 1, 2)),
    ("epyc-ibpb", (23, 1, 2)),
    ("epyc-v3", (23, 1, 2)),
    ("epyc-v4", (23, 1, 2)),
    ("epyc-rome", (23, 49, 0)),
    ("epyc-rome-v1", (23, 49, 0)),
    ("epyc-rome-v2", (23, 49, 0)),
    ("epyc-rome-v3", (23, 49, 0)),
    ("epyc-milan", (25, 1, 1)),
    ("epyc-milan-v1", (25, 1, 1)),
    ("epyc-milan-v2", (25, 1, 1)),
    ("epyc-genoa", (25, 17, 0)),
    ("epyc-genoa-v1", (25, 17, 0)),
    ("epyc-turin", (26, 0, 0)),
    ("epyc-turin-v1", (26, 0, 0)),
    ("epyc-turin-v2", (26, 0, 0)),
];

/// The signature of a QEMU CPU model name such as `EPYC-v4`, `EPYC-Milan` or `EPYC-Genoa` (any case; QEMU's EPYC
/// models as the `sev` crate lists them).
pub fn vcpu_sig_for_type(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    VCPU_TYPES
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, (f, m, s))| vcpu_sig(*f, *m, *s))
}

/// The three SHA-256 hashes QEMU writes into the SEV hashes table for a direct kernel boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelHashes {
    /// SHA-256 of the command line with its terminating NUL.
    pub cmdline: [u8; 32],
    /// SHA-256 of the initrd (of no bytes without one).
    pub initrd: [u8; 32],
    /// SHA-256 of the kernel image.
    pub kernel: [u8; 32],
}

const HASHES_TABLE_LEN: usize = 176;

impl KernelHashes {
    /// Hashes the artifacts as QEMU does: the command line exactly as given (no trimming) plus a NUL.
    pub fn new(kernel: &[u8], initrd: Option<&[u8]>, append: Option<&str>) -> Self {
        let mut c = Sha256::new();
        c.update(append.unwrap_or("").as_bytes());
        c.update([0u8]);
        KernelHashes {
            cmdline: c.finalize().into(),
            initrd: Sha256::digest(initrd.unwrap_or(&[])).into(),
            kernel: Sha256::digest(kernel).into(),
        }
    }

    /// The padded SEV hashes table (176 bytes): header GUID and length, then cmdline, initrd and kernel entries.
    pub fn table(&self) -> [u8; HASHES_TABLE_LEN] {
        let mut t = [0u8; HASHES_TABLE_LEN];
        t[0..16].copy_from_slice(&SEV_HASH_TABLE_HEADER_GUID);
        t[16..18].copy_from_slice(&168u16.to_le_bytes());
        for (i, (guid, hash)) in [
            (SEV_CMDLINE_ENTRY_GUID, self.cmdline),
            (SEV_INITRD_ENTRY_GUID, self.initrd),
            (SEV_KERNEL_ENTRY_GUID, self.kernel),
        ]
        .into_iter()
        .enumerate()
        {
            let at = 18 + i * 50;
            t[at..at + 16].copy_from_slice(&guid);
            t[at + 16..at + 18].copy_from_slice(&50u16.to_le_bytes());
            t[at + 18..at + 50].copy_from_slice(&hash);
        }
        t
    }

    /// A zeroed page with the table at `offset`; `None` if it would not fit.
    pub fn page(&self, offset: usize) -> Option<Vec<u8>> {
        if offset + HASHES_TABLE_LEN > PAGE {
            return None;
        }
        let mut p = vec![0u8; PAGE];
        p[offset..offset + HASHES_TABLE_LEN].copy_from_slice(&self.table());
        Some(p)
    }
}

/// The guest parameters that enter the digest besides the artifacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnpConfig {
    /// Number of vCPUs (one VMSA each).
    pub vcpus: u32,
    /// CPUID signature of the vCPU, placed in RDX of each VMSA (QEMU only).
    pub vcpu_sig: u32,
    /// SEV_FEATURES of the VMSAs (bit 0 SNPActive must be set for SNP).
    pub guest_features: u64,
    /// The VMM.
    pub vmm: VmmType,
    /// A precomputed OVMF hash (see [`ovmf_hash`]) to start from instead of hashing the image.
    pub ovmf_hash: Option<LaunchDigest>,
}

/// The running launch digest (the GCTX.LD of the SNP firmware ABI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gctx {
    ld: LaunchDigest,
}

/// SNP page types of PAGE_INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum PageType {
    Normal = 1,
    Vmsa = 2,
    Zero = 3,
    Unmeasured = 4,
    Secrets = 5,
    Cpuid = 6,
}

impl Default for Gctx {
    fn default() -> Self {
        Self::new([0; LD_LEN])
    }
}

impl Gctx {
    /// Starts from a given digest (zeros for a fresh launch, or an OVMF hash).
    pub fn new(seed: LaunchDigest) -> Self {
        Gctx { ld: seed }
    }

    /// The digest so far.
    pub fn ld(&self) -> LaunchDigest {
        self.ld
    }

    /// LD = SHA-384(PAGE_INFO) with PAGE_INFO = LD || contents || length 0x70 || type || IMI 0 || perms 0 || GPA.
    fn update(&mut self, kind: PageType, gpa: u64, contents: &[u8; LD_LEN]) {
        let mut info = [0u8; 0x70];
        info[0..48].copy_from_slice(&self.ld);
        info[48..96].copy_from_slice(contents);
        info[96..98].copy_from_slice(&0x70u16.to_le_bytes());
        info[98] = kind as u8;
        info[104..112].copy_from_slice(&gpa.to_le_bytes());
        self.ld = Sha384::digest(info).into();
    }

    /// Measures whole pages of data starting at `gpa` (the caller guarantees page-multiple length). The pages'
    /// SHA-384s are independent of the chain, so a large image has them computed on two threads first.
    pub(crate) fn normal_pages(&mut self, gpa: u64, data: &[u8]) {
        for (i, h) in page_hashes(data).iter().enumerate() {
            self.update(PageType::Normal, gpa + (i * PAGE) as u64, h);
        }
    }

    pub(crate) fn empty_pages(&mut self, kind: PageType, gpa: u64, size: u32) {
        for i in 0..(size as u64 / PAGE as u64) {
            self.update(kind, gpa + i * PAGE as u64, &[0; LD_LEN]);
        }
    }

    /// Measures one VMSA page (page type VMSA at the GPA the PSP records for it).
    pub fn update_vmsa(&mut self, page: &[u8; PAGE]) {
        self.update_vmsa_hash(&Sha384::digest(page).into());
    }

    /// Measures one VMSA page given its SHA-384 (the explainer hashes each distinct VMSA once).
    pub fn update_vmsa_hash(&mut self, page_sha384: &[u8; LD_LEN]) {
        self.update(PageType::Vmsa, VMSA_GPA, page_sha384);
    }

    fn vmsa(&mut self, page: &[u8; PAGE]) {
        self.update_vmsa(page);
    }
}

/// Below this many bytes the pages are hashed on the calling thread (a thread costs more than it saves).
const PARALLEL_MIN: usize = 256 * PAGE;

/// The SHA-384 of every 4 KiB page of `data` (whole pages only), on up to two threads for large inputs. A page
/// of one repeated byte is hashed once per byte value: firmware volumes are mostly 0xFF padding (804 of the 1024
/// pages of the AmdSev OVMF), so this skips most of the work.
pub(crate) fn page_hashes(data: &[u8]) -> Vec<[u8; LD_LEN]> {
    let hash_all = |d: &[u8]| -> Vec<[u8; LD_LEN]> {
        let mut uniform: [Option<[u8; LD_LEN]>; 256] = [None; 256];
        d.chunks_exact(PAGE)
            .map(|p| {
                let first = p[0];
                // Every byte equals the next one: one memcmp, far faster than a byte loop.
                if p[1..] == p[..PAGE - 1] {
                    *uniform[usize::from(first)].get_or_insert_with(|| Sha384::digest(p).into())
                } else {
                    Sha384::digest(p).into()
                }
            })
            .collect()
    };
    let pages = data.len() / PAGE;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    if data.len() < PARALLEL_MIN || threads < 2 {
        return hash_all(data);
    }
    let split = (pages / 2) * PAGE;
    let (a, b) = data.split_at(split);
    std::thread::scope(|s| {
        let second = s.spawn(|| hash_all(b));
        let mut out = hash_all(a);
        match second.join() {
            Ok(rest) => out.extend(rest),
            // The closure cannot panic short of an allocation failure; redo the half here rather than unwind.
            Err(_) => out.extend(hash_all(b)),
        }
        out
    })
}

/// The "OVMF hash": the digest after the OVMF image alone, which `--snp-ovmf-hash` starts from.
pub fn ovmf_hash(ovmf: &Ovmf) -> LaunchDigest {
    let mut g = Gctx::default();
    g.normal_pages(ovmf.gpa(), ovmf.data());
    g.ld()
}

fn put(page: &mut [u8; PAGE], at: usize, bytes: &[u8]) {
    page[at..at + bytes.len()].copy_from_slice(bytes);
}

fn put_seg(page: &mut [u8; PAGE], at: usize, selector: u16, attrib: u16, limit: u32, base: u64) {
    put(page, at, &selector.to_le_bytes());
    put(page, at + 2, &attrib.to_le_bytes());
    put(page, at + 4, &limit.to_le_bytes());
    put(page, at + 8, &base.to_le_bytes());
}

/// The initial VMSA (SEV-ES save area, AMD APM vol. 2 table B-4) of a vCPU starting at `eip`.
pub fn vmsa_page(eip: u64, cfg: &SnpConfig) -> Box<[u8; PAGE]> {
    let mut p = Box::new([0u8; PAGE]);
    let mut g_pat: u64 = 0x0007_0406_0007_0406;
    let (cs, ss, tr, rdx, mxcsr, fcw): (u16, u16, u16, u64, u32, u16) = match cfg.vmm {
        VmmType::Qemu => (0x9b, 0x93, 0x8b, u64::from(cfg.vcpu_sig), 0x1f80, 0x37f),
        VmmType::Ec2 => (
            if eip == BSP_EIP { 0x9a } else { 0x9b },
            0x92,
            0x83,
            0x600,
            0,
            0,
        ),
        VmmType::Gce => {
            g_pat = 0x0007_0106;
            (0x9b, 0x93, 0x8b, 0x600, 0, 0)
        }
    };
    put_seg(&mut p, 0x00, 0, 0x93, 0xffff, 0); // es
    put_seg(&mut p, 0x10, 0xf000, cs, 0xffff, eip & 0xffff_0000); // cs
    put_seg(&mut p, 0x20, 0, ss, 0xffff, 0); // ss
    put_seg(&mut p, 0x30, 0, 0x93, 0xffff, 0); // ds
    put_seg(&mut p, 0x40, 0, 0x93, 0xffff, 0); // fs
    put_seg(&mut p, 0x50, 0, 0x93, 0xffff, 0); // gs
    put_seg(&mut p, 0x60, 0, 0, 0xffff, 0); // gdtr
    put_seg(&mut p, 0x70, 0, 0x82, 0xffff, 0); // ldtr
    put_seg(&mut p, 0x80, 0, 0, 0xffff, 0); // idtr
    put_seg(&mut p, 0x90, 0, tr, 0xffff, 0); // tr
    put(&mut p, 0xd0, &0x1000u64.to_le_bytes()); // efer (SVME)
    put(&mut p, 0x148, &0x40u64.to_le_bytes()); // cr4 (MCE)
    put(&mut p, 0x158, &0x10u64.to_le_bytes()); // cr0
    put(&mut p, 0x160, &0x400u64.to_le_bytes()); // dr7
    put(&mut p, 0x168, &0xffff_0ff0u64.to_le_bytes()); // dr6
    put(&mut p, 0x170, &0x2u64.to_le_bytes()); // rflags
    put(&mut p, 0x178, &(eip & 0xffff).to_le_bytes()); // rip
    put(&mut p, 0x268, &g_pat.to_le_bytes()); // g_pat
    put(&mut p, 0x310, &rdx.to_le_bytes()); // rdx
    put(&mut p, 0x3b0, &cfg.guest_features.to_le_bytes()); // sev_features
    put(&mut p, 0x3e8, &1u64.to_le_bytes()); // xcr0
    put(&mut p, 0x408, &mxcsr.to_le_bytes()); // mxcsr
    put(&mut p, 0x410, &fcw.to_le_bytes()); // x87 fcw
    p
}

/// The launch digest of an SNP guest: OVMF (or its precomputed hash), the SEV metadata sections in file order
/// (for EC2 the CPUID page last), then one VMSA per vCPU.
pub fn launch_digest(
    ovmf: &Ovmf,
    hashes: Option<&KernelHashes>,
    cfg: &SnpConfig,
) -> Result<LaunchDigest, OvmfError> {
    let kernel_page = kernel_page(ovmf, hashes)?;
    let ap_eip = u64::from(ovmf.sev_es_reset_eip()?);
    if cfg.vcpus > 1 && ap_eip == 0 {
        return Err(OvmfError::NoApResetVector(cfg.vcpus));
    }
    let mut g = match cfg.ovmf_hash {
        Some(seed) => Gctx::new(seed),
        None => Gctx::new(ovmf_hash(ovmf)),
    };
    measure_sections(&mut g, ovmf, kernel_page.as_deref(), cfg.vmm);
    let bsp = vmsa_page(BSP_EIP, cfg);
    let ap = vmsa_page(ap_eip, cfg);
    for i in 0..cfg.vcpus {
        g.vmsa(if i == 0 { &bsp } else { &ap });
    }
    Ok(g.ld())
}

/// Folds the SEV metadata sections of `ovmf` into `g` in file order (for EC2 the CPUID pages last); the
/// SNP_KERNEL_HASHES section is `kernel_page` when given, else zero pages.
pub(crate) fn measure_sections(
    g: &mut Gctx,
    ovmf: &Ovmf,
    kernel_page: Option<&[u8]>,
    vmm: VmmType,
) {
    for s in ovmf.sections() {
        let gpa = u64::from(s.gpa);
        match s.kind {
            SectionKind::SnpSecMem if vmm == VmmType::Gce => {
                g.empty_pages(PageType::Unmeasured, gpa, s.size)
            }
            SectionKind::SnpSecMem | SectionKind::SvsmCaa => {
                g.empty_pages(PageType::Zero, gpa, s.size)
            }
            SectionKind::SnpSecrets => g.update(PageType::Secrets, gpa, &[0; LD_LEN]),
            SectionKind::Cpuid if vmm != VmmType::Ec2 => {
                g.update(PageType::Cpuid, gpa, &[0; LD_LEN])
            }
            SectionKind::Cpuid => {}
            SectionKind::SnpKernelHashes => match kernel_page {
                Some(page) => g.normal_pages(gpa, page),
                None => g.empty_pages(PageType::Zero, gpa, s.size),
            },
        }
    }
    if vmm == VmmType::Ec2 {
        for s in ovmf
            .sections()
            .iter()
            .filter(|s| s.kind == SectionKind::Cpuid)
        {
            g.update(PageType::Cpuid, u64::from(s.gpa), &[0; LD_LEN]);
        }
    }
}

/// The launch digest state after the OVMF image (or `cfg.ovmf_hash`) and the metadata sections, before any VMSA:
/// the part every vCPU count and type shares. [`launch_digest`] is this followed by one VMSA per vCPU.
pub fn launch_prefix(
    ovmf: &Ovmf,
    ovmf_digest: &LaunchDigest,
    hashes: Option<&KernelHashes>,
    vmm: VmmType,
) -> Result<Gctx, OvmfError> {
    let kernel_page = kernel_page(ovmf, hashes)?;
    let mut g = Gctx::new(*ovmf_digest);
    measure_sections(&mut g, ovmf, kernel_page.as_deref(), vmm);
    Ok(g)
}

fn kernel_page(ovmf: &Ovmf, hashes: Option<&KernelHashes>) -> Result<Option<Vec<u8>>, OvmfError> {
    match hashes {
        Some(h) => {
            let offset = ovmf.kernel_hashes_offset()?;
            Ok(Some(h.page(offset).ok_or_else(|| {
                OvmfError::CannotMeasureKernel("hashes table offset".into())
            })?))
        }
        None => Ok(None),
    }
}

/// The reset vector of the bootstrap processor (the BSP's VMSA starts there).
pub const BSP_RESET_EIP: u64 = BSP_EIP;

/// Why a measurement from files failed; every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnpError {
    /// A file could not be read.
    #[error("{what} {path}: {source}")]
    Read {
        /// Which input (OVMF, kernel, initrd).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The OVMF image is unusable for what was asked.
    #[error("OVMF {path}: {source}")]
    Ovmf {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: OvmfError,
    },
}

/// Paths of the artifacts of a direct kernel boot.
#[derive(Debug, Clone, Default)]
pub struct SnpInputs {
    /// The OVMF image.
    pub ovmf: PathBuf,
    /// The kernel, for `-kernel` boots.
    pub kernel: Option<PathBuf>,
    /// The initrd.
    pub initrd: Option<PathBuf>,
    /// The kernel command line.
    pub append: Option<String>,
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, SnpError> {
    std::fs::read(path).map_err(|source| SnpError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// Reads and parses an OVMF file.
pub fn load_ovmf(path: &Path) -> Result<Ovmf, SnpError> {
    Ovmf::parse(read("OVMF", path)?).map_err(|source| SnpError::Ovmf {
        path: path.to_owned(),
        source,
    })
}

/// SHA-256 of a file, read in 64 KiB pieces into one buffer (a kernel or initrd is never held whole).
fn sha256_file(what: &'static str, path: &Path) -> Result<[u8; 32], SnpError> {
    use std::io::Read;
    let err = |source| SnpError::Read {
        what,
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut h = Sha256::new();
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(h.finalize().into())
}

/// Hashes the kernel, initrd and command line files of `inputs` (`None` without a kernel); the kernel and the
/// initrd are hashed on two threads, each streamed from its file.
pub fn load_kernel_hashes(inputs: &SnpInputs) -> Result<Option<KernelHashes>, SnpError> {
    let Some(kpath) = &inputs.kernel else {
        return Ok(None);
    };
    let (kernel, initrd) = std::thread::scope(|s| {
        let initrd = inputs
            .initrd
            .as_deref()
            .map(|p| s.spawn(move || sha256_file("initrd", p)));
        let kernel = sha256_file("kernel", kpath);
        let initrd = match (initrd, inputs.initrd.as_deref()) {
            (Some(t), Some(p)) => Some(t.join().unwrap_or_else(|_| sha256_file("initrd", p))),
            _ => None,
        };
        (kernel, initrd)
    });
    let kernel = kernel?;
    let initrd = match initrd {
        Some(r) => r?,
        None => Sha256::digest([]).into(),
    };
    Ok(Some(KernelHashes {
        cmdline: crate::sim::cmdline_sha256(inputs.append.as_deref().unwrap_or("")),
        initrd,
        kernel,
    }))
}

/// Reads the artifacts and computes the launch digest; errors name the file and what is wrong with it.
pub fn measure_files(inputs: &SnpInputs, cfg: &SnpConfig) -> Result<LaunchDigest, SnpError> {
    let ovmf = load_ovmf(&inputs.ovmf)?;
    let hashes = load_kernel_hashes(inputs)?;
    launch_digest(&ovmf, hashes.as_ref(), cfg).map_err(|source| SnpError::Ovmf {
        path: inputs.ovmf.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    /// The vCPU table is the `sev` crate's, name for name and signature for signature (and case-insensitive as
    /// its parser is); a name it does not know is `None` here too.
    #[test]
    fn vcpu_types_match_the_sev_crate() {
        use sev::measurement::vcpu_types::CpuType;
        for (name, _) in super::VCPU_TYPES {
            let t = CpuType::try_from(name).expect("sev knows the name");
            assert_eq!(t.to_string().to_ascii_lowercase(), name);
            let want = u32::try_from(t.sig()).ok();
            assert_eq!(super::vcpu_sig_for_type(name), want, "{name}");
            assert_eq!(super::vcpu_sig_for_type(&t.to_string()), want, "{t}");
        }
        for n in 0u8..=255 {
            if let Ok(t) = CpuType::try_from(n) {
                assert!(super::vcpu_sig_for_type(&t.to_string()).is_some(), "{t}");
            }
        }
        assert_eq!(super::vcpu_sig_for_type("EPYC-Zen9"), None);
        assert!(CpuType::try_from("EPYC-Zen9").is_err());
    }

    use super::*;

    /// Builds a tiny OVMF-like image: `pages` pages, a GUIDed table with the given entries and SEV metadata.
    pub(crate) fn synthetic(
        pages: usize,
        sections: &[(u32, u32, u32)],
        hashes_base: u32,
    ) -> Vec<u8> {
        let mut img = vec![0xA5u8; pages * PAGE];
        let mut ht = hashes_base.to_le_bytes().to_vec();
        ht.extend_from_slice(&0x400u32.to_le_bytes());
        let entries = [
            (SEV_ES_RESET_BLOCK_GUID, 0x80b004u32.to_le_bytes().to_vec()),
            (SEV_HASH_TABLE_RV_GUID, ht),
        ];
        // SEV metadata at 0x100 in the first page.
        write_ovmf_tables(&mut img, 0x100, sections, &entries).expect("fits");
        img
    }

    fn cfg(vcpus: u32) -> SnpConfig {
        SnpConfig {
            vcpus,
            vcpu_sig: vcpu_sig(25, 1, 1),
            guest_features: 1,
            vmm: VmmType::Qemu,
            ovmf_hash: None,
        }
    }

    #[test]
    fn guid_constant_matches_textual_form() {
        // 96b582de-1fb2-45f7-baea-a366c55a082d stored little-endian in the first three fields.
        assert_eq!(OVMF_TABLE_FOOTER_GUID[..4], [0xde, 0x82, 0xb5, 0x96]);
        assert_eq!(OVMF_TABLE_FOOTER_GUID[4..6], [0xb2, 0x1f]);
        assert_eq!(
            OVMF_TABLE_FOOTER_GUID[8..],
            [0xba, 0xea, 0xa3, 0x66, 0xc5, 0x5a, 0x08, 0x2d]
        );
    }

    #[test]
    fn cpu_signatures_match_amd_encoding() {
        assert_eq!(vcpu_sig(25, 1, 1), 0x00a00f11); // Milan
        assert_eq!(vcpu_sig(25, 17, 0), 0x00a10f10); // Genoa
        assert_eq!(vcpu_sig(23, 1, 2), 0x00800f12); // EPYC
        assert_eq!(vcpu_sig_for_type("EPYC-Genoa"), Some(0x00a10f10));
        assert_eq!(vcpu_sig_for_type("EPYC-v4"), Some(0x00800f12));
        assert_eq!(vcpu_sig_for_type("Pentium"), None);
    }

    #[test]
    fn parses_synthetic_metadata_in_file_order() {
        let img = synthetic(
            4,
            &[
                (0x800000, 0x2000, 1),
                (0x810000, 0x1000, 0x10),
                (0x80d000, 0x1000, 2),
            ],
            0x810c00,
        );
        let o = Ovmf::parse(img).expect("parse");
        let kinds: Vec<_> = o.sections().iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [
                SectionKind::SnpSecMem,
                SectionKind::SnpKernelHashes,
                SectionKind::SnpSecrets
            ]
        );
        assert_eq!(o.sev_es_reset_eip(), Ok(0x80b004));
        assert_eq!(o.sev_hashes_table(), Ok((0x810c00, 0x400)));
        assert_eq!(o.kernel_hashes_offset(), Ok(0xc00));
        assert_eq!(o.gpa(), FOUR_GIB - 4 * 4096);
    }

    #[test]
    fn base_zero_hashes_table_refuses_kernel() {
        let img = synthetic(2, &[(0x800000, 0x1000, 1)], 0);
        let o = Ovmf::parse(img).expect("parse");
        let h = KernelHashes::new(b"k", None, None);
        let e = launch_digest(&o, Some(&h), &cfg(1)).expect_err("must refuse");
        assert_eq!(
            e.to_string(),
            "SEV hashes table has base 0, it cannot measure a kernel"
        );
        // Without a kernel the same firmware measures fine.
        assert!(launch_digest(&o, None, &cfg(1)).is_ok());
    }

    #[test]
    fn digest_changes_with_every_input() {
        let img = synthetic(
            4,
            &[
                (0x800000, 0x2000, 1),
                (0x810000, 0x1000, 0x10),
                (0x80d000, 0x1000, 2),
            ],
            0x810c00,
        );
        let o = Ovmf::parse(img).expect("parse");
        let h = KernelHashes::new(b"kernel", Some(b"initrd"), Some("console=ttyS0"));
        let base = launch_digest(&o, Some(&h), &cfg(1)).expect("ld");
        let mut seen = vec![base];
        seen.push(launch_digest(&o, Some(&h), &cfg(2)).expect("ld"));
        seen.push(launch_digest(&o, None, &cfg(1)).expect("ld"));
        let h2 = KernelHashes::new(b"kernel", Some(b"initrd"), Some("console=ttyS0 "));
        seen.push(launch_digest(&o, Some(&h2), &cfg(1)).expect("ld"));
        seen.push(
            launch_digest(
                &o,
                Some(&h),
                &SnpConfig {
                    guest_features: 0x21,
                    ..cfg(1)
                },
            )
            .expect("ld"),
        );
        seen.push(
            launch_digest(
                &o,
                Some(&h),
                &SnpConfig {
                    vmm: VmmType::Gce,
                    ..cfg(1)
                },
            )
            .expect("ld"),
        );
        seen.push(
            launch_digest(
                &o,
                Some(&h),
                &SnpConfig {
                    vmm: VmmType::Ec2,
                    ..cfg(1)
                },
            )
            .expect("ld"),
        );
        let mut uniq = seen.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(
            uniq.len(),
            seen.len(),
            "two configurations gave the same digest"
        );
        // The OVMF-hash shortcut gives the same digest as hashing the image.
        let shortcut = SnpConfig {
            ovmf_hash: Some(ovmf_hash(&o)),
            ..cfg(1)
        };
        assert_eq!(launch_digest(&o, Some(&h), &shortcut).expect("ld"), base);
    }

    #[test]
    fn page_hashes_equal_plain_sha384_for_uniform_and_mixed_pages() {
        // Uniform pages of several byte values, mixed pages, on both sides of the two-thread split.
        let mut data = Vec::new();
        for i in 0..(PARALLEL_MIN / PAGE + 7) {
            let mut p = vec![[0xFFu8, 0, 0xFF, 7][i % 4]; PAGE];
            if i % 5 == 0 {
                p[i % PAGE] ^= 0x5a;
            }
            data.extend_from_slice(&p);
        }
        let want: Vec<[u8; LD_LEN]> = data
            .chunks_exact(PAGE)
            .map(|p| Sha384::digest(p).into())
            .collect();
        assert_eq!(page_hashes(&data), want);
        assert_eq!(page_hashes(&data[..3 * PAGE]), want[..3]);
    }

    #[test]
    fn gctx_update_is_sha384_of_page_info() {
        // Independent restatement of PAGE_INFO for one zero page at GPA 0x1000.
        let mut g = Gctx::default();
        g.update(PageType::Zero, 0x1000, &[0; 48]);
        let mut info = vec![0u8; 96];
        info.extend_from_slice(&[0x70, 0x00, 0x03, 0x00, 0, 0, 0, 0]);
        info.extend_from_slice(&0x1000u64.to_le_bytes());
        let want: [u8; 48] = Sha384::digest(&info).into();
        assert_eq!(g.ld(), want);
    }

    #[test]
    fn vmsa_matches_sev_crate_for_qemu() {
        use sev::measurement::vcpu_types::CpuType;
        use sev::measurement::vmsa::{GuestFeatures, VMMType, VMSA};
        // The sev crate builds QEMU VMSAs with default guest features 0x1; ours must be byte-identical.
        for t in [CpuType::EpycV4, CpuType::EpycMilan, CpuType::EpycGenoa] {
            let theirs = VMSA::new(
                0x80b004,
                t,
                VMMType::QEMU,
                Some(2),
                GuestFeatures::default(),
            )
            .pages(2)
            .expect("pages");
            let c = SnpConfig {
                vcpu_sig: u32::try_from(t.sig()).expect("sig"),
                ..cfg(2)
            };
            assert_eq!(
                &theirs[0][..],
                &vmsa_page(BSP_EIP, &c)[..],
                "BSP VMSA for {t}"
            );
            assert_eq!(
                &theirs[1][..],
                &vmsa_page(0x80b004, &c)[..],
                "AP VMSA for {t}"
            );
        }
    }

    #[test]
    fn hashes_table_matches_sev_crate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let k = dir.path().join("k");
        let i = dir.path().join("i");
        std::fs::write(&k, b"kernel bytes").expect("write");
        std::fs::write(&i, b"initrd bytes").expect("write");
        let theirs =
            sev::measurement::sev_hashes::SevHashes::new(k, Some(i), Some("root=/dev/vda"))
                .expect("hashes")
                .construct_page(0xc00)
                .expect("page");
        let ours = KernelHashes::new(
            b"kernel bytes",
            Some(b"initrd bytes"),
            Some("root=/dev/vda"),
        )
        .page(0xc00);
        assert_eq!(Some(theirs), ours);
    }

    #[test]
    fn truncated_or_garbage_images_do_not_panic() {
        let img = synthetic(2, &[(0x800000, 0x1000, 1)], 0x810c00);
        for cut in [0usize, 1, 17, 100, 4000] {
            let mut v = img.clone();
            let n = v.len();
            // Damage bytes near the end where the table lives.
            for b in &mut v[n - 32 - 18 - cut.min(200)..n - 32] {
                *b = b.wrapping_add(cut as u8 | 1);
            }
            let _ = Ovmf::parse(v).map(|o| launch_digest(&o, None, &cfg(2)));
        }
        assert!(matches!(
            Ovmf::parse(vec![0; 100]),
            Err(OvmfError::NotPageAligned(100))
        ));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_table_bytes_never_panic(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
                                             keep_footer in proptest::bool::ANY) {
            let mut img = synthetic(2, &[(0x800000, 0x1000, 1)], 0x810c00);
            let n = img.len();
            let end = if keep_footer { n - 50 } else { n };
            let start = end.saturating_sub(tail.len());
            img[start..end].copy_from_slice(&tail[..end - start]);
            if let Ok(o) = Ovmf::parse(img) {
                let h = KernelHashes::new(b"k", None, None);
                let _ = launch_digest(&o, Some(&h), &cfg(3));
            }
        }
    }
}
