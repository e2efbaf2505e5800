//! The DCAP quote as a whole: header, body, signature data and the nested certification data.
//! `Quote::parse` reads exactly what the lengths announce (with `attestation::wire::Reader`) and keeps any
//! trailing bytes aside as a field of their own, so that `to_bytes` gives back the input byte for byte.

use super::body::{EnclaveReport, TdReport10, TdReport15};
use super::{
    QuoteError, ATT_KEY_TYPE_ECDSA_P256, BODY_TYPE_TD10, BODY_TYPE_TD15, CERT_TYPE_PCK_CHAIN,
    CERT_TYPE_QE_REPORT, ENCLAVE_REPORT_LEN, HEADER_LEN, TD10_BODY_LEN, TD15_BODY_LEN,
    TEE_TYPE_TDX,
};
use crate::wire::Reader;
use std::ops::Range;

/// The 48-byte quote header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteHeader {
    /// Quote version (4 or 5).
    pub version: u16,
    /// Attestation key type (2 = ECDSA-256-with-P-256).
    pub att_key_type: u16,
    /// TEE type (0x81 = TDX).
    pub tee_type: u32,
    /// QE SVN (reserved in v4 and v5, kept as read).
    pub qe_svn: u16,
    /// PCE SVN (reserved in v4 and v5, kept as read).
    pub pce_svn: u16,
    /// QE vendor ID (Intel: 939a7233f79c4ca9940a0db3957f0607).
    pub qe_vendor_id: [u8; 16],
    /// User data: the first 16 bytes are the platform identifier the QE chose.
    pub user_data: [u8; 20],
}

impl QuoteHeader {
    fn read(r: &mut Reader<'_>) -> Result<Self, QuoteError> {
        let version = r.u16_le("header.version")?;
        if version != 4 && version != 5 {
            return Err(QuoteError::UnsupportedVersion(version));
        }
        let att_key_type = r.u16_le("header.att_key_type")?;
        if att_key_type != ATT_KEY_TYPE_ECDSA_P256 {
            return Err(QuoteError::UnsupportedKeyType(att_key_type));
        }
        let tee_type = r.u32_le("header.tee_type")?;
        if tee_type != TEE_TYPE_TDX {
            return Err(QuoteError::UnsupportedTeeType(tee_type));
        }
        Ok(QuoteHeader {
            version,
            att_key_type,
            tee_type,
            qe_svn: r.u16_le("header.qe_svn")?,
            pce_svn: r.u16_le("header.pce_svn")?,
            qe_vendor_id: r.array("header.qe_vendor_id")?,
            user_data: r.array("header.user_data")?,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.att_key_type.to_le_bytes());
        out.extend_from_slice(&self.tee_type.to_le_bytes());
        out.extend_from_slice(&self.qe_svn.to_le_bytes());
        out.extend_from_slice(&self.pce_svn.to_le_bytes());
        out.extend_from_slice(&self.qe_vendor_id);
        out.extend_from_slice(&self.user_data);
    }
}

/// The report body: TD 1.0 (v4, or v5 type 2) or TD 1.5 (v5 type 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuoteBody {
    /// A TD 1.0 report body.
    Td10(TdReport10),
    /// A TD 1.5 report body.
    Td15(TdReport15),
}

impl QuoteBody {
    /// The TD 1.0 fields, which every body has.
    pub fn td10(&self) -> &TdReport10 {
        match self {
            QuoteBody::Td10(b) => b,
            QuoteBody::Td15(b) => &b.td10,
        }
    }

    /// The TD 1.5 body, if this is one.
    pub fn td15(&self) -> Option<&TdReport15> {
        match self {
            QuoteBody::Td10(_) => None,
            QuoteBody::Td15(b) => Some(b),
        }
    }

    /// The v5 body type of this body.
    pub fn body_type(&self) -> u16 {
        match self {
            QuoteBody::Td10(_) => BODY_TYPE_TD10,
            QuoteBody::Td15(_) => BODY_TYPE_TD15,
        }
    }

    /// The length of this body.
    pub fn len(&self) -> usize {
        match self {
            QuoteBody::Td10(_) => TD10_BODY_LEN,
            QuoteBody::Td15(_) => TD15_BODY_LEN,
        }
    }

    /// Always false: a body has a fixed, non-zero length.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            QuoteBody::Td10(b) => b.write(out),
            QuoteBody::Td15(b) => b.write(out),
        }
    }
}

/// The PCK certification data nested in the QE report certification data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PckCertData {
    /// Type 5: the PCK chain as concatenated PEM (leaf, intermediate CA, root), as the QE stores it.
    PemChain(Vec<u8>),
    /// Any other certification data type, kept as read.
    Other {
        /// Its type.
        cert_type: u16,
        /// Its bytes.
        data: Vec<u8>,
    },
}

/// Certification data type 6: the QE report, its PCK signature, the QE authentication data, and the PCK data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QeReportCertData {
    /// The QE's enclave report.
    pub qe_report: EnclaveReport,
    /// ECDSA P-256 signature of the QE report by the PCK key, r || s (big-endian).
    pub qe_report_signature: [u8; 64],
    /// QE authentication data (bound into the QE report data).
    pub qe_auth_data: Vec<u8>,
    /// The nested certification data (type 5 in every quote seen).
    pub pck: PckCertData,
    /// Bytes after the nested certification data but inside the type-6 length (normally empty).
    pub slack: Vec<u8>,
}

/// The certification data of the signature data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificationData {
    /// Type 6, the only type TDX quotes use.
    QeReport(Box<QeReportCertData>),
    /// Any other type, kept as read (the verifier refuses it).
    Other {
        /// Its type.
        cert_type: u16,
        /// Its bytes.
        data: Vec<u8>,
    },
}

/// The ECDSA-256 quote signature data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureData {
    /// ECDSA P-256 signature over header and body by the attestation key, r || s (big-endian).
    pub signature: [u8; 64],
    /// The attestation public key, raw x || y (big-endian).
    pub attestation_key: [u8; 64],
    /// The certification data.
    pub certification: CertificationData,
    /// Bytes after the certification data but inside the signature data length (normally empty).
    pub slack: Vec<u8>,
}

/// A parsed TDX DCAP quote (v4 or v5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quote {
    /// The header.
    pub header: QuoteHeader,
    /// The report body.
    pub body: QuoteBody,
    /// The signature data.
    pub signature_data: SignatureData,
    /// Bytes after the signature data: zero padding of fixed-size buffers, or anything else. Not signed and
    /// not interpreted; reported so that a reader can see them.
    pub trailing: Vec<u8>,
}

fn read_cert_header(
    r: &mut Reader<'_>,
    field: &'static str,
) -> Result<(u16, u32, usize), QuoteError> {
    let cert_type = r.u16_le(field)?;
    let len_offset = r.offset();
    let len = r.u32_le(field)?;
    Ok((cert_type, len, len_offset))
}

fn put_len_u32(out: &mut Vec<u8>, field: &'static str, len: usize) -> Result<(), QuoteError> {
    let v = u32::try_from(len).map_err(|_| QuoteError::TooLong { field, len })?;
    out.extend_from_slice(&v.to_le_bytes());
    Ok(())
}

impl Quote {
    /// Parses a quote. Bytes after the signature data are kept in [`Quote::trailing`]; a quote shorter than
    /// its own lengths is an error naming the field and its offset.
    pub fn parse(bytes: &[u8]) -> Result<Self, QuoteError> {
        let mut r = Reader::new("quote", bytes);
        let header = QuoteHeader::read(&mut r)?;
        let body = if header.version == 4 {
            QuoteBody::Td10(TdReport10::read(&mut r)?)
        } else {
            let body_type = r.u16_le("body_type")?;
            let size = r.u32_le("body_size")?;
            let expected = match body_type {
                BODY_TYPE_TD10 => TD10_BODY_LEN,
                BODY_TYPE_TD15 => TD15_BODY_LEN,
                other => return Err(QuoteError::UnsupportedBodyType(other)),
            };
            if usize::try_from(size).ok() != Some(expected) {
                return Err(QuoteError::BodySizeMismatch {
                    body_type,
                    size,
                    expected,
                });
            }
            if body_type == BODY_TYPE_TD10 {
                QuoteBody::Td10(TdReport10::read(&mut r)?)
            } else {
                QuoteBody::Td15(TdReport15::read(&mut r)?)
            }
        };
        let len_offset = r.offset();
        let sig_len = r.u32_le("signature_data_len")?;
        let mut s = r.sub("signature_data", u64::from(sig_len), len_offset)?;
        let signature = s.array("signature_data.signature")?;
        let attestation_key = s.array("signature_data.attestation_key")?;
        let (cert_type, cert_len, cert_len_offset) =
            read_cert_header(&mut s, "certification_data header")?;
        let mut c = s.sub("certification_data", u64::from(cert_len), cert_len_offset)?;
        let certification = if cert_type == CERT_TYPE_QE_REPORT {
            let qe_report = EnclaveReport::read(&mut c)?;
            let qe_report_signature = c.array("qe_report_signature")?;
            let auth_len = c.u16_le("qe_auth_data_len")?;
            let qe_auth_data = c.take("qe_auth_data", usize::from(auth_len))?.to_vec();
            let (inner_type, inner_len, inner_len_offset) =
                read_cert_header(&mut c, "pck certification_data header")?;
            let mut inner = c.sub(
                "pck certification_data",
                u64::from(inner_len),
                inner_len_offset,
            )?;
            let data = inner.rest().to_vec();
            inner.finish()?;
            let pck = if inner_type == CERT_TYPE_PCK_CHAIN {
                PckCertData::PemChain(data)
            } else {
                PckCertData::Other {
                    cert_type: inner_type,
                    data,
                }
            };
            CertificationData::QeReport(Box::new(QeReportCertData {
                qe_report,
                qe_report_signature,
                qe_auth_data,
                pck,
                slack: c.rest().to_vec(),
            }))
        } else {
            CertificationData::Other {
                cert_type,
                data: c.rest().to_vec(),
            }
        };
        c.finish()?;
        let signature_data = SignatureData {
            signature,
            attestation_key,
            certification,
            slack: s.rest().to_vec(),
        };
        s.finish()?;
        let quote = Quote {
            header,
            body,
            signature_data,
            trailing: r.rest().to_vec(),
        };
        r.finish()?;
        Ok(quote)
    }

    /// Where the attestation key's signed region (header, the v5 body type and size, and the body) lies in the
    /// bytes this quote was parsed from: a verifier checks the signature over `raw[range]`, as received.
    pub fn signed_range(&self) -> Range<usize> {
        let body_at = HEADER_LEN + if self.header.version == 5 { 6 } else { 0 };
        0..body_at + self.body.len()
    }

    /// Where the QE report (signed by the PCK key) lies in the bytes this quote was parsed from, when the quote
    /// carries type-6 certification data.
    pub fn qe_report_range(&self) -> Range<usize> {
        // signature_data_len (4), signature (64), attestation key (64), certification type (2) and length (4).
        let at = self.signed_range().end + 4 + 64 + 64 + 2 + 4;
        at..at + ENCLAVE_REPORT_LEN
    }

    /// The signed region written back from the parsed fields (for building and signing quotes; a verifier
    /// slices the bytes as received with [`Quote::signed_range`]).
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + 6 + TD15_BODY_LEN);
        self.header.write(&mut out);
        if self.header.version == 5 {
            out.extend_from_slice(&self.body.body_type().to_le_bytes());
            // Body lengths are 584 or 648: they always fit.
            out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        }
        self.body.write(&mut out);
        out
    }

    /// The quote written back: byte-identical to what [`Quote::parse`] read, trailing bytes included.
    pub fn to_bytes(&self) -> Result<Vec<u8>, QuoteError> {
        let mut out = self.signed_bytes();
        let mut sig = Vec::new();
        sig.extend_from_slice(&self.signature_data.signature);
        sig.extend_from_slice(&self.signature_data.attestation_key);
        let (cert_type, cert) = match &self.signature_data.certification {
            CertificationData::QeReport(q) => {
                let mut c = Vec::new();
                q.qe_report.write(&mut c);
                c.extend_from_slice(&q.qe_report_signature);
                let auth_len =
                    u16::try_from(q.qe_auth_data.len()).map_err(|_| QuoteError::TooLong {
                        field: "qe_auth_data",
                        len: q.qe_auth_data.len(),
                    })?;
                c.extend_from_slice(&auth_len.to_le_bytes());
                c.extend_from_slice(&q.qe_auth_data);
                let (t, d) = match &q.pck {
                    PckCertData::PemChain(d) => (CERT_TYPE_PCK_CHAIN, d),
                    PckCertData::Other { cert_type, data } => (*cert_type, data),
                };
                c.extend_from_slice(&t.to_le_bytes());
                put_len_u32(&mut c, "pck certification_data", d.len())?;
                c.extend_from_slice(d);
                c.extend_from_slice(&q.slack);
                (CERT_TYPE_QE_REPORT, c)
            }
            CertificationData::Other { cert_type, data } => (*cert_type, data.clone()),
        };
        sig.extend_from_slice(&cert_type.to_le_bytes());
        put_len_u32(&mut sig, "certification_data", cert.len())?;
        sig.extend_from_slice(&cert);
        sig.extend_from_slice(&self.signature_data.slack);
        put_len_u32(&mut out, "signature_data", sig.len())?;
        out.extend_from_slice(&sig);
        out.extend_from_slice(&self.trailing);
        Ok(out)
    }

    /// The TD 1.0 fields of the body.
    pub fn td(&self) -> &TdReport10 {
        self.body.td10()
    }

    /// The QE report certification data, if the quote carries type 6.
    pub fn qe_cert_data(&self) -> Option<&QeReportCertData> {
        match &self.signature_data.certification {
            CertificationData::QeReport(q) => Some(q),
            CertificationData::Other { .. } => None,
        }
    }

    /// The PEM PCK chain, if the quote carries type 6 holding type 5.
    pub fn pck_chain_pem(&self) -> Option<&[u8]> {
        match &self.qe_cert_data()?.pck {
            PckCertData::PemChain(d) => Some(d),
            PckCertData::Other { .. } => None,
        }
    }

    /// Whether any trailing byte is non-zero (padding is all zero).
    pub fn trailing_nonzero(&self) -> bool {
        self.trailing.iter().any(|b| *b != 0)
    }
}
