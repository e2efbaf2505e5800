//! AMD KDS certificates: loading an ARK/ASK(ASVK)/VCEK(VLEK) set from a directory or an evidence bundle, and
//! reading the KDS extensions (SPLs, hwID, productName, csp_id) of a VCEK or VLEK.
//!
//! Parsing uses x509-parser; nothing here decides trust, which is the job of [`super::chain`].

use attestation::snp::{Product, SigningKey, TcbParts, TcbVersion};
use std::path::{Path, PathBuf};
use x509_parser::prelude::*;

/// OID arc of AMD's KDS extensions (1.3.6.1.4.1.3704.1).
#[cfg(any(test, feature = "internals"))]
pub const KDS_ARC: &str = "1.3.6.1.4.1.3704.1";
/// structVersion extension.
#[cfg(any(test, feature = "internals"))]
pub const OID_STRUCT_VERSION: &str = "1.3.6.1.4.1.3704.1.1";
/// productName extension (IA5String such as `Milan-B0`).
pub const OID_PRODUCT_NAME: &str = "1.3.6.1.4.1.3704.1.2";
/// blSPL extension (boot loader SVN).
pub const OID_BL_SPL: &str = "1.3.6.1.4.1.3704.1.3.1";
/// teeSPL extension (PSP OS SVN).
pub const OID_TEE_SPL: &str = "1.3.6.1.4.1.3704.1.3.2";
/// snpSPL extension (SNP firmware SVN).
pub const OID_SNP_SPL: &str = "1.3.6.1.4.1.3704.1.3.3";
/// ucodeSPL extension (microcode SVN).
pub const OID_UCODE_SPL: &str = "1.3.6.1.4.1.3704.1.3.8";
/// fmcSPL extension (FMC SVN, Turin and later).
pub const OID_FMC_SPL: &str = "1.3.6.1.4.1.3704.1.3.9";
/// hwID extension: the raw chip ID (64 bytes on Milan/Genoa, 8 on Turin).
pub const OID_HW_ID: &str = "1.3.6.1.4.1.3704.1.4";
/// csp_id extension of a VLEK (the cloud provider).
pub const OID_CSP_ID: &str = "1.3.6.1.4.1.3704.1.5";

/// Why a certificate set could not be loaded or read.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A required certificate is absent.
    #[error("{0}")]
    Missing(String),
    /// A certificate's KDS extensions are missing or malformed, or name a product inconsistently.
    #[error("{0}")]
    Extension(String),
    /// A file holds no parsable certificate.
    #[error("{what}: {detail}")]
    Malformed {
        /// Which certificate or file.
        what: String,
        /// What is wrong.
        detail: String,
    },
}

/// DER certificates of one SEV-SNP chain: the AMD root, the intermediate (ASK or ASVK) and the leaf (VCEK or VLEK).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertBundle {
    /// ARK, DER.
    pub ark: Vec<u8>,
    /// ASK (VCEK chains) or ASVK (VLEK chains), DER.
    pub intermediate: Vec<u8>,
    /// VCEK or VLEK, DER.
    pub leaf: Vec<u8>,
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    // A certificate is a few kilobytes; 1 MiB is checked before anything is read.
    attestation::cli_io::read_capped(path, 1 << 20).map_err(|e| match e {
        attestation::cli_io::ReadError::Io { source, .. } => CertError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => CertError::Malformed {
            what: path.display().to_string(),
            detail: other.to_string(),
        },
    })
}

/// The DER certificates in `data`: every PEM `CERTIFICATE` block, or `data` itself if it is not PEM.
pub fn ders_from_file_bytes(data: &[u8], what: &str) -> Result<Vec<Vec<u8>>, CertError> {
    if data.starts_with(b"-----BEGIN") || data.windows(11).any(|w| w == b"-----BEGIN ") {
        let mut out = Vec::new();
        for pem in Pem::iter_from_buffer(data) {
            let pem = pem.map_err(|e| CertError::Malformed {
                what: what.to_string(),
                detail: format!("bad PEM: {e}"),
            })?;
            if pem.label == "CERTIFICATE" {
                out.push(pem.contents);
            }
        }
        if out.is_empty() {
            return Err(CertError::Malformed {
                what: what.to_string(),
                detail: "no CERTIFICATE block".into(),
            });
        }
        Ok(out)
    } else {
        Ok(vec![data.to_vec()])
    }
}

fn first_existing(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

impl CertBundle {
    /// Loads the layouts snpguest and AMD's key server use: `ark.pem`, `ask.pem` (VCEK) or `asvk.pem` (VLEK),
    /// `vcek.der`/`vcek.pem` or `vlek.der`/`vlek.pem`; the DER layout `snpguest fetch ca der` writes (`ark.der`,
    /// `ask.der`/`asvk.der`, and `vcek.der`), or a `cert_chain.pem` (intermediate then ARK) in place of the
    /// separate ARK/intermediate files. `key` picks VCEK or VLEK files. A genuine AMD ARK and intermediate in
    /// each other's files is an error that says so (not a chain that looks simulated).
    pub fn from_dir(dir: &Path, key: SigningKey) -> Result<CertBundle, CertError> {
        if !dir.is_dir() {
            return Err(CertError::Missing(format!(
                "certificate directory {} does not exist{}",
                dir.display(),
                if dir.is_file() {
                    " (it is a file: give the directory that holds ark, ask and vcek)"
                } else {
                    ""
                }
            )));
        }
        let (leaf_names, inter_names): (&[&str], &[&str]) = match key {
            SigningKey::Vlek => (
                &["vlek.der", "vlek.pem", "vlek.crt", "vlek.cert"],
                &["asvk.pem", "asvk.der", "asvk.crt"],
            ),
            _ => (
                &["vcek.der", "vcek.pem", "vcek.crt", "vcek.cert"],
                &["ask.pem", "ask.der", "ask.crt"],
            ),
        };
        let ark_names: &[&str] = &["ark.pem", "ark.der", "ark.crt"];
        let leaf_path = first_existing(dir, leaf_names).ok_or_else(|| {
            CertError::Missing(format!(
                "{} holds none of {} (the report is signed by the {key})",
                dir.display(),
                leaf_names.join(", ")
            ))
        })?;
        let leaf = one_cert(&leaf_path)?;
        let chain_path = dir.join("cert_chain.pem");
        let (intermediate, ark) = match (
            first_existing(dir, ark_names),
            first_existing(dir, inter_names),
        ) {
            (Some(ark_path), Some(inter_path)) => {
                let (inter, ark) = (one_cert(&inter_path)?, one_cert(&ark_path)?);
                check_not_swapped(&ark, &ark_path, &inter, &inter_path)?;
                (inter, ark)
            }
            _ if chain_path.is_file() => {
                let ders =
                    ders_from_file_bytes(&read(&chain_path)?, &chain_path.display().to_string())?;
                if ders.len() != 2 {
                    return Err(CertError::Malformed {
                        what: chain_path.display().to_string(),
                        detail: format!(
                            "holds {} certificates, expected 2 (intermediate then ARK)",
                            ders.len()
                        ),
                    });
                }
                let mut it = ders.into_iter();
                match (it.next(), it.next()) {
                    (Some(i), Some(a)) => {
                        check_not_swapped(&a, &chain_path, &i, &chain_path)?;
                        (i, a)
                    }
                    _ => return Err(CertError::Missing("cert_chain.pem is incomplete".into())),
                }
            }
            _ => {
                return Err(CertError::Missing(format!(
                    "{} holds neither an ARK ({}) with an intermediate ({}) nor cert_chain.pem",
                    dir.display(),
                    ark_names.join(", "),
                    inter_names.join(", ")
                )))
            }
        };
        Ok(CertBundle {
            ark,
            intermediate,
            leaf,
        })
    }

    /// Takes the certificates of an evidence bundle, in the order DESIGN.md fixes: leaf, intermediate, ARK.
    pub fn from_der_list(certs: &[Vec<u8>]) -> Result<CertBundle, CertError> {
        match certs {
            [leaf, intermediate, ark] => Ok(CertBundle {
                ark: ark.clone(),
                intermediate: intermediate.clone(),
                leaf: leaf.clone(),
            }),
            _ => Err(CertError::Missing(format!(
                "evidence carries {} certificates, expected 3 (VCEK|VLEK, ASK|ASVK, ARK)",
                certs.len()
            ))),
        }
    }
}

/// Refuses an ARK and an intermediate that stand in each other's places: the certificate given as the
/// intermediate is a pinned AMD ARK (or is self-signed while the one given as the ARK is not).
fn check_not_swapped(
    ark: &[u8],
    ark_path: &Path,
    inter: &[u8],
    inter_path: &Path,
) -> Result<(), CertError> {
    let (Ok(a), Ok(i)) = (parse_cert(ark, "ARK"), parse_cert(inter, "ASK/ASVK")) else {
        return Ok(()); // the chain check names the certificate that does not parse
    };
    let self_signed = |c: &X509Certificate<'_>| c.subject().as_raw() == c.issuer().as_raw();
    let pinned =
        |c: &X509Certificate<'_>| super::roots::pinned_product(&super::roots::spki_sha256(c));
    let inter_is_root = pinned(&i).is_some() || (self_signed(&i) && !self_signed(&a));
    if pinned(&a).is_none() && inter_is_root && a.issuer().as_raw() == i.subject().as_raw() {
        let cn = |c: &X509Certificate<'_>| common_name(c.subject()).unwrap_or_else(|| "?".into());
        let same_file = ark_path == inter_path;
        return Err(CertError::Malformed {
            what: if same_file {
                ark_path.display().to_string()
            } else {
                format!("{} and {}", ark_path.display(), inter_path.display())
            },
            detail: format!(
                "the ARK and the intermediate are swapped: the certificate given as the ARK is {} (issued by \
                 {}), the one given as the intermediate is the root {}{}; {}",
                cn(&a),
                common_name(a.issuer()).unwrap_or_else(|| "?".into()),
                cn(&i),
                match pinned(&i) {
                    Some(p) => format!(" (AMD's pinned {p} ARK)"),
                    None => String::new(),
                },
                if same_file {
                    "cert_chain.pem must hold the intermediate first, then the ARK"
                } else {
                    "exchange the two files"
                }
            ),
        });
    }
    Ok(())
}

fn one_cert(path: &Path) -> Result<Vec<u8>, CertError> {
    let what = path.display().to_string();
    let mut ders = ders_from_file_bytes(&read(path)?, &what)?;
    if ders.len() != 1 {
        return Err(CertError::Malformed {
            what,
            detail: format!("holds {} certificates, expected 1", ders.len()),
        });
    }
    Ok(ders.remove(0))
}

/// Parses one DER certificate, requiring that no bytes follow it.
pub fn parse_cert<'a>(der: &'a [u8], what: &str) -> Result<X509Certificate<'a>, CertError> {
    let malformed = |detail: String| CertError::Malformed {
        what: what.to_owned(),
        detail,
    };
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok((rest, _)) => Err(malformed(format!(
            "{} trailing bytes after the certificate",
            rest.len()
        ))),
        Err(e) => Err(malformed(format!(
            "not a DER X.509 certificate ({})",
            crate::pki::der_error(&e)
        ))),
    }
}

/// The common name of an X.509 name, if it has one.
pub fn common_name(name: &X509Name<'_>) -> Option<String> {
    name.iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
}

/// The KDS extensions of a VCEK or VLEK.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KdsExtensions {
    /// productName (e.g. `Milan-B0`, `Genoa`).
    pub product_name: Option<String>,
    /// blSPL.
    pub bl_spl: Option<u8>,
    /// teeSPL.
    pub tee_spl: Option<u8>,
    /// snpSPL.
    pub snp_spl: Option<u8>,
    /// ucodeSPL.
    pub ucode_spl: Option<u8>,
    /// fmcSPL (Turin).
    pub fmc_spl: Option<u8>,
    /// hwID, raw bytes (VCEK only).
    #[serde(serialize_with = "ser_opt_hex")]
    pub hw_id: Option<Vec<u8>>,
    /// csp_id (VLEK only).
    pub csp_id: Option<String>,
}

fn ser_opt_hex<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(b) => s.serialize_str(&hex::encode(b)),
        None => s.serialize_none(),
    }
}

impl KdsExtensions {
    /// Reads the KDS extensions of `cert`; a malformed SPL or string extension is an error naming its OID.
    pub(crate) fn from_cert(cert: &X509Certificate<'_>) -> Result<KdsExtensions, String> {
        let mut out = KdsExtensions::default();
        for ext in cert.extensions() {
            let oid = ext.oid.to_id_string();
            let v = ext.value;
            match oid.as_str() {
                OID_BL_SPL => out.bl_spl = Some(spl(v, &oid)?),
                OID_TEE_SPL => out.tee_spl = Some(spl(v, &oid)?),
                OID_SNP_SPL => out.snp_spl = Some(spl(v, &oid)?),
                OID_UCODE_SPL => out.ucode_spl = Some(spl(v, &oid)?),
                OID_FMC_SPL => out.fmc_spl = Some(spl(v, &oid)?),
                OID_HW_ID => out.hw_id = Some(v.to_vec()),
                OID_PRODUCT_NAME => out.product_name = Some(der_string(v, &oid)?),
                OID_CSP_ID => out.csp_id = Some(der_string(v, &oid)?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// The TCB_VERSION these SPLs describe, in `product`'s layout, if every SPL the layout needs is present.
    pub fn tcb(&self, product: Product) -> Option<TcbVersion> {
        let parts = TcbParts {
            fmc: if product.has_fmc() {
                Some(self.fmc_spl?)
            } else {
                None
            },
            bootloader: self.bl_spl?,
            tee: self.tee_spl?,
            snp: self.snp_spl?,
            microcode: self.ucode_spl?,
        };
        Some(TcbVersion::from_parts(product, parts))
    }
}

/// An SPL extension: a DER INTEGER in 0..=255.
fn spl(v: &[u8], oid: &str) -> Result<u8, String> {
    match x509_parser::der_parser::der::parse_der_integer(v) {
        Ok(([], obj)) => {
            let n = obj
                .as_u64()
                .map_err(|_| format!("extension {oid}: INTEGER out of range"))?;
            u8::try_from(n).map_err(|_| format!("extension {oid}: SPL {n} does not fit a byte"))
        }
        _ => Err(format!(
            "extension {oid}: expected a DER INTEGER, got {}",
            hex::encode(v)
        )),
    }
}

/// A string extension (IA5String, UTF8String or PrintableString).
fn der_string(v: &[u8], oid: &str) -> Result<String, String> {
    match x509_parser::der_parser::der::parse_der(v) {
        Ok(([], obj)) => obj.as_str().map(str::to_string).map_err(|_| {
            format!(
                "extension {oid}: expected a string, got tag {}",
                obj.header.tag()
            )
        }),
        _ => Err(format!("extension {oid}: not DER")),
    }
}

/// What a VCEK or VLEK says about itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LeafInfo {
    /// Which endorsement key this is (from the subject CN).
    pub kind: SigningKey,
    /// Subject common name (`SEV-VCEK` or `SEV-VLEK`).
    pub subject_cn: String,
    /// Issuer common name (`SEV-Milan`, `SEV-VLEK-Genoa`, ...).
    pub issuer_cn: String,
    /// Serial number, hex.
    pub serial: String,
    /// Start of validity, Unix seconds.
    pub not_before: i64,
    /// End of validity, Unix seconds.
    pub not_after: i64,
    /// KDS extensions.
    pub extensions: KdsExtensions,
}

impl LeafInfo {
    /// Reads the leaf facts from a parsed certificate.
    pub fn from_cert(cert: &X509Certificate<'_>) -> Result<LeafInfo, CertError> {
        let subject_cn = common_name(cert.subject()).unwrap_or_default();
        let kind = match subject_cn.as_str() {
            "SEV-VLEK" => SigningKey::Vlek,
            _ => SigningKey::Vcek,
        };
        Ok(LeafInfo {
            kind,
            subject_cn,
            issuer_cn: common_name(cert.issuer()).unwrap_or_default(),
            serial: format!("0x{:x}", cert.serial),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            extensions: KdsExtensions::from_cert(cert).map_err(CertError::Extension)?,
        })
    }

    /// Whether the issuer CN and the productName extension name the same product (where both are present), and
    /// a productName present names a known product.
    pub(crate) fn product_consistent(&self) -> Result<(), String> {
        let Some(name) = self.extensions.product_name.as_deref() else {
            return Ok(());
        };
        match (
            Product::from_name(&self.issuer_cn),
            Product::from_name(name),
        ) {
            (_, None) => Err(format!(
                "VCEK/VLEK productName {name:?} names no known product (Milan, Genoa, Turin)"
            )),
            (Some(i), Some(p)) if i != p => Err(format!(
                "VCEK/VLEK productName {name:?} names {p}, its issuer CN={} names {i}",
                self.issuer_cn
            )),
            _ => Ok(()),
        }
    }

    /// The product the certificate names: its issuer CN, else its productName.
    pub fn product(&self) -> Option<Product> {
        Product::from_name(&self.issuer_cn).or_else(|| {
            self.extensions
                .product_name
                .as_deref()
                .and_then(Product::from_name)
        })
    }
}
