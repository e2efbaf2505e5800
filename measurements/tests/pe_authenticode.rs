//! `measurements::pe::authenticode` against Debian's Secure-Boot-signed kernels: the SHA-256 Authenticode digest
//! the signer computed is inside the image's PKCS#7 signature (SpcIndirectDataContent), so ours must appear
//! there byte for byte, and must change when one byte of a section changes. Skips with a reason when the
//! kernels .ci/run extracts are absent, unless FENCED_RUN_REQUIRE_VECTORS=1.

use std::path::{Path, PathBuf};

use measurements::pe::authenticode;
use sha2::{Sha256, Sha384};

fn kernels() -> Vec<PathBuf> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for d in ["target/debian-kernel/boot", "target/vm-kernel/boot"] {
        if let Ok(rd) = std::fs::read_dir(ws.join(d)) {
            out.extend(rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
            }));
        }
    }
    out.sort();
    out
}

/// The certificate table (WIN_CERTIFICATE entries) of a PE32+ image.
fn cert_table(image: &[u8]) -> &[u8] {
    let word =
        |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().expect("4 bytes")) as usize;
    let pe = word(0x3c);
    let dir = pe + 24 + 112 + 4 * 8;
    let (off, len) = (word(dir), word(dir + 4));
    &image[off..off + len]
}

#[test]
fn authenticode_sha256_is_the_digest_debian_signed() {
    let found = kernels();
    if found.is_empty() {
        attestation::vectors::skip("no Debian kernel under target/debian-kernel or target/vm-kernel (.ci/run extracts them)");
        return;
    }
    for k in found {
        let image = std::fs::read(&k).expect("kernel");
        let table = cert_table(&image);
        assert!(!table.is_empty(), "{} is not signed", k.display());
        let d256 = authenticode::<Sha256>(&image).expect("pe");
        assert!(
            table.windows(32).any(|w| w == d256.as_slice()),
            "{}: Authenticode SHA-256 {} not in the signature",
            k.display(),
            hex::encode(&d256)
        );
        // The SHA-384 form (what TDVF extends into RTMR1) comes from the same bytes.
        let d384 = authenticode::<Sha384>(&image).expect("pe");
        assert_eq!(d384.len(), 48);
        // One byte changed inside the first section: the digest changes, and no longer is the signed one.
        let mut changed = image.clone();
        let at = image.len() / 2;
        changed[at] ^= 1;
        let c256 = authenticode::<Sha256>(&changed).expect("pe");
        assert_ne!(c256, d256);
        assert!(!table.windows(32).any(|w| w == c256.as_slice()));
        // Bytes of the signature itself are not hashed.
        let mut resigned = image.clone();
        let last = resigned.len() - 1;
        resigned[last] ^= 0xff;
        assert_eq!(authenticode::<Sha256>(&resigned).expect("pe"), d256);
    }
}
