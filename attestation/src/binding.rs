//! The key binding: report_data = SHA-512("fenced-run/v1/key-binding" || SEC1(key) || nonce).
//!
//! The 64 bytes go into the REPORT_DATA of an SNP report (or the REPORTDATA of a TDX quote), tying the guest's
//! ephemeral P-384 key and the founder's nonce to the hardware-signed launch. SEC1(key) is the 97-byte
//! uncompressed point `04 || X || Y`; the nonce is the raw bytes (16 to 64 of them).

use sha2::{Digest, Sha512};

/// The domain-separation prefix hashed before the key and the nonce.
pub const KEY_BINDING_DOMAIN: &[u8] = b"fenced-run/v1/key-binding";

/// Fewest nonce bytes accepted (128 bits, so a nonce cannot be guessed ahead of time).
pub const NONCE_MIN_LEN: usize = 16;

/// Most nonce bytes accepted.
pub const NONCE_MAX_LEN: usize = 64;

/// Why a nonce cannot be used in the binding.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The nonce is shorter or longer than the range accepted.
    #[error("nonce is {len} bytes; it must be {NONCE_MIN_LEN} to {NONCE_MAX_LEN} bytes")]
    NonceLength {
        /// The length given.
        len: usize,
    },
}

/// Why a nonce given as hex text (a founder's `--nonce`) cannot be used.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NonceTextError {
    /// The text is not hex digits.
    #[error("not hex ({0})")]
    NotHex(hex::FromHexError),
    /// The bytes are too few or too many.
    #[error(transparent)]
    Length(#[from] BindingError),
}

/// Parses a founder's nonce given as hex (whitespace and a `0x` prefix ignored) and checks its length, so that
/// a run never produces evidence no founder could verify.
pub fn parse_nonce_hex(text: &str) -> Result<Vec<u8>, NonceTextError> {
    let v = hex::decode(text.trim().trim_start_matches("0x")).map_err(NonceTextError::NotHex)?;
    check_nonce(&v)?;
    Ok(v)
}

/// Checks that `nonce` has an accepted length ([`NONCE_MIN_LEN`]..=[`NONCE_MAX_LEN`] bytes).
pub fn check_nonce(nonce: &[u8]) -> Result<(), BindingError> {
    if (NONCE_MIN_LEN..=NONCE_MAX_LEN).contains(&nonce.len()) {
        Ok(())
    } else {
        Err(BindingError::NonceLength { len: nonce.len() })
    }
}

/// The 64 report-data bytes binding `key` and `nonce` (the nonce length is not checked here; see
/// [`report_data_checked`]).
pub fn report_data(key: &p384::PublicKey, nonce: &[u8]) -> [u8; 64] {
    use p384::elliptic_curve::sec1::ToEncodedPoint;
    let point = key.to_encoded_point(false);
    let mut h = Sha512::new();
    h.update(KEY_BINDING_DOMAIN);
    h.update(point.as_bytes());
    h.update(nonce);
    h.finalize().into()
}

/// [`report_data`] after checking the nonce length.
pub fn report_data_checked(key: &p384::PublicKey, nonce: &[u8]) -> Result<[u8; 64], BindingError> {
    check_nonce(nonce)?;
    Ok(report_data(key, nonce))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p384::elliptic_curve::sec1::ToEncodedPoint;

    fn key(seed: u8) -> p384::PublicKey {
        let mut bytes = [0u8; 48];
        bytes[47] = seed;
        bytes[0] = 1;
        p384::SecretKey::from_slice(&bytes)
            .expect("scalar")
            .public_key()
    }

    #[test]
    fn matches_the_definition() {
        let k = key(7);
        let nonce = [0xab; 32];
        let mut input = KEY_BINDING_DOMAIN.to_vec();
        let sec1 = k.to_encoded_point(false);
        assert_eq!(sec1.as_bytes().len(), 97);
        assert_eq!(sec1.as_bytes()[0], 0x04);
        input.extend_from_slice(sec1.as_bytes());
        input.extend_from_slice(&nonce);
        let expect: [u8; 64] = Sha512::digest(&input).into();
        assert_eq!(report_data(&k, &nonce), expect);
    }

    #[test]
    fn key_and_nonce_both_matter() {
        let n = [1u8; 16];
        assert_ne!(report_data(&key(1), &n), report_data(&key(2), &n));
        assert_ne!(report_data(&key(1), &n), report_data(&key(1), &[2u8; 16]));
    }

    #[test]
    fn nonce_length_rules() {
        assert!(report_data_checked(&key(1), &[0; 15]).is_err());
        assert!(report_data_checked(&key(1), &[0; 16]).is_ok());
        assert!(report_data_checked(&key(1), &[0; 64]).is_ok());
        assert_eq!(
            check_nonce(&[0; 65]),
            Err(BindingError::NonceLength { len: 65 })
        );
    }
}
