//! A software Intel QE and PCS: a sim SGX root CA, PCK Platform CA and PCK leaf (all P-256, ecdsa-with-SHA256,
//! the leaf carrying Intel's SGX extension profile: PPID, TCB components, PCESVN, CPUSVN, PCE-ID, FMSPC, SGX
//! type), a sim QE whose report the PCK key signs, quotes for TD fields the caller chooses, and matching
//! collateral (TCB Info and QE Identity signed by a sim TCB signing key, root and PCK CRLs) in the
//! `collateral.json` layout. Keys are generated into `<state>/tdx/` at first use and never committed.

use super::state::{ensure_dir, read_optional, write_atomic, StateLock};
use super::SimError;
use crate::evidence::{Collateral, TeeLabel};
use crate::tdx::{
    CertificationData, EnclaveReport, PckCertData, QeReportCertData, Quote, QuoteBody, QuoteHeader,
    SignatureData, TdReport10, TdReport15, ATT_KEY_TYPE_ECDSA_P256, TEE_TYPE_TDX,
};
use crate::tee::{RawEvidence, Tee, TeeError};
use der::asn1::{Any, BitString, ObjectIdentifier, OctetString, SetOfVec, UtcTime};
use der::{Decode, Encode, Tag};
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::crl::{CertificateList, RevokedCert, TbsCertList};
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, KeyUsages};
use x509_cert::ext::Extension;
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};
use x509_cert::{Certificate, TbsCertificate, Version};

/// Organization of every sim TDX certificate (Intel's is "Intel Corporation").
pub const SIM_ORGANIZATION: &str = "SIMULATED Intel Corporation (fenced-run sim)";
/// OID of ecdsa-with-SHA256.
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
/// OID of Intel's SGX extensions.
const SGX_EXTENSIONS: &str = "1.2.840.113741.1.13.1";
/// Intel's QE vendor ID, which the sim QE uses too (the verifier does not trust it).
pub const QE_VENDOR_ID: [u8; 16] = [
    0x93, 0x9a, 0x72, 0x33, 0xf7, 0x9c, 0x4c, 0xa9, 0x94, 0x0a, 0x0d, 0xb3, 0x95, 0x7f, 0x06, 0x07,
];
/// The advisory ID the sim collateral attaches to its OutOfDate level.
pub const SIM_ADVISORY: &str = "INTEL-SA-SIM-0001";

fn der_err(what: &str) -> impl FnOnce(der::Error) -> SimError + '_ {
    move |e| SimError::Der(format!("{what}: {e}"))
}

/// The platform the sim QE runs on: what goes into the PCK certificate and the TCB Info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPlatform {
    /// FMSPC (6 bytes).
    pub fmspc: [u8; 6],
    /// PCE-ID.
    pub pceid: [u8; 2],
    /// SGX TCB component SVNs.
    pub sgx_tcb_components: [u8; 16],
    /// PCESVN.
    pub pcesvn: u16,
    /// The QE's ISVSVN.
    pub qe_isv_svn: u16,
    /// The QE's MRSIGNER.
    pub qe_mr_signer: [u8; 32],
    /// The QE's MRENCLAVE.
    pub qe_mr_enclave: [u8; 32],
}

impl Default for SimPlatform {
    fn default() -> Self {
        SimPlatform {
            fmspc: [0x00, 0x80, 0x6f, 0x05, 0x00, 0x00],
            pceid: [0, 0],
            sgx_tcb_components: [7, 7, 2, 2, 3, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0],
            pcesvn: 11,
            qe_isv_svn: 6,
            qe_mr_signer: [0x5a; 32],
            qe_mr_enclave: [0xe5; 32],
        }
    }
}

/// The TD fields of a sim quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimTd {
    /// TEE_TCB_SVN (byte 0 module minor SVN, byte 1 module major version).
    pub tee_tcb_svn: [u8; 16],
    /// MRSEAM.
    pub mr_seam: [u8; 48],
    /// TD attributes (default: SEPT_VE_DISABLE only).
    pub td_attributes: [u8; 8],
    /// XFAM.
    pub xfam: [u8; 8],
    /// MRTD.
    pub mrtd: [u8; 48],
    /// MRCONFIGID.
    pub mr_config_id: [u8; 48],
    /// MROWNER.
    pub mr_owner: [u8; 48],
    /// MROWNERCONFIG.
    pub mr_owner_config: [u8; 48],
    /// RTMR0..3.
    pub rtmr: [[u8; 48]; 4],
    /// REPORTDATA.
    pub report_data: [u8; 64],
    /// For a v5 TD 1.5 quote: (TEE_TCB_SVN2, MR_SERVICETD); None gives a v4 TD 1.0 quote.
    pub td15: Option<([u8; 16], [u8; 48])>,
}

impl Default for SimTd {
    fn default() -> Self {
        SimTd {
            tee_tcb_svn: [4, 1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            mr_seam: [0x5e; 48],
            td_attributes: [0, 0, 0, 0x10, 0, 0, 0, 0],
            xfam: [0xe7, 0x02, 0x06, 0, 0, 0, 0, 0],
            mrtd: [0; 48],
            mr_config_id: [0; 48],
            mr_owner: [0; 48],
            mr_owner_config: [0; 48],
            rtmr: [[0; 48]; 4],
            report_data: [0; 64],
            td15: None,
        }
    }
}

fn load_or_make_key(path: &Path) -> Result<SigningKey, SimError> {
    if let Some(der) = read_optional(path)? {
        return SigningKey::from_pkcs8_der(&der).map_err(|e| SimError::StateCorrupt {
            path: path.to_owned(),
            detail: e.to_string(),
        });
    }
    let key = SigningKey::random(&mut rand::thread_rng());
    let der = key
        .to_pkcs8_der()
        .map_err(|e| SimError::Crypto(e.to_string()))?;
    write_atomic(path, der.as_bytes())?;
    Ok(key)
}

fn name(cn: &str) -> Result<Name, SimError> {
    use der::oid::db::rfc4519;
    let attr =
        |oid: ObjectIdentifier, tag: Tag, v: &str| -> Result<RelativeDistinguishedName, SimError> {
            let value = Any::new(tag, v.as_bytes()).map_err(der_err("name attribute"))?;
            let set = SetOfVec::try_from(vec![AttributeTypeAndValue { oid, value }])
                .map_err(der_err("name RDN"))?;
            Ok(RelativeDistinguishedName::from(set))
        };
    Ok(RdnSequence(vec![
        attr(rfc4519::CN, Tag::Utf8String, cn)?,
        attr(rfc4519::O, Tag::Utf8String, SIM_ORGANIZATION)?,
        attr(rfc4519::L, Tag::Utf8String, "Santa Clara")?,
        attr(rfc4519::ST, Tag::Utf8String, "CA")?,
        attr(rfc4519::C, Tag::PrintableString, "US")?,
    ]))
}

fn utc(secs: u64) -> Result<Time, SimError> {
    // UTCTime ends in 2049; Intel's own root uses 2049-12-31T23:59:59Z as its end.
    let secs = secs.min(2_524_607_999);
    Ok(Time::UtcTime(
        UtcTime::from_unix_duration(Duration::from_secs(secs)).map_err(der_err("time"))?,
    ))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn ecdsa_alg() -> AlgorithmIdentifierOwned {
    AlgorithmIdentifierOwned {
        oid: ECDSA_WITH_SHA256,
        parameters: None,
    }
}

fn spki(key: &SigningKey) -> Result<SubjectPublicKeyInfoOwned, SimError> {
    let der = key
        .verifying_key()
        .to_public_key_der()
        .map_err(|e| SimError::Crypto(e.to_string()))?;
    SubjectPublicKeyInfoOwned::from_der(der.as_bytes()).map_err(der_err("SPKI"))
}

fn ext<T: Encode>(oid: ObjectIdentifier, critical: bool, value: &T) -> Result<Extension, SimError> {
    let der = value.to_der().map_err(der_err("extension value"))?;
    Ok(Extension {
        extn_id: oid,
        critical,
        extn_value: OctetString::new(der).map_err(der_err("extension"))?,
    })
}

fn serial(n: u64) -> Result<SerialNumber, SimError> {
    let mut b = n.to_be_bytes().to_vec();
    b.insert(0, 0x01);
    SerialNumber::new(&b).map_err(der_err("serial"))
}

/// DER TLV with a definite length.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = n.to_be_bytes();
        let skip = bytes
            .iter()
            .position(|b| *b != 0)
            .unwrap_or(bytes.len() - 1);
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

fn der_uint(v: u64) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let skip = bytes
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(bytes.len() - 1);
    let mut c = bytes[skip..].to_vec();
    if c[0] & 0x80 != 0 {
        c.insert(0, 0);
    }
    c
}

fn oid_tlv(s: &str) -> Result<Vec<u8>, SimError> {
    let oid = ObjectIdentifier::new(s).map_err(|e| SimError::Der(format!("OID {s}: {e}")))?;
    Ok(tlv(0x06, oid.as_bytes()))
}

fn entry(suffix: &str, value: Vec<u8>) -> Result<Vec<u8>, SimError> {
    let mut c = oid_tlv(&format!("{SGX_EXTENSIONS}.{suffix}"))?;
    c.extend_from_slice(&value);
    Ok(tlv(0x30, &c))
}

/// The SGX extension value (a SEQUENCE of (OID, value)) in Intel's order: PPID, TCB, PCE-ID, FMSPC, SGX type.
fn sgx_extension(p: &SimPlatform, ppid: &[u8; 16]) -> Result<Vec<u8>, SimError> {
    sgx_extension_with_cpusvn(p, ppid, &p.sgx_tcb_components)
}

/// [`sgx_extension`] with a CPUSVN of the caller's choice (Intel's equals the 16 component SVNs).
fn sgx_extension_with_cpusvn(
    p: &SimPlatform,
    ppid: &[u8; 16],
    cpusvn: &[u8; 16],
) -> Result<Vec<u8>, SimError> {
    let mut tcb = Vec::new();
    for (i, svn) in p.sgx_tcb_components.iter().enumerate() {
        tcb.extend(entry(
            &format!("2.{}", i + 1),
            tlv(0x02, &der_uint(u64::from(*svn))),
        )?);
    }
    tcb.extend(entry("2.17", tlv(0x02, &der_uint(u64::from(p.pcesvn))))?);
    tcb.extend(entry("2.18", tlv(0x04, cpusvn))?);
    let mut seq = entry("1", tlv(0x04, ppid))?;
    seq.extend(entry("2", tlv(0x30, &tcb))?);
    seq.extend(entry("3", tlv(0x04, &p.pceid))?);
    seq.extend(entry("4", tlv(0x04, &p.fmspc))?);
    seq.extend(entry("5", tlv(0x0a, &[1]))?);
    Ok(tlv(0x30, &seq))
}

fn sign_der(key: &SigningKey, msg: &[u8]) -> Vec<u8> {
    let sig: Signature = key.sign(msg);
    sig.to_der().as_bytes().to_vec()
}

#[allow(clippy::too_many_arguments)]
fn issue(
    issuer_key: &SigningKey,
    issuer_cn: &str,
    subject_key: &SigningKey,
    subject_cn: &str,
    serial_no: u64,
    ca: bool,
    extra: Vec<Extension>,
    window: (u64, u64),
) -> Result<Vec<u8>, SimError> {
    let mut exts = vec![ext(
        der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
        true,
        &BasicConstraints {
            ca,
            path_len_constraint: if ca { Some(1) } else { None },
        },
    )?];
    let usage = if ca {
        KeyUsages::KeyCertSign | KeyUsages::CRLSign
    } else {
        KeyUsages::DigitalSignature.into()
    };
    exts.push(ext(
        der::oid::db::rfc5280::ID_CE_KEY_USAGE,
        true,
        &KeyUsage(usage),
    )?);
    exts.extend(extra);
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: serial(serial_no)?,
        signature: ecdsa_alg(),
        issuer: name(issuer_cn)?,
        validity: Validity {
            not_before: utc(window.0)?,
            not_after: utc(window.1)?,
        },
        subject: name(subject_cn)?,
        subject_public_key_info: spki(subject_key)?,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(exts),
    };
    let tbs_der = tbs.to_der().map_err(der_err("TBS"))?;
    let cert = Certificate {
        tbs_certificate: tbs,
        signature_algorithm: ecdsa_alg(),
        signature: BitString::from_bytes(&sign_der(issuer_key, &tbs_der))
            .map_err(der_err("signature"))?,
    };
    cert.to_der().map_err(der_err("certificate"))
}

fn crl(
    issuer_key: &SigningKey,
    issuer_cn: &str,
    this: u64,
    next: u64,
    revoked: &[u64],
) -> Result<Vec<u8>, SimError> {
    let mut entries = Vec::new();
    for n in revoked {
        entries.push(RevokedCert {
            serial_number: serial(*n)?,
            revocation_date: utc(this)?,
            crl_entry_extensions: None,
        });
    }
    let tbs = TbsCertList {
        version: Version::V2,
        signature: ecdsa_alg(),
        issuer: name(issuer_cn)?,
        this_update: utc(this)?,
        next_update: Some(utc(next)?),
        revoked_certificates: (!entries.is_empty()).then_some(entries),
        crl_extensions: None,
    };
    let tbs_der = tbs.to_der().map_err(der_err("CRL TBS"))?;
    let list = CertificateList {
        tbs_cert_list: tbs,
        signature_algorithm: ecdsa_alg(),
        signature: BitString::from_bytes(&sign_der(issuer_key, &tbs_der))
            .map_err(der_err("CRL signature"))?,
    };
    list.to_der().map_err(der_err("CRL"))
}

fn pem(der_bytes: &[u8]) -> Result<String, SimError> {
    der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, der_bytes)
        .map_err(|e| SimError::Der(format!("PEM: {e}")))
}

/// A defect the sim QE or PCS builds into its chain or collateral on request, so that tests can show the
/// verifier refuses exactly that defect (each is what a compromised key or collateral source could do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimDefect {
    /// The PCK leaf (CA:FALSE) signs a fresh leaf claiming the highest TCB; the quote's QE report is signed by
    /// the fresh leaf and its chain is fresh leaf <- PCK leaf <- PCK CA <- root ([`SimQe::quote_with_defect`]).
    LeafSignsLeaf,
    /// TCB Info and QE Identity signed by the PCK leaf key, issuer chain PCK leaf <- PCK CA <- root
    /// ([`SimQe::collateral_json_with_defect`]).
    CollateralSignedByPck,
    /// The PCK leaf's CPUSVN (SGX extension .2.18) differs from its 16 component SVNs
    /// ([`SimQe::quote_with_defect`]).
    CpusvnMismatch,
    /// The root CA CRL expired 30 days before the collateral was issued.
    ExpiredCrl,
    /// The root CA CRL's thisUpdate is 30 days in the future.
    FutureCrl,
}

/// The attacker's step on any chain, real or sim: a certificate issued under `issuer_der` (its subject becomes
/// the issuer name, and the subject is the same PCK-leaf-like name) carrying the SGX extension of `platform`,
/// signed with a fresh key (on a real chain the attacker would hold the PCK key; here the signature is wrong
/// and only the path checks are under test).
pub fn forged_leaf_under(issuer_der: &[u8], platform: &SimPlatform) -> Result<Vec<u8>, SimError> {
    let issuer = Certificate::from_der(issuer_der).map_err(der_err("issuer certificate"))?;
    let key = SigningKey::random(&mut rand::thread_rng());
    let sgx = Extension {
        extn_id: ObjectIdentifier::new(SGX_EXTENSIONS).map_err(|e| SimError::Der(e.to_string()))?,
        critical: false,
        extn_value: OctetString::new(sgx_extension(platform, &[0x11; 16])?)
            .map_err(der_err("SGX extension"))?,
    };
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: serial(0x4242)?,
        signature: ecdsa_alg(),
        issuer: issuer.tbs_certificate.subject.clone(),
        validity: issuer.tbs_certificate.validity,
        subject: issuer.tbs_certificate.subject.clone(),
        subject_public_key_info: spki(&key)?,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(vec![sgx]),
    };
    let tbs_der = tbs.to_der().map_err(der_err("TBS"))?;
    Certificate {
        tbs_certificate: tbs,
        signature_algorithm: ecdsa_alg(),
        signature: BitString::from_bytes(&sign_der(&key, &tbs_der))
            .map_err(der_err("signature"))?,
    }
    .to_der()
    .map_err(der_err("certificate"))
}

/// A certificate of the sim PKI (to name in a CRL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimCert {
    /// The sim root CA (self-signed; cannot be revoked by a CRL it signs, listed for completeness).
    Root,
    /// The sim PCK Platform CA.
    PckCa,
    /// The sim PCK leaf.
    PckLeaf,
    /// The sim TCB signing certificate.
    TcbSigning,
}

impl SimCert {
    /// Its serial number (as issued by [`SimQe`]).
    pub fn serial(self) -> u64 {
        match self {
            SimCert::Root => 1,
            SimCert::PckCa => 2,
            SimCert::PckLeaf => 3,
            SimCert::TcbSigning => 4,
        }
    }

    /// The certificate whose CRL lists it.
    fn issuer(self) -> SimCert {
        match self {
            SimCert::PckLeaf => SimCert::PckCa,
            _ => SimCert::Root,
        }
    }
}

const ROOT_CN: &str = "SIMULATED SGX Root CA";
const PCK_CA_CN: &str = "SIMULATED SGX PCK Platform CA";
const PCK_CN: &str = "SIMULATED SGX PCK Certificate";
const TCB_CN: &str = "SIMULATED SGX TCB Signing";

/// A sim Intel QE with its PCK chain and a sim PCS that signs collateral, backed by a state directory.
pub struct SimQe {
    dir: PathBuf,
    platform: SimPlatform,
    root: SigningKey,
    pck_ca: SigningKey,
    pck: SigningKey,
    tcb_signer: SigningKey,
    attestation: SigningKey,
    ppid: [u8; 16],
    root_der: Vec<u8>,
    pck_ca_der: Vec<u8>,
    pck_der: Vec<u8>,
    tcb_der: Vec<u8>,
}

impl std::fmt::Debug for SimQe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimQe")
            .field("dir", &self.dir)
            .field("platform", &self.platform)
            .finish_non_exhaustive()
    }
}

impl SimQe {
    /// Opens (generating keys on first use) the sim QE in `state_dir/tdx`, on the default platform.
    pub fn new(state_dir: &Path) -> Result<SimQe, SimError> {
        Self::with_platform(state_dir, SimPlatform::default())
    }

    /// Opens the sim QE in the default state directory.
    pub fn open_default() -> Result<SimQe, SimError> {
        Self::new(&super::default_state_dir()?)
    }

    /// Opens the sim QE on a chosen platform (FMSPC, TCB components, QE identity).
    pub fn with_platform(state_dir: &Path, platform: SimPlatform) -> Result<SimQe, SimError> {
        let dir = state_dir.join("tdx");
        ensure_dir(&dir)?;
        let _lock = StateLock::take(&dir)?;
        let root = load_or_make_key(&dir.join("root.p8"))?;
        let pck_ca = load_or_make_key(&dir.join("pck_ca.p8"))?;
        let pck = load_or_make_key(&dir.join("pck.p8"))?;
        let tcb_signer = load_or_make_key(&dir.join("tcb_signing.p8"))?;
        let attestation = load_or_make_key(&dir.join("attestation.p8"))?;
        let ppid: [u8; 16] = Sha256::digest(pck.verifying_key().to_encoded_point(false).as_bytes())
            [..16]
            .try_into()
            .map_err(|_| SimError::Crypto("PPID".into()))?;
        // Certificates are issued afresh on each open (cheap with P-256); only the keys persist. The
        // windows start a day back, for clock skew, and last as Intel's do (root 25 years, others 7).
        let t = now().saturating_sub(86_400);
        let year = 365 * 86_400;
        let root_der = issue(
            &root,
            ROOT_CN,
            &root,
            ROOT_CN,
            SimCert::Root.serial(),
            true,
            Vec::new(),
            (t, t + 25 * year),
        )?;
        let pck_ca_der = issue(
            &root,
            ROOT_CN,
            &pck_ca,
            PCK_CA_CN,
            SimCert::PckCa.serial(),
            true,
            Vec::new(),
            (t, t + 7 * year),
        )?;
        let sgx = Extension {
            extn_id: ObjectIdentifier::new(SGX_EXTENSIONS)
                .map_err(|e| SimError::Der(e.to_string()))?,
            critical: false,
            extn_value: OctetString::new(sgx_extension(&platform, &ppid)?)
                .map_err(der_err("SGX extension"))?,
        };
        let pck_der = issue(
            &pck_ca,
            PCK_CA_CN,
            &pck,
            PCK_CN,
            SimCert::PckLeaf.serial(),
            false,
            vec![sgx],
            (t, t + 7 * year),
        )?;
        let tcb_der = issue(
            &root,
            ROOT_CN,
            &tcb_signer,
            TCB_CN,
            SimCert::TcbSigning.serial(),
            false,
            Vec::new(),
            (t, t + 7 * year),
        )?;
        Ok(SimQe {
            dir,
            platform,
            root,
            pck_ca,
            pck,
            tcb_signer,
            attestation,
            ppid,
            root_der,
            pck_ca_der,
            pck_der,
            tcb_der,
        })
    }

    /// The platform.
    pub fn platform(&self) -> &SimPlatform {
        &self.platform
    }

    /// The sim root CA certificate (DER).
    pub fn root_der(&self) -> &[u8] {
        &self.root_der
    }

    /// The PCK chain (DER, leaf first: PCK, PCK Platform CA, root).
    pub fn pck_chain_der(&self) -> Vec<Vec<u8>> {
        vec![
            self.pck_der.clone(),
            self.pck_ca_der.clone(),
            self.root_der.clone(),
        ]
    }

    /// The PCK chain as the QE embeds it: PEM, leaf first, NUL-terminated.
    pub fn pck_chain_pem(&self) -> Result<Vec<u8>, SimError> {
        let mut s = String::new();
        for der_bytes in self.pck_chain_der() {
            s.push_str(&pem(&der_bytes)?);
        }
        let mut out = s.into_bytes();
        out.push(0);
        Ok(out)
    }

    /// The PPID of the sim platform.
    pub fn ppid(&self) -> [u8; 16] {
        self.ppid
    }

    /// A signed quote for `td`: v4 (TD 1.0) unless `td.td15` is set, then v5 (TD 1.5).
    pub fn quote(&self, td: &SimTd) -> Result<Vec<u8>, SimError> {
        self.quote_with(td, &self.pck, self.pck_chain_pem()?)
    }

    /// A quote for `td` carrying `defect` in its PCK chain (see [`SimDefect`]); defects of the collateral give
    /// the ordinary quote.
    pub fn quote_with_defect(&self, td: &SimTd, defect: SimDefect) -> Result<Vec<u8>, SimError> {
        match defect {
            SimDefect::LeafSignsLeaf => {
                // The attacker holds the (revoked) PCK key and mints a leaf claiming a TCB above any level.
                let forged_key = SigningKey::random(&mut rand::thread_rng());
                let forged_platform = SimPlatform {
                    sgx_tcb_components: [0xff; 16],
                    pcesvn: u16::MAX,
                    ..self.platform.clone()
                };
                let sgx = Extension {
                    extn_id: ObjectIdentifier::new(SGX_EXTENSIONS)
                        .map_err(|e| SimError::Der(e.to_string()))?,
                    critical: false,
                    extn_value: OctetString::new(sgx_extension(&forged_platform, &self.ppid)?)
                        .map_err(der_err("SGX extension"))?,
                };
                let t = now().saturating_sub(86_400);
                let forged = issue(
                    &self.pck,
                    PCK_CN,
                    &forged_key,
                    PCK_CN,
                    99,
                    false,
                    vec![sgx],
                    (t, t + 365 * 86_400),
                )?;
                let mut chain = pem(&forged)?;
                for der_bytes in self.pck_chain_der() {
                    chain.push_str(&pem(&der_bytes)?);
                }
                let mut bytes = chain.into_bytes();
                bytes.push(0);
                self.quote_with(td, &forged_key, bytes)
            }
            SimDefect::CpusvnMismatch => {
                // A PCK leaf, properly issued by the PCK CA for the same key, whose CPUSVN says a higher TCB
                // than its component SVNs.
                let sgx = Extension {
                    extn_id: ObjectIdentifier::new(SGX_EXTENSIONS)
                        .map_err(|e| SimError::Der(e.to_string()))?,
                    critical: false,
                    extn_value: OctetString::new(sgx_extension_with_cpusvn(
                        &self.platform,
                        &self.ppid,
                        &[0xff; 16],
                    )?)
                    .map_err(der_err("SGX extension"))?,
                };
                let t = now().saturating_sub(86_400);
                let leaf = issue(
                    &self.pck_ca,
                    PCK_CA_CN,
                    &self.pck,
                    PCK_CN,
                    SimCert::PckLeaf.serial(),
                    false,
                    vec![sgx],
                    (t, t + 365 * 86_400),
                )?;
                let mut chain = pem(&leaf)?;
                chain.push_str(&pem(&self.pck_ca_der)?);
                chain.push_str(&pem(&self.root_der)?);
                let mut bytes = chain.into_bytes();
                bytes.push(0);
                self.quote_with(td, &self.pck, bytes)
            }
            _ => self.quote(td),
        }
    }

    fn quote_with(
        &self,
        td: &SimTd,
        qe_signer: &SigningKey,
        chain_pem: Vec<u8>,
    ) -> Result<Vec<u8>, SimError> {
        let td10 = TdReport10 {
            tee_tcb_svn: td.tee_tcb_svn,
            mr_seam: td.mr_seam,
            mr_signer_seam: [0; 48],
            seam_attributes: [0; 8],
            td_attributes: td.td_attributes,
            xfam: td.xfam,
            mrtd: td.mrtd,
            mr_config_id: td.mr_config_id,
            mr_owner: td.mr_owner,
            mr_owner_config: td.mr_owner_config,
            rtmr: td.rtmr,
            report_data: td.report_data,
        };
        let (version, body) = match td.td15 {
            None => (4, QuoteBody::Td10(td10)),
            Some((svn2, servicetd)) => (
                5,
                QuoteBody::Td15(TdReport15 {
                    td10,
                    tee_tcb_svn2: svn2,
                    mr_servicetd: servicetd,
                }),
            ),
        };
        let mut user_data = [0u8; 20];
        user_data[..16].copy_from_slice(&self.ppid);
        let header = QuoteHeader {
            version,
            att_key_type: ATT_KEY_TYPE_ECDSA_P256,
            tee_type: TEE_TYPE_TDX,
            qe_svn: 0,
            pce_svn: 0,
            qe_vendor_id: QE_VENDOR_ID,
            user_data,
        };
        let point = self.attestation.verifying_key().to_encoded_point(false);
        let mut attestation_key = [0u8; 64];
        attestation_key.copy_from_slice(&point.as_bytes()[1..65]);
        let qe_auth_data: Vec<u8> = (0u8..32).collect();
        let mut h = Sha256::new();
        h.update(attestation_key);
        h.update(&qe_auth_data);
        let mut report_data = [0u8; 64];
        report_data[..32].copy_from_slice(&h.finalize());
        let p = &self.platform;
        let qe_report = EnclaveReport {
            cpu_svn: p.sgx_tcb_components,
            misc_select: 0,
            reserved1: [0; 28],
            attributes: [0x15, 0, 0, 0, 0, 0, 0, 0, 0xe7, 0, 0, 0, 0, 0, 0, 0],
            mr_enclave: p.qe_mr_enclave,
            reserved2: [0; 32],
            mr_signer: p.qe_mr_signer,
            reserved3: [0; 96],
            isv_prod_id: 2,
            isv_svn: p.qe_isv_svn,
            reserved4: [0; 60],
            report_data,
        };
        let qe_sig: Signature = qe_signer.sign(&qe_report.to_bytes());
        let mut quote = Quote {
            header,
            body,
            signature_data: SignatureData {
                signature: [0; 64],
                attestation_key,
                certification: CertificationData::QeReport(Box::new(QeReportCertData {
                    qe_report,
                    qe_report_signature: qe_sig.to_bytes().into(),
                    qe_auth_data,
                    pck: PckCertData::PemChain(chain_pem),
                    slack: Vec::new(),
                })),
                slack: Vec::new(),
            },
            trailing: Vec::new(),
        };
        let sig: Signature = self.attestation.sign(&quote.signed_bytes());
        quote.signature_data.signature = sig.to_bytes().into();
        quote
            .to_bytes()
            .map_err(|e| SimError::Crypto(format!("quote encoding: {e}")))
    }

    /// Collateral in the `collateral.json` layout, issued at `issued` (unix seconds) and valid for 30 days,
    /// with one UpToDate TCB level at this platform and `tee_tcb_svn`, an OutOfDate level below it, and a
    /// module identity `TDX_%02X` UpToDate at TEE_TCB_SVN[0] and OutOfDate below.
    pub fn collateral_json_at(
        &self,
        tee_tcb_svn: &[u8; 16],
        issued: u64,
    ) -> Result<Vec<u8>, SimError> {
        self.collateral_json_revoking(tee_tcb_svn, issued, &[])
    }

    /// [`SimQe::collateral_json_at`] with CRLs that revoke the certificates named (to test revocation).
    pub fn collateral_json_revoking(
        &self,
        tee_tcb_svn: &[u8; 16],
        issued: u64,
        revoked: &[SimCert],
    ) -> Result<Vec<u8>, SimError> {
        self.collateral_json_with(tee_tcb_svn, issued, revoked, None)
    }

    /// [`SimQe::collateral_json_at`] carrying `defect` (see [`SimDefect`]); defects of the quote give the
    /// ordinary collateral.
    pub fn collateral_json_with_defect(
        &self,
        tee_tcb_svn: &[u8; 16],
        issued: u64,
        defect: SimDefect,
    ) -> Result<Vec<u8>, SimError> {
        self.collateral_json_with(tee_tcb_svn, issued, &[], Some(defect))
    }

    fn collateral_json_with(
        &self,
        tee_tcb_svn: &[u8; 16],
        issued: u64,
        revoked: &[SimCert],
        defect: Option<SimDefect>,
    ) -> Result<Vec<u8>, SimError> {
        let serials = |issuer: SimCert| -> Vec<u64> {
            revoked
                .iter()
                .filter(|c| c.issuer() == issuer)
                .map(|c| c.serial())
                .collect()
        };
        let next = issued + 30 * 86_400;
        let iso = |t: u64| -> Result<String, SimError> {
            time::OffsetDateTime::from_unix_timestamp(t as i64)
                .ok()
                .and_then(|d| {
                    d.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .ok_or_else(|| SimError::Crypto(format!("time {t}")))
        };
        let p = &self.platform;
        let comps = |v: &[u8]| -> Vec<serde_json::Value> {
            v.iter().map(|s| serde_json::json!({ "svn": s })).collect()
        };
        let mut tdx_top = *tee_tcb_svn;
        if tdx_top[1] > 0 {
            // Components 0-1 are graded by the module identity, not by the level.
            tdx_top[0] = 0;
            tdx_top[1] = 0;
        }
        // The module identity: UpToDate at this module SVN, OutOfDate below it (when there is a below).
        let mut module_levels = vec![serde_json::json!(
            { "tcb": { "isvsvn": tee_tcb_svn[0] }, "tcbDate": iso(issued)?, "tcbStatus": "UpToDate" }
        )];
        if tee_tcb_svn[0] > 0 {
            module_levels.push(serde_json::json!({
                "tcb": { "isvsvn": 0 },
                "tcbDate": iso(issued.saturating_sub(365 * 86_400))?,
                "tcbStatus": "OutOfDate",
            }));
        }
        let tcb_info = serde_json::json!({
            "id": "TDX",
            "version": 3,
            "issueDate": iso(issued)?,
            "nextUpdate": iso(next)?,
            "fmspc": hex::encode_upper(p.fmspc),
            "pceId": hex::encode_upper(p.pceid),
            "tcbType": 0,
            "tcbEvaluationDataNumber": 1,
            "tdxModule": {
                "mrsigner": "00".repeat(48),
                "attributes": "0000000000000000",
                "attributesMask": "FFFFFFFFFFFFFFFF",
            },
            "tdxModuleIdentities": [{
                "id": format!("TDX_{:02X}", tee_tcb_svn[1].max(1)),
                "mrsigner": "00".repeat(48),
                "attributes": "0000000000000000",
                "attributesMask": "FFFFFFFFFFFFFFFF",
                "tcbLevels": module_levels,
            }],
            "tcbLevels": [
                {
                    "tcb": {
                        "sgxtcbcomponents": comps(&p.sgx_tcb_components),
                        "pcesvn": p.pcesvn,
                        "tdxtcbcomponents": comps(&tdx_top),
                    },
                    "tcbDate": iso(issued)?,
                    "tcbStatus": "UpToDate",
                },
                {
                    "tcb": {
                        "sgxtcbcomponents": comps(&[0; 16]),
                        "pcesvn": 0,
                        "tdxtcbcomponents": comps(&[0; 16]),
                    },
                    "tcbDate": iso(issued.saturating_sub(365 * 86_400))?,
                    "tcbStatus": "OutOfDate",
                    "advisoryIDs": [SIM_ADVISORY],
                },
            ],
        })
        .to_string();
        let qe_identity = serde_json::json!({
            "id": "TD_QE",
            "version": 2,
            "issueDate": iso(issued)?,
            "nextUpdate": iso(next)?,
            "tcbEvaluationDataNumber": 1,
            "miscselect": "00000000",
            "miscselectMask": "FFFFFFFF",
            "attributes": "11000000000000000000000000000000",
            "attributesMask": "FBFFFFFFFFFFFFFF0000000000000000",
            "mrsigner": hex::encode_upper(p.qe_mr_signer),
            "isvprodid": 2,
            "tcbLevels": [
                { "tcb": { "isvsvn": p.qe_isv_svn }, "tcbDate": iso(issued)?, "tcbStatus": "UpToDate" },
            ],
        })
        .to_string();
        let by_pck = defect == Some(SimDefect::CollateralSignedByPck);
        let signer = if by_pck { &self.pck } else { &self.tcb_signer };
        let sign_raw = |text: &str| -> String {
            let sig: Signature = signer.sign(text.as_bytes());
            hex::encode(sig.to_bytes())
        };
        let tcb_chain = if by_pck {
            self.pck_chain_der()
                .iter()
                .map(|d| pem(d))
                .collect::<Result<String, SimError>>()?
        } else {
            format!("{}{}", pem(&self.tcb_der)?, pem(&self.root_der)?)
        };
        let (root_crl_this, root_crl_next) = match defect {
            Some(SimDefect::ExpiredCrl) => (
                issued.saturating_sub(60 * 86_400),
                issued.saturating_sub(30 * 86_400),
            ),
            Some(SimDefect::FutureCrl) => (now() + 30 * 86_400, now() + 60 * 86_400),
            _ => (issued, issued + 365 * 86_400),
        };
        let out = serde_json::json!({
            "pck_crl_issuer_chain": format!("{}{}", pem(&self.pck_ca_der)?, pem(&self.root_der)?),
            "root_ca_crl": hex::encode(crl(
                &self.root,
                ROOT_CN,
                root_crl_this,
                root_crl_next,
                &serials(SimCert::Root),
            )?),
            "pck_crl": hex::encode(crl(
                &self.pck_ca,
                PCK_CA_CN,
                issued,
                next,
                &serials(SimCert::PckCa),
            )?),
            "tcb_info_issuer_chain": tcb_chain,
            "tcb_info_signature": sign_raw(&tcb_info),
            "tcb_info": tcb_info,
            "qe_identity_issuer_chain": tcb_chain,
            "qe_identity_signature": sign_raw(&qe_identity),
            "qe_identity": qe_identity,
        });
        serde_json::to_vec_pretty(&out)
            .map_err(|e| SimError::Crypto(format!("collateral JSON: {e}")))
    }

    /// [`SimQe::collateral_json_at`] issued a day ago.
    pub fn collateral_json(&self, tee_tcb_svn: &[u8; 16]) -> Result<Vec<u8>, SimError> {
        self.collateral_json_at(tee_tcb_svn, now().saturating_sub(86_400))
    }
}

/// A [`Tee`] backed by the sim QE: quotes for one TD, label `sim-tdx`, with the collateral attached.
#[derive(Debug)]
pub struct SimTdxTee {
    qe: SimQe,
    td: std::sync::Mutex<SimTd>,
}

impl SimTdxTee {
    /// A sim TD with fields `td` (its report data is replaced on each request).
    pub fn new(qe: SimQe, td: SimTd) -> SimTdxTee {
        SimTdxTee {
            qe,
            td: std::sync::Mutex::new(td),
        }
    }

    /// Extends RTMR `index` (0-3) with `digest` as `TDG.MR.RTMR.EXTEND` does: `RTMR = SHA-384(RTMR || digest)`;
    /// the quotes taken afterwards carry the new value (the sim of the kernel's `rtmr3:sha384` write).
    pub fn extend_rtmr(&self, index: usize, digest: &[u8; 48]) -> Result<(), TeeError> {
        use sha2::{Digest, Sha384};
        let mut td = self.td.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = td.rtmr.get_mut(index) else {
            return Err(TeeError::Unsupported(format!(
                "RTMR{index}: a TD has RTMR0-3"
            )));
        };
        let mut h = Sha384::new();
        h.update(*r);
        h.update(digest);
        *r = h.finalize().into();
        Ok(())
    }

    /// The QE behind it.
    pub fn qe(&self) -> &SimQe {
        &self.qe
    }
}

impl Tee for SimTdxTee {
    fn label(&self) -> TeeLabel {
        TeeLabel::SimTdx
    }

    fn get_report(&self, report_data: &[u8; 64]) -> Result<RawEvidence, TeeError> {
        let mut td = self.td.lock().unwrap_or_else(|p| p.into_inner()).clone();
        td.report_data = *report_data;
        let report = self
            .qe
            .quote(&td)
            .map_err(|e| TeeError::Sim(e.to_string()))?;
        let collateral = self
            .qe
            .collateral_json(&td.tee_tcb_svn)
            .map_err(|e| TeeError::Sim(e.to_string()))?;
        Ok(RawEvidence {
            report,
            certs: Vec::new(),
            collateral: Some(Collateral::Bytes(collateral)),
        })
    }
}
