//! Every tightening policy flag of `verify-attestation tdx-quote`, run through the built CLI on real vectors with
//! their collateral at the vector's reference time: a value the quote does not meet rejects it (exit 1) with
//! exactly that check, naming seen and wanted; a value it meets keeps it verified (exit 0).

use std::path::{Path, PathBuf};
use std::process::Command;

use attestation::tdx::{Quote, QuoteBody};
use verifier_lib::tdx::Policy;

fn expected(d: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(d.join("expected.json")).expect("expected.json"))
        .expect("json")
}

/// One row: vector, flags, and `Some((check, seen, wanted part))` when it must be rejected.
struct Row {
    vector: &'static str,
    flags: Vec<String>,
    reject: Option<(String, String, String)>,
}

fn row(vector: &'static str, flags: &[&str], reject: Option<(&str, &str, &str)>) -> Row {
    Row {
        vector,
        flags: flags.iter().map(|s| s.to_string()).collect(),
        reject: reject.map(|(c, s, w)| (c.to_string(), s.to_string(), w.to_string())),
    }
}

/// A TD 1.5 quote whose TCB is UpToDate, with MR_SERVICETD zero.
const V: &str = "gotdx-v5-td15-90c06f-uptodate";
/// A v4 quote whose TCB is OutOfDate with three advisories.
const OOD: &str = "automata-v4-00806f-outofdate-padded";
/// A debug TD.
const DEBUG: &str = "trustee-v4-50806f-debug-td";

#[test]
fn tdx_quote_each_tightening_flag_rejects_an_unmet_value_and_accepts_a_met_one() {
    let Some(dir) = attestation::vectors::dir("tdx") else {
        return;
    };
    let exp = expected(&dir.join(V));
    let f = &exp["fields"];
    let field = |k: &str| f[k].as_str().expect("hex field").to_string();
    assert_eq!(exp["tcb_status_intel_qvl_semantics"], "UpToDate", "{V}");
    let ood = expected(&dir.join(OOD));
    assert_eq!(ood["tcb_status_intel_qvl_semantics"], "OutOfDate", "{OOD}");
    let advisory = ood["advisory_ids_intel_qvl_semantics"][0]
        .as_str()
        .expect("an advisory")
        .to_string();
    let bad48 = "ab".repeat(48);
    let bad8 = "ab".repeat(8);
    let bad64 = "ab".repeat(64);
    let mut rows = Vec::new();
    for (flag, key, check) in [
        ("--mrtd", "mrtd", "mrtd"),
        ("--rtmr0", "rtmr0", "rtmr0"),
        ("--rtmr1", "rtmr1", "rtmr1"),
        ("--rtmr2", "rtmr2", "rtmr2"),
        ("--rtmr3", "rtmr3", "rtmr3"),
        ("--mr-config-id", "mr_config_id", "mr-config-id"),
        ("--mr-owner", "mr_owner", "mr-owner"),
        ("--td-attributes", "td_attributes", "td-attributes"),
        ("--xfam", "xfam", "xfam"),
        ("--report-data", "report_data", "report-data"),
    ] {
        let seen = field(key);
        let bad = match seen.len() {
            16 => bad8.clone(),
            96 => bad48.clone(),
            128 => bad64.clone(),
            n => panic!("{key}: {n} hex digits"),
        };
        rows.push(Row {
            vector: V,
            flags: vec![flag.into(), bad.clone()],
            reject: Some((check.into(), seen.clone(), bad)),
        });
        rows.push(Row {
            vector: V,
            flags: vec![flag.into(), seen],
            reject: None,
        });
    }
    // TEE_TCB_SVN 0b0104...: one component above it rejects; the quote's own value is met.
    let svn = field("tee_tcb_svn");
    assert_eq!(&svn[..6], "0b0104", "{V}");
    let above = format!("0b0105{}", &svn[6..]);
    rows.push(row(
        V,
        &["--min-tee-tcb-svn", &above],
        Some(("tee-tcb-svn", &svn, &above)),
    ));
    rows.push(row(V, &["--min-tee-tcb-svn", &svn], None));
    rows.push(row(V, &["--mrtd", &bad48, "--mrtd", &field("mrtd")], None));
    // MR_SERVICETD is zero: accepted by default and with --allow-service-td.
    rows.push(row(V, &[], None));
    rows.push(row(V, &["--allow-service-td"], None));
    // Accepted statuses: OutOfDate is rejected by default and accepted when named.
    rows.push(row(
        OOD,
        &[],
        Some(("tcb-status", "OutOfDate", "UpToDate, SWHardeningNeeded")),
    ));
    rows.push(row(
        OOD,
        &["--accept-tcb-status", "ConfigurationNeeded"],
        Some(("tcb-status", "OutOfDate", "ConfigurationNeeded")),
    ));
    rows.push(row(OOD, &["--accept-tcb-status", "OutOfDate"], None));
    // A denied advisory the level carries rejects; one it does not carry does not.
    rows.push(row(
        OOD,
        &[
            "--accept-tcb-status",
            "OutOfDate",
            "--deny-advisory",
            &advisory,
        ],
        Some(("advisory-ids", &advisory, "not a denied advisory")),
    ));
    rows.push(row(
        OOD,
        &[
            "--accept-tcb-status",
            "OutOfDate",
            "--deny-advisory",
            "INTEL-SA-99999",
        ],
        None,
    ));
    // A debug TD is rejected unless allowed.
    rows.push(row(
        DEBUG,
        &[],
        Some(("td-attributes-debug", "set", "clear")),
    ));
    rows.push(row(DEBUG, &["--allow-debug"], None));

    for r in &rows {
        let d = dir.join(r.vector);
        let at = expected(&d)["reference_time_unix"]
            .as_i64()
            .expect("reference_time_unix")
            .to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("tdx-quote")
            .arg(d.join("quote.bin"))
            .arg("--collateral")
            .arg(d.join("collateral.json"))
            .args(["--at", &at, "--json"])
            .args(&r.flags)
            .output()
            .expect("run verify-attestation");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "{} {:?}: {stdout} {}",
            r.vector,
            r.flags,
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let failures = json["failures"].as_array().expect("failures array");
        match &r.reject {
            None => {
                assert_eq!(out.status.code(), Some(0), "{ctx}");
                assert_eq!(json["verified"], true, "{ctx}");
                assert!(failures.is_empty(), "{ctx}");
            }
            Some((check, seen, wanted)) => {
                assert_eq!(out.status.code(), Some(1), "{ctx}");
                assert_eq!(json["verified"], false, "{ctx}");
                assert_eq!(failures.len(), 1, "{ctx}");
                let fl = &failures[0];
                assert_eq!(fl["check"], check.as_str(), "{ctx}");
                let s = fl["seen"].as_str().expect("seen");
                let w = fl["wanted"].as_str().expect("wanted");
                assert!(s.contains(seen.as_str()), "{ctx}: seen lacks {seen}");
                assert!(w.contains(wanted.as_str()), "{ctx}: wanted lacks {wanted}");
            }
        }
    }
}

/// No real vector carries a non-zero MR_SERVICETD, so the rule is checked on the real TD 1.5 body with that
/// field set (the policy check reads only the body, not the signature).
#[test]
fn tdx_policy_rejects_a_service_td_unless_allowed() {
    let Some(dir) = attestation::vectors::dir("tdx") else {
        return;
    };
    let path: PathBuf = dir.join(V).join("quote.bin");
    let mut quote = Quote::parse(&std::fs::read(path).expect("quote")).expect("parse");
    let mut failures = Vec::new();
    Policy::default().check_td(&quote, &mut failures);
    assert!(failures.is_empty(), "{failures:?}");
    let QuoteBody::Td15(b) = &mut quote.body else {
        panic!("{V} is a TD 1.5 quote");
    };
    b.mr_servicetd[0] = 0x5a;
    Policy::default().check_td(&quote, &mut failures);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].check, "mr-servicetd");
    assert!(failures[0].seen_str().starts_with("5a00"), "{failures:?}");
    let allowed = Policy {
        allow_service_td: true,
        ..Policy::default()
    };
    let mut none = Vec::new();
    allowed.check_td(&quote, &mut none);
    assert!(none.is_empty(), "{none:?}");
}
