//! Intel's Provisioning Certification Service (API v4, and any PCCS serving the same API): TCB Info for an
//! FMSPC (TDX and SGX), the TD QE Identity, the PCK CRL of a CA (processor or platform) and the root CA CRL,
//! with the issuer chains PCS sends in response headers (URL-encoded PEM). Every part is verified before it
//! is cached or converted: the chain ends in the pinned Intel SGX Root CA, each certificate is signed by the
//! next and valid, the body's signature verifies over its exact text, and the issue window contains the time.
//! The result is the project's `collateral.json` ([`CollateralFile`]).

use super::cache::{rfc3339, Cache, Entry, Origin};
use super::http::{Client, Response};
use super::FetchError;
use crate::tdx::collateral::{Collateral, CollateralFile};
use crate::tdx::x509::{parse_pem_chain, verify_raw_sig, Cert, Crl, INTEL_SGX_ROOT_CA_SPKI_SHA256};
use serde::Deserialize;
use std::path::Path;

/// Intel's documented PCS base URL (the default of `--pcs-url`).
pub const DEFAULT_PCS_URL: &str = "https://api.trustedservices.intel.com";
/// Where the Intel SGX Root CA publishes its CRL (its CRL distribution point; the default of `--root-crl-url`
/// when the root certificate names none).
pub const DEFAULT_ROOT_CRL_URL: &str =
    "https://certificates.trustedservices.intel.com/IntelSGXRootCA.der";

/// The TCB Info issuer chain header (v4), and the name PCS v3 used.
pub const TCB_INFO_CHAIN_HEADERS: [&str; 2] =
    ["TCB-Info-Issuer-Chain", "SGX-TCB-Info-Issuer-Chain"];
/// The QE Identity issuer chain header.
pub const QE_IDENTITY_CHAIN_HEADER: &str = "SGX-Enclave-Identity-Issuer-Chain";
/// The PCK CRL issuer chain header.
pub const PCK_CRL_CHAIN_HEADER: &str = "SGX-PCK-CRL-Issuer-Chain";

/// Which TCB Info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tee {
    /// TDX TCB Info (`/tdx/certification/v4/tcb`).
    Tdx,
    /// SGX TCB Info (`/sgx/certification/v4/tcb`).
    Sgx,
}

/// Which PCK CA issued the PCK certificate (the `ca` parameter of the PCK CRL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PckCa {
    /// Intel SGX PCK Processor CA.
    Processor,
    /// Intel SGX PCK Platform CA.
    Platform,
}

impl PckCa {
    /// The parameter value.
    pub fn name(self) -> &'static str {
        match self {
            PckCa::Processor => "processor",
            PckCa::Platform => "platform",
        }
    }

    /// The CA of a PCK CA certificate, from its subject CN.
    pub fn of(ca: &Cert) -> Option<PckCa> {
        let s = ca.subject();
        if s.contains("PCK Platform CA") {
            Some(PckCa::Platform)
        } else if s.contains("PCK Processor CA") {
            Some(PckCa::Processor)
        } else {
            None
        }
    }
}

/// `update=standard` (the default) or `update=early` (TCB recoveries published before the standard date).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Update {
    /// Standard.
    #[default]
    Standard,
    /// Early.
    Early,
}

impl Update {
    /// The parameter value.
    pub fn name(self) -> &'static str {
        match self {
            Update::Standard => "standard",
            Update::Early => "early",
        }
    }
}

/// An `update` value that is neither `standard` nor `early`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: update is standard or early")]
pub struct UnknownUpdate(pub String);

impl std::str::FromStr for Update {
    type Err = UnknownUpdate;
    fn from_str(s: &str) -> Result<Self, UnknownUpdate> {
        match s {
            "standard" => Ok(Update::Standard),
            "early" => Ok(Update::Early),
            o => Err(UnknownUpdate(o.to_owned())),
        }
    }
}

/// `{base}/{tdx|sgx}/certification/v4/tcb?fmspc=..&update=..`.
pub fn tcb_info_url(base: &str, tee: Tee, fmspc: &str, update: Update) -> String {
    let t = match tee {
        Tee::Tdx => "tdx",
        Tee::Sgx => "sgx",
    };
    format!(
        "{}/{t}/certification/v4/tcb?fmspc={fmspc}&update={}",
        base.trim_end_matches('/'),
        update.name()
    )
}

/// `{base}/tdx/certification/v4/qe/identity?update=..`.
pub fn qe_identity_url(base: &str, update: Update) -> String {
    format!(
        "{}/tdx/certification/v4/qe/identity?update={}",
        base.trim_end_matches('/'),
        update.name()
    )
}

/// `{base}/sgx/certification/v4/pckcrl?ca=..&encoding=der`.
pub fn pck_crl_url(base: &str, ca: PckCa) -> String {
    format!(
        "{}/sgx/certification/v4/pckcrl?ca={}&encoding=der",
        base.trim_end_matches('/'),
        ca.name()
    )
}

fn rejected(url: &str, what: &str, detail: impl Into<String>) -> FetchError {
    FetchError::Rejected {
        url: url.into(),
        what: what.into(),
        detail: detail.into(),
    }
}

/// Decodes an issuer chain header (URL-encoded PEM) into its PEM text and certificates.
pub fn chain_from_header(
    url: &str,
    what: &str,
    value: &str,
) -> Result<(String, Vec<Cert>), FetchError> {
    let pem = percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .map_err(|e| {
            rejected(
                url,
                what,
                format!("issuer chain header is not URL-encoded UTF-8: {e}"),
            )
        })?
        .into_owned();
    let chain =
        parse_pem_chain(what, pem.as_bytes()).map_err(|e| rejected(url, what, e.to_string()))?;
    Ok((pem, chain))
}

fn header_chain(
    r: &Response,
    names: &[&str],
    what: &str,
) -> Result<(String, Vec<Cert>), FetchError> {
    let v = names.iter().find_map(|n| r.header(n)).ok_or_else(|| {
        rejected(
            &r.url,
            what,
            format!("no {} header (the issuer chain)", names[0]),
        )
    })?;
    chain_from_header(&r.url, what, v)
}

/// Checks an issuer chain (leaf first): at least two certificates, the last is the pinned Intel SGX Root CA,
/// each is signed by the next (the root by itself) and valid at `now`. Returns the earliest notAfter.
pub fn check_intel_chain(
    url: &str,
    what: &str,
    chain: &[Cert],
    now: i64,
) -> Result<i64, FetchError> {
    if chain.len() < 2 {
        return Err(rejected(
            url,
            what,
            format!(
                "issuer chain holds {} certificate(s), expected the signer and the root",
                chain.len()
            ),
        ));
    }
    let root = &chain[chain.len() - 1];
    if root.spki_sha256() != INTEL_SGX_ROOT_CA_SPKI_SHA256 {
        return Err(rejected(
            url,
            what,
            format!(
                "issuer chain ends in {} (key sha256 {}), not the pinned Intel SGX Root CA",
                root.subject(),
                hex::encode(root.spki_sha256())
            ),
        ));
    }
    let mut earliest = i64::MAX;
    for (i, c) in chain.iter().enumerate() {
        let issuer = chain.get(i + 1).unwrap_or(c);
        c.signed_by(issuer).map_err(|e| {
            rejected(
                url,
                what,
                format!("{} is not signed by {}: {e}", c.subject(), issuer.subject()),
            )
        })?;
        let (nb, na) = c.validity();
        if now < nb || now > na {
            return Err(rejected(
                url,
                what,
                format!(
                    "{} is valid from {} to {}, not at {}",
                    c.subject(),
                    rfc3339(nb),
                    rfc3339(na),
                    rfc3339(now)
                ),
            ));
        }
        earliest = earliest.min(na);
    }
    Ok(earliest)
}

#[derive(Deserialize)]
struct SignedBody<'a> {
    #[serde(rename = "tcbInfo", borrow, default)]
    tcb_info: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "enclaveIdentity", borrow, default)]
    enclave_identity: Option<&'a serde_json::value::RawValue>,
    signature: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dates {
    issue_date: String,
    next_update: String,
    #[serde(default)]
    fmspc: Option<String>,
}

/// A verified signed body: its exact text, its signature (hex) and its nextUpdate.
#[derive(Debug, Clone)]
pub struct SignedPart {
    /// The JSON text exactly as signed.
    pub text: String,
    /// The signature, hex (r || s).
    pub signature: String,
    /// The issuer chain, PEM.
    pub chain_pem: String,
    /// The time it stops being usable: its nextUpdate or an issuer certificate's expiry, whichever is first.
    pub expires: i64,
    /// The URL that served it (after redirects).
    pub url: String,
}

fn parse_rfc3339(url: &str, what: &str, field: &str, s: &str) -> Result<i64, FetchError> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map(|t| t.unix_timestamp())
        .map_err(|e| {
            rejected(
                url,
                what,
                format!("{field} {s:?} is not an RFC 3339 time ({e})"),
            )
        })
}

/// Verifies a TCB Info or QE Identity response body (`{"tcbInfo"|"enclaveIdentity": {...}, "signature": ..}`)
/// with its issuer chain, at `now`; `fmspc` (TCB Info) must match.
pub fn check_signed_body(
    url: &str,
    what: &str,
    body: &[u8],
    chain_pem: String,
    chain: &[Cert],
    fmspc: Option<&str>,
    now: i64,
) -> Result<SignedPart, FetchError> {
    let certs_expire = check_intel_chain(url, what, chain, now)?;
    let text = std::str::from_utf8(body)
        .map_err(|e| rejected(url, what, format!("body is not UTF-8: {e}")))?;
    let sb: SignedBody<'_> = serde_json::from_str(text).map_err(|e| {
        rejected(
            url,
            what,
            format!("body is not the signed JSON PCS sends: {e}"),
        )
    })?;
    let raw = sb
        .tcb_info
        .or(sb.enclave_identity)
        .ok_or_else(|| rejected(url, what, "body has neither tcbInfo nor enclaveIdentity"))?;
    let signed = raw.get().to_string();
    let sig = hex::decode(sb.signature.trim())
        .map_err(|e| rejected(url, what, format!("signature is not hex: {e}")))?;
    let key = chain[0]
        .p256_key()
        .ok_or_else(|| rejected(url, what, "the signer's key is not P-256"))?;
    verify_raw_sig(&key, signed.as_bytes(), &sig).map_err(|e| {
        rejected(
            url,
            what,
            format!(
                "signature over the body does not verify with {}: {e}",
                chain[0].subject()
            ),
        )
    })?;
    let d: Dates = serde_json::from_str(&signed)
        .map_err(|e| rejected(url, what, format!("signed body: {e}")))?;
    let issued = parse_rfc3339(url, what, "issueDate", &d.issue_date)?;
    let next = parse_rfc3339(url, what, "nextUpdate", &d.next_update)?;
    if now < issued || now >= next {
        return Err(rejected(
            url,
            what,
            format!(
                "issued {} with nextUpdate {}: not current at {}",
                d.issue_date,
                d.next_update,
                rfc3339(now)
            ),
        ));
    }
    if let (Some(want), Some(have)) = (fmspc, d.fmspc.as_deref()) {
        if !want.eq_ignore_ascii_case(have) {
            return Err(rejected(
                url,
                what,
                format!("TCB Info is for FMSPC {have}, {want} was asked for"),
            ));
        }
    }
    Ok(SignedPart {
        text: signed,
        signature: hex::encode(sig),
        chain_pem,
        expires: next.min(certs_expire),
        url: url.to_string(),
    })
}

/// Checks a verified TCB Info's `id` against the TEE asked for: Intel signs SGX and TDX TCB Info with the same
/// key, so an SGX answer served for a TDX request would otherwise pass. TCB Info v3 carries `id` ("SGX" or
/// "TDX"); an SGX v2 body has none and is accepted for SGX only.
pub fn check_tcb_info_id(url: &str, tee: Tee, signed: &str) -> Result<(), FetchError> {
    #[derive(Deserialize)]
    struct Id {
        #[serde(default)]
        id: Option<String>,
    }
    let want = match tee {
        Tee::Tdx => "TDX",
        Tee::Sgx => "SGX",
    };
    let id = serde_json::from_str::<Id>(signed)
        .map_err(|e| rejected(url, "TCB Info", format!("signed body: {e}")))?
        .id;
    match id.as_deref() {
        Some(have) if have == want => Ok(()),
        None if tee == Tee::Sgx => Ok(()),
        Some(have) => Err(rejected(
            url,
            "TCB Info",
            format!("it is {have} TCB Info (id {have:?}), {want} TCB Info was asked for"),
        )),
        None => Err(rejected(
            url,
            "TCB Info",
            format!("it has no id; {want} TCB Info (version 3) says id \"{want}\""),
        )),
    }
}

/// Checks a verified QE Identity's `id`: the TD QE's identity says "TD_QE". Intel signs the SGX QE's ("QE")
/// and QVE's ("QVE") identities with the same key, so one of those served at the TDX URL would otherwise be
/// cached and then fail every verification until its nextUpdate.
pub fn check_qe_identity_id(url: &str, signed: &str) -> Result<(), FetchError> {
    #[derive(Deserialize)]
    struct Id {
        #[serde(default)]
        id: Option<String>,
    }
    let id = serde_json::from_str::<Id>(signed)
        .map_err(|e| rejected(url, "QE Identity", format!("signed body: {e}")))?
        .id;
    match id.as_deref() {
        Some("TD_QE") => Ok(()),
        Some(have) => Err(rejected(
            url,
            "QE Identity",
            format!("it is the identity of {have:?}, the TD QE's (id \"TD_QE\") was asked for"),
        )),
        None => Err(rejected(
            url,
            "QE Identity",
            "it has no id; the TD QE's identity says id \"TD_QE\"",
        )),
    }
}

/// Verifies a CRL (DER or PEM) signed by `issuer` and current at `now`; returns (DER, nextUpdate).
pub fn check_crl(
    url: &str,
    what: &str,
    body: &[u8],
    issuer: &Cert,
    now: i64,
) -> Result<(Vec<u8>, i64), FetchError> {
    let der = crate::pki::crls_from_file_bytes(body)
        .map_err(|e| rejected(url, what, e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| rejected(url, what, "no CRL in the body"))?;
    let crl = Crl::from_der(what, &der).map_err(|e| rejected(url, what, e.to_string()))?;
    crl.signed_by(issuer).map_err(|e| {
        rejected(
            url,
            what,
            format!("not signed by {}: {e}", issuer.subject()),
        )
    })?;
    let (this, next) = crl.window();
    let next =
        next.ok_or_else(|| rejected(url, what, "no nextUpdate: it could never be judged stale"))?;
    if now < this || now >= next {
        return Err(rejected(
            url,
            what,
            format!(
                "thisUpdate {} nextUpdate {}: not current at {} (a stale CRL is never used)",
                rfc3339(this),
                rfc3339(next),
                rfc3339(now)
            ),
        ));
    }
    Ok((der, next))
}

/// The CRL distribution point URL of a certificate, if it names one.
pub fn crl_distribution_point(cert: &Cert) -> Option<String> {
    use x509_parser::extensions::{DistributionPointName, GeneralName, ParsedExtension};
    let parsed = cert.parsed();
    for ext in parsed.extensions() {
        if let ParsedExtension::CRLDistributionPoints(points) = ext.parsed_extension() {
            for p in points.iter() {
                if let Some(DistributionPointName::FullName(names)) = &p.distribution_point {
                    for n in names {
                        if let GeneralName::URI(u) = n {
                            return Some(u.to_string());
                        }
                    }
                }
            }
        }
    }
    None
}

/// What one TDX quote needs from PCS: FMSPC and the PCK CA, from its PCK chain.
#[derive(Debug, Clone)]
pub struct QuoteNeeds {
    /// FMSPC, lowercase hex.
    pub fmspc: String,
    /// The CA that issued the PCK certificate.
    pub ca: PckCa,
}

impl QuoteNeeds {
    /// Reads FMSPC and CA from a TDX quote's embedded PCK chain.
    pub fn of_quote(quote: &[u8]) -> Result<QuoteNeeds, FetchError> {
        let q = attestation::tdx::Quote::parse(quote)
            .map_err(|e| FetchError::Input(format!("quote: {e}")))?;
        let pem = q.pck_chain_pem().ok_or_else(|| {
            FetchError::Input(
                "the quote carries no PCK chain (certification data type 5): FMSPC unknown".into(),
            )
        })?;
        let chain = parse_pem_chain("pck_chain", pem)
            .map_err(|e| FetchError::Input(format!("quote: {e}")))?;
        Self::of_chain(&chain)
    }

    /// Reads FMSPC and CA from a PCK chain (leaf first).
    pub fn of_chain(chain: &[Cert]) -> Result<QuoteNeeds, FetchError> {
        let leaf = chain
            .first()
            .ok_or_else(|| FetchError::Input("empty PCK chain".into()))?;
        let ext = crate::tdx::pck::PckExtensions::from_cert(leaf)
            .map_err(|e| FetchError::Input(format!("PCK certificate: {e}")))?;
        let ca = chain.get(1).and_then(PckCa::of).ok_or_else(|| {
            FetchError::Input(
                "the PCK chain's CA is neither the PCK Platform CA nor the PCK Processor CA".into(),
            )
        })?;
        Ok(QuoteNeeds {
            fmspc: hex::encode(ext.fmspc),
            ca,
        })
    }
}

/// The PCS side of collateral fetching.
#[derive(Debug)]
pub struct Pcs<'a> {
    /// The HTTP client.
    pub http: &'a Client,
    /// Base URL.
    pub base: String,
    /// The root CA CRL URL; None: the root certificate's CRL distribution point, else `DEFAULT_ROOT_CRL_URL`.
    pub root_crl_url: Option<String>,
    /// standard or early.
    pub update: Update,
    /// The cache, if any.
    pub cache: Option<&'a Cache>,
}

/// Collateral for one quote and where it came from.
#[derive(Debug, Clone)]
pub struct TdxFetched {
    /// The collateral, in the project's layout.
    pub file: CollateralFile,
    /// `collateral.json` bytes.
    pub json: Vec<u8>,
    /// When it stops being usable.
    pub expires: i64,
    /// Cache or fetched.
    pub origin: Origin,
    /// The URLs.
    pub sources: Vec<String>,
}

impl Pcs<'_> {
    /// TCB Info (TDX or SGX) for an FMSPC, verified.
    pub fn tcb_info(&self, tee: Tee, fmspc: &str, now: i64) -> Result<SignedPart, FetchError> {
        let url = tcb_info_url(&self.base, tee, fmspc, self.update);
        let r = self.http.get(&url)?;
        let (pem, chain) = header_chain(&r, &TCB_INFO_CHAIN_HEADERS, "TCB Info")?;
        let part = check_signed_body(&r.url, "TCB Info", &r.body, pem, &chain, Some(fmspc), now)?;
        check_tcb_info_id(&r.url, tee, &part.text)?;
        Ok(part)
    }

    /// The TD QE Identity, verified.
    pub fn qe_identity(&self, now: i64) -> Result<SignedPart, FetchError> {
        let url = qe_identity_url(&self.base, self.update);
        let r = self.http.get(&url)?;
        let (pem, chain) = header_chain(&r, &[QE_IDENTITY_CHAIN_HEADER], "QE Identity")?;
        let part = check_signed_body(&r.url, "QE Identity", &r.body, pem, &chain, None, now)?;
        check_qe_identity_id(&r.url, &part.text)?;
        Ok(part)
    }

    /// The PCK CRL of `ca`, verified: (DER, issuer chain PEM, expiry, the URL that served it).
    pub fn pck_crl(
        &self,
        ca: PckCa,
        now: i64,
    ) -> Result<(Vec<u8>, String, i64, String), FetchError> {
        let url = pck_crl_url(&self.base, ca);
        let r = self.http.get(&url)?;
        let url = r.url.clone();
        let (pem, chain) = header_chain(&r, &[PCK_CRL_CHAIN_HEADER], "PCK CRL")?;
        let certs = check_intel_chain(&url, "PCK CRL", &chain, now)?;
        if PckCa::of(&chain[0]) != Some(ca) {
            return Err(rejected(
                &url,
                "PCK CRL",
                format!(
                    "issuer chain starts with {}, not the PCK {} CA",
                    chain[0].subject(),
                    ca.name()
                ),
            ));
        }
        let (der, next) = check_crl(&url, "PCK CRL", &r.body, &chain[0], now)?;
        Ok((der, pem, next.min(certs), url))
    }

    /// The root CA CRL, verified against `root`: (DER, expiry, the URL that served it).
    pub fn root_ca_crl(&self, root: &Cert, now: i64) -> Result<(Vec<u8>, i64, String), FetchError> {
        let url = self
            .root_crl_url
            .clone()
            .or_else(|| crl_distribution_point(root))
            .unwrap_or_else(|| DEFAULT_ROOT_CRL_URL.to_string());
        let r = self.http.get(&url)?;
        let (der, next) = check_crl(&r.url, "root CA CRL", &r.body, root, now)?;
        Ok((der, next, r.url))
    }

    /// Everything a TDX quote needs, verified, as `collateral.json`; cached under FMSPC, CA and update
    /// until the earliest nextUpdate or certificate expiry.
    pub fn for_quote(&self, needs: &QuoteNeeds, now: i64) -> Result<TdxFetched, FetchError> {
        let key = format!(
            "pcs/tdx/{}-{}-{}",
            needs.fmspc,
            needs.ca.name(),
            self.update.name()
        );
        let fetch = || -> Result<Entry, FetchError> {
            let tcb = self.tcb_info(Tee::Tdx, &needs.fmspc, now)?;
            let qe = self.qe_identity(now)?;
            let (pck_crl, pck_chain, pck_exp, pck_url) = self.pck_crl(needs.ca, now)?;
            let root_chain = parse_pem_chain("tcb_info_issuer_chain", tcb.chain_pem.as_bytes())
                .map_err(|e| FetchError::Input(e.to_string()))?;
            let root = root_chain
                .last()
                .ok_or_else(|| FetchError::Input("empty TCB Info issuer chain".into()))?;
            let (root_crl, root_exp, root_url) = self.root_ca_crl(root, now)?;
            let file = CollateralFile {
                pck_crl_issuer_chain: pck_chain,
                root_ca_crl: hex::encode(&root_crl),
                pck_crl: hex::encode(&pck_crl),
                tcb_info_issuer_chain: tcb.chain_pem.clone(),
                tcb_info: tcb.text.clone(),
                tcb_info_signature: tcb.signature.clone(),
                qe_identity_issuer_chain: qe.chain_pem.clone(),
                qe_identity: qe.text.clone(),
                qe_identity_signature: qe.signature.clone(),
            };
            Collateral::from_file(&file)
                .map_err(|e| FetchError::Input(format!("assembled collateral: {e}")))?;
            let json =
                serde_json::to_vec_pretty(&file).map_err(|e| FetchError::Input(e.to_string()))?;
            let expires = tcb.expires.min(qe.expires).min(pck_exp).min(root_exp);
            Ok(Entry::new(
                &key,
                now,
                expires,
                // The URLs that served each part, after redirects.
                vec![tcb.url.clone(), qe.url.clone(), pck_url, root_url],
            )
            .with("collateral.json", &json))
        };
        let (entry, origin) = match self.cache {
            Some(c) => c.get_or_fetch(&key, now, fetch)?,
            None => (fetch()?, Origin::Fetched),
        };
        let json = entry
            .part("collateral.json")
            .ok_or_else(|| FetchError::Input(format!("cache entry {key} lacks collateral.json")))?;
        let file: CollateralFile = serde_json::from_slice(&json)
            .map_err(|e| FetchError::Input(format!("cache entry {key}: {e}")))?;
        Ok(TdxFetched {
            file,
            json,
            expires: entry.expires,
            origin,
            sources: entry.sources,
        })
    }
}

fn first_file(dir: &Path, names: &[&str]) -> Option<std::path::PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

fn read_file(path: &Path) -> Result<Vec<u8>, FetchError> {
    attestation::cli_io::read_capped(path, 8 << 20)
        .map_err(|e| FetchError::Input(format!("{}: {e}", path.display())))
}

fn certs_of(path: &Path) -> Result<Vec<Cert>, FetchError> {
    let bytes = read_file(path)?;
    let what = path.display().to_string();
    if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        parse_pem_chain(&what, &bytes).map_err(|e| FetchError::Input(e.to_string()))
    } else {
        Cert::from_der(&what, &bytes)
            .map(|c| vec![c])
            .map_err(|e| FetchError::Input(e.to_string()))
    }
}

fn to_pem(chain: &[Cert]) -> String {
    use base64::Engine as _;
    let mut out = String::new();
    for c in chain {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b = base64::engine::general_purpose::STANDARD.encode(c.der());
        for line in b.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// Names `--from-pcs-responses DIR` reads (the first present of each list).
pub const RESPONSE_FILES: &[(&str, &[&str])] = &[
    (
        "TCB Info response body",
        &["tcb_info_response.json", "tcb_info.json", "tcbinfo.json"],
    ),
    (
        "QE Identity response body",
        &[
            "qe_identity_response.json",
            "qe_identity.json",
            "qeidentity.json",
        ],
    ),
    (
        "PCK CRL",
        &[
            "pck_crl.der",
            "pck_platform_crl.der",
            "pck_processor_crl.der",
            "pckcrl.der",
        ],
    ),
    (
        "root CA CRL",
        &["root_ca_crl.der", "rootcrl.der", "IntelSGXRootCA.der"],
    ),
];

/// Converts PCS responses saved by another tool (a directory, see `RESPONSE_FILES`; issuer chains as
/// `tcb_info_issuer_chain.pem`, `qe_identity_issuer_chain.pem`, `pck_crl_issuer_chain.pem`, or as the
/// signer's certificate `tcb_signing.der`/`.pem` and `pck_platform_ca.der`/`pck_processor_ca.der` with the root
/// `intel_sgx_root_ca.pem`/`root.der`), verifying every part at `now` exactly as a fetch does.
pub fn from_responses(dir: &Path, now: i64) -> Result<CollateralFile, FetchError> {
    let need = |i: usize| -> Result<std::path::PathBuf, FetchError> {
        let (what, names) = RESPONSE_FILES[i];
        first_file(dir, names).ok_or_else(|| {
            FetchError::Input(format!(
                "{}: no {what} (looked for {})",
                dir.display(),
                names.join(", ")
            ))
        })
    };
    let root = first_file(
        dir,
        &[
            "intel_sgx_root_ca.pem",
            "root.der",
            "root.pem",
            "root_ca.pem",
        ],
    )
    .map(|p| certs_of(&p))
    .transpose()?
    .and_then(|mut v| v.pop());
    let chain_for =
        |pem_name: &str, signer_names: &[&str], what: &str| -> Result<Vec<Cert>, FetchError> {
            if let Some(p) = first_file(dir, &[pem_name]) {
                return certs_of(&p);
            }
            let signer = first_file(dir, signer_names).ok_or_else(|| {
                FetchError::Input(format!(
                    "{}: no issuer chain for the {what} ({pem_name}, or {} with the root)",
                    dir.display(),
                    signer_names.join(" or ")
                ))
            })?;
            let mut chain = certs_of(&signer)?;
            match &root {
                Some(r) => chain.push(r.clone()),
                None => {
                    return Err(FetchError::Input(format!(
                        "{}: {} needs the root beside it (intel_sgx_root_ca.pem or root.der)",
                        dir.display(),
                        signer.display()
                    )))
                }
            }
            Ok(chain)
        };
    let tcb_chain = chain_for(
        "tcb_info_issuer_chain.pem",
        &["tcb_signing.der", "tcb_signing.pem", "signing.der"],
        "TCB Info",
    )?;
    let qe_chain = match first_file(dir, &["qe_identity_issuer_chain.pem"]) {
        Some(p) => certs_of(&p)?,
        None => tcb_chain.clone(),
    };
    let pck_chain = chain_for(
        "pck_crl_issuer_chain.pem",
        &[
            "pck_platform_ca.der",
            "pck_processor_ca.der",
            "platform.der",
            "processor.der",
        ],
        "PCK CRL",
    )?;
    let tcb_path = need(0)?;
    let tcb_url = tcb_path.display().to_string();
    let tcb = check_signed_body(
        &tcb_url,
        "TCB Info",
        &read_file(&tcb_path)?,
        to_pem(&tcb_chain),
        &tcb_chain,
        None,
        now,
    )?;
    check_tcb_info_id(&tcb_url, Tee::Tdx, &tcb.text)?;
    let qe_path = need(1)?;
    let qe_url = qe_path.display().to_string();
    let qe = check_signed_body(
        &qe_url,
        "QE Identity",
        &read_file(&qe_path)?,
        to_pem(&qe_chain),
        &qe_chain,
        None,
        now,
    )?;
    check_qe_identity_id(&qe_url, &qe.text)?;
    let pck_path = need(2)?;
    let pck_url = pck_path.display().to_string();
    check_intel_chain(&pck_url, "PCK CRL", &pck_chain, now)?;
    let (pck_crl, _) = check_crl(
        &pck_url,
        "PCK CRL",
        &read_file(&pck_path)?,
        &pck_chain[0],
        now,
    )?;
    let root_path = need(3)?;
    let root_cert = tcb_chain
        .last()
        .ok_or_else(|| FetchError::Input("empty TCB Info issuer chain".into()))?;
    let (root_crl, _) = check_crl(
        &root_path.display().to_string(),
        "root CA CRL",
        &read_file(&root_path)?,
        root_cert,
        now,
    )?;
    let file = CollateralFile {
        pck_crl_issuer_chain: to_pem(&pck_chain),
        root_ca_crl: hex::encode(root_crl),
        pck_crl: hex::encode(pck_crl),
        tcb_info_issuer_chain: tcb.chain_pem,
        tcb_info: tcb.text,
        tcb_info_signature: tcb.signature,
        qe_identity_issuer_chain: qe.chain_pem,
        qe_identity: qe.text,
        qe_identity_signature: qe.signature,
    };
    Collateral::from_file(&file)
        .map_err(|e| FetchError::Input(format!("assembled collateral: {e}")))?;
    Ok(file)
}
