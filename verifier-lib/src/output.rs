//! The JSON object and the aligned human table that `verify-attestation` prints, and the [`Failure`] record
//! every check reports.
//!
//! A failure names the check, what was seen and what was expected; a verifier collects all of them rather than
//! stopping at the first, so a founder sees every reason at once.

use crate::evidence::{EvidenceOptions, EvidenceVerification, ReportVerification};
use crate::snp::{ChainOptions, RootKind, SnpVerification};
use attestation::snp::{Product, TcbVersion};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;

/// One failed check: which check, and a detail naming the value seen and the value expected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// Stable name of the check (e.g. `report-signature`, `leaf-signature`, `measurement`).
    pub check: Cow<'static, str>,
    /// What was seen and what was expected.
    pub detail: String,
}

impl Failure {
    /// A failure of `check` with `detail`.
    pub fn new(check: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Failure {
        Failure {
            check: check.into(),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.detail)
    }
}

/// Prints rows as an aligned two-column table; every line is prefixed with `prefix` (e.g. `SIMULATED `).
pub fn print_table(rows: &[(String, String)], prefix: &str) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        let mut lines = v.lines();
        let first = lines.next().unwrap_or("");
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
            "reported tcb".to_string(),
            match v.product() {
                Some(p) => format!("{} ({})", r.reported_tcb, r.reported_tcb.decode(p)),
                None => r.reported_tcb.to_string(),
            },
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

/// The notes an evidence result carries: checks skipped on purpose, and simulation.
pub fn evidence_notes(v: &EvidenceVerification) -> Vec<String> {
    let mut notes = Vec::new();
    if v.simulated {
        notes.push("SIMULATED: the chain does not end in a vendor root; this proves nothing about hardware".into());
    }
    if !v.measurement_pinned {
        notes.push("launch measurement NOT pinned (--any-measurement): any guest code could have produced this verdict".into());
    }
    if !v.nonce_checked {
        notes.push("nonce NOT checked (no --nonce): the verdict may be a replay".into());
    }
    notes
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
            "reported_tcb": t.tcb_status().map(|s| format!("{s:?}")),
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
        o.insert("measurement_pinned".into(), v.measurement_pinned.into());
        o.insert("nonce_checked".into(), v.nonce_checked.into());
        o.insert("notes".into(), evidence_notes(v).into());
        o.insert("checked_at".into(), fmt_at(&opts.chain.at).into());
    }
    out
}

/// The human table of an evidence result; every line says SIMULATED when the chain is not the vendor's.
pub fn evidence_table(v: &EvidenceVerification, opts: &EvidenceOptions) -> String {
    let mut rows = vec![
        (
            "result".to_string(),
            if v.verified() {
                "VERIFIED".to_string()
            } else {
                "REJECTED".to_string()
            },
        ),
        (
            "tee".to_string(),
            format!("{} (labelled {})", evidence_tee(v), v.label),
        ),
    ];
    match &v.report {
        ReportVerification::Snp(s) => {
            rows.extend(snp_rows(s, &opts.chain).into_iter().filter(|(k, _)| {
                !(k == "result" || k == "tee" || k == "failures" || k.starts_with("FAIL "))
            }));
        }
        ReportVerification::Tdx(t) => {
            rows.push(("mrtd".to_string(), hex::encode(t.quote.td().mrtd)));
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
    if let Some(d) = &v.verdict {
        rows.push(("outcome".to_string(), d.outcome.to_string()));
        rows.push(("isolation".to_string(), d.isolation.to_string()));
        rows.push(("verdict nonce".to_string(), hex::encode(&d.inputs.nonce)));
    }
    for n in evidence_notes(v) {
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
}
