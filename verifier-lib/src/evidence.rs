//! Verification of a fenced-run evidence bundle: report, key binding, COSE signature, nonce, measurement.
//!
//! The order is fixed: the hardware report (chain, signature, policy), then `report_data` against the binding
//! of the bundle's key and nonce, then the verdict's COSE_Sign1 signature with that key, then the verdict's own
//! nonce against the founder's. Whether evidence is simulated is decided by the root of its chain alone.

use crate::output::Failure;
use crate::snp::{self, CertBundle, ChainOptions, Policy, RootKind, SnpVerification};
use attestation::binding;
use attestation::evidence::{Evidence, EvidenceError, TeeLabel};
use attestation::snp::AttestationReport;
use attestation::verdict::{Isolation, Verdict};

/// Check names specific to evidence.
pub mod checks {
    /// The evidence bundle itself is malformed.
    pub const EVIDENCE_FORMAT: &str = "evidence-format";
    /// The report inside the evidence does not parse.
    pub const REPORT_FORMAT: &str = "report-format";
    /// The certificates inside the evidence are not a VCEK/VLEK, ASK/ASVK, ARK triple.
    pub const CERTS: &str = "certs";
    /// The `tee` label disagrees with the chain (a sim chain labelled real, or the reverse).
    pub const TEE_LABEL: &str = "tee-label";
    /// The evidence is simulated and simulated evidence was not allowed.
    pub const SIMULATED: &str = "simulated";
    /// REPORT_DATA is not the binding of the bundle's key and the nonce.
    pub const KEY_BINDING: &str = "key-binding";
    /// The verdict's COSE_Sign1 does not verify with the bound key, or is malformed.
    pub const VERDICT_SIGNATURE: &str = "verdict-signature";
    /// The verdict's nonce differs from the founder's.
    pub const NONCE: &str = "nonce";
    /// The verdict's isolation tier disagrees with the attestation.
    pub const ISOLATION: &str = "isolation";
    /// No launch measurement was pinned and `--any-measurement` was not given.
    pub const MEASUREMENT_UNPINNED: &str = "measurement-unpinned";
    /// The launch measurement is not in the auditor-signed measurement set.
    pub const MEASUREMENT_SET: &str = "measurement-set";
    /// TDX evidence could not be verified.
    pub const TDX: &str = "tdx";
}

/// How to verify evidence.
#[derive(Clone, Debug, Default)]
pub struct EvidenceOptions {
    /// Time, CRL and whether simulated evidence is acceptable.
    pub chain: ChainOptions,
    /// The SEV-SNP acceptability policy (its `measurements` are the pinned launch measurements).
    pub policy: Policy,
    /// The founder's nonce; without it freshness is not checked (the output says so).
    pub nonce: Option<Vec<u8>>,
    /// Skip the launch-measurement pin on purpose (any guest code could then have produced the verdict).
    pub any_measurement: bool,
    /// A measurement set whose auditor signatures were already checked (k of n); the launch measurement must
    /// be one of its entries.
    pub measurement_set: Option<std::sync::Arc<measurements::set::TrustedSet>>,
    /// TDX collateral (`collateral.json` layout) to use when the evidence carries none, as evidence from
    /// configfs-tsm usually does: the founder fetches it and verifies offline.
    pub tdx_collateral: Option<Vec<u8>>,
}

/// The verification of the hardware report inside the evidence.
#[non_exhaustive]
#[derive(Debug)]
pub enum ReportVerification {
    /// An SEV-SNP report.
    Snp(Box<SnpVerification>),
    /// A TDX quote.
    Tdx(Box<crate::tdx::TdxVerification>),
    /// The report could not be verified at all (see the failures).
    Unverified,
}

/// The full result of verifying one evidence bundle.
#[derive(Debug)]
pub struct EvidenceVerification {
    /// The `tee` label the evidence carries.
    pub label: TeeLabel,
    /// Whether the chain ends in a root that is not the vendor's (decided by the root, never by the label).
    pub simulated: bool,
    /// The report's verification.
    pub report: ReportVerification,
    /// The verdict, once its signature verified with the bound key.
    pub verdict: Option<Verdict>,
    /// Whether a launch measurement was pinned (false with `--any-measurement`).
    pub measurement_pinned: bool,
    /// Whether the verdict's nonce was compared with the founder's.
    pub nonce_checked: bool,
    /// Every failed check, in the order of the checks.
    pub failures: Vec<Failure>,
}

impl EvidenceVerification {
    /// Whether every check passed.
    pub fn verified(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Decodes and verifies evidence bytes; an undecodable bundle is an error (exit 2 in the CLI).
pub fn verify_evidence_bytes(
    bytes: &[u8],
    opts: &EvidenceOptions,
) -> Result<EvidenceVerification, EvidenceError> {
    let ev = Evidence::from_cbor(bytes)?;
    Ok(verify_evidence(&ev, opts))
}

/// Verifies decoded evidence.
pub fn verify_evidence(ev: &Evidence, opts: &EvidenceOptions) -> EvidenceVerification {
    let mut failures = Vec::new();
    let pinned = !opts.policy.measurements.is_empty() || opts.measurement_set.is_some();
    if !pinned && !opts.any_measurement {
        failures.push(Failure::new(
            checks::MEASUREMENT_UNPINNED,
            "no launch measurement pinned: give --measurement HEX (or --any-measurement to skip this on purpose)",
        ));
    }

    // 1. The hardware report, and what its chain says about simulation.
    let (report, report_data, simulated) = match ev.tee {
        TeeLabel::SevSnp | TeeLabel::SimSevSnp => verify_snp_part(ev, opts, &mut failures),
        TeeLabel::Tdx | TeeLabel::SimTdx => verify_tdx_part(ev, opts, &mut failures),
        _ => {
            failures.push(Failure::new(
                checks::TEE_LABEL,
                format!("tee {} is not supported", ev.tee),
            ));
            (ReportVerification::Unverified, None, true)
        }
    };
    if let ReportVerification::Snp(_) | ReportVerification::Tdx(_) = report {
        if ev.tee.is_simulated() != simulated {
            failures.push(Failure::new(
                checks::TEE_LABEL,
                format!(
                    "evidence is labelled {}, but its chain ends in {}",
                    ev.tee,
                    if simulated {
                        "a root that is not the vendor's (simulated)"
                    } else {
                        "the vendor's pinned root"
                    }
                ),
            ));
        }
    }

    // 1b. The launch measurement against the auditor-signed set.
    if let Some(set) = &opts.measurement_set {
        if let Err(e) = match_measurement_set(set, &report, simulated) {
            failures.push(Failure::new(checks::MEASUREMENT_SET, e));
        }
    }

    // 2. report_data == binding(key, nonce).
    let unverified_verdict = ev
        .verdict
        .payload
        .as_deref()
        .and_then(|p| Verdict::from_cbor(p).ok());
    let nonce = opts
        .nonce
        .clone()
        .or_else(|| unverified_verdict.as_ref().map(|v| v.inputs.nonce.clone()));
    match (&nonce, report_data) {
        (Some(n), Some(rd)) => {
            let want = binding::report_data(&ev.key(), n);
            if rd != want {
                failures.push(Failure::new(
                    checks::KEY_BINDING,
                    format!(
                        "REPORT_DATA is {}, expected SHA-512(domain || key || nonce {}) = {}",
                        hex::encode(rd),
                        hex::encode(n),
                        hex::encode(want)
                    ),
                ));
            }
            if let Err(e) = binding::check_nonce(n) {
                failures.push(Failure::new(checks::NONCE, e.to_string()));
            }
        }
        (None, _) => failures.push(Failure::new(
            checks::KEY_BINDING,
            "no nonce: neither --nonce nor a readable verdict nonce to recompute REPORT_DATA",
        )),
        (_, None) => failures.push(Failure::new(
            checks::KEY_BINDING,
            "no report data: the report was not readable",
        )),
    }

    // 3. The COSE_Sign1 signature with the bound key.
    let verdict = match ev.verify_verdict_signature() {
        Ok(v) => Some(v),
        Err(e) => {
            failures.push(Failure::new(checks::VERDICT_SIGNATURE, e.to_string()));
            None
        }
    };

    // 4. The verdict's own nonce against the founder's.
    let mut nonce_checked = false;
    if let (Some(v), Some(n)) = (&verdict, &opts.nonce) {
        nonce_checked = true;
        if &v.inputs.nonce != n {
            failures.push(Failure::new(
                checks::NONCE,
                format!(
                    "verdict nonce is {}, expected {}",
                    hex::encode(&v.inputs.nonce),
                    hex::encode(n)
                ),
            ));
        }
    }
    if let Some(v) = &verdict {
        let ok = match (ev.tee.is_snp(), simulated) {
            (true, false) => v.isolation == Isolation::SevSnp,
            (false, false) => v.isolation == Isolation::Tdx,
            (_, true) => matches!(v.isolation, Isolation::Vm | Isolation::Process),
        };
        if !ok {
            failures.push(Failure::new(
                checks::ISOLATION,
                format!(
                    "verdict isolation is {}, but the evidence is {}{}",
                    v.isolation,
                    if simulated { "simulated " } else { "" },
                    if ev.tee.is_snp() { "SEV-SNP" } else { "TDX" }
                ),
            ));
        }
    }
    EvidenceVerification {
        label: ev.tee,
        simulated,
        report,
        verdict,
        measurement_pinned: pinned,
        nonce_checked,
        failures,
    }
}

/// Looks the verified report's launch measurement up in the set: SNP by measurement and guest policy, TDX by
/// MRTD and RTMRs, simulated evidence among the set's sim entries.
fn match_measurement_set(
    set: &measurements::set::TrustedSet,
    report: &ReportVerification,
    simulated: bool,
) -> Result<(), String> {
    match report {
        ReportVerification::Snp(v) if simulated => set
            .match_sim(&v.report.measurement)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        ReportVerification::Snp(v) => set
            .match_snp_policy(&v.report.measurement, v.report.policy.0)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        ReportVerification::Tdx(v) => {
            let td = v.quote.td();
            set.match_tdx(&td.mrtd, &td.rtmr)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        _ => Err(format!(
            "no launch measurement to look up in {}: the report was not verified",
            set.name()
        )),
    }
}

fn verify_snp_part(
    ev: &Evidence,
    opts: &EvidenceOptions,
    failures: &mut Vec<Failure>,
) -> (ReportVerification, Option<[u8; 64]>, bool) {
    let report = match AttestationReport::from_bytes(&ev.report) {
        Ok(r) => r,
        Err(e) => {
            failures.push(Failure::new(checks::REPORT_FORMAT, e.to_string()));
            return (ReportVerification::Unverified, None, ev.tee.is_simulated());
        }
    };
    let bundle = match CertBundle::from_der_list(&ev.certs) {
        Ok(b) => b,
        Err(e) => {
            failures.push(Failure::new(checks::CERTS, e.to_string()));
            return (
                ReportVerification::Unverified,
                Some(report.report_data),
                ev.tee.is_simulated(),
            );
        }
    };
    // The root decides simulation; whether it is acceptable is decided here, with its own check name.
    let chain_opts = ChainOptions {
        allow_simulated: true,
        ..opts.chain.clone()
    };
    let mut v = snp::verify_report(&report, &bundle, &chain_opts, &opts.policy);
    let simulated = v.chain.root == RootKind::Unpinned;
    if simulated && !opts.chain.allow_simulated {
        // First in both lists, so the report's own result is not "verified" either.
        v.failures.insert(
            0,
            Failure::new(
                checks::SIMULATED,
                "SIMULATED evidence: the chain does not end in a pinned AMD ARK (give --allow-simulated to accept it)",
            ),
        );
    }
    failures.extend(v.failures.iter().cloned());
    let rd = report.report_data;
    (ReportVerification::Snp(Box::new(v)), Some(rd), simulated)
}

fn verify_tdx_part(
    ev: &Evidence,
    opts: &EvidenceOptions,
    failures: &mut Vec<Failure>,
) -> (ReportVerification, Option<[u8; 64]>, bool) {
    let tdx_policy = crate::tdx::Policy {
        mrtd: opts.policy.measurements.iter().map(|m| m.0).collect(),
        ..crate::tdx::Policy::default()
    };
    // The founder's collateral wins over the evidence's (see `tdx::collateral::choose_for_evidence`).
    let chosen = match crate::tdx::collateral::choose_for_evidence(
        ev.collateral.as_ref(),
        opts.tdx_collateral.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            failures.push(Failure::new("collateral-format", e));
            return (ReportVerification::Unverified, None, ev.tee.is_simulated());
        }
    };
    match crate::tdx::verify_quote_for_evidence_chosen(
        &ev.report,
        &ev.certs,
        chosen,
        opts.chain.at.unix_timestamp(),
        &tdx_policy,
        true,
    ) {
        Ok(v) => {
            let simulated = v.simulated;
            if simulated && !opts.chain.allow_simulated {
                failures.push(Failure::new(
                    checks::SIMULATED,
                    "SIMULATED evidence: the PCK chain does not end in the pinned Intel root (give --allow-simulated)",
                ));
            }
            for f in &v.failures {
                failures.push(Failure::new(f.check.clone(), f.detail()));
            }
            let rd = v.quote.td().report_data;
            (ReportVerification::Tdx(Box::new(v)), Some(rd), simulated)
        }
        Err(e) => {
            failures.push(Failure::new(checks::TDX, e.to_string()));
            (ReportVerification::Unverified, None, ev.tee.is_simulated())
        }
    }
}
