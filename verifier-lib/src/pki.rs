//! X.509 path validation shared by AMD's and Intel's chains: the structural rules of RFC 5280 §6.1 that both
//! vendors' profiles rely on (issuers are CAs with `keyCertSign`, path lengths hold, leaves are not CAs, no
//! critical extension is ignored), the exact chain shape each vendor issues, and the CRL rules (issuer may sign
//! CRLs, `thisUpdate`/`nextUpdate` bracket the verification time, coverage by issuer name).
//!
//! Signatures are not checked here: each vendor's module verifies its own algorithm (RSASSA-PSS SHA-384 for AMD,
//! ECDSA P-256 SHA-256 for Intel) over the exact TBS bytes. Why not `rustls-webpki`: see `docs/verification.md`
//! ("Path validation"). Parsing is x509-parser's; the rules below are the part the vendors' profiles add.

use x509_parser::certificate::X509Certificate;
use x509_parser::revocation_list::CertificateRevocationList;

/// A rule of path validation; its [`Rule::name`] is the suffix of the check name a vendor module reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// The chain does not have exactly the vendor's shape (length and roles).
    ChainShape,
    /// A certificate's issuer name is not the subject of the next certificate (or the root is not self-issued).
    IssuerName,
    /// An issuer lacks `basicConstraints CA:TRUE`.
    BasicConstraints,
    /// An issuer's key usage lacks `keyCertSign`, or a leaf's lacks `digitalSignature` or has `keyCertSign`.
    KeyUsage,
    /// An issuer's `pathLenConstraint` is smaller than the number of CAs below it.
    PathLength,
    /// A leaf says `CA:TRUE`.
    LeafIsCa,
    /// A certificate's subject common name is not one the vendor gives that position.
    SubjectName,
    /// A certificate carries a critical extension this verifier does not process.
    CriticalExtension,
    /// An extension the rules need is malformed or repeated.
    Extension,
}

impl Rule {
    /// The stable name (`chain-shape`, `basic-constraints`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Rule::ChainShape => "chain-shape",
            Rule::IssuerName => "issuer-name",
            Rule::BasicConstraints => "basic-constraints",
            Rule::KeyUsage => "key-usage",
            Rule::PathLength => "path-length",
            Rule::LeafIsCa => "leaf-is-ca",
            Rule::SubjectName => "subject-name",
            Rule::CriticalExtension => "critical-extension",
            Rule::Extension => "extension",
        }
    }
}

/// One broken rule: which rule, at which position (index in the chain, leaf first), and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// Index of the certificate in the chain (leaf first); `None` for the chain as a whole.
    pub index: Option<usize>,
    /// What was seen and what was wanted, naming the certificate.
    pub detail: String,
}

/// The role a position of a chain plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The self-issued trust anchor (its key is pinned by the caller).
    Root,
    /// An intermediate CA.
    Ca,
    /// The end entity, which signs data (reports, quotes, QE reports, TCB Info), never certificates.
    Leaf,
}

/// One position of a vendor's chain shape.
#[derive(Clone, Copy, Debug)]
pub struct Position<'a> {
    /// How the vendor names the certificate (`ASK/ASVK`, `PCK CA`, ...), for messages.
    pub what: &'a str,
    /// Its role.
    pub role: Role,
    /// Subject common names accepted at this position; empty: the vendor module checks names itself.
    pub names: &'a [&'a str],
}

/// OIDs of the extensions these rules process; any other extension marked critical is a violation.
const OID_BASIC_CONSTRAINTS: &str = "2.5.29.19";
const OID_KEY_USAGE: &str = "2.5.29.15";

fn cn(name: &x509_parser::x509::X509Name<'_>) -> String {
    name.iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Checks `chain` (leaf first, root last) against the vendor's `shape`: length, roles, names, basic
/// constraints, key usage, path lengths and critical extensions. Every violation is returned, not just the first.
pub fn check_path(chain: &[X509Certificate<'_>], shape: &[Position<'_>]) -> Vec<Violation> {
    let mut out = Vec::new();
    if chain.len() != shape.len() {
        out.push(Violation {
            rule: Rule::ChainShape,
            index: None,
            detail: format!(
                "chain has {} certificates, expected exactly {} ({})",
                chain.len(),
                shape.len(),
                shape
                    .iter()
                    .map(|p| p.what)
                    .collect::<Vec<_>>()
                    .join(" <- ")
            ),
        });
    }
    // A chain of another length is still checked certificate by certificate: the first in the shape's leaf
    // position, the last in its root position, every one between as a CA, so the report says what each
    // extra certificate lacks (a PCK leaf acting as an issuer is named as such).
    let generic_ca = Position {
        what: "intermediate",
        role: Role::Ca,
        names: &[],
    };
    let middle = shape
        .iter()
        .find(|p| p.role == Role::Ca)
        .copied()
        .unwrap_or(generic_ca);
    let positions: Vec<Position<'_>> = if chain.len() == shape.len() {
        shape.to_vec()
    } else {
        (0..chain.len())
            .map(|i| match (i, shape.first(), shape.last()) {
                (0, Some(first), _) => *first,
                (i, _, Some(last)) if i + 1 == chain.len() => *last,
                _ => middle,
            })
            .collect()
    };
    for (i, (cert, pos)) in chain.iter().zip(&positions).enumerate() {
        let mut v = |rule: Rule, detail: String| {
            out.push(Violation {
                rule,
                index: Some(i),
                detail: format!("{}: {detail}", pos.what),
            })
        };
        let subject_cn = cn(cert.subject());
        if !pos.names.is_empty() && !pos.names.contains(&subject_cn.as_str()) {
            v(
                Rule::SubjectName,
                format!(
                    "subject CN={subject_cn}, expected CN={}",
                    pos.names.join(" or CN=")
                ),
            );
        }
        // Issuer linkage: the next certificate's subject, or itself for the root.
        match (pos.role, chain.get(i + 1)) {
            (Role::Root, _) if cert.issuer().as_raw() != cert.subject().as_raw() => v(
                Rule::IssuerName,
                format!(
                    "root issuer CN={} differs from its subject CN={subject_cn} (not self-issued)",
                    cn(cert.issuer())
                ),
            ),
            (Role::Root, _) => {}
            (_, Some(next)) if cert.issuer().as_raw() != next.subject().as_raw() => v(
                Rule::IssuerName,
                format!(
                    "issuer CN={} is not the subject CN={} of the next certificate",
                    cn(cert.issuer()),
                    cn(next.subject())
                ),
            ),
            _ => {}
        }
        for ext in cert.extensions() {
            let oid = ext.oid.to_id_string();
            if ext.critical && oid != OID_BASIC_CONSTRAINTS && oid != OID_KEY_USAGE {
                v(
                    Rule::CriticalExtension,
                    format!("critical extension {oid} is not understood"),
                );
            }
        }
        let bc = match cert.basic_constraints() {
            Ok(b) => b.map(|b| (b.value.ca, b.value.path_len_constraint)),
            Err(e) => {
                v(Rule::Extension, format!("basicConstraints: {e}"));
                None
            }
        };
        let ku = match cert.key_usage() {
            Ok(k) => k.map(|k| *k.value),
            Err(e) => {
                v(Rule::Extension, format!("keyUsage: {e}"));
                None
            }
        };
        match pos.role {
            Role::Root | Role::Ca => {
                match bc {
                    Some((true, path_len)) => {
                        // CAs strictly between this one and the leaf.
                        let below = i.saturating_sub(1);
                        if let Some(n) = path_len {
                            if (n as usize) < below {
                                v(
                                    Rule::PathLength,
                                    format!("pathLenConstraint {n}, but {below} CA(s) follow it"),
                                );
                            }
                        }
                    }
                    Some((false, _)) => v(
                        Rule::BasicConstraints,
                        "basicConstraints CA:FALSE on an issuer, expected CA:TRUE".into(),
                    ),
                    None => v(
                        Rule::BasicConstraints,
                        "no basicConstraints on an issuer, expected CA:TRUE".into(),
                    ),
                }
                if let Some(k) = ku {
                    if !k.key_cert_sign() {
                        v(
                            Rule::KeyUsage,
                            format!("key usage {k} lacks keyCertSign on an issuer"),
                        );
                    }
                }
            }
            Role::Leaf => {
                if let Some((true, _)) = bc {
                    v(
                        Rule::LeafIsCa,
                        "basicConstraints CA:TRUE on an end-entity certificate".into(),
                    );
                }
                if let Some(k) = ku {
                    if k.key_cert_sign() || k.crl_sign() {
                        v(
                            Rule::KeyUsage,
                            format!("key usage {k} of an end-entity certificate allows signing certificates or CRLs"),
                        );
                    } else if !k.digital_signature() {
                        v(
                            Rule::KeyUsage,
                            format!("key usage {k} lacks digitalSignature"),
                        );
                    }
                }
            }
        }
    }
    out
}

/// Whether `issuer` may sign CRLs: a CA whose key usage, where present, has `cRLSign`.
pub(crate) fn may_sign_crls(issuer: &X509Certificate<'_>) -> Result<(), String> {
    match issuer.basic_constraints() {
        Ok(Some(b)) if b.value.ca => {}
        Ok(_) => {
            return Err(format!(
                "CRL issuer CN={} is not a CA",
                cn(issuer.subject())
            ))
        }
        Err(e) => return Err(format!("CRL issuer basicConstraints: {e}")),
    }
    match issuer.key_usage() {
        Ok(Some(k)) if !k.value.crl_sign() => Err(format!(
            "CRL issuer CN={} has key usage {} without cRLSign",
            cn(issuer.subject()),
            k.value
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("CRL issuer keyUsage: {e}")),
    }
}

/// Which side of a CRL's window the verification time falls outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrlWindow {
    /// `thisUpdate` is after the verification time (a CRL from the future).
    ThisUpdate {
        /// thisUpdate, Unix seconds.
        this_update: i64,
    },
    /// `nextUpdate` is before the verification time (a stale CRL), or absent.
    NextUpdate {
        /// nextUpdate, Unix seconds (None: the CRL has none, so it never says when it is stale).
        next_update: Option<i64>,
    },
}

/// Checks `thisUpdate <= at` and `at < nextUpdate` (a CRL without nextUpdate is refused: nothing says how old
/// it may be). Both sides are reported.
pub fn crl_window(crl: &CertificateRevocationList<'_>, at: i64) -> Vec<CrlWindow> {
    let mut out = Vec::new();
    let this = crl.last_update().timestamp();
    if this > at {
        out.push(CrlWindow::ThisUpdate { this_update: this });
    }
    match crl.next_update().map(|t| t.timestamp()) {
        Some(n) if at < n => {}
        n => out.push(CrlWindow::NextUpdate { next_update: n }),
    }
    out
}

/// Whether `crl` (already matched to its issuer) lists `cert`'s serial number.
pub fn crl_revokes(
    crl: &CertificateRevocationList<'_>,
    cert: &X509Certificate<'_>,
) -> Option<String> {
    let serial = strip_zeros(cert.raw_serial());
    crl.iter_revoked_certificates()
        .find(|r| strip_zeros(r.raw_serial()) == serial)
        .map(|r| r.revocation_date.to_string())
}

fn strip_zeros(b: &[u8]) -> &[u8] {
    let i = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    &b[i..]
}

/// Why a CRL file holds no usable CRL (see [`crls_from_file_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrlFileError {
    /// A PEM block could not be read.
    #[error("CRL PEM block {index} is malformed ({detail})")]
    MalformedPem {
        /// The block's index in the file, from 0.
        index: usize,
        /// The PEM reader's words.
        detail: String,
    },
    /// A PEM block is labelled as something else.
    #[error("PEM block {index} is {label:?}, expected \"X509 CRL\"")]
    NotACrl {
        /// The block's index in the file, from 0.
        index: usize,
        /// The label it has.
        label: String,
    },
    /// PEM text with no block at all.
    #[error("CRL file holds no PEM block")]
    Empty,
}

/// Every CRL in `data`: each PEM `X509 CRL` block when the data is PEM, else one DER CRL. A file with no CRL,
/// a block that is not a CRL, or bytes after a DER CRL are errors.
pub fn crls_from_file_bytes(data: &[u8]) -> Result<Vec<Vec<u8>>, CrlFileError> {
    use x509_parser::pem::Pem;
    if data.windows(10).any(|w| w == b"-----BEGIN") {
        let mut out = Vec::new();
        for (index, pem) in Pem::iter_from_buffer(data).enumerate() {
            let pem = pem.map_err(|e| CrlFileError::MalformedPem {
                index,
                detail: e.to_string(),
            })?;
            if pem.label != "X509 CRL" {
                return Err(CrlFileError::NotACrl {
                    index,
                    label: pem.label,
                });
            }
            out.push(pem.contents);
        }
        if out.is_empty() {
            return Err(CrlFileError::Empty);
        }
        Ok(out)
    } else {
        Ok(vec![data.to_vec()])
    }
}

/// A DER parse error of x509-parser in words, without the parser's Debug text (`Parsing Error:
/// Der(UnexpectedTag { .. })`): what was wrong and, for a tag mismatch, the tags.
pub fn der_error(e: &x509_parser::nom::Err<x509_parser::error::X509Error>) -> String {
    use x509_parser::der_parser::error::BerError;
    use x509_parser::error::X509Error;
    use x509_parser::nom::{Err, Needed};
    let inner = match e {
        Err::Incomplete(Needed::Size(n)) => return format!("truncated: {n} more byte(s) needed"),
        Err::Incomplete(Needed::Unknown) => return "truncated: more bytes needed".into(),
        Err::Error(x) | Err::Failure(x) => x,
    };
    match inner {
        X509Error::Der(ber) => match ber {
            BerError::UnexpectedTag { expected, actual } => match expected {
                Some(t) => format!(
                    "unexpected DER tag {} where tag {} was expected",
                    actual.0, t.0
                ),
                None => format!("unexpected DER tag {}", actual.0),
            },
            BerError::InvalidLength => "invalid DER length".into(),
            BerError::Incomplete(_) => "truncated DER".into(),
            BerError::UnknownTag(t) => format!("unknown DER tag {t}"),
            BerError::InvalidTag => "invalid DER tag".into(),
            BerError::IndefiniteLengthUnexpected => "indefinite length (not DER)".into(),
            BerError::BerMaxDepth => "DER nested too deeply".into(),
            BerError::DerConstraintFailed(_) => "not DER (a BER-only encoding)".into(),
            _ => "malformed DER".into(),
        },
        X509Error::NomError(_) => "malformed DER".into(),
        other => other.to_string(),
    }
}
