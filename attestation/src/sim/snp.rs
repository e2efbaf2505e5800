//! A software AMD PSP: a sim ARK/ASK (RSA-4096) and per-product VCEKs (P-384) with AMD's X.509 profile.
//!
//! Certificates copy what AMD's key server issues: RSASSA-PSS SHA-384/MGF1-SHA-384/salt 48 (with the explicit
//! trailer field on ARK and ASK, without it on the VCEK, as AMD does), the same names with O/OU saying
//! SIMULATED, serial 0 for the VCEK and the KDS extensions (structVersion, productName, SPLs, hwID) whose values
//! equal the REPORTED_TCB and CHIP_ID of the report signed. Keys live in the state directory, never in the repo.

use super::state::{ensure_dir, read_optional, write_atomic, StateLock};
use super::SimError;
use crate::evidence::TeeLabel;
use crate::snp::{
    AttestationReport, Cpuid, FirmwareVersion, PlatformInfo, Product, SigningKey, TcbParts,
    TcbVersion,
};
use crate::tee::{RawEvidence, Tee, TeeError};
use der::asn1::{Any, BitString, Ia5String, ObjectIdentifier, OctetString, SetOfVec, UtcTime};
use der::{Decode, Encode, Tag};
use p384::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use rand::RngCore;
use rsa::signature::{RandomizedSigner, SignatureEncoding};
use sha2::{Digest, Sha256, Sha384};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::ext::pkix::crl::dp::DistributionPoint;
use x509_cert::ext::pkix::name::{DistributionPointName, GeneralName};
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, CrlDistributionPoints, KeyUsage, KeyUsages,
    SubjectKeyIdentifier,
};
use x509_cert::ext::Extension;
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};
use x509_cert::{Certificate, TbsCertificate, Version};

/// RSA modulus size of the sim ARK and ASK (as AMD's).
pub const SIM_RSA_BITS: usize = 4096;

/// The `O` attribute of every sim certificate.
pub const SIM_ORGANIZATION: &str = "SIMULATED Advanced Micro Devices (fenced-run sim)";

/// The `OU` attribute of every sim certificate.
pub const SIM_ORGANIZATIONAL_UNIT: &str = "fenced-run SIMULATED";

/// OID of RSASSA-PSS.
const OID_RSASSA_PSS: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.10");

/// RSASSA-PSS-params as AMD's key server writes them on VCEKs issued since late 2024: SHA-384, MGF1 with
/// SHA-384, salt 48, trailer omitted (older VCEKs carry the explicit trailer of [`PSS_PARAMS_ARK_ASK`]).
pub const PSS_PARAMS_VCEK: [u8; 54] = [
    0x30, 0x34, 0xa0, 0x0f, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
    0x02, 0x05, 0x00, 0xa1, 0x1c, 0x30, 0x1a, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01,
    0x01, 0x08, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x05,
    0x00, 0xa2, 0x03, 0x02, 0x01, 0x30,
];

/// RSASSA-PSS-params as AMD writes them on the ARK and ASK: as [`PSS_PARAMS_VCEK`] plus trailerField 1.
pub const PSS_PARAMS_ARK_ASK: [u8; 59] = [
    0x30, 0x39, 0xa0, 0x0f, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
    0x02, 0x05, 0x00, 0xa1, 0x1c, 0x30, 0x1a, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01,
    0x01, 0x08, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x05,
    0x00, 0xa2, 0x03, 0x02, 0x01, 0x30, 0xa3, 0x03, 0x02, 0x01, 0x01,
];

/// The AMD KDS extension OIDs of a VCEK.
pub mod oid {
    use der::asn1::ObjectIdentifier;
    /// structVersion.
    pub const STRUCT_VERSION: ObjectIdentifier =
        ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.1");
    /// productName (IA5String, such as `Milan-B0`).
    pub const PRODUCT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.2");
    /// blSPL.
    pub const BL_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.1");
    /// teeSPL.
    pub const TEE_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.2");
    /// snpSPL.
    pub const SNP_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.3");
    /// spl_4 (reserved).
    pub const SPL_4: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.4");
    /// spl_5 (reserved).
    pub const SPL_5: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.5");
    /// spl_6 (reserved).
    pub const SPL_6: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.6");
    /// spl_7 (reserved).
    pub const SPL_7: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.7");
    /// ucodeSPL.
    pub const UCODE_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.8");
    /// fmcSPL (Turin).
    pub const FMC_SPL: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.3.9");
    /// hwID (raw CHIP_ID bytes: 64, or 8 on Turin).
    pub const HW_ID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.3704.1.4");
}

/// The shared sim root keys (one ARK and one ASK key serve every product; each product gets its own certs).
struct RootKeys {
    ark: rsa::RsaPrivateKey,
    ask: rsa::RsaPrivateKey,
}

/// VCEKs issued so far, by (CHIP_ID, REPORTED_TCB): signing key and certificate.
type VcekCache = HashMap<([u8; 64], u64), (p384::ecdsa::SigningKey, Vec<u8>)>;

/// A sim AMD PSP for one product, backed by a state directory.
pub struct SimPsp {
    dir: PathBuf,
    product: Product,
    ark_key: rsa::RsaPrivateKey,
    ask_key: rsa::RsaPrivateKey,
    ark_der: Vec<u8>,
    ask_der: Vec<u8>,
    chip_id: [u8; 64],
    vceks: Mutex<VcekCache>,
}

impl std::fmt::Debug for SimPsp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPsp")
            .field("dir", &self.dir)
            .field("product", &self.product)
            .finish_non_exhaustive()
    }
}

fn der_err(what: &str) -> impl FnOnce(der::Error) -> SimError + '_ {
    move |e| SimError::Der(format!("{what}: {e}"))
}

fn product_dir_name(p: Product) -> &'static str {
    match p {
        Product::Milan => "milan",
        Product::Genoa => "genoa",
        _ => "turin",
    }
}

/// The productName AMD writes in a VCEK of `p`.
pub fn vcek_product_name(p: Product) -> &'static str {
    match p {
        Product::Milan => "Milan-B0",
        Product::Genoa => "Genoa",
        _ => "Turin",
    }
}

/// Length of the hwID (and of the meaningful part of CHIP_ID) for `p`.
pub fn hwid_len(p: Product) -> usize {
    if p.has_fmc() {
        8
    } else {
        64
    }
}

/// A name shaped like AMD's (`OU, C, L, ST, O, CN`) with the sim's O and OU.
fn amd_name(cn: &str) -> Result<Name, SimError> {
    use der::oid::db::rfc4519;
    let attr =
        |oid: ObjectIdentifier, tag: Tag, v: &str| -> Result<RelativeDistinguishedName, SimError> {
            let value = Any::new(tag, v.as_bytes()).map_err(der_err("name attribute"))?;
            let set = SetOfVec::try_from(vec![AttributeTypeAndValue { oid, value }])
                .map_err(der_err("name RDN"))?;
            Ok(RelativeDistinguishedName::from(set))
        };
    Ok(RdnSequence(vec![
        attr(rfc4519::OU, Tag::Utf8String, SIM_ORGANIZATIONAL_UNIT)?,
        attr(rfc4519::C, Tag::PrintableString, "US")?,
        attr(rfc4519::L, Tag::Utf8String, "Santa Clara")?,
        attr(rfc4519::ST, Tag::Utf8String, "CA")?,
        attr(rfc4519::O, Tag::Utf8String, SIM_ORGANIZATION)?,
        attr(rfc4519::CN, Tag::Utf8String, cn)?,
    ]))
}

fn pss_alg(params: &[u8]) -> Result<AlgorithmIdentifierOwned, SimError> {
    Ok(AlgorithmIdentifierOwned {
        oid: OID_RSASSA_PSS,
        parameters: Some(Any::from_der(params).map_err(der_err("PSS parameters"))?),
    })
}

fn validity(years: u64) -> Result<Validity, SimError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Whole seconds, a day in the past to tolerate clock skew; UTCTime ends in 2049.
    let start = Duration::from_secs(now.as_secs().saturating_sub(86_400));
    let end =
        (start + Duration::from_secs(years * 365 * 86_400)).min(Duration::from_secs(2_524_607_999));
    Ok(Validity {
        not_before: Time::UtcTime(
            UtcTime::from_unix_duration(start).map_err(der_err("notBefore"))?,
        ),
        not_after: Time::UtcTime(UtcTime::from_unix_duration(end).map_err(der_err("notAfter"))?),
    })
}

fn ext<T: Encode>(oid: ObjectIdentifier, critical: bool, value: &T) -> Result<Extension, SimError> {
    let der = value.to_der().map_err(der_err("extension value"))?;
    raw_ext(oid, critical, der)
}

fn raw_ext(oid: ObjectIdentifier, critical: bool, value: Vec<u8>) -> Result<Extension, SimError> {
    Ok(Extension {
        extn_id: oid,
        critical,
        extn_value: OctetString::new(value).map_err(der_err("extension"))?,
    })
}

fn key_id(spki: &SubjectPublicKeyInfoOwned) -> Result<OctetString, SimError> {
    // RFC 7093 method 1: the leftmost 160 bits of SHA-256 over the subjectPublicKey bits.
    let digest = Sha256::digest(spki.subject_public_key.raw_bytes());
    OctetString::new(&digest[..20]).map_err(der_err("key identifier"))
}

fn crl_dp(product: Product) -> Result<CrlDistributionPoints, SimError> {
    let url = format!("https://kds.sim.example/vcek/v1/{}/crl", product.name());
    let uri = Ia5String::new(&url).map_err(der_err("CRL URL"))?;
    Ok(CrlDistributionPoints(vec![DistributionPoint {
        distribution_point: Some(DistributionPointName::FullName(vec![
            GeneralName::UniformResourceIdentifier(uri),
        ])),
        reasons: None,
        crl_issuer: None,
    }]))
}

fn random_serial() -> Result<SerialNumber, SimError> {
    let mut b = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut b);
    b[0] = (b[0] & 0x7f) | 0x01;
    SerialNumber::new(&b).map_err(der_err("serial"))
}

fn rsa_spki(key: &rsa::RsaPublicKey) -> Result<SubjectPublicKeyInfoOwned, SimError> {
    let der = key
        .to_public_key_der()
        .map_err(|e| SimError::Crypto(format!("RSA public key: {e}")))?;
    SubjectPublicKeyInfoOwned::from_der(der.as_bytes()).map_err(der_err("RSA SPKI"))
}

/// Signs a TBS certificate with RSASSA-PSS SHA-384 (salt 48) and returns the DER certificate.
fn sign_cert(
    tbs: TbsCertificate,
    signer: &rsa::RsaPrivateKey,
    params: &[u8],
) -> Result<Vec<u8>, SimError> {
    let tbs_der = tbs.to_der().map_err(der_err("TBS"))?;
    let key = rsa::pss::BlindedSigningKey::<Sha384>::new(signer.clone());
    let sig = key.sign_with_rng(&mut rand::thread_rng(), &tbs_der);
    let cert = Certificate {
        tbs_certificate: tbs,
        signature_algorithm: pss_alg(params)?,
        signature: BitString::from_bytes(&sig.to_bytes()).map_err(der_err("signature"))?,
    };
    cert.to_der().map_err(der_err("certificate"))
}

fn issue_ark(product: Product, ark: &rsa::RsaPrivateKey) -> Result<Vec<u8>, SimError> {
    let spki = rsa_spki(&ark.to_public_key())?;
    let name = amd_name(&format!("ARK-{}", product.name()))?;
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: random_serial()?,
        signature: pss_alg(&PSS_PARAMS_ARK_ASK)?,
        issuer: name.clone(),
        validity: validity(25)?,
        subject: name,
        subject_public_key_info: spki.clone(),
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(vec![
            ext(
                der::oid::db::rfc5280::ID_CE_KEY_USAGE,
                true,
                &KeyUsage(KeyUsages::KeyCertSign | KeyUsages::CRLSign),
            )?,
            ext(
                der::oid::db::rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
                false,
                &SubjectKeyIdentifier(key_id(&spki)?),
            )?,
            ext(
                der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
                true,
                &BasicConstraints {
                    ca: true,
                    path_len_constraint: None,
                },
            )?,
            ext(
                der::oid::db::rfc5280::ID_CE_CRL_DISTRIBUTION_POINTS,
                false,
                &crl_dp(product)?,
            )?,
        ]),
    };
    sign_cert(tbs, ark, &PSS_PARAMS_ARK_ASK)
}

fn issue_ask(
    product: Product,
    ark: &rsa::RsaPrivateKey,
    ask: &rsa::RsaPrivateKey,
) -> Result<Vec<u8>, SimError> {
    let spki = rsa_spki(&ask.to_public_key())?;
    let ark_spki = rsa_spki(&ark.to_public_key())?;
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: random_serial()?,
        signature: pss_alg(&PSS_PARAMS_ARK_ASK)?,
        issuer: amd_name(&format!("ARK-{}", product.name()))?,
        validity: validity(25)?,
        subject: amd_name(&format!("SEV-{}", product.name()))?,
        subject_public_key_info: spki.clone(),
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(vec![
            ext(
                der::oid::db::rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
                false,
                &SubjectKeyIdentifier(key_id(&spki)?),
            )?,
            ext(
                der::oid::db::rfc5280::ID_CE_AUTHORITY_KEY_IDENTIFIER,
                false,
                &AuthorityKeyIdentifier {
                    key_identifier: Some(key_id(&ark_spki)?),
                    authority_cert_issuer: None,
                    authority_cert_serial_number: None,
                },
            )?,
            ext(
                der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
                true,
                &BasicConstraints {
                    ca: true,
                    path_len_constraint: Some(0),
                },
            )?,
            // keyCertSign with one unused bit, exactly as AMD encodes it (03 02 01 04), not the minimal 03 02 02 04.
            raw_ext(
                der::oid::db::rfc5280::ID_CE_KEY_USAGE,
                true,
                vec![0x03, 0x02, 0x01, 0x04],
            )?,
            ext(
                der::oid::db::rfc5280::ID_CE_CRL_DISTRIBUTION_POINTS,
                false,
                &crl_dp(product)?,
            )?,
        ]),
    };
    sign_cert(tbs, ark, &PSS_PARAMS_ARK_ASK)
}

/// The KDS extensions of a VCEK for `product`, in AMD's order, from the raw TCB and the chip ID.
fn vcek_extensions(
    product: Product,
    tcb: TcbVersion,
    chip_id: &[u8; 64],
) -> Result<Vec<Extension>, SimError> {
    let b = tcb.to_le_bytes();
    let product_name =
        Ia5String::new(vcek_product_name(product)).map_err(der_err("productName"))?;
    let mut v = vec![
        ext(oid::STRUCT_VERSION, false, &u8::from(product.has_fmc()))?,
        ext(oid::PRODUCT_NAME, false, &product_name)?,
    ];
    // Each SPL is a DER INTEGER; the byte positions follow the product's TCB_VERSION layout.
    let spls: &[(ObjectIdentifier, u8)] = if product.has_fmc() {
        &[
            (oid::FMC_SPL, b[0]),
            (oid::BL_SPL, b[1]),
            (oid::TEE_SPL, b[2]),
            (oid::SNP_SPL, b[3]),
            (oid::SPL_5, b[4]),
            (oid::SPL_6, b[5]),
            (oid::SPL_7, b[6]),
            (oid::UCODE_SPL, b[7]),
        ]
    } else {
        &[
            (oid::BL_SPL, b[0]),
            (oid::TEE_SPL, b[1]),
            (oid::SPL_4, b[2]),
            (oid::SPL_5, b[3]),
            (oid::SPL_6, b[4]),
            (oid::SPL_7, b[5]),
            (oid::SNP_SPL, b[6]),
            (oid::UCODE_SPL, b[7]),
        ]
    };
    for (o, value) in spls {
        v.push(ext(*o, false, value)?);
    }
    v.push(raw_ext(
        oid::HW_ID,
        false,
        chip_id[..hwid_len(product)].to_vec(),
    )?);
    Ok(v)
}

fn issue_vcek(
    product: Product,
    ask: &rsa::RsaPrivateKey,
    vcek: &p384::PublicKey,
    tcb: TcbVersion,
    chip_id: &[u8; 64],
) -> Result<Vec<u8>, SimError> {
    let spki_der = vcek
        .to_public_key_der()
        .map_err(|e| SimError::Crypto(format!("VCEK public key: {e}")))?;
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::new(&[0]).map_err(der_err("serial"))?,
        signature: pss_alg(&PSS_PARAMS_VCEK)?,
        issuer: amd_name(&format!("SEV-{}", product.name()))?,
        validity: validity(7)?,
        subject: amd_name("SEV-VCEK")?,
        subject_public_key_info: SubjectPublicKeyInfoOwned::from_der(spki_der.as_bytes())
            .map_err(der_err("VCEK SPKI"))?,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(vcek_extensions(product, tcb, chip_id)?),
    };
    sign_cert(tbs, ask, &PSS_PARAMS_VCEK)
}

fn load_or_make_rsa(path: &Path) -> Result<(rsa::RsaPrivateKey, bool), SimError> {
    if let Some(der) = read_optional(path)? {
        let key = rsa::RsaPrivateKey::from_pkcs8_der(&der).map_err(|e| SimError::StateCorrupt {
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
        return Ok((key, false));
    }
    let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), SIM_RSA_BITS)
        .map_err(|e| SimError::Crypto(format!("RSA-{SIM_RSA_BITS} generation: {e}")))?;
    let der = key
        .to_pkcs8_der()
        .map_err(|e| SimError::Crypto(e.to_string()))?;
    write_atomic(path, der.as_bytes())?;
    Ok((key, true))
}

fn cert_spki_matches(cert_der: &[u8], key: &rsa::RsaPublicKey) -> bool {
    let Ok(cert) = Certificate::from_der(cert_der) else {
        return false;
    };
    match rsa_spki(key) {
        Ok(spki) => cert.tbs_certificate.subject_public_key_info == spki,
        Err(_) => false,
    }
}

/// Loads `path` if present and its key matches, else issues it with `issue` and stores it.
fn load_or_issue(
    path: &Path,
    key: &rsa::RsaPublicKey,
    issue: impl FnOnce() -> Result<Vec<u8>, SimError>,
) -> Result<(Vec<u8>, bool), SimError> {
    if let Some(der) = read_optional(path)? {
        if cert_spki_matches(&der, key) {
            return Ok((der, false));
        }
    }
    let der = issue()?;
    write_atomic(path, &der)?;
    Ok((der, true))
}

impl SimPsp {
    /// Opens (generating on first use) the sim PSP for `product` in `state_dir`.
    ///
    /// Layout: `snp/ark.pk8`, `snp/ask.pk8` (the shared RSA-4096 keys), and per product `snp/<product>/ark.der`,
    /// `ask.der`, `chip_id`, and `vcek-<chip>-<tcb>.pk8`/`.der` per VCEK issued. A missing file is regenerated;
    /// when a root key is regenerated, everything it signed is reissued.
    pub fn new(state_dir: &Path, product: Product) -> Result<SimPsp, SimError> {
        let dir = state_dir.join("snp");
        ensure_dir(&dir)?;
        let _lock = StateLock::take(&dir)?;
        let (ark, ark_new) = load_or_make_rsa(&dir.join("ark.pk8"))?;
        let (ask, ask_new) = load_or_make_rsa(&dir.join("ask.pk8"))?;
        let roots = RootKeys { ark, ask };
        let pdir = dir.join(product_dir_name(product));
        if ark_new || ask_new {
            // Everything issued under the old roots is void.
            for p in Product::ALL {
                let d = dir.join(product_dir_name(p));
                if d.exists() {
                    std::fs::remove_dir_all(&d).map_err(|source| SimError::Io {
                        op: "remove stale",
                        path: d.clone(),
                        source,
                    })?;
                }
            }
        }
        ensure_dir(&pdir)?;
        let (ark_der, ark_reissued) =
            load_or_issue(&pdir.join("ark.der"), &roots.ark.to_public_key(), || {
                issue_ark(product, &roots.ark)
            })?;
        let ask_path = pdir.join("ask.der");
        if ark_reissued {
            // An ASK certificate signed under a previous ARK certificate must not survive it.
            let _ = std::fs::remove_file(&ask_path);
        }
        let (ask_der, ask_reissued) = load_or_issue(&ask_path, &roots.ask.to_public_key(), || {
            issue_ask(product, &roots.ark, &roots.ask)
        })?;
        if ask_reissued {
            remove_vceks(&pdir)?;
        }
        let chip_path = pdir.join("chip_id");
        let chip_id = match read_optional(&chip_path)? {
            Some(b) if b.len() == 64 => {
                let mut c = [0u8; 64];
                c.copy_from_slice(&b);
                c
            }
            _ => {
                let mut c = [0u8; 64];
                rand::thread_rng().fill_bytes(&mut c[..hwid_len(product)]);
                write_atomic(&chip_path, &c)?;
                c
            }
        };
        Ok(SimPsp {
            dir: pdir,
            product,
            ark_key: roots.ark,
            ask_key: roots.ask,
            ark_der,
            ask_der,
            chip_id,
            vceks: Mutex::new(HashMap::new()),
        })
    }

    /// Opens the sim PSP in the default state directory ([`super::default_state_dir`]).
    pub fn open_default(product: Product) -> Result<SimPsp, SimError> {
        SimPsp::new(&super::default_state_dir()?, product)
    }

    /// The product this PSP plays.
    pub fn product(&self) -> Product {
        self.product
    }

    /// The sim chip's CHIP_ID (on Turin only the first 8 bytes are set).
    pub fn chip_id(&self) -> [u8; 64] {
        self.chip_id
    }

    /// The sim ARK certificate (DER) of this product.
    pub fn ark_der(&self) -> &[u8] {
        &self.ark_der
    }

    /// The sim ASK certificate (DER) of this product.
    pub fn ask_der(&self) -> &[u8] {
        &self.ask_der
    }

    /// SHA-256 of the sim ARK's SubjectPublicKeyInfo (DER), the value a verifier pins for the sim root.
    pub fn ark_spki_sha256(&self) -> Result<[u8; 32], SimError> {
        let cert = Certificate::from_der(&self.ark_der).map_err(der_err("ARK"))?;
        let spki = cert
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .map_err(der_err("ARK SPKI"))?;
        Ok(Sha256::digest(&spki).into())
    }

    /// The TCB this sim platform reports by default.
    pub fn default_tcb(&self) -> TcbVersion {
        let parts = match self.product {
            Product::Milan => TcbParts {
                fmc: None,
                bootloader: 4,
                tee: 0,
                snp: 24,
                microcode: 219,
            },
            Product::Genoa => TcbParts {
                fmc: None,
                bootloader: 10,
                tee: 0,
                snp: 25,
                microcode: 84,
            },
            _ => TcbParts {
                fmc: Some(1),
                bootloader: 1,
                tee: 1,
                snp: 3,
                microcode: 9,
            },
        };
        TcbVersion::from_parts(self.product, parts)
    }

    /// A report as this platform would produce it for a launch with `measurement` and `report_data`: version 3
    /// (Milan, Genoa) or 5 (Turin), CPUID of the product, policy SMT allowed with debug and migration off, VMPL 0,
    /// every TCB field at [`SimPsp::default_tcb`], this chip's CHIP_ID, a random REPORT_ID. Unsigned.
    pub fn report_template(
        &self,
        measurement: [u8; 48],
        report_data: [u8; 64],
    ) -> AttestationReport {
        let (version, cpuid, fw) = match self.product {
            Product::Milan => (
                3,
                Cpuid {
                    family: 0x19,
                    model: 0x01,
                    stepping: 0x01,
                },
                (1, 55, 21),
            ),
            Product::Genoa => (
                3,
                Cpuid {
                    family: 0x19,
                    model: 0x11,
                    stepping: 0x01,
                },
                (1, 55, 40),
            ),
            _ => (
                5,
                Cpuid {
                    family: 0x1A,
                    model: 0x02,
                    stepping: 0x01,
                },
                (1, 55, 47),
            ),
        };
        let mut r = AttestationReport::new(version);
        r.policy = crate::snp::GuestPolicy((1 << 17) | (1 << 16));
        r.platform_info = PlatformInfo(1);
        r.cpuid = Some(cpuid);
        r.measurement = measurement;
        r.report_data = report_data;
        let tcb = self.default_tcb();
        r.current_tcb = tcb;
        r.reported_tcb = tcb;
        r.committed_tcb = tcb;
        r.launch_tcb = tcb;
        let fw = FirmwareVersion {
            major: fw.0,
            minor: fw.1,
            build: fw.2,
        };
        r.current_fw = fw;
        r.committed_fw = fw;
        r.chip_id = self.chip_id;
        rand::thread_rng().fill_bytes(&mut r.report_id);
        r
    }

    /// The VCEK key and certificate for `chip_id` at `tcb`, issued and stored on first use.
    fn vcek(
        &self,
        chip_id: &[u8; 64],
        tcb: TcbVersion,
    ) -> Result<(p384::ecdsa::SigningKey, Vec<u8>), SimError> {
        let mut cache = self
            .vceks
            .lock()
            .map_err(|_| SimError::Crypto("VCEK cache poisoned".into()))?;
        if let Some(v) = cache.get(&(*chip_id, tcb.0)) {
            return Ok(v.clone());
        }
        let _lock = StateLock::take(&self.dir)?;
        let chip_tag = hex::encode(&Sha256::digest(chip_id)[..8]);
        let stem = format!("vcek-{chip_tag}-{:016x}", tcb.0);
        let key_path = self.dir.join(format!("{stem}.pk8"));
        let cert_path = self.dir.join(format!("{stem}.der"));
        let key = match read_optional(&key_path)? {
            Some(der) => {
                p384::SecretKey::from_pkcs8_der(&der).map_err(|e| SimError::StateCorrupt {
                    path: key_path.clone(),
                    detail: e.to_string(),
                })?
            }
            None => {
                let k = p384::SecretKey::random(&mut rand::thread_rng());
                let der = k
                    .to_pkcs8_der()
                    .map_err(|e| SimError::Crypto(e.to_string()))?;
                write_atomic(&key_path, der.as_bytes())?;
                let _ = std::fs::remove_file(&cert_path);
                k
            }
        };
        let public = key.public_key();
        let spki = public
            .to_public_key_der()
            .map_err(|e| SimError::Crypto(e.to_string()))?;
        let cert = match read_optional(&cert_path)? {
            Some(der)
                if Certificate::from_der(&der)
                    .ok()
                    .and_then(|c| c.tbs_certificate.subject_public_key_info.to_der().ok())
                    .as_deref()
                    == Some(spki.as_bytes())
                    && cert_issued_by_current_ask(&der, &self.ask_der) =>
            {
                der
            }
            _ => {
                let der = issue_vcek(self.product, &self.ask_key, &public, tcb, chip_id)?;
                write_atomic(&cert_path, &der)?;
                der
            }
        };
        let entry = (p384::ecdsa::SigningKey::from(key), cert);
        cache.insert((*chip_id, tcb.0), entry.clone());
        Ok(entry)
    }

    /// The VCEK certificate (DER) this PSP uses for `chip_id` at `tcb` (issued on first use).
    pub fn vcek_der(&self, chip_id: &[u8; 64], tcb: TcbVersion) -> Result<Vec<u8>, SimError> {
        Ok(self.vcek(chip_id, tcb)?.1)
    }

    /// Signs a report whose fields the caller chose, with the VCEK for its CHIP_ID and REPORTED_TCB.
    ///
    /// SIGNATURE_ALGO and KEY_INFO.SIGNING_KEY are set to ECDSA P-384 and VCEK; every other field is kept. A
    /// zero CHIP_ID (as with MASK_CHIP_ID) is signed with this chip's VCEK. Returns the 1184 report bytes and the
    /// certificates in evidence order: VCEK, ASK, ARK.
    pub fn sign_report(
        &self,
        mut report: AttestationReport,
    ) -> Result<(Vec<u8>, Vec<Vec<u8>>), SimError> {
        report.signature_algo = crate::snp::SIGNATURE_ALGO_ECDSA_P384_SHA384;
        report.key_info.signing_key = SigningKey::Vcek;
        let chip = if report.chip_id == [0u8; 64] {
            self.chip_id
        } else {
            report.chip_id
        };
        let (key, vcek_der) = self.vcek(&chip, report.reported_tcb)?;
        let sig: p384::ecdsa::Signature = signature::Signer::sign(&key, &report.signed_bytes());
        let (r, s) = sig.split_bytes();
        let mut r48 = [0u8; 48];
        let mut s48 = [0u8; 48];
        r48.copy_from_slice(&r);
        s48.copy_from_slice(&s);
        report.set_signature_p384(&r48, &s48);
        Ok((
            report.to_bytes().to_vec(),
            vec![vcek_der, self.ask_der.clone(), self.ark_der.clone()],
        ))
    }
}

/// A defect the sim PSP builds into the chain on request ([`SimPsp::sign_report_with_defect`]), so tests can
/// show the verifier refuses exactly it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimSnpDefect {
    /// The ASK is reissued by the ARK with `basicConstraints CA:FALSE` (an end entity acting as issuer).
    AskNotCa,
    /// The VCEK carries `basicConstraints CA:TRUE` (a leaf that could issue more leaves).
    VcekIsCa,
    /// The VCEK's productName names another product than its issuer (`Genoa` under `SEV-Milan`, or the reverse).
    ProductNameMismatch,
}

impl SimPsp {
    /// A CRL issued and signed by the sim ARK (RSASSA-PSS, AMD's parameters), with `thisUpdate` and
    /// `nextUpdate` (Unix seconds), listing `revoked` serial numbers (big-endian bytes, as in the certificate).
    pub fn ark_crl_der(
        &self,
        this_update: u64,
        next_update: u64,
        revoked: &[&[u8]],
    ) -> Result<Vec<u8>, SimError> {
        use x509_cert::crl::{CertificateList, RevokedCert, TbsCertList};
        let t = |secs: u64| -> Result<Time, SimError> {
            Ok(Time::UtcTime(
                UtcTime::from_unix_duration(Duration::from_secs(secs.min(2_524_607_999)))
                    .map_err(der_err("CRL time"))?,
            ))
        };
        let mut entries = Vec::new();
        for r in revoked {
            entries.push(RevokedCert {
                serial_number: SerialNumber::new(r).map_err(der_err("CRL serial"))?,
                revocation_date: t(this_update)?,
                crl_entry_extensions: None,
            });
        }
        let tbs = TbsCertList {
            version: Version::V2,
            signature: pss_alg(&PSS_PARAMS_ARK_ASK)?,
            issuer: amd_name(&format!("ARK-{}", self.product.name()))?,
            this_update: t(this_update)?,
            next_update: Some(t(next_update)?),
            revoked_certificates: (!entries.is_empty()).then_some(entries),
            crl_extensions: None,
        };
        let tbs_der = tbs.to_der().map_err(der_err("CRL TBS"))?;
        let key = rsa::pss::BlindedSigningKey::<Sha384>::new(self.ark_key.clone());
        let sig = key.sign_with_rng(&mut rand::thread_rng(), &tbs_der);
        CertificateList {
            tbs_cert_list: tbs,
            signature_algorithm: pss_alg(&PSS_PARAMS_ARK_ASK)?,
            signature: BitString::from_bytes(&sig.to_bytes()).map_err(der_err("CRL signature"))?,
        }
        .to_der()
        .map_err(der_err("CRL"))
    }

    /// [`SimPsp::sign_report`] with `defect` built into the chain (a fresh VCEK key, not stored).
    pub fn sign_report_with_defect(
        &self,
        mut report: AttestationReport,
        defect: SimSnpDefect,
    ) -> Result<(Vec<u8>, Vec<Vec<u8>>), SimError> {
        report.signature_algo = crate::snp::SIGNATURE_ALGO_ECDSA_P384_SHA384;
        report.key_info.signing_key = SigningKey::Vcek;
        if report.chip_id == [0u8; 64] {
            report.chip_id = self.chip_id;
        }
        let key = p384::SecretKey::random(&mut rand::thread_rng());
        let spki_der = key
            .public_key()
            .to_public_key_der()
            .map_err(|e| SimError::Crypto(format!("VCEK public key: {e}")))?;
        let mut exts = vcek_extensions(self.product, report.reported_tcb, &report.chip_id)?;
        match defect {
            SimSnpDefect::VcekIsCa => exts.push(ext(
                der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
                true,
                &BasicConstraints {
                    ca: true,
                    path_len_constraint: None,
                },
            )?),
            SimSnpDefect::ProductNameMismatch => {
                let other = if self.product == Product::Milan {
                    Product::Genoa
                } else {
                    Product::Milan
                };
                let name =
                    Ia5String::new(vcek_product_name(other)).map_err(der_err("productName"))?;
                exts[1] = ext(oid::PRODUCT_NAME, false, &name)?;
            }
            SimSnpDefect::AskNotCa => {}
        }
        let tbs = TbsCertificate {
            version: Version::V3,
            serial_number: SerialNumber::new(&[0]).map_err(der_err("serial"))?,
            signature: pss_alg(&PSS_PARAMS_VCEK)?,
            issuer: amd_name(&format!("SEV-{}", self.product.name()))?,
            validity: validity(7)?,
            subject: amd_name("SEV-VCEK")?,
            subject_public_key_info: SubjectPublicKeyInfoOwned::from_der(spki_der.as_bytes())
                .map_err(der_err("VCEK SPKI"))?,
            issuer_unique_id: None,
            subject_unique_id: None,
            extensions: Some(exts),
        };
        let vcek_der = sign_cert(tbs, &self.ask_key, &PSS_PARAMS_VCEK)?;
        let ask_der = if defect == SimSnpDefect::AskNotCa {
            let mut ask = Certificate::from_der(&self.ask_der).map_err(der_err("ASK"))?;
            let bc = ext(
                der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
                true,
                &BasicConstraints {
                    ca: false,
                    path_len_constraint: None,
                },
            )?;
            if let Some(exts) = ask.tbs_certificate.extensions.as_mut() {
                for e in exts.iter_mut() {
                    if e.extn_id == der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS {
                        *e = bc.clone();
                    }
                }
            }
            sign_cert(ask.tbs_certificate, &self.ark_key, &PSS_PARAMS_ARK_ASK)?
        } else {
            self.ask_der.clone()
        };
        let signing = p384::ecdsa::SigningKey::from(key);
        let sig: p384::ecdsa::Signature = signature::Signer::sign(&signing, &report.signed_bytes());
        let (r, s) = sig.split_bytes();
        let mut r48 = [0u8; 48];
        let mut s48 = [0u8; 48];
        r48.copy_from_slice(&r);
        s48.copy_from_slice(&s);
        report.set_signature_p384(&r48, &s48);
        Ok((
            report.to_bytes().to_vec(),
            vec![vcek_der, ask_der, self.ark_der.clone()],
        ))
    }
}

fn cert_issued_by_current_ask(vcek_der: &[u8], ask_der: &[u8]) -> bool {
    let (Ok(vcek), Ok(ask)) = (
        Certificate::from_der(vcek_der),
        Certificate::from_der(ask_der),
    ) else {
        return false;
    };
    let Ok(ask_spki) = ask.tbs_certificate.subject_public_key_info.to_der() else {
        return false;
    };
    let Ok(public) =
        <rsa::RsaPublicKey as rsa::pkcs8::DecodePublicKey>::from_public_key_der(&ask_spki)
    else {
        return false;
    };
    let Ok(tbs) = vcek.tbs_certificate.to_der() else {
        return false;
    };
    let Ok(pkcs1) = rsa::pkcs1::EncodeRsaPublicKey::to_pkcs1_der(&public) else {
        return false;
    };
    crate::sig::rsa_pss_sha384(pkcs1.as_bytes(), &tbs, vcek.signature.raw_bytes()).is_ok()
}

fn remove_vceks(pdir: &Path) -> Result<(), SimError> {
    let entries = std::fs::read_dir(pdir).map_err(|source| SimError::Io {
        op: "list",
        path: pdir.to_owned(),
        source,
    })?;
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with("vcek-") {
            let p = e.path();
            std::fs::remove_file(&p).map_err(|source| SimError::Io {
                op: "remove stale",
                path: p,
                source,
            })?;
        }
    }
    Ok(())
}

/// A [`Tee`] backed by the sim PSP: reports for one launch measurement, label `sim-sev-snp`.
#[derive(Debug)]
pub struct SimSnpTee {
    psp: SimPsp,
    measurement: [u8; 48],
    host_data: [u8; 32],
}

impl SimSnpTee {
    /// A sim guest launched with `measurement` on `psp`'s platform.
    pub fn new(psp: SimPsp, measurement: [u8; 48]) -> SimSnpTee {
        SimSnpTee {
            psp,
            measurement,
            host_data: [0; 32],
        }
    }

    /// Sets the HOST_DATA the (sim) host supplied at launch.
    pub fn with_host_data(mut self, host_data: [u8; 32]) -> SimSnpTee {
        self.host_data = host_data;
        self
    }

    /// The PSP behind it.
    pub fn psp(&self) -> &SimPsp {
        &self.psp
    }

    /// The launch measurement.
    pub fn measurement(&self) -> [u8; 48] {
        self.measurement
    }
}

impl Tee for SimSnpTee {
    fn label(&self) -> TeeLabel {
        TeeLabel::SimSevSnp
    }

    fn get_report(&self, report_data: &[u8; 64]) -> Result<RawEvidence, TeeError> {
        let mut r = self.psp.report_template(self.measurement, *report_data);
        r.host_data = self.host_data;
        let (report, certs) = self
            .psp
            .sign_report(r)
            .map_err(|e| TeeError::Sim(e.to_string()))?;
        Ok(RawEvidence {
            report,
            certs,
            collateral: None,
        })
    }
}
