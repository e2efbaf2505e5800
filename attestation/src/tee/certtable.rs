//! The SEV-SNP extended-report certificate table (GHCB specification, "SNP Extended Guest Request").
//!
//! The host hands the guest a buffer that starts with 24-byte entries `{GUID (16 bytes, RFC 4122 byte order),
//! offset (u32 LE), length (u32 LE)}` ended by an all-zero entry; each offset and length locate one DER
//! certificate inside the same buffer. It arrives from the host, so every entry is bounds-checked.

/// Size of one table entry.
pub const ENTRY_LEN: usize = 24;

/// Most entries accepted before the terminator.
pub const MAX_ENTRIES: usize = 64;

/// GUID of the VCEK entry (63da758d-e664-4564-adc5-f4b93be8accd).
pub const GUID_VCEK: [u8; 16] = guid(
    0x63da758d,
    0xe664,
    0x4564,
    [0xad, 0xc5, 0xf4, 0xb9, 0x3b, 0xe8, 0xac, 0xcd],
);
/// GUID of the VLEK entry (a8074bc2-a25a-483e-aae6-39c045a0b8a1).
pub const GUID_VLEK: [u8; 16] = guid(
    0xa8074bc2,
    0xa25a,
    0x483e,
    [0xaa, 0xe6, 0x39, 0xc0, 0x45, 0xa0, 0xb8, 0xa1],
);
/// GUID of the ASK entry (4ab7b379-bbac-4fe4-a02f-05aef327c782).
pub const GUID_ASK: [u8; 16] = guid(
    0x4ab7b379,
    0xbbac,
    0x4fe4,
    [0xa0, 0x2f, 0x05, 0xae, 0xf3, 0x27, 0xc7, 0x82],
);
/// GUID of the ARK entry (c0b406a4-a803-4952-9743-3fb6014cd0ae).
pub const GUID_ARK: [u8; 16] = guid(
    0xc0b406a4,
    0xa803,
    0x4952,
    [0x97, 0x43, 0x3f, 0xb6, 0x01, 0x4c, 0xd0, 0xae],
);
/// GUID of a CRL entry (92f81bc3-5811-4d3d-97ff-d19f88dc67ea).
pub const GUID_CRL: [u8; 16] = guid(
    0x92f81bc3,
    0x5811,
    0x4d3d,
    [0x97, 0xff, 0xd1, 0x9f, 0x88, 0xdc, 0x67, 0xea],
);

/// Builds GUID bytes in RFC 4122 (big-endian, string) order.
const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let a = a.to_be_bytes();
    let b = b.to_be_bytes();
    let c = c.to_be_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// What an entry of the table holds.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertKind {
    /// Versioned Chip Endorsement Key certificate.
    Vcek,
    /// Versioned Loaded Endorsement Key certificate.
    Vlek,
    /// AMD SEV Key (or the ASVK, for a VLEK chain).
    Ask,
    /// AMD Root Key.
    Ark,
    /// A certificate revocation list.
    Crl,
    /// A GUID this project does not know.
    Other([u8; 16]),
}

impl CertKind {
    /// The kind of a GUID.
    pub fn from_guid(g: &[u8; 16]) -> CertKind {
        match *g {
            GUID_VCEK => CertKind::Vcek,
            GUID_VLEK => CertKind::Vlek,
            GUID_ASK => CertKind::Ask,
            GUID_ARK => CertKind::Ark,
            GUID_CRL => CertKind::Crl,
            other => CertKind::Other(other),
        }
    }

    /// The GUID of the kind.
    pub fn guid(self) -> [u8; 16] {
        match self {
            CertKind::Vcek => GUID_VCEK,
            CertKind::Vlek => GUID_VLEK,
            CertKind::Ask => GUID_ASK,
            CertKind::Ark => GUID_ARK,
            CertKind::Crl => GUID_CRL,
            CertKind::Other(g) => g,
        }
    }
}

/// One entry of the table with the bytes it points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertTableEntry {
    /// What it holds.
    pub kind: CertKind,
    /// The bytes (DER for certificates).
    pub data: Vec<u8>,
}

/// Why a certificate table was refused.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertTableError {
    /// The buffer ends before the all-zero terminator entry.
    #[error("no terminating all-zero entry within {len} bytes")]
    Unterminated {
        /// Buffer length.
        len: usize,
    },
    /// More entries than [`MAX_ENTRIES`].
    #[error("more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    /// An entry points outside the buffer or into the table itself.
    #[error("entry {index} ({kind:?}): offset {offset} length {length} is outside the certificate area ({start}..{len})")]
    OutOfBounds {
        /// Entry index.
        index: usize,
        /// Entry kind.
        kind: CertKind,
        /// Offset given.
        offset: u32,
        /// Length given.
        length: u32,
        /// First byte after the table.
        start: usize,
        /// Buffer length.
        len: usize,
    },
    /// A GUID appears twice.
    #[error("entry {index}: {kind:?} appears twice")]
    Duplicate {
        /// Entry index.
        index: usize,
        /// Entry kind.
        kind: CertKind,
    },
    /// The terminator has a zero GUID but a non-zero offset or length.
    #[error("terminator entry has a zero GUID but non-zero offset/length")]
    BadTerminator,
}

/// Parses a certificate table from the host (bounded, never panics).
///
/// An all-zero buffer or an empty one means "no certificates" and yields an empty list.
pub fn parse_cert_table(buf: &[u8]) -> Result<Vec<CertTableEntry>, CertTableError> {
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    let mut headers = Vec::new();
    let mut r = crate::wire::Reader::new("certificate table", buf);
    let unterminated = |_| CertTableError::Unterminated { len: buf.len() };
    loop {
        let g: [u8; 16] = r.array("entry GUID").map_err(unterminated)?;
        let offset = r.u32_le("entry offset").map_err(unterminated)?;
        let length = r.u32_le("entry length").map_err(unterminated)?;
        if g == [0u8; 16] {
            if offset != 0 || length != 0 {
                return Err(CertTableError::BadTerminator);
            }
            break;
        }
        if headers.len() == MAX_ENTRIES {
            return Err(CertTableError::TooManyEntries);
        }
        headers.push((g, offset, length));
    }
    // The entries point into the area after the table: random access, checked entry by entry below.
    let start = r.offset();
    let mut out: Vec<CertTableEntry> = Vec::with_capacity(headers.len());
    for (index, (g, offset, length)) in headers.into_iter().enumerate() {
        let kind = CertKind::from_guid(&g);
        let range = (offset as usize)..(offset as usize).saturating_add(length as usize);
        if range.start < start || range.end > buf.len() || length == 0 {
            return Err(CertTableError::OutOfBounds {
                index,
                kind,
                offset,
                length,
                start,
                len: buf.len(),
            });
        }
        if out.iter().any(|e| e.kind == kind) {
            return Err(CertTableError::Duplicate { index, kind });
        }
        out.push(CertTableEntry {
            kind,
            data: buf[range].to_vec(),
        });
    }
    Ok(out)
}

/// Builds a certificate table (entries in the order given, data packed after the terminator).
pub fn build_cert_table(entries: &[CertTableEntry]) -> Vec<u8> {
    let mut table = Vec::new();
    let mut data = Vec::new();
    let base = ENTRY_LEN * (entries.len() + 1);
    for e in entries {
        let offset = u32::try_from(base + data.len()).unwrap_or(u32::MAX);
        let length = u32::try_from(e.data.len()).unwrap_or(u32::MAX);
        table.extend_from_slice(&e.kind.guid());
        table.extend_from_slice(&offset.to_le_bytes());
        table.extend_from_slice(&length.to_le_bytes());
        data.extend_from_slice(&e.data);
    }
    table.extend_from_slice(&[0u8; ENTRY_LEN]);
    table.extend_from_slice(&data);
    table
}

/// The certificates of a table in evidence order: VCEK or VLEK, then ASK, then ARK (CRLs and unknown entries
/// are left out).
pub fn certs_in_evidence_order(entries: &[CertTableEntry]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for kind in [CertKind::Vcek, CertKind::Vlek, CertKind::Ask, CertKind::Ark] {
        if let Some(e) = entries.iter().find(|e| e.kind == kind) {
            out.push(e.data.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<CertTableEntry> {
        vec![
            CertTableEntry {
                kind: CertKind::Ark,
                data: vec![0xA; 10],
            },
            CertTableEntry {
                kind: CertKind::Ask,
                data: vec![0xB; 20],
            },
            CertTableEntry {
                kind: CertKind::Vcek,
                data: vec![0xC; 30],
            },
        ]
    }

    #[test]
    fn guid_bytes_match_the_string_form() {
        assert_eq!(hex::encode(GUID_VCEK), "63da758de6644564adc5f4b93be8accd");
        assert_eq!(hex::encode(GUID_ARK), "c0b406a4a803495297433fb6014cd0ae");
    }

    #[test]
    fn round_trip_and_order() {
        let buf = build_cert_table(&sample());
        let parsed = parse_cert_table(&buf).expect("parse");
        assert_eq!(parsed, sample());
        assert_eq!(
            certs_in_evidence_order(&parsed),
            vec![vec![0xC; 30], vec![0xB; 20], vec![0xA; 10]]
        );
        // A page of zeros (what a host with no certificates leaves) is an empty table.
        assert_eq!(parse_cert_table(&[0u8; 4096]).expect("zeros"), vec![]);
        assert_eq!(parse_cert_table(&[]).expect("empty"), vec![]);
    }

    #[test]
    fn malformed_tables_refused() {
        let buf = build_cert_table(&sample());
        // Truncated data: the last entry points past the end.
        assert!(matches!(
            parse_cert_table(&buf[..buf.len() - 1]),
            Err(CertTableError::OutOfBounds { index: 2, .. })
        ));
        // Truncated inside the table: no terminator.
        assert!(matches!(
            parse_cert_table(&buf[..30]),
            Err(CertTableError::Unterminated { .. })
        ));
        // An offset pointing into the table itself.
        let mut b = buf.clone();
        b[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            parse_cert_table(&b),
            Err(CertTableError::OutOfBounds { index: 0, .. })
        ));
        // Huge length does not overflow.
        let mut b = buf.clone();
        b[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            parse_cert_table(&b),
            Err(CertTableError::OutOfBounds { .. })
        ));
        // Duplicate GUID.
        let mut dup = sample();
        dup.push(CertTableEntry {
            kind: CertKind::Ark,
            data: vec![1],
        });
        assert!(matches!(
            parse_cert_table(&build_cert_table(&dup)),
            Err(CertTableError::Duplicate { index: 3, .. })
        ));
        // Terminator with a zero GUID but a length.
        let mut b = buf.clone();
        b[3 * ENTRY_LEN + 20] = 1;
        assert_eq!(parse_cert_table(&b), Err(CertTableError::BadTerminator));
    }
}
