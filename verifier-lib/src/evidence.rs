//! Verification of a fenced-run evidence bundle: report, key binding, COSE signature, nonce, measurement.
//!
//! The order is fixed: the hardware report (chain, signature, policy), then `report_data` against the binding
//! of the bundle's key and nonce, then the verdict's COSE_Sign1 signature with that key, then the verdict's own
//! nonce against the founder's. Whether evidence is simulated is decided by the root of its chain alone.
//! Then what the founder pays for: the launch measurement (the whole image: for TDX MRTD and the RTMRs of
//! kernel, initramfs and command line), the verdict's counts against its outcome, and the founder's pins on the
//! run itself (outcome, commit, tree, patch, job, isolation), each a check of its own.

use crate::failure::Failure;
use crate::snp::{self, CertBundle, ChainOptions, Policy, RootKind, SnpVerification};
use attestation::binding;
use attestation::evidence::{Evidence, EvidenceError, TeeLabel};
use attestation::hex::Hex;
use attestation::snp::AttestationReport;
use attestation::verdict::{Isolation, Outcome, Verdict};
use std::borrow::Cow;

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
    /// No nonce was given and `--no-nonce` was not given: freshness would go unchecked.
    pub const NONCE_UNPINNED: &str = "nonce-unpinned";
    /// A launch-measurement pin does not cover the whole image (TDX: MRTD without RTMR1 and RTMR2).
    pub const MEASUREMENT_INCOMPLETE: &str = "measurement-incomplete";
    /// The verdict's test counts contradict its outcome (`tests_passed` with failures counted, ...).
    pub const VERDICT_COUNTS: &str = "verdict-counts";
    /// `--expect-outcome`: the verdict's outcome is none of the expected ones.
    pub const PIN_OUTCOME: &str = "pin-outcome";
    /// `--commit`: the verdict's repository commit is not the pinned one (or prefix).
    pub const PIN_COMMIT: &str = "pin-commit";
    /// `--tree`: the verdict's tree hash after the patch is not the pinned one.
    pub const PIN_TREE: &str = "pin-tree";
    /// `--protect-tree`: the tree of the protected paths the test phase ran is not the pinned one.
    pub const PIN_PROTECT_TREE: &str = "pin-protect-tree";
    /// `--patch`/`--patch-sha256`: the verdict's patch SHA-256 is not the pinned one.
    pub const PIN_PATCH: &str = "pin-patch";
    /// `--job`/`--job-sha256`: the verdict's job SHA-256 is not the pinned one.
    pub const PIN_JOB: &str = "pin-job";
    /// `--isolation`: the verdict's isolation tier is not the pinned one.
    pub const PIN_ISOLATION: &str = "pin-isolation";
    /// `--expect-tests-ran`: the verdict counts no test (no counts, or zero passed and zero failed).
    pub const PIN_TESTS_RAN: &str = "pin-tests-ran";
    /// `--min-failed N`: the verdict counts fewer than N failed tests.
    pub const PIN_MIN_FAILED: &str = "pin-min-failed";
    /// `--repository URL`: the verdict's `repository.url` (the URL the fence fetched) is not the pinned one, or
    /// the repository was not fetched by URL.
    pub const PIN_REPOSITORY: &str = "pin-repository";
}

/// The RTMRs that a TDX image pin must cover: RTMR1 (boot loader and kernel) and RTMR2 (command line and
/// initramfs), as OVMF/TDVF map PCRs 2-6 and 8-15 onto them.
pub const TDX_IMAGE_RTMRS: [usize; 2] = [1, 2];

/// The founder's pins on the run itself; each one given is a check of its own, and evidence passes only when
/// every pin given holds. A pin left out is not checked (the outcome's absence is said in the output).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunPins {
    /// The outcome must be one of these (`--expect-outcome`, repeatable).
    pub expect_outcome: Vec<Outcome>,
    /// The repository commit: the full object id or a prefix of at least `MIN_COMMIT_PREFIX` (12) hex digits,
    /// lower case (see [`parse_commit_pin`]).
    pub commit: Option<String>,
    /// The tree hash of the repository after the patch, the full object id, lower case.
    pub tree: Option<String>,
    /// The git tree of the protected paths (`[test] protect`) as the test phase ran them, the full object id,
    /// lower case.
    pub protect_tree: Option<String>,
    /// SHA-256 of the patch bytes.
    pub patch_sha256: Option<[u8; 32]>,
    /// SHA-256 of the job file bytes.
    pub job_sha256: Option<[u8; 32]>,
    /// The isolation tier recorded in the verdict.
    pub isolation: Option<Isolation>,
    /// At least one test must be counted: passed + failed > 0 (`--expect-tests-ran`).
    pub expect_tests_ran: bool,
    /// At least this many failed tests must be counted (`--min-failed N`; with `--expect-outcome tests_failed`,
    /// "the base reproduces the bug").
    pub min_failed: Option<u64>,
    /// The URL the fence fetched the repository from (`--repository URL`): the verdict's `repository.url`,
    /// compared byte for byte.
    pub repository: Option<String>,
    /// `--expect-egress-only HOST[:PORT]...`: every connection the transcript records as let through is to one
    /// of these (docs/transcript.md).
    pub expect_egress_only: Option<Vec<crate::transcript::EgressPin>>,
    /// `--expect-cut`: the transcript has a cut event that held, before any test-start event.
    pub expect_cut: bool,
}

/// The shortest commit prefix `--commit` accepts (12 hex digits, 48 bits).
pub const MIN_COMMIT_PREFIX: usize = 12;

/// Why a `--commit`, `--tree` or `--protect-tree` pin is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// The pin is not hexadecimal (as given).
    #[error("{0:?} is not hex")]
    NotHex(String),
    /// A commit pin of this many digits: too short to name one object, or longer than an object id.
    #[error("{0} hex digits; a commit pin is the full object id or a prefix of at least {MIN_COMMIT_PREFIX} digits (at most 64)")]
    CommitLength(usize),
    /// A tree pin of this many digits: not a full object id.
    #[error("{0} hex digits; a tree pin is a full object id (40 or 64 digits)")]
    TreeLength(usize),
}

/// Checks a `--commit` pin: hex, 12 to 64 digits (a SHA-1 or SHA-256 object id or a prefix of one); returned
/// in lower case.
pub fn parse_commit_pin(s: &str) -> Result<String, PinError> {
    let t = s.trim().to_ascii_lowercase();
    if !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(PinError::NotHex(s.to_owned()));
    }
    if !(MIN_COMMIT_PREFIX..=64).contains(&t.len()) {
        return Err(PinError::CommitLength(t.len()));
    }
    Ok(t)
}

/// Checks a `--tree` pin: a full object id (40 hex digits for SHA-1, 64 for SHA-256); returned in lower case.
pub fn parse_tree_pin(s: &str) -> Result<String, PinError> {
    let t = s.trim().to_ascii_lowercase();
    if !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(PinError::NotHex(s.to_owned()));
    }
    if t.len() != 40 && t.len() != 64 {
        return Err(PinError::TreeLength(t.len()));
    }
    Ok(t)
}

/// One pin the founder gave, and what the verdict held.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PinCheck {
    /// The check's name (`pin-outcome`, `pin-commit`, ...).
    pub check: &'static str,
    /// What the founder pinned.
    pub wanted: String,
    /// What the verdict holds (`null` when the verdict could not be read or lacks the field).
    pub seen: Option<String>,
    /// Whether the pin holds.
    pub held: bool,
}

/// What the founder accepts of the launch whatever the TEE: the launch measurements, debugging, REPORT_DATA
/// (`--measurement`, `--allow-debug`, `--report-data`, and the same keys of `--policy FILE`). Evidence of either
/// TEE is judged by its own TEE's policy together with these ([`SharedPolicy::snp_policy`],
/// [`SharedPolicy::tdx_policy`]); neither TEE's policy is read for the other's evidence.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SharedPolicy {
    /// Accepted launch measurements (any of): SEV-SNP MEASUREMENT, TDX MRTD. On TDX evidence they pin the
    /// firmware only, and the kernel, initramfs and command line go unpinned: a `measurement-incomplete` failure
    /// unless [`EvidenceOptions::leave_rtmrs_unpinned`].
    pub measurements: Vec<Hex<48>>,
    /// Accept a guest whose memory the host can read (an SEV-SNP guest policy with DEBUG, a debug TD).
    pub allow_debug: bool,
    /// Required REPORT_DATA (SEV-SNP) or REPORTDATA (TDX). Used when the TEE's own policy requires none.
    pub report_data: Option<Hex<64>>,
}

impl SharedPolicy {
    /// Whether nothing is pinned or allowed here (the TEE policies then apply as they are).
    pub fn is_empty(&self) -> bool {
        *self == SharedPolicy::default()
    }

    /// Moves the shared fields out of an SEV-SNP policy (its `measurements`, `allow_debug`, `report_data`, left
    /// at their defaults): how the CLI splits the flags it parsed as one SEV-SNP policy.
    pub fn take_from(snp: &mut Policy) -> SharedPolicy {
        SharedPolicy {
            measurements: std::mem::take(&mut snp.measurements),
            allow_debug: std::mem::take(&mut snp.allow_debug),
            report_data: snp.report_data.take(),
        }
    }

    /// The SEV-SNP policy SEV-SNP evidence is judged by: `snp` with these measurements added to its own,
    /// debugging allowed when either allows it, and this REPORT_DATA when `snp` requires none.
    pub fn snp_policy<'a>(&self, snp: &'a Policy) -> Cow<'a, Policy> {
        if self.is_empty() {
            return Cow::Borrowed(snp);
        }
        let mut p = snp.clone();
        p.measurements.extend(self.measurements.iter().copied());
        p.allow_debug |= self.allow_debug;
        if p.report_data.is_none() {
            p.report_data = self.report_data;
        }
        Cow::Owned(p)
    }

    /// The TDX policy TDX evidence is judged by: `tdx` with these measurements added to its MRTDs, debugging
    /// allowed when either allows it, and this REPORT_DATA when `tdx` requires none.
    pub fn tdx_policy<'a>(&self, tdx: &'a crate::tdx::Policy) -> Cow<'a, crate::tdx::Policy> {
        if self.is_empty() {
            return Cow::Borrowed(tdx);
        }
        let mut p = tdx.clone();
        p.mrtd.extend(self.measurements.iter().map(|m| m.0));
        p.allow_debug |= self.allow_debug;
        if p.report_data.is_none() {
            p.report_data = self.report_data.map(|r| r.0);
        }
        Cow::Owned(p)
    }
}

/// How to verify evidence.
#[derive(Clone, Debug, Default)]
pub struct EvidenceOptions {
    /// Time, CRL and whether simulated evidence is acceptable.
    pub chain: ChainOptions,
    /// What applies to evidence of either TEE: the launch measurements, debugging, REPORT_DATA.
    pub shared: SharedPolicy,
    /// The SEV-SNP acceptability policy, for SEV-SNP evidence only (with [`Self::shared`]; its own
    /// `measurements` are pinned launch measurements too).
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
    /// SEV-SNP certificates (VCEK|VLEK, ASK|ASVK, ARK) from outside the evidence: a collateral bundle, the
    /// cache or KDS, for evidence whose host gave no certificate table (its `certs` are then empty). When
    /// given they are used and the evidence's own `certs` are set aside; either way the chain must end in a
    /// pinned AMD ARK (or, with `allow_simulated`, a sim root) and the report must verify under the leaf.
    pub snp_certs: Option<CertBundle>,
    /// Skip the nonce on purpose (`--no-nonce`): without it a missing [`Self::nonce`] is a failure
    /// ([`checks::NONCE_UNPINNED`]), since freshness is the founder's only defence against a replayed run.
    pub no_nonce: bool,
    /// The TDX acceptability policy, for TDX evidence only (with [`Self::shared`]; `tdx-quote`'s policy: TCB
    /// statuses, advisories, debug, SEPT_VE_DISABLE, MR_SERVICETD, attributes, XFAM, MR_CONFIG_ID, MR_OWNER,
    /// MR_OWNER_CONFIG, MRTD, RTMRs). Nothing of [`Self::policy`] applies to TDX evidence.
    pub tdx_policy: crate::tdx::Policy,
    /// TDX evidence: accept an image pin that leaves RTMR1/RTMR2 (kernel, initramfs, command line) unpinned, on
    /// purpose; the output then says which registers were compared.
    pub leave_rtmrs_unpinned: bool,
    /// The founder's pins on the run itself.
    pub pins: RunPins,
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
    /// Exactly which registers were compared with a pin (`measurement`, `policy`, `mrtd`, `rtmr1`, ...,
    /// `sim-measurement`); empty when none was.
    pub pinned_registers: Vec<String>,
    /// Whether the outcome was pinned (`--expect-outcome`).
    pub outcome_pinned: bool,
    /// Every pin on the run that was given, with what the verdict held.
    pub pins: Vec<PinCheck>,
    /// The outcome pin accepts `tests_failed` and neither `--expect-tests-ran` nor `--min-failed` was given:
    /// a run in which no test ran (an install that failed) would satisfy it, and the output says so.
    pub failed_count_unpinned: bool,
    /// The auditors (by the founder's key names) whose signatures made the measurement set trusted.
    pub set_signers: Vec<String>,
    /// Whether the verdict's nonce was compared with the founder's.
    pub nonce_checked: bool,
    /// Every failed check, in the order of the checks.
    pub failures: Vec<Failure>,
    /// The `transcript` check: the fence transcript, its anchor, its pins (docs/transcript.md).
    pub transcript: crate::transcript::TranscriptVerification,
}

impl EvidenceVerification {
    /// Whether every check passed.
    pub fn verified(&self) -> bool {
        self.failures.is_empty()
    }

    /// The fence transcript's hash (SHA-384, lower-case hex) when the evidence carries one; whether it verified
    /// is [`Self::verified`] (a failed `transcript` check is one of the failures).
    pub fn transcript_sha(&self) -> Option<String> {
        self.transcript.sha384.map(hex::encode)
    }
}

/// Decodes and verifies evidence bytes; an undecodable bundle is an error (exit 2 in the CLI).
pub fn verify_evidence_bytes(
    bytes: &[u8],
    opts: &EvidenceOptions,
) -> Result<EvidenceVerification, EvidenceError> {
    Ok(verify_decoded(&Decoded::from_cbor(bytes)?, opts))
}

/// Evidence decoded once: its CBOR and, for SEV-SNP evidence, its report. A caller that must look at the report
/// before verifying (the CLI, to fetch the certificates it names) reads it here, and [`verify_decoded`] verifies
/// the same parsed values: the evidence is decoded once and the report parsed once per verification.
#[derive(Debug)]
pub struct Decoded {
    /// The evidence.
    pub evidence: Evidence,
    /// SEV-SNP evidence: its report, or why it does not parse (a `report-format` failure when verified);
    /// `None` for TDX evidence.
    pub snp_report: Option<Result<AttestationReport, attestation::snp::ReportError>>,
}

impl Decoded {
    /// Decodes evidence bytes and parses an SEV-SNP report inside.
    pub fn from_cbor(bytes: &[u8]) -> Result<Decoded, EvidenceError> {
        Ok(Decoded::new(Evidence::from_cbor(bytes)?))
    }

    /// Parses the SEV-SNP report of decoded evidence.
    pub fn new(evidence: Evidence) -> Decoded {
        let snp_report = evidence
            .tee
            .is_snp()
            .then(|| AttestationReport::from_bytes(&evidence.report));
        Decoded {
            evidence,
            snp_report,
        }
    }
}

/// Verifies evidence decoded by [`Decoded`].
pub fn verify_decoded(d: &Decoded, opts: &EvidenceOptions) -> EvidenceVerification {
    verify_with_report(&d.evidence, d.snp_report.as_ref(), opts)
}

/// Verifies decoded evidence.
pub fn verify_evidence(ev: &Evidence, opts: &EvidenceOptions) -> EvidenceVerification {
    verify_with_report(ev, None, opts)
}

/// [`verify_evidence`], with the SEV-SNP report already parsed when `snp_report` is given.
fn verify_with_report(
    ev: &Evidence,
    snp_report: Option<&Result<AttestationReport, attestation::snp::ReportError>>,
    opts: &EvidenceOptions,
) -> EvidenceVerification {
    let mut failures = Vec::new();
    // A pin counts only for the TEE it applies to: `--mrtd`/`--rtmr` pin nothing of an SEV-SNP report.
    let pinned = opts.measurement_set.is_some()
        || !opts.shared.measurements.is_empty()
        || if ev.tee.is_snp() {
            !opts.policy.measurements.is_empty()
        } else {
            !opts.tdx_policy.mrtd.is_empty() || opts.tdx_policy.rtmr.iter().any(Option::is_some)
        };
    if !pinned && !opts.any_measurement {
        failures.push(Failure::new(
            checks::MEASUREMENT_UNPINNED,
            "no launch measurement pinned: give --measurement HEX, --mrtd HEX with --rtmr N=HEX (TDX), or \
             --measurements SET (or --any-measurement to skip this on purpose)",
        ));
    }
    if opts.nonce.is_none() && !opts.no_nonce {
        failures.push(Failure::new(
            checks::NONCE_UNPINNED,
            "no nonce given: give --nonce HEX (the nonce you sent with the job), or --no-nonce to skip the \
             freshness check on purpose (the verdict may then be a replay of an older run)",
        ));
    }

    // 1. The hardware report, and what its chain says about simulation.
    let (report, report_data, simulated) = match ev.tee {
        TeeLabel::SevSnp | TeeLabel::SimSevSnp => {
            verify_snp_part(ev, snp_report, opts, &mut failures)
        }
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

    // 2. report_data == binding(key, nonce).
    // Without the founder's nonce, the one the (not yet verified) verdict names; decoded only then, so a
    // verification with a nonce decodes the verdict once, after its signature.
    let nonce = opts.nonce.clone().or_else(|| {
        ev.verdict
            .payload
            .as_deref()
            .and_then(|p| Verdict::from_cbor(p).ok())
            .map(|v| v.inputs.nonce)
    });
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

    // 5. The launch measurement: which registers were pinned, and against the auditor-signed set (sim
    //    evidence among the set's sim entries of the verdict's tier, once the verdict is known).
    let mut pinned_registers = flag_pinned_registers(ev, opts, &report);
    if let Some(set) = &opts.measurement_set {
        let tier = verdict.as_ref().map(|v| v.isolation.as_str());
        match match_measurement_set(set, &report, simulated, tier, opts.leave_rtmrs_unpinned) {
            Ok(regs) => {
                for r in regs {
                    if !pinned_registers.contains(&r) {
                        pinned_registers.push(r);
                    }
                }
            }
            Err((check, e)) => failures.push(Failure::new(check, e)),
        }
    }
    if let ReportVerification::Tdx(_) = &report {
        if let Some(missing) = tdx_image_gap(opts) {
            failures.push(Failure::new(checks::MEASUREMENT_INCOMPLETE, missing));
        }
    }

    // 6. The verdict's counts against its outcome, then the founder's pins on the run.
    if let Some(v) = &verdict {
        if let Err(e) = counts_agree(v) {
            failures.push(Failure::new(checks::VERDICT_COUNTS, e));
        }
    }
    let pins = check_pins(&opts.pins, verdict.as_ref());
    for p in &pins {
        if !p.held {
            failures.push(Failure::seen_wanted(
                p.check,
                p.seen.as_deref().unwrap_or("nothing (no verified verdict)"),
                &p.wanted,
            ));
        }
    }
    // 7. The fence transcript: its structure, its anchor report (verified as the first one), RTMR3 on TDX.
    let transcript = verify_transcript(
        ev,
        opts,
        &report,
        report_data,
        verdict.as_ref(),
        &mut failures,
    );
    EvidenceVerification {
        label: ev.tee,
        simulated,
        report,
        verdict,
        measurement_pinned: pinned,
        pinned_registers,
        outcome_pinned: !opts.pins.expect_outcome.is_empty(),
        pins,
        failed_count_unpinned: opts.pins.expect_outcome.contains(&Outcome::TestsFailed)
            && !opts.pins.expect_tests_ran
            && opts.pins.min_failed.is_none(),
        set_signers: opts
            .measurement_set
            .as_ref()
            .map(|t| t.signers.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default(),
        nonce_checked,
        failures,
        transcript,
    }
}

/// The `transcript` check ([`crate::transcript`]): the anchor report is verified here as the first report is
/// (without the founder's REPORT_DATA and RTMR3 pins, which are the first report's).
fn verify_transcript(
    ev: &Evidence,
    opts: &EvidenceOptions,
    first: &ReportVerification,
    first_report_data: Option<[u8; 64]>,
    verdict: Option<&Verdict>,
    failures: &mut Vec<Failure>,
) -> crate::transcript::TranscriptVerification {
    let anchor = ev
        .transcript
        .as_ref()
        .and_then(|t| t.anchor.clone())
        .map(|a| {
            let mut second = ev.clone();
            second.report = a;
            second.transcript = None;
            let mut o = opts.clone();
            o.shared.report_data = None;
            o.policy.report_data = None;
            o.tdx_policy.report_data = None;
            o.tdx_policy.rtmr[3] = None;
            let mut fs = Vec::new();
            let (report, report_data, _) = if ev.tee.is_snp() {
                verify_snp_part(&second, None, &o, &mut fs)
            } else {
                verify_tdx_part(&second, &o, &mut fs)
            };
            crate::transcript::AnchorCheck {
                report,
                report_data,
                failures: fs,
            }
        });
    crate::transcript::verify(
        ev,
        first,
        first_report_data,
        anchor,
        verdict,
        crate::transcript::Pins {
            egress_only: opts.pins.expect_egress_only.as_deref(),
            expect_cut: opts.pins.expect_cut,
        },
        failures,
    )
}

/// The registers compared with the flags' pins (`--measurement`, `--mrtd`, `--rtmr N=HEX`).
fn flag_pinned_registers(
    ev: &Evidence,
    opts: &EvidenceOptions,
    report: &ReportVerification,
) -> Vec<String> {
    let mut out = Vec::new();
    let tdx = match report {
        ReportVerification::Tdx(_) => true,
        ReportVerification::Snp(_) => false,
        _ => !ev.tee.is_snp(),
    };
    if tdx {
        if !opts.tdx_policy.mrtd.is_empty()
            || (opts.leave_rtmrs_unpinned && !opts.shared.measurements.is_empty())
        {
            out.push("mrtd".to_owned());
        }
        for (i, r) in opts.tdx_policy.rtmr.iter().enumerate() {
            if r.is_some() {
                out.push(format!("rtmr{i}"));
            }
        }
    } else if !opts.policy.measurements.is_empty() || !opts.shared.measurements.is_empty() {
        out.push("measurement".to_owned());
    }
    out
}

/// For TDX evidence pinned by flags: what the pin leaves out of the image, unless RTMRs are deliberately left
/// unpinned (`None` when the flags pin the whole image or pin nothing, the set being judged on its own).
fn tdx_image_gap(opts: &EvidenceOptions) -> Option<String> {
    let raw = !opts.shared.measurements.is_empty();
    let mrtd = !opts.tdx_policy.mrtd.is_empty();
    let missing: Vec<String> = TDX_IMAGE_RTMRS
        .iter()
        .filter(|&&i| opts.tdx_policy.rtmr[i].is_none())
        .map(|i| format!("RTMR{i}"))
        .collect();
    if opts.leave_rtmrs_unpinned {
        return None;
    }
    if raw {
        return Some(String::from(
            "--measurement on TDX evidence would pin MRTD only (the firmware); the kernel, initramfs and command \
             line are measured into RTMR1 and RTMR2: give --mrtd HEX --rtmr 1=HEX --rtmr 2=HEX, or --measurements \
             SET whose TDX entry lists rtmr1 and rtmr2 (or --leave-rtmrs-unpinned to accept any image on purpose)"
        ));
    }
    let flags = mrtd || opts.tdx_policy.rtmr.iter().any(Option::is_some);
    if !flags {
        return None;
    }
    let mut gaps = Vec::new();
    if !mrtd {
        gaps.push("MRTD".to_owned());
    }
    gaps.extend(missing);
    if gaps.is_empty() {
        None
    } else {
        Some(format!(
            "the TDX image is not pinned: {} not pinned (MRTD covers the firmware, RTMR1 the kernel, RTMR2 the \
             command line and initramfs); give --mrtd HEX and --rtmr N=HEX for each, or --leave-rtmrs-unpinned \
             to leave the RTMRs unpinned on purpose",
            gaps.join(", ")
        ))
    }
}

/// Looks the verified report's launch measurement up in the set: SNP by measurement and guest policy, TDX by
/// MRTD and RTMRs (the entry must list RTMR1 and RTMR2 unless they are left unpinned on purpose), simulated
/// evidence (SNP or TDX) among the set's sim entries only, of the verdict's tier when it is known. Returns the
/// registers compared, or the failing check and why.
fn match_measurement_set(
    set: &measurements::set::TrustedSet,
    report: &ReportVerification,
    simulated: bool,
    tier: Option<&str>,
    leave_rtmrs_unpinned: bool,
) -> Result<Vec<String>, (&'static str, String)> {
    let not_in = |e: measurements::set::NotInSet| (checks::MEASUREMENT_SET, e.to_string());
    match report {
        ReportVerification::Snp(v) if simulated => set
            .match_sim_tier(&v.report.measurement, tier)
            .map(|_| vec!["sim-measurement".to_owned()])
            .map_err(not_in),
        ReportVerification::Tdx(v) if simulated => set
            .match_sim_tier(&v.quote.td().mrtd, tier)
            .map(|_| vec!["sim-measurement".to_owned()])
            .map_err(not_in),
        ReportVerification::Snp(v) => set
            .match_snp_policy(&v.report.measurement, v.report.policy.0)
            .map(|_| vec!["measurement".to_owned(), "policy".to_owned()])
            .map_err(not_in),
        ReportVerification::Tdx(v) => {
            let td = v.quote.td();
            let e = set.match_tdx(&td.mrtd, &td.rtmr).map_err(not_in)?;
            let listed = [&e.rtmr0, &e.rtmr1, &e.rtmr2, &e.rtmr3];
            let mut regs = vec!["mrtd".to_owned()];
            regs.extend(
                listed
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.is_some())
                    .map(|(i, _)| format!("rtmr{i}")),
            );
            let missing: Vec<String> = TDX_IMAGE_RTMRS
                .iter()
                .filter(|&&i| listed[i].is_none())
                .map(|i| format!("RTMR{i}"))
                .collect();
            if !missing.is_empty() && !leave_rtmrs_unpinned {
                return Err((
                    checks::MEASUREMENT_INCOMPLETE,
                    format!(
                        "the TDX entry of {} with MRTD {} does not list {}: the kernel, initramfs and command line \
                         would go unchecked (pin the set with --tdx-event-log, or give --leave-rtmrs-unpinned to \
                         accept it on purpose)",
                        set.name(),
                        e.mrtd,
                        missing.join(", ")
                    ),
                ));
            }
            Ok(regs)
        }
        _ => Err((
            checks::MEASUREMENT_SET,
            format!(
                "no launch measurement to look up in {}: the report was not verified",
                set.name()
            ),
        )),
    }
}

/// Whether the verdict's test counts agree with its outcome: `tests_passed` and `no_tests_observed` have no
/// failure counted, `tests_passed` counted at least one passing test, `no_tests_observed` ran none, and
/// `counts_unparsed` carries no counts. (A verdict without counts is judged by its outcome alone.)
pub(crate) fn counts_agree(v: &Verdict) -> Result<(), String> {
    let Some(c) = &v.tests else {
        return Ok(());
    };
    let counts = format!(
        "{} passed, {} failed, {} skipped (parser {})",
        c.passed, c.failed, c.skipped, c.parser
    );
    let wrong = match v.outcome {
        Outcome::TestsPassed if c.failed > 0 => Some("no failed test"),
        Outcome::TestsPassed if c.passed == 0 => Some("at least one passed test"),
        Outcome::NoTestsObserved if c.passed > 0 || c.failed > 0 => Some("no test run"),
        Outcome::CountsUnparsed => Some("no counts (they could not be read)"),
        _ => None,
    };
    match wrong {
        Some(want) => Err(format!(
            "outcome {} with {counts}; {} requires {want}",
            v.outcome, v.outcome
        )),
        None => Ok(()),
    }
}

/// Each pin given, against the verified verdict.
fn check_pins(pins: &RunPins, verdict: Option<&Verdict>) -> Vec<PinCheck> {
    let mut out = Vec::new();
    let inputs = verdict.map(|v| &v.inputs);
    if !pins.expect_outcome.is_empty() {
        let seen = verdict.map(|v| v.outcome);
        out.push(PinCheck {
            check: checks::PIN_OUTCOME,
            wanted: format!(
                "{}{}",
                if pins.expect_outcome.len() > 1 {
                    "one of "
                } else {
                    ""
                },
                pins.expect_outcome
                    .iter()
                    .map(|o| o.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            seen: seen.map(|o| o.as_str().to_owned()),
            held: seen.is_some_and(|o| pins.expect_outcome.contains(&o)),
        });
    }
    let text = |check: &'static str,
                want: &Option<String>,
                seen: Option<&Option<String>>,
                prefix: bool,
                out: &mut Vec<PinCheck>| {
        if let Some(w) = want {
            let seen = seen.map(|s| s.clone().unwrap_or_else(|| "null".to_owned()));
            let held = seen.as_deref().is_some_and(|s| {
                let s = s.to_ascii_lowercase();
                if prefix {
                    s.len() >= w.len() && s.starts_with(w.as_str())
                } else {
                    s == *w
                }
            });
            out.push(PinCheck {
                check,
                wanted: if prefix && w.len() < 40 {
                    format!("{w} (prefix)")
                } else {
                    w.clone()
                },
                seen,
                held,
            });
        }
    };
    text(
        checks::PIN_COMMIT,
        &pins.commit,
        inputs.map(|i| &i.commit),
        true,
        &mut out,
    );
    text(
        checks::PIN_TREE,
        &pins.tree,
        inputs.map(|i| &i.tree),
        false,
        &mut out,
    );
    text(
        checks::PIN_PROTECT_TREE,
        &pins.protect_tree,
        inputs.map(|i| &i.test_tree),
        false,
        &mut out,
    );
    text(
        checks::PIN_PATCH,
        &pins.patch_sha256.map(hex::encode),
        inputs.map(|i| &i.patch_sha256),
        false,
        &mut out,
    );
    text(
        checks::PIN_JOB,
        &pins.job_sha256.map(hex::encode),
        inputs.map(|i| &i.job_sha256),
        false,
        &mut out,
    );
    if let Some(want) = &pins.repository {
        let seen = verdict.map(|v| match &v.repository {
            Some(r) => r.url.clone(),
            None => "none (the repository came in the bundle, not by URL)".to_owned(),
        });
        out.push(PinCheck {
            check: checks::PIN_REPOSITORY,
            wanted: want.clone(),
            held: verdict
                .and_then(|v| v.repository.as_ref())
                .is_some_and(|r| r.url == *want),
            seen,
        });
    }
    if let Some(want) = pins.isolation {
        let seen = verdict.map(|v| v.isolation);
        out.push(PinCheck {
            check: checks::PIN_ISOLATION,
            wanted: want.as_str().to_owned(),
            seen: seen.map(|i| i.as_str().to_owned()),
            held: seen == Some(want),
        });
    }
    let counted = |v: &Verdict| match &v.tests {
        Some(c) => format!("{} passed, {} failed", c.passed, c.failed),
        None => "no counts (tests: null)".to_owned(),
    };
    if pins.expect_tests_ran {
        out.push(PinCheck {
            check: checks::PIN_TESTS_RAN,
            wanted: "at least one test counted (passed + failed > 0)".to_owned(),
            seen: verdict.map(counted),
            held: verdict.is_some_and(tests_ran),
        });
    }
    if let Some(n) = pins.min_failed {
        out.push(PinCheck {
            check: checks::PIN_MIN_FAILED,
            wanted: format!("at least {n} failed test(s) counted"),
            seen: verdict.map(counted),
            held: verdict.is_some_and(|v| v.tests.as_ref().is_some_and(|c| c.failed >= n)),
        });
    }
    out
}

/// Whether the verdict counts at least one test (passed + failed > 0); `false` when `tests` is null or counts
/// zero passed and zero failed: the run's outcome then says nothing about the repository's tests.
pub fn tests_ran(v: &Verdict) -> bool {
    v.tests
        .as_ref()
        .is_some_and(|c| c.passed.saturating_add(c.failed) > 0)
}

fn verify_snp_part(
    ev: &Evidence,
    parsed: Option<&Result<AttestationReport, attestation::snp::ReportError>>,
    opts: &EvidenceOptions,
    failures: &mut Vec<Failure>,
) -> (ReportVerification, Option<[u8; 64]>, bool) {
    let parsed_here;
    let parsed = match parsed {
        Some(p) => p,
        None => {
            parsed_here = AttestationReport::from_bytes(&ev.report);
            &parsed_here
        }
    };
    let report = match parsed {
        Ok(r) => r.clone(),
        Err(e) => {
            failures.push(Failure::new(checks::REPORT_FORMAT, e.to_string()));
            return (ReportVerification::Unverified, None, ev.tee.is_simulated());
        }
    };
    let from_evidence = match &opts.snp_certs {
        Some(b) => Ok(b.clone()),
        None => CertBundle::from_der_list(&ev.certs),
    };
    let bundle = match from_evidence {
        Ok(b) => b,
        Err(e) => {
            let advice = if ev.certs.is_empty() {
                " (the host gave no certificate table: verify with --online, --cache DIR or --collateral BUNDLE \
                 from `verify-attestation fetch`)"
            } else {
                ""
            };
            failures.push(Failure::new(checks::CERTS, format!("{e}{advice}")));
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
    let input = snp::SnpInput {
        report: &ev.report,
        certs: &bundle,
    };
    // The report parsed once, above; the signature is checked over the bytes as received.
    let rd = report.report_data;
    let mut v = snp::verify_parsed(report, &input, &chain_opts);
    snp::validate(&mut v, &opts.shared.snp_policy(&opts.policy));
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
    (ReportVerification::Snp(Box::new(v)), Some(rd), simulated)
}

fn verify_tdx_part(
    ev: &Evidence,
    opts: &EvidenceOptions,
    failures: &mut Vec<Failure>,
) -> (ReportVerification, Option<[u8; 64]>, bool) {
    // The founder's TDX policy with what applies to either TEE; shared measurements count as MRTDs (the gap
    // is named in verify_evidence). Nothing of the SEV-SNP policy is read.
    let tdx_policy = opts.shared.tdx_policy(&opts.tdx_policy);
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
            failures.extend(v.failures.iter().cloned());
            let rd = v.quote.td().report_data;
            (ReportVerification::Tdx(Box::new(v)), Some(rd), simulated)
        }
        Err(e) => {
            failures.push(Failure::new(checks::TDX, e.to_string()));
            (ReportVerification::Unverified, None, ev.tee.is_simulated())
        }
    }
}
