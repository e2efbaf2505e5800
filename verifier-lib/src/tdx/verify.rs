//! The verification procedure: authenticity (quote signature, PCK chain to the pinned root, QE report
//! signature and binding), then collateral (signatures, chains, CRLs, freshness, FMSPC), then the TCB
//! evaluation, then the policy. Nothing stops at the first failure: every check runs that can.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use attestation::tdx::{CertificationData, Quote};

use super::collateral::Collateral;
use super::pck::PckExtensions;
use super::policy::Policy;
use super::result::{
    Authenticity, CollateralChecks, Root, TdxError, TdxVerification, VerifyOptions,
};
use super::tcb;
use super::x509::{
    p256_from_raw, parse_pem_chain, verify_raw_sig, verify_raw_sig_shared, Cert,
    INTEL_SGX_ROOT_CA_SPKI_SHA256,
};
use crate::failure::Failure;
use crate::pki;

/// The QE vendor ID of Intel's quoting enclaves (939a7233-f79c-4ca9-940a-0db3957f0607).
pub const INTEL_QE_VENDOR_ID: [u8; 16] = [
    0x93, 0x9a, 0x72, 0x33, 0xf7, 0x9c, 0x4c, 0xa9, 0x94, 0x0a, 0x0d, 0xb3, 0x95, 0x7f, 0x06, 0x07,
];

fn iso(t: i64) -> String {
    OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|d| d.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("@{t}"))
}

/// Checks `not_before <= at <= not_after`, one failure per side, named `<name>-not-yet-valid` / `<name>-expired`.
fn window(failures: &mut Vec<Failure>, name: &str, at: i64, from: i64, until: Option<i64>) -> bool {
    let mut ok = true;
    if at < from {
        failures.push(Failure::seen_wanted(
            format!("{name}-not-yet-valid"),
            format!("time {}", iso(at)),
            format!("at or after {}", iso(from)),
        ));
        ok = false;
    }
    if let Some(u) = until {
        if at > u {
            failures.push(Failure::seen_wanted(
                format!("{name}-expired"),
                format!("time {}", iso(at)),
                format!("at or before {}", iso(u)),
            ));
            ok = false;
        }
    }
    ok
}

fn cert_role(i: usize, len: usize, prefix: &str) -> String {
    if i + 1 == len {
        format!("{prefix}-root")
    } else if i == 0 {
        format!("{prefix}-leaf")
    } else {
        format!("{prefix}-ca")
    }
}

/// Verifies a chain leaf-first: signatures, a self-signed root, validity at `at`. Returns (sigs ok, time ok).
fn check_chain(failures: &mut Vec<Failure>, prefix: &str, chain: &[Cert], at: i64) -> (bool, bool) {
    let mut sigs = true;
    let mut times = true;
    for (i, c) in chain.iter().enumerate() {
        let role = cert_role(i, chain.len(), prefix);
        let issuer = chain.get(i + 1).unwrap_or(c);
        if let Err(e) = c.signed_by(issuer) {
            failures.push(Failure::seen_wanted(
                format!("{role}-signature"),
                e,
                format!("signed by {}", issuer.subject()),
            ));
            sigs = false;
        }
        let (nb, na) = c.validity();
        times &= window(failures, &format!("{role}-validity"), at, nb, Some(na));
    }
    (sigs, times)
}

fn root_kind(root: &Cert) -> Root {
    if root.spki_sha256() == INTEL_SGX_ROOT_CA_SPKI_SHA256 {
        Root::Intel
    } else {
        Root::Simulated
    }
}

/// Intel's names for the positions of its chains (root kind Intel); chains under another root are checked for
/// roles, constraints and shape, and their names are left to the sim (they say SIMULATED).
const INTEL_ROOT_CN: &[&str] = &["Intel SGX Root CA"];
const INTEL_PCK_CA_CN: &[&str] = &["Intel SGX PCK Platform CA", "Intel SGX PCK Processor CA"];
const INTEL_PCK_CN: &[&str] = &["Intel SGX PCK Certificate"];
const INTEL_TCB_SIGNING_CN: &[&str] = &["Intel SGX TCB Signing"];

/// The exact shapes of Intel's chains: PCK leaf <- PCK CA <- root; TCB Signing <- root; PCK CA <- root (the
/// PCK CRL issuer chain).
fn shape(kind: &str, intel: bool) -> Vec<pki::Position<'static>> {
    let n = |names: &'static [&'static str]| if intel { names } else { &[][..] };
    let root = pki::Position {
        what: "root",
        role: pki::Role::Root,
        names: n(INTEL_ROOT_CN),
    };
    let ca = pki::Position {
        what: "PCK CA",
        role: pki::Role::Ca,
        names: n(INTEL_PCK_CA_CN),
    };
    match kind {
        "pck" => vec![
            pki::Position {
                what: "PCK leaf",
                role: pki::Role::Leaf,
                names: n(INTEL_PCK_CN),
            },
            ca,
            root,
        ],
        "pck-crl-issuer" => vec![ca, root],
        _ => vec![
            pki::Position {
                what: "TCB Signing",
                role: pki::Role::Leaf,
                names: n(INTEL_TCB_SIGNING_CN),
            },
            root,
        ],
    }
}

/// Path validation of `chain` against `shape` ([`pki::check_path`]); failures are `<prefix>.shape` or
/// `<prefix>-<leaf|ca|root>-<rule>`.
fn check_path(
    failures: &mut Vec<Failure>,
    prefix: &str,
    chain: &[Cert],
    shape: &[pki::Position<'_>],
) -> bool {
    let parsed: Vec<_> = chain.iter().map(Cert::parsed).collect();
    let violations = pki::check_path(&parsed, shape);
    let ok = violations.is_empty();
    for v in violations {
        let rule = v.rule.name();
        let check = match v.index {
            None => format!("{prefix}-shape"),
            Some(i) => format!("{}-{rule}", cert_role(i, chain.len(), prefix)),
        };
        let wanted = match v.rule {
            pki::Rule::ChainShape => shape
                .iter()
                .map(|p| p.what)
                .collect::<Vec<_>>()
                .join(" <- "),
            pki::Rule::BasicConstraints => "an issuer with basicConstraints CA:TRUE".into(),
            pki::Rule::KeyUsage => {
                "keyCertSign on issuers, digitalSignature and no keyCertSign on leaves".into()
            }
            pki::Rule::LeafIsCa => "an end entity (CA:FALSE)".into(),
            pki::Rule::PathLength => "path length within every pathLenConstraint".into(),
            pki::Rule::IssuerName => "each issuer name equal to the next subject".into(),
            pki::Rule::SubjectName => "Intel's subject for this position".into(),
            pki::Rule::CriticalExtension => {
                "only critical extensions the verifier processes".into()
            }
            _ => "well-formed extensions".into(),
        };
        failures.push(Failure::seen_wanted(check, v.detail, wanted));
    }
    ok
}

/// Whether a certificate carries Intel's SGX (PCK) extension.
fn is_pck(cert: &Cert) -> bool {
    cert.parsed()
        .extensions()
        .iter()
        .any(|e| e.oid.to_id_string() == super::pck::SGX_EXTENSIONS_OID)
}

/// Parses and verifies a quote (see [`verify_quote_parsed`]).
pub fn verify_quote(bytes: &[u8], opts: &VerifyOptions<'_>) -> Result<TdxVerification, TdxError> {
    let quote = Quote::parse(bytes)?;
    let mut v = verify_received(bytes, quote, None, opts);
    validate(&mut v, opts.policy);
    Ok(v)
}

/// Verifies a TDX quote carried in evidence: `certs` (DER, leaf first) is the PCK chain when the quote
/// does not carry one, and `collateral_json` the collateral in the `collateral.json` layout.
pub fn verify_quote_for_evidence(
    report: &[u8],
    certs: &[Vec<u8>],
    collateral_json: Option<&[u8]>,
    at: i64,
    policy: &Policy,
    allow_simulated: bool,
) -> Result<TdxVerification, TdxError> {
    let quote = Quote::parse(report)?;
    let collateral = collateral_json.map(Collateral::from_json).transpose()?;
    let chain =
        if quote.pck_chain_pem().is_none() && !certs.is_empty() {
            let mut out = Vec::new();
            for (i, der) in certs.iter().enumerate() {
                out.push(Cert::from_der(&format!("certs[{i}]"), der).map_err(|e| {
                    TdxError::Collateral(super::collateral::CollateralError::X509(e))
                })?);
            }
            Some(out)
        } else {
            None
        };
    let opts = VerifyOptions {
        collateral: collateral.as_ref(),
        at,
        policy,
        allow_simulated,
    };
    let mut v = verify_received(report, quote, chain, &opts);
    validate(&mut v, policy);
    Ok(v)
}

/// As [`verify_quote_for_evidence`] with collateral chosen by `collateral::choose_for_evidence`: the
/// result names where the collateral came from and whether the evidence's own was set aside.
pub fn verify_quote_for_evidence_chosen(
    report: &[u8],
    certs: &[Vec<u8>],
    chosen: Option<super::collateral::Chosen<'_>>,
    at: i64,
    policy: &Policy,
    allow_simulated: bool,
) -> Result<TdxVerification, TdxError> {
    let mut v = verify_quote_for_evidence(
        report,
        certs,
        chosen.map(|c| c.bytes),
        at,
        policy,
        allow_simulated,
    )?;
    if let (Some(used), Some(c)) = (v.collateral_used.as_mut(), chosen) {
        used.source = c.source;
        used.evidence_collateral_ignored = c.evidence_ignored;
    }
    Ok(v)
}

/// Verifies a quote built or parsed in memory; `chain` overrides the PCK chain carried in the quote. The
/// signatures are checked over the quote's own encoding ([`Quote::to_bytes`]); a quote read from bytes should go
/// through [`verify_quote`], which checks them over the bytes as received.
#[cfg(any(test, feature = "internals"))]
pub fn verify_quote_parsed(
    quote: Quote,
    chain: Option<Vec<Cert>>,
    opts: &VerifyOptions<'_>,
) -> TdxVerification {
    let raw = quote.to_bytes().unwrap_or_else(|_| quote.signed_bytes());
    let mut v = verify_received(&raw, quote, chain, opts);
    validate(&mut v, opts.policy);
    v
}

/// Verifies and validates `quote`, already parsed from `raw` by the caller: every signature over `raw` as
/// received.
#[cfg(any(test, feature = "internals"))]
pub fn verify_quote_received(
    raw: &[u8],
    quote: Quote,
    opts: &VerifyOptions<'_>,
) -> TdxVerification {
    let mut v = verify_received(raw, quote, None, opts);
    validate(&mut v, opts.policy);
    v
}

/// The signed regions of a quote in the bytes it was parsed from ([`Quote::signed_range`],
/// [`Quote::qe_report_range`]): header and body, and the QE report. `None` where the bytes are shorter than the
/// parsed quote says.
fn signed_regions<'a>(raw: &'a [u8], quote: &Quote) -> (Option<&'a [u8]>, Option<&'a [u8]>) {
    (
        raw.get(quote.signed_range()),
        raw.get(quote.qe_report_range()),
    )
}

/// Verifies `quote`, parsed from `raw`: every signature is checked over the bytes as received, each distinct
/// one once (see [`crate::sigcache::within_one_verification`]).
fn verify_received(
    raw: &[u8],
    quote: Quote,
    chain: Option<Vec<Cert>>,
    opts: &VerifyOptions<'_>,
) -> TdxVerification {
    crate::sigcache::within_one_verification(|| {
        check_received(raw, quote, chain, opts, opts.collateral)
    })
}

/// As [`verify_quote_received`], with the collateral given as its `collateral.json` bytes (parsed with
/// [`Collateral::from_json`]); the collateral in `opts` is not used. `Err`: the collateral does not parse (the
/// same error [`Collateral::from_json`] gives; nothing of the quote is reported then).
pub fn verify_quote_received_json(
    raw: &[u8],
    quote: Quote,
    collateral_json: Option<&[u8]>,
    opts: &VerifyOptions<'_>,
) -> Result<TdxVerification, super::collateral::CollateralError> {
    let collateral = collateral_json.map(Collateral::from_json).transpose()?;
    let mut v = crate::sigcache::within_one_verification(|| {
        check_received(raw, quote, None, opts, collateral.as_ref())
    });
    validate(&mut v, opts.policy);
    Ok(v)
}

/// The verification itself (authenticity and the TCB evaluation, no policy), every signature checked through
/// the active signature cache.
fn check_received(
    raw: &[u8],
    quote: Quote,
    chain: Option<Vec<Cert>>,
    opts: &VerifyOptions<'_>,
    collateral: Option<&Collateral>,
) -> TdxVerification {
    let (signed, qe_signed) = signed_regions(raw, &quote);
    let at = opts.at;
    let mut failures = Vec::new();
    let mut auth = Authenticity::default();

    // 1. The quote signature by the attestation key.
    match p256_from_raw(&quote.signature_data.attestation_key) {
        Some(key) => {
            match verify_raw_sig(&key, signed.unwrap_or(&[]), &quote.signature_data.signature) {
                Ok(()) => auth.quote_signature = true,
                Err(e) => failures.push(Failure::seen_wanted(
                    "quote-signature",
                    e,
                    "valid ECDSA P-256 over header and body",
                )),
            }
        }
        None => failures.push(Failure::seen_wanted(
            "quote-attestation-key",
            hex::encode(quote.signature_data.attestation_key),
            "a P-256 point",
        )),
    }

    // The QE that signs TDX quotes is Intel's; Intel's QVL refuses any other vendor ID.
    if quote.header.qe_vendor_id != INTEL_QE_VENDOR_ID {
        failures.push(Failure::seen_wanted(
            "header-qe-vendor-id",
            hex::encode(quote.header.qe_vendor_id),
            hex::encode(INTEL_QE_VENDOR_ID),
        ));
    }

    // 2. The PCK chain (from the quote, type 6 holding type 5).
    let qe = match &quote.signature_data.certification {
        CertificationData::QeReport(q) => Some(q.as_ref()),
        CertificationData::Other { cert_type, .. } => {
            failures.push(Failure::seen_wanted(
                "quote-certification-data",
                format!("type {cert_type}"),
                "type 6 (QE report)",
            ));
            None
        }
    };
    let chain = match chain {
        Some(c) => Some(c),
        None => match quote.pck_chain_pem() {
            Some(pem) => match parse_pem_chain("pck-chain", pem) {
                Ok(c) => Some(c),
                Err(e) => {
                    failures.push(Failure::seen_wanted("pck-chain", e, "a readable PEM chain"));
                    None
                }
            },
            None => {
                if qe.is_some() {
                    failures.push(Failure::seen_wanted(
                        "pck-chain",
                        "no type 5 PCK chain",
                        "type 5 inside type 6",
                    ));
                }
                None
            }
        },
    };
    let chain = chain.filter(|c| {
        if c.len() < 2 {
            failures.push(Failure::seen_wanted(
                "pck-chain",
                format!("{} certificate(s)", c.len()),
                "leaf, PCK CA, root",
            ));
            false
        } else {
            true
        }
    });
    let mut simulated = false;
    let mut pck = None;
    if let Some(chain) = &chain {
        let (sigs, times) = check_chain(&mut failures, "pck-chain", chain, at);
        auth.pck_chain_signatures = sigs;
        auth.pck_chain_time = times;
        let root = root_kind(&chain[chain.len() - 1]);
        auth.root = Some(root);
        auth.pck_chain_path = check_path(
            &mut failures,
            "pck-chain",
            chain,
            &shape("pck", root == Root::Intel),
        );
        if root == Root::Simulated {
            simulated = true;
            if !opts.allow_simulated {
                failures.push(Failure::seen_wanted(
                    "pck-chain-root-pin",
                    format!(
                        "key sha256 {} (not Intel's: simulated or foreign)",
                        hex::encode(chain[chain.len() - 1].spki_sha256())
                    ),
                    format!(
                        "Intel SGX Root CA key sha256 {} (or --allow-simulated)",
                        hex::encode(INTEL_SGX_ROOT_CA_SPKI_SHA256)
                    ),
                ));
            }
        }
        match PckExtensions::from_cert(&chain[0]) {
            Ok(p) => {
                // CPUSVN (.2.18) and the 16 component SVNs (.2.1-.2.16) are the same TCB; the evaluation uses
                // the components, so a certificate where they differ says two things at once.
                if p.cpusvn != p.sgx_tcb_components {
                    failures.push(Failure::seen_wanted(
                        "pck-chain-leaf-sgx-extensions-cpusvn",
                        hex::encode(&p.cpusvn),
                        format!(
                            "the TCB component SVNs {}",
                            hex::encode(p.sgx_tcb_components)
                        ),
                    ));
                }
                pck = Some(p)
            }
            Err(e) => failures.push(Failure::seen_wanted(
                "pck-chain-leaf-sgx-extensions",
                e,
                "Intel's SGX extension profile",
            )),
        }
        // 3. The QE report, signed by the PCK leaf key, binding the attestation key.
        if let Some(q) = qe {
            match chain[0].p256_key() {
                Some(key) => {
                    match verify_raw_sig_shared(
                        &key,
                        qe_signed.unwrap_or(&[]),
                        &q.qe_report_signature,
                    ) {
                        Ok(()) => auth.qe_report_signature = true,
                        Err(e) => failures.push(Failure::seen_wanted(
                            "qe-report-signature",
                            e,
                            "valid ECDSA P-256 by the PCK leaf key",
                        )),
                    }
                }
                None => failures.push(Failure::seen_wanted(
                    "pck-chain-leaf-key",
                    "not a P-256 key",
                    "a P-256 key",
                )),
            }
        }
    }
    if let Some(q) = qe {
        let want = crate::digest::sha256(&[&quote.signature_data.attestation_key, &q.qe_auth_data]);
        let rd = &q.qe_report.report_data;
        if rd[..32] == want && rd[32..].iter().all(|b| *b == 0) {
            auth.qe_report_data_binding = true;
        } else {
            failures.push(Failure::seen_wanted(
                "qe-report-report-data",
                hex::encode(rd),
                format!("{}{}", hex::encode(want), "00".repeat(32)),
            ));
        }
    }

    // 4. Collateral and the TCB evaluation (the policy that judges them is [`validate`]'s).
    let mut coll_checks = None;
    let mut tcb_eval = None;
    if let Some(coll) = collateral {
        let (checks, eval) = check_collateral(
            coll,
            &quote,
            chain.as_deref(),
            pck.as_ref(),
            at,
            opts.policy.collateral_grace_secs.max(0),
            &mut failures,
        );
        coll_checks = Some(checks);
        tcb_eval = eval.map(|mut ev| {
            ev.qe_identity_evaluation_data_number = coll.qe_identity.tcb_evaluation_data_number;
            ev
        });
    }

    TdxVerification {
        quote,
        simulated,
        authenticity: auth,
        collateral: coll_checks,
        collateral_used: collateral.map(|c| c.used(super::collateral::CollateralSource::Given)),
        pck,
        tcb: tcb_eval,
        at,
        failures,
    }
}

/// Acceptability: adds the failures of `policy` to an authenticity result: the TCB status and advisories,
/// collateral required but absent, and the TD's fields (MRTD, RTMRs, attributes, ...).
pub fn validate(v: &mut TdxVerification, policy: &Policy) {
    if let Some(ev) = &v.tcb {
        policy.check_tcb(ev.status, &ev.advisory_ids, &mut v.failures);
        policy.check_freshness(ev, &mut v.failures);
    }
    if v.collateral.is_none() && policy.require_collateral {
        v.failures.push(Failure::seen_wanted(
            "collateral",
            "none given",
            "TCB Info, QE Identity and CRLs (--collateral)",
        ));
    }
    policy.check_td(&v.quote, &mut v.failures);
}

/// Authenticity: parses `bytes` and checks the quote signature, the QE report and its binding, the PCK chain
/// and, with collateral, its signatures, chains, CRLs and freshness, and evaluates the TCB; every signature over
/// the bytes as received. `opts.policy` is not applied here; see [`validate`].
#[cfg(any(test, feature = "internals"))]
pub fn verify(bytes: &[u8], opts: &VerifyOptions<'_>) -> Result<TdxVerification, TdxError> {
    let quote = Quote::parse(bytes)?;
    Ok(verify_received(bytes, quote, None, opts))
}

fn parse_time(failures: &mut Vec<Failure>, check: &str, s: &str) -> Option<i64> {
    match OffsetDateTime::parse(s, &Rfc3339) {
        Ok(t) => Some(t.unix_timestamp()),
        Err(e) => {
            failures.push(Failure::seen_wanted(
                check.to_string(),
                format!("{s:?} ({e})"),
                "an RFC 3339 time",
            ));
            None
        }
    }
}

/// Checks a signed JSON body: its chain (to the same root as the PCK chain), signature, and issue window.
#[allow(clippy::too_many_arguments)]
fn check_signed_body(
    failures: &mut Vec<Failure>,
    name: &str,
    chain: &[Cert],
    text: &str,
    sig: &[u8],
    issue: &str,
    next: &str,
    pck_root: Option<&Cert>,
    at: i64,
    grace: i64,
) -> (bool, bool, bool) {
    let prefix = format!("{name}-issuer-chain");
    let (sigs, times) = check_chain(failures, &prefix, chain, at);
    let root = &chain[chain.len() - 1];
    // Only the Intel SGX TCB Signing certificate, issued directly by the pinned root, may sign TCB Info and
    // QE Identity: whatever else chains to the root (a PCK leaf, a PCK CA) is refused.
    let intel = root_kind(root) == Root::Intel;
    let path_ok = check_path(failures, &prefix, chain, &shape("tcb-signing", intel));
    let signer_ok = if is_pck(&chain[0]) {
        failures.push(Failure::seen_wanted(
            format!("{prefix}-leaf-role"),
            format!(
                "{} (a PCK certificate: it carries the SGX extensions)",
                chain[0].subject()
            ),
            "the SGX TCB Signing certificate",
        ));
        false
    } else {
        true
    };
    let mut chain_ok = sigs && times && path_ok && signer_ok;
    let anchor_ok = match pck_root {
        Some(r) => r.spki_sha256() == root.spki_sha256(),
        None => root.spki_sha256() == INTEL_SGX_ROOT_CA_SPKI_SHA256,
    };
    if !anchor_ok {
        chain_ok = false;
        failures.push(Failure::seen_wanted(
            format!("{name}-issuer-chain-root-pin"),
            format!("key sha256 {}", hex::encode(root.spki_sha256())),
            "the root of the PCK chain",
        ));
    }
    let sig_ok = match chain[0].p256_key() {
        Some(key) => match verify_raw_sig_shared(&key, text.as_bytes(), sig) {
            Ok(()) => true,
            Err(e) => {
                failures.push(Failure::seen_wanted(
                    format!("{name}-signature"),
                    e,
                    format!("signed by {}", chain[0].subject()),
                ));
                false
            }
        },
        None => {
            failures.push(Failure::seen_wanted(
                format!("{name}-issuer-chain-leaf-key"),
                "not P-256",
                "a P-256 key",
            ));
            false
        }
    };
    let mut fresh = true;
    let issued = parse_time(failures, &format!("{name}-issue-date"), issue);
    let next = parse_time(failures, &format!("{name}-next-update"), next);
    match (issued, next) {
        (Some(i), Some(n)) => {
            if at < i {
                failures.push(Failure::seen_wanted(
                    format!("{name}-issue-date"),
                    format!("time {}", iso(at)),
                    format!("at or after {issue}"),
                ));
                fresh = false;
            }
            // --collateral-grace: accepted for `grace` seconds past nextUpdate (0 by default).
            if at >= n.saturating_add(grace) {
                failures.push(Failure::seen_wanted(
                    format!("{name}-next-update"),
                    format!("time {} (expired)", iso(at)),
                    format!("before {next}", next = iso(n)),
                ));
                fresh = false;
            }
        }
        _ => fresh = false,
    }
    (sig_ok, chain_ok, fresh)
}

fn check_collateral(
    coll: &Collateral,
    quote: &Quote,
    chain: Option<&[Cert]>,
    pck: Option<&PckExtensions>,
    at: i64,
    grace: i64,
    failures: &mut Vec<Failure>,
) -> (CollateralChecks, Option<tcb::TcbEvaluation>) {
    let mut c = CollateralChecks::default();
    let pck_root = chain.and_then(|ch| ch.last());
    let pck_ca = chain.filter(|ch| ch.len() >= 2).map(|ch| &ch[ch.len() - 2]);
    let empty = |failures: &mut Vec<Failure>, n: &str| {
        failures.push(Failure::seen_wanted(
            n.to_string(),
            "empty chain",
            "signer, root",
        ));
    };

    // TCB Info and QE Identity: exact-text signatures with the TCB signing chain.
    let ti = &coll.tcb_info;
    if coll.tcb_info_issuer_chain.is_empty() {
        empty(failures, "tcb-info-issuer-chain");
    } else {
        let (s, ch, fresh) = check_signed_body(
            failures,
            "tcb-info",
            &coll.tcb_info_issuer_chain,
            &coll.tcb_info_text,
            &coll.tcb_info_signature,
            &ti.issue_date,
            &ti.next_update,
            pck_root,
            at,
            grace,
        );
        c.tcb_info_signature = s;
        c.tcb_info_chain = ch;
        c.fresh = fresh;
    }
    if ti.id != "TDX" || ti.version < 3 {
        failures.push(Failure::seen_wanted(
            "tcb-info-id",
            format!("{} v{}", ti.id, ti.version),
            "TDX v3 or later",
        ));
    }
    let qi = &coll.qe_identity;
    if coll.qe_identity_issuer_chain.is_empty() {
        empty(failures, "qe-identity-issuer-chain");
    } else {
        let (s, ch, fresh) = check_signed_body(
            failures,
            "qe-identity",
            &coll.qe_identity_issuer_chain,
            &coll.qe_identity_text,
            &coll.qe_identity_signature,
            &qi.issue_date,
            &qi.next_update,
            pck_root,
            at,
            grace,
        );
        c.qe_identity_signature = s;
        c.qe_identity_chain = ch;
        c.fresh &= fresh;
    }
    if qi.id != "TD_QE" {
        failures.push(Failure::seen_wanted("qe-identity-id", &qi.id, "TD_QE"));
    }

    // CRLs: signed by the root and by the PCK CA of the quote's chain, fresh, and revoking nothing we use.
    let mut crl_fresh = true;
    let mut none_revoked = true;
    if let Some(root) = pck_root {
        if let Err(e) = pki::may_sign_crls(&root.parsed()) {
            failures.push(Failure::seen_wanted(
                "root-ca-crl-issuer",
                e,
                "an issuer with cRLSign",
            ));
        }
        match coll.root_ca_crl.signed_by(root) {
            Ok(()) => c.root_ca_crl_signature = true,
            Err(e) => failures.push(Failure::seen_wanted(
                "root-ca-crl-signature",
                e,
                format!("signed by {}", root.subject()),
            )),
        }
    }
    if let Some(ca) = pck_ca {
        if let Err(e) = pki::may_sign_crls(&ca.parsed()) {
            failures.push(Failure::seen_wanted(
                "pck-crl-issuer",
                e,
                "an issuer with cRLSign",
            ));
        }
        match coll.pck_crl.signed_by(ca) {
            Ok(()) => c.pck_crl_signature = true,
            Err(e) => failures.push(Failure::seen_wanted(
                "pck-crl-signature",
                e,
                format!("signed by {}", ca.subject()),
            )),
        }
        if !coll.pck_crl_issuer_chain.is_empty() {
            let intel = pck_root.is_some_and(|r| root_kind(r) == Root::Intel);
            check_path(
                failures,
                "pck-crl-issuer-chain",
                &coll.pck_crl_issuer_chain,
                &shape("pck-crl-issuer", intel),
            );
        }
        match coll.pck_crl_issuer_chain.first() {
            Some(first) if first.spki_sha256() == ca.spki_sha256() => {}
            Some(first) => failures.push(Failure::seen_wanted(
                "pck-crl-issuer-chain-leaf",
                first.subject(),
                format!("the PCK CA of the quote ({})", ca.subject()),
            )),
            None => empty(failures, "pck-crl-issuer-chain"),
        }
    }
    for (name, crl) in [
        ("root-ca-crl", &coll.root_ca_crl),
        ("pck-crl", &coll.pck_crl),
    ] {
        let (this, next) = crl.window();
        if at < this {
            failures.push(Failure::seen_wanted(
                format!("{name}-this-update"),
                format!("time {}", iso(at)),
                format!("at or after {}", iso(this)),
            ));
            crl_fresh = false;
        }
        match next {
            Some(n) if at >= n.saturating_add(grace) => {
                failures.push(Failure::seen_wanted(
                    format!("{name}-next-update"),
                    format!("time {} (expired)", iso(at)),
                    format!("before {}", iso(n)),
                ));
                crl_fresh = false;
            }
            Some(_) => {}
            None => {
                failures.push(Failure::seen_wanted(
                    format!("{name}-next-update"),
                    "absent",
                    "a nextUpdate",
                ));
                crl_fresh = false;
            }
        }
    }
    c.fresh &= crl_fresh;
    // Revocation: every certificate of every chain is looked up in the CRL its issuer publishes (the root CA
    // CRL covers what the root issued: PCK CAs, TCB Signing; the PCK CRL covers what the PCK CA issued).
    let mut certs: Vec<(String, &Cert)> = Vec::new();
    if let Some(ch) = chain {
        for (i, cert) in ch.iter().enumerate().take(ch.len().saturating_sub(1)) {
            certs.push((cert_role(i, ch.len(), "pck-chain"), cert));
        }
    }
    for (name, ch) in [
        ("tcb-info-issuer-chain", &coll.tcb_info_issuer_chain),
        ("qe-identity-issuer-chain", &coll.qe_identity_issuer_chain),
        ("pck-crl-issuer-chain", &coll.pck_crl_issuer_chain),
    ] {
        for (i, cert) in ch.iter().enumerate().take(ch.len().saturating_sub(1)) {
            certs.push((cert_role(i, ch.len(), name), cert));
        }
    }
    for (role, cert) in certs {
        for (crl_name, crl) in [
            ("root-ca-crl", &coll.root_ca_crl),
            ("pck-crl", &coll.pck_crl),
        ] {
            if crl.covers(cert) && crl.revokes(&cert.serial()) {
                failures.push(Failure::seen_wanted(
                    format!("{role}-revoked"),
                    hex::encode(cert.serial()),
                    format!("not in the {crl_name} CRL"),
                ));
                none_revoked = false;
            }
        }
    }
    c.none_revoked = none_revoked;

    // FMSPC / PCE-ID, then the TCB evaluation.
    let Some(pck) = pck else { return (c, None) };
    let fmspc_ok = hex::decode(&ti.fmspc)
        .map(|f| f == pck.fmspc)
        .unwrap_or(false);
    if !fmspc_ok {
        failures.push(Failure::seen_wanted(
            "tcb-info-fmspc",
            ti.fmspc.to_lowercase(),
            hex::encode(&pck.fmspc),
        ));
    }
    let pceid_ok = hex::decode(&ti.pce_id)
        .map(|f| f == pck.pceid)
        .unwrap_or(false);
    if !pceid_ok {
        failures.push(Failure::seen_wanted(
            "tcb-info-pce-id",
            ti.pce_id.to_lowercase(),
            hex::encode(&pck.pceid),
        ));
    }
    c.fmspc_match = fmspc_ok && pceid_ok;
    let qe_grade = match quote.qe_cert_data() {
        Some(q) => tcb::grade_qe(qi, &q.qe_report, failures),
        None => (tcb::TcbStatus::NotSupported, Vec::new()),
    };
    let ev = tcb::evaluate(
        ti,
        pck,
        quote.td(),
        quote.body.td15().map(|b| &b.tee_tcb_svn2),
        qe_grade,
        failures,
    );
    (c, Some(ev))
}
