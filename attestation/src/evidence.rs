//! The evidence bundle of DESIGN.md: CBOR map carrying report, certificates, COSE_Key and the COSE_Sign1 verdict.
//!
//! Decoding is strict: the `format` string, every required key and its CBOR type are checked, unknown or
//! duplicate keys are refused and the size is bounded, so a verifier never acts on a half-understood bundle.
//! The verdict signature is ES384 (ECDSA P-384 with SHA-384, raw `r || s` per RFC 9053) by the embedded key.

use crate::verdict::{cbor_error_text, Verdict, VerdictError};
use ciborium::Value;
use coset::{iana, AsCborValue, CoseKey, CoseSign1, CoseSign1Builder, HeaderBuilder, Label};
use p384::ecdsa::signature::Signer;
use std::collections::BTreeMap;
use std::fmt;

/// The value of the `format` key.
pub const EVIDENCE_FORMAT: &str = "fenced-run-evidence/1";

/// Largest evidence file accepted by [`Evidence::from_cbor`].
pub const MAX_EVIDENCE_LEN: usize = 16 * 1024 * 1024;

/// Deepest nesting of CBOR items accepted when decoding evidence.
const CBOR_RECURSION_LIMIT: usize = 32;

/// Most certificates accepted in `certs`.
pub const MAX_CERTS: usize = 16;

/// The CBOR tag of a tagged COSE_Sign1 (accepted when decoding, never written).
const COSE_SIGN1_TAG: u64 = 18;

/// Length of an ES384 signature: `r || s`, 48 bytes each, big-endian.
pub const ES384_SIGNATURE_LEN: usize = 96;

/// Which TEE produced the report, as the evidence claims (the verifier decides from the chain, not this label).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TeeLabel {
    /// A real AMD SEV-SNP report.
    #[serde(rename = "sev-snp")]
    SevSnp,
    /// A real Intel TDX quote.
    #[serde(rename = "tdx")]
    Tdx,
    /// An SEV-SNP report signed by the sim PSP.
    #[serde(rename = "sim-sev-snp")]
    SimSevSnp,
    /// A TDX quote signed by the sim QE.
    #[serde(rename = "sim-tdx")]
    SimTdx,
}

impl TeeLabel {
    /// Every label.
    pub const ALL: [TeeLabel; 4] = [
        TeeLabel::SevSnp,
        TeeLabel::Tdx,
        TeeLabel::SimSevSnp,
        TeeLabel::SimTdx,
    ];

    /// The label as written in evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            TeeLabel::SevSnp => "sev-snp",
            TeeLabel::Tdx => "tdx",
            TeeLabel::SimSevSnp => "sim-sev-snp",
            TeeLabel::SimTdx => "sim-tdx",
        }
    }

    /// Parses a label as written in evidence.
    pub fn parse(s: &str) -> Option<TeeLabel> {
        TeeLabel::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// Whether the label claims a sim backend.
    pub fn is_simulated(self) -> bool {
        matches!(self, TeeLabel::SimSevSnp | TeeLabel::SimTdx)
    }

    /// Whether the report is an SEV-SNP ATTESTATION_REPORT (real or sim).
    pub fn is_snp(self) -> bool {
        matches!(self, TeeLabel::SevSnp | TeeLabel::SimSevSnp)
    }
}

impl fmt::Display for TeeLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Verification collateral carried for offline checks (TDX TCB info, QE identity, CRLs).
///
/// In CBOR it is either one byte string or a map from text names to byte strings; the names this project
/// writes are `tcb_info`, `qe_identity`, `pck_crl`, `root_ca_crl` (each the bytes as fetched).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Collateral {
    /// One opaque blob.
    Bytes(Vec<u8>),
    /// Named blobs.
    Map(BTreeMap<String, Vec<u8>>),
}

/// Why evidence could not be decoded, encoded or its verdict signature checked.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The input is larger than [`MAX_EVIDENCE_LEN`].
    #[error("evidence is {len} bytes, more than the {max} bytes accepted")]
    TooLarge {
        /// Length of the input.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The input is not well-formed CBOR.
    #[error("evidence is not valid CBOR: {0}")]
    Cbor(String),
    /// Bytes remain after the evidence map.
    #[error("evidence has {0} trailing bytes after the CBOR map")]
    TrailingBytes(usize),
    /// The top-level item is not a map.
    #[error("evidence is not a CBOR map")]
    NotAMap,
    /// A required key is absent.
    #[error("evidence key `{0}` is missing")]
    MissingKey(&'static str),
    /// A key is not one of the keys of the format (or not a text string).
    #[error("evidence key `{0}` is not part of {EVIDENCE_FORMAT}")]
    UnknownKey(String),
    /// A key appears twice.
    #[error("evidence key `{0}` appears more than once")]
    DuplicateKey(String),
    /// A key has the wrong CBOR type.
    #[error("evidence key `{key}` must be {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// The `format` string is not [`EVIDENCE_FORMAT`].
    #[error("evidence format {0:?} is not {EVIDENCE_FORMAT:?}")]
    UnknownFormat(String),
    /// The `tee` string is not a known label.
    #[error("evidence tee {0:?} is not one of sev-snp, tdx, sim-sev-snp, sim-tdx")]
    UnknownTee(String),
    /// Too many certificates.
    #[error("evidence key `certs` holds {0} certificates, more than {MAX_CERTS}")]
    TooManyCerts(usize),
    /// The COSE_Key is not an EC2 P-384 ES384 public key.
    #[error("evidence key `key`: {0}")]
    Key(String),
    /// The COSE_Sign1 is not an ES384 signature with an attached payload.
    #[error("evidence key `verdict`: {0}")]
    Sign1(String),
    /// The verdict signature does not verify with the embedded key.
    #[error("evidence key `verdict`: the ES384 signature does not verify with the key in `key`")]
    BadSignature,
    /// The signed payload is not a verdict.
    #[error("evidence key `verdict`: payload: {0}")]
    Verdict(#[from] VerdictError),
    /// Encoding failed.
    #[error("encoding evidence: {0}")]
    Encode(String),
    /// The `transcript` key is malformed.
    #[error("evidence key `transcript`: {0}")]
    Transcript(#[from] crate::transcript::TranscriptError),
    /// The evidence file could not be read.
    #[error("reading evidence {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A decoded evidence bundle (DESIGN.md "Evidence").
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    /// The TEE the evidence claims.
    pub tee: TeeLabel,
    /// SNP ATTESTATION_REPORT (1184 bytes) or TDX quote, as the hardware produced it.
    pub report: Vec<u8>,
    /// DER certificates: VCEK|VLEK, ASK|ASVK, ARK for SNP; the PCK chain for TDX when not in the quote.
    pub certs: Vec<Vec<u8>>,
    /// Collateral for offline verification, if carried.
    pub collateral: Option<Collateral>,
    /// The guest's ephemeral P-384 public key (from the COSE_Key).
    pub key: p384::PublicKey,
    /// The verdict, signed with `key` (ES384).
    pub verdict: CoseSign1,
    /// The fence transcript and its anchor report (key `transcript`, docs/transcript.md); `None` in evidence
    /// written before the transcript existed, which stays readable.
    pub transcript: Option<crate::transcript::Anchored>,
}

/// Signs `verdict` as a COSE_Sign1 with ES384 (protected header: alg only; no external AAD).
pub fn sign_verdict(
    key: &p384::ecdsa::SigningKey,
    verdict: &Verdict,
) -> Result<CoseSign1, EvidenceError> {
    let payload = verdict.to_cbor()?;
    let protected = HeaderBuilder::new()
        .algorithm(iana::Algorithm::ES384)
        .build();
    Ok(CoseSign1Builder::new()
        .protected(protected)
        .payload(payload)
        .create_signature(b"", |data| {
            let sig: p384::ecdsa::Signature = key.sign(data);
            sig.to_bytes().to_vec()
        })
        .build())
}

/// The COSE_Key (kty EC2, crv P-384, alg ES384, x, y) of a public key.
pub fn cose_key(key: &p384::PublicKey) -> CoseKey {
    use p384::elliptic_curve::sec1::ToEncodedPoint;
    let point = key.to_encoded_point(false);
    // An uncompressed point of a valid public key always has both coordinates.
    let x = point.x().map(|x| x.to_vec()).unwrap_or_default();
    let y = point.y().map(|y| y.to_vec()).unwrap_or_default();
    coset::CoseKeyBuilder::new_ec2_pub_key(iana::EllipticCurve::P_384, x, y)
        .algorithm(iana::Algorithm::ES384)
        .build()
}

/// Reads a public key from a COSE_Key, strictly: EC2, P-384, alg ES384, 48-byte x and y, no private part.
pub fn key_from_cose(k: &CoseKey) -> Result<p384::PublicKey, EvidenceError> {
    let bad = |m: &str| EvidenceError::Key(m.to_owned());
    if k.kty != coset::KeyType::Assigned(iana::KeyType::EC2) {
        return Err(bad("kty must be EC2 (2)"));
    }
    if k.alg != Some(coset::Algorithm::Assigned(iana::Algorithm::ES384)) {
        return Err(bad("alg must be ES384 (-35)"));
    }
    if !k.key_ops.is_empty() || !k.base_iv.is_empty() {
        return Err(bad("key_ops and base_iv must be absent"));
    }
    let (mut crv, mut x, mut y) = (None, None, None);
    for (label, value) in &k.params {
        let slot = match label {
            Label::Int(l) if *l == iana::Ec2KeyParameter::Crv as i64 => &mut crv,
            Label::Int(l) if *l == iana::Ec2KeyParameter::X as i64 => &mut x,
            Label::Int(l) if *l == iana::Ec2KeyParameter::Y as i64 => &mut y,
            Label::Int(l) if *l == iana::Ec2KeyParameter::D as i64 => {
                return Err(bad(
                    "carries a private key (d); only the public key belongs in evidence",
                ))
            }
            other => {
                return Err(EvidenceError::Key(format!(
                    "unexpected parameter {other:?}"
                )))
            }
        };
        if slot.replace(value).is_some() {
            return Err(EvidenceError::Key(format!(
                "parameter {label:?} appears twice"
            )));
        }
    }
    match crv {
        Some(Value::Integer(i)) if i128::from(*i) == iana::EllipticCurve::P_384 as i128 => {}
        Some(_) => return Err(bad("crv must be P-384 (2)")),
        None => return Err(bad("crv (-1) is missing")),
    }
    let coord = |v: Option<&Value>, name: &str| -> Result<Vec<u8>, EvidenceError> {
        match v {
            Some(Value::Bytes(b)) if b.len() == 48 => Ok(b.clone()),
            Some(Value::Bytes(b)) => Err(EvidenceError::Key(format!(
                "{name} is {} bytes, must be 48",
                b.len()
            ))),
            Some(_) => Err(EvidenceError::Key(format!(
                "{name} must be a 48-byte string (compressed points refused)"
            ))),
            None => Err(EvidenceError::Key(format!("{name} is missing"))),
        }
    };
    let mut sec1 = vec![0x04];
    sec1.extend(coord(x, "x")?);
    sec1.extend(coord(y, "y")?);
    p384::PublicKey::from_sec1_bytes(&sec1).map_err(|_| bad("(x, y) is not a point on P-384"))
}

/// Checks the COSE_Sign1 profile: protected header exactly `{alg: ES384}`, empty unprotected header, attached
/// payload, 96-byte signature.
fn check_sign1_profile(s: &CoseSign1) -> Result<(), EvidenceError> {
    let h = &s.protected.header;
    if h.alg != Some(coset::Algorithm::Assigned(iana::Algorithm::ES384)) {
        return Err(EvidenceError::Sign1(
            "protected header alg must be ES384 (-35)".into(),
        ));
    }
    let only_alg = HeaderBuilder::new()
        .algorithm(iana::Algorithm::ES384)
        .build();
    if *h != only_alg {
        return Err(EvidenceError::Sign1(
            "protected header may hold only alg".into(),
        ));
    }
    if !s.unprotected.is_empty() {
        return Err(EvidenceError::Sign1(
            "unprotected header must be empty".into(),
        ));
    }
    if s.payload.is_none() {
        return Err(EvidenceError::Sign1(
            "payload is detached (nil); it must be the verdict".into(),
        ));
    }
    if s.signature.len() != ES384_SIGNATURE_LEN {
        return Err(EvidenceError::Sign1(format!(
            "signature is {} bytes, ES384 needs {ES384_SIGNATURE_LEN} (r || s)",
            s.signature.len()
        )));
    }
    Ok(())
}

impl Evidence {
    /// Builds evidence from a report, its certificates, collateral, the ephemeral signing key and the verdict.
    pub fn seal(
        tee: TeeLabel,
        report: Vec<u8>,
        certs: Vec<Vec<u8>>,
        collateral: Option<Collateral>,
        signing_key: &p384::ecdsa::SigningKey,
        verdict: &Verdict,
    ) -> Result<Evidence, EvidenceError> {
        let verdict = sign_verdict(signing_key, verdict)?;
        let key = p384::PublicKey::from(signing_key.verifying_key());
        Ok(Evidence {
            tee,
            report,
            certs,
            collateral,
            key,
            verdict,
            transcript: None,
        })
    }

    /// The guest's ephemeral public key (the one `report_data` must bind).
    pub fn key(&self) -> p384::PublicKey {
        self.key
    }

    /// Checks the verdict's COSE_Sign1 profile and ES384 signature with the embedded key, then decodes the
    /// verdict (strictly). This does not check the report, the binding or the nonce: the verifier does.
    pub fn verify_verdict_signature(&self) -> Result<Verdict, EvidenceError> {
        check_sign1_profile(&self.verdict)?;
        use p384::elliptic_curve::sec1::ToEncodedPoint;
        let key = crate::sig::P384Key::from_sec1(self.key.to_encoded_point(false).as_bytes())
            .map_err(|_| EvidenceError::BadSignature)?;
        // ES384 signs the COSE Sig_structure, which coset rebuilds from the protected header bytes as received.
        self.verdict.verify_signature(b"", |sig, data| {
            let (r, s) = match (sig.get(..48), sig.get(48..)) {
                (Some(r), Some(s)) if sig.len() == 96 => (r, s),
                _ => return Err(EvidenceError::BadSignature),
            };
            let (mut rb, mut sb) = ([0u8; 48], [0u8; 48]);
            rb.copy_from_slice(r);
            sb.copy_from_slice(s);
            crate::sig::p384_sha384_scalars(&key, data, &rb, &sb)
                .map_err(|_| EvidenceError::BadSignature)
        })?;
        let payload = self.verdict.payload.as_deref().unwrap_or_default();
        Ok(Verdict::from_cbor(payload)?)
    }

    /// Encodes the evidence as a CBOR map with text keys (collateral is written only when present).
    pub fn to_cbor(&self) -> Result<Vec<u8>, EvidenceError> {
        let enc = |e: coset::CoseError| EvidenceError::Encode(e.to_string());
        let mut map = vec![
            (
                Value::Text("format".into()),
                Value::Text(EVIDENCE_FORMAT.into()),
            ),
            (
                Value::Text("tee".into()),
                Value::Text(self.tee.as_str().into()),
            ),
            (
                Value::Text("report".into()),
                Value::Bytes(self.report.clone()),
            ),
            (
                Value::Text("certs".into()),
                Value::Array(self.certs.iter().map(|c| Value::Bytes(c.clone())).collect()),
            ),
        ];
        if let Some(c) = &self.collateral {
            let v = match c {
                Collateral::Bytes(b) => Value::Bytes(b.clone()),
                Collateral::Map(m) => Value::Map(
                    m.iter()
                        .map(|(k, v)| (Value::Text(k.clone()), Value::Bytes(v.clone())))
                        .collect(),
                ),
            };
            map.push((Value::Text("collateral".into()), v));
        }
        map.push((
            Value::Text("key".into()),
            cose_key(&self.key).to_cbor_value().map_err(enc)?,
        ));
        map.push((
            Value::Text("verdict".into()),
            self.verdict.clone().to_cbor_value().map_err(enc)?,
        ));
        if let Some(t) = &self.transcript {
            map.push((Value::Text("transcript".into()), t.to_value()));
        }
        let mut out = Vec::new();
        ciborium::ser::into_writer(&Value::Map(map), &mut out)
            .map_err(|e| EvidenceError::Encode(e.to_string()))?;
        Ok(out)
    }

    /// Reads and decodes an evidence file, reading at most [`MAX_EVIDENCE_LEN`] + 1 bytes.
    pub fn from_file(path: &std::path::Path) -> Result<Evidence, EvidenceError> {
        use std::io::Read;
        let io = |source| EvidenceError::Io {
            path: path.to_owned(),
            source,
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let mut bytes = Vec::new();
        f.take(MAX_EVIDENCE_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        Evidence::from_cbor(&bytes)
    }

    /// Decodes evidence from outside: bounded, strict about keys and types, never panics.
    pub fn from_cbor(bytes: &[u8]) -> Result<Evidence, EvidenceError> {
        if bytes.len() > MAX_EVIDENCE_LEN {
            return Err(EvidenceError::TooLarge {
                len: bytes.len(),
                max: MAX_EVIDENCE_LEN,
            });
        }
        let mut reader = bytes;
        let value: Value =
            ciborium::de::from_reader_with_recursion_limit(&mut reader, CBOR_RECURSION_LIMIT)
                .map_err(|e| EvidenceError::Cbor(cbor_error_text(&e)))?;
        if !reader.is_empty() {
            return Err(EvidenceError::TrailingBytes(reader.len()));
        }
        let Value::Map(entries) = value else {
            return Err(EvidenceError::NotAMap);
        };
        const KEYS: [&str; 8] = [
            "format",
            "tee",
            "report",
            "certs",
            "collateral",
            "key",
            "verdict",
            "transcript",
        ];
        let mut fields: BTreeMap<&'static str, Value> = BTreeMap::new();
        for (k, v) in entries {
            let name = match k {
                Value::Text(t) => t,
                Value::Integer(i) => {
                    return Err(EvidenceError::UnknownKey(format!(
                        "integer {} (keys are text)",
                        i128::from(i)
                    )))
                }
                _ => {
                    return Err(EvidenceError::UnknownKey(
                        "a key that is not text".to_string(),
                    ))
                }
            };
            let Some(known) = KEYS.iter().find(|k| **k == name) else {
                return Err(EvidenceError::UnknownKey(name));
            };
            if fields.insert(known, v).is_some() {
                return Err(EvidenceError::DuplicateKey(name));
            }
        }
        let mut take = |key: &'static str| fields.remove(key).ok_or(EvidenceError::MissingKey(key));

        let format = match take("format")? {
            Value::Text(t) => t,
            _ => {
                return Err(EvidenceError::WrongType {
                    key: "format",
                    expected: "a text string",
                })
            }
        };
        if format != EVIDENCE_FORMAT {
            return Err(EvidenceError::UnknownFormat(format));
        }
        let tee = match take("tee")? {
            Value::Text(t) => TeeLabel::parse(&t).ok_or(EvidenceError::UnknownTee(t))?,
            _ => {
                return Err(EvidenceError::WrongType {
                    key: "tee",
                    expected: "a text string",
                })
            }
        };
        let report = match take("report")? {
            Value::Bytes(b) => b,
            _ => {
                return Err(EvidenceError::WrongType {
                    key: "report",
                    expected: "a byte string",
                })
            }
        };
        let certs = match take("certs")? {
            Value::Array(items) => {
                if items.len() > MAX_CERTS {
                    return Err(EvidenceError::TooManyCerts(items.len()));
                }
                items
                    .into_iter()
                    .map(|i| match i {
                        Value::Bytes(b) => Ok(b),
                        _ => Err(EvidenceError::WrongType {
                            key: "certs",
                            expected: "an array of byte strings",
                        }),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            _ => {
                return Err(EvidenceError::WrongType {
                    key: "certs",
                    expected: "an array of byte strings",
                })
            }
        };
        let collateral = match take("collateral") {
            Err(_) | Ok(Value::Null) => None,
            Ok(Value::Bytes(b)) => Some(Collateral::Bytes(b)),
            Ok(Value::Map(m)) => {
                let wrong = || EvidenceError::WrongType {
                    key: "collateral",
                    expected: "bytes or a map of text to bytes",
                };
                let mut out = BTreeMap::new();
                for (k, v) in m {
                    match (k, v) {
                        (Value::Text(k), Value::Bytes(v)) => {
                            if out.insert(k.clone(), v).is_some() {
                                return Err(EvidenceError::DuplicateKey(format!("collateral.{k}")));
                            }
                        }
                        _ => return Err(wrong()),
                    }
                }
                Some(Collateral::Map(out))
            }
            Ok(_) => {
                return Err(EvidenceError::WrongType {
                    key: "collateral",
                    expected: "bytes or a map of text to bytes",
                })
            }
        };
        let key_value = take("key")?;
        if !matches!(key_value, Value::Map(_)) {
            return Err(EvidenceError::WrongType {
                key: "key",
                expected: "a COSE_Key map",
            });
        }
        let cose =
            CoseKey::from_cbor_value(key_value).map_err(|e| EvidenceError::Key(e.to_string()))?;
        let key = key_from_cose(&cose)?;
        let sign1_value = match take("verdict")? {
            Value::Tag(COSE_SIGN1_TAG, inner) => *inner,
            v @ Value::Array(_) => v,
            _ => {
                return Err(EvidenceError::WrongType {
                    key: "verdict",
                    expected: "a COSE_Sign1 array",
                })
            }
        };
        let verdict = CoseSign1::from_cbor_value(sign1_value)
            .map_err(|e| EvidenceError::Sign1(e.to_string()))?;
        check_sign1_profile(&verdict)?;
        let transcript = match take("transcript") {
            Err(_) => None,
            Ok(v) => Some(crate::transcript::Anchored::from_value(v)?),
        };
        Ok(Evidence {
            tee,
            report,
            certs,
            collateral,
            key,
            verdict,
            transcript,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::{Inputs, Isolation, Outcome};

    fn signing_key(seed: u8) -> p384::ecdsa::SigningKey {
        let mut b = [0u8; 48];
        b[0] = 1;
        b[47] = seed;
        p384::ecdsa::SigningKey::from_slice(&b).expect("key")
    }

    fn verdict() -> Verdict {
        let inputs = Inputs {
            nonce: vec![9; 32],
            job_sha256: Some("00".repeat(32)),
            ..Inputs::default()
        };
        Verdict::new(Outcome::TestsFailed, Isolation::Process, inputs, "test")
    }

    fn evidence() -> Evidence {
        Evidence::seal(
            TeeLabel::SimSevSnp,
            vec![1; 1184],
            vec![vec![0x30, 0x00], vec![0x30, 0x01]],
            Some(Collateral::Map(
                [("pck_crl".to_owned(), vec![1, 2, 3])].into(),
            )),
            &signing_key(1),
            &verdict(),
        )
        .expect("seal")
    }

    #[test]
    fn round_trip_and_verify() {
        let e = evidence();
        let bytes = e.to_cbor().expect("encode");
        let back = Evidence::from_cbor(&bytes).expect("decode");
        assert_eq!(back.tee, TeeLabel::SimSevSnp);
        assert_eq!(back.report, e.report);
        assert_eq!(back.certs, e.certs);
        assert_eq!(back.collateral, e.collateral);
        assert_eq!(back.key(), e.key());
        assert_eq!(back.verify_verdict_signature().expect("verify"), verdict());
        assert_eq!(back.to_cbor().expect("re-encode"), bytes);
    }

    #[test]
    fn other_key_rejected() {
        let mut e = evidence();
        e.key = signing_key(2).verifying_key().into();
        assert!(matches!(
            e.verify_verdict_signature(),
            Err(EvidenceError::BadSignature)
        ));
    }

    #[test]
    fn tampered_payload_rejected() {
        let mut e = evidence();
        let mut v = verdict();
        v.set_outcome(Outcome::TestsPassed);
        e.verdict.payload = Some(v.to_cbor().expect("cbor"));
        assert!(matches!(
            e.verify_verdict_signature(),
            Err(EvidenceError::BadSignature)
        ));
    }

    #[test]
    fn strict_keys() {
        let e = evidence();
        let Value::Map(entries) =
            ciborium::de::from_reader::<Value, _>(&e.to_cbor().expect("enc")[..]).expect("v")
        else {
            panic!("not a map")
        };
        let encode = |m: Vec<(Value, Value)>| {
            let mut out = Vec::new();
            ciborium::ser::into_writer(&Value::Map(m), &mut out).expect("enc");
            out
        };
        for key in ["format", "tee", "report", "certs", "key", "verdict"] {
            let m: Vec<_> = entries
                .iter()
                .filter(|(k, _)| *k != Value::Text(key.into()))
                .cloned()
                .collect();
            match Evidence::from_cbor(&encode(m)) {
                Err(EvidenceError::MissingKey(k)) => assert_eq!(k, key),
                other => panic!("removing {key}: {other:?}"),
            }
            let m: Vec<_> = entries
                .iter()
                .map(|(k, v)| {
                    if *k == Value::Text(key.into()) {
                        (k.clone(), Value::Bool(true))
                    } else {
                        (k.clone(), v.clone())
                    }
                })
                .collect();
            let err = Evidence::from_cbor(&encode(m)).expect_err("wrong type");
            assert!(
                err.to_string().contains(&format!("`{key}`")),
                "{key}: {err}"
            );
        }
        let mut m = entries.clone();
        m.push((Value::Text("extra".into()), Value::Null));
        assert!(
            matches!(Evidence::from_cbor(&encode(m)), Err(EvidenceError::UnknownKey(k)) if k == "extra")
        );
        let mut m = entries.clone();
        m.push(entries[1].clone());
        assert!(
            matches!(Evidence::from_cbor(&encode(m)), Err(EvidenceError::DuplicateKey(k)) if k == "tee")
        );
        let m: Vec<_> = entries
            .iter()
            .map(|(k, v)| {
                if *k == Value::Text("format".into()) {
                    (k.clone(), Value::Text("fenced-run-evidence/2".into()))
                } else {
                    (k.clone(), v.clone())
                }
            })
            .collect();
        assert!(matches!(
            Evidence::from_cbor(&encode(m)),
            Err(EvidenceError::UnknownFormat(_))
        ));
    }

    #[test]
    fn private_key_in_cose_key_refused() {
        let mut k = cose_key(&signing_key(1).verifying_key().into());
        k.params.push((
            Label::Int(iana::Ec2KeyParameter::D as i64),
            Value::Bytes(vec![1; 48]),
        ));
        let err = key_from_cose(&k).expect_err("d present");
        assert!(err.to_string().contains("private"), "{err}");
    }
}
