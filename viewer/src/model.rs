//! The page model: what the viewer shows, taken from `verifier_lib`'s verification of the evidence (or from a
//! verdict JSON alone, shown as not verified). Every value is kept as data here; escaping is the renderer's job.

use attestation::evidence::Evidence;
use attestation::verdict::{Outcome, Verdict};
use verifier_lib::output::{claim_of_check, evidence_notes, evidence_tee};
use verifier_lib::{
    verify_evidence_with as verify_evidence, EvidenceOptions, EvidenceVerification, PinCheck,
    ReportVerification,
};

/// The overall result, shown on every section where it applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every check passed and the chain ends in the vendor's root.
    Verified,
    /// Every check passed, but the chain ends in a root that is not the vendor's (sim tiers).
    Simulated,
    /// At least one check failed.
    Rejected,
    /// No evidence was given (a verdict JSON alone): nothing was verified.
    Unverified,
}

impl Status {
    /// The word shown (`VERIFIED`, `SIMULATED`, `REJECTED`, `NOT VERIFIED`).
    pub fn word(self) -> &'static str {
        match self {
            Status::Verified => "VERIFIED",
            Status::Simulated => "SIMULATED",
            Status::Rejected => "REJECTED",
            Status::Unverified => "NOT VERIFIED",
        }
    }
}

/// One failed check, as verify-attestation names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedCheck {
    /// The check name (`report-signature`, `pin-commit`, ...).
    pub check: String,
    /// What was seen and what was expected.
    pub detail: String,
}

/// One node of the attestation chain (a certificate, the QE report or the report itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainNode {
    /// Its role: `ARK`, `ASK`, `VCEK`, `report`, `Intel root`, `PCK`, `QE report`, `quote`, ...
    pub role: String,
    /// The certificate subject, or what the node is.
    pub subject: String,
    /// notBefore .. notAfter (RFC 3339), for certificates.
    pub validity: Option<(String, String)>,
    /// Whether the verification time lies inside the validity (certificates only).
    pub valid_at: Option<bool>,
    /// The checks that establish this node (links on the page).
    pub checks: Vec<String>,
    /// Whether those checks passed.
    pub ok: bool,
}

/// A launch-measurement register, and whether a pin compared it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Register {
    /// `measurement`, `mrtd`, `rtmr0`..`rtmr3`.
    pub name: String,
    /// Hex.
    pub value: String,
    /// Whether a pin (flag or set entry) compared it.
    pub pinned: bool,
}

/// What pinned the launch measurement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeasurementPin {
    /// Values given with `--measurement`/`--mrtd`/`--rtmr` (hex, with the register name).
    pub flags: Vec<(String, String)>,
    /// The measurement set (`name version (path)`), when one was given.
    pub set: Option<String>,
    /// The set entry that matched, as its parameters.
    pub entry: Option<String>,
    /// The auditors whose signatures made the set trusted.
    pub auditors: Vec<String>,
    /// How many auditors were required, when a set was given.
    pub required: Option<usize>,
    /// `--any-measurement` was given.
    pub any: bool,
}

/// Everything the page shows.
#[derive(Clone, Debug)]
pub struct Page {
    /// The file the document came from, as given.
    pub source: String,
    /// The overall result.
    pub status: Status,
    /// Whether the chain ends in a root that is not the vendor's.
    pub simulated: bool,
    /// The verdict: verified by its signature when there was evidence, else read from the JSON as it is.
    pub verdict: Option<Verdict>,
    /// Every failed check, in the verifier's order.
    pub failures: Vec<FailedCheck>,
    /// The verifier's notes (outcome not pinned, simulated, measurement not pinned, nonce not checked, ...).
    pub notes: Vec<String>,
    /// The founder's pins on the run and whether each held.
    pub pins: Vec<PinCheck>,
    /// Whether the verdict's nonce was compared with the founder's.
    pub nonce_checked: bool,
    /// The `tee` the chain implies, and the label the evidence carries.
    pub tee: Option<(String, String)>,
    /// The chain, root first.
    pub chain: Vec<ChainNode>,
    /// The launch measurement registers.
    pub registers: Vec<Register>,
    /// What pinned them.
    pub measurement_pin: MeasurementPin,
    /// TCB rows (name, value).
    pub tcb: Vec<(String, String)>,
    /// Guest policy / TD attribute rows (name, value).
    pub policy: Vec<(String, String)>,
    /// The verification time (RFC 3339).
    pub checked_at: Option<String>,
    /// What the founder's browser needs to verify the evidence itself (`None` for a verdict JSON).
    pub browser: Option<crate::browser::BrowserCheck>,
    /// The fence transcript as a timeline (docs/transcript.md): each event's name and what it says, in order;
    /// empty when the evidence carries none (or for a verdict JSON).
    pub transcript: Vec<(String, String)>,
}

/// One transcript event as the timeline shows it: its name and its fields in words.
pub fn timeline_entry(e: &attestation::transcript::Event) -> (String, String) {
    use attestation::transcript::Event;
    let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "none".into());
    let num = |o: Option<u64>| o.map_or_else(|| "-".into(), |n| n.to_string());
    let detail = match e {
        Event::AgentReady {
            agent_version,
            image,
        } => format!("{agent_version}; image {}", opt(image)),
        Event::JobHeader {
            nonce,
            job_sha256,
            bundle_sha256,
        } => format!(
            "nonce {}; job {}; bundle {}",
            hex::encode(nonce),
            opt(job_sha256),
            opt(bundle_sha256)
        ),
        Event::ReportRequested { report_data } => {
            format!("REPORT_DATA {}", hex::encode(report_data))
        }
        Event::Intake {
            accepted,
            job_sha256,
            detail,
        } => format!(
            "{}; job {}{}",
            if *accepted { "accepted" } else { "refused" },
            opt(job_sha256),
            if detail.is_empty() {
                String::new()
            } else {
                format!("; {detail}")
            }
        ),
        Event::InstallStart { command, allow, .. } => {
            format!("{command}; allow [{}]", allow.join(", "))
        }
        Event::Egress {
            host,
            port,
            allowed,
            bytes_up,
            bytes_down,
        } => format!(
            "{host}:{port} {}; {bytes_up} bytes up, {bytes_down} down",
            if *allowed { "allowed" } else { "DENIED" }
        ),
        Event::Cut {
            pid1_reaped,
            processes_left,
            held,
        } => format!(
            "{}: install PID 1 reaped {pid1_reaped}, {processes_left} process(es) left",
            if *held { "held" } else { "DID NOT HOLD" }
        ),
        Event::TestStart { command } => command.clone(),
        Event::TestEnd {
            exit_code,
            signal,
            passed,
            failed,
            skipped,
        } => format!(
            "exit {}, signal {}; {} passed, {} failed, {} skipped",
            exit_code.map_or_else(|| "-".into(), |n| n.to_string()),
            signal.map_or_else(|| "-".into(), |n| n.to_string()),
            num(*passed),
            num(*failed),
            num(*skipped)
        ),
        Event::Verdict { outcome, sha384 } => format!("{outcome}; SHA-384 {}", hex::encode(sha384)),
        other => format!("{other:?}"),
    };
    (e.name().to_owned(), detail)
}

/// The claims (as [`verifier_lib::output::CLAIMS`] names them) that every section's content rests on: that the
/// report is genuine and acceptable (chain, TCB, policy, collateral), that it ran the pinned code (measurement),
/// and that the verdict is the one that code signed (key binding, verdict signature). A failure of any of them
/// rejects every section; a failed pin on the run (commit, nonce, outcome, ...) rejects only the sections that
/// show it.
pub const FOUNDATION_CLAIMS: [&str; 7] = [
    "chain",
    "tcb",
    "policy",
    "collateral",
    "measurement",
    "key binding",
    "verdict signature",
];

/// Why no page could be made.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// The file is neither evidence (CBOR) nor a verdict (JSON).
    #[error("{source_name}: not fenced-run evidence ({evidence}) and not a verdict JSON")]
    Unreadable {
        /// The file.
        source_name: String,
        /// Why it is not evidence.
        evidence: String,
    },
    /// The file looks like a verdict JSON but is not a valid one.
    #[error("{source_name}: not a valid fenced-run verdict JSON: {why}")]
    BadVerdict {
        /// The file.
        source_name: String,
        /// Why.
        why: String,
    },
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// What an outcome means, in one sentence: for the patch when the run applied one (`patched`: the verdict has a
/// patch SHA-256; only `tests_failed` may blame it), else for the repository as it was given.
pub fn meaning(o: Outcome, patched: bool) -> &'static str {
    if !patched {
        return match o {
            Outcome::TestsPassed => "Every counted test passed on the repository as given (no patch was applied).",
            Outcome::TestsFailed => "Tests failed on the repository as given (no patch was applied): the failures are the repository's own.",
            Outcome::Refused => "The run declined to judge (see the refusal): this says nothing about the code.",
            Outcome::NoTestsObserved => "The test command succeeded but no test ran: this says nothing about the code.",
            Outcome::CountsUnparsed => "The test command finished but its counts could not be read: this says nothing about the code.",
            Outcome::TestCommandUnavailable => "The test command could not be started: the environment, not the code.",
            Outcome::EnvironmentExhausted => "The fence's resources gave out (memory, disk or processes): this says nothing about the code.",
            Outcome::BudgetExpired => "The time budget ran out: this says nothing about the code.",
            _ => "An outcome this viewer does not know: this says nothing about the code.",
        };
    }
    match o {
        Outcome::TestsPassed => "Every counted test passed with the patch applied: the patch broke none of the tests that ran.",
        Outcome::TestsFailed => "Tests failed with the patch applied: the only outcome that may mean the patch is at fault.",
        Outcome::Refused => "The run declined to judge (see the refusal): this says nothing about the patch.",
        Outcome::NoTestsObserved => "The test command succeeded but no test ran: this says nothing about the patch.",
        Outcome::CountsUnparsed => "The test command finished but its counts could not be read: this does not blame the patch.",
        Outcome::TestCommandUnavailable => "The test command could not be started: the environment, not the patch.",
        Outcome::EnvironmentExhausted => "The fence's resources gave out (memory, disk or processes): this does not blame the patch.",
        Outcome::BudgetExpired => "The time budget ran out: this does not blame the patch.",
        _ => "An outcome this viewer does not know: this does not blame the patch.",
    }
}

impl Page {
    /// A page for `bytes`: evidence (CBOR) verified with `opts`, or a verdict JSON shown unverified.
    pub fn from_bytes(
        source: &str,
        bytes: &[u8],
        opts: &EvidenceOptions,
    ) -> Result<Page, PageError> {
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            return Page::from_verdict_json(source, bytes);
        }
        let ev = Evidence::from_cbor(bytes).map_err(|e| PageError::Unreadable {
            source_name: source.to_string(),
            evidence: e.to_string(),
        })?;
        let mut page = Page::from_evidence(source, &ev, opts);
        page.browser = Some(crate::browser::BrowserCheck::new(bytes, opts));
        Ok(page)
    }

    /// A page for a verdict JSON alone: everything is shown, nothing is verified.
    pub fn from_verdict_json(source: &str, bytes: &[u8]) -> Result<Page, PageError> {
        let v = Verdict::from_json(bytes).map_err(|e| PageError::BadVerdict {
            source_name: source.to_string(),
            why: e.to_string(),
        })?;
        Ok(Page {
            source: source.to_string(),
            status: Status::Unverified,
            simulated: false,
            verdict: Some(v),
            failures: Vec::new(),
            notes: vec!["a verdict JSON alone: no attestation, no signature, nothing below is verified; view the .evidence file to verify it".into()],
            pins: Vec::new(),
            nonce_checked: false,
            tee: None,
            chain: Vec::new(),
            registers: Vec::new(),
            measurement_pin: MeasurementPin::default(),
            tcb: Vec::new(),
            policy: Vec::new(),
            checked_at: None,
            browser: None,
            transcript: Vec::new(),
        })
    }

    /// A page for decoded evidence, verified here with `opts`.
    pub fn from_evidence(source: &str, ev: &Evidence, opts: &EvidenceOptions) -> Page {
        let v = verify_evidence(ev, opts);
        Page::from_verification(source, ev, &v, opts)
    }

    /// A page for evidence already verified (`v` from [`verify_evidence`] of `ev` with `opts`).
    pub fn from_verification(
        source: &str,
        ev: &Evidence,
        v: &EvidenceVerification,
        opts: &EvidenceOptions,
    ) -> Page {
        let failures: Vec<FailedCheck> = v
            .failures
            .iter()
            .map(|f| FailedCheck {
                check: f.check.to_string(),
                detail: f.detail.clone(),
            })
            .collect();
        let failed = |names: &[&str]| {
            failures
                .iter()
                .any(|f| names.iter().any(|n| same_check(&f.check, n)))
        };
        let status = if !v.verified() {
            Status::Rejected
        } else if v.simulated {
            Status::Simulated
        } else {
            Status::Verified
        };
        let certs = parse_certs(ev, &v.report);
        let at = opts.chain.at;
        let mut chain = Vec::new();
        let mut registers = Vec::new();
        let mut tcb = Vec::new();
        let mut policy = Vec::new();
        let pinned = |r: &str| {
            v.pinned_registers
                .iter()
                .any(|p| p == r || (p == "sim-measurement" && (r == "measurement" || r == "mrtd")))
        };
        match &v.report {
            ReportVerification::Snp(s) => {
                let roles = [
                    (
                        "ARK",
                        vec!["root", "ark-signature"],
                        s.chain.ark_self_signed,
                    ),
                    (
                        "ASK / ASVK",
                        vec!["intermediate-signature"],
                        s.chain.intermediate_signed_by_ark,
                    ),
                    (
                        "VCEK / VLEK",
                        vec!["leaf-signature", "tcb-extensions", "hwid"],
                        s.chain.leaf_signed_by_intermediate,
                    ),
                ];
                // certs are leaf first; the chain is drawn root first.
                for (i, (role, checks, signed)) in roles.into_iter().enumerate() {
                    let cert = certs.get(2 - i);
                    let mut checks: Vec<String> = checks.into_iter().map(String::from).collect();
                    checks.extend(["cert-profile", "cert-validity", "cert-path"].map(String::from));
                    let names: Vec<&str> = checks.iter().map(String::as_str).collect();
                    let valid_at = cert.map(|c| c.valid_at(at));
                    chain.push(ChainNode {
                        role: if i == 0 && s.simulated() {
                            "ARK (not AMD's: simulated)".into()
                        } else {
                            role.into()
                        },
                        subject: cert
                            .map(|c| c.subject.clone())
                            .unwrap_or_else(|| "(no certificate)".into()),
                        validity: cert.map(|c| (c.not_before.clone(), c.not_after.clone())),
                        valid_at,
                        ok: signed && valid_at == Some(true) && !failed(&names),
                        checks,
                    });
                }
                let r = &s.report;
                chain.push(ChainNode {
                    role: "report".into(),
                    subject: format!(
                        "SEV-SNP attestation report v{} (signed by the {})",
                        r.version,
                        r.key_info.signing_key.name()
                    ),
                    validity: None,
                    valid_at: None,
                    checks: vec![
                        "report-signature".into(),
                        "signing-key".into(),
                        "signature-algo".into(),
                        "product".into(),
                    ],
                    ok: s.signature_valid
                        && !failed(&[
                            "report-signature",
                            "signing-key",
                            "signature-algo",
                            "product",
                        ]),
                });
                registers.push(Register {
                    name: "measurement".into(),
                    value: hex::encode(r.measurement),
                    pinned: pinned("measurement"),
                });
                let product = s.product();
                let decode = |t: attestation::snp::TcbVersion| match product {
                    Some(p) => format!("{t} ({})", t.decode(p)),
                    None => t.to_string(),
                };
                tcb.push((
                    "product".into(),
                    product
                        .map(|p| p.name().to_string())
                        .unwrap_or_else(|| "unknown".into()),
                ));
                tcb.push(("reported TCB".into(), decode(r.reported_tcb)));
                tcb.push(("current TCB".into(), decode(r.current_tcb)));
                tcb.push(("committed TCB".into(), decode(r.committed_tcb)));
                tcb.push(("launch TCB".into(), decode(r.launch_tcb)));
                tcb.push(("current firmware".into(), r.current_fw.to_string()));
                tcb.push(("committed firmware".into(), r.committed_fw.to_string()));
                policy.push(("guest policy".into(), format!("{:#018x}", r.policy.0)));
                policy.push(("debug allowed".into(), r.policy.debug_allowed().to_string()));
                policy.push((
                    "migration agent allowed".into(),
                    r.policy.migrate_ma_allowed().to_string(),
                ));
                policy.push(("SMT allowed".into(), r.policy.smt_allowed().to_string()));
                policy.push(("single socket".into(), r.policy.single_socket().to_string()));
                policy.push((
                    "minimum ABI".into(),
                    format!("{}.{}", r.policy.abi_major(), r.policy.abi_minor()),
                ));
                policy.push(("VMPL".into(), r.vmpl.to_string()));
                policy.push(("guest SVN".into(), r.guest_svn.to_string()));
                policy.push(("host data".into(), hex::encode(r.host_data)));
                policy.push(("report data".into(), hex::encode(r.report_data)));
            }
            ReportVerification::Tdx(t) => {
                let a = &t.authenticity;
                let roles = ["Intel root", "PCK CA", "PCK"];
                let n = certs.len();
                for (i, role) in roles.iter().enumerate() {
                    // certs are leaf first.
                    let cert = if n >= 3 { certs.get(2 - i) } else { None };
                    let valid_at = cert.map(|c| c.valid_at(at));
                    let root = i == 0 && t.simulated;
                    chain.push(ChainNode {
                        role: if root {
                            "root (not Intel's: simulated)".into()
                        } else {
                            (*role).into()
                        },
                        subject: cert
                            .map(|c| c.subject.clone())
                            .unwrap_or_else(|| "(no certificate)".into()),
                        validity: cert.map(|c| (c.not_before.clone(), c.not_after.clone())),
                        valid_at,
                        checks: vec!["pck-chain".into()],
                        ok: a.pck_chain_signatures
                            && a.pck_chain_time
                            && a.pck_chain_path
                            && !failed(&["pck-chain"]),
                    });
                }
                chain.push(ChainNode {
                    role: "QE report".into(),
                    subject: "the Quoting Enclave's report, signed by the PCK key".into(),
                    validity: None,
                    valid_at: None,
                    checks: vec!["qe-report".into(), "qe-identity".into()],
                    ok: a.qe_report_signature
                        && a.qe_report_data_binding
                        && !failed(&["qe-report", "qe-identity"]),
                });
                chain.push(ChainNode {
                    role: "quote".into(),
                    subject: "TDX quote, signed by the QE's attestation key".into(),
                    validity: None,
                    valid_at: None,
                    checks: vec!["quote".into()],
                    ok: a.quote_signature && !failed(&["quote"]),
                });
                let td = t.quote.td();
                registers.push(Register {
                    name: "mrtd".into(),
                    value: hex::encode(td.mrtd),
                    pinned: pinned("mrtd"),
                });
                for (i, r) in td.rtmr.iter().enumerate() {
                    let name = format!("rtmr{i}");
                    registers.push(Register {
                        pinned: pinned(&name),
                        name,
                        value: hex::encode(r),
                    });
                }
                tcb.push((
                    "TCB status".into(),
                    t.tcb_status()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "not evaluated (no collateral)".into()),
                ));
                tcb.push(("TEE TCB SVN".into(), hex::encode(td.tee_tcb_svn)));
                policy.push(("TD attributes".into(), hex::encode(td.td_attributes)));
                policy.push(("XFAM".into(), hex::encode(td.xfam)));
                policy.push(("MR_CONFIG_ID".into(), hex::encode(td.mr_config_id)));
                policy.push(("MR_OWNER".into(), hex::encode(td.mr_owner)));
                policy.push(("report data".into(), hex::encode(td.report_data)));
            }
            _ => {}
        }
        let mut mp = MeasurementPin {
            any: opts.any_measurement,
            auditors: v.set_signers.clone(),
            ..MeasurementPin::default()
        };
        // The shared measurements pin either TEE; the SEV-SNP policy's own only SEV-SNP evidence.
        let tdx = matches!(v.report, ReportVerification::Tdx(_));
        let snp_own: &[attestation::hex::Hex<48>] =
            if tdx { &[] } else { &opts.policy.measurements };
        for m in opts.shared.measurements.iter().chain(snp_own) {
            let reg = if tdx { "mrtd" } else { "measurement" };
            mp.flags.push((reg.into(), hex::encode(m.0)));
        }
        for m in &opts.tdx_policy.mrtd {
            mp.flags.push(("mrtd".into(), hex::encode(m)));
        }
        for (i, r) in opts.tdx_policy.rtmr.iter().enumerate() {
            if let Some(r) = r {
                mp.flags.push((format!("rtmr{i}"), hex::encode(r)));
            }
        }
        if let Some(set) = &opts.measurement_set {
            mp.set = Some(set.set.label() + &format!(" ({})", set.path.display()));
            mp.required = None;
            let tier = v.verdict.as_ref().map(|d| d.isolation.as_str());
            mp.entry = match &v.report {
                ReportVerification::Snp(s) if v.simulated => set
                    .match_sim_tier(&s.report.measurement, tier)
                    .ok()
                    .map(|e| format!("sim tier={} measurement={}", e.tier, e.measurement)),
                ReportVerification::Tdx(t) if v.simulated => set
                    .match_sim_tier(&t.quote.td().mrtd, tier)
                    .ok()
                    .map(|e| format!("sim tier={} measurement={}", e.tier, e.measurement)),
                ReportVerification::Snp(s) => set
                    .match_snp_policy(&s.report.measurement, s.report.policy.0)
                    .ok()
                    .map(|e| e.to_string()),
                ReportVerification::Tdx(t) => set
                    .match_tdx(&t.quote.td().mrtd, &t.quote.td().rtmr)
                    .ok()
                    .map(|e| format!("tdx mrtd={}", e.mrtd)),
                _ => None,
            };
        }
        Page {
            source: source.to_string(),
            status,
            simulated: v.simulated,
            verdict: v.verdict.clone(),
            failures,
            notes: evidence_notes(v),
            pins: v.pins.clone(),
            nonce_checked: v.nonce_checked,
            tee: Some((evidence_tee(v).to_string(), v.label.as_str().to_string())),
            chain,
            registers,
            measurement_pin: mp,
            tcb,
            policy,
            checked_at: Some(rfc3339(at)),
            browser: None,
            transcript: v.transcript.events.iter().map(timeline_entry).collect(),
        }
    }

    /// The status of a section that shows the claims `claims` (besides [`FOUNDATION_CLAIMS`], which every
    /// section rests on): REJECTED only when a check of those claims failed, never because a pin shown elsewhere
    /// did not hold; else SIMULATED or VERIFIED as the whole; NOT VERIFIED for a verdict JSON.
    pub fn section_status(&self, claims: &[&str]) -> Status {
        if self.status == Status::Unverified {
            return Status::Unverified;
        }
        let own = self.failures.iter().any(|f| {
            let c = claim_of_check(&f.check);
            FOUNDATION_CLAIMS.contains(&c) || claims.contains(&c)
        });
        if own {
            Status::Rejected
        } else if self.simulated {
            Status::Simulated
        } else {
            Status::Verified
        }
    }

    /// The failures of the checks `names` (each matched as in [`same_check`]).
    pub fn failures_of(&self, names: &[&str]) -> Vec<&FailedCheck> {
        self.failures
            .iter()
            .filter(|f| names.iter().any(|n| same_check(&f.check, n)))
            .collect()
    }
}

/// Whether failure name `failed` belongs to check `name`: equal, or a child of it once dots and underscores
/// are read as dashes (`pck_chain.root.pin` belongs to `pck-chain`).
pub fn same_check(failed: &str, name: &str) -> bool {
    let norm = |s: &str| -> String {
        s.chars()
            .map(|c| if c == '.' || c == '_' { '-' } else { c })
            .collect()
    };
    let (f, n) = (norm(failed), norm(name));
    f == n || f.starts_with(&format!("{n}-"))
}

/// A certificate's subject and validity.
struct CertFacts {
    subject: String,
    not_before: String,
    not_after: String,
    nb: i64,
    na: i64,
}

impl CertFacts {
    fn valid_at(&self, at: time::OffsetDateTime) -> bool {
        let t = at.unix_timestamp();
        self.nb <= t && t <= self.na
    }
}

/// The certificates of the evidence (leaf first), or for TDX the PCK chain the quote carries.
fn parse_certs(ev: &Evidence, report: &ReportVerification) -> Vec<CertFacts> {
    let mut ders: Vec<Vec<u8>> = ev.certs.clone();
    if ders.is_empty() {
        if let ReportVerification::Tdx(t) = report {
            if let Some(pem) = t.quote.pck_chain_pem() {
                for p in x509_parser::pem::Pem::iter_from_buffer(pem).flatten() {
                    ders.push(p.contents);
                }
            }
        }
    }
    ders.iter()
        .filter_map(|d| x509_parser::parse_x509_certificate(d).ok().map(|(_, c)| c))
        .map(|c| {
            let v = c.validity();
            CertFacts {
                subject: c.subject().to_string(),
                not_before: rfc3339(v.not_before.to_datetime()),
                not_after: rfc3339(v.not_after.to_datetime()),
                nb: v.not_before.timestamp(),
                na: v.not_after.timestamp(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use attestation::verdict::{Inputs, Isolation};

    fn page_with(failures: &[&str], simulated: bool) -> Page {
        let v = Verdict::new(
            Outcome::TestsPassed,
            Isolation::Process,
            Inputs::default(),
            "t",
        );
        let json = serde_json::to_vec(&v.to_json_value()).expect("json");
        let mut p = Page::from_verdict_json("v.json", &json).expect("page");
        p.failures = failures
            .iter()
            .map(|c| FailedCheck {
                check: (*c).into(),
                detail: "d".into(),
            })
            .collect();
        p.simulated = simulated;
        p.status = if !failures.is_empty() {
            Status::Rejected
        } else if simulated {
            Status::Simulated
        } else {
            Status::Verified
        };
        p
    }

    const INPUTS: [&str; 2] = ["commit", "nonce"];

    #[test]
    fn a_failed_pin_rejects_only_the_sections_that_show_it() {
        let p = page_with(&["pin-commit"], false);
        assert_eq!(p.status, Status::Rejected);
        assert_eq!(p.section_status(&INPUTS), Status::Rejected);
        assert_eq!(p.section_status(&[]), Status::Verified);
        assert_eq!(p.section_status(&["nonce", "isolation"]), Status::Verified);
        let p = page_with(&["nonce"], true);
        assert_eq!(p.section_status(&INPUTS), Status::Rejected);
        assert_eq!(p.section_status(&[]), Status::Simulated);
    }

    #[test]
    fn a_failed_foundation_check_rejects_every_section() {
        for check in [
            "report-signature",
            "cert-validity",
            "key-binding",
            "verdict-signature",
            "measurement",
            "measurement-unpinned",
            "tcb-status",
            "debug",
            "simulated",
        ] {
            let p = page_with(&[check], false);
            assert_eq!(p.section_status(&[]), Status::Rejected, "{check}");
            assert_eq!(p.section_status(&INPUTS), Status::Rejected, "{check}");
        }
    }

    #[test]
    fn sections_follow_the_whole_when_nothing_failed_or_nothing_was_verified() {
        assert_eq!(
            page_with(&[], false).section_status(&INPUTS),
            Status::Verified
        );
        assert_eq!(page_with(&[], true).section_status(&[]), Status::Simulated);
        let mut p = page_with(&["pin-commit"], false);
        p.status = Status::Unverified;
        assert_eq!(p.section_status(&INPUTS), Status::Unverified);
    }

    #[test]
    fn the_outcome_sentence_names_the_patch_only_when_there_was_one() {
        for o in [
            Outcome::TestsPassed,
            Outcome::TestsFailed,
            Outcome::Refused,
            Outcome::NoTestsObserved,
            Outcome::CountsUnparsed,
            Outcome::TestCommandUnavailable,
            Outcome::EnvironmentExhausted,
            Outcome::BudgetExpired,
        ] {
            assert!(!meaning(o, false).contains("patch applied"), "{o:?}");
            assert!(!meaning(o, false).contains("the patch"), "{o:?}");
            assert!(meaning(o, true).contains("patch"), "{o:?}");
        }
        assert!(meaning(Outcome::TestsPassed, true).contains("with the patch applied"));
        assert!(meaning(Outcome::TestsFailed, false).contains("no patch was applied"));
    }
}
