//! The output layer, on top of every verifier: the JSON object and the aligned human table that
//! `verify-attestation` prints from a typed result ([`crate::snp::SnpVerification`],
//! [`crate::evidence::EvidenceVerification`]). Nothing below imports it; the [`crate::Failure`] records it prints
//! come from [`crate::failure`].

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
pub fn snp_tee_label(v: &SnpVerification) -> &'static str {
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

/// The human table for a SEV-SNP verification; every line says SIMULATED when the root is not AMD's.
pub fn snp_table(v: &SnpVerification, opts: &ChainOptions) -> String {
    print_table(
        &snp_rows(v, opts),
        if v.simulated() { "SIMULATED " } else { "" },
    )
}

/// The note that opens the notes when the founder did not pin the outcome (`--expect-outcome`).
pub const OUTCOME_NOT_PINNED: &str = "outcome NOT pinned (no --expect-outcome): this result holds whatever the run's outcome was, a failing run included";

/// The note when `--expect-outcome tests_failed` is given without a pin on the failed tests' count.
pub const FAILED_COUNT_NOT_PINNED: &str = "failed-test count NOT pinned (--expect-outcome tests_failed without \
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
        notes.push("launch measurement NOT pinned (--any-measurement): any guest code could have produced this verdict".into());
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
pub fn evidence_run_rows(v: &EvidenceVerification) -> Vec<(String, String)> {
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
pub fn evidence_pin_rows(v: &EvidenceVerification) -> Vec<(String, String)> {
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

/// The JSON object of `verify-attestation evidence --json`.
pub fn evidence_json(v: &EvidenceVerification, opts: &EvidenceOptions) -> serde_json::Value {
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
    }
    out
}

/// The human table of an evidence result; every line says SIMULATED when the chain is not the vendor's.
pub fn evidence_table(v: &EvidenceVerification, opts: &EvidenceOptions) -> String {
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
    rows.extend(evidence_pin_rows(v));
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
