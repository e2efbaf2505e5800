//! The output layer, on top of every verifier: the JSON object and the aligned human table that
//! `verify-attestation` prints from a typed result ([`crate::SnpVerification`], [`crate::TdxVerification`],
//! [`crate::EvidenceVerification`]), and the claim rows ([`Claim`]) every entry point returns. Part of the public
//! API: the CLI, `verifier-wasm` and the run viewer print with it, so the three say the same. Nothing below
//! imports it; the [`crate::Failure`] records it prints come from `crate::failure`.

use crate::evidence::{EvidenceOptions, EvidenceVerification, ReportVerification};
use crate::snp::{ChainOptions, RootKind, SnpVerification};
use attestation::snp::{Product, TcbVersion};

/// Prints rows as an aligned two-column table; every line is prefixed with `prefix` (e.g. `SIMULATED `).
/// Keys and every line of a value are escaped ([`attestation::text::escape`]): a certificate name or report
/// field cannot move the cursor or start a line of its own (a value's newlines become new table lines, each
/// prefixed).
pub fn print_table(rows: &[(String, String)], prefix: &str) -> String {
    use attestation::text::escape;
    let rows: Vec<(String, Vec<String>)> = rows
        .iter()
        .map(|(k, v)| {
            (
                escape(k).into_owned(),
                v.lines().map(|l| escape(l).into_owned()).collect(),
            )
        })
        .collect();
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (k, lines) in &rows {
        let mut lines = lines.iter();
        let first = lines.next().map(String::as_str).unwrap_or("");
        out.push_str(&format!("{prefix}{k:<width$}  {first}\n"));
        for more in lines {
            out.push_str(&format!("{prefix}{:<width$}  {more}\n", ""));
        }
    }
    out
}

/// The `tee` label a verified SEV-SNP chain implies: `sev-snp` for an AMD root, `sim-sev-snp` otherwise.
pub(crate) fn snp_tee_label(v: &SnpVerification) -> &'static str {
    if v.simulated() {
        "sim-sev-snp"
    } else {
        "sev-snp"
    }
}

/// The REPORTED_TCB decoded for the product (`null` components where the product is unknown).
pub fn decoded_tcb(tcb: TcbVersion, product: Option<Product>) -> serde_json::Value {
    match product {
        Some(p) => {
            let d = tcb.decode(p);
            let mut v = serde_json::json!({
                "raw": tcb.to_string(),
                "bootloader": d.bootloader,
                "tee": d.tee,
                "snp": d.snp,
                "microcode": d.microcode,
            });
            if let (Some(fmc), Some(o)) = (d.fmc, v.as_object_mut()) {
                o.insert("fmc".into(), fmc.into());
            }
            v
        }
        None => serde_json::json!({ "raw": tcb.to_string() }),
    }
}

fn fmt_at(at: &time::OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

/// The JSON object of `verify-attestation snp-report --json` (keys as the issue fixes them, plus details).
pub fn snp_json(v: &SnpVerification, opts: &ChainOptions) -> serde_json::Value {
    let r = &v.report;
    serde_json::json!({
        "verified": v.verified(),
        "tee": snp_tee_label(v),
        "simulated": v.simulated(),
        "product": v.product().map(|p| p.name()),
        "signing_key": r.key_info.signing_key.name(),
        "measurement": hex::encode(r.measurement),
        "report_data": hex::encode(r.report_data),
        "chip_id": hex::encode(r.chip_id),
        "reported_tcb": decoded_tcb(r.reported_tcb, v.product()),
        "current_tcb": decoded_tcb(r.current_tcb, v.product()),
        "committed_tcb": decoded_tcb(r.committed_tcb, v.product()),
        "launch_tcb": decoded_tcb(r.launch_tcb, v.product()),
        "policy": r.policy,
        "failures": v.failures,
        "report_version": r.version,
        "vmpl": r.vmpl,
        "host_data": hex::encode(r.host_data),
        "signature_valid": v.signature_valid,
        "chain": {
            "root": match v.chain.root { RootKind::Amd(p) => format!("AMD ARK-{p}"), RootKind::Unpinned => "unpinned (simulated)".to_string() },
            "ark_self_signed": v.chain.ark_self_signed,
            "intermediate_signed_by_ark": v.chain.intermediate_signed_by_ark,
            "leaf_signed_by_intermediate": v.chain.leaf_signed_by_intermediate,
            "time_valid": v.chain.time_valid,
            "leaf": v.chain.leaf,
        },
        "checked_at": fmt_at(&opts.at),
    })
}

/// A TCB_VERSION as a table value: raw, and decoded for the product when it is known.
fn tcb_row(tcb: TcbVersion, product: Option<Product>) -> String {
    match product {
        Some(p) => format!("{tcb} ({})", tcb.decode(p)),
        None => tcb.to_string(),
    }
}

/// The rows of the human table for a SEV-SNP verification.
pub fn snp_rows(v: &SnpVerification, opts: &ChainOptions) -> Vec<(String, String)> {
    let r = &v.report;
    let mut rows = vec![
        (
            "result".to_string(),
            if v.verified() {
                "VERIFIED".to_string()
            } else {
                "REJECTED".to_string()
            },
        ),
        ("tee".to_string(), snp_tee_label(v).to_string()),
        (
            "root".to_string(),
            match v.chain.root {
                RootKind::Amd(p) => format!("AMD ARK-{p} (pinned)"),
                RootKind::Unpinned => "not an AMD root (simulated)".to_string(),
            },
        ),
        (
            "product".to_string(),
            v.product()
                .map(|p| p.name().to_string())
                .unwrap_or_else(|| "unknown".into()),
        ),
        (
            "signing key".to_string(),
            r.key_info.signing_key.name().to_string(),
        ),
        ("report version".to_string(), r.version.to_string()),
        ("measurement".to_string(), hex::encode(r.measurement)),
        ("report data".to_string(), hex::encode(r.report_data)),
        (
            "current tcb".to_string(),
            tcb_row(r.current_tcb, v.product()),
        ),
        (
            "committed tcb".to_string(),
            tcb_row(r.committed_tcb, v.product()),
        ),
        ("launch tcb".to_string(), tcb_row(r.launch_tcb, v.product())),
        (
            "reported tcb".to_string(),
            tcb_row(r.reported_tcb, v.product()),
        ),
        (
            "guest policy".to_string(),
            format!(
                "{:#018x} (debug={} migrate_ma={} smt={} single_socket={} abi>={}.{})",
                r.policy.0,
                r.policy.debug_allowed(),
                r.policy.migrate_ma_allowed(),
                r.policy.smt_allowed(),
                r.policy.single_socket(),
                r.policy.abi_major(),
                r.policy.abi_minor()
            ),
        ),
        ("vmpl".to_string(), r.vmpl.to_string()),
        ("checked at".to_string(), fmt_at(&opts.at)),
    ];
    if v.failures.is_empty() {
        rows.push(("failures".to_string(), "none".to_string()));
    }
    for f in &v.failures {
        rows.push((format!("FAIL {}", f.check), f.detail.clone()));
    }
    rows
}

/// The note that opens the notes when the founder did not pin the outcome (`--expect-outcome`).
pub(crate) const OUTCOME_NOT_PINNED: &str = "outcome NOT pinned (no --expect-outcome): this result holds whatever the run's outcome was, a failing run included";

/// The note when `--expect-outcome tests_failed` is given without a pin on the failed tests' count.
pub(crate) const FAILED_COUNT_NOT_PINNED: &str = "failed-test count NOT pinned (--expect-outcome tests_failed without \
--min-failed or --expect-tests-ran): tests_failed also holds for a run in which no test ran (an install that failed)";

/// The line every output gives a verdict in which no test ran ([`crate::evidence::tests_ran`] is false).
pub const NO_TEST_RAN: &str =
    "NO TEST RAN: the verdict counts no passed and no failed test; its outcome says \
nothing about the repository's tests";

/// The notes an evidence result carries: checks skipped on purpose, and simulation. An unpinned outcome is
/// always the first.
pub fn evidence_notes(v: &EvidenceVerification) -> Vec<String> {
    let mut notes = Vec::new();
    if !v.outcome_pinned {
        notes.push(OUTCOME_NOT_PINNED.to_string());
    }
    if v.failed_count_unpinned {
        notes.push(FAILED_COUNT_NOT_PINNED.to_string());
    }
    if v.simulated {
        notes.push("SIMULATED: the chain does not end in a vendor root; this proves nothing about hardware".into());
    }
    if !v.measurement_pinned {
        let waived = !v
            .failures
            .iter()
            .any(|f| f.check == crate::evidence::checks::MEASUREMENT_UNPINNED);
        notes.push(if waived {
            "launch measurement NOT pinned (--any-measurement): any guest code could have produced this verdict"
                .into()
        } else {
            "launch measurement NOT pinned: no --measurement, --mrtd/--rtmr or --measurements was given, and no \
             `measurement` in a --policy file; any guest code could have produced this verdict"
                .into()
        });
    }
    let given = |c: &str| v.pins.iter().any(|p| p.check == c);
    let unpinned: Vec<&str> = [
        (crate::evidence::checks::PIN_COMMIT, "commit (--commit)"),
        (crate::evidence::checks::PIN_PATCH, "patch (--patch)"),
        (crate::evidence::checks::PIN_JOB, "job (--job)"),
    ]
    .into_iter()
    .filter(|(c, _)| !given(c))
    .map(|(_, what)| what)
    .collect();
    if !unpinned.is_empty() {
        notes.push(format!(
            "NOT pinned: {}; this result holds whatever the verdict records for {}",
            unpinned.join(", "),
            if unpinned.len() == 1 { "it" } else { "them" }
        ));
    }
    if !v.nonce_checked {
        notes.push("nonce NOT checked (no --nonce): the verdict may be a replay".into());
    }
    if let Some(r) = v.verdict.as_ref().and_then(|d| d.repository.as_ref()) {
        if !v
            .pins
            .iter()
            .any(|p| p.check == crate::evidence::checks::PIN_REPOSITORY)
        {
            notes.push(format!(
                "repository URL NOT pinned (no --repository): the run fetched {}; any URL serving the commit would do",
                r.url
            ));
        }
    }
    if let (ReportVerification::Tdx(_), true) = (&v.report, v.measurement_pinned) {
        let image = crate::evidence::TDX_IMAGE_RTMRS
            .iter()
            .all(|i| v.pinned_registers.contains(&format!("rtmr{i}")));
        let sim = v.pinned_registers.iter().any(|r| r == "sim-measurement");
        if !image && !sim {
            notes.push(format!(
                "TDX image NOT fully pinned: only {} compared (RTMR1/RTMR2 left unpinned on purpose): the kernel, \
                 initramfs and command line are unchecked",
                if v.pinned_registers.is_empty() {
                    "nothing".to_string()
                } else {
                    v.pinned_registers.join(", ")
                }
            ));
        }
    }
    notes
}

fn hex_or_none(h: &Option<String>) -> String {
    h.clone().unwrap_or_else(|| "none".to_string())
}

/// The rows a founder reads first: the outcome, the counts and the inputs of the run (commit, tree, patch and
/// job SHA-256, nonce, isolation), from the verified verdict.
pub(crate) fn evidence_run_rows(v: &EvidenceVerification) -> Vec<(String, String)> {
    let Some(d) = &v.verdict else {
        return vec![(
            "outcome".to_string(),
            "unknown (the verdict did not verify)".to_string(),
        )];
    };
    evidence_run_rows_of(d)
}

/// The outcome, counts and inputs of a verdict as rows (whether or not it was verified: the caller says).
pub fn evidence_run_rows_of(d: &attestation::verdict::Verdict) -> Vec<(String, String)> {
    let counts = match &d.tests {
        Some(c) => format!(
            "{} passed, {} failed, {} skipped (parser {})",
            c.passed, c.failed, c.skipped, c.parser
        ),
        None => "none".to_string(),
    };
    let mut rows = vec![
        ("outcome".to_string(), d.outcome.to_string()),
        ("counts".to_string(), counts),
    ];
    if !crate::evidence::tests_ran(d) {
        rows.push(("NOTE".to_string(), NO_TEST_RAN.to_string()));
    }
    rows.extend([("commit".to_string(), hex_or_none(&d.inputs.commit))]);
    // A repository fetched by URL (`[repository] url`) is named right after its commit.
    if let Some(r) = &d.repository {
        rows.push((
            "repository".to_string(),
            format!("{} ({} fetch)", r.url, r.fetch),
        ));
    }
    rows.extend([
        ("tree".to_string(), hex_or_none(&d.inputs.tree)),
        (
            "patch sha256".to_string(),
            hex_or_none(&d.inputs.patch_sha256),
        ),
        ("job sha256".to_string(), hex_or_none(&d.inputs.job_sha256)),
        ("nonce".to_string(), hex::encode(&d.inputs.nonce)),
        ("isolation".to_string(), d.isolation.to_string()),
    ]);
    rows
}

/// One row per pin the founder gave: held or not, with the value seen.
pub(crate) fn evidence_pin_rows(v: &EvidenceVerification) -> Vec<(String, String)> {
    v.pins
        .iter()
        .map(|p| {
            (
                p.check.to_string(),
                format!(
                    "{}: wanted {}, seen {}",
                    if p.held { "held" } else { "NOT held" },
                    p.wanted,
                    p.seen.as_deref().unwrap_or("nothing (no verified verdict)")
                ),
            )
        })
        .collect()
}

/// The `tee` the chain implies for evidence (`sev-snp`, `sim-sev-snp`, `tdx`, `sim-tdx`).
pub fn evidence_tee(v: &EvidenceVerification) -> &'static str {
    match (&v.report, v.simulated) {
        (ReportVerification::Tdx(_), false) => "tdx",
        (ReportVerification::Tdx(_), true) => "sim-tdx",
        (ReportVerification::Snp(_), false) => "sev-snp",
        (ReportVerification::Snp(_), true) => "sim-sev-snp",
        _ => v.label.as_str(),
    }
}

/// The JSON object of `verify-attestation evidence --json`: the report's fields, the verdict, the pins, the notes,
/// and `claims` (one [`Claim`] per claim), with `pool_attempt` when one was given.
pub fn evidence_json_with(
    v: &EvidenceVerification,
    opts: &EvidenceOptions,
    ctx: &ClaimContext,
) -> serde_json::Value {
    let mut out = match &v.report {
        ReportVerification::Snp(s) => snp_json(s, &opts.chain),
        ReportVerification::Tdx(t) => serde_json::json!({
            "product": "TDX",
            "signing_key": "PCK",
            "measurement": hex::encode(t.quote.td().mrtd),
            "report_data": hex::encode(t.quote.td().report_data),
            "chip_id": serde_json::Value::Null,
            "reported_tcb": t.tcb_status().map(|s| s.name()),
            "policy": serde_json::Value::Null,
            "collateral_used": t.collateral_used,
        }),
        _ => serde_json::json!({
            "product": null, "signing_key": null, "measurement": null, "report_data": null,
            "chip_id": null, "reported_tcb": null, "policy": null,
        }),
    };
    if let Some(o) = out.as_object_mut() {
        o.insert("verified".into(), v.verified().into());
        o.insert("tee".into(), evidence_tee(v).into());
        o.insert("tee_label".into(), v.label.as_str().into());
        o.insert("simulated".into(), v.simulated.into());
        o.insert(
            "failures".into(),
            serde_json::to_value(&v.failures).unwrap_or_default(),
        );
        o.insert(
            "verdict".into(),
            v.verdict
                .as_ref()
                .map(|d| d.to_json_value())
                .unwrap_or_default(),
        );
        // The registers compared with a pin (empty: none was).
        o.insert(
            "measurement_pinned".into(),
            v.pinned_registers.clone().into(),
        );
        o.insert("outcome_pinned".into(), v.outcome_pinned.into());
        // Whether the verified verdict counts at least one test (null: no verified verdict).
        o.insert(
            "tests_ran".into(),
            v.verdict.as_ref().map(crate::evidence::tests_ran).into(),
        );
        o.insert(
            "pins".into(),
            serde_json::to_value(&v.pins).unwrap_or_default(),
        );
        if !v.set_signers.is_empty() {
            o.insert(
                "measurement_set_signers".into(),
                v.set_signers.clone().into(),
            );
        }
        if let ReportVerification::Tdx(t) = &v.report {
            let td = t.quote.td();
            o.insert("mrtd".into(), hex::encode(td.mrtd).into());
            for (i, r) in td.rtmr.iter().enumerate() {
                o.insert(format!("rtmr{i}"), hex::encode(r).into());
            }
        }
        o.insert("nonce_checked".into(), v.nonce_checked.into());
        o.insert("notes".into(), evidence_notes(v).into());
        o.insert("checked_at".into(), fmt_at(&opts.chain.at).into());
        o.insert("pool_attempt".into(), ctx.pool_attempt.into());
        if let Some(c) = &ctx.pool_ledger {
            o.insert(
                "pool_execution".into(),
                serde_json::json!({
                    "run_id": c.run_id,
                    "attempt": c.execution.map(|x| x.0),
                    "execution": c.execution.map(|x| x.1),
                    "executions": c.executions,
                    "max_executions": c.max_executions,
                    "pool_key": c.pool_key,
                }),
            );
        }
        // The fence transcript, only when the evidence carries one (docs/transcript.md).
        if v.transcript.present {
            o.insert(
                "transcript".into(),
                serde_json::json!({
                    "sha384": v.transcript_sha(),
                    "events": v.transcript.events.iter().map(|e| e.name()).collect::<Vec<_>>(),
                    "anchored": v.transcript.anchored,
                    "rtmr3_replayed": v.transcript.rtmr3_replayed,
                    "pins": v.transcript.pins,
                }),
            );
        }
        o.insert(
            "claims".into(),
            serde_json::to_value(evidence_claims(v, opts, ctx)).unwrap_or_default(),
        );
    }
    out
}

/// The human table of an evidence result, one `claim` row per claim the founder relies on after the run's rows;
/// every line says SIMULATED when the chain is not the vendor's.
pub fn evidence_table_with(
    v: &EvidenceVerification,
    opts: &EvidenceOptions,
    ctx: &ClaimContext,
) -> String {
    let mut rows = vec![(
        "result".to_string(),
        if v.verified() {
            "VERIFIED".to_string()
        } else {
            "REJECTED".to_string()
        },
    )];
    // First what the founder pays for: whether the outcome was pinned, the outcome, counts and inputs.
    if !v.outcome_pinned {
        rows.push(("NOTE".to_string(), OUTCOME_NOT_PINNED.to_string()));
    }
    rows.extend(evidence_run_rows(v));
    if let Some(n) = ctx.pool_attempt {
        rows.push(("pool attempt and execution".to_string(), n.to_string()));
    }
    if let Some(c) = &ctx.pool_ledger {
        rows.push((
            "pool attempt and execution".to_string(),
            match c.execution {
                Some((a, e)) => format!(
                    "attempt {a} execution {e} of run {} ({} execution(s) in the ledger, at most {} accepted)",
                    c.run_id,
                    c.executions.len(),
                    c.max_executions
                ),
                None => "none: the evidence's nonce is in no verified ledger".into(),
            },
        ));
    }
    rows.extend(evidence_pin_rows(v));
    rows.extend(claim_rows(&evidence_claims(v, opts, ctx)));
    rows.push((
        "tee".to_string(),
        format!("{} (labelled {})", evidence_tee(v), v.label),
    ));
    match &v.report {
        ReportVerification::Snp(s) => {
            rows.extend(snp_rows(s, &opts.chain).into_iter().filter(|(k, _)| {
                !(k == "result" || k == "tee" || k == "failures" || k.starts_with("FAIL "))
            }));
        }
        ReportVerification::Tdx(t) => {
            rows.push(("mrtd".to_string(), hex::encode(t.quote.td().mrtd)));
            for (i, r) in t.quote.td().rtmr.iter().enumerate() {
                rows.push((format!("rtmr{i}"), hex::encode(r)));
            }
            rows.push((
                "report data".to_string(),
                hex::encode(t.quote.td().report_data),
            ));
            match &t.collateral_used {
                Some(c) => rows.extend(c.rows()),
                None => rows.push(("collateral".to_string(), "none".to_string())),
            }
        }
        _ => {}
    }
    rows.push((
        "measurement pinned".to_string(),
        if v.pinned_registers.is_empty() {
            "none".to_string()
        } else {
            v.pinned_registers.join(", ")
        },
    ));
    if !v.set_signers.is_empty() {
        rows.push(("set signed by".to_string(), v.set_signers.join(", ")));
    }
    for n in evidence_notes(v)
        .into_iter()
        .skip(usize::from(!v.outcome_pinned))
    {
        rows.push(("NOTE".to_string(), n));
    }
    if v.failures.is_empty() {
        rows.push(("failures".to_string(), "none".to_string()));
    }
    for f in &v.failures {
        rows.push((format!("FAIL {}", f.check), f.detail.clone()));
    }
    print_table(&rows, if v.simulated { "SIMULATED " } else { "" })
}

/// Whether a claim the founder relies on held, failed, or was not pinned (nothing was asked of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ClaimStatus {
    /// Checked, and it held.
    #[serde(rename = "held")]
    Held,
    /// Checked, and it failed (the failures name why).
    #[serde(rename = "failed")]
    Failed,
    /// Not checked: the founder pinned nothing for it (or waived it on purpose).
    #[serde(rename = "not pinned")]
    NotPinned,
}

impl ClaimStatus {
    /// `held`, `failed` or `not pinned`, as the output prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimStatus::Held => "held",
            ClaimStatus::Failed => "failed",
            ClaimStatus::NotPinned => "not pinned",
        }
    }
}

/// One claim the founder relies on: its name, whether it held, what backed it (the anchor: which root, which
/// auditor keys, which measurement-set entry, which collateral source and URL), and a detail.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Claim {
    /// `chain`, `tcb`, `policy`, `measurement`, `key binding`, `verdict signature`, `nonce`, `pool attempt`,
    /// `outcome`, `commit`, `tree`, `patch`, `job`, `test tree`, `isolation`, `collateral` ([`CLAIMS`]).
    pub claim: &'static str,
    /// held, failed or not pinned.
    pub status: ClaimStatus,
    /// What backed a held claim (`null` otherwise).
    pub anchor: Option<String>,
    /// What was compared, or why it failed, or what pinning it takes.
    pub detail: String,
}

/// The claims of an evidence result, in the order the output gives them.
pub const CLAIMS: [&str; 17] = [
    "chain",
    "tcb",
    "policy",
    "measurement",
    "key binding",
    "verdict signature",
    "nonce",
    "pool attempt and execution",
    "outcome",
    "commit",
    "tree",
    "patch",
    "job",
    "test tree",
    "isolation",
    "collateral",
    "transcript",
];

/// What the verify command knows that the verification result does not: the flags that shape the claims.
#[derive(Clone, Debug, Default)]
pub struct ClaimContext {
    /// `--pool-attempt N`.
    pub pool_attempt: Option<u32>,
    /// `--pool-ledger FILE`: what the ledger check found (its failures are in the result's failures too).
    pub pool_ledger: Option<crate::pool_ledger::PoolLedgerCheck>,
    /// The `collateral_source` note (`null`: the collateral, if any, was the evidence's own).
    pub collateral_source: serde_json::Value,
    /// `--policy FILE`, as given.
    pub policy_file: Option<String>,
    /// `--tcb-baseline`, as given, when it was applied.
    pub tcb_baseline: Option<String>,
}

/// The claim a failed check belongs to.
pub fn claim_of_check(check: &str) -> &'static str {
    let any = |names: &[&str]| {
        names
            .iter()
            .any(|n| crate::Failure::new(check.to_owned(), "").is(n))
    };
    if any(&["transcript", "pin-egress-only", "pin-cut"]) {
        return "transcript";
    }
    if any(&[
        "collateral",
        "tcb-info",
        "qe-identity-issuer-chain",
        "qe-identity-signature",
        "qe-identity-issue-date",
        "qe-identity-next-update",
        "qe-identity-id",
        "root-ca-crl",
        "pck-crl",
        "crl",
    ]) {
        "collateral"
    } else if any(&[
        "tcb-status",
        "advisory-ids",
        "tcb-date",
        "tcb-baseline",
        "min-tcb",
        "min-launch-tcb",
        "min-build",
        "provisional-firmware",
        "tee-tcb-svn",
        "tdx-module-identity",
    ]) {
        "tcb"
    } else if any(&[
        "measurement",
        "mrtd",
        "rtmr0",
        "rtmr1",
        "rtmr2",
        "rtmr3",
        "event-log-rtmr0",
        "event-log-rtmr1",
        "event-log-rtmr2",
        "event-log-rtmr3",
    ]) {
        "measurement"
    } else if any(&["key-binding", "report-data"]) {
        "key binding"
    } else if any(&["verdict-signature"]) {
        "verdict signature"
    } else if any(&["pool-ledger", "pool-executions"]) {
        "pool attempt and execution"
    } else if any(&["nonce"]) {
        "nonce"
    } else if any(&[
        "pin-outcome",
        "verdict-counts",
        "pin-tests-ran",
        "pin-min-failed",
    ]) {
        "outcome"
    } else if any(&["pin-commit"]) {
        "commit"
    } else if any(&["pin-tree"]) {
        "tree"
    } else if any(&["pin-patch"]) {
        "patch"
    } else if any(&["pin-job"]) {
        "job"
    } else if any(&["pin-protect-tree"]) {
        "test tree"
    } else if any(&["isolation", "pin-isolation"]) {
        "isolation"
    } else if any(&[
        "guest-policy",
        "debug",
        "migration-agent",
        "smt",
        "single-socket",
        "abi",
        "vmpl",
        "guest-svn",
        "host-data",
        "family-id",
        "image-id",
        "id-key-digest",
        "author-key-digest",
        "td-attributes",
        "mr-servicetd",
        "mr-config-id",
        "mr-owner",
        "mr-owner-config",
        "xfam",
    ]) {
        "policy"
    } else {
        "chain"
    }
}

/// The failures of one claim, as `check: detail` joined.
fn failures_of(failures: &[crate::Failure], claim: &str) -> Option<String> {
    let f: Vec<String> = failures
        .iter()
        .filter(|f| claim_of_check(&f.check) == claim)
        .map(|f| f.to_string())
        .collect();
    (!f.is_empty()).then(|| f.join("; "))
}

fn string_list(v: &serde_json::Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Where the collateral came from, in words: the source, its file or cache, the URLs that served it (after
/// redirects), and the auditor keys whose signatures counted.
pub(crate) fn collateral_anchor(note: &serde_json::Value) -> String {
    let source = note["source"].as_str().unwrap_or("evidence");
    let mut out = match source {
        "bundle" => format!("bundle {}", note["file"].as_str().unwrap_or("(unnamed)")),
        "file" => format!(
            "bare collateral file {}",
            note["file"].as_str().unwrap_or("(unnamed)")
        ),
        "cache" => format!(
            "the cache{}",
            note["cache"]
                .as_str()
                .map(|d| format!(" {d}"))
                .unwrap_or_default()
        ),
        "online" => "fetched (--online)".to_owned(),
        "certs" => format!(
            "the --certs directory {}",
            note["dir"].as_str().unwrap_or("(unnamed)")
        ),
        _ => "carried in the evidence (the host's)".to_owned(),
    };
    let urls = string_list(note, "urls");
    if !urls.is_empty() && source == "bundle" {
        // What `fetch` wrote into the bundle (covered by the auditors' signatures, if any), not seen here.
        out.push_str(&format!(
            ", fetched from {} (as the bundle records)",
            urls.join(", ")
        ));
    } else if !urls.is_empty() {
        out.push_str(&format!(", served by {}", urls.join(", ")));
    }
    let keys = string_list(note, "auditor_keys");
    if keys.is_empty() {
        out.push_str("; signed by no auditor");
    } else {
        out.push_str(&format!("; signed by auditor {}", keys.join(", ")));
    }
    out
}

/// The measurement-set entry the report matched, in words (`None` without a set or a match).
fn set_entry(v: &EvidenceVerification, opts: &EvidenceOptions) -> Option<String> {
    let set = opts.measurement_set.as_ref()?;
    let tier = v.verdict.as_ref().map(|d| d.isolation.as_str());
    let entry = match &v.report {
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
        ReportVerification::Tdx(t) => {
            let td = t.quote.td();
            set.match_tdx(&td.mrtd, &td.rtmr).ok().map(|e| {
                let listed: Vec<String> = [&e.rtmr0, &e.rtmr1, &e.rtmr2, &e.rtmr3]
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.is_some())
                    .map(|(i, _)| format!("rtmr{i}"))
                    .collect();
                format!("tdx mrtd={} with {}", e.mrtd, listed.join(", "))
            })
        }
        _ => None,
    }?;
    let signers: Vec<String> = set
        .signers
        .iter()
        .map(|(_, k)| format!("key {}", &k[..16.min(k.len())]))
        .collect();
    Some(format!(
        "measurement set {}, entry {entry}; signed by auditor {}",
        set.name(),
        signers.join(", ")
    ))
}

/// The verified report a set of claims is about.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClaimReport<'a> {
    /// An SEV-SNP report.
    Snp(&'a SnpVerification),
    /// A TDX quote.
    Tdx(&'a crate::tdx::TdxVerification),
    /// No report was verified.
    Unverified,
}

/// What the report's claims (chain, TCB, policy, measurement, collateral) are judged from.
#[derive(Clone, Debug)]
pub(crate) struct ReportClaims<'a> {
    /// The report.
    pub report: ClaimReport<'a>,
    /// Every failure of the verification.
    pub failures: &'a [crate::Failure],
    /// Whether a CRL was checked (SEV-SNP).
    pub crl: bool,
    /// Whether `--min-tcb` was given (SEV-SNP).
    pub min_tcb: bool,
    /// The registers compared with a pin (empty: none).
    pub pinned_registers: &'a [String],
    /// The measurement-set entry matched, in words, when a set pinned the measurement.
    pub set_entry: Option<String>,
    /// `--any-measurement`.
    pub any_measurement: bool,
}

fn make_claim(
    claim: &'static str,
    status: ClaimStatus,
    anchor: Option<String>,
    detail: String,
) -> Claim {
    Claim {
        claim,
        status,
        anchor: if status == ClaimStatus::Held {
            anchor
        } else {
            None
        },
        detail,
    }
}

/// The claims about the report itself: `chain`, `tcb`, `policy`, `measurement` and `collateral`, in that order.
pub(crate) fn report_claims(r: &ReportClaims<'_>, ctx: &ClaimContext) -> [Claim; 5] {
    use ClaimStatus::{Failed, Held, NotPinned};
    let claim = make_claim;
    let failed =
        |name: &'static str| failures_of(r.failures, name).map(|d| claim(name, Failed, None, d));
    let unverified = matches!(r.report, ClaimReport::Unverified);

    // chain: which root, through which intermediate.
    let chain = failed("chain").unwrap_or_else(|| {
        let (anchor, detail) = match r.report {
            ClaimReport::Snp(s) => {
                let vlek = s.report.key_info.signing_key == attestation::snp::SigningKey::Vlek;
                let crl = if r.crl {
                    "revocation checked against the CRL"
                } else {
                    "no CRL: revocation not checked"
                };
                match s.chain.root {
                    RootKind::Amd(p) => (
                        crate::anchors::amd_chain(p, vlek),
                        format!("the report's signature verifies under the chain; {crl}"),
                    ),
                    RootKind::Unpinned => (
                        "a root that is not AMD's (simulated, accepted by --allow-simulated)"
                            .into(),
                        format!("SIMULATED: proves nothing about hardware; {crl}"),
                    ),
                }
            }
            ClaimReport::Tdx(t) => match t.authenticity.root {
                Some(crate::tdx::Root::Intel) => (
                    format!(
                        "{} (pinned) -> PCK CA -> PCK certificate{}",
                        crate::anchors::INTEL_ROOT,
                        t.pck
                            .as_ref()
                            .map(|p| format!(" (FMSPC {})", hex::encode(&p.fmspc)))
                            .unwrap_or_default()
                    ),
                    "the QE report and the quote's signature verify under the PCK chain".into(),
                ),
                _ => (
                    "a root that is not Intel's (simulated, accepted by --allow-simulated)".into(),
                    "SIMULATED: proves nothing about hardware".into(),
                ),
            },
            ClaimReport::Unverified => (String::new(), String::new()),
        };
        if unverified {
            claim("chain", Failed, None, "the report was not verified".into())
        } else {
            claim("chain", Held, Some(anchor), detail)
        }
    });

    // tcb: SEV-SNP against the founder's floors (else not pinned); TDX against the TCB Info, always.
    let tcb = failed("tcb").unwrap_or_else(|| match r.report {
        ClaimReport::Snp(s) => {
            let tcb = tcb_row(s.report.reported_tcb, s.product());
            match (&ctx.tcb_baseline, r.min_tcb) {
                (Some(b), _) => claim(
                    "tcb",
                    Held,
                    Some(format!("TCB baseline {b}")),
                    format!("REPORTED_TCB {tcb} is at or above every floor"),
                ),
                (None, true) => claim(
                    "tcb",
                    Held,
                    Some("--min-tcb".into()),
                    format!("REPORTED_TCB {tcb} is at or above --min-tcb"),
                ),
                (None, false) => claim(
                    "tcb",
                    NotPinned,
                    None,
                    format!(
                        "REPORTED_TCB {tcb} is the VCEK's, but no floor was given (--tcb-baseline builtin|FILE, \
                         --min-tcb): an out-of-date platform would pass"
                    ),
                ),
            }
        }
        ClaimReport::Tdx(t) => match (t.tcb_status(), &t.collateral_used) {
            (Some(st), Some(c)) => claim(
                "tcb",
                Held,
                Some(format!(
                    "TCB Info (tcbEvaluationDataNumber {}, issued {}) signed under the {}, from {}",
                    c.tcb_evaluation_data_number,
                    c.tcb_info_issue_date,
                    if t.simulated {
                        "simulated root (not Intel's)"
                    } else {
                        crate::anchors::INTEL_ROOT
                    },
                    collateral_anchor(&ctx.collateral_source)
                )),
                format!("TCB status {} is accepted", st.name()),
            ),
            _ => claim(
                "tcb",
                Failed,
                None,
                "the TCB status was not evaluated".into(),
            ),
        },
        ClaimReport::Unverified => claim("tcb", Failed, None, "the report was not verified".into()),
    });

    // policy: the guest policy (defaults, flags, --policy FILE).
    let policy = failed("policy").unwrap_or_else(|| {
        let anchor = match &ctx.policy_file {
            Some(f) => format!("--policy {f} and the policy flags"),
            None => "the default policy and the policy flags".into(),
        };
        if unverified {
            claim("policy", Failed, None, "the report was not verified".into())
        } else {
            claim(
                "policy",
                Held,
                Some(anchor),
                "debug, migration, SMT, ABI, VMPL and the other policy checks held".into(),
            )
        }
    });

    // measurement: which set entry, or which flags.
    let measurement = failed("measurement").unwrap_or_else(|| {
        if r.pinned_registers.is_empty() {
            return claim(
                "measurement",
                NotPinned,
                None,
                if r.any_measurement {
                    "--any-measurement: any guest code could have produced this verdict".into()
                } else {
                    "no launch measurement pinned".into()
                },
            );
        }
        let anchor = r.set_entry.clone().unwrap_or_else(|| {
            format!(
                "the founder's flags (--measurement, --mrtd, --rtmr) on {}",
                r.pinned_registers.join(", ")
            )
        });
        claim(
            "measurement",
            Held,
            Some(anchor),
            format!("compared: {}", r.pinned_registers.join(", ")),
        )
    });

    // collateral: its source and URLs, and the auditors who signed it.
    let collateral = failed("collateral").unwrap_or_else(|| {
        let anchor = collateral_anchor(&ctx.collateral_source);
        let signed = !string_list(&ctx.collateral_source, "auditor_keys").is_empty();
        claim(
            "collateral",
            Held,
            Some(anchor),
            if signed {
                "the collateral is signed by the auditors required (--collateral-auditor-key)".into()
            } else {
                "verified under the vendor's keys only; no auditor key was named (--collateral-auditor-key)"
                    .into()
            },
        )
    });
    [chain, tcb, policy, measurement, collateral]
}

/// The claims of a bare report (no verdict): `report_claims`, where a failure of a check that belongs to no
/// claim of a report (`report-data`, which evidence counts under `key binding`) fails the `policy` claim, so
/// that no failure goes unshown in the claims.
fn bare_report_claims(r: &ReportClaims<'_>, ctx: &ClaimContext) -> Vec<Claim> {
    let mut claims: Vec<Claim> = report_claims(r, ctx).into();
    let names: Vec<&str> = claims.iter().map(|c| c.claim).collect();
    let orphans: Vec<String> = r
        .failures
        .iter()
        .filter(|f| !names.contains(&claim_of_check(&f.check)))
        .map(|f| f.to_string())
        .collect();
    if !orphans.is_empty() {
        if let Some(p) = claims.iter_mut().find(|c| c.claim == "policy") {
            let mut detail = orphans.join("; ");
            if p.status == ClaimStatus::Failed {
                detail = format!("{}; {detail}", p.detail);
            }
            *p = make_claim("policy", ClaimStatus::Failed, None, detail);
        }
    }
    claims
}

/// The claims of `snp-report`: chain, TCB, policy, measurement, collateral.
pub fn snp_claims(
    v: &SnpVerification,
    opts: &ChainOptions,
    policy: &crate::snp::Policy,
    ctx: &ClaimContext,
) -> Vec<Claim> {
    let pinned: Vec<String> = if policy.measurements.is_empty() {
        Vec::new()
    } else {
        vec!["measurement".into()]
    };
    bare_report_claims(
        &ReportClaims {
            report: ClaimReport::Snp(v),
            failures: &v.failures,
            crl: opts.crl.is_some(),
            min_tcb: policy.min_tcb != Default::default(),
            pinned_registers: &pinned,
            set_entry: None,
            any_measurement: false,
        },
        ctx,
    )
}

/// The claims of `tdx-quote`: chain, TCB, policy, measurement, collateral.
pub fn tdx_claims(
    v: &crate::tdx::TdxVerification,
    policy: &crate::tdx::Policy,
    ctx: &ClaimContext,
) -> Vec<Claim> {
    let mut pinned: Vec<String> = Vec::new();
    if !policy.mrtd.is_empty() {
        pinned.push("mrtd".into());
    }
    for (i, r) in policy.rtmr.iter().enumerate() {
        if r.is_some() {
            pinned.push(format!("rtmr{i}"));
        }
    }
    bare_report_claims(
        &ReportClaims {
            report: ClaimReport::Tdx(v),
            failures: &v.failures,
            crl: true,
            min_tcb: false,
            pinned_registers: &pinned,
            set_entry: None,
            any_measurement: false,
        },
        ctx,
    )
}

/// One row per claim the founder relies on ([`CLAIMS`], in that order): held, failed or not pinned, and for
/// each held claim the anchor that backed it. The rows the table and JSON print, and what a caller that writes the
/// verified run in another form (verify-attestation's in-toto statement and EAR) reads.
pub fn evidence_claims(
    v: &EvidenceVerification,
    opts: &EvidenceOptions,
    ctx: &ClaimContext,
) -> Vec<Claim> {
    use ClaimStatus::{Failed, Held, NotPinned};
    let claim = make_claim;
    let failed =
        |name: &'static str| failures_of(&v.failures, name).map(|d| claim(name, Failed, None, d));
    let report = match &v.report {
        ReportVerification::Snp(s) => ClaimReport::Snp(s),
        ReportVerification::Tdx(t) => ClaimReport::Tdx(t),
        _ => ClaimReport::Unverified,
    };
    let [chain, tcb, policy, measurement, collateral] = report_claims(
        &ReportClaims {
            report,
            failures: &v.failures,
            crl: opts.chain.crl.is_some(),
            min_tcb: opts.policy.min_tcb != Default::default(),
            pinned_registers: &v.pinned_registers,
            set_entry: set_entry(v, opts),
            any_measurement: opts.any_measurement,
        },
        ctx,
    );
    let mut out = vec![chain, tcb, policy, measurement];

    // key binding and the verdict signature: anchored in the report the chain verified.
    out.push(failed("key binding").unwrap_or_else(|| {
        claim(
            "key binding",
            Held,
            Some("REPORT_DATA of the report the chain verified".into()),
            "REPORT_DATA = SHA-512(domain || verdict key || nonce)".into(),
        )
    }));
    out.push(failed("verdict signature").unwrap_or_else(|| {
        claim(
            "verdict signature",
            Held,
            Some("the verdict key bound in REPORT_DATA".into()),
            "the verdict's COSE_Sign1 (ES384) verifies with it".into(),
        )
    }));

    // nonce and pool attempt.
    out.push(failed("nonce").unwrap_or_else(|| {
        if !v.nonce_checked {
            return claim(
                "nonce",
                NotPinned,
                None,
                "no --nonce (--no-nonce): the verdict may be a replay of an older run".into(),
            );
        }
        let anchor = match (&ctx.pool_ledger, ctx.pool_attempt) {
            (Some(_), _) => "the nonce the --pool-ledger issued for the run of --nonce".into(),
            (None, Some(n)) => {
                format!("--nonce and --pool-attempt {n} (the attempt's derived nonce)")
            }
            (None, None) => "--nonce".into(),
        };
        claim(
            "nonce",
            Held,
            Some(anchor),
            "the verdict's nonce is the founder's".into(),
        )
    }));
    out.push(match (&ctx.pool_ledger, ctx.pool_attempt) {
        (Some(c), _) => match (
            failures_of(&v.failures, "pool attempt and execution"),
            c.execution,
        ) {
            (None, Some((a, e))) if v.nonce_checked && failures_of(&v.failures, "nonce").is_none() => claim(
                "pool attempt and execution",
                Held,
                Some(format!(
                    "the ledger of run {} signed by the pinned pool key {}",
                    c.run_id, c.pool_key
                )),
                format!(
                    "attempt {a} execution {e}: its nonce was issued to the evidence's key; the run has {} \
                     execution(s), at most {} accepted",
                    c.executions.len(),
                    c.max_executions
                ),
            ),
            (Some(d), _) => claim("pool attempt and execution", Failed, None, d),
            _ => claim(
                "pool attempt and execution",
                Failed,
                None,
                "the verdict's nonce is not the one the ledger issued".into(),
            ),
        },
        (None, None) => claim(
            "pool attempt and execution",
            NotPinned,
            None,
            "no --pool-attempt or --pool-ledger: the nonce was compared as given, not as a pool \
             execution's"
                .into(),
        ),
        (None, Some(n)) if v.nonce_checked && failures_of(&v.failures, "nonce").is_none() => claim(
            "pool attempt and execution",
            Held,
            Some(format!(
                "attempt {n}: nonce derived from --nonce and {n} (attestation::pool_nonce)"
            )),
            format!(
                "this is the evidence of attempt {n} of the pooled run (its executions are not \
                 counted without --pool-ledger)"
            ),
        ),
        (None, Some(n)) => claim(
            "pool attempt and execution",
            Failed,
            None,
            format!("the verdict's nonce is not attempt {n}'s"),
        ),
    });

    // outcome and the run's inputs: the founder's pins, each held, failed, or not pinned.
    let seen = |f: fn(&attestation::verdict::Verdict) -> Option<String>| {
        v.verdict
            .as_ref()
            .map(|d| f(d).unwrap_or_else(|| "none".into()))
            .unwrap_or_else(|| "unknown (no verified verdict)".into())
    };
    let pin_claim = |name: &'static str, checks: &[&str], flag: &str, seen: String| {
        if let Some(d) = failures_of(&v.failures, name) {
            return claim(name, Failed, None, d);
        }
        let held: Vec<&crate::evidence::PinCheck> = v
            .pins
            .iter()
            .filter(|p| checks.contains(&p.check))
            .collect();
        if held.is_empty() {
            claim(
                name,
                NotPinned,
                None,
                format!("no {flag}: the verdict records {seen}"),
            )
        } else {
            claim(
                name,
                Held,
                Some(
                    held.iter()
                        .map(|p| format!("{} {}", p.check, p.wanted))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                format!("the verdict records {seen}"),
            )
        }
    };
    out.push(pin_claim(
        "outcome",
        &[
            crate::evidence::checks::PIN_OUTCOME,
            crate::evidence::checks::PIN_TESTS_RAN,
            crate::evidence::checks::PIN_MIN_FAILED,
        ],
        "--expect-outcome",
        seen(|d| Some(d.outcome.to_string())),
    ));
    out.push(pin_claim(
        "commit",
        &[crate::evidence::checks::PIN_COMMIT],
        "--commit",
        seen(|d| d.inputs.commit.clone()),
    ));
    out.push(pin_claim(
        "tree",
        &[crate::evidence::checks::PIN_TREE],
        "--tree",
        seen(|d| d.inputs.tree.clone()),
    ));
    out.push(pin_claim(
        "patch",
        &[crate::evidence::checks::PIN_PATCH],
        "--patch or --patch-sha256",
        seen(|d| d.inputs.patch_sha256.clone()),
    ));
    out.push(pin_claim(
        "job",
        &[crate::evidence::checks::PIN_JOB],
        "--job or --job-sha256",
        seen(|d| d.inputs.job_sha256.clone()),
    ));
    out.push(pin_claim(
        "test tree",
        &[crate::evidence::checks::PIN_PROTECT_TREE],
        "--protect-tree",
        seen(|d| d.inputs.test_tree.clone()),
    ));
    out.push(pin_claim(
        "isolation",
        &[crate::evidence::checks::PIN_ISOLATION],
        "--isolation",
        seen(|d| Some(d.isolation.to_string())),
    ));

    out.push(collateral);
    out.push(transcript_claim(v));
    out
}

/// The `transcript` claim: failed with the check's failures, held with what was checked (the anchor, RTMR3,
/// the pins), or `not pinned` when the evidence carries no transcript ("not present").
fn transcript_claim(v: &EvidenceVerification) -> Claim {
    let t = &v.transcript;
    if let Some(d) = failures_of(&v.failures, "transcript") {
        return make_claim("transcript", ClaimStatus::Failed, None, d);
    }
    if !t.present {
        return make_claim(
            "transcript",
            ClaimStatus::NotPinned,
            None,
            "not present: the evidence carries no fence transcript".into(),
        );
    }
    let mut detail = format!(
        "{} events, SHA-384 {}",
        t.events.len(),
        t.sha384.map(hex::encode).unwrap_or_default()
    );
    if t.rtmr3_replayed == Some(true) {
        detail.push_str("; RTMR3 replayed over them");
    }
    for p in &t.pins {
        detail.push_str(&format!("; {} {}", p.check, p.wanted));
    }
    make_claim(
        "transcript",
        ClaimStatus::Held,
        Some(match t.rtmr3_replayed {
            Some(_) => {
                "the anchor quote (its REPORTDATA and RTMR3), from the first quote's launch".into()
            }
            None => "the anchor report's REPORT_DATA, from the first report's launch".into(),
        }),
        detail,
    )
}

/// The claims as table rows: `claim NAME` and `held|failed|not pinned`, the anchor and the detail.
pub fn claim_rows(claims: &[Claim]) -> Vec<(String, String)> {
    claims
        .iter()
        .map(|c| {
            let mut v = c.status.as_str().to_string();
            if let Some(a) = &c.anchor {
                v.push_str(&format!(" (anchor: {a})"));
            }
            if !c.detail.is_empty() {
                v.push_str(&format!(": {}", c.detail));
            }
            (format!("claim {}", c.claim), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_and_prefixes_every_line() {
        let t = print_table(
            &[("a".into(), "1".into()), ("long key".into(), "x\ny".into())],
            "SIMULATED ",
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.starts_with("SIMULATED ")));
        assert_eq!(lines[0], "SIMULATED a         1");
        assert_eq!(lines[2], "SIMULATED           y");
    }

    #[test]
    fn table_escapes_keys_and_values() {
        let t = print_table(
            &[("CN\x1b[2J".into(), "Evil \u{9b}31m\rOK\nline\x07".into())],
            "",
        );
        assert!(attestation::text::is_safe_output(t.as_bytes()), "{t:?}");
        assert!(
            t.contains("CN\\x1b[2J") && t.contains("Evil \\u{9b}31m\\rOK"),
            "{t}"
        );
        assert!(t.contains("line\\x07"), "{t}");
    }
}
