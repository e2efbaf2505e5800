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

fn unhex(field: &'static str, s: &str) -> Result<Vec<u8>, CollateralError> {
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
