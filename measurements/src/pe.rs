//! The Authenticode digest of a PE/COFF image (a Linux bzImage with its EFI stub): the digest UEFI firmware
//! logs when it loads an EFI application (EV_EFI_BOOT_SERVICES_APPLICATION), which TDVF extends into RTMR[1]
//! for the kernel of a TD. Follows the "Authenticode PE image hash" procedure of Microsoft's PE format
//! specification: the headers without the checksum and the certificate-table directory entry, the sections in
//! file order, then any data after them except the certificate table.

use sha2::Digest;

/// What is wrong with a PE image.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("PE image: {0}")]
pub struct PeError(pub String);

fn u16_at(b: &[u8], at: usize) -> Result<u16, PeError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| PeError(format!("truncated at offset {at:#x}")))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, PeError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| PeError(format!("truncated at offset {at:#x}")))
}

/// The Authenticode digest of `image` with the hash `D` (SHA-256 for Secure Boot signatures, SHA-384 for TDX
/// RTMRs).
pub fn authenticode<D: Digest>(image: &[u8]) -> Result<Vec<u8>, PeError> {
    if image.get(0..2) != Some(b"MZ") {
        return Err(PeError("no MZ header".into()));
    }
    let pe = u32_at(image, 0x3c)? as usize;
    if image.get(pe..pe + 4) != Some(b"PE\0\0") {
        return Err(PeError(format!("no PE signature at {pe:#x}")));
    }
    let coff = pe + 4;
    let sections = u16_at(image, coff + 2)? as usize;
    let opt_size = u16_at(image, coff + 16)? as usize;
    let opt = coff + 20;
    let magic = u16_at(image, opt)?;
    // Offsets inside the optional header: CheckSum at 64; the data directories at 96 (PE32) or 112 (PE32+),
    // the certificate table being entry 4.
    let dirs = match magic {
        0x10b => opt + 96,
        0x20b => opt + 112,
        m => {
            return Err(PeError(format!(
                "optional header magic {m:#x} is neither PE32 nor PE32+"
            )))
        }
    };
    let ndirs = u32_at(image, dirs - 4)? as usize;
    let checksum = opt + 64;
    let size_of_headers = u32_at(image, opt + 60)? as usize;
    if size_of_headers > image.len() || size_of_headers < opt + opt_size {
        return Err(PeError(format!(
            "SizeOfHeaders {size_of_headers:#x} is out of range"
        )));
    }
    let (cert_dir, cert_off, cert_len) = if ndirs > 4 {
        let at = dirs + 4 * 8;
        (
            Some(at),
            u32_at(image, at)? as usize,
            u32_at(image, at + 4)? as usize,
        )
    } else {
        (None, 0, 0)
    };
    let mut h = D::new();
    h.update(&image[..checksum]);
    match cert_dir {
        Some(at) => {
            h.update(&image[checksum + 4..at]);
            h.update(&image[at + 8..size_of_headers]);
        }
        None => h.update(&image[checksum + 4..size_of_headers]),
    }
    let table = opt + opt_size;
    let mut raw: Vec<(usize, usize)> = Vec::with_capacity(sections);
    for i in 0..sections {
        let s = table + 40 * i;
        let size = u32_at(image, s + 16)? as usize;
        let ptr = u32_at(image, s + 20)? as usize;
        if size == 0 {
            continue;
        }
        if ptr.checked_add(size).is_none_or(|e| e > image.len()) {
            return Err(PeError(format!(
                "section {i} ({ptr:#x}+{size:#x}) runs past the image"
            )));
        }
        raw.push((ptr, size));
    }
    raw.sort();
    let mut hashed = size_of_headers;
    for (ptr, size) in raw {
        h.update(&image[ptr..ptr + size]);
        hashed += size;
    }
    let end = if cert_len > 0 {
        if cert_off
            .checked_add(cert_len)
            .is_none_or(|e| e > image.len())
        {
            return Err(PeError(format!(
                "certificate table {cert_off:#x}+{cert_len:#x} runs past the image"
            )));
        }
        image.len() - cert_len
    } else {
        image.len()
    };
    if end > hashed {
        h.update(&image[hashed..end]);
    }
    Ok(h.finalize().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_a_pe_is_an_error() {
        assert!(authenticode::<sha2::Sha384>(b"hello").is_err());
        let mut b = vec![0u8; 0x100];
        b[0..2].copy_from_slice(b"MZ");
        b[0x3c] = 0x80;
        assert!(authenticode::<sha2::Sha384>(&b)
            .expect_err("no PE")
            .to_string()
            .contains("no PE signature"));
    }
}
