//! Authenticity of a SEV-SNP report: the ARK pinned per product, the RSASSA-PSS chain ARK -> ASK/ASVK ->
//! VCEK/VLEK with its exact parameters and profile, validity at a time, an optional CRL, and then the report's
//! ECDSA P-384 signature and its binding to the VCEK (TCB extensions, hwID).
//!
//! Nothing here judges whether an authentic report is acceptable; that is [`super::policy`].

use super::certs::{common_name, parse_cert, CertBundle, LeafInfo};
// The pins live in `super::roots` (certs reads them too); named here as before.
pub use super::roots::{pinned_product, spki_sha256, ARK_SPKI_SHA256};
use crate::failure::Failure;
use attestation::sig::{P384Key, SigError};
use attestation::snp::{
    AttestationReport, Product, Signature, SigningKey, SIGNATURE_ALGO_ECDSA_P384_SHA384,
};
use serde::Serialize;
use x509_parser::prelude::*;

const OID_RSASSA_PSS: &str = "1.2.840.113549.1.1.10";
const OID_MGF1: &str = "1.2.840.113549.1.1.8";
const OID_SHA384: &str = "2.16.840.1.101.3.4.2.2";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_SECP384R1: &str = "1.3.132.0.34";
const RSA_MODULUS_BITS: usize = 4096;

/// Check names a chain failure can carry.
pub mod checks {
    /// A certificate did not parse.
    pub const CERT_PARSE: &str = "cert-parse";
    /// The chain does not end in a pinned AMD ARK (simulated evidence).
    pub const ROOT: &str = "root";
    /// The ARK is not validly self-signed.
    pub const ARK_SIGNATURE: &str = "ark-signature";
    /// The ASK/ASVK is not validly signed by the ARK.
    pub const INTERMEDIATE_SIGNATURE: &str = "intermediate-signature";
    /// The VCEK/VLEK is not validly signed by the ASK/ASVK.
    pub const LEAF_SIGNATURE: &str = "leaf-signature";
    /// A certificate does not have AMD's profile (names, key types, algorithm parameters).
    pub const CERT_PROFILE: &str = "cert-profile";
    /// A certificate is outside its validity period at the verification time.
    pub const CERT_VALIDITY: &str = "cert-validity";
    /// A CRL is unusable (unreadable, issued by neither the ARK nor the ASK/ASVK, an issuer that may not sign
    /// CRLs, a bad signature) or revokes a certificate of the chain.
    pub const CRL: &str = "crl";
    /// A CRL's thisUpdate is after the verification time (the detail names the date).
    pub const CRL_THIS_UPDATE: &str = "crl-this-update";
    /// A CRL's nextUpdate is before the verification time, or absent (the detail names the date).
    pub const CRL_NEXT_UPDATE: &str = "crl-next-update";
    /// The chain breaks a rule of X.509 path validation ([`crate::pki::Rule`], named first in the detail):
    /// an issuer that is not a CA or may not sign certificates, a leaf that is a CA, a path length exceeded,
    /// an unknown critical extension, a chain of another shape.
    pub const CERT_PATH: &str = "cert-path";
    /// The products named by CPUID, the certificates and the ARK disagree, or none is known.
    pub const PRODUCT: &str = "product";
    /// The report's signature does not verify with the VCEK/VLEK key.
    pub const REPORT_SIGNATURE: &str = "report-signature";
    /// SIGNATURE_ALGO is not ECDSA P-384 with SHA-384.
    pub const SIGNATURE_ALGO: &str = "signature-algo";
    /// KEY_INFO names a different key than the certificate chain provides (or none).
    pub const SIGNING_KEY: &str = "signing-key";
    /// The VCEK/VLEK TCB extensions differ from REPORTED_TCB.
    pub const TCB_EXTENSIONS: &str = "tcb-extensions";
    /// The VCEK hwID differs from CHIP_ID.
    pub const HWID: &str = "hwid";
    /// The chain-related checks, for callers that ask "did the chain fail?".
    #[cfg(any(test, feature = "internals"))]
    pub const CHAIN: [&str; 12] = [
        CERT_PARSE,
        CERT_PATH,
        CRL_THIS_UPDATE,
        CRL_NEXT_UPDATE,
        ROOT,
        ARK_SIGNATURE,
        INTERMEDIATE_SIGNATURE,
        LEAF_SIGNATURE,
        CERT_PROFILE,
        CERT_VALIDITY,
        CRL,
        PRODUCT,
    ];
}

/// Where the chain ends: a pinned AMD root for a product, or a root that is not AMD's (simulated evidence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RootKind {
    /// The ARK is AMD's pinned root for this product.
    Amd(Product),
    /// The ARK matches no pinned AMD root: the evidence is simulated (or forged).
    Unpinned,
}

impl RootKind {
    /// Whether this root is not AMD's.
    pub fn is_simulated(self) -> bool {
        matches!(self, RootKind::Unpinned)
    }
}

/// How to verify a chain.
#[derive(Clone, Debug)]
pub struct ChainOptions {
    /// The time at which every certificate must be valid.
    pub at: ::time::OffsetDateTime,
    /// A CRL file (DER, or PEM with any number of `X509 CRL` blocks). Each CRL must be issued by the ARK
    /// (covering the ASK/ASVK) or the ASK/ASVK (covering the VCEK/VLEK), signed by it, and current at `at`; a
    /// certificate it lists is rejected.
    pub crl: Option<Vec<u8>>,
    /// Accept a chain whose root is not a pinned AMD ARK (sim evidence).
    pub allow_simulated: bool,
}

impl Default for ChainOptions {
    fn default() -> Self {
        ChainOptions {
            at: ::time::OffsetDateTime::now_utc(),
            crl: None,
            allow_simulated: false,
        }
    }
}

/// The outcome of checking a certificate chain; reusable for every report signed by the same VCEK/VLEK.
#[derive(Clone, Debug)]
pub struct ChainOutcome {
    /// Where the chain ends.
    pub root: RootKind,
    /// The product, from CPUID where the caller gave it, else the certificates.
    pub product: Option<Product>,
    /// Facts of the VCEK/VLEK, if it parsed.
    pub leaf: Option<LeafInfo>,
    /// The VCEK/VLEK public key, if it is a P-384 key.
    pub leaf_key: Option<P384Key>,
    /// The ARK's self-signature verified.
    pub ark_self_signed: bool,
    /// The ASK/ASVK signature by the ARK verified.
    pub intermediate_signed_by_ark: bool,
    /// The VCEK/VLEK signature by the ASK/ASVK verified.
    pub leaf_signed_by_intermediate: bool,
    /// Every certificate was within its validity at the verification time.
    pub time_valid: bool,
    /// Every failed chain check.
    pub failures: Vec<Failure>,
}

impl ChainOutcome {
    /// Whether all three RSASSA-PSS signatures verified (the vectors' `chain_valid`, which ignores dates).
    pub fn signatures_valid(&self) -> bool {
        self.ark_self_signed && self.intermediate_signed_by_ark && self.leaf_signed_by_intermediate
    }
}

/// Checks that an AlgorithmIdentifier is exactly RSASSA-PSS with SHA-384, MGF1-SHA-384, salt 48, trailer 1.
pub(crate) fn check_pss_params(alg: &AlgorithmIdentifier<'_>) -> Result<(), String> {
    let oid = alg.algorithm.to_id_string();
    if oid != OID_RSASSA_PSS {
        return Err(format!(
            "signature algorithm is {oid}, expected RSASSA-PSS ({OID_RSASSA_PSS})"
        ));
    }
    let params = match x509_parser::signature_algorithm::SignatureAlgorithm::try_from(alg) {
        Ok(x509_parser::signature_algorithm::SignatureAlgorithm::RSASSA_PSS(p)) => p,
        _ => return Err("RSASSA-PSS parameters are missing or malformed".into()),
    };
    let hash = params.hash_algorithm_oid().to_id_string();
    if hash != OID_SHA384 {
        return Err(format!(
            "PSS hash is {hash}, expected SHA-384 ({OID_SHA384})"
        ));
    }
    let mgf = params
        .mask_gen_algorithm()
        .map_err(|_| "PSS mask generation algorithm is malformed".to_string())?;
    if mgf.mgf.to_id_string() != OID_MGF1 || mgf.hash.to_id_string() != OID_SHA384 {
        return Err(format!(
            "PSS mask generation is {} with {}, expected MGF1 with SHA-384",
            mgf.mgf, mgf.hash
        ));
    }
    if params.salt_length() != 48 {
        return Err(format!(
            "PSS salt length is {}, expected 48",
            params.salt_length()
        ));
    }
    if params.trailer_field() != 1 {
        return Err(format!(
            "PSS trailer field is {}, expected 1",
            params.trailer_field()
        ));
    }
    Ok(())
}

/// A signature of the SEV-SNP chain or report that does not verify, or cannot be checked (wrong algorithm or
/// parameters, a key of the wrong kind or size, a report of the wrong length); the text says which.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SignatureError(pub String);

/// Verifies `cert`'s RSASSA-PSS signature with `issuer`'s RSA key (parameters checked exactly).
pub fn verify_pss_signature(
    cert: &X509Certificate<'_>,
    issuer: &X509Certificate<'_>,
) -> Result<(), SignatureError> {
    pss_signature(cert, issuer).map_err(SignatureError)
}

fn pss_signature(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> Result<(), String> {
    if cert.signature_algorithm != cert.tbs_certificate.signature {
        return Err(
            "outer signatureAlgorithm differs from the tbsCertificate signature field".into(),
        );
    }
    check_pss_params(&cert.signature_algorithm)?;
    let key = rsa_key(issuer)?;
    verify_pss(
        cert.tbs_certificate.as_ref(),
        &cert.signature_value.data,
        key,
    )
}

/// The issuer's RSA public key (the RSAPublicKey DER of its SubjectPublicKeyInfo), checked to be RSA-4096.
fn rsa_key<'a>(cert: &'a X509Certificate<'_>) -> Result<&'a [u8], String> {
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::traits::PublicKeyParts;
    let der: &'a [u8] = &cert.public_key().subject_public_key.data;
    let key = rsa::RsaPublicKey::from_pkcs1_der(der)
        .map_err(|e| format!("issuer key is not an RSA public key ({e})"))?;
    if key.size() * 8 != RSA_MODULUS_BITS {
        return Err(format!(
            "issuer RSA key is {} bits, expected {RSA_MODULUS_BITS}",
            key.size() * 8
        ));
    }
    Ok(der)
}

/// RSASSA-PSS SHA-384 (salt 48) by `key` over `msg`; remembered by an active [`crate::Verifier`].
fn verify_pss(msg: &[u8], sig: &[u8], key: &[u8]) -> Result<(), String> {
    crate::sigcache::memo("rsa-pss-sha384-salt48", key, msg, sig, check_pss)
}

/// RSASSA-PSS SHA-384 (salt 48) by the RSAPublicKey DER `key` (a [`crate::sigcache::Check`]).
fn check_pss(key: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), String> {
    attestation::sig::rsa_pss_sha384(key, msg, sig).map_err(|e| match e {
        SigError::Mismatch => "RSASSA-PSS signature does not verify".to_string(),
        e => format!("RSASSA-PSS: {e}"),
    })
}

fn p384_key(cert: &X509Certificate<'_>) -> Result<P384Key, String> {
    let spki = cert.public_key();
    let alg = spki.algorithm.algorithm.to_id_string();
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|o| o.to_id_string())
        .unwrap_or_default();
    if alg != OID_EC_PUBLIC_KEY || curve != OID_SECP384R1 {
        return Err(format!(
            "public key is {alg} on curve `{curve}`, expected an EC key on P-384 ({OID_SECP384R1})"
        ));
    }
    P384Key::from_sec1(&spki.subject_public_key.data)
        .map_err(|_| "P-384 public key is not a valid point".to_string())
}

fn fmt_time(t: i64) -> String {
    ::time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|d| {
            d.format(&::time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| t.to_string())
}

fn check_validity(
    cert: &X509Certificate<'_>,
    what: &str,
    at: i64,
    failures: &mut Vec<Failure>,
) -> bool {
    let nb = cert.validity().not_before.timestamp();
    let na = cert.validity().not_after.timestamp();
    if at < nb || at > na {
        failures.push(Failure::new(
            checks::CERT_VALIDITY,
            format!(
                "{what} is valid from {} to {}, verification time is {}",
                fmt_time(nb),
                fmt_time(na),
                fmt_time(at)
            ),
        ));
        return false;
    }
    true
}

/// Verifies the chain of `bundle`. `cpuid_product` is the product the report's CPUID names (v3+), which
/// takes precedence over the certificates; a disagreement is a failure.
pub fn verify_chain(
    bundle: &CertBundle,
    opts: &ChainOptions,
    cpuid_product: Option<Product>,
) -> ChainOutcome {
    let mut out = ChainOutcome {
        root: RootKind::Unpinned,
        product: cpuid_product,
        leaf: None,
        leaf_key: None,
        ark_self_signed: false,
        intermediate_signed_by_ark: false,
        leaf_signed_by_intermediate: false,
        time_valid: false,
        failures: Vec::new(),
    };
    let f = &mut out.failures;
    let ark = parse_cert(&bundle.ark, "ARK")
        .map_err(|e| f.push(Failure::new(checks::CERT_PARSE, e.to_string())))
        .ok();
    let inter = parse_cert(&bundle.intermediate, "ASK/ASVK")
        .map_err(|e| f.push(Failure::new(checks::CERT_PARSE, e.to_string())))
        .ok();
    let leaf = parse_cert(&bundle.leaf, "VCEK/VLEK")
        .map_err(|e| f.push(Failure::new(checks::CERT_PARSE, e.to_string())))
        .ok();

    // The leaf: its facts, its key and the product it names.
    let mut cert_product = None;
    if let Some(leaf) = &leaf {
        match LeafInfo::from_cert(leaf) {
            Ok(info) => {
                cert_product = info.product();
                if let Err(e) = info.product_consistent() {
                    f.push(Failure::new(checks::PRODUCT, e));
                }
                out.leaf = Some(info);
            }
            Err(e) => f.push(Failure::new(checks::CERT_PARSE, format!("VCEK/VLEK: {e}"))),
        }
        match p384_key(leaf) {
            Ok(k) => out.leaf_key = Some(k),
            Err(e) => f.push(Failure::new(
                checks::CERT_PROFILE,
                format!("VCEK/VLEK: {e}"),
            )),
        }
    }
    match (cpuid_product, cert_product) {
        (Some(c), Some(p)) if c != p => f.push(Failure::new(
            checks::PRODUCT,
            format!("CPUID names {c}, the VCEK/VLEK names {p}"),
        )),
        (None, p) => out.product = p,
        _ => {}
    }

    // The root: pinned or not, self-signed.
    if let Some(ark) = &ark {
        let hash = spki_sha256(ark);
        match pinned_product(&hash) {
            Some(p) => {
                out.root = RootKind::Amd(p);
                match out.product {
                    Some(q) if q != p => f.push(Failure::new(
                        checks::PRODUCT,
                        format!("the ARK is AMD's {p} root, the report and certificates name {q}"),
                    )),
                    None => out.product = Some(p),
                    _ => {}
                }
            }
            None if opts.allow_simulated => {}
            None => f.push(Failure::new(
                checks::ROOT,
                format!(
                    "SIMULATED: the ARK public key (SHA-256 {hash}) is not a pinned AMD root; \
                     expected one of {} (allow simulated evidence to accept it)",
                    ARK_SPKI_SHA256
                        .iter()
                        .map(|(p, h)| format!("{p} {}", &h[..16]))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
        if ark.subject().as_raw() != ark.issuer().as_raw() {
            f.push(Failure::new(
                checks::CERT_PROFILE,
                "ARK issuer differs from its subject (not self-signed)",
            ));
        }
        // AMD's own ARK, byte for byte, has a self-signature known good (crate::anchors).
        let self_signed = if crate::anchors::self_signature_known_good(&bundle.ark) {
            Ok(())
        } else {
            verify_pss_signature(ark, ark)
        };
        match self_signed {
            Ok(()) => out.ark_self_signed = true,
            Err(e) => f.push(Failure::new(
                checks::ARK_SIGNATURE,
                format!("ARK self-signature: {e}"),
            )),
        }
    }
    if out.product.is_none() {
        f.push(Failure::new(
            checks::PRODUCT,
            "no product: the report has no known CPUID and the certificates name none of Milan, Genoa, Turin",
        ));
    }

    // Profile of names, given the product and key kind.
    let kind = out
        .leaf
        .as_ref()
        .map(|l| l.kind)
        .unwrap_or(SigningKey::Vcek);
    if let Some(p) = out.product {
        let expect_ark = format!("ARK-{p}");
        let expect_inter = match kind {
            SigningKey::Vlek => format!("SEV-VLEK-{p}"),
            _ => format!("SEV-{p}"),
        };
        let expect_leaf = match kind {
            SigningKey::Vlek => "SEV-VLEK",
            _ => "SEV-VCEK",
        };
        let mut name_check = |cert: &Option<X509Certificate<'_>>,
                              what: &str,
                              subject: &str,
                              issuer: &str| {
            if let Some(c) = cert {
                let s = common_name(c.subject()).unwrap_or_default();
                let i = common_name(c.issuer()).unwrap_or_default();
                if s != subject || i != issuer {
                    f.push(Failure::new(
                        checks::CERT_PROFILE,
                        format!("{what} is CN={s} issued by CN={i}, expected CN={subject} issued by CN={issuer}"),
                    ));
                }
            }
        };
        name_check(&ark, "ARK", &expect_ark, &expect_ark);
        name_check(&inter, "intermediate", &expect_inter, &expect_ark);
        name_check(&leaf, "VCEK/VLEK", expect_leaf, &expect_inter);
    }

    // Issuer linkage and signatures.
    if let (Some(ark), Some(inter)) = (&ark, &inter) {
        if inter.issuer().as_raw() != ark.subject().as_raw() {
            f.push(Failure::new(
                checks::CERT_PROFILE,
                "intermediate issuer name differs from the ARK subject",
            ));
        }
        match verify_pss_signature(inter, ark) {
            Ok(()) => out.intermediate_signed_by_ark = true,
            Err(e) => f.push(Failure::new(
                checks::INTERMEDIATE_SIGNATURE,
                format!("ASK/ASVK by ARK: {e}"),
            )),
        }
    }
    if let (Some(inter), Some(leaf)) = (&inter, &leaf) {
        if leaf.issuer().as_raw() != inter.subject().as_raw() {
            f.push(Failure::new(
                checks::CERT_PROFILE,
                "VCEK/VLEK issuer name differs from the intermediate subject",
            ));
        }
        match verify_pss_signature(leaf, inter) {
            Ok(()) => out.leaf_signed_by_intermediate = true,
            Err(e) => f.push(Failure::new(
                checks::LEAF_SIGNATURE,
                format!("VCEK/VLEK by ASK/ASVK: {e}"),
            )),
        }
    }

    // X.509 path validation: roles, basic constraints, key usage, path length, shape.
    if let (Some(ark), Some(inter), Some(leaf)) = (&ark, &inter, &leaf) {
        let chain = [leaf.clone(), inter.clone(), ark.clone()];
        for v in crate::pki::check_path(&chain, &SNP_SHAPE) {
            f.push(Failure::new(
                checks::CERT_PATH,
                format!("{}: {}", v.rule.name(), v.detail),
            ));
        }
    }

    // Validity at the verification time.
    let at = opts.at.unix_timestamp();
    let mut time_ok = ark.is_some() && inter.is_some() && leaf.is_some();
    for (cert, what) in [(&ark, "ARK"), (&inter, "ASK/ASVK"), (&leaf, "VCEK/VLEK")] {
        if let Some(c) = cert {
            time_ok &= check_validity(c, what, at, f);
        }
    }
    out.time_valid = time_ok;

    // Revocation.
    if let (Some(crl), Some(ark), Some(inter)) = (&opts.crl, &ark, &inter) {
        f.extend(check_crls(crl, ark, inter, leaf.as_ref(), at));
    }
    out
}

/// The shape of every AMD chain: VCEK/VLEK <- ASK/ASVK <- ARK (names are checked by [`verify_chain`]).
const SNP_SHAPE: [crate::pki::Position<'static>; 3] = [
    crate::pki::Position {
        what: "VCEK/VLEK",
        role: crate::pki::Role::Leaf,
        names: &[],
    },
    crate::pki::Position {
        what: "ASK/ASVK",
        role: crate::pki::Role::Ca,
        names: &[],
    },
    crate::pki::Position {
        what: "ARK",
        role: crate::pki::Role::Root,
        names: &[],
    },
];

/// Checks every CRL of a CRL file against the chain: each is issued by the ARK (covering the ASK/ASVK) or by
/// the ASK/ASVK (covering the VCEK/VLEK), its issuer may sign CRLs, its PSS signature verifies with the
/// issuer's key, `thisUpdate <= at < nextUpdate`, and it lists no certificate it covers.
pub fn check_crls(
    data: &[u8],
    ark: &X509Certificate<'_>,
    inter: &X509Certificate<'_>,
    leaf: Option<&X509Certificate<'_>>,
    at: i64,
) -> Vec<Failure> {
    let ders = match crate::pki::crls_from_file_bytes(data) {
        Ok(d) => d,
        Err(e) => return vec![Failure::new(checks::CRL, e.to_string())],
    };
    let mut out = Vec::new();
    let many = ders.len() > 1;
    for (i, der) in ders.iter().enumerate() {
        let tag = if many {
            format!("CRL {} of {}", i + 1, ders.len())
        } else {
            "CRL".to_string()
        };
        out.extend(
            check_one_crl(der, ark, inter, leaf, at)
                .into_iter()
                .map(|f| Failure::new(f.check, format!("{tag}: {}", f.detail))),
        );
    }
    out
}

fn check_one_crl(
    der: &[u8],
    ark: &X509Certificate<'_>,
    inter: &X509Certificate<'_>,
    leaf: Option<&X509Certificate<'_>>,
    at: i64,
) -> Vec<Failure> {
    let crl = match parse_x509_crl(der) {
        Ok(([], crl)) => crl,
        Ok((rest, _)) => {
            return vec![Failure::new(
                checks::CRL,
                format!(
                    "{} trailing bytes after the DER CertificateList",
                    rest.len()
                ),
            )]
        }
        Err(e) => {
            return vec![Failure::new(
                checks::CRL,
                format!("not a DER CertificateList ({})", crate::pki::der_error(&e)),
            )]
        }
    };
    // The issuer by name; what it covers is what it issued.
    let (issuer, issuer_what, covered, covered_what) =
        if crl.issuer().as_raw() == ark.subject().as_raw() {
            (ark, "ARK", Some(inter), "ASK/ASVK")
        } else if crl.issuer().as_raw() == inter.subject().as_raw() {
            (inter, "ASK/ASVK", leaf, "VCEK/VLEK")
        } else {
            return vec![Failure::new(
                checks::CRL,
                format!(
                    "CRL issuer CN={} is neither the ARK CN={} nor the ASK/ASVK CN={}",
                    common_name(crl.issuer()).unwrap_or_default(),
                    common_name(ark.subject()).unwrap_or_default(),
                    common_name(inter.subject()).unwrap_or_default()
                ),
            )];
        };
    let mut out = Vec::new();
    if let Err(e) = crate::pki::may_sign_crls(issuer) {
        out.push(Failure::new(checks::CRL, format!("{issuer_what}: {e}")));
    }
    if crl.signature_algorithm != crl.tbs_cert_list.signature {
        out.push(Failure::new(
            checks::CRL,
            "outer signatureAlgorithm differs from its tbsCertList",
        ));
    } else if let Err(e) = check_pss_params(&crl.signature_algorithm)
        .and_then(|()| rsa_key(issuer))
        .and_then(|k| verify_pss(crl.tbs_cert_list.as_ref(), &crl.signature_value.data, k))
    {
        out.push(Failure::new(
            checks::CRL,
            format!("signature by the {issuer_what}: {e}"),
        ));
    }
    for w in crate::pki::crl_window(&crl, at) {
        out.push(match w {
            crate::pki::CrlWindow::ThisUpdate { this_update } => Failure::new(
                checks::CRL_THIS_UPDATE,
                format!(
                    "issued by the {issuer_what} with thisUpdate {}, after the verification time {}",
                    fmt_time(this_update),
                    fmt_time(at)
                ),
            ),
            crate::pki::CrlWindow::NextUpdate { next_update: Some(n) } => Failure::new(
                checks::CRL_NEXT_UPDATE,
                format!(
                    "issued by the {issuer_what} with nextUpdate {}, before the verification time {} (stale)",
                    fmt_time(n),
                    fmt_time(at)
                ),
            ),
            crate::pki::CrlWindow::NextUpdate { next_update: None } => Failure::new(
                checks::CRL_NEXT_UPDATE,
                format!("issued by the {issuer_what} without nextUpdate: nothing says when it is stale"),
            ),
        });
    }
    if let Some(cert) = covered {
        if let Some(date) = crate::pki::crl_revokes(&crl, cert) {
            out.push(Failure::new(
                checks::CRL,
                format!(
                    "the {covered_what} CN={} (serial {}) is revoked since {date}",
                    common_name(cert.subject()).unwrap_or_default(),
                    cert.raw_serial_as_string(),
                ),
            ));
        }
    }
    out
}

/// Verifies the report signature (ECDSA P-384, SHA-384 over `signed`, i.e. bytes 0x000..0x29F as received).
pub(crate) fn verify_report_signature(
    signed: &[u8],
    sig: &Signature,
    key: &P384Key,
) -> Result<(), String> {
    if !sig.padding_is_zero() {
        return Err("the high 24 bytes of R or S are not zero".into());
    }
    attestation::sig::p384_sha384_scalars(key, signed, &sig.r_be(), &sig.s_be()).map_err(
        |e| match e {
            SigError::Malformed(m) => m,
            _ => "ECDSA P-384/SHA-384 signature over 0x000..0x29F does not verify".to_string(),
        },
    )
}

/// The same check on raw report bytes, for reports that do not parse (e.g. a must-be-zero byte set).
#[cfg(any(test, feature = "internals"))]
pub fn verify_raw_report_signature(bytes: &[u8], key: &P384Key) -> Result<(), SignatureError> {
    raw_report_signature(bytes, key).map_err(SignatureError)
}

#[cfg(any(test, feature = "internals"))]
fn raw_report_signature(bytes: &[u8], key: &P384Key) -> Result<(), String> {
    if bytes.len() != attestation::snp::REPORT_LEN {
        return Err(format!(
            "report is {} bytes, expected {}",
            bytes.len(),
            attestation::snp::REPORT_LEN
        ));
    }
    let mut rd = attestation::wire::Reader::new("attestation report", bytes);
    let parts = (
        rd.take("signed part", attestation::snp::SIGNED_LEN),
        rd.array("SIGNATURE.R"),
        rd.array("SIGNATURE.S"),
    );
    match parts {
        (Ok(signed), Ok(r), Ok(s)) => verify_report_signature(signed, &Signature { r, s }, key),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e.to_string()),
    }
}

/// The report-level authenticity checks against a verified (or failed) chain: signature algorithm, signing
/// key kind, signature, TCB extensions == REPORTED_TCB, hwID == CHIP_ID. Returns (signature_valid, failures).
#[cfg(any(test, feature = "internals", feature = "fetch"))]
pub fn verify_report_against_chain(
    report: &AttestationReport,
    chain: &ChainOutcome,
) -> (bool, Vec<Failure>) {
    verify_received_against_chain(report, &report.to_bytes(), chain)
}

/// As [`verify_report_against_chain`] for a report parsed from `raw`: the signature is checked over
/// `raw[0x000..0x2A0]` exactly as received, never over bytes written back from the parsed fields.
pub fn verify_received_against_chain(
    report: &AttestationReport,
    raw: &[u8],
    chain: &ChainOutcome,
) -> (bool, Vec<Failure>) {
    let mut f = Vec::new();
    if let Some(c) = report.cpuid {
        let reported = c.family != 0 || c.model != 0 || c.stepping != 0;
        if reported && Product::from_cpuid(c.family, c.model).is_none() {
            f.push(Failure::new(
                checks::PRODUCT,
                format!(
                    "CPUID family {:#04x} model {:#04x} is not a known SEV-SNP product (Milan, Genoa, Turin)",
                    c.family, c.model
                ),
            ));
        }
    }
    if report.signature_algo != SIGNATURE_ALGO_ECDSA_P384_SHA384 {
        f.push(Failure::new(
            checks::SIGNATURE_ALGO,
            format!("SIGNATURE_ALGO is {}, expected {SIGNATURE_ALGO_ECDSA_P384_SHA384} (ECDSA P-384 SHA-384)", report.signature_algo),
        ));
    }
    let key = report.key_info.signing_key;
    if let Some(leaf) = &chain.leaf {
        if key != leaf.kind {
            f.push(Failure::new(
                checks::SIGNING_KEY,
                format!(
                    "KEY_INFO says the report is signed by the {key}, the certificate is a {}",
                    leaf.kind
                ),
            ));
        }
    }
    let mut signature_valid = false;
    match &chain.leaf_key {
        Some(k) => match raw
            .get(..attestation::snp::SIGNED_LEN)
            .ok_or_else(|| {
                format!(
                    "report is {} bytes, shorter than the signed part",
                    raw.len()
                )
            })
            .and_then(|signed| verify_report_signature(signed, &report.signature, k))
        {
            Ok(()) => signature_valid = true,
            Err(e) => f.push(Failure::new(checks::REPORT_SIGNATURE, e)),
        },
        None => f.push(Failure::new(
            checks::REPORT_SIGNATURE,
            "no usable VCEK/VLEK key to verify the report with",
        )),
    }
    if let (Some(leaf), Some(product)) = (&chain.leaf, chain.product) {
        match leaf.extensions.tcb(product) {
            Some(tcb) if tcb == report.reported_tcb => {}
            Some(tcb) => f.push(Failure::new(
                checks::TCB_EXTENSIONS,
                format!(
                    "certificate SPLs give {tcb} ({}), REPORTED_TCB is {} ({})",
                    tcb.decode(product),
                    report.reported_tcb,
                    report.reported_tcb.decode(product)
                ),
            )),
            None => f.push(Failure::new(
                checks::TCB_EXTENSIONS,
                format!("the certificate lacks an SPL extension the {product} TCB layout needs"),
            )),
        }
        if leaf.kind == SigningKey::Vcek {
            if let Some(e) = hwid_mismatch(report, leaf, product) {
                f.push(Failure::new(checks::HWID, e));
            }
        }
    }
    (signature_valid, f)
}

/// Whether the VCEK hwID matches CHIP_ID (Turin: 8 bytes, the rest of CHIP_ID zero); `None` if it does or the
/// chip ID is masked.
pub fn hwid_mismatch(
    report: &AttestationReport,
    leaf: &LeafInfo,
    product: Product,
) -> Option<String> {
    if report.key_info.mask_chip_key || report.chip_id.iter().all(|&b| b == 0) {
        return None;
    }
    let Some(hw) = &leaf.extensions.hw_id else {
        return Some("the VCEK has no hwID extension".into());
    };
    let want_len = if product == Product::Turin { 8 } else { 64 };
    if hw.len() != want_len {
        return Some(format!(
            "hwID is {} bytes, a {product} VCEK has {want_len}",
            hw.len()
        ));
    }
    let (head, tail) = report.chip_id.split_at(want_len);
    if head != hw.as_slice() || tail.iter().any(|&b| b != 0) {
        return Some(format!(
            "CHIP_ID is {}, VCEK hwID is {}",
            hex::encode(report.chip_id),
            hex::encode(hw)
        ));
    }
    None
}
