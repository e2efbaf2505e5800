//! The offline collateral bundle: one JSON file with everything one report, quote or evidence needs (the
//! SEV-SNP ARK/ASK/VCEK and CRL; the TDX `collateral.json`), and optional Ed25519 auditor signatures made with
//! the same keys as measurement-set signatures (`measure-guest keygen`) and accepted by the same k-of-n rule:
//! at least k distinct trusted keys, a key counts once, an untrusted or invalid signature does not count.
//!
//! The file is `{"content": {...}, "signatures": [...]}`. What is signed is the text of `content` exactly as it
//! stands in the file (the way Intel signs the text of `tcbInfo`), never a re-encoding of what was parsed from
//! it: a byte changed anywhere in it, whitespace included, voids every signature, and `content` admits no key
//! this version does not know (an unknown key could otherwise ride along unread under valid signatures).

use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::snp::CertBundle;
use crate::tdx::collateral::CollateralFile;

/// Marker of the bundle format (`content.format`).
pub const BUNDLE_FORMAT: &str = "fenced-run-collateral-bundle-v2";
/// The first format: a top-level `format`, signatures over a re-encoding of the parsed fields. Recognised only
/// to say why it is refused.
const BUNDLE_FORMAT_V1: &str = "fenced-run-collateral-bundle-v1";
/// Domain separation prefix of the signed message.
const SIGNING_DOMAIN: &[u8] = b"fenced-run collateral bundle v2\n";

/// SEV-SNP collateral: DER certificates (base64) and an optional CRL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnpPart {
    /// Milan, Genoa or Turin.
    pub product: String,
    /// ARK, base64 DER.
    pub ark: String,
    /// ASK (or ASVK), base64 DER.
    pub ask: String,
    /// VCEK (or VLEK), base64 DER.
    pub vcek: String,
    /// The product's CRL, base64 DER.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crl: Option<String>,
}

/// What is signed: everything but the signatures. Every key is known: one this version does not read is an
/// error, not a field passed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Content {
    /// Always [`BUNDLE_FORMAT`].
    pub format: String,
    /// When it was made (RFC 3339).
    pub created: String,
    /// What the bundle is for (the input's file name and SHA-256).
    pub subject: String,
    /// SEV-SNP part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snp: Option<SnpPart>,
    /// TDX part: `collateral.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdx: Option<CollateralFile>,
    /// The URLs the parts came from.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// One auditor signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleSignature {
    /// Who signed (informational: trust comes from the key).
    pub auditor: String,
    /// Always "ed25519".
    pub algorithm: String,
    /// Public key, hex.
    pub public_key: String,
    /// SHA-256 of the content's text as it stands in the file, hex.
    pub content_sha256: String,
    /// Signature over the domain prefix and that digest, hex.
    pub signature: String,
}

/// The bundle file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The signed content, as parsed from its text as received.
    pub content: Content,
    /// The text of `content` exactly as received (or as [`Bundle::new`] wrote it): what the signatures sign.
    content_text: String,
    /// Auditor signatures.
    pub signatures: Vec<BundleSignature>,
}

/// The file as read: `content` kept as its text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    content: Box<RawValue>,
    #[serde(default)]
    signatures: Vec<BundleSignature>,
}

/// The formats a JSON text names, read without the rest of it: `content.format` (where v2 names itself) and the
/// top-level `format` (where the first format did).
fn named_formats(bytes: &[u8]) -> (Option<String>, Option<String>) {
    #[derive(Deserialize)]
    struct Inner {
        format: Option<String>,
    }
    #[derive(Deserialize)]
    struct F {
        format: Option<String>,
        content: Option<Inner>,
    }
    match serde_json::from_slice::<F>(bytes) {
        Ok(f) => (f.content.and_then(|c| c.format), f.format),
        Err(_) => (None, None),
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(field: &'static str, s: &str) -> Result<Vec<u8>, BundleError> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| BundleError::NotBase64 {
            field,
            detail: e.to_string(),
        })
}

/// Why a collateral bundle could not be used; the text names the field or what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    /// A field that carries DER is not base64.
    #[error("bundle field {field} is not base64: {detail}")]
    NotBase64 {
        /// The field (`snp.ark`, `snp.crl`, ...).
        field: &'static str,
        /// The decoder's message.
        detail: String,
    },
    /// The bytes are not a bundle of this version (not JSON, another format, a missing or extra field).
    #[error("{0}")]
    Malformed(String),
    /// `k` was 0: at least one auditor must be required.
    #[error("auditors required (k) must be at least 1")]
    NoAuditorsRequired,
    /// Fewer than `k` of the trusted auditors signed the content (the text says how many, and why the other
    /// signatures did not count).
    #[error("{0}")]
    NotEnoughSignatures(String),
}

impl SnpPart {
    /// From certificates.
    pub fn new(
        product: attestation::snp::Product,
        certs: &CertBundle,
        crl: Option<&[u8]>,
    ) -> SnpPart {
        SnpPart {
            product: product.name().into(),
            ark: b64(&certs.ark),
            ask: b64(&certs.intermediate),
            vcek: b64(&certs.leaf),
            crl: crl.map(b64),
        }
    }

    /// The certificates.
    pub fn certs(&self) -> Result<CertBundle, BundleError> {
        Ok(CertBundle {
            ark: unb64("snp.ark", &self.ark)?,
            intermediate: unb64("snp.ask", &self.ask)?,
            leaf: unb64("snp.vcek", &self.vcek)?,
        })
    }

    /// The CRL, if carried.
    pub fn crl(&self) -> Result<Option<Vec<u8>>, BundleError> {
        self.crl.as_deref().map(|c| unb64("snp.crl", c)).transpose()
    }
}

/// An auditor key's id as the output names it: `key ` and the first 8 bytes of the Ed25519 public key in hex
/// (the form measurement-set signatures are named by).
pub fn key_id(public_key: &[u8; 32]) -> String {
    format!("key {}", hex::encode(&public_key[..8]))
}

/// The outcome of the k-of-n check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureCheck {
    /// The founder's names of the trusted keys that made valid signatures.
    pub signers: Vec<String>,
    /// The same keys by key id ([`key_id`]), in the same order.
    pub key_ids: Vec<String>,
    /// Signatures that did not count, and why.
    pub problems: Vec<String>,
}

impl Bundle {
    /// A new unsigned bundle; its content text is `content` written as pretty JSON.
    pub fn new(content: Content) -> Bundle {
        let content_text = serde_json::to_string_pretty(&content).unwrap_or_default();
        Bundle {
            content,
            content_text,
            signatures: Vec::new(),
        }
    }

    /// Parses a bundle; the error names what is wrong and where.
    pub fn from_json(bytes: &[u8]) -> Result<Bundle, BundleError> {
        Bundle::parse(bytes).map_err(BundleError::Malformed)
    }

    fn parse(bytes: &[u8]) -> Result<Bundle, String> {
        let wire: Wire = match serde_json::from_slice(bytes) {
            Ok(w) => w,
            Err(e) => {
                if named_formats(bytes).1.as_deref() == Some(BUNDLE_FORMAT_V1) {
                    return Err(format!(
                        "format is {BUNDLE_FORMAT_V1:?}, whose signatures covered a re-encoding of the fields \
                         rather than the text received; this version reads {BUNDLE_FORMAT:?} only: write the \
                         bundle again with `verify-attestation fetch --bundle` and sign it again"
                    ));
                }
                return Err(format!("not a collateral bundle: {e}"));
            }
        };
        let content_text = wire.content.get().to_owned();
        let content: Content = serde_json::from_str(&content_text)
            .map_err(|e| format!("the bundle's content: {e}"))?;
        if content.format != BUNDLE_FORMAT {
            return Err(format!(
                "content.format is {:?}, expected {BUNDLE_FORMAT:?}",
                content.format
            ));
        }
        Ok(Bundle {
            content,
            content_text,
            signatures: wire.signatures,
        })
    }

    /// Whether `bytes` look like a bundle (a `content.format`, or the first format's top-level `format`), not a
    /// bare `collateral.json`.
    pub fn is_bundle(bytes: &[u8]) -> bool {
        // A JSON text with a key `format` holds it as `"format"`, or with a letter written `\uXXXX`; without
        // either it is no bundle, and the whole text need not be parsed to say so.
        // A plain scan: memchr's SIMD search would first ask the CPU what it has (`cpuid`), which on the VMs
        // this runs on costs more than the scan (docs/benchmarks.md, "One thread, one static binary").
        let has = |needle: &[u8]| {
            (0..bytes.len()).any(|i| bytes[i] == needle[0] && bytes[i..].starts_with(needle))
        };
        if !has(b"\"format\"") && !has(b"\\u") {
            return false;
        }
        // A first-format bundle is a bundle too, so that reading it says why it is refused.
        let (content, top) = named_formats(bytes);
        content.as_deref() == Some(BUNDLE_FORMAT) || top.as_deref() == Some(BUNDLE_FORMAT_V1)
    }

    /// The file text: the content's text as it was received (so signatures stay valid), then the signatures.
    pub fn to_json(&self) -> String {
        let signatures = serde_json::to_string_pretty(&self.signatures).unwrap_or_default();
        format!(
            "{{\n\"content\": {},\n\"signatures\": {signatures}\n}}\n",
            self.content_text
        )
    }

    /// SHA-256 of the content's text, the bytes signed.
    pub fn content_digest(&self) -> [u8; 32] {
        crate::digest::sha256(&[self.content_text.as_bytes()])
    }

    fn message(&self) -> Vec<u8> {
        [SIGNING_DOMAIN, &self.content_digest()[..]].concat()
    }

    /// Adds `auditor`'s signature (a second signature by the same key replaces the first).
    pub fn sign(&mut self, key: &SigningKey, auditor: &str) {
        let pk = hex::encode(key.verifying_key().to_bytes());
        self.signatures.retain(|s| s.public_key != pk);
        self.signatures.push(BundleSignature {
            auditor: auditor.into(),
            algorithm: "ed25519".into(),
            public_key: pk,
            content_sha256: hex::encode(self.content_digest()),
            signature: hex::encode(key.sign(&self.message()).to_bytes()),
        });
    }

    /// Accepts the bundle only if at least `k` (>= 1) distinct keys of `trusted` (founder's name, key) made
    /// valid signatures over its content.
    pub fn check_signatures(
        &self,
        trusted: &[(String, VerifyingKey)],
        k: usize,
    ) -> Result<SignatureCheck, BundleError> {
        if k == 0 {
            return Err(BundleError::NoAuditorsRequired);
        }
        let mut signers = Vec::new();
        let mut key_ids = Vec::new();
        let mut seen: Vec<[u8; 32]> = Vec::new();
        let mut problems = Vec::new();
        let digest = hex::encode(self.content_digest());
        let message = self.message();
        for (i, s) in self.signatures.iter().enumerate() {
            let name = format!("signature {} ({:?})", i + 1, s.auditor);
            let Ok(kb) = hex::decode(&s.public_key)
                .map_err(|_| ())
                .and_then(|v| <[u8; 32]>::try_from(v).map_err(|_| ()))
            else {
                problems.push(format!("{name}: public_key is not 32 bytes of hex"));
                continue;
            };
            let Some((key_name, _)) = trusted.iter().find(|(_, t)| t.to_bytes() == kb) else {
                problems.push(format!(
                    "{name}: signed by untrusted key {}",
                    &s.public_key[..16.min(s.public_key.len())]
                ));
                continue;
            };
            if s.algorithm != "ed25519" {
                problems.push(format!(
                    "{name}: algorithm {:?}, only \"ed25519\"",
                    s.algorithm
                ));
                continue;
            }
            if s.content_sha256 != digest {
                problems.push(format!(
                    "{name}: signed other content (content_sha256 {}, this bundle {digest})",
                    s.content_sha256
                ));
                continue;
            }
            let sig = hex::decode(&s.signature)
                .ok()
                .and_then(|v| <[u8; 64]>::try_from(v).ok());
            // Strict Ed25519 through the one signature module (a small-order key or R is refused).
            match sig {
                Some(sig) if attestation::sig::ed25519_strict(&kb, &message, &sig).is_ok() => {
                    if seen.contains(&kb) {
                        problems.push(format!(
                            "{name}: second signature by trusted key {key_name} counts once"
                        ));
                    } else {
                        seen.push(kb);
                        signers.push(key_name.clone());
                        key_ids.push(key_id(&kb));
                    }
                }
                _ => problems.push(format!(
                    "{name}: signature is invalid (trusted key {key_name})"
                )),
            }
        }
        if signers.len() < k {
            return Err(BundleError::NotEnoughSignatures(format!(
                "the collateral bundle is signed by {} of the {k} trusted auditors required{}",
                signers.len(),
                if problems.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", problems.join("; "))
                }
            )));
        }
        Ok(SignatureCheck {
            signers,
            key_ids,
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> Content {
        Content {
            format: BUNDLE_FORMAT.into(),
            created: "2026-12-01T00:00:00Z".into(),
            subject: "report.bin (sha256 00)".into(),
            snp: None,
            tdx: None,
            sources: vec!["https://kds.example/vcek".into()],
        }
    }

    fn key(seed: u8) -> (SigningKey, Vec<(String, VerifyingKey)>) {
        let k = SigningKey::from_bytes(&[seed; 32]);
        let trusted = vec![("auditor.pub".to_string(), k.verifying_key())];
        (k, trusted)
    }

    fn signed_text() -> (String, Vec<(String, VerifyingKey)>) {
        let (k, trusted) = key(7);
        let mut b = Bundle::new(content());
        b.sign(&k, "a");
        (b.to_json(), trusted)
    }

    fn check(text: &str, trusted: &[(String, VerifyingKey)]) -> Result<SignatureCheck, String> {
        Bundle::from_json(text.as_bytes())
            .and_then(|b| b.check_signatures(trusted, 1))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_bundle_is_told_by_its_format_key_however_the_key_is_written() {
        let plain = format!(r#"{{"x": 1, "content": {{"format": "{BUNDLE_FORMAT}"}}}}"#);
        assert!(Bundle::is_bundle(plain.as_bytes()));
        let escaped = format!(r#"{{"content": {{"form\u0061t": "{BUNDLE_FORMAT}"}}}}"#);
        assert!(Bundle::is_bundle(escaped.as_bytes()));
        // The first format is recognised, so that reading it can say why it is refused.
        let v1 = format!(r#"{{"format": "{BUNDLE_FORMAT_V1}"}}"#);
        assert!(Bundle::is_bundle(v1.as_bytes()));
        assert!(!Bundle::is_bundle(br#"{"format": "something else"}"#));
        assert!(!Bundle::is_bundle(
            br#"{"pck_crl": "00", "tcb_info": "{\"id\":\"TDX\"}"}"#
        ));
        assert!(!Bundle::is_bundle(b"not json"));
    }

    #[test]
    fn a_signed_bundle_read_back_verifies_and_is_written_byte_for_byte() {
        let (text, trusted) = signed_text();
        let b = Bundle::from_json(text.as_bytes()).expect("bundle");
        assert_eq!(b.content, content());
        assert_eq!(b.to_json(), text);
        let c = b.check_signatures(&trusted, 1).expect("signed");
        assert_eq!(c.signers, vec!["auditor.pub".to_string()]);
    }

    #[test]
    fn the_signature_covers_the_content_text_as_received_not_what_it_parses_to() {
        let (text, trusted) = signed_text();
        // The same fields, one space more: a re-encoding would not see it; the text as received does.
        let spaced = text.replacen("\"subject\": ", "\"subject\":  ", 1);
        assert_ne!(spaced, text);
        assert_eq!(
            Bundle::from_json(spaced.as_bytes())
                .expect("parses")
                .content,
            content()
        );
        let e = check(&spaced, &trusted).expect_err("voided");
        assert!(e.contains("signed other content"), "{e}");
        // With content_sha256 brought in line, the signature itself no longer verifies.
        let b = Bundle::from_json(spaced.as_bytes()).expect("parses");
        let fixed = spaced.replace(
            &Bundle::from_json(text.as_bytes()).expect("b").signatures[0].content_sha256,
            &hex::encode(b.content_digest()),
        );
        let e = check(&fixed, &trusted).expect_err("invalid");
        assert!(e.contains("signature is invalid"), "{e}");
    }

    #[test]
    fn content_holds_only_known_keys_each_once() {
        let (text, _) = signed_text();
        let unknown = text.replacen(
            "\"subject\":",
            "\"extra\": \"unsigned?\",\n  \"subject\":",
            1,
        );
        let e = Bundle::from_json(unknown.as_bytes())
            .expect_err("unknown key")
            .to_string();
        assert!(
            e.contains("content") && e.contains("unknown field `extra`"),
            "{e}"
        );
        let twice = text.replacen("\"subject\":", "\"subject\": \"other\",\n  \"subject\":", 1);
        let e = Bundle::from_json(twice.as_bytes())
            .expect_err("duplicate key")
            .to_string();
        assert!(e.contains("duplicate field `subject`"), "{e}");
        let outer = text.replacen("{\n\"content\"", "{\n\"note\": 1,\n\"content\"", 1);
        let e = Bundle::from_json(outer.as_bytes())
            .expect_err("unknown outer key")
            .to_string();
        assert!(e.contains("unknown field `note`"), "{e}");
    }

    #[test]
    fn a_first_format_bundle_is_refused_with_the_reason_and_the_remedy() {
        let v1 = format!(
            r#"{{"format": "{BUNDLE_FORMAT_V1}", "created": "x", "subject": "y", "sources": [], "signatures": []}}"#
        );
        let e = Bundle::from_json(v1.as_bytes())
            .expect_err("v1")
            .to_string();
        assert!(
            e.contains(BUNDLE_FORMAT_V1) && e.contains("fetch --bundle"),
            "{e}"
        );
    }

    #[test]
    fn a_small_order_key_signs_nothing() {
        // The identity point as the key, R = identity and S = 0: [S]B = R + [k]A holds for every message, so a
        // cofactorless check without the strict rules would count it. The founder trusting such a key by mistake
        // must still get no signature out of it.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let Ok(weak) = VerifyingKey::from_bytes(&identity) else {
            panic!("the identity is a point");
        };
        let trusted = vec![("weak.pub".to_string(), weak)];
        let mut b = Bundle::new(content());
        let mut sig = [0u8; 64];
        sig[0] = 1;
        b.signatures.push(BundleSignature {
            auditor: "weak".into(),
            algorithm: "ed25519".into(),
            public_key: hex::encode(identity),
            content_sha256: hex::encode(b.content_digest()),
            signature: hex::encode(sig),
        });
        let e = b
            .check_signatures(&trusted, 1)
            .expect_err("weak key")
            .to_string();
        assert!(e.contains("signature is invalid"), "{e}");
    }
}
