//! Every signature verification of fenced-run in one small module: ECDSA P-256/SHA-256 (fixed r||s or DER) over
//! `ring`; ECDSA P-384/SHA-384, RSASSA-PSS SHA-384 with AMD's parameters and strict Ed25519 over `aws-lc-rs`.
//!
//! Each algorithm goes to the library that measured faster for it (`docs/benchmarks.md`, "ring against
//! aws-lc-rs" and "One thread, one static binary"): aws-lc is four times faster for P-384 and faster for RSA and
//! Ed25519; for P-256 the arithmetic of both is the same, but ring allocates nothing, where aws-lc's C allocations
//! went through musl's malloc in the static verifier and cost a `mmap`/`munmap` pair per check.
//!
//! Encodings are parsed exactly as before with the RustCrypto types (so what is refused, and the message, stay the
//! same), and the RSA key is held to the rules ring applies; only the arithmetic is the libraries'.
//!
//! On `wasm32` (the browser's check, `verifier-wasm`), where neither ring nor aws-lc builds, the same functions
//! do the arithmetic with the pure-Rust RustCrypto crates (`p256`, `p384`, `rsa`, `ed25519-dalek`) in
//! [`rustcrypto`]: the parsing and the refusals before the arithmetic are shared, and the unit tests below run
//! every case through both backends natively, so that the two accept and refuse the same inputs.

#[cfg(not(target_arch = "wasm32"))]
use aws_lc_rs::signature::{self as als, UnparsedPublicKey};
use der::Decode as _;
use std::fmt;

/// Why a signature did not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SigError {
    /// The public key is not a valid key of the algorithm (e.g. not a point on the curve).
    Key(String),
    /// The signature is not well-formed (bad DER, a scalar out of range, wrong length, a small-order R).
    Malformed(String),
    /// The signature is well-formed but does not verify over the message with the key.
    Mismatch,
}

impl fmt::Display for SigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigError::Key(e) => write!(f, "public key: {e}"),
            SigError::Malformed(e) => write!(f, "malformed signature: {e}"),
            SigError::Mismatch => f.write_str("signature does not verify"),
        }
    }
}

impl std::error::Error for SigError {}

/// A P-256 public key, checked to be a point on the curve, kept as its uncompressed SEC1 encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct P256Key([u8; 65]);

impl P256Key {
    /// A key from SEC1 bytes (compressed or uncompressed); refuses anything that is not a point on P-256.
    pub fn from_sec1(bytes: &[u8]) -> Result<P256Key, SigError> {
        let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes)
            .map_err(|_| SigError::Key("not a P-256 point".into()))?;
        let point = key.to_encoded_point(false);
        let mut out = [0u8; 65];
        out.copy_from_slice(point.as_bytes());
        Ok(P256Key(out))
    }

    /// A key from raw x || y (64 bytes), as a TDX quote carries its attestation key.
    pub fn from_raw_xy(xy: &[u8; 64]) -> Result<P256Key, SigError> {
        let mut sec1 = [0u8; 65];
        sec1[0] = 4;
        sec1[1..].copy_from_slice(xy);
        P256Key::from_sec1(&sec1)
    }

    /// The uncompressed SEC1 encoding (0x04 || x || y).
    pub fn sec1(&self) -> &[u8; 65] {
        &self.0
    }
}

/// A P-384 public key, checked to be a point on the curve, kept as its uncompressed SEC1 encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct P384Key([u8; 97]);

impl P384Key {
    /// A key from SEC1 bytes (compressed or uncompressed); refuses anything that is not a point on P-384.
    pub fn from_sec1(bytes: &[u8]) -> Result<P384Key, SigError> {
        let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(bytes)
            .map_err(|_| SigError::Key("not a P-384 point".into()))?;
        let point = key.to_encoded_point(false);
        let mut out = [0u8; 97];
        out.copy_from_slice(point.as_bytes());
        Ok(P384Key(out))
    }

    /// The uncompressed SEC1 encoding (0x04 || x || y).
    pub fn sec1(&self) -> &[u8; 97] {
        &self.0
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn lc_verify(
    alg: &'static dyn als::VerificationAlgorithm,
    key: &[u8],
    msg: &[u8],
    sig: &[u8],
) -> Result<(), SigError> {
    // aws-lc probes the CPU here, on first use, where the static verifier is built without aws-lc's load-time
    // constructor (scripts/build-verifier.sh); elsewhere the constructor has done it and this does nothing.
    aws_lc_rs::init();
    UnparsedPublicKey::new(alg, key)
        .verify(msg, sig)
        .map_err(|_| SigError::Mismatch)
}

/// ECDSA P-256 with SHA-256 over `msg`, the signature as fixed r || s (64 bytes, each scalar in 1..n).
pub fn p256_sha256_fixed(key: &P256Key, msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
    let parsed = p256::ecdsa::Signature::from_slice(sig)
        .map_err(|e| SigError::Malformed(format!("not r||s P-256: {e}")))?;
    p256_verify(&key.0, msg, &parsed.to_bytes())
}

/// ECDSA P-256/SHA-256 over `msg` by an uncompressed SEC1 key, the signature as fixed r || s: ring natively,
/// RustCrypto on wasm32.
fn p256_verify(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
    #[cfg(not(target_arch = "wasm32"))]
    return ring_p256(key, msg, sig);
    #[cfg(target_arch = "wasm32")]
    return rustcrypto::p256(key, msg, sig);
}

/// ring's ECDSA P-256/SHA-256 over `msg` by an uncompressed SEC1 key, the signature as fixed r || s.
#[cfg(not(target_arch = "wasm32"))]
fn ring_p256(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, key)
        .verify(msg, sig)
        .map_err(|_| SigError::Mismatch)
}

/// ECDSA P-256 with SHA-256 over `msg`, the signature DER-encoded (strict DER, as X.509 and CRLs carry it).
pub fn p256_sha256_der(key: &P256Key, msg: &[u8], der: &[u8]) -> Result<(), SigError> {
    let parsed = p256::ecdsa::Signature::from_der(der)
        .map_err(|e| SigError::Malformed(format!("not DER ECDSA: {e}")))?;
    p256_verify(&key.0, msg, &parsed.to_bytes())
}

/// ECDSA P-384 with SHA-384 over `msg`, the signature as big-endian r and s (48 bytes each, each in 1..n).
pub fn p384_sha384_scalars(
    key: &P384Key,
    msg: &[u8],
    r: &[u8; 48],
    s: &[u8; 48],
) -> Result<(), SigError> {
    let parsed = p384::ecdsa::Signature::from_scalars(*r, *s)
        .map_err(|_| SigError::Malformed("R or S is not a valid P-384 scalar".into()))?;
    #[cfg(not(target_arch = "wasm32"))]
    return lc_verify(
        &als::ECDSA_P384_SHA384_FIXED,
        &key.0,
        msg,
        &parsed.to_bytes(),
    );
    #[cfg(target_arch = "wasm32")]
    return rustcrypto::p384(&key.0, msg, &parsed.to_bytes());
}

/// RSASSA-PSS over `msg` with SHA-384, MGF1-SHA-384, a salt of exactly 48 bytes and trailer 0xBC (AMD's
/// parameters), by the RSA key `pkcs1_der` (an RSAPublicKey, as in a SubjectPublicKeyInfo's bit string).
///
/// The PSS verification requires the salt length to equal the digest length (48 for SHA-384) and checks the
/// zero padding, the 0x01 separator and the trailer byte: a signature with any other salt length fails. The
/// caller checks the modulus size it wants (AMD: 4096 bits); this accepts 2048 to 8192.
///
/// The key must be exactly one strict-DER RSAPublicKey (RFC 8017) with an odd modulus and an odd exponent in
/// 3..2^33, as ring required: aws-lc-rs alone would also take a whole SubjectPublicKeyInfo here.
pub fn rsa_pss_sha384(pkcs1_der: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
    check_rsa_public_key(pkcs1_der)?;
    #[cfg(not(target_arch = "wasm32"))]
    return lc_verify(&als::RSA_PSS_2048_8192_SHA384, pkcs1_der, msg, sig);
    #[cfg(target_arch = "wasm32")]
    return rustcrypto::rsa_pss_sha384(pkcs1_der, msg, sig);
}

/// ring's rules for an RSA verification key, kept when moving to aws-lc-rs (see [`rsa_pss_sha384`]).
fn check_rsa_public_key(pkcs1_der: &[u8]) -> Result<(), SigError> {
    let key = rsa::pkcs1::RsaPublicKey::from_der(pkcs1_der)
        .map_err(|e| SigError::Key(format!("not one DER RSAPublicKey: {e}")))?;
    let n = key.modulus.as_bytes();
    let e = key.public_exponent.as_bytes();
    if n.last().is_none_or(|b| b & 1 == 0) {
        return Err(SigError::Key("RSA modulus is even".into()));
    }
    let e_value = e.iter().try_fold(0u64, |acc, b| {
        acc.checked_mul(256).map(|v| v | u64::from(*b))
    });
    match e_value {
        Some(v) if v & 1 == 1 && (3..1u64 << 33).contains(&v) => Ok(()),
        _ => Err(SigError::Key(
            "RSA public exponent is not odd and in 3..2^33".into(),
        )),
    }
}

/// Strict Ed25519 (RFC 8032 with the checks of ed25519-dalek's `verify_strict`): the key must be a point and
/// not of small order, R must not be of small order, S must be canonical, and [S]B = R + [k]A exactly.
pub fn ed25519_strict(public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> Result<(), SigError> {
    let key = ed25519_dalek::VerifyingKey::from_bytes(public)
        .map_err(|_| SigError::Key("not an Ed25519 point".into()))?;
    if key.is_weak() {
        return Err(SigError::Key("an Ed25519 key of small order".into()));
    }
    let mut r = [0u8; 32];
    r.copy_from_slice(&sig[..32]);
    match curve25519_dalek::edwards::CompressedEdwardsY(r).decompress() {
        Some(p) if !p.is_small_order() => {}
        Some(_) => return Err(SigError::Malformed("R is a point of small order".into())),
        None => return Err(SigError::Malformed("R is not a point".into())),
    }
    #[cfg(not(target_arch = "wasm32"))]
    return lc_verify(&als::ED25519, public, msg, sig);
    #[cfg(target_arch = "wasm32")]
    return rustcrypto::ed25519(&key, msg, sig);
}

/// The pure-Rust arithmetic of wasm32, after the shared parsing and refusals above (compiled natively for the
/// tests, which hold it to the native backend).
#[cfg(any(target_arch = "wasm32", test))]
mod rustcrypto {
    use super::SigError;
    use signature::Verifier as _;

    /// ECDSA P-256/SHA-256, an uncompressed SEC1 key already checked, r || s already checked to be scalars.
    pub(super) fn p256(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
        let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(key)
            .map_err(|_| SigError::Key("not a P-256 point".into()))?;
        let sig = p256::ecdsa::Signature::from_slice(sig)
            .map_err(|e| SigError::Malformed(format!("not r||s P-256: {e}")))?;
        key.verify(msg, &sig).map_err(|_| SigError::Mismatch)
    }

    /// ECDSA P-384/SHA-384, as [`p256`].
    pub(super) fn p384(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
        let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(key)
            .map_err(|_| SigError::Key("not a P-384 point".into()))?;
        let sig = p384::ecdsa::Signature::from_slice(sig)
            .map_err(|e| SigError::Malformed(format!("not r||s P-384: {e}")))?;
        key.verify(msg, &sig).map_err(|_| SigError::Mismatch)
    }

    /// RSASSA-PSS SHA-384, MGF1-SHA-384, salt exactly 48 bytes, by a key that passed `check_rsa_public_key`;
    /// the modulus must be 2048 to 8192 bits, as aws-lc's `RSA_PSS_2048_8192_SHA384` requires.
    pub(super) fn rsa_pss_sha384(pkcs1_der: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), SigError> {
        use der::Decode as _;
        let parsed = rsa::pkcs1::RsaPublicKey::from_der(pkcs1_der)
            .map_err(|e| SigError::Key(format!("not one DER RSAPublicKey: {e}")))?;
        let n = rsa::BigUint::from_bytes_be(parsed.modulus.as_bytes());
        let e = rsa::BigUint::from_bytes_be(parsed.public_exponent.as_bytes());
        if !(2048..=8192).contains(&n.bits()) {
            return Err(SigError::Mismatch);
        }
        let key = rsa::RsaPublicKey::new_with_max_size(n, e, 8192)
            .map_err(|e| SigError::Key(format!("RSA key: {e}")))?;
        let sig = rsa::pss::Signature::try_from(sig).map_err(|_| SigError::Mismatch)?;
        rsa::pss::VerifyingKey::<sha2::Sha384>::new_with_salt_len(key, 48)
            .verify(msg, &sig)
            .map_err(|_| SigError::Mismatch)
    }

    /// Strict Ed25519 by a key already checked not to be weak, R already checked not of small order.
    pub(super) fn ed25519(
        key: &ed25519_dalek::VerifyingKey,
        msg: &[u8],
        sig: &[u8; 64],
    ) -> Result<(), SigError> {
        key.verify_strict(msg, &ed25519_dalek::Signature::from_bytes(sig))
            .map_err(|_| SigError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;

    /// The wasm32 arithmetic ([`rustcrypto`]) gives the native backend's answer on every case: good signatures,
    /// another message, the other S of the same signature, RSA with other salt lengths or digest, a flipped bit.
    #[test]
    fn rustcrypto_backend_agrees_with_native() {
        use rsa::pkcs1::EncodeRsaPublicKey;
        use rsa::signature::{RandomizedSigner, SignatureEncoding};
        fn flip(v: &[u8], i: usize) -> Vec<u8> {
            let mut v = v.to_vec();
            v[i] ^= 1;
            v
        }
        // P-256: both S of one signature, another message, a flipped bit.
        let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("key");
        let key = P256Key::from_sec1(sk.verifying_key().to_sec1_bytes().as_ref()).expect("pk");
        let sig: p256::ecdsa::Signature = sk.sign(b"msg");
        let (r, s) = sig.split_scalars();
        let other_s = p256::ecdsa::Signature::from_scalars(r, -*s).expect("sig");
        for (msg, sig) in [
            (&b"msg"[..], sig.to_bytes().to_vec()),
            (b"msg", other_s.to_bytes().to_vec()),
            (b"msh", sig.to_bytes().to_vec()),
            (b"msg", flip(&sig.to_bytes(), 40)),
        ] {
            assert_eq!(
                rustcrypto::p256(key.sec1(), msg, &sig),
                ring_p256(key.sec1(), msg, &sig)
            );
        }
        // P-384.
        let sk = p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).expect("key");
        let key = P384Key::from_sec1(sk.verifying_key().to_sec1_bytes().as_ref()).expect("pk");
        let sig: p384::ecdsa::Signature = sk.sign(b"report");
        let (r, s) = sig.split_scalars();
        let other_s = p384::ecdsa::Signature::from_scalars(r, -*s).expect("sig");
        for (msg, sig) in [
            (&b"report"[..], sig.to_bytes().to_vec()),
            (b"report", other_s.to_bytes().to_vec()),
            (b"reporu", sig.to_bytes().to_vec()),
            (b"report", flip(&sig.to_bytes(), 60)),
        ] {
            let native = lc_verify(&als::ECDSA_P384_SHA384_FIXED, key.sec1(), msg, &sig);
            assert_eq!(rustcrypto::p384(key.sec1(), msg, &sig), native);
        }
        // RSA-PSS: AMD's salt and others, SHA-256, a flipped bit, a 1024-bit key (below aws-lc's 2048).
        let mut rng = rand::thread_rng();
        for bits in [2048, 1024] {
            let key = rsa::RsaPrivateKey::new(&mut rng, bits).expect("key");
            let public = key
                .to_public_key()
                .to_pkcs1_der()
                .expect("der")
                .as_bytes()
                .to_vec();
            let mut cases = Vec::new();
            for salt in [48, 0, 32, 64] {
                let sig =
                    rsa::pss::SigningKey::<sha2::Sha384>::new_with_salt_len(key.clone(), salt)
                        .sign_with_rng(&mut rng, b"tbs")
                        .to_vec();
                cases.push((&b"tbs"[..], flip(&sig, 100)));
                cases.push((b"tbs", sig.clone()));
                cases.push((b"tbt", sig));
            }
            let sha256 = rsa::pss::SigningKey::<sha2::Sha256>::new_with_salt_len(key.clone(), 48)
                .sign_with_rng(&mut rng, b"tbs")
                .to_vec();
            cases.push((b"tbs", sha256));
            for (i, (msg, sig)) in cases.iter().enumerate() {
                let native = lc_verify(&als::RSA_PSS_2048_8192_SHA384, &public, msg, sig);
                assert_eq!(
                    rustcrypto::rsa_pss_sha384(&public, msg, sig),
                    native,
                    "{bits} bits, case {i}"
                );
            }
        }
        // Ed25519.
        use ed25519_dalek::Signer;
        let sk = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
        let sig = sk.sign(b"set").to_bytes();
        let mut flipped = sig;
        flipped[40] ^= 1;
        for (msg, sig) in [(&b"set"[..], sig), (b"seu", sig), (b"set", flipped)] {
            let native = lc_verify(&als::ED25519, &sk.verifying_key().to_bytes(), msg, &sig);
            assert_eq!(rustcrypto::ed25519(&sk.verifying_key(), msg, &sig), native);
        }
    }

    #[test]
    fn p256_good_bad_and_malformed() {
        let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("key");
        let key = P256Key::from_sec1(sk.verifying_key().to_sec1_bytes().as_ref()).expect("pk");
        let sig: p256::ecdsa::Signature = sk.sign(b"msg");
        assert_eq!(p256_sha256_fixed(&key, b"msg", &sig.to_bytes()), Ok(()));
        assert_eq!(
            p256_sha256_der(&key, b"msg", sig.to_der().as_bytes()),
            Ok(())
        );
        assert_eq!(
            p256_sha256_fixed(&key, b"msh", &sig.to_bytes()),
            Err(SigError::Mismatch)
        );
        assert!(matches!(
            p256_sha256_fixed(&key, b"msg", &[0u8; 64]),
            Err(SigError::Malformed(_))
        ));
        assert!(matches!(
            p256_sha256_der(&key, b"msg", &sig.to_bytes()),
            Err(SigError::Malformed(_))
        ));
        let mut xy = [0u8; 64];
        xy[0] = 1;
        assert!(matches!(P256Key::from_raw_xy(&xy), Err(SigError::Key(_))));
    }

    #[test]
    fn p384_good_and_bad() {
        let sk = p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).expect("key");
        let key = P384Key::from_sec1(sk.verifying_key().to_sec1_bytes().as_ref()).expect("pk");
        let sig: p384::ecdsa::Signature = sk.sign(b"report");
        let (r, s) = sig.split_bytes();
        let (r, s): ([u8; 48], [u8; 48]) = (r.into(), s.into());
        assert_eq!(p384_sha384_scalars(&key, b"report", &r, &s), Ok(()));
        assert_eq!(
            p384_sha384_scalars(&key, b"reporu", &r, &s),
            Err(SigError::Mismatch)
        );
        assert!(matches!(
            p384_sha384_scalars(&key, b"report", &[0xff; 48], &s),
            Err(SigError::Malformed(_))
        ));
    }

    #[test]
    fn rsa_pss_requires_salt_48_and_sha384() {
        use rsa::pkcs1::EncodeRsaPublicKey;
        use rsa::signature::{RandomizedSigner, SignatureEncoding};
        let mut rng = rand::thread_rng();
        let key = rsa::RsaPrivateKey::new(&mut rng, 2048).expect("key");
        let public = key
            .to_public_key()
            .to_pkcs1_der()
            .expect("der")
            .as_bytes()
            .to_vec();
        let mut sign = |salt: usize| {
            rsa::pss::SigningKey::<sha2::Sha384>::new_with_salt_len(key.clone(), salt)
                .sign_with_rng(&mut rng, b"tbs")
                .to_vec()
        };
        assert_eq!(rsa_pss_sha384(&public, b"tbs", &sign(48)), Ok(()));
        assert_eq!(
            rsa_pss_sha384(&public, b"tbt", &sign(48)),
            Err(SigError::Mismatch)
        );
        // AMD signs with a 48-byte salt; any other length is refused, shorter or longer.
        for salt in [0, 32, 64] {
            assert_eq!(
                rsa_pss_sha384(&public, b"tbs", &sign(salt)),
                Err(SigError::Mismatch),
                "salt {salt}"
            );
        }
        let sha256 = rsa::pss::SigningKey::<sha2::Sha256>::new_with_salt_len(key.clone(), 48)
            .sign_with_rng(&mut rng, b"tbs")
            .to_vec();
        assert_eq!(
            rsa_pss_sha384(&public, b"tbs", &sha256),
            Err(SigError::Mismatch)
        );
    }

    #[test]
    fn rsa_key_must_be_one_rsapublickey_with_odd_n_and_e() {
        use rsa::pkcs1::EncodeRsaPublicKey;
        use rsa::pkcs8::EncodePublicKey;
        use rsa::signature::{RandomizedSigner, SignatureEncoding};
        let mut rng = rand::thread_rng();
        let key = rsa::RsaPrivateKey::new(&mut rng, 2048).expect("key");
        let public = key.to_public_key();
        let sig = rsa::pss::SigningKey::<sha2::Sha384>::new_with_salt_len(key.clone(), 48)
            .sign_with_rng(&mut rng, b"tbs")
            .to_vec();
        let pkcs1 = public.to_pkcs1_der().expect("der").as_bytes().to_vec();
        assert_eq!(rsa_pss_sha384(&pkcs1, b"tbs", &sig), Ok(()));
        // The same key as a SubjectPublicKeyInfo: aws-lc-rs would take it, the strict check does not.
        let spki = public
            .to_public_key_der()
            .expect("spki")
            .as_bytes()
            .to_vec();
        assert!(matches!(
            rsa_pss_sha384(&spki, b"tbs", &sig),
            Err(SigError::Key(_))
        ));
        // Trailing bytes after the RSAPublicKey.
        let mut trailing = pkcs1.clone();
        trailing.push(0);
        assert!(matches!(
            rsa_pss_sha384(&trailing, b"tbs", &sig),
            Err(SigError::Key(_))
        ));
        let with = |n: &rsa::BigUint, e: &rsa::BigUint| {
            let (n, e) = (n.to_bytes_be(), e.to_bytes_be());
            rsa::pkcs1::RsaPublicKey {
                modulus: rsa::pkcs1::UintRef::new(&n).expect("n"),
                public_exponent: rsa::pkcs1::UintRef::new(&e).expect("e"),
            }
            .to_der()
            .expect("der")
        };
        use der::Encode as _;
        use rsa::traits::PublicKeyParts;
        let (n, e) = (public.n().clone(), public.e().clone());
        let even_n = &n + 1u32;
        let even_e = rsa::BigUint::from(65536u32);
        let huge_e = rsa::BigUint::from((1u64 << 33) + 1);
        for (what, der) in [
            ("even modulus", with(&even_n, &e)),
            ("even exponent", with(&n, &even_e)),
            ("exponent 1", with(&n, &rsa::BigUint::from(1u32))),
            ("exponent above 2^33", with(&n, &huge_e)),
        ] {
            assert!(
                matches!(rsa_pss_sha384(&der, b"tbs", &sig), Err(SigError::Key(_))),
                "{what}"
            );
        }
        assert_eq!(rsa_pss_sha384(&with(&n, &e), b"tbs", &sig), Ok(()));
    }

    #[test]
    fn ed25519_strict_refuses_small_order_r_and_weak_keys() {
        use ed25519_dalek::Signer;
        let sk = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
        let pk = sk.verifying_key().to_bytes();
        let sig = sk.sign(b"set").to_bytes();
        assert_eq!(ed25519_strict(&pk, b"set", &sig), Ok(()));
        assert_eq!(ed25519_strict(&pk, b"seu", &sig), Err(SigError::Mismatch));
        // The identity point (y = 1) has order 1: as R it is refused before any arithmetic, as a key too.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let mut small_r = sig;
        small_r[..32].copy_from_slice(&identity);
        assert!(matches!(
            ed25519_strict(&pk, b"set", &small_r),
            Err(SigError::Malformed(_))
        ));
        assert!(matches!(
            ed25519_strict(&identity, b"set", &sig),
            Err(SigError::Key(_))
        ));
    }
}
