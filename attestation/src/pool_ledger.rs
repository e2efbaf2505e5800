//! The hosted pool's execution ledger as a founder receives it (docs/pool.md, "The execution ledger"): every
//! execution of every attempt of one run, with the hash of the guest key that asked for its nonce, the nonce the
//! pool issued, and the result the pool verified (or none), signed by the pool's own Ed25519 key.
//!
//! The pool writes it (`pool fetch --ledger-out`), the founder's verifier reads it
//! (`verify-attestation evidence --pool-ledger FILE --pool-key PUB`). The signed file is JSON:
//! `{"format": SIGNED_FORMAT, "ledger": TEXT, "key": HEX32, "signature": HEX64}` where `TEXT` is the ledger's
//! JSON exactly as signed and the signature is Ed25519 over [`SIGNATURE_DOMAIN`] || `TEXT`.

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `format` of the ledger itself.
pub const LEDGER_FORMAT: &str = "fenced-run-pool-ledger/1";
/// The `format` of the signed file.
pub const SIGNED_FORMAT: &str = "fenced-run-pool-ledger-signed/1";
/// What the signature covers before the ledger text (domain separation from every other Ed25519 use).
pub const SIGNATURE_DOMAIN: &[u8] = b"fenced-run pool ledger/1\0";
/// Largest signed ledger file read.
pub const MAX_LEDGER_LEN: usize = 8 << 20;

/// An execution's result as the pool recorded it.
pub const RESULT_VERIFIED: &str = "verified";
/// The execution delivered evidence the pool's verifier rejected (or that names another execution).
pub const RESULT_REJECTED: &str = "rejected";
/// The execution got its nonce and never delivered evidence (killed, lost its lease, reported a host failure).
pub const RESULT_NONE: &str = "no result delivered";

/// The hash the guest announces before it gets a nonce: SHA-256 of its ephemeral P-384 key's uncompressed SEC1
/// point (`04 || X || Y`, 97 bytes). The evidence carries the key, so a verifier recomputes it.
pub fn key_sha256(key: &p384::PublicKey) -> [u8; 32] {
    use p384::elliptic_curve::sec1::ToEncodedPoint;
    Sha256::digest(key.to_encoded_point(false).as_bytes()).into()
}

/// One execution: one guest that asked for a nonce for an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execution {
    /// The attempt (1, 2, ...).
    pub attempt: u32,
    /// The execution of that attempt (1, 2, ...): a second guest for the same attempt is execution 2.
    pub execution: u32,
    /// [`key_sha256`] of the guest key that asked, hex.
    pub key_sha256: String,
    /// The nonce the pool issued to it, hex.
    pub nonce: String,
    /// When the pool issued it (RFC 3339).
    pub issued_at: String,
    /// The worker that asked (its identity).
    pub worker: String,
    /// [`RESULT_VERIFIED`], [`RESULT_REJECTED`] or [`RESULT_NONE`].
    pub result: String,
    /// The verdict's outcome, for a verified result.
    pub outcome: Option<String>,
    /// SHA-256 of the delivered evidence, hex, when evidence was delivered.
    pub evidence_sha256: Option<String>,
    /// Why a result was rejected, or what the pool's verification said.
    pub detail: Option<String>,
}

/// The ledger of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// [`LEDGER_FORMAT`].
    pub format: String,
    /// The run ID.
    pub run_id: String,
    /// SHA-256 of the founder's nonce, hex: ties the ledger to the founder's run without disclosing the nonce.
    pub founder_nonce_sha256: String,
    /// Whether the run had ended when the ledger was exported (after its end no nonce is issued for it).
    pub run_ended: bool,
    /// When the ledger was exported (RFC 3339).
    pub exported_at: String,
    /// Every execution, by attempt and execution number.
    pub executions: Vec<Execution>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedFile {
    format: String,
    ledger: String,
    key: String,
    signature: String,
}

/// Why a signed ledger cannot be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The file is larger than [`MAX_LEDGER_LEN`].
    #[error("the signed ledger is {len} bytes; at most {MAX_LEDGER_LEN} are read")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The file or the ledger inside it is not the format.
    #[error("not a signed pool ledger: {0}")]
    Format(String),
    /// The ledger is signed by another key than the pinned one.
    #[error("signed by key {found}, not the pinned pool key {pinned}")]
    WrongKey {
        /// The key the file names, hex.
        found: String,
        /// The pinned key, hex.
        pinned: String,
    },
    /// The signature does not verify with the pinned key.
    #[error("the signature does not verify with the pinned pool key {0}")]
    BadSignature(String),
    /// A key file could not be read or is not a key.
    #[error("{path}: {why}")]
    Key {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

impl Ledger {
    /// The executions of `attempt`.
    pub fn of_attempt(&self, attempt: u32) -> impl Iterator<Item = &Execution> {
        self.executions.iter().filter(move |e| e.attempt == attempt)
    }

    /// The execution whose issued nonce is `nonce`, if the pool issued it.
    pub fn by_nonce(&self, nonce: &[u8]) -> Option<&Execution> {
        let hex = hex::encode(nonce);
        self.executions.iter().find(|e| e.nonce == hex)
    }

    /// Signs the ledger with the pool's key: the signed file's bytes.
    pub fn sign(&self, key: &SigningKey) -> Result<Vec<u8>, LedgerError> {
        let text = serde_json::to_string(self).map_err(|e| LedgerError::Format(e.to_string()))?;
        let mut msg = SIGNATURE_DOMAIN.to_vec();
        msg.extend_from_slice(text.as_bytes());
        let sig = key.sign(&msg);
        let file = SignedFile {
            format: SIGNED_FORMAT.into(),
            ledger: text,
            key: hex::encode(key.verifying_key().as_bytes()),
            signature: hex::encode(sig.to_bytes()),
        };
        serde_json::to_vec_pretty(&file).map_err(|e| LedgerError::Format(e.to_string()))
    }

    /// Reads a signed ledger from outside: bounded, strict, and only when signed by `pinned`.
    pub fn verify(bytes: &[u8], pinned: &VerifyingKey) -> Result<Ledger, LedgerError> {
        if bytes.len() > MAX_LEDGER_LEN {
            return Err(LedgerError::TooLarge { len: bytes.len() });
        }
        let file: SignedFile =
            serde_json::from_slice(bytes).map_err(|e| LedgerError::Format(e.to_string()))?;
        if file.format != SIGNED_FORMAT {
            return Err(LedgerError::Format(format!(
                "format {}, expected {SIGNED_FORMAT}",
                crate::text::escape(&file.format)
            )));
        }
        let pinned_hex = hex::encode(pinned.as_bytes());
        if file.key != pinned_hex {
            return Err(LedgerError::WrongKey {
                found: crate::text::escape(&file.key).into_owned(),
                pinned: pinned_hex,
            });
        }
        let sig: [u8; 64] = hex::decode(&file.signature)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| LedgerError::Format("signature is not 64 bytes of hex".into()))?;
        let mut msg = SIGNATURE_DOMAIN.to_vec();
        msg.extend_from_slice(file.ledger.as_bytes());
        crate::sig::ed25519_strict(pinned.as_bytes(), &msg, &sig)
            .map_err(|_| LedgerError::BadSignature(pinned_hex))?;
        let ledger: Ledger = serde_json::from_str(&file.ledger)
            .map_err(|e| LedgerError::Format(format!("the signed ledger: {e}")))?;
        if ledger.format != LEDGER_FORMAT {
            return Err(LedgerError::Format(format!(
                "ledger format {}, expected {LEDGER_FORMAT}",
                crate::text::escape(&ledger.format)
            )));
        }
        Ok(ledger)
    }
}

/// A new pool signing key.
pub fn generate_key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}

/// The PKCS#8 PEM text of the pool's private key.
pub fn private_key_pem(key: &SigningKey) -> Result<String, LedgerError> {
    key.to_pkcs8_pem(Default::default())
        .map(|z| z.to_string())
        .map_err(|e| LedgerError::Format(e.to_string()))
}

/// The SubjectPublicKeyInfo PEM text of the pool's public key (what founders pin with `--pool-key`).
pub fn public_key_pem(key: &VerifyingKey) -> Result<String, LedgerError> {
    key.to_public_key_pem(Default::default())
        .map_err(|e| LedgerError::Format(e.to_string()))
}

fn read_key_text(path: &std::path::Path) -> Result<String, LedgerError> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 10).read_to_string(&mut s))
        .map_err(|e| LedgerError::Key {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
    Ok(s)
}

/// Reads the pool's private key (PKCS#8 PEM).
pub fn load_signing_key(path: &std::path::Path) -> Result<SigningKey, LedgerError> {
    SigningKey::from_pkcs8_pem(read_key_text(path)?.trim()).map_err(|e| LedgerError::Key {
        path: path.display().to_string(),
        why: format!("not an Ed25519 PKCS#8 PEM private key: {e}"),
    })
}

/// Reads the pool's public key (SubjectPublicKeyInfo PEM, as `pool key` prints it).
pub fn load_public_key(path: &std::path::Path) -> Result<VerifyingKey, LedgerError> {
    VerifyingKey::from_public_key_pem(read_key_text(path)?.trim()).map_err(|e| LedgerError::Key {
        path: path.display().to_string(),
        why: format!("not an Ed25519 PEM public key: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        Ledger {
            format: LEDGER_FORMAT.into(),
            run_id: "r1".into(),
            founder_nonce_sha256: hex::encode([1u8; 32]),
            run_ended: true,
            exported_at: "2026-12-05T13:00:00Z".into(),
            executions: vec![Execution {
                attempt: 1,
                execution: 1,
                key_sha256: hex::encode([2u8; 32]),
                nonce: hex::encode([3u8; 32]),
                issued_at: "2026-12-05T12:59:00Z".into(),
                worker: "w1".into(),
                result: RESULT_VERIFIED.into(),
                outcome: Some("tests_passed".into()),
                evidence_sha256: Some(hex::encode([4u8; 32])),
                detail: None,
            }],
        }
    }

    #[test]
    fn signed_ledger_round_trips_with_the_pinned_key_only() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let bytes = ledger().sign(&key).expect("sign");
        assert_eq!(
            Ledger::verify(&bytes, &key.verifying_key()).expect("verify"),
            ledger()
        );
        let other = SigningKey::from_bytes(&[8u8; 32]);
        assert!(matches!(
            Ledger::verify(&bytes, &other.verifying_key()),
            Err(LedgerError::WrongKey { .. })
        ));
    }

    #[test]
    fn a_forged_ledger_is_refused() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let bytes = ledger().sign(&key).expect("sign");
        // An execution removed from the signed text: the signature no longer verifies.
        let mut file: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        let mut l = ledger();
        l.executions.clear();
        file["ledger"] = serde_json::to_string(&l).expect("text").into();
        let forged = serde_json::to_vec(&file).expect("bytes");
        assert!(matches!(
            Ledger::verify(&forged, &key.verifying_key()),
            Err(LedgerError::BadSignature(_))
        ));
        // Re-signed by another key that claims to be the pool: refused as the wrong key.
        let attacker = SigningKey::from_bytes(&[9u8; 32]);
        let resigned = l.sign(&attacker).expect("sign");
        assert!(matches!(
            Ledger::verify(&resigned, &key.verifying_key()),
            Err(LedgerError::WrongKey { .. })
        ));
        assert!(Ledger::verify(b"not json", &key.verifying_key()).is_err());
    }

    #[test]
    fn keys_round_trip_through_pem() {
        let dir = tempfile::tempdir().expect("dir");
        let key = generate_key();
        let (sk, pk) = (dir.path().join("pool.key"), dir.path().join("pool.pub"));
        std::fs::write(&sk, private_key_pem(&key).expect("pem")).expect("write");
        std::fs::write(&pk, public_key_pem(&key.verifying_key()).expect("pem")).expect("write");
        assert_eq!(
            load_signing_key(&sk).expect("sk").to_bytes(),
            key.to_bytes()
        );
        assert_eq!(load_public_key(&pk).expect("pk"), key.verifying_key());
        assert!(load_public_key(&sk).is_err());
    }

    #[test]
    fn key_hash_is_sha256_of_the_sec1_point() {
        use p384::elliptic_curve::sec1::ToEncodedPoint;
        let k = p384::SecretKey::from_slice(&[5u8; 48])
            .expect("scalar")
            .public_key();
        let want: [u8; 32] = Sha256::digest(k.to_encoded_point(false).as_bytes()).into();
        assert_eq!(key_sha256(&k), want);
    }
}
