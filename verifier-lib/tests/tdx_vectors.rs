//! TDX verification over every folder of `../shared/vectors/tdx`: each signature check, the chain, the
//! collateral checks and Intel's TCB status at `reference_time_unix` equal `expected.json`; negatives and
//! byte flips are rejected with the right check named; an expired collateral is rejected with the expiry named.

use std::collections::BTreeSet;
use std::path::PathBuf;

use verifier_lib::tdx::{verify_quote, Collateral, Policy, Root, TcbStatus, VerifyOptions};

struct Vector {
    name: String,
    quote: Vec<u8>,
    collateral: Option<Collateral>,
    exp: serde_json::Value,
}

fn vectors() -> Vec<Vector> {
    let Some(entries) = attestation::vectors::cases("tdx", "quote.bin") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in entries {
        let collateral = std::fs::read(p.join("collateral.json")).ok().map(|b| {
            Collateral::from_json(&b).unwrap_or_else(|err| panic!("{}: {err}", p.display()))
        });
        out.push(Vector {
            name: p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            quote: std::fs::read(p.join("quote.bin")).expect("quote"),
            collateral,
            exp: serde_json::from_slice(&std::fs::read(p.join("expected.json")).expect("expected"))
                .expect("json"),
        });
    }
    assert!(
        out.len() >= 9,
        "expected every TDX vector folder, found {}",
        out.len()
    );
    out
}

fn permissive() -> Policy {
    Policy {
        accepted_tcb_statuses: [
            TcbStatus::UpToDate,
            TcbStatus::SWHardeningNeeded,
            TcbStatus::ConfigurationNeeded,
            TcbStatus::ConfigurationAndSWHardeningNeeded,
            TcbStatus::OutOfDate,
            TcbStatus::OutOfDateConfigurationNeeded,
            TcbStatus::NotSupported,
        ]
        .into_iter()
        .collect(),
        allow_debug: true,
        require_sept_ve_disable: false,
        ..Policy::default()
    }
}

fn at_ref(v: &Vector) -> i64 {
    v.exp["reference_time_unix"]
        .as_i64()
        .expect("reference_time_unix")
}

fn b(v: &serde_json::Value, k: &str) -> bool {
    v[k].as_bool().unwrap_or_else(|| panic!("{k} missing"))
}

#[test]
fn tdx_vectors_signatures_chain_collateral_and_tcb_status() {
    for v in vectors() {
        let policy = permissive();
        let opts = VerifyOptions {
            collateral: v.collateral.as_ref(),
            at: at_ref(&v),
            policy: &policy,
            allow_simulated: false,
        };
        let r = verify_quote(&v.quote, &opts).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let n = &v.name;
        let a = &r.authenticity;
        assert_eq!(
            a.quote_signature,
            b(&v.exp, "signature_valid"),
            "{n}: quote signature"
        );
        assert_eq!(
            a.qe_report_signature,
            b(&v.exp, "qe_report_signature_valid"),
            "{n}: QE report signature"
        );
        assert_eq!(
            a.qe_report_data_binding,
            b(&v.exp, "qe_report_data_binding_valid"),
            "{n}: binding"
        );
        let chain_ok = a.pck_chain_signatures && a.pck_chain_time && a.root == Some(Root::Intel);
        assert_eq!(chain_ok, b(&v.exp, "pck_chain_valid"), "{n}: chain");
        assert!(!r.simulated, "{n}");

        let pck = r.pck.as_ref().expect("pck extensions");
        let e = &v.exp["pck_cert"];
        assert_eq!(
            hex::encode(&pck.fmspc),
            e["fmspc"].as_str().expect("fmspc"),
            "{n}"
        );
        assert_eq!(
            hex::encode(&pck.pceid),
            e["pceid"].as_str().expect("pceid"),
            "{n}"
        );
        assert_eq!(
            u64::from(pck.pcesvn),
            e["pcesvn"].as_u64().expect("pcesvn"),
            "{n}"
        );
        assert_eq!(
            hex::encode(&pck.cpusvn),
            e["cpusvn"].as_str().expect("cpusvn"),
            "{n}"
        );
        let comps: Vec<u64> = pck
            .sgx_tcb_components
            .iter()
            .map(|c| u64::from(*c))
            .collect();
        let want: Vec<u64> = e["cpusvn_components"]
            .as_array()
            .expect("comps")
            .iter()
            .map(|x| x.as_u64().expect("u64"))
            .collect();
        assert_eq!(comps, want, "{n}");
        assert_eq!(
            pck.sgx_type,
            e["sgx_type"].as_u64().expect("sgx_type"),
            "{n}"
        );

        let cc = &v.exp["collateral_checks"];
        let c = r.collateral.as_ref().expect("collateral checked");
        assert_eq!(c.tcb_info_signature, b(cc, "tcb_info_sig_valid"), "{n}");
        assert_eq!(c.tcb_info_chain, b(cc, "tcb_info_chain_valid"), "{n}");
        assert_eq!(
            c.qe_identity_signature,
            b(cc, "qe_identity_sig_valid"),
            "{n}"
        );
        assert_eq!(c.qe_identity_chain, b(cc, "qe_identity_chain_valid"), "{n}");
        assert_eq!(
            c.root_ca_crl_signature,
            b(&cc["root_ca_crl"], "sig_ok"),
            "{n}"
        );
        assert_eq!(c.pck_crl_signature, b(&cc["pck_crl"], "sig_ok"), "{n}");
        assert_eq!(
            c.fmspc_match,
            b(cc, "tcb_info_fmspc_match") && b(cc, "tcb_info_pceid_match"),
            "{n}"
        );
        let fresh = b(cc, "tcb_info_time_ok")
            && b(cc, "qe_identity_time_ok")
            && b(&cc["root_ca_crl"], "time_ok")
            && b(&cc["pck_crl"], "time_ok");
        assert_eq!(c.fresh, fresh, "{n}");
        let hits = cc["pck_crl"]["revoked_serials_hit"]
            .as_array()
            .expect("hits")
            .len()
            + cc["root_ca_crl"]["revoked_serials_hit"]
                .as_array()
                .expect("hits")
                .len();
        assert_eq!(c.none_revoked, hits == 0, "{n}");

        let ev = r.tcb.as_ref().expect("tcb evaluated");
        let qe = &v.exp["qe_identity_eval"];
        assert_eq!(
            ev.qe_status.name(),
            qe["status"].as_str().expect("qe status"),
            "{n}: QE status"
        );
        let te = &v.exp["tcb_eval_intel_qvl_semantics"];
        assert_eq!(
            ev.sgx_level_index.map(|i| i as u64),
            te["sgx_level_index"].as_u64(),
            "{n}: sgx level"
        );
        assert_eq!(
            ev.tdx_level_index.map(|i| i as u64),
            te["tdx_level_index"].as_u64(),
            "{n}: tdx level"
        );
        if let Some(id) = te.get("module_identity_id") {
            assert_eq!(
                ev.module_identity_id.as_deref(),
                id.as_str(),
                "{n}: module identity"
            );
        }
        if let Some(ms) = te["module_status"].as_str() {
            assert_eq!(
                ev.module_status.map(|s| s.name()),
                Some(ms),
                "{n}: module status"
            );
        }
        match v.exp["tcb_status_intel_qvl_semantics"].as_str() {
            Some(want) => {
                assert_eq!(ev.status.name(), want, "{n}: TCB status");
                let ids: Vec<&str> = v.exp["advisory_ids_intel_qvl_semantics"]
                    .as_array()
                    .expect("advisories")
                    .iter()
                    .map(|x| x.as_str().expect("id"))
                    .collect();
                assert_eq!(ev.advisory_ids, ids, "{n}: advisory IDs");
            }
            // Negative vectors: the evaluation of the (authentic-looking) TCB still matches the recorded one.
            None => assert_eq!(
                Some(ev.status.name()),
                te["status"].as_str(),
                "{n}: TCB status"
            ),
        }

        // Verdict with the permissive policy: exactly the authentic vectors pass.
        let authentic = b(&v.exp, "signature_valid")
            && b(&v.exp, "qe_report_signature_valid")
            && b(&v.exp, "qe_report_data_binding_valid")
            && b(&v.exp, "pck_chain_valid");
        assert_eq!(r.verified(), authentic, "{n}: {:?}", r.failures);
        if v.exp.get("negative").is_some() {
            assert!(r.failed("quote-signature"), "{n}: {:?}", r.failures);
        }
    }
}

#[test]
fn tdx_vectors_default_policy_verdicts() {
    for v in vectors() {
        let policy = Policy::default();
        let opts = VerifyOptions {
            collateral: v.collateral.as_ref(),
            at: at_ref(&v),
            policy: &policy,
            allow_simulated: false,
        };
        let r = verify_quote(&v.quote, &opts).expect("parse");
        let status = v.exp["tcb_status_intel_qvl_semantics"].as_str();
        let debug = b(&v.exp["policy_flags"], "td_attributes_debug");
        let want = v.exp.get("negative").is_none()
            && matches!(status, Some("UpToDate" | "SWHardeningNeeded"))
            && !debug;
        assert_eq!(r.verified(), want, "{}: {:?}", v.name, r.failures);
        if debug {
            assert!(r.failed("td-attributes-debug"), "{}", v.name);
        }
        if matches!(status, Some("OutOfDate" | "NotSupported")) {
            assert!(
                r.failures
                    .iter()
                    .any(|f| f.check == "tcb-status" && Some(f.seen_str()) == status),
                "{}",
                v.name
            );
        }
    }
}

#[test]
fn tdx_vectors_after_collateral_expiry_are_rejected_with_the_expiry_named() {
    for v in vectors() {
        let end = v.exp["collateral_validity_window"][1]
            .as_str()
            .expect("window end");
        let end = time::OffsetDateTime::parse(end, &time::format_description::well_known::Rfc3339)
            .expect("time");
        let policy = permissive();
        let late = end.unix_timestamp() + 86_400;
        let opts = VerifyOptions {
            collateral: v.collateral.as_ref(),
            at: late,
            policy: &policy,
            allow_simulated: false,
        };
        let r = verify_quote(&v.quote, &opts).expect("parse");
        assert!(!r.verified(), "{}", v.name);
        let expiries: Vec<&str> = r
            .failures
            .iter()
            .filter(|f| f.check.ends_with("-next-update") || f.check.ends_with("-expired"))
            .map(|f| f.check.as_ref())
            .collect();
        assert!(!expiries.is_empty(), "{}: {:?}", v.name, r.failures);
        assert!(!r.collateral.as_ref().expect("checked").fresh, "{}", v.name);
        // Before the window opens, the issue side is named instead.
        let start = v.exp["collateral_validity_window"][0]
            .as_str()
            .expect("start");
        let start =
            time::OffsetDateTime::parse(start, &time::format_description::well_known::Rfc3339)
                .expect("t");
        let early = VerifyOptions {
            at: start.unix_timestamp() - 86_400,
            ..opts
        };
        let r = verify_quote(&v.quote, &early).expect("parse");
        assert!(
            r.failures
                .iter()
                .any(|f| f.check.ends_with("-issue-date") || f.check.ends_with("-this-update")),
            "{}: {:?}",
            v.name,
            r.failures
        );
    }
}

#[test]
fn tdx_byte_flip_sweep_over_header_body_and_qe_report_is_rejected() {
    // Authenticity only (no collateral needed for these checks), so the sweep stays fast.
    let policy = Policy {
        require_collateral: false,
        require_sept_ve_disable: false,
        allow_debug: true,
        ..Policy::default()
    };
    let mut seen_versions = BTreeSet::new();
    for v in vectors()
        .into_iter()
        .filter(|v| v.exp.get("negative").is_none())
    {
        let q = attestation::tdx::Quote::parse(&v.quote).expect("parse");
        let signed = q.signed_bytes().len();
        // Locate the QE report: after the signed region, the 4-byte length, signature, key and cert header.
        let qe_start = signed + 4 + 64 + 64 + 6;
        let opts = VerifyOptions {
            collateral: None,
            at: at_ref(&v),
            policy: &policy,
            allow_simulated: false,
        };
        let base = verify_quote(&v.quote, &opts).expect("parse");
        assert!(base.verified(), "{}: {:?}", v.name, base.failures);
        // Every byte for two vectors (one v4, one v5), every 5th byte for the rest.
        let step = if seen_versions.insert(q.header.version) {
            1
        } else {
            5
        };
        let ranges = [
            (0..signed, "quote-signature"),
            (qe_start..qe_start + 384, "qe-report-"),
        ];
        for (range, check) in ranges {
            for i in range.step_by(step) {
                let mut m = v.quote.clone();
                m[i] ^= 0x01;
                match verify_quote(&m, &opts) {
                    Err(_) => {} // a header flip may make the quote unreadable: rejected too
                    Ok(r) => {
                        assert!(!r.verified(), "{}: flip at {i} accepted", v.name);
                        assert!(
                            r.failures.iter().any(|f| f.check.starts_with(check)),
                            "{}: flip at {i}: {:?}",
                            v.name,
                            r.failures
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn tdx_policy_checks_name_seen_and_wanted() {
    let Some(v) = vectors()
        .into_iter()
        .find(|v| v.name.starts_with("dcapqvl-v4"))
    else {
        return;
    };
    let td = attestation::tdx::Quote::parse(&v.quote)
        .expect("parse")
        .td()
        .clone();
    let mut policy = permissive();
    policy.mrtd = vec![[0x11; 48], [0x22; 48]];
    policy.rtmr[2] = Some([0x33; 48]);
    policy.report_data = Some([0x44; 64]);
    policy.xfam = Some([0; 8]);
    policy.min_tee_tcb_svn = Some([0xff; 16]);
    policy.denied_advisories = BTreeSet::new();
    let opts = VerifyOptions {
        collateral: v.collateral.as_ref(),
        at: at_ref(&v),
        policy: &policy,
        allow_simulated: false,
    };
    let r = verify_quote(&v.quote, &opts).expect("parse");
    let checks: Vec<&str> = r.failures.iter().map(|f| f.check.as_ref()).collect();
    assert_eq!(
        checks,
        ["mrtd", "rtmr2", "xfam", "report-data", "tee-tcb-svn"],
        "{:?}",
        r.failures
    );
    let mrtd = &r.failures[0];
    assert_eq!(mrtd.seen_str(), hex::encode(td.mrtd));
    assert!(
        mrtd.wanted_str().contains(&hex::encode([0x11; 48]))
            && mrtd.wanted_str().contains(&hex::encode([0x22; 48]))
    );
    // And the right values pass.
    policy.mrtd = vec![[0x11; 48], td.mrtd];
    policy.rtmr[2] = Some(td.rtmr[2]);
    policy.report_data = Some(td.report_data);
    policy.xfam = Some(td.xfam);
    policy.min_tee_tcb_svn = Some(td.tee_tcb_svn);
    let opts = VerifyOptions {
        collateral: v.collateral.as_ref(),
        at: at_ref(&v),
        policy: &policy,
        allow_simulated: false,
    };
    let r = verify_quote(&v.quote, &opts).expect("parse");
    assert!(r.verified(), "{:?}", r.failures);
}

#[test]
fn tdx_denied_advisory_and_status_set_reject() {
    let Some(v) = vectors()
        .into_iter()
        .find(|v| v.name.starts_with("automata"))
    else {
        return;
    };
    let mut policy = permissive();
    policy.denied_advisories.insert("INTEL-SA-00982".into());
    let opts = VerifyOptions {
        collateral: v.collateral.as_ref(),
        at: at_ref(&v),
        policy: &policy,
        allow_simulated: false,
    };
    let r = verify_quote(&v.quote, &opts).expect("parse");
    assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
    assert_eq!(
        (r.failures[0].check.as_ref(), r.failures[0].seen_str()),
        ("advisory-ids", "INTEL-SA-00982")
    );
}

#[test]
fn tdx_without_collateral_is_rejected_unless_policy_waives_it() {
    for v in vectors()
        .into_iter()
        .filter(|v| v.exp.get("negative").is_none())
        .take(2)
    {
        let policy = permissive();
        let opts = VerifyOptions {
            collateral: None,
            at: at_ref(&v),
            policy: &policy,
            allow_simulated: false,
        };
        let r = verify_quote(&v.quote, &opts).expect("parse");
        assert_eq!(
            r.failures
                .iter()
                .map(|f| f.check.as_ref())
                .collect::<Vec<_>>(),
            ["collateral"],
            "{}",
            v.name
        );
        assert!(r.tcb.is_none());
    }
}

#[test]
fn tdx_tampered_collateral_is_rejected_with_the_check_named() {
    let Some(v) = vectors()
        .into_iter()
        .find(|v| v.name.starts_with("dcapqvl-v4"))
    else {
        return;
    };
    let dir = std::env::var_os("FENCED_RUN_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"))
        .join("tdx")
        .join(&v.name);
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("collateral.json")).expect("c"))
            .expect("json");
    let flip_last_hex = |s: &str| {
        let mut b = hex::decode(s).expect("hex");
        let n = b.len();
        b[n - 3] ^= 0x01; // inside the signature's s value, at the end of the DER
        hex::encode(b)
    };
    let flip_first_hex = |s: &str| {
        let mut b = hex::decode(s).expect("hex");
        b[5] ^= 0x01;
        hex::encode(b)
    };
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "pck_crl",
            flip_last_hex(raw["pck_crl"].as_str().expect("s")).into(),
            "pck-crl-signature",
        ),
        (
            "root_ca_crl",
            flip_last_hex(raw["root_ca_crl"].as_str().expect("s")).into(),
            "root-ca-crl-signature",
        ),
        (
            "tcb_info_signature",
            flip_first_hex(raw["tcb_info_signature"].as_str().expect("s")).into(),
            "tcb-info-signature",
        ),
        (
            "qe_identity_signature",
            flip_first_hex(raw["qe_identity_signature"].as_str().expect("s")).into(),
            "qe-identity-signature",
        ),
        // The PCK CRL issuer chain in place of the TCB signing chain: the wrong key signed TCB Info.
        (
            "tcb_info_issuer_chain",
            raw["pck_crl_issuer_chain"].clone(),
            "tcb-info-signature",
        ),
    ];
    let policy = permissive();
    for (field, value, check) in cases {
        let mut c = raw.clone();
        c[field] = value;
        let coll = Collateral::from_json(c.to_string().as_bytes()).expect("still readable");
        let opts = VerifyOptions {
            collateral: Some(&coll),
            at: at_ref(&v),
            policy: &policy,
            allow_simulated: false,
        };
        let r = verify_quote(&v.quote, &opts).expect("parse");
        assert!(!r.verified(), "{field}");
        assert!(
            r.failures.iter().any(|f| f.check == check),
            "{field}: {:?}",
            r.failures
        );
    }
}
