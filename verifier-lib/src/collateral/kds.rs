//! AMD's Key Distribution Service: the product's `cert_chain` (ASK + ARK, or ASVK + ARK under `/vlek/v1`), the
//! VCEK for a report's chip ID and REPORTED_TCB (Turin: the first 8 bytes of CHIP_ID as hwID, and fmcSPL), and
//! the product's CRL (VCEK and VLEK side). Every answer is verified (ARK pinned, RSASSA-PSS signatures, the
//! VCEK's SPLs and hwID equal to the report's) before it is cached or returned. A VLEK itself cannot be
//! fetched: KDS issues it to the cloud provider only, so the founder must get it from the host or provider.

use super::cache::{Cache, Entry, Origin};
use super::error::FetchError;
use super::http::Client;
// Defined below FetchError (which carries a partial fetch); named here as before.
pub use super::error::{SnpFetched, VLEK_ADVICE};
use crate::snp::certs::{parse_cert, CertBundle};
use crate::snp::chain::{self, pinned_product, spki_sha256, verify_pss_signature};
use crate::snp::ChainOptions;
use attestation::snp::{AttestationReport, Product, SigningKey};
use x509_parser::prelude::*;

/// AMD's documented KDS base URL (the default of `--kds-url`).
pub const DEFAULT_KDS_URL: &str = "https://kdsintf.amd.com";

/// Which endorsement key a KDS path serves: `/vcek/v1` (chip keys, ASK) or `/vlek/v1` (cloud provider keys,
/// ASVK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endorsement {
    /// Versioned Chip Endorsement Key: ASK + ARK.
    Vcek,
    /// Versioned Loaded Endorsement Key: ASVK + ARK.
    Vlek,
}

impl Endorsement {
    /// The endorsement of a report's KEY_INFO.SIGNING_KEY (`None` for "no key").
    pub fn of(key: SigningKey) -> Option<Endorsement> {
        match key {
            SigningKey::Vcek => Some(Endorsement::Vcek),
            SigningKey::Vlek => Some(Endorsement::Vlek),
            _ => None,
        }
    }

    /// The KDS path segment, `vcek` or `vlek`.
    pub fn path(self) -> &'static str {
        match self {
            Endorsement::Vcek => "vcek",
            Endorsement::Vlek => "vlek",
        }
    }

    /// The intermediate's name, `ASK` or `ASVK`.
    pub fn intermediate(self) -> &'static str {
        match self {
            Endorsement::Vcek => "ASK",
            Endorsement::Vlek => "ASVK",
        }
    }

    /// The leaf's name, `VCEK` or `VLEK`.
    pub fn leaf(self) -> &'static str {
        match self {
            Endorsement::Vcek => "VCEK",
            Endorsement::Vlek => "VLEK",
        }
    }
}

/// `{base}/vcek/v1/{product}/cert_chain`.
#[cfg(any(test, feature = "internals"))]
pub fn cert_chain_url(base: &str, product: Product) -> String {
    chain_url(base, product, Endorsement::Vcek)
}

/// `{base}/vcek/v1/{product}/crl`.
#[cfg(any(test, feature = "internals"))]
pub fn crl_url(base: &str, product: Product) -> String {
    crl_url_for(base, product, Endorsement::Vcek)
}

/// `{base}/{vcek|vlek}/v1/{product}/cert_chain`: ASK + ARK, or ASVK + ARK.
pub fn chain_url(base: &str, product: Product, e: Endorsement) -> String {
    format!(
        "{}/{}/v1/{}/cert_chain",
        base.trim_end_matches('/'),
        e.path(),
        product.name()
    )
}

/// `{base}/{vcek|vlek}/v1/{product}/crl`: the ARK's CRL of the ASK, or of the ASVK.
pub fn crl_url_for(base: &str, product: Product, e: Endorsement) -> String {
    format!(
        "{}/{}/v1/{}/crl",
        base.trim_end_matches('/'),
        e.path(),
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

/// The refusal for a VLEK-signed report when no VLEK was given (the ASVK chain is fetchable, the VLEK not).
pub fn vlek_error() -> FetchError {
    FetchError::Input(VLEK_ADVICE.into())
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
#[cfg(any(test, feature = "internals"))]
pub fn verify_cert_chain(
    url: &str,
    body: &[u8],
    product: Product,
    now: i64,
) -> Result<(Vec<u8>, Vec<u8>), FetchError> {
    verify_chain_answer(url, body, product, Endorsement::Vcek, false, now)
}

/// Verifies a `cert_chain` answer of the VCEK (ASK + ARK) or VLEK (ASVK + ARK) side: two certificates, the ARK
/// is AMD's pinned root of `product` (or, with `allow_simulated`, any self-signed root named `ARK-{product}`),
/// self-signed, and signed the intermediate; both valid at `now`. Returns (intermediate, ARK) DER.
pub fn verify_chain_answer(
    url: &str,
    body: &[u8],
    product: Product,
    e: Endorsement,
    allow_simulated: bool,
    now: i64,
) -> Result<(Vec<u8>, Vec<u8>), FetchError> {
    let inter = e.intermediate();
    let what = format!("{} cert_chain", e.path());
    let ders = crate::snp::certs::ders_from_file_bytes(body, "cert_chain")
        .map_err(|err| rejected(url, &what, err.to_string()))?;
    let [ask, ark]: [Vec<u8>; 2] = ders.try_into().map_err(|v: Vec<Vec<u8>>| {
        rejected(
            url,
            &what,
            format!("{} certificates, expected 2 ({inter} then ARK)", v.len()),
        )
    })?;
    let ark_c = parse_cert(&ark, "ARK").map_err(|err| rejected(url, &what, err.to_string()))?;
    let ask_c = parse_cert(&ask, inter).map_err(|err| rejected(url, &what, err.to_string()))?;
    match pinned_product(&spki_sha256(&ark_c)) {
        Some(p) if p == product => {}
        Some(p) => {
            return Err(rejected(
                url,
                &what,
                format!("the ARK is AMD's {p} root, {product} was asked for"),
            ))
        }
        None if allow_simulated => {
            let cn = crate::snp::certs::common_name(ark_c.subject()).unwrap_or_default();
            if cn != format!("ARK-{}", product.name()) {
                return Err(rejected(
                    url,
                    &what,
                    format!(
                        "the simulated ARK is named CN={cn}, not ARK-{}",
                        product.name()
                    ),
                ));
            }
        }
        None => {
            return Err(rejected(
                url,
                &what,
                format!(
                    "the ARK (key sha256 {}) is not AMD's pinned {product} root",
                    spki_sha256(&ark_c)
                ),
            ))
        }
    }
    verify_pss_signature(&ark_c, &ark_c)
        .map_err(|err| rejected(url, &what, format!("ARK self-signature: {err}")))?;
    verify_pss_signature(&ask_c, &ark_c)
        .map_err(|err| rejected(url, &what, format!("{inter} not signed by the ARK: {err}")))?;
    for (c, name) in [(&ark_c, "ARK"), (&ask_c, inter)] {
        let v = c.validity();
        if now < v.not_before.timestamp() || now > v.not_after.timestamp() {
            return Err(rejected(
                url,
                &what,
                format!(
                    "the {name} is valid from {} to {}, not at {}",
                    super::cache::rfc3339(v.not_before.timestamp()),
                    super::cache::rfc3339(v.not_after.timestamp()),
                    super::cache::rfc3339(now)
                ),
            ));
        }
    }
    Ok((ask, ark))
}

/// The URL that served an entry's bytes (after redirects), as recorded when it was fetched; `asked` for an
/// entry that records none.
fn served_url(e: &Entry, asked: String) -> String {
    e.sources.first().cloned().unwrap_or(asked)
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
    /// Accept a root that is not AMD's pinned ARK (the sim chain of tests and `--allow-simulated`). Such
    /// answers are cached under `kds-sim/`, apart from real ones, so they never serve a verification that
    /// does not allow simulated roots.
    pub allow_simulated: bool,
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

    fn prefix(&self) -> &'static str {
        if self.allow_simulated {
            "kds-sim"
        } else {
            "kds"
        }
    }

    /// The cache key of a product's chain (`kds/{product}/cert_chain`, VLEK side `.../vlek_cert_chain`).
    pub fn chain_key(&self, product: Product, e: Endorsement) -> String {
        match e {
            Endorsement::Vcek => format!("{}/{}/cert_chain", self.prefix(), product.name()),
            Endorsement::Vlek => format!("{}/{}/vlek_cert_chain", self.prefix(), product.name()),
        }
    }

    /// The cache key of a product's CRL (`kds/{product}/crl`, VLEK side `.../vlek_crl`).
    pub fn crl_key(&self, product: Product, e: Endorsement) -> String {
        match e {
            Endorsement::Vcek => format!("{}/{}/crl", self.prefix(), product.name()),
            Endorsement::Vlek => format!("{}/{}/vlek_crl", self.prefix(), product.name()),
        }
    }

    /// The cache key of a report's VCEK (`kds/{product}/vcek/{hwid}-{REPORTED_TCB hex}`).
    pub fn vcek_key(&self, product: Product, report: &AttestationReport) -> String {
        let hwid = if product == Product::Turin {
            hex::encode(&report.chip_id[..8])
        } else {
            hex::encode(report.chip_id)
        };
        format!(
            "{}/{}/vcek/{hwid}-{:016x}",
            self.prefix(),
            product.name(),
            report.reported_tcb.0
        )
    }

    /// The product's ASK and ARK, verified.
    pub fn cert_chain(
        &self,
        product: Product,
        now: i64,
    ) -> Result<(Vec<u8>, Vec<u8>, Origin, String), FetchError> {
        self.chain(product, Endorsement::Vcek, now)
    }

    /// The product's ASK + ARK (VCEK side) or ASVK + ARK (VLEK side), verified; cached until the earlier
    /// certificate expiry. Returns (intermediate, ARK, origin, URL).
    pub fn chain(
        &self,
        product: Product,
        e: Endorsement,
        now: i64,
    ) -> Result<(Vec<u8>, Vec<u8>, Origin, String), FetchError> {
        let url = chain_url(&self.base, product, e);
        let key = self.chain_key(product, e);
        let (entry, origin) = self.cached(&key, now, || {
            let r = self.http.get(&url)?;
            let (ask, ark) =
                verify_chain_answer(&url, &r.body, product, e, self.allow_simulated, now)?;
            let expires = not_after(&ask).min(not_after(&ark));
            Ok(Entry::new(&key, now, expires, vec![r.url.clone()])
                .with("ask", &ask)
                .with("ark", &ark))
        })?;
        let (Some(ask), Some(ark)) = (entry.part("ask"), entry.part("ark")) else {
            return Err(FetchError::Input(format!(
                "cache entry {key} lacks ask/ark"
            )));
        };
        Ok((ask, ark, origin, served_url(&entry, url)))
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
        let key = self.vcek_key(product, report);
        let sim = self.allow_simulated;
        let (e, origin) = self.cached(&key, now, || {
            let r = self.http.get(&url)?;
            let vcek = crate::snp::certs::ders_from_file_bytes(&r.body, "VCEK")
                .map_err(|e| rejected(&url, "VCEK", e.to_string()))?
                .into_iter()
                .next()
                .ok_or_else(|| rejected(&url, "VCEK", "empty body"))?;
            check_leaf(&url, product, report, ask, ark, &vcek, sim, now)?;
            Ok(Entry::new(&key, now, not_after(&vcek), vec![r.url.clone()]).with("vcek", &vcek))
        })?;
        let vcek = e
            .part("vcek")
            .ok_or_else(|| FetchError::Input(format!("cache entry {key} lacks the VCEK")))?;
        Ok((vcek, origin, served_url(&e, url)))
    }

    /// The product's CRL, verified (signed by the pinned ARK, current at `now`); cached until its nextUpdate.
    pub fn crl(
        &self,
        product: Product,
        ask: &[u8],
        ark: &[u8],
        now: i64,
    ) -> Result<(Vec<u8>, Origin, String), FetchError> {
        self.crl_for(product, Endorsement::Vcek, ask, ark, now)
    }

    /// The product's CRL of the VCEK side (`/vcek/v1/{product}/crl`) or VLEK side (`/vlek/v1/.../crl`),
    /// verified against `inter`/`ark` (issued and signed by the ARK, current at `now`); cached until its
    /// nextUpdate and never served after it (a stale entry is fetched again).
    pub fn crl_for(
        &self,
        product: Product,
        e: Endorsement,
        inter: &[u8],
        ark: &[u8],
        now: i64,
    ) -> Result<(Vec<u8>, Origin, String), FetchError> {
        let url = crl_url_for(&self.base, product, e);
        let key = self.crl_key(product, e);
        let (entry, origin) = self.cached(&key, now, || {
            let r = self.http.get(&url)?;
            let next = check_crl(&url, &r.body, inter, ark, now)?;
            Ok(Entry::new(&key, now, next, vec![r.url.clone()]).with("crl", &r.body))
        })?;
        let crl = entry
            .part("crl")
            .ok_or_else(|| FetchError::Input(format!("cache entry {key} lacks the CRL")))?;
        Ok((crl, origin, served_url(&entry, url)))
    }

    /// Everything a VCEK-signed report needs: cert_chain, VCEK, and the CRL when `with_crl`. For a
    /// VLEK-signed report: the ASVK chain and VLEK CRL are fetched, then [`FetchError::VlekNotFetchable`]
    /// carries them (the VLEK itself is the cloud provider's; see [`Kds::for_vlek_report`]).
    pub fn for_report(
        &self,
        report: &AttestationReport,
        product: Option<Product>,
        with_crl: bool,
        now: i64,
    ) -> Result<SnpFetched, FetchError> {
        if report.key_info.signing_key == SigningKey::Vlek {
            return self.for_vlek_report(report, product, with_crl, None, now);
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

    /// A VLEK-signed report: the ASVK + ARK chain from `/vlek/v1/{product}/cert_chain` and (when `with_crl`)
    /// the VLEK side's CRL, verified and cached like the VCEK side. The VLEK cannot be fetched: with `vlek`
    /// (a certificate the founder got from the host or provider, DER or PEM) it is checked against the ASVK
    /// and the report and the whole set is returned; without it the error
    /// [`FetchError::VlekNotFetchable`] carries what was fetched and says what is missing.
    pub fn for_vlek_report(
        &self,
        report: &AttestationReport,
        product: Option<Product>,
        with_crl: bool,
        vlek: Option<&[u8]>,
        now: i64,
    ) -> Result<SnpFetched, FetchError> {
        if report.key_info.signing_key != SigningKey::Vlek {
            return Err(FetchError::Input(
                "a VLEK was given but the report's KEY_INFO.SIGNING_KEY is not VLEK".into(),
            ));
        }
        let product = product_of(report, product)?;
        let (asvk, ark, o1, u1) = self.chain(product, Endorsement::Vlek, now)?;
        let mut origins = vec![("vlek cert_chain".to_string(), u1, o1)];
        let crl = if with_crl {
            let (crl, o2, u2) = self.crl_for(product, Endorsement::Vlek, &asvk, &ark, now)?;
            origins.push(("vlek crl".into(), u2, o2));
            Some(crl)
        } else {
            None
        };
        let mut got = SnpFetched {
            product,
            ark,
            ask: asvk,
            vcek: Vec::new(),
            crl,
            origins,
        };
        let Some(given) = vlek else {
            return Err(FetchError::VlekNotFetchable {
                partial: Box::new(got),
            });
        };
        let what = "the given VLEK";
        let leaf = crate::snp::certs::ders_from_file_bytes(given, "VLEK")
            .map_err(|e| FetchError::Input(format!("{what}: {e}")))?
            .into_iter()
            .next()
            .ok_or_else(|| FetchError::Input(format!("{what}: no certificate")))?;
        check_leaf(
            what,
            product,
            report,
            &got.ask,
            &got.ark,
            &leaf,
            self.allow_simulated,
            now,
        )?;
        got.vcek = leaf;
        got.origins
            .push(("vlek".into(), "given (--vlek)".into(), Origin::Fetched));
        Ok(got)
    }

    /// The parts of `report`'s collateral from the cache alone (a verify command without `--online`):
    /// missing and stale entries are named failures ([`super::cache::CacheError`]).
    pub fn from_cache_offline(
        &self,
        report: &AttestationReport,
        product: Option<Product>,
        with_crl: bool,
        now: i64,
    ) -> Result<SnpFetched, FetchError> {
        let cache = self.cache.ok_or_else(|| {
            FetchError::Input("--no-cache without --online leaves no collateral source".into())
        })?;
        let product = product_of(report, product)?;
        if report.key_info.signing_key == SigningKey::Vlek {
            return Err(vlek_error());
        }
        let chain = cache.get_offline(&self.chain_key(product, Endorsement::Vcek), now)?;
        let vcek = cache.get_offline(&self.vcek_key(product, report), now)?;
        let crl = if with_crl {
            Some(cache.get_offline(&self.crl_key(product, Endorsement::Vcek), now)?)
        } else {
            None
        };
        let part = |e: &Entry, n: &str| {
            e.part(n)
                .ok_or_else(|| FetchError::Input(format!("cache entry {} lacks {n}", e.key)))
        };
        // Where each entry's bytes were served from when they were fetched (after redirects).
        let mut origins = vec![
            (
                "cert_chain".to_string(),
                served_url(&chain, chain.key.clone()),
                Origin::Cache,
            ),
            (
                "vcek".to_string(),
                served_url(&vcek, vcek.key.clone()),
                Origin::Cache,
            ),
        ];
        if let Some(c) = &crl {
            origins.push(("crl".into(), served_url(c, c.key.clone()), Origin::Cache));
        }
        Ok(SnpFetched {
            product,
            ark: part(&chain, "ark")?,
            ask: part(&chain, "ask")?,
            vcek: part(&vcek, "vcek")?,
            crl: crl.as_ref().map(|c| part(c, "crl")).transpose()?,
            origins,
        })
    }
}

/// Checks a fetched VCEK: the chain (ARK pinned, PSS signatures, validity at `now`) and the report's own
/// authenticity with it (signature, SPLs equal REPORTED_TCB, hwID equal CHIP_ID).
#[cfg(any(test, feature = "internals"))]
pub fn check_vcek(
    url: &str,
    product: Product,
    report: &AttestationReport,
    ask: &[u8],
    ark: &[u8],
    vcek: &[u8],
    now: i64,
) -> Result<(), FetchError> {
    check_leaf(url, product, report, ask, ark, vcek, false, now)
}

/// [`check_vcek`] for a VCEK or VLEK leaf, with or without simulated roots allowed.
#[allow(clippy::too_many_arguments)]
pub fn check_leaf(
    url: &str,
    product: Product,
    report: &AttestationReport,
    ask: &[u8],
    ark: &[u8],
    leaf: &[u8],
    allow_simulated: bool,
    now: i64,
) -> Result<(), FetchError> {
    let bundle = CertBundle {
        ark: ark.to_vec(),
        intermediate: ask.to_vec(),
        leaf: leaf.to_vec(),
    };
    let opts = ChainOptions {
        at: ::time::OffsetDateTime::from_unix_timestamp(now)
            .map_err(|e| FetchError::Input(format!("time {now}: {e}")))?,
        crl: None,
        allow_simulated,
    };
    let outcome = chain::verify_chain(&bundle, &opts, Some(product));
    let (_, auth) = chain::verify_report_against_chain(report, &outcome);
    let all: Vec<String> = outcome
        .failures
        .iter()
        .chain(auth.iter())
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect();
    let what = if report.key_info.signing_key == SigningKey::Vlek {
        "VLEK"
    } else {
        "VCEK"
    };
    if all.is_empty() {
        Ok(())
    } else {
        Err(rejected(url, what, all.join("; ")))
    }
}

/// Checks a fetched CRL against the product's chain (issued and signed by the ARK, current at `now`; see
/// [`chain::check_crls`]); returns its nextUpdate (unix seconds). A genuine CRL that revokes the ASK/ASVK is
/// accepted here (it is cached like any other): the verification that uses it then rejects the report, naming
/// the revocation, rather than the fetch calling the CRL unusable.
pub fn check_crl(
    url: &str,
    body: &[u8],
    ask: &[u8],
    ark: &[u8],
    now: i64,
) -> Result<i64, FetchError> {
    use x509_parser::revocation_list::CertificateRevocationList;
    let ark_c = parse_cert(ark, "ARK").map_err(|e| rejected(url, "CRL", e.to_string()))?;
    let ask_c = parse_cert(ask, "ASK").map_err(|e| rejected(url, "CRL", e.to_string()))?;
    let ders =
        crate::pki::crls_from_file_bytes(body).map_err(|e| rejected(url, "CRL", e.to_string()))?;
    let revokes_inter = ders.iter().any(|d| {
        CertificateRevocationList::from_der(d)
            .ok()
            .is_some_and(|(_, c)| crate::pki::crl_revokes(&c, &ask_c).is_some())
    });
    let failures: Vec<_> = chain::check_crls(body, &ark_c, &ask_c, None, now)
        .into_iter()
        .filter(|f| !(revokes_inter && f.detail.contains(" is revoked since ")))
        .collect();
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
    let next = ders
        .iter()
        .filter_map(|d| {
            CertificateRevocationList::from_der(d)
                .ok()
                .and_then(|(_, c)| c.next_update().map(|t| t.timestamp()))
        })
        .min();
    next.ok_or_else(|| rejected(url, "CRL", "no nextUpdate: it could never be judged stale"))
}
