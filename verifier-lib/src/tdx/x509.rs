//! Certificates and CRLs of the Intel PKI: PEM/DER parsing, ECDSA P-256 SHA-256 signature checks (through
//! [`attestation::sig`], over aws-lc-rs) over the exact TBS bytes, validity windows, serial numbers, and the pinned
//! root key.
//! Intel's whole SGX/TDX PKI (root, PCK CAs, TCB signing) uses ecdsa-with-SHA256 on P-256.

use attestation::sig::{self, P256Key, SigError};
use std::ops::Range;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;
use x509_parser::x509::X509Name;

/// SHA-256 of the SubjectPublicKeyInfo (DER) of the Intel SGX Root CA, the trust anchor of every PCK chain
/// and of the TCB signing chain. Computed from `../shared/vectors/tdx/roots/intel_sgx_root_ca.pem`.
pub const INTEL_SGX_ROOT_CA_SPKI_SHA256: [u8; 32] = [
    0xa0, 0xaf, 0x03, 0x12, 0x89, 0xf5, 0xd5, 0xd4, 0x13, 0x2f, 0x91, 0x86, 0x06, 0x8a, 0x7f, 0xc1,
    0x36, 0x28, 0x63, 0x3b, 0xa2, 0x35, 0x77, 0x74, 0x72, 0xe2, 0x9b, 0x6b, 0x6c, 0x67, 0xa4, 0x9e,
];

/// A certificate kept as DER, with what the verification reads of it taken out once, when it is parsed
/// (x509-parser borrows from the DER, so a full parsed view is made again only by [`Cert::parsed`], for the
/// path rules and the SGX extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cert {
    der: Vec<u8>,
    spki_sha256: [u8; 32],
    key: Option<P256Key>,
    validity: (i64, i64),
    serial: Vec<u8>,
    issuer_raw: Range<usize>,
    subject_raw: Range<usize>,
    tbs: Range<usize>,
    signature: Vec<u8>,
    /// The signature algorithm's OID, its DER content bytes.
    algorithm: Vec<u8>,
}

/// The DER content bytes of the OID ecdsa-with-SHA256 (1.2.840.10045.4.3.2, unit test
/// `the_algorithm_oid_is_ecdsa_with_sha256`).
const ECDSA_WITH_SHA256_DER: [u8; 8] = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];

/// The dotted form of an OID given by its DER content bytes (for messages).
fn oid_string(der: &[u8]) -> String {
    x509_parser::der_parser::oid::Oid::new(der.into()).to_id_string()
}

/// A DER Name as an RFC 4514-ish string (for messages), or its hex when it does not parse.
fn name_string(raw: &[u8]) -> String {
    X509Name::from_der(raw)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|_| hex::encode(raw))
}

/// How many parsed certificates a thread keeps to answer [`Cert::from_der`] for the same DER again (a TDX
/// quote and its collateral carry Intel's root four times, the PCK CA and the TCB Signing certificate twice).
const PARSED_KEPT: usize = 16;

thread_local! {
    static PARSED: std::cell::RefCell<Vec<Cert>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where `part` (a slice x509-parser returned) sits inside `whole` (the slice it parsed); `None` if it is not
/// inside it (x509-parser borrows these parts from its input, so that would be a parser change, reported as an
/// unreadable certificate rather than trusted).
fn range_in(whole: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some(start..end)
}

/// The value of a parse that must consume its whole input: bytes after it, or a parse error, name `what`.
fn exactly<T>(
    what: &str,
    kind: &str,
    parsed: x509_parser::error::X509Result<'_, T>,
) -> Result<T, X509Error> {
    match parsed {
        Ok(([], value)) => Ok(value),
        Ok(_) => Err(X509Error::Der {
            what: what.into(),
            detail: format!("bytes after the {kind}"),
        }),
        Err(e) => Err(X509Error::Der {
            what: what.into(),
            detail: crate::pki::der_error(&e),
        }),
    }
}

/// The ranges of a certificate's or CRL's parts, or the error naming `what` when one is not inside the DER.
fn ranges<const N: usize>(
    what: &str,
    der: &[u8],
    parts: [&[u8]; N],
) -> Result<[Range<usize>; N], X509Error> {
    let mut out: [Range<usize>; N] = std::array::from_fn(|_| 0..0);
    for (slot, part) in out.iter_mut().zip(parts) {
        *slot = range_in(der, part).ok_or_else(|| X509Error::Der {
            what: what.into(),
            detail: "a parsed part lies outside the DER".into(),
        })?;
    }
    Ok(out)
}

/// Why a certificate or CRL could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum X509Error {
    /// PEM armour could not be read.
    #[error("{what}: PEM not readable: {detail}")]
    Pem {
        /// Which input.
        what: String,
        /// The parser's message.
        detail: String,
    },
    /// DER could not be parsed as a certificate or CRL.
    #[error("{what}: DER not readable: {detail}")]
    Der {
        /// Which input.
        what: String,
        /// The parser's message.
        detail: String,
    },
    /// A chain was empty.
    #[error("{0}: no certificate found")]
    Empty(String),
    /// A certificate or CRL is not signed by the issuer given, or does not name it (the text says which).
    #[error("{0}")]
    Signature(String),
}

impl Cert {
    /// Parses (to check) and keeps one DER certificate. The same DER parsed again on this thread is answered
    /// from the last [`PARSED_KEPT`] parsed (everything a `Cert` holds is a function of its DER alone).
    pub fn from_der(what: &str, der: &[u8]) -> Result<Self, X509Error> {
        if let Some(c) = PARSED.with(|p| p.borrow().iter().find(|c| c.der == der).cloned()) {
            return Ok(c);
        }
        let c = Self::parse(what, der)?;
        PARSED.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() >= PARSED_KEPT {
                p.remove(0);
            }
            p.push(c.clone());
        });
        Ok(c)
    }

    fn parse(what: &str, der: &[u8]) -> Result<Self, X509Error> {
        let c = exactly(what, "certificate", X509Certificate::from_der(der))?;
        let spki = c.public_key();
        let [issuer_raw, subject_raw, tbs] = ranges(
            what,
            der,
            [
                c.issuer().as_raw(),
                c.subject().as_raw(),
                c.tbs_certificate.as_ref(),
            ],
        )?;
        Ok(Cert {
            spki_sha256: crate::digest::sha256(&[spki.raw]),
            key: P256Key::from_sec1(&spki.subject_public_key.data).ok(),
            validity: (
                c.validity().not_before.timestamp(),
                c.validity().not_after.timestamp(),
            ),
            serial: strip_zeros(c.raw_serial()),
            issuer_raw,
            subject_raw,
            tbs,
            signature: c.signature_value.data.to_vec(),
            algorithm: c.signature_algorithm.algorithm.as_bytes().to_vec(),
            der: der.to_vec(),
        })
    }

    /// The DER bytes, exactly as received.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// A full parsed view (parses the DER again: for the path rules and the extensions).
    pub fn parsed(&self) -> X509Certificate<'_> {
        // Checked in `from_der`; the DER never changes afterwards.
        match X509Certificate::from_der(&self.der) {
            Ok((_, c)) => c,
            Err(_) => unreachable_parse(),
        }
    }

    /// SHA-256 of the SubjectPublicKeyInfo DER.
    pub fn spki_sha256(&self) -> [u8; 32] {
        self.spki_sha256
    }

    /// The subject as an RFC 4514-ish string.
    pub fn subject(&self) -> String {
        name_string(self.subject_raw())
    }

    /// The DER of the subject name.
    pub fn subject_raw(&self) -> &[u8] {
        &self.der[self.subject_raw.clone()]
    }

    /// The DER of the issuer name.
    pub fn issuer_raw(&self) -> &[u8] {
        &self.der[self.issuer_raw.clone()]
    }

    /// The serial number, big-endian, without leading zero bytes.
    pub fn serial(&self) -> Vec<u8> {
        self.serial.clone()
    }

    /// The P-256 public key, if the certificate holds one.
    pub fn p256_key(&self) -> Option<P256Key> {
        self.key.clone()
    }

    /// The validity window as unix seconds.
    pub fn validity(&self) -> (i64, i64) {
        self.validity
    }

    /// Whether `issuer` signed this certificate (ecdsa-with-SHA256, P-256) and names it as issuer.
    pub fn signed_by(&self, issuer: &Cert) -> Result<(), X509Error> {
        self.signed_by_str(issuer).map_err(X509Error::Signature)
    }

    pub(crate) fn signed_by_str(&self, issuer: &Cert) -> Result<(), String> {
        if self.issuer_raw() != issuer.subject_raw() {
            return Err(format!(
                "issuer name {} is not the subject {} of the next certificate",
                name_string(self.issuer_raw()),
                issuer.subject()
            ));
        }
        if self.der == issuer.der && crate::anchors::self_signature_known_good(&self.der) {
            // Intel's own root, byte for byte: its self-signature is known good (crate::anchors).
            return Ok(());
        }
        signed_with(
            &self.algorithm,
            issuer,
            &self.der[self.tbs.clone()],
            &self.signature,
        )
    }

    /// The self-signature checked with the key, whatever the root (the test of the pinned roots' hashes).
    #[cfg(test)]
    pub(crate) fn verify_self_signature_fully(&self) -> Result<(), String> {
        signed_with(
            &self.algorithm,
            self,
            &self.der[self.tbs.clone()],
            &self.signature,
        )
    }
}

/// ecdsa-with-SHA256 by `issuer`'s P-256 key over `tbs`: what certificates and CRLs of this PKI carry.
fn signed_with(
    algorithm: &[u8],
    issuer: &Cert,
    tbs: &[u8],
    signature: &[u8],
) -> Result<(), String> {
    if algorithm != ECDSA_WITH_SHA256_DER {
        return Err(format!(
            "signature algorithm {} is not ecdsa-with-SHA256",
            oid_string(algorithm)
        ));
    }
    let key = issuer
        .key
        .as_ref()
        .ok_or_else(|| "issuer key is not a P-256 key".to_string())?;
    verify_der_sig(key, tbs, signature)
}

#[cold]
fn unreachable_parse() -> ! {
    // `Cert` is only built by `from_der`, which parsed the same bytes successfully.
    panic!("certificate DER changed after it was checked")
}

fn sig_message(e: SigError) -> String {
    match e {
        SigError::Malformed(m) => format!("signature is {m}"),
        SigError::Key(m) => m,
        _ => "signature does not verify".to_string(),
    }
}

/// ECDSA P-256/SHA-256, the signature DER-encoded, by the key as uncompressed SEC1 bytes (a [`crate::sigcache::Check`]).
fn check_p256_der(key: &[u8], msg: &[u8], der_sig: &[u8]) -> Result<(), String> {
    let key = P256Key::from_sec1(key).map_err(sig_message)?;
    sig::p256_sha256_der(&key, msg, der_sig).map_err(sig_message)
}

/// ECDSA P-256/SHA-256, the signature as fixed r || s, by the key as uncompressed SEC1 bytes (a
/// [`crate::sigcache::Check`]).
fn check_p256_fixed(key: &[u8], msg: &[u8], raw: &[u8]) -> Result<(), String> {
    let key = P256Key::from_sec1(key).map_err(sig_message)?;
    sig::p256_sha256_fixed(&key, msg, raw).map_err(sig_message)
}

/// Verifies a DER-encoded ECDSA signature over `msg` (hashed with SHA-256); certificates and CRLs sign this
/// way, so an active [`crate::Verifier`] remembers the result.
pub(crate) fn verify_der_sig(key: &P256Key, msg: &[u8], der_sig: &[u8]) -> Result<(), String> {
    crate::sigcache::memo(
        "ecdsa-p256-sha256-der",
        key.sec1(),
        msg,
        der_sig,
        check_p256_der,
    )
}

/// Verifies a raw r || s (64 bytes) ECDSA P-256 signature over `msg` (hashed with SHA-256); for a quote's own
/// signature, which no other quote shares, so a [`crate::Verifier`] does not remember it.
pub(crate) fn verify_raw_sig(key: &P256Key, msg: &[u8], raw: &[u8]) -> Result<(), String> {
    sig::p256_sha256_fixed(key, msg, raw).map_err(sig_message)
}

/// As [`verify_raw_sig`], remembered by an active [`crate::Verifier`]: for what many quotes of one platform share
/// (the QE report, TCB Info, QE Identity), never for a quote's own signature.
pub(crate) fn verify_raw_sig_shared(key: &P256Key, msg: &[u8], raw: &[u8]) -> Result<(), String> {
    crate::sigcache::memo(
        "ecdsa-p256-sha256-fixed",
        key.sec1(),
        msg,
        raw,
        check_p256_fixed,
    )
}

/// A P-256 key from raw x || y (64 bytes), as the quote carries the attestation key.
pub fn p256_from_raw(xy: &[u8; 64]) -> Option<P256Key> {
    P256Key::from_raw_xy(xy).ok()
}

/// Strips leading zero bytes (DER integers carry one when the top bit is set).
pub fn strip_zeros(b: &[u8]) -> Vec<u8> {
    let i = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    b[i..].to_vec()
}

/// The bytes of `text` without its whitespace (`char::is_whitespace`); byte by byte when it is ASCII.
fn without_whitespace(text: &str) -> Vec<u8> {
    if text.is_ascii() {
        text.bytes()
            .filter(|b| !char::from(*b).is_whitespace())
            .collect()
    } else {
        text.chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .into_bytes()
    }
}

/// Parses a PEM chain (leaf first). Text between certificates (NUL terminators, newlines) is ignored.
pub fn parse_pem_chain(what: &str, pem: &[u8]) -> Result<Vec<Cert>, X509Error> {
    // The QE stores the chain NUL-terminated; x509-parser's PEM reader stops at what it cannot read.
    let text = String::from_utf8_lossy(pem);
    let mut out = Vec::new();
    let begin = "-----BEGIN CERTIFICATE-----";
    let end = "-----END CERTIFICATE-----";
    let mut rest = text.as_ref();
    while let Some(b) = rest.find(begin) {
        let after = &rest[b + begin.len()..];
        let e = after.find(end).ok_or_else(|| X509Error::Pem {
            what: what.into(),
            detail: format!("certificate {} has no END line", out.len()),
        })?;
        let body = without_whitespace(&after[..e]);
        let der = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &body)
            .map_err(|err| X509Error::Pem {
                what: what.into(),
                detail: format!("certificate {}: base64: {err}", out.len()),
            })?;
        out.push(Cert::from_der(&format!("{what}[{}]", out.len()), &der)?);
        rest = &after[e + end.len()..];
    }
    if out.is_empty() {
        return Err(X509Error::Empty(what.into()));
    }
    Ok(out)
}

/// A CRL kept as DER, with its window, issuer, signed part and revoked serials taken out once, when it is
/// parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crl {
    der: Vec<u8>,
    window: (i64, Option<i64>),
    issuer_raw: Range<usize>,
    tbs: Range<usize>,
    signature: Vec<u8>,
    /// The signature algorithm's OID, its DER content bytes.
    algorithm: Vec<u8>,
    /// Revoked serial numbers without leading zeros, sorted (the dates are read again from the DER for the
    /// one a check finds listed).
    revoked: Vec<Vec<u8>>,
}

impl Crl {
    /// Parses (to check) and keeps one DER CRL.
    pub fn from_der(what: &str, der: &[u8]) -> Result<Self, X509Error> {
        let c = exactly(what, "CRL", CertificateRevocationList::from_der(der))?;
        let mut revoked: Vec<Vec<u8>> = c
            .iter_revoked_certificates()
            .map(|r| strip_zeros(r.raw_serial()))
            .collect();
        revoked.sort();
        let [issuer_raw, tbs] = ranges(what, der, [c.issuer().as_raw(), c.tbs_cert_list.as_ref()])?;
        Ok(Crl {
            window: (
                c.last_update().timestamp(),
                c.next_update().map(|t| t.timestamp()),
            ),
            issuer_raw,
            tbs,
            signature: c.signature_value.data.to_vec(),
            algorithm: c.signature_algorithm.algorithm.as_bytes().to_vec(),
            revoked,
            der: der.to_vec(),
        })
    }

    /// The DER bytes, exactly as received.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// A full parsed view (parses the DER again).
    pub fn parsed(&self) -> CertificateRevocationList<'_> {
        match CertificateRevocationList::from_der(&self.der) {
            Ok((_, c)) => c,
            Err(_) => unreachable_parse(),
        }
    }

    /// Whether `issuer` signed this CRL and is named as its issuer.
    pub fn signed_by(&self, issuer: &Cert) -> Result<(), X509Error> {
        self.signed_by_str(issuer).map_err(X509Error::Signature)
    }

    pub(crate) fn signed_by_str(&self, issuer: &Cert) -> Result<(), String> {
        if &self.der[self.issuer_raw.clone()] != issuer.subject_raw() {
            return Err(format!(
                "CRL issuer {} is not {}",
                name_string(&self.der[self.issuer_raw.clone()]),
                issuer.subject()
            ));
        }
        signed_with(
            &self.algorithm,
            issuer,
            &self.der[self.tbs.clone()],
            &self.signature,
        )
    }

    /// thisUpdate and nextUpdate (if any) as unix seconds.
    pub fn window(&self) -> (i64, Option<i64>) {
        self.window
    }

    /// Whether this CRL is the one `cert`'s issuer publishes (CRL issuer name == certificate issuer name).
    pub fn covers(&self, cert: &Cert) -> bool {
        self.der[self.issuer_raw.clone()] == *cert.issuer_raw()
    }

    /// Whether `serial` (no leading zeros) is listed.
    pub fn revokes(&self, serial: &[u8]) -> bool {
        self.revoked
            .binary_search_by(|s| s.as_slice().cmp(serial))
            .is_ok()
    }

    /// The revocation date of `serial` (no leading zeros), if this CRL lists it.
    pub fn revoked_at(&self, serial: &[u8]) -> Option<String> {
        if !self.revokes(serial) {
            return None;
        }
        self.parsed()
            .iter_revoked_certificates()
            .find(|r| strip_zeros(r.raw_serial()) == serial)
            .map(|r| r.revocation_date.to_string())
    }

    /// Number of revoked entries.
    pub fn len(&self) -> usize {
        self.revoked.len()
    }

    /// Whether no certificate is revoked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_taken_out_as_char_is_whitespace_says() {
        for text in ["ab cd\n\r\t\u{b}\u{c}ef", "a\u{a0}b\u{2028}c d", "", " \n"] {
            let want: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            assert_eq!(without_whitespace(text), want.into_bytes(), "{text:?}");
        }
    }

    #[test]
    fn the_algorithm_oid_is_ecdsa_with_sha256() {
        assert_eq!(oid_string(&ECDSA_WITH_SHA256_DER), "1.2.840.10045.4.3.2");
    }

    #[test]
    fn ranges_are_only_those_inside_the_der() {
        let der = [1u8, 2, 3, 4, 5];
        assert_eq!(range_in(&der, &der[1..4]), Some(1..4));
        assert_eq!(range_in(&der, &der[5..]), Some(5..5));
        let elsewhere = [2u8, 3];
        // Equal bytes at another address are not a part of this DER.
        assert_eq!(range_in(&der, &elsewhere), None);
        assert!(matches!(
            ranges("x", &der[..2], [&der[1..4]]),
            Err(X509Error::Der { .. })
        ));
    }
}
