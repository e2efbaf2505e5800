//! AMD's Key Distribution Service: the product's `cert_chain` (ASK + ARK), the VCEK for a report's chip ID and
//! REPORTED_TCB (Turin: the first 8 bytes of CHIP_ID as hwID, and fmcSPL), and the product's CRL. Every answer
//! is verified (ARK pinned, RSASSA-PSS signatures, the VCEK's SPLs and hwID equal to the report's) before it
//! is cached or returned. A VLEK cannot be fetched: KDS issues it to the cloud provider, not to the public.

use super::cache::{Cache, Entry, Origin};
use super::http::Client;
use super::FetchError;
use crate::snp::certs::{parse_cert, CertBundle};
use crate::snp::chain::{self, pinned_product, spki_sha256, verify_pss_signature};
use crate::snp::ChainOptions;
use attestation::snp::{AttestationReport, Product, SigningKey};
use x509_parser::prelude::*;

/// AMD's documented KDS base URL (the default of `--kds-url`).
pub const DEFAULT_KDS_URL: &str = "https://kdsintf.amd.com";

/// `{base}/vcek/v1/{product}/cert_chain`.
pub fn cert_chain_url(base: &str, product: Product) -> String {
    format!(
        "{}/vcek/v1/{}/cert_chain",
        base.trim_end_matches('/'),
        product.name()
    )
}

/// `{base}/vcek/v1/{product}/crl`.
pub fn crl_url(base: &str, product: Product) -> String {
    format!(
        "{}/vcek/v1/{}/crl",
        base.trim_end_matches('/'),
        product.name()
    )
}

/// The VCEK URL of a report: hwID in lowercase hex (64 bytes; Turin: the first 8, the rest must be zero) and
/// the REPORTED_TCB components in decimal (`fmcSPL` first on Turin, as AMD's tools send it).
pub fn vcek_url(
    base: &str,
    product: Product,
    report: &AttestationReport,
) -> Result<String, FetchError> {
    if report.key_info.signing_key == SigningKey::Vlek {
        return Err(vlek_error());
    }
    if report.key_info.mask_chip_key || report.chip_id.iter().all(|b| *b == 0) {
        return Err(FetchError::Input(
            "the report's CHIP_ID is masked (all zero): KDS cannot name its VCEK; give the VCEK with --certs".into(),
        ));
    }
    let t = report.reported_tcb.decode(product);
    let base = base.trim_end_matches('/');
    Ok(if product == Product::Turin {
        if report.chip_id[8..].iter().any(|b| *b != 0) {
            return Err(FetchError::Input(format!(
                "a Turin CHIP_ID has 8 significant bytes, this one has nonzero bytes after them ({})",
                hex::encode(report.chip_id)
            )));
        }
        format!(
            "{base}/vcek/v1/Turin/{}?fmcSPL={:02}&blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
            hex::encode(&report.chip_id[..8]),
            t.fmc.unwrap_or(0),
            t.bootloader,
            t.tee,
            t.snp,
            t.microcode
        )
    } else {
        format!(
            "{base}/vcek/v1/{}/{}?blSPL={:02}&teeSPL={:02}&snpSPL={:02}&ucodeSPL={:02}",
            product.name(),
            hex::encode(report.chip_id),
            t.bootloader,
            t.tee,
            t.snp,
            t.microcode
        )
    })
}

/// The refusal for a VLEK-signed report.
pub fn vlek_error() -> FetchError {
    FetchError::Input(
        "the report is signed by a VLEK: KDS issues VLEKs only to the cloud provider (the request needs the \
         provider's secret), so it cannot be fetched; take the VLEK from the provider or the evidence (--certs)"
            .into(),
    )
}

/// The product of a report: from CPUID (v3+), else `given`; neither is an input error.
pub fn product_of(
    report: &AttestationReport,
    given: Option<Product>,
) -> Result<Product, FetchError> {
    match (report.product_from_cpuid(), given) {
        (Some(c), Some(g)) if c != g => Err(FetchError::Input(format!(
            "the report's CPUID names {c}, --product says {g}"
        ))),
        (Some(c), _) => Ok(c),
        (None, Some(g)) => Ok(g),
        (None, None) => Err(FetchError::Input(
            "the report (version 2) does not name its product: give --product milan|genoa|turin"
                .into(),
        )),
    }
}

/// What KDS gave for one report, verified.
#[derive(Debug, Clone)]
pub struct SnpFetched {
    /// The product.
    pub product: Product,
    /// ARK, DER.
    pub ark: Vec<u8>,
    /// ASK, DER.
    pub ask: Vec<u8>,
    /// VCEK, DER.
    pub vcek: Vec<u8>,
    /// The product's CRL (DER), when asked for.
    pub crl: Option<Vec<u8>>,
    /// Where each part came from: (what, URL, cache or fetched).
    pub origins: Vec<(String, String, Origin)>,
}

impl SnpFetched {
    /// The three certificates as the verifier takes them.
    pub fn bundle(&self) -> CertBundle {
        CertBundle {
            ark: self.ark.clone(),
            intermediate: self.ask.clone(),
            leaf: self.vcek.clone(),
        }
    }
}

fn rejected(url: &str, what: &str, detail: impl Into<String>) -> FetchError {
    FetchError::Rejected {
        url: url.into(),
        what: what.into(),
        detail: detail.into(),
    }
}

fn not_after(der: &[u8]) -> i64 {
    X509Certificate::from_der(der)
        .map(|(_, c)| c.validity().not_after.timestamp())
        .unwrap_or(0)
}

/// Verifies a `cert_chain` answer (PEM, ASK then ARK): two certificates, the ARK is the pinned root of
/// `product`, self-signed, and signed the ASK. Returns (ASK, ARK) DER.
pub fn verify_cert_chain(
    url: &str,
    body: &[u8],
    product: Product,
    now: i64,
) -> Result<(Vec<u8>, Vec<u8>), FetchError> {
    let ders = crate::snp::certs::ders_from_file_bytes(body, "cert_chain")
        .map_err(|e| rejected(url, "cert_chain", e.to_string()))?;
    let [ask, ark]: [Vec<u8>; 2] = ders.try_into().map_err(|v: Vec<Vec<u8>>| {
        rejected(
            url,
            "cert_chain",
            format!("{} certificates, expected 2 (ASK then ARK)", v.len()),
        )
    })?;
    let ark_c = parse_cert(&ark, "ARK").map_err(|e| rejected(url, "cert_chain", e))?;
    let ask_c = parse_cert(&ask, "ASK").map_err(|e| rejected(url, "cert_chain", e))?;
    match pinned_product(&spki_sha256(&ark_c)) {
        Some(p) if p == product => {}
        Some(p) => {
            return Err(rejected(
                url,
                "cert_chain",
                format!("the ARK is AMD's {p} root, {product} was asked for"),
            ))
        }
        None => {
            return Err(rejected(
                url,
                "cert_chain",
                format!(
                    "the ARK (key sha256 {}) is not AMD's pinned {product} root",
                    spki_sha256(&ark_c)
                ),
            ))
        }
    }
    verify_pss_signature(&ark_c, &ark_c)
        .map_err(|e| rejected(url, "cert_chain", format!("ARK self-signature: {e}")))?;
    verify_pss_signature(&ask_c, &ark_c)
        .map_err(|e| rejected(url, "cert_chain", format!("ASK not signed by the ARK: {e}")))?;
    for (c, what) in [(&ark_c, "ARK"), (&ask_c, "ASK")] {
        let v = c.validity();
        if now < v.not_before.timestamp() || now > v.not_after.timestamp() {
            return Err(rejected(
                url,
                "cert_chain",
                format!(
                    "the {what} is valid from {} to {}, not at {}",
                    super::cache::rfc3339(v.not_before.timestamp()),
                    super::cache::rfc3339(v.not_after.timestamp()),
                    super::cache::rfc3339(now)
                ),
            ));
        }
    }
    Ok((ask, ark))
}

/// The KDS side of collateral fetching.
#[derive(Debug)]
pub struct Kds<'a> {
    /// The HTTP client.
    pub http: &'a Client,
    /// Base URL.
    pub base: String,
    /// The cache, if any.
    pub cache: Option<&'a Cache>,
}

impl Kds<'_> {
    fn cached(
        &self,
        key: &str,
        now: i64,
        fetch: impl FnOnce() -> Result<Entry, FetchError>,
    ) -> Result<(Entry, Origin), FetchError> {
        match self.cache {
            Some(c) => c.get_or_fetch(key, now, fetch),
            None => fetch().map(|e| (e, Origin::Fetched)),
        }
    }

    /// The product's ASK and ARK, verified.
    pub fn cert_chain(
        &self,
        product: Product,
        now: i64,
    ) -> Result<(Vec<u8>, Vec<u8>, Origin, String), FetchError> {
        let url = cert_chain_url(&self.base, product);
        let key = format!("kds/{}/cert_chain", product.name());
        let (e, origin) = self.cached(&key, now, || {
            let r = self.http.get(&url)?;
            let (ask, ark) = verify_cert_chain(&url, &r.body, product, now)?;
            let expires = not_after(&ask).min(not_after(&ark));
            Ok(Entry::new(&key, now, expires, vec![url.clone()])
                .with("ask", &ask)
                .with("ark", &ark))
        })?;
        let (Some(ask), Some(ark)) = (e.part("ask"), e.part("ark")) else {
            return Err(FetchError::Input(format!(
                "cache entry {key} lacks ask/ark"
            )));
        };
        Ok((ask, ark, origin, url))
    }

    /// The VCEK of `report`, verified against `ask`/`ark` and the report (signature, SPLs, hwID).
    pub fn vcek(
        &self,
        product: Product,
        report: &AttestationReport,
        ask: &[u8],
        ark: &[u8],
        now: i64,
    ) -> Result<(Vec<u8>, Origin, String), FetchError> {
        let url = vcek_url(&self.base, product, report)?;
        let hwid = if product == Product::Turin {
            hex::encode(&report.chip_id[..8])
        } else {
            hex::encode(report.chip_id)
        };
        let key = format!(
            "kds/{}/vcek/{hwid}-{:016x}",
            product.name(),
            report.reported_tcb.0
        );
        let (e, origin) = self.cached(&key, now, || {
            let r = self.http.get(&url)?;
            let vcek = crate::snp::certs::ders_from_file_bytes(&r.body, "VCEK")
                .map_err(|e| rejected(&url, "VCEK", e.to_string()))?
                .into_iter()
                .next()
                .ok_or_else(|| rejected(&url, "VCEK", "empty body"))?;
            check_vcek(&url, product, report, ask, ark, &vcek, now)?;
            Ok(Entry::new(&key, now, not_after(&vcek), vec![url.clone()]).with("vcek", &vcek))
        })?;
        let vcek = e
            .part("vcek")
            .ok_or_else(|| FetchError::Input(format!("cache entry {key} lacks the VCEK")))?;
        Ok((vcek, origin, url))
    }

    /// The product's CRL, verified (signed by the pinned ARK, current at `now`); cached until its nextUpdate.
    pub fn crl(
        &self,
        product: Product,
        ask: &[u8],
        ark: &[u8],
        now: i64,
    ) -> Result<(Vec<u8>, Origin, String), FetchError> {
        let url = crl_url(&self.base, product);
        let key = format!("kds/{}/crl", product.name());
        let (e, origin) = self.cached(&key, now, || {
            let r = self.http.get(&url)?;
            let next = check_crl(&url, &r.body, ask, ark, now)?;
            Ok(Entry::new(&key, now, next, vec![url.clone()]).with("crl", &r.body))
        })?;
        let crl = e
            .part("crl")
            .ok_or_else(|| FetchError::Input(format!("cache entry {key} lacks the CRL")))?;
        Ok((crl, origin, url))
    }

    /// Everything a VCEK-signed report needs: cert_chain, VCEK, and the CRL when `with_crl`.
    pub fn for_report(
        &self,
        report: &AttestationReport,
        product: Option<Product>,
        with_crl: bool,
        now: i64,
    ) -> Result<SnpFetched, FetchError> {
        if report.key_info.signing_key == SigningKey::Vlek {
            return Err(vlek_error());
        }
        let product = product_of(report, product)?;
        let (ask, ark, o1, u1) = self.cert_chain(product, now)?;
        let (vcek, o2, u2) = self.vcek(product, report, &ask, &ark, now)?;
        let mut origins = vec![("cert_chain".into(), u1, o1), ("vcek".into(), u2, o2)];
        let crl = if with_crl {
            let (crl, o3, u3) = self.crl(product, &ask, &ark, now)?;
            origins.push(("crl".into(), u3, o3));
            Some(crl)
        } else {
            None
        };
        Ok(SnpFetched {
            product,
            ark,
            ask,
            vcek,
            crl,
            origins,
        })
    }
}

/// Checks a fetched VCEK: the chain (ARK pinned, PSS signatures, validity at `now`) and the report's own
/// authenticity with it (signature, SPLs equal REPORTED_TCB, hwID equal CHIP_ID).
pub fn check_vcek(
    url: &str,
    product: Product,
    report: &AttestationReport,
    ask: &[u8],
    ark: &[u8],
    vcek: &[u8],
    now: i64,
) -> Result<(), FetchError> {
    let bundle = CertBundle {
        ark: ark.to_vec(),
        intermediate: ask.to_vec(),
        leaf: vcek.to_vec(),
    };
    let opts = ChainOptions {
        at: ::time::OffsetDateTime::from_unix_timestamp(now)
            .map_err(|e| FetchError::Input(format!("time {now}: {e}")))?,
        crl: None,
        allow_simulated: false,
    };
    let outcome = chain::verify_chain(&bundle, &opts, Some(product));
    let (_, auth) = chain::verify_report_against_chain(report, &outcome);
    let all: Vec<String> = outcome
        .failures
        .iter()
        .chain(auth.iter())
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect();
    if all.is_empty() {
        Ok(())
    } else {
        Err(rejected(url, "VCEK", all.join("; ")))
    }
}

/// Checks a fetched CRL against the product's chain (issued and signed by the ARK, current at `now`; see
/// [`chain::check_crls`]); returns its nextUpdate (unix seconds).
pub fn check_crl(
    url: &str,
    body: &[u8],
    ask: &[u8],
    ark: &[u8],
    now: i64,
) -> Result<i64, FetchError> {
    let ark_c = parse_cert(ark, "ARK").map_err(|e| rejected(url, "CRL", e))?;
    let ask_c = parse_cert(ask, "ASK").map_err(|e| rejected(url, "CRL", e))?;
    let failures = chain::check_crls(body, &ark_c, &ask_c, None, now);
    if !failures.is_empty() {
        return Err(rejected(
            url,
            "CRL",
            failures
                .iter()
                .map(|f| format!("{}: {}", f.check, f.detail))
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    let der = crate::pki::crls_from_file_bytes(body)
        .ok()
        .and_then(|v| v.into_iter().next())
        .unwrap_or_default();
    let next = x509_parser::revocation_list::CertificateRevocationList::from_der(&der)
        .ok()
        .and_then(|(_, c)| c.next_update().map(|t| t.timestamp()));
    next.ok_or_else(|| rejected(url, "CRL", "no nextUpdate: it could never be judged stale"))
}
