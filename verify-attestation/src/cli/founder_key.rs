//! The founder's signing key for the standard forms (`--statement-key`, `--ear-key`): an ECDSA P-256 private key
//! in PKCS#8 PEM (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`), and its key id, the
//! lowercase hex SHA-256 of the public key's DER SubjectPublicKeyInfo (`openssl pkey -pubout -outform DER |
//! sha256sum`). One key type serves both forms: DSSE signatures are ASN.1 DER ECDSA over SHA-256, JWS ES256
//! signatures the 64-byte `r || s` of RFC 7518.

use p256::ecdsa::signature::Signer;
use p256::pkcs8::{DecodePrivateKey, EncodePublicKey};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Largest key file read (a P-256 PKCS#8 PEM is about 240 bytes).
const MAX_KEY_FILE: u64 = 64 * 1024;

/// Why a founder's key could not be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than any P-256 key file.
    #[error("{flag} {}: {len} bytes, more than the {MAX_KEY_FILE} bytes of any key file", path.display())]
    TooLarge {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The file is not an ECDSA P-256 private key in PKCS#8 PEM.
    #[error("{flag} {}: not an ECDSA P-256 private key in PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`){hint}: {why}", path.display())]
    NotP256Pkcs8 {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// A hint on converting a key of another form, or empty.
        hint: &'static str,
        /// What the decoder said.
        why: String,
    },
}

/// A loaded founder's key: the signing key and its key id.
#[derive(Clone)]
pub struct FounderKey {
    signing: p256::ecdsa::SigningKey,
    keyid: String,
    public_pem: String,
}

impl std::fmt::Debug for FounderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the private scalar.
        f.debug_struct("FounderKey")
            .field("keyid", &self.keyid)
            .finish_non_exhaustive()
    }
}

impl FounderKey {
    /// Reads the PKCS#8 PEM file `path` named by `flag` (for the messages).
    pub fn load(flag: &'static str, path: &Path) -> Result<FounderKey, KeyError> {
        let read = |source| KeyError::Read {
            flag,
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > MAX_KEY_FILE {
            return Err(KeyError::TooLarge {
                flag,
                path: path.to_path_buf(),
                len,
            });
        }
        let text = std::fs::read(path).map_err(read)?;
        let text = String::from_utf8_lossy(&text);
        FounderKey::from_pkcs8_pem(&text).map_err(|why| {
            let hint = if text.contains("BEGIN EC PRIVATE KEY") {
                " (this is a SEC1 key: `openssl pkcs8 -topk8 -nocrypt` converts it)"
            } else if text.contains("BEGIN ENCRYPTED PRIVATE KEY") {
                " (this key is encrypted: `openssl pkcs8 -topk8 -nocrypt` writes it unencrypted)"
            } else {
                ""
            };
            KeyError::NotP256Pkcs8 {
                flag,
                path: path.to_path_buf(),
                hint,
                why,
            }
        })
    }

    /// The key of a PKCS#8 PEM text; the error is the decoder's message.
    pub fn from_pkcs8_pem(pem: &str) -> Result<FounderKey, String> {
        let signing = p256::ecdsa::SigningKey::from_pkcs8_pem(pem).map_err(|e| e.to_string())?;
        Ok(FounderKey::from_signing_key(signing))
    }

    /// The key of a P-256 signing key.
    pub fn from_signing_key(signing: p256::ecdsa::SigningKey) -> FounderKey {
        let public = p256::PublicKey::from(signing.verifying_key());
        // Encoding a valid P-256 public key cannot fail; an empty DER would give a key id no key has.
        let der = public
            .to_public_key_der()
            .map(|d| d.as_bytes().to_vec())
            .unwrap_or_default();
        let public_pem = public
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .unwrap_or_default();
        FounderKey {
            keyid: hex::encode(Sha256::digest(&der)),
            signing,
            public_pem,
        }
    }

    /// The key id: lowercase hex SHA-256 of the DER SubjectPublicKeyInfo.
    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// The public key, SubjectPublicKeyInfo PEM.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    /// ECDSA P-256 with SHA-256 over `msg`, ASN.1 DER (the DSSE signature).
    pub fn sign_der(&self, msg: &[u8]) -> Vec<u8> {
        let sig: p256::ecdsa::Signature = self.signing.sign(msg);
        sig.to_der().as_bytes().to_vec()
    }

    /// ECDSA P-256 with SHA-256 over `msg`, the 64 bytes `r || s` (JWS ES256).
    pub fn sign_raw(&self, msg: &[u8]) -> Vec<u8> {
        let sig: p256::ecdsa::Signature = self.signing.sign(msg);
        sig.to_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::pkcs8::EncodePrivateKey;

    fn key() -> p256::ecdsa::SigningKey {
        p256::ecdsa::SigningKey::from_slice(&Sha256::digest(b"founder key test")).expect("scalar")
    }

    #[test]
    fn keyid_is_the_sha256_of_the_spki_der() {
        let k = FounderKey::from_signing_key(key());
        let der = p256::PublicKey::from(key().verifying_key())
            .to_public_key_der()
            .expect("der");
        assert_eq!(k.keyid(), hex::encode(Sha256::digest(der.as_bytes())));
        assert_eq!(k.keyid().len(), 64);
        assert!(k.public_pem().starts_with("-----BEGIN PUBLIC KEY-----"));
        assert!(!format!("{k:?}").contains("signing"));
    }

    #[test]
    fn loads_pkcs8_and_refuses_other_forms_with_a_hint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("founder.pem");
        let pem = key()
            .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
            .expect("pem");
        std::fs::write(&good, pem.as_bytes()).expect("write");
        let k = FounderKey::load("--statement-key", &good).expect("loads");
        assert_eq!(k.keyid(), FounderKey::from_signing_key(key()).keyid());

        let sec1 = dir.path().join("sec1.pem");
        std::fs::write(
            &sec1,
            "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
        )
        .expect("write");
        let e = FounderKey::load("--ear-key", &sec1).expect_err("sec1 refused");
        let m = e.to_string();
        assert!(m.starts_with("--ear-key "), "{m}");
        assert!(m.contains("SEC1") && m.contains("openssl pkcs8"), "{m}");

        let encrypted = dir.path().join("encrypted.pem");
        std::fs::write(
            &encrypted,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .expect("write");
        let m = FounderKey::load("--statement-key", &encrypted)
            .expect_err("encrypted refused")
            .to_string();
        assert!(
            m.contains("encrypted") && m.contains("openssl pkcs8"),
            "{m}"
        );

        // A P-384 PKCS#8 key is another curve: refused.
        let p384_pem = p384::SecretKey::from_slice(&[7u8; 48])
            .expect("scalar")
            .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
            .expect("pem");
        let other = dir.path().join("p384.pem");
        std::fs::write(&other, p384_pem.as_bytes()).expect("write");
        assert!(matches!(
            FounderKey::load("--statement-key", &other),
            Err(KeyError::NotP256Pkcs8 { .. })
        ));

        let missing = dir.path().join("missing.pem");
        assert!(matches!(
            FounderKey::load("--statement-key", &missing),
            Err(KeyError::Read { .. })
        ));
    }

    #[test]
    fn signatures_verify_with_the_public_key() {
        use p256::ecdsa::signature::Verifier;
        let k = FounderKey::from_signing_key(key());
        let vk = *key().verifying_key();
        let der = k.sign_der(b"message");
        let sig = p256::ecdsa::Signature::from_der(&der).expect("der");
        vk.verify(b"message", &sig).expect("der signature verifies");
        let raw = k.sign_raw(b"message");
        assert_eq!(raw.len(), 64);
        let sig = p256::ecdsa::Signature::from_slice(&raw).expect("raw");
        vk.verify(b"message", &sig).expect("raw signature verifies");
        assert!(vk.verify(b"other", &sig).is_err());
    }
}
