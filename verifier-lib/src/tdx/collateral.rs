//! Collateral for offline verification, in the layout of dcap-qvl's `QuoteCollateralV3` (what
//! `../shared/vectors/tdx/*/collateral.json` holds): PEM issuer chains, hex CRLs (DER) and hex signatures, and
//! TCB Info / QE Identity as the exact JSON text Intel signed. The typed views of that JSON live here too.

use serde::{Deserialize, Serialize};

use super::x509::{parse_pem_chain, Cert, Crl, X509Error};

/// The collateral file as stored (`collateral.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollateralFile {
    /// PEM chain of the PCK CRL issuer (PCK Platform/Processor CA, root).
    pub pck_crl_issuer_chain: String,
    /// The root CA CRL, DER as hex.
    pub root_ca_crl: String,
    /// The PCK CRL, DER as hex.
    pub pck_crl: String,
    /// PEM chain of the TCB Info signer (TCB Signing, root).
    pub tcb_info_issuer_chain: String,
    /// The TCB Info JSON text exactly as signed.
    pub tcb_info: String,
    /// ECDSA P-256 r || s over `tcb_info`, hex.
    pub tcb_info_signature: String,
    /// PEM chain of the QE Identity signer.
    pub qe_identity_issuer_chain: String,
    /// The QE Identity JSON text exactly as signed.
    pub qe_identity: String,
    /// ECDSA P-256 r || s over `qe_identity`, hex.
    pub qe_identity_signature: String,
}

/// Collateral decoded: certificates and CRLs parsed, texts kept byte-exact, JSON typed.
#[derive(Debug, Clone)]
pub struct Collateral {
    /// PCK CRL issuer chain.
    pub pck_crl_issuer_chain: Vec<Cert>,
    /// Root CA CRL.
    pub root_ca_crl: Crl,
    /// PCK CRL.
    pub pck_crl: Crl,
    /// TCB Info issuer chain.
    pub tcb_info_issuer_chain: Vec<Cert>,
    /// TCB Info text (signed bytes).
    pub tcb_info_text: String,
    /// TCB Info signature (64 bytes).
    pub tcb_info_signature: Vec<u8>,
    /// TCB Info typed.
    pub tcb_info: TcbInfo,
    /// QE Identity issuer chain.
    pub qe_identity_issuer_chain: Vec<Cert>,
    /// QE Identity text (signed bytes).
    pub qe_identity_text: String,
    /// QE Identity signature (64 bytes).
    pub qe_identity_signature: Vec<u8>,
    /// QE Identity typed.
    pub qe_identity: QeIdentity,
}

/// Why collateral could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CollateralError {
    /// The file is not the collateral JSON layout.
    #[error("collateral is not QuoteCollateralV3 JSON: {0}")]
    Json(String),
    /// A hex field is not hex.
    #[error("collateral field {field} is not hex: {detail}")]
    Hex {
        /// The field.
        field: &'static str,
        /// The decoder's message.
        detail: String,
    },
    /// A certificate or CRL is unreadable.
    #[error(transparent)]
    X509(#[from] X509Error),
    /// TCB Info or QE Identity text is not the expected JSON.
    #[error("collateral field {field} is not the expected JSON: {detail}")]
    Body {
        /// The field.
        field: &'static str,
        /// The parser's message.
        detail: String,
    },
}

/// A hex field decoded, as [`hex::decode`] of the trimmed text decodes it (a table lookup per digit instead of
/// the crate's checked iterator: the CRLs are 6 K digits); what is not hex gets the crate's own message.
fn unhex(field: &'static str, s: &str) -> Result<Vec<u8>, CollateralError> {
    fn nibble(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let t = s.trim().as_bytes();
    if t.len() % 2 == 0 {
        let mut out = Vec::with_capacity(t.len() / 2);
        for pair in t.chunks_exact(2) {
            match (nibble(pair[0]), nibble(pair[1])) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => break,
            }
        }
        if out.len() * 2 == t.len() {
            return Ok(out);
        }
    }
    hex::decode(s.trim()).map_err(|e| CollateralError::Hex {
        field,
        detail: e.to_string(),
    })
}

impl Collateral {
    /// Parses `collateral.json` bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CollateralError> {
        let f: CollateralFile =
            serde_json::from_slice(bytes).map_err(|e| CollateralError::Json(e.to_string()))?;
        Self::from_file(&f)
    }

    /// Decodes the stored layout.
    pub fn from_file(f: &CollateralFile) -> Result<Self, CollateralError> {
        let tcb_info: TcbInfo =
            serde_json::from_str(&f.tcb_info).map_err(|e| CollateralError::Body {
                field: "tcb_info",
                detail: e.to_string(),
            })?;
        let qe_identity: QeIdentity =
            serde_json::from_str(&f.qe_identity).map_err(|e| CollateralError::Body {
                field: "qe_identity",
                detail: e.to_string(),
            })?;
        Ok(Collateral {
            pck_crl_issuer_chain: parse_pem_chain(
                "pck_crl_issuer_chain",
                f.pck_crl_issuer_chain.as_bytes(),
            )?,
            root_ca_crl: Crl::from_der("root_ca_crl", &unhex("root_ca_crl", &f.root_ca_crl)?)?,
            pck_crl: Crl::from_der("pck_crl", &unhex("pck_crl", &f.pck_crl)?)?,
            tcb_info_issuer_chain: parse_pem_chain(
                "tcb_info_issuer_chain",
                f.tcb_info_issuer_chain.as_bytes(),
            )?,
            tcb_info_text: f.tcb_info.clone(),
            tcb_info_signature: unhex("tcb_info_signature", &f.tcb_info_signature)?,
            tcb_info,
            qe_identity_issuer_chain: parse_pem_chain(
                "qe_identity_issuer_chain",
                f.qe_identity_issuer_chain.as_bytes(),
            )?,
            qe_identity_text: f.qe_identity.clone(),
            qe_identity_signature: unhex("qe_identity_signature", &f.qe_identity_signature)?,
            qe_identity,
        })
    }
}

/// Where the collateral a verification used came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CollateralSource {
    /// The founder's `--collateral` file.
    Founder,
    /// The collateral the evidence carried (the founder gave none).
    Evidence,
    /// Handed to the library directly (`tdx-quote --collateral`, library callers).
    Given,
}

impl CollateralSource {
    /// A few words for the human table.
    pub fn describe(self) -> &'static str {
        match self {
            CollateralSource::Founder => "the founder's --collateral",
            CollateralSource::Evidence => "carried in the evidence (no --collateral given)",
            CollateralSource::Given => "--collateral",
        }
    }
}

/// Which collateral a verification used: its source and the issue dates and next updates of each part, so a
/// founder can see how fresh the TCB Info, QE Identity and CRLs were.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollateralUsed {
    /// Where it came from.
    pub source: CollateralSource,
    /// The evidence carried collateral too, and it was not used (the founder's wins).
    pub evidence_collateral_ignored: bool,
    /// TCB Info issueDate (as signed).
    pub tcb_info_issue_date: String,
    /// TCB Info nextUpdate.
    pub tcb_info_next_update: String,
    /// TCB Info tcbEvaluationDataNumber.
    pub tcb_evaluation_data_number: u32,
    /// QE Identity issueDate.
    pub qe_identity_issue_date: String,
    /// QE Identity nextUpdate.
    pub qe_identity_next_update: String,
    /// Root CA CRL thisUpdate (RFC 3339).
    pub root_ca_crl_this_update: String,
    /// Root CA CRL nextUpdate (None: absent).
    pub root_ca_crl_next_update: Option<String>,
    /// PCK CRL thisUpdate.
    pub pck_crl_this_update: String,
    /// PCK CRL nextUpdate.
    pub pck_crl_next_update: Option<String>,
}

impl CollateralUsed {
    /// Rows for the human table: where the collateral came from and each part's dates.
    pub fn rows(&self) -> Vec<(String, String)> {
        let next = |n: &Option<String>| n.clone().unwrap_or_else(|| "none".into());
        let mut source = self.source.describe().to_string();
        if self.evidence_collateral_ignored {
            source.push_str("; the evidence's own collateral was NOT used");
        }
        vec![
            ("collateral".into(), source),
            (
                "tcb info".into(),
                format!(
                    "issued {}, next update {} (evaluation data number {})",
                    self.tcb_info_issue_date,
                    self.tcb_info_next_update,
                    self.tcb_evaluation_data_number
                ),
            ),
            (
                "qe identity".into(),
                format!(
                    "issued {}, next update {}",
                    self.qe_identity_issue_date, self.qe_identity_next_update
                ),
            ),
            (
                "root ca crl".into(),
                format!(
                    "this update {}, next update {}",
                    self.root_ca_crl_this_update,
                    next(&self.root_ca_crl_next_update)
                ),
            ),
            (
                "pck crl".into(),
                format!(
                    "this update {}, next update {}",
                    self.pck_crl_this_update,
                    next(&self.pck_crl_next_update)
                ),
            ),
        ]
    }
}

fn rfc3339(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("@{t}"))
}

impl Collateral {
    /// What this collateral is, for the output: source and dates.
    pub fn used(&self, source: CollateralSource) -> CollateralUsed {
        let (rt, rn) = self.root_ca_crl.window();
        let (pt, pn) = self.pck_crl.window();
        CollateralUsed {
            source,
            evidence_collateral_ignored: false,
            tcb_info_issue_date: self.tcb_info.issue_date.clone(),
            tcb_info_next_update: self.tcb_info.next_update.clone(),
            tcb_evaluation_data_number: self.tcb_info.tcb_evaluation_data_number,
            qe_identity_issue_date: self.qe_identity.issue_date.clone(),
            qe_identity_next_update: self.qe_identity.next_update.clone(),
            root_ca_crl_this_update: rfc3339(rt),
            root_ca_crl_next_update: rn.map(rfc3339),
            pck_crl_this_update: rfc3339(pt),
            pck_crl_next_update: pn.map(rfc3339),
        }
    }
}

/// The collateral chosen for TDX evidence, and from where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chosen<'a> {
    /// The collateral JSON bytes.
    pub bytes: &'a [u8],
    /// Where they came from.
    pub source: CollateralSource,
    /// The evidence carried collateral that was not used.
    pub evidence_ignored: bool,
}

/// Chooses the collateral for TDX evidence. The founder's `--collateral` wins whenever it is given: the
/// evidence's collateral was chosen by the host, which could ship older (still valid) TCB Info and CRLs that
/// hide a newer revocation or TCB recovery; the founder's was fetched by the party the verdict serves. The
/// evidence's collateral is used only when the founder gave none. The reserved map form of evidence collateral
/// is refused (docs/evidence-format.md: readers that do not know it refuse it), whatever the founder gave.
pub(crate) fn choose_for_evidence<'a>(
    evidence: Option<&'a attestation::evidence::Collateral>,
    founder: Option<&'a [u8]>,
) -> Result<Option<Chosen<'a>>, String> {
    use attestation::evidence::Collateral as C;
    let carried = match evidence {
        None => None,
        Some(C::Bytes(b)) => Some(b.as_slice()),
        Some(C::Map(m)) => {
            return Err(format!(
                "the evidence carries collateral in the reserved map form (keys {}); only the byte-string \
                 form (collateral.json) is defined",
                m.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        }
        #[allow(unreachable_patterns)]
        Some(_) => return Err("the evidence carries collateral in an unknown form".into()),
    };
    Ok(match (founder, carried) {
        (Some(f), c) => Some(Chosen {
            bytes: f,
            source: CollateralSource::Founder,
            evidence_ignored: c.is_some(),
        }),
        (None, Some(c)) => Some(Chosen {
            bytes: c,
            source: CollateralSource::Evidence,
            evidence_ignored: false,
        }),
        (None, None) => None,
    })
}

/// TCB Info (TDX, version 3) as Intel's PCS publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcbInfo {
    /// "TDX" for TDX TCB Info.
    pub id: String,
    /// Structure version (3).
    pub version: u32,
    /// Issue date (RFC 3339).
    pub issue_date: String,
    /// Next update (RFC 3339): the collateral expires then.
    pub next_update: String,
    /// FMSPC, hex.
    pub fmspc: String,
    /// PCE ID, hex.
    pub pce_id: String,
    /// TCB type.
    #[serde(default)]
    pub tcb_type: u32,
    /// TCB evaluation data number.
    #[serde(default)]
    pub tcb_evaluation_data_number: u32,
    /// The TDX module (version 0) identity.
    #[serde(default)]
    pub tdx_module: Option<TdxModule>,
    /// Identities of TDX modules with major version > 0.
    #[serde(default)]
    pub tdx_module_identities: Vec<TdxModuleIdentity>,
    /// TCB levels, highest first.
    pub tcb_levels: Vec<TcbLevel>,
}

/// The `tdxModule` object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TdxModule {
    /// MRSIGNER of the module, hex (48 bytes).
    pub mrsigner: String,
    /// Expected SEAM attributes, hex.
    pub attributes: String,
    /// Mask applied to SEAM attributes, hex.
    pub attributes_mask: String,
}

/// One `tdxModuleIdentities` entry (`TDX_01`, `TDX_03`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TdxModuleIdentity {
    /// `TDX_%02X` of the module major version.
    pub id: String,
    /// MRSIGNER, hex.
    pub mrsigner: String,
    /// Expected SEAM attributes, hex.
    pub attributes: String,
    /// Mask, hex.
    pub attributes_mask: String,
    /// Levels graded on the module minor SVN (TEE_TCB_SVN[0]).
    pub tcb_levels: Vec<IsvTcbLevel>,
}

/// A TCB level graded on one ISV SVN (TDX module identities, QE identity).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IsvTcbLevel {
    /// The SVN.
    pub tcb: IsvSvn,
    /// Date of the level.
    #[serde(default)]
    pub tcb_date: String,
    /// Status name.
    pub tcb_status: String,
    /// Advisories.
    #[serde(default, rename = "advisoryIDs")]
    pub advisory_ids: Vec<String>,
}

/// `{"isvsvn": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct IsvSvn {
    /// The SVN.
    pub isvsvn: u16,
}

/// A platform TCB level.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcbLevel {
    /// Its TCB.
    pub tcb: LevelTcb,
    /// Date.
    #[serde(default)]
    pub tcb_date: String,
    /// Status name.
    pub tcb_status: String,
    /// Advisories.
    #[serde(default, rename = "advisoryIDs")]
    pub advisory_ids: Vec<String>,
}

/// The `tcb` object of a platform level.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LevelTcb {
    /// 16 SGX components.
    pub sgxtcbcomponents: Vec<Component>,
    /// PCESVN.
    pub pcesvn: u16,
    /// 16 TDX components.
    #[serde(default)]
    pub tdxtcbcomponents: Vec<Component>,
}

/// A component SVN (category and type are informative).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Component {
    /// The SVN.
    pub svn: u8,
}

/// QE Identity (TD_QE, version 2).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QeIdentity {
    /// "TD_QE".
    pub id: String,
    /// Version.
    pub version: u32,
    /// Issue date.
    pub issue_date: String,
    /// Next update.
    pub next_update: String,
    /// TCB evaluation data number.
    #[serde(default)]
    pub tcb_evaluation_data_number: u32,
    /// MISCSELECT, hex.
    pub miscselect: String,
    /// MISCSELECT mask, hex.
    pub miscselect_mask: String,
    /// ATTRIBUTES, hex.
    pub attributes: String,
    /// ATTRIBUTES mask, hex.
    pub attributes_mask: String,
    /// MRSIGNER, hex.
    pub mrsigner: String,
    /// ISVPRODID.
    pub isvprodid: u16,
    /// Levels graded on the QE's ISVSVN.
    pub tcb_levels: Vec<IsvTcbLevel>,
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// `unhex` answers as `hex::decode` of the trimmed text: the same bytes, or the same message.
        #[test]
        fn unhex_is_hex_decode_of_the_trimmed_text(
            s in proptest::string::string_regex("[ \t\n]{0,2}[0-9a-fA-F]{0,12}[0-9a-fA-Fg x\u{e9}]{0,2}[ \n]{0,2}")
                .expect("regex")
        ) {
            let want = hex::decode(s.trim()).map_err(|e| CollateralError::Hex {
                field: "f",
                detail: e.to_string(),
            });
            proptest::prop_assert_eq!(unhex("f", &s), want);
        }
    }
}
