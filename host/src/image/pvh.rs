//! The `vm` tier's kernel: the uncompressed ELF inside Debian's bzImage, which QEMU starts at its PVH entry
//! point (Xen's `PHYS32_ENTRY` note). Under TCG the bzImage's own decompressor costs about a second of every
//! boot (docs/benchmarks.md); decompressing once at image build gives the same kernel without that cost.

/// Why a bzImage yields no PVH kernel (the image then boots the bzImage in the `vm` tier too).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PvhError {
    /// No `HdrS` setup header, or a boot protocol older than 2.08 (no payload fields).
    #[error("not a bzImage with boot protocol 2.08 or later ({0})")]
    NotBzImage(String),
    /// The payload lies outside the file.
    #[error("the payload (offset {offset}, {length} bytes) lies outside the {size}-byte file")]
    PayloadOutside {
        /// Where the payload starts.
        offset: u64,
        /// Its length.
        length: u64,
        /// The file's size.
        size: u64,
    },
    /// The payload is not zstd (Debian's kernels are).
    #[error("the payload is not zstd-compressed (starts with {0})")]
    NotZstd(String),
    /// zstd refused the payload.
    #[error("the zstd payload does not decompress: {0}")]
    Zstd(String),
    /// The size the build appended to the payload differs from what came out.
    #[error("the payload decompresses to {got} bytes, its trailer says {want}")]
    SizeMismatch {
        /// Bytes decompressed.
        got: u64,
        /// The trailer's size.
        want: u64,
    },
    /// The payload is no 64-bit little-endian ELF, or its program headers are cut.
    #[error("the payload is not a 64-bit ELF ({0})")]
    NotElf(String),
    /// The ELF has no Xen `PHYS32_ENTRY` note: QEMU cannot start it.
    #[error(
        "the kernel has no PVH entry note (Xen PHYS32_ENTRY): it was built without CONFIG_PVH"
    )]
    NoPvhNote,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The uncompressed kernel ELF of `bzimage`, checked to carry a PVH entry note.
pub fn extract(bzimage: &[u8]) -> Result<Vec<u8>, PvhError> {
    // Linux's boot protocol (Documentation/arch/x86/boot.rst): setup_sects at 0x1f1, "HdrS" at 0x202, the
    // version at 0x206, payload_offset and payload_length at 0x248 and 0x24c (from protocol 2.08).
    if bzimage.get(0x202..0x206) != Some(b"HdrS".as_slice()) {
        return Err(PvhError::NotBzImage("no HdrS signature at 0x202".into()));
    }
    let version = u16_at(bzimage, 0x206).unwrap_or(0);
    if version < 0x0208 {
        return Err(PvhError::NotBzImage(format!(
            "boot protocol {}.{:02}",
            version >> 8,
            version & 0xff
        )));
    }
    let setup_sects = match bzimage[0x1f1] {
        0 => 4,
        n => u64::from(n),
    };
    let offset = (setup_sects + 1) * 512 + u64::from(u32_at(bzimage, 0x248).unwrap_or(0));
    let length = u64::from(u32_at(bzimage, 0x24c).unwrap_or(0));
    let size = bzimage.len() as u64;
    let payload = usize::try_from(offset)
        .ok()
        .zip(usize::try_from(offset + length).ok())
        .and_then(|(a, b)| bzimage.get(a..b))
        .filter(|p| p.len() >= 8)
        .ok_or(PvhError::PayloadOutside {
            offset,
            length,
            size,
        })?;
    if !payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Err(PvhError::NotZstd(hex::encode(&payload[..4])));
    }
    // The kernel's build appends the uncompressed size (le32) after the compressed stream.
    let (stream, trailer) = payload.split_at(payload.len() - 4);
    let want = u64::from(u32::from_le_bytes(
        trailer
            .try_into()
            .map_err(|_| PvhError::Zstd("short".into()))?,
    ));
    let mut out = Vec::new();
    let mut input = stream;
    let mut dec = ruzstd::decoding::StreamingDecoder::new(&mut input)
        .map_err(|e| PvhError::Zstd(e.to_string()))?;
    std::io::Read::read_to_end(&mut dec, &mut out).map_err(|e| PvhError::Zstd(e.to_string()))?;
    if out.len() as u64 != want {
        return Err(PvhError::SizeMismatch {
            got: out.len() as u64,
            want,
        });
    }
    if !has_pvh_note(&out)? {
        return Err(PvhError::NoPvhNote);
    }
    Ok(out)
}

/// Whether the ELF64 `elf` has a `PT_NOTE` segment holding a Xen note of type `PHYS32_ENTRY` (18).
fn has_pvh_note(elf: &[u8]) -> Result<bool, PvhError> {
    let not_elf = |why: &str| PvhError::NotElf(why.to_string());
    if !elf.starts_with(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err(not_elf("no ELF64 little-endian header"));
    }
    let phoff = u64_at(elf, 0x20).ok_or_else(|| not_elf("cut header"))?;
    let phentsize = u64::from(u16_at(elf, 0x36).ok_or_else(|| not_elf("cut header"))?);
    let phnum = u64::from(u16_at(elf, 0x38).ok_or_else(|| not_elf("cut header"))?);
    if phentsize < 56 {
        return Err(not_elf("program header entries under 56 bytes"));
    }
    for i in 0..phnum {
        let ph = usize::try_from(phoff + i * phentsize).map_err(|_| not_elf("phoff"))?;
        let p_type = u32_at(elf, ph).ok_or_else(|| not_elf("cut program header"))?;
        if p_type != 4 {
            continue;
        }
        let off = u64_at(elf, ph + 8).ok_or_else(|| not_elf("cut program header"))?;
        let len = u64_at(elf, ph + 32).ok_or_else(|| not_elf("cut program header"))?;
        let notes = usize::try_from(off)
            .ok()
            .zip(usize::try_from(off.saturating_add(len)).ok())
            .and_then(|(a, b)| elf.get(a..b))
            .ok_or_else(|| not_elf("a note segment outside the file"))?;
        let mut at = 0usize;
        while at + 12 <= notes.len() {
            let namesz = u32_at(notes, at).unwrap_or(0) as usize;
            let descsz = u32_at(notes, at + 4).unwrap_or(0) as usize;
            let kind = u32_at(notes, at + 8).unwrap_or(0);
            let name = notes.get(at + 12..at + 12 + namesz).unwrap_or_default();
            if name == b"Xen\0" && kind == 18 {
                return Ok(true);
            }
            let pad = |n: usize| n.div_ceil(4) * 4;
            at += 12 + pad(namesz) + pad(descsz);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 with one PT_NOTE segment holding `notes`.
    fn elf_with_notes(notes: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 64 + 56];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[5] = 1;
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        e[64..68].copy_from_slice(&4u32.to_le_bytes());
        e[72..80].copy_from_slice(&120u64.to_le_bytes());
        e[96..104].copy_from_slice(&(notes.len() as u64).to_le_bytes());
        e.extend_from_slice(notes);
        e
    }

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend((name.len() as u32).to_le_bytes());
        n.extend((desc.len() as u32).to_le_bytes());
        n.extend(kind.to_le_bytes());
        n.extend(name);
        n.resize(n.len().div_ceil(4) * 4, 0);
        n.extend(desc);
        n.resize(n.len().div_ceil(4) * 4, 0);
        n
    }

    /// A bzImage-shaped file whose payload is `payload` followed by the size trailer `size`.
    fn bzimage(payload: &[u8], size: u32) -> Vec<u8> {
        let mut b = vec![0u8; 5 * 512];
        b[0x1f1] = 4;
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        b[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        b[0x24c..0x250].copy_from_slice(&((payload.len() + 4) as u32).to_le_bytes());
        b.extend([0u8; 16]);
        b.extend(payload);
        b.extend(size.to_le_bytes());
        b
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
    }

    #[test]
    fn the_pvh_kernel_comes_out_of_a_zstd_bzimage_and_needs_its_note() {
        let good =
            elf_with_notes(&[note(b"GNU\0", 3, b"id"), note(b"Xen\0", 18, &[0; 4])].concat());
        let b = bzimage(&zstd(&good), good.len() as u32);
        assert_eq!(extract(&b), Ok(good.clone()));

        let other = elf_with_notes(&note(b"Xen\0", 6, b"linux\0"));
        let b = bzimage(&zstd(&other), other.len() as u32);
        assert_eq!(extract(&b), Err(PvhError::NoPvhNote));

        let b = bzimage(&zstd(&good), good.len() as u32 + 1);
        assert!(
            matches!(extract(&b), Err(PvhError::SizeMismatch { .. })),
            "the trailer is checked"
        );
        let b = bzimage(b"\x1f\x8b\x08\x00 gzip", 9);
        assert_eq!(extract(&b), Err(PvhError::NotZstd("1f8b0800".into())));
        let b = bzimage(&zstd(b"not an elf at all"), 17);
        assert!(matches!(extract(&b), Err(PvhError::NotElf(_))));
    }

    #[test]
    fn a_file_that_is_no_bzimage_or_whose_payload_is_outside_is_named() {
        assert!(matches!(extract(b"MZ"), Err(PvhError::NotBzImage(_))));
        let mut b = bzimage(b"\x28\xb5\x2f\xfd....", 8);
        b[0x206..0x208].copy_from_slice(&0x0206u16.to_le_bytes());
        assert_eq!(
            extract(&b),
            Err(PvhError::NotBzImage("boot protocol 2.06".into()))
        );
        let mut b = bzimage(b"\x28\xb5\x2f\xfd....", 8);
        b[0x24c..0x250].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(extract(&b), Err(PvhError::PayloadOutside { .. })));
        // The zstd magic followed by a frame header no decoder accepts.
        let b = bzimage(b"\x28\xb5\x2f\xfd\xff\xff\xff\xff", 8);
        assert!(
            matches!(extract(&b), Err(PvhError::Zstd(_))),
            "{:?}",
            extract(&b)
        );
    }
}
