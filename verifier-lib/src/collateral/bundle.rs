//! The offline collateral bundle: one JSON file with everything one report, quote or evidence needs (the
//! SEV-SNP ARK/ASK/VCEK and CRL; the TDX `collateral.json`), and optional Ed25519 auditor signatures made with
//! the same keys as measurement-set signatures (`measure-guest keygen`) and accepted by the same k-of-n rule:
//! at least k distinct trusted keys, a key counts once, an untrusted or invalid signature does not count.

use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::snp::CertBundle;
use crate::tdx::collateral::CollateralFile;

/// Marker of the bundle format.
pub const BUNDLE_FORMAT: &str = "fenced-run-collateral-bundle-v1";
/// Domain separation prefix of the signed message.
const SIGNING_DOMAIN: &[u8] = b"fenced-run collateral bundle v1\n";

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

/// What is signed: everything but the signatures. (No `deny_unknown_fields`: serde does not support it beside
/// `flatten`; a field this version does not know is ignored and not signed over.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// SHA-256 of the canonical content, hex.
    pub content_sha256: String,
    /// Signature over the domain prefix and the content digest, hex.
    pub signature: String,
}

/// The bundle file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bundle {
    /// The signed content.
    #[serde(flatten)]
    pub content: Content,
    /// Auditor signatures.
    #[serde(default)]
    pub signatures: Vec<BundleSignature>,
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(field: &str, s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| format!("bundle field {field} is not base64: {e}"))
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
    pub fn certs(&self) -> Result<CertBundle, String> {
        Ok(CertBundle {
            ark: unb64("snp.ark", &self.ark)?,
            intermediate: unb64("snp.ask", &self.ask)?,
            leaf: unb64("snp.vcek", &self.vcek)?,
        })
    }

    /// The CRL, if carried.
    pub fn crl(&self) -> Result<Option<Vec<u8>>, String> {
        self.crl.as_deref().map(|c| unb64("snp.crl", c)).transpose()
    }
}

impl Content {
    /// The canonical bytes signed (compact JSON of this struct, fields in declaration order).
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// SHA-256 of [`Self::canonical`].
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.canonical()).into()
    }

    fn message(&self) -> Vec<u8> {
        [SIGNING_DOMAIN, &self.digest()[..]].concat()
    }
}

/// The outcome of the k-of-n check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureCheck {
    /// The founder's names of the trusted keys that made valid signatures.
    pub signers: Vec<String>,
    /// Signatures that did not count, and why.
    pub problems: Vec<String>,
}

impl Bundle {
    /// A new unsigned bundle.
    pub fn new(content: Content) -> Bundle {
        Bundle {
            content,
            signatures: Vec::new(),
        }
    }

    /// Parses a bundle; the error names what is wrong.
    pub fn from_json(bytes: &[u8]) -> Result<Bundle, String> {
        let b: Bundle =
            serde_json::from_slice(bytes).map_err(|e| format!("not a collateral bundle: {e}"))?;
        if b.content.format != BUNDLE_FORMAT {
            return Err(format!(
                "format is {:?}, expected {BUNDLE_FORMAT:?}",
                b.content.format
            ));
        }
        Ok(b)
    }

    /// Whether `bytes` look like a bundle (its `format` field), not a bare `collateral.json`.
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
        #[derive(Deserialize)]
        struct F {
            format: Option<String>,
        }
        serde_json::from_slice::<F>(bytes)
            .ok()
            .and_then(|f| f.format)
            .is_some_and(|f| f == BUNDLE_FORMAT)
    }

    /// The file text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Adds `auditor`'s signature (a second signature by the same key replaces the first).
    pub fn sign(&mut self, key: &SigningKey, auditor: &str) {
        let pk = hex::encode(key.verifying_key().to_bytes());
        self.signatures.retain(|s| s.public_key != pk);
        self.signatures.push(BundleSignature {
            auditor: auditor.into(),
            algorithm: "ed25519".into(),
            public_key: pk,
            content_sha256: hex::encode(self.content.digest()),
            signature: hex::encode(key.sign(&self.content.message()).to_bytes()),
        });
    }

    /// Accepts the bundle only if at least `k` (>= 1) distinct keys of `trusted` (founder's name, key) made
    /// valid signatures over its content.
    pub fn check_signatures(
        &self,
        trusted: &[(String, VerifyingKey)],
        k: usize,
    ) -> Result<SignatureCheck, String> {
        if k == 0 {
            return Err("auditors required (k) must be at least 1".into());
        }
        let mut signers = Vec::new();
        let mut seen: Vec<[u8; 32]> = Vec::new();
        let mut problems = Vec::new();
        let digest = hex::encode(self.content.digest());
        for (i, s) in self.signatures.iter().enumerate() {
            let name = format!("signature {} ({:?})", i + 1, s.auditor);
            let Ok(kb) = hex::decode(&s.public_key)
                .map_err(|_| ())
                .and_then(|v| <[u8; 32]>::try_from(v).map_err(|_| ()))
            else {
                problems.push(format!("{name}: public_key is not 32 bytes of hex"));
                continue;
            };
            let Some((key_name, key)) = trusted.iter().find(|(_, t)| t.to_bytes() == kb) else {
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
                .and_then(|v| <[u8; 64]>::try_from(v).ok())
                .map(|b| ed25519_dalek::Signature::from_bytes(&b));
            match sig {
                Some(sig) if key.verify(&self.content.message(), &sig).is_ok() => {
                    if seen.contains(&kb) {
                        problems.push(format!(
                            "{name}: second signature by trusted key {key_name} counts once"
                        ));
                    } else {
                        seen.push(kb);
                        signers.push(key_name.clone());
                    }
                }
                _ => problems.push(format!(
                    "{name}: signature is invalid (trusted key {key_name})"
                )),
            }
        }
        if signers.len() < k {
            return Err(format!(
                "the collateral bundle is signed by {} of the {k} trusted auditors required{}",
                signers.len(),
                if problems.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", problems.join("; "))
                }
            ));
        }
        Ok(SignatureCheck { signers, problems })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_is_told_by_its_format_key_however_the_key_is_written() {
        let plain = format!(r#"{{"x": 1, "format": "{BUNDLE_FORMAT}"}}"#);
        assert!(Bundle::is_bundle(plain.as_bytes()));
        let escaped = format!(r#"{{"form\u0061t": "{BUNDLE_FORMAT}"}}"#);
        assert!(Bundle::is_bundle(escaped.as_bytes()));
        assert!(!Bundle::is_bundle(br#"{"format": "something else"}"#));
        assert!(!Bundle::is_bundle(
            br#"{"pck_crl": "00", "tcb_info": "{\"id\":\"TDX\"}"}"#
        ));
        assert!(!Bundle::is_bundle(b"not json"));
    }
}
