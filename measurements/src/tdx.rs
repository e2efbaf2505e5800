//! Intel TDX expected measurements: the MRTD a TDVF/OVMF image measures to when the VMM adds its sections, and
//! the RTMR values replayed from a CCEL (TCG2 crypto-agile) event log, so that a verifier can compare both with
//! the quote and show which event produced which extension.

use std::fmt;

use attestation::wire::{Reader, WireError};
use sha2::{Digest, Sha384};

use crate::snp::{Ovmf, OvmfError, TDX_METADATA_GUID};

/// Length of a TDX measurement register (SHA-384).
pub const MR_LEN: usize = 48;
/// A TDX measurement register value.
pub type Mr = [u8; MR_LEN];

const PAGE: u64 = 4096;
const EXTEND_CHUNK: usize = 256;
/// GUID that precedes the TDVF metadata descriptor (E9EAF9F3-168E-44D5-A8EB-7F4D8738F6AE), on-disk order.
const TDVF_METADATA_GUID: [u8; 16] = [
    0xf3, 0xf9, 0xea, 0xe9, 0x8e, 0x16, 0xd5, 0x44, 0xa8, 0xeb, 0x7f, 0x4d, 0x87, 0x38, 0xf6, 0xae,
];
/// Section attribute: extend MRTD with the section's contents (TDH.MR.EXTEND).
pub const ATTR_MR_EXTEND: u32 = 1;
/// Section attribute: the pages are added later with TDH.MEM.PAGE.AUG and are not measured.
pub const ATTR_PAGE_AUG: u32 = 2;

/// What is wrong with a TDVF image's TDX metadata.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TdvfError {
    /// The image itself (GUIDed table, size) is unusable.
    #[error(transparent)]
    Image(#[from] OvmfError),
    /// The GUIDed table has no TDX metadata offset entry.
    #[error("GUID table has no TDX metadata entry (not a TDVF image)")]
    NoMetadata,
    /// The descriptor is cut short or inconsistent.
    #[error("TDX metadata: {0}")]
    Descriptor(String),
    /// A section breaks a rule of the TDVF specification.
    #[error("TDX metadata section {index}: {problem}")]
    Section {
        /// Position of the section in descriptor order.
        index: usize,
        /// What is wrong.
        problem: String,
    },
}

/// Section types of the TDVF metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TdvfSectionType {
    /// Boot firmware volume (code).
    Bfv,
    /// Configuration firmware volume (variables).
    Cfv,
    /// TD hand-off block.
    TdHob,
    /// Temporary memory.
    TempMem,
    /// Permanent memory.
    PermMem,
    /// Payload (kernel).
    Payload,
    /// Payload parameters.
    PayloadParam,
    /// TD_INFO.
    TdInfo,
    /// TD_PARAMS.
    TdParams,
}

impl TdvfSectionType {
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Bfv,
            1 => Self::Cfv,
            2 => Self::TdHob,
            3 => Self::TempMem,
            4 => Self::PermMem,
            5 => Self::Payload,
            6 => Self::PayloadParam,
            7 => Self::TdInfo,
            8 => Self::TdParams,
            _ => return None,
        })
    }
}

/// One TDVF metadata section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TdvfSection {
    /// Offset of the raw data in the image.
    pub data_offset: u32,
    /// Size of the raw data in the image.
    pub raw_size: u32,
    /// Guest physical address.
    pub gpa: u64,
    /// Size in guest memory (whole pages).
    pub mem_size: u64,
    /// Section type.
    pub kind: TdvfSectionType,
    /// Attributes ([`ATTR_MR_EXTEND`], [`ATTR_PAGE_AUG`]).
    pub attributes: u32,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Parses the TDVF metadata ("TDVF" descriptor found through the GUIDed table) into its sections, in order.
pub fn tdvf_sections(ovmf: &Ovmf) -> Result<Vec<TdvfSection>, TdvfError> {
    let entry = ovmf
        .table_entry(&TDX_METADATA_GUID)
        .ok_or(TdvfError::NoMetadata)?;
    let bad = |m: String| TdvfError::Descriptor(m);
    let data = ovmf.data();
    let from_end =
        u32_at(entry, 0).ok_or_else(|| bad("offset entry shorter than 4 bytes".into()))? as usize;
    let desc_at = data.len().checked_sub(from_end).ok_or_else(|| {
        bad(format!(
            "offset {from_end:#x} from the end lies before the image"
        ))
    })?;
    if let Some(guid) = desc_at.checked_sub(16).and_then(|g| data.get(g..desc_at)) {
        if guid != TDVF_METADATA_GUID {
            return Err(bad(format!(
                "no TDX metadata GUID before the descriptor at {desc_at:#x}"
            )));
        }
    }
    let hdr = data
        .get(desc_at..desc_at.saturating_add(16))
        .ok_or_else(|| bad(format!("descriptor at {desc_at:#x} runs past the end")))?;
    if &hdr[0..4] != b"TDVF" {
        return Err(bad(format!("signature at {desc_at:#x} is not \"TDVF\"")));
    }
    let length = u32_at(hdr, 4).unwrap_or(0) as usize;
    let version = u32_at(hdr, 8).unwrap_or(0);
    let count = u32_at(hdr, 12).unwrap_or(0) as usize;
    if version != 1 {
        return Err(bad(format!("version {version}, expected 1")));
    }
    if count == 0 || length != 16 + 32 * count {
        return Err(bad(format!(
            "length {length} does not hold {count} sections of 32 bytes"
        )));
    }
    let body = data
        .get(desc_at + 16..desc_at.saturating_add(length))
        .ok_or_else(|| bad(format!("{count} sections run past the end of the image")))?;
    let mut out = Vec::with_capacity(count);
    for index in 0..count {
        let s = &body[index * 32..index * 32 + 32];
        let sec = |problem: String| TdvfError::Section { index, problem };
        let kind_raw = u32_at(s, 24).unwrap_or(u32::MAX);
        let section = TdvfSection {
            data_offset: u32_at(s, 0).unwrap_or(0),
            raw_size: u32_at(s, 4).unwrap_or(0),
            gpa: u64_at(s, 8).unwrap_or(0),
            mem_size: u64_at(s, 16).unwrap_or(0),
            kind: TdvfSectionType::from_u32(kind_raw)
                .ok_or_else(|| sec(format!("unknown type {kind_raw}")))?,
            attributes: u32_at(s, 28).unwrap_or(0),
        };
        if section.gpa % PAGE != 0 || section.mem_size % PAGE != 0 {
            return Err(sec(format!(
                "GPA {:#x} or memory size {:#x} not 4 KiB aligned",
                section.gpa, section.mem_size
            )));
        }
        if section.mem_size > 1 << 32
            || section
                .gpa
                .checked_add(section.mem_size)
                .is_none_or(|e| e > 1 << 52)
        {
            return Err(sec(format!(
                "memory {:#x}+{:#x} is larger than 4 GiB or beyond 52-bit GPAs",
                section.gpa, section.mem_size
            )));
        }
        if section.kind != TdvfSectionType::TdInfo && u64::from(section.raw_size) > section.mem_size
        {
            return Err(sec(format!(
                "raw size {:#x} exceeds memory size {:#x}",
                section.raw_size, section.mem_size
            )));
        }
        let end = section.data_offset as usize + section.raw_size as usize;
        if end > data.len() {
            return Err(sec(format!(
                "raw data {:#x}..{end:#x} runs past the image",
                section.data_offset
            )));
        }
        // QEMU copies raw data only into BFV/CFV sections; one that extends MRTD must be supplied in full by
        // the image (this also bounds the hashing work to the image size).
        if section.attributes & ATTR_MR_EXTEND != 0
            && (section.raw_size == 0
                || section.mem_size != u64::from(section.raw_size).div_ceil(PAGE) * PAGE)
        {
            return Err(sec(format!(
                "MR_EXTEND section with raw size {:#x} but memory size {:#x} (must be the raw data, page-rounded)",
                section.raw_size, section.mem_size
            )));
        }
        if section.attributes & !(ATTR_MR_EXTEND | ATTR_PAGE_AUG) != 0 {
            return Err(sec(format!("unknown attributes {:#x}", section.attributes)));
        }
        out.push(section);
    }
    Ok(out)
}

/// MRTD as the TDX module builds it while QEMU/KVM adds the sections: for each section in descriptor order and
/// each of its pages, a TDH.MEM.PAGE.ADD record (unless PAGE_AUG), then, if MR_EXTEND, sixteen TDH.MR.EXTEND
/// records of 256 bytes each (the raw data, zero beyond its size).
pub fn mrtd(ovmf: &Ovmf) -> Result<Mr, TdvfError> {
    let sections = tdvf_sections(ovmf)?;
    let mut h = Sha384::new();
    let data = ovmf.data();
    for s in &sections {
        if s.kind == TdvfSectionType::TdInfo {
            continue; // TD_INFO is not memory; it does not enter MRTD.
        }
        let raw = &data[s.data_offset as usize..s.data_offset as usize + s.raw_size as usize];
        for p in 0..s.mem_size / PAGE {
            let gpa = s.gpa + p * PAGE;
            if s.attributes & ATTR_PAGE_AUG == 0 {
                let mut rec = [0u8; 128];
                rec[..12].copy_from_slice(b"MEM.PAGE.ADD");
                rec[16..24].copy_from_slice(&gpa.to_le_bytes());
                h.update(rec);
            }
            if s.attributes & ATTR_MR_EXTEND != 0 {
                let mut page = [0u8; PAGE as usize];
                let start = (p * PAGE) as usize;
                if start < raw.len() {
                    let n = (raw.len() - start).min(PAGE as usize);
                    page[..n].copy_from_slice(&raw[start..start + n]);
                }
                for (c, chunk) in page.chunks_exact(EXTEND_CHUNK).enumerate() {
                    let mut rec = [0u8; 128];
                    rec[..9].copy_from_slice(b"MR.EXTEND");
                    rec[16..24].copy_from_slice(&(gpa + (c * EXTEND_CHUNK) as u64).to_le_bytes());
                    h.update(rec);
                    h.update(chunk);
                }
            }
        }
    }
    Ok(h.finalize().into())
}

/// TCG algorithm id of SHA-384.
pub const TPM_ALG_SHA384: u16 = 0x000C;
/// Event type EV_NO_ACTION: informational, never extended.
pub const EV_NO_ACTION: u32 = 0x0000_0003;

/// What is wrong with an event log; offsets are from the start of the log.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventLogError {
    /// The log ends in the middle of a structure.
    #[error("event log truncated at offset {offset}: {what}")]
    Truncated {
        /// Where the structure began.
        offset: usize,
        /// Which structure.
        what: &'static str,
    },
    /// The first event is not the TCG2 "Spec ID Event03".
    #[error("event log does not start with a TCG2 Spec ID Event03 (not a crypto-agile log): {0}")]
    NoSpecId(String),
    /// The Spec ID event declares the same algorithm twice (consistently or not): which size applies would be
    /// a guess.
    #[error(
        "Spec ID event declares algorithm {alg:#06x} twice (digest sizes {first} and {second})"
    )]
    DuplicateAlgorithm {
        /// The algorithm id.
        alg: u16,
        /// The size of the first declaration.
        first: usize,
        /// The size of the second.
        second: usize,
    },
    /// The Spec ID event declares a known algorithm with a digest size it does not have.
    #[error(
        "Spec ID event declares algorithm {alg:#06x} with digest size {size}, but it has {want}"
    )]
    AlgorithmSize {
        /// The algorithm id.
        alg: u16,
        /// The size declared.
        size: usize,
        /// The algorithm's digest size.
        want: usize,
    },
    /// An event carries two digests of the same algorithm.
    #[error("event {event} at offset {offset} carries two {alg:#06x} digests")]
    DuplicateDigest {
        /// Event number.
        event: usize,
        /// Where the event began.
        offset: usize,
        /// The algorithm id.
        alg: u16,
    },
    /// The log does not carry SHA-384 digests, which the RTMRs need.
    #[error("event log declares no SHA-384 (algorithm 0x000C) digests")]
    NoSha384,
    /// An event uses an algorithm the Spec ID event did not declare.
    #[error(
        "event {event} at offset {offset}: algorithm {alg:#06x} not declared in the Spec ID event"
    )]
    UnknownAlgorithm {
        /// Event number (0 is the Spec ID event).
        event: usize,
        /// Where the event began.
        offset: usize,
        /// The algorithm id.
        alg: u16,
    },
    /// An event has no SHA-384 digest.
    #[error("event {event} at offset {offset} has no SHA-384 digest")]
    MissingSha384 {
        /// Event number.
        event: usize,
        /// Where the event began.
        offset: usize,
    },
    /// An MR index beyond RTMR3.
    #[error("event {event} at offset {offset}: MR index {index} is not 0..=4 (MRTD, RTMR0-3)")]
    BadMrIndex {
        /// Event number.
        event: usize,
        /// Where the event began.
        offset: usize,
        /// The index found.
        index: u32,
    },
}

/// One event of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Offset of the event in the log.
    pub offset: usize,
    /// MR index as logged (0 MRTD, 1-4 RTMR0-3).
    pub mr_index: u32,
    /// The RTMR it extends, if any (EV_NO_ACTION and MRTD events extend none).
    pub rtmr: Option<usize>,
    /// Event type.
    pub event_type: u32,
    /// The SHA-384 digest (absent only in the Spec ID event).
    pub sha384: Option<Mr>,
    /// The event data.
    pub data: Vec<u8>,
}

impl Event {
    /// The TCG name of the event type, when known.
    pub fn type_name(&self) -> &'static str {
        match self.event_type {
            0x0000_0001 => "EV_POST_CODE",
            0x0000_0003 => "EV_NO_ACTION",
            0x0000_0004 => "EV_SEPARATOR",
            0x0000_0005 => "EV_ACTION",
            0x0000_0006 => "EV_EVENT_TAG",
            0x0000_000D => "EV_IPL",
            0x8000_0001 => "EV_EFI_VARIABLE_DRIVER_CONFIG",
            0x8000_0002 => "EV_EFI_VARIABLE_BOOT",
            0x8000_0003 => "EV_EFI_BOOT_SERVICES_APPLICATION",
            0x8000_0004 => "EV_EFI_BOOT_SERVICES_DRIVER",
            0x8000_0006 => "EV_EFI_GPT_EVENT",
            0x8000_0007 => "EV_EFI_ACTION",
            0x8000_0008 => "EV_EFI_PLATFORM_FIRMWARE_BLOB",
            0x8000_0009 => "EV_EFI_HANDOFF_TABLES",
            0x8000_000A => "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
            0x8000_000B => "EV_EFI_HANDOFF_TABLES2",
            0x8000_000C => "EV_EFI_VARIABLE_BOOT2",
            0x8000_00E0 => "EV_EFI_VARIABLE_AUTHORITY",
            _ => "unknown",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match self.rtmr {
            Some(r) => format!("RTMR{r}"),
            None if self.mr_index == 0 => "MRTD (not replayed)".to_owned(),
            None => "none".to_owned(),
        };
        write!(
            f,
            "@{:#07x} MR{} -> {target} {} ({:#010x}) {} data {} bytes",
            self.offset,
            self.mr_index,
            self.type_name(),
            self.event_type,
            self.sha384.map(hex::encode).unwrap_or_else(|| "-".into()),
            self.data.len()
        )
    }
}

/// The result of replaying a log: the four RTMRs and every event read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// RTMR0-3 after all events.
    pub rtmrs: [Mr; 4],
    /// The events in log order (the Spec ID event first).
    pub events: Vec<Event>,
    /// Bytes after the last event (0xFF or zero padding).
    pub padding: usize,
}

impl Replay {
    /// The RTMR indices (0-3) whose replayed value differs from `quoted`.
    pub fn mismatches(&self, quoted: &[Mr; 4]) -> Vec<usize> {
        (0..4).filter(|&i| self.rtmrs[i] != quoted[i]).collect()
    }
}

/// The event log's truncation error for a read inside the structure that began at `offset`.
fn truncated(offset: usize) -> impl Fn(WireError) -> EventLogError {
    move |e| match e {
        WireError::Truncated { field, .. } => EventLogError::Truncated {
            offset,
            what: field,
        },
        _ => EventLogError::Truncated {
            offset,
            what: "event log",
        },
    }
}

/// The digest size of a TCG algorithm this parser knows (SHA-1, SHA-256, SHA-384, SHA-512, SM3-256).
fn digest_size(alg: u16) -> Option<usize> {
    match alg {
        0x0004 => Some(20),
        0x000B => Some(32),
        0x000C => Some(48),
        0x000D => Some(64),
        0x0012 => Some(32),
        _ => None,
    }
}

/// Replays a CCEL / TCG2 crypto-agile event log into RTMR0-3: RTMR[i] = SHA-384(RTMR[i] || digest) for each
/// event whose MR index is i+1 (CCEL convention: 0 MRTD, 1-4 RTMR0-3), EV_NO_ACTION excluded. The log ends at
/// its last byte, at an MR index of 0xFFFFFFFF (the 0xFF fill of the CCEL area), or where only zeros remain.
pub fn replay_rtmrs(log: &[u8]) -> Result<Replay, EventLogError> {
    let mut r = Reader::new("event log", log);
    // The Spec ID event, in the SHA-1 TCG_PCR_EVENT layout.
    let _pcr = r.u32_le("Spec ID event header").map_err(truncated(0))?;
    let ty = r.u32_le("Spec ID event header").map_err(truncated(0))?;
    r.take("Spec ID event digest", 20).map_err(truncated(0))?;
    let size = r.u32_le("Spec ID event size").map_err(truncated(0))? as usize;
    let spec = r.take("Spec ID event data", size).map_err(truncated(0))?;
    if ty != EV_NO_ACTION || spec.len() < 28 || &spec[..16] != b"Spec ID Event03\0" {
        return Err(EventLogError::NoSpecId(
            "first event is not EV_NO_ACTION \"Spec ID Event03\"".into(),
        ));
    }
    let nalg = u32_at(spec, 24).unwrap_or(0) as usize;
    let mut algs: Vec<(u16, usize)> = Vec::new();
    for i in 0..nalg {
        let at = 28 + 4 * i;
        let (Some(a), Some(s)) = (spec.get(at..at + 2), spec.get(at + 2..at + 4)) else {
            return Err(EventLogError::NoSpecId(format!(
                "{nalg} algorithms do not fit in {size} bytes"
            )));
        };
        let (alg, len) = (
            u16::from_le_bytes([a[0], a[1]]),
            u16::from_le_bytes([s[0], s[1]]) as usize,
        );
        if let Some(&(_, first)) = algs.iter().find(|&&(x, _)| x == alg) {
            return Err(EventLogError::DuplicateAlgorithm {
                alg,
                first,
                second: len,
            });
        }
        algs.push((alg, len));
    }
    // Sizes only once every declaration is read, so a repeated algorithm is named as such.
    for &(alg, size) in &algs {
        if let Some(want) = digest_size(alg).filter(|&w| w != size) {
            return Err(EventLogError::AlgorithmSize { alg, size, want });
        }
    }
    if !algs
        .iter()
        .any(|&(a, s)| a == TPM_ALG_SHA384 && s == MR_LEN)
    {
        return Err(EventLogError::NoSha384);
    }
    let mut events = vec![Event {
        offset: 0,
        mr_index: 0,
        rtmr: None,
        event_type: ty,
        sha384: None,
        data: spec.to_vec(),
    }];
    let mut rtmrs = [[0u8; MR_LEN]; 4];
    loop {
        let offset = r.offset();
        let rest = &log[offset..];
        if rest.is_empty() || rest.starts_with(&[0xFF; 4]) || rest.iter().all(|&b| b == 0) {
            return Ok(Replay {
                rtmrs,
                events,
                padding: rest.len(),
            });
        }
        let n = events.len();
        let mr_index = r.u32_le("event header").map_err(truncated(offset))?;
        let event_type = r.u32_le("event header").map_err(truncated(offset))?;
        let count = r.u32_le("digest count").map_err(truncated(offset))?;
        let mut sha384 = None;
        let mut seen: Vec<u16> = Vec::new();
        for _ in 0..count {
            let alg = r.u16_le("digest algorithm").map_err(truncated(offset))?;
            if seen.contains(&alg) {
                return Err(EventLogError::DuplicateDigest {
                    event: n,
                    offset,
                    alg,
                });
            }
            seen.push(alg);
            let &(_, len) =
                algs.iter()
                    .find(|&&(a, _)| a == alg)
                    .ok_or(EventLogError::UnknownAlgorithm {
                        event: n,
                        offset,
                        alg,
                    })?;
            let d = r.take("digest", len).map_err(truncated(offset))?;
            if alg == TPM_ALG_SHA384 {
                // The Spec ID check above fixed SHA-384's size at 48; a mismatch is still an error, not a panic.
                let m: Mr = d.try_into().map_err(|_| EventLogError::AlgorithmSize {
                    alg,
                    size: d.len(),
                    want: MR_LEN,
                })?;
                sha384 = Some(m);
            }
        }
        let size = r.u32_le("event size").map_err(truncated(offset))? as usize;
        let data = r
            .take("event data", size)
            .map_err(truncated(offset))?
            .to_vec();
        if mr_index > 4 {
            return Err(EventLogError::BadMrIndex {
                event: n,
                offset,
                index: mr_index,
            });
        }
        let rtmr = if event_type == EV_NO_ACTION || mr_index == 0 {
            None
        } else {
            let digest = sha384.ok_or(EventLogError::MissingSha384 { event: n, offset })?;
            let i = mr_index as usize - 1;
            let mut h = Sha384::new();
            h.update(rtmrs[i]);
            h.update(digest);
            rtmrs[i] = h.finalize().into();
            Some(i)
        };
        events.push(Event {
            offset,
            mr_index,
            rtmr,
            event_type,
            sha384,
            data,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snp::{OVMF_TABLE_FOOTER_GUID, TDX_METADATA_GUID};

    /// A synthetic 4-page firmware volume: a TDVF descriptor with three sections (BFV with MR_EXTEND, a TD_HOB,
    /// a PAGE_AUG section), found through a GUIDed table with only the TDX metadata entry.
    fn synthetic() -> Vec<u8> {
        let mut img = vec![0u8; 4 * 4096];
        for (i, b) in img.iter_mut().enumerate().take(4096) {
            *b = (i % 251) as u8; // page 0: the "code" that BFV extends
        }
        let n = img.len();
        let desc_at = 4096 + 0x40;
        img[desc_at - 16..desc_at].copy_from_slice(&TDVF_METADATA_GUID);
        img[desc_at..desc_at + 4].copy_from_slice(b"TDVF");
        img[desc_at + 4..desc_at + 8].copy_from_slice(&(16u32 + 3 * 32).to_le_bytes());
        img[desc_at + 8..desc_at + 12].copy_from_slice(&1u32.to_le_bytes());
        img[desc_at + 12..desc_at + 16].copy_from_slice(&3u32.to_le_bytes());
        let secs: [(u32, u32, u64, u64, u32, u32); 3] = [
            (0, 0x1000, 0xFFFF_C000, 0x1000, 0, ATTR_MR_EXTEND), // BFV
            (0, 0, 0x80_0000, 0x2000, 2, 0),                     // TD_HOB, 2 pages
            (0, 0, 0x90_0000, 0x1000, 3, ATTR_PAGE_AUG),         // TempMem, AUG
        ];
        for (i, (off, raw, gpa, mem, ty, attr)) in secs.iter().enumerate() {
            let at = desc_at + 16 + 32 * i;
            img[at..at + 4].copy_from_slice(&off.to_le_bytes());
            img[at + 4..at + 8].copy_from_slice(&raw.to_le_bytes());
            img[at + 8..at + 16].copy_from_slice(&gpa.to_le_bytes());
            img[at + 16..at + 24].copy_from_slice(&mem.to_le_bytes());
            img[at + 24..at + 28].copy_from_slice(&ty.to_le_bytes());
            img[at + 28..at + 32].copy_from_slice(&attr.to_le_bytes());
        }
        let footer_at = n - 32 - 18;
        let entry_at = footer_at - 22;
        img[entry_at..entry_at + 4].copy_from_slice(&((n - desc_at) as u32).to_le_bytes());
        img[entry_at + 4..entry_at + 6].copy_from_slice(&22u16.to_le_bytes());
        img[entry_at + 6..entry_at + 22].copy_from_slice(&TDX_METADATA_GUID);
        img[footer_at..footer_at + 2].copy_from_slice(&(22u16 + 18).to_le_bytes());
        img[footer_at + 2..footer_at + 18].copy_from_slice(&OVMF_TABLE_FOOTER_GUID);
        img
    }

    fn rec(tag: &[u8], gpa: u64) -> Vec<u8> {
        let mut r = vec![0u8; 128];
        r[..tag.len()].copy_from_slice(tag);
        r[16..24].copy_from_slice(&gpa.to_le_bytes());
        r
    }

    #[test]
    fn mrtd_of_synthetic_volume_matches_hand_worked_sequence() {
        let img = synthetic();
        let o = Ovmf::parse(img.clone()).expect("parse");
        let secs = tdvf_sections(&o).expect("sections");
        assert_eq!(secs.len(), 3);
        assert_eq!(secs[1].kind, TdvfSectionType::TdHob);
        // Worked out by hand: BFV page ADD at 0xFFFFC000 then 16 EXTENDs of page 0; TD_HOB: two ADDs;
        // the PAGE_AUG section contributes nothing.
        let mut stream = rec(b"MEM.PAGE.ADD", 0xFFFF_C000);
        for c in 0..16u64 {
            stream.extend(rec(b"MR.EXTEND", 0xFFFF_C000 + c * 256));
            stream.extend_from_slice(&img[(c * 256) as usize..(c * 256 + 256) as usize]);
        }
        stream.extend(rec(b"MEM.PAGE.ADD", 0x80_0000));
        stream.extend(rec(b"MEM.PAGE.ADD", 0x80_1000));
        assert_eq!(stream.len(), 128 + 16 * 384 + 256);
        let want: Mr = Sha384::digest(&stream).into();
        assert_eq!(mrtd(&o).expect("mrtd"), want);
    }

    #[test]
    fn mrtd_depends_on_extended_bytes_and_aug_pages_do_not_count() {
        let img = synthetic();
        let base = mrtd(&Ovmf::parse(img.clone()).expect("parse")).expect("mrtd");
        let mut changed = img.clone();
        changed[100] ^= 1;
        assert_ne!(
            mrtd(&Ovmf::parse(changed).expect("parse")).expect("mrtd"),
            base
        );
        // Drop the AUG section (count 3 -> 2, length adjusted): same MRTD.
        let mut fewer = img;
        let desc_at = 4096 + 0x40;
        fewer[desc_at + 4..desc_at + 8].copy_from_slice(&(16u32 + 2 * 32).to_le_bytes());
        fewer[desc_at + 12..desc_at + 16].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            mrtd(&Ovmf::parse(fewer).expect("parse")).expect("mrtd"),
            base
        );
    }

    #[test]
    fn non_tdvf_image_is_named() {
        let o = Ovmf::parse(vec![0; 8192]).expect("parse");
        assert_eq!(mrtd(&o), Err(TdvfError::NoMetadata));
    }

    /// Builds a crypto-agile log: Spec ID event (SHA-256 and SHA-384), then the given events.
    fn log(events: &[(u32, u32, Mr, &[u8])]) -> Vec<u8> {
        let mut spec = b"Spec ID Event03\0".to_vec();
        spec.extend_from_slice(&0u32.to_le_bytes()); // platform class
        spec.extend_from_slice(&[0, 2, 0, 2]); // minor, major, errata, uintn
        spec.extend_from_slice(&2u32.to_le_bytes());
        spec.extend_from_slice(&0x000Bu16.to_le_bytes());
        spec.extend_from_slice(&32u16.to_le_bytes());
        spec.extend_from_slice(&0x000Cu16.to_le_bytes());
        spec.extend_from_slice(&48u16.to_le_bytes());
        spec.push(0);
        let mut l = Vec::new();
        l.extend_from_slice(&0u32.to_le_bytes());
        l.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
        l.extend_from_slice(&[0; 20]);
        l.extend_from_slice(&(spec.len() as u32).to_le_bytes());
        l.extend_from_slice(&spec);
        for (mr, ty, d, data) in events {
            l.extend_from_slice(&mr.to_le_bytes());
            l.extend_from_slice(&ty.to_le_bytes());
            l.extend_from_slice(&2u32.to_le_bytes());
            l.extend_from_slice(&0x000Bu16.to_le_bytes());
            l.extend_from_slice(&[0xAB; 32]);
            l.extend_from_slice(&0x000Cu16.to_le_bytes());
            l.extend_from_slice(d);
            l.extend_from_slice(&(data.len() as u32).to_le_bytes());
            l.extend_from_slice(data);
        }
        l
    }

    fn ext(prev: Mr, d: Mr) -> Mr {
        let mut v = prev.to_vec();
        v.extend_from_slice(&d);
        Sha384::digest(&v).into()
    }

    #[test]
    fn replay_maps_mr_index_to_rtmr_and_stops_at_ff_padding() {
        let (a, b, c) = ([1u8; 48], [2u8; 48], [3u8; 48]);
        let mut l = log(&[
            (1, 0x8000_0001, a, b"var"),
            (2, 0x8000_0003, b, b"app"),
            (1, 0x0000_0004, c, b"sep"),
            (4, 0x0000_000D, a, b"ipl"),
            (3, EV_NO_ACTION, b, b"info"), // not extended
        ]);
        l.extend_from_slice(&[0xFF; 300]);
        let r = replay_rtmrs(&l).expect("replay");
        assert_eq!(r.rtmrs[0], ext(ext([0; 48], a), c));
        assert_eq!(r.rtmrs[1], ext([0; 48], b));
        assert_eq!(r.rtmrs[2], [0; 48]);
        assert_eq!(r.rtmrs[3], ext([0; 48], a));
        assert_eq!(r.events.len(), 6);
        assert_eq!(r.events[2].rtmr, Some(1));
        assert_eq!(r.events[5].rtmr, None);
        assert_eq!(r.padding, 300);
        assert_eq!(r.mismatches(&r.rtmrs), Vec::<usize>::new());
        let mut other = r.rtmrs;
        other[2][0] ^= 1;
        assert_eq!(r.mismatches(&other), vec![2]);
    }

    #[test]
    fn malformed_logs_are_named() {
        assert!(matches!(
            replay_rtmrs(&[]),
            Err(EventLogError::Truncated { offset: 0, .. })
        ));
        let l = log(&[(5, 1, [0; 48], b"")]);
        assert!(matches!(
            replay_rtmrs(&l),
            Err(EventLogError::BadMrIndex { index: 5, .. })
        ));
        let mut l = log(&[(1, 1, [0; 48], b"abc")]);
        l.truncate(l.len() - 1);
        assert!(matches!(
            replay_rtmrs(&l),
            Err(EventLogError::Truncated {
                what: "event data",
                ..
            })
        ));
    }

    /// A log whose Spec ID event declares `algs` (id, size), with one event carrying SHA-384.
    fn log_declaring(algs: &[(u16, u16)]) -> Vec<u8> {
        let mut spec = b"Spec ID Event03\0".to_vec();
        spec.extend_from_slice(&0u32.to_le_bytes());
        spec.extend_from_slice(&[0, 2, 0, 2]);
        spec.extend_from_slice(&(algs.len() as u32).to_le_bytes());
        for (a, s) in algs {
            spec.extend_from_slice(&a.to_le_bytes());
            spec.extend_from_slice(&s.to_le_bytes());
        }
        spec.push(0);
        let mut l = Vec::new();
        l.extend_from_slice(&0u32.to_le_bytes());
        l.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
        l.extend_from_slice(&[0; 20]);
        l.extend_from_slice(&(spec.len() as u32).to_le_bytes());
        l.extend_from_slice(&spec);
        l.extend_from_slice(&1u32.to_le_bytes());
        l.extend_from_slice(&1u32.to_le_bytes());
        l.extend_from_slice(&1u32.to_le_bytes());
        l.extend_from_slice(&0x000Cu16.to_le_bytes());
        l.extend_from_slice(&[0x5A; 48]);
        l.extend_from_slice(&0u32.to_le_bytes());
        l
    }

    #[test]
    fn duplicate_or_inconsistent_algorithm_declarations_are_named() {
        // The crafted CCEL of issue 20: SHA-384 declared twice, with 32 and with 48 bytes (it used to panic).
        assert_eq!(
            replay_rtmrs(&log_declaring(&[(0x000C, 32), (0x000C, 48)])),
            Err(EventLogError::DuplicateAlgorithm {
                alg: 0x000C,
                first: 32,
                second: 48
            })
        );
        assert!(matches!(
            replay_rtmrs(&log_declaring(&[(0x000C, 48), (0x000C, 48)])),
            Err(EventLogError::DuplicateAlgorithm { .. })
        ));
        assert_eq!(
            replay_rtmrs(&log_declaring(&[(0x000B, 48), (0x000C, 48)])),
            Err(EventLogError::AlgorithmSize {
                alg: 0x000B,
                size: 48,
                want: 32
            })
        );
        assert!(replay_rtmrs(&log_declaring(&[(0x000C, 48)])).is_ok());
        // Two SHA-384 digests in one event.
        let mut dup = log(&[]);
        for v in [1u32, 1, 2] {
            dup.extend_from_slice(&v.to_le_bytes());
        }
        for _ in 0..2 {
            dup.extend_from_slice(&0x000Cu16.to_le_bytes());
            dup.extend_from_slice(&[1; 48]);
        }
        dup.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            replay_rtmrs(&dup),
            Err(EventLogError::DuplicateDigest { alg: 0x000C, .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_logs_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = replay_rtmrs(&bytes);
        }

        #[test]
        fn mutated_valid_logs_never_panic(pos in 0usize..400, val in proptest::num::u8::ANY, cut in 0usize..400) {
            let mut l = log(&[(1, 1, [7; 48], b"abc"), (2, 2, [8; 48], b"defg")]);
            if pos < l.len() { l[pos] = val; }
            l.truncate(l.len().saturating_sub(cut % 50));
            let _ = replay_rtmrs(&l);
        }

        #[test]
        fn mutated_tdvf_never_panics(pos in 4096usize..4400, val in proptest::num::u8::ANY) {
            let mut img = synthetic();
            img[pos] = val;
            if let Ok(o) = Ovmf::parse(img) { let _ = mrtd(&o); }
        }
    }
}
