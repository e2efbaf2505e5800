//! The sim TDX QE end to end: its quotes and collateral run through the whole verifier; they are accepted
//! only with `allow_simulated` (decided by the root key), and TCB, policy and CLI behave as on real quotes.

use attestation::sim::tdx::{SimPlatform, SimQe, SimTd, SIM_ADVISORY};
use std::process::Command;
use verifier_lib::tdx::{verify_quote, Collateral, Policy, Root, TcbStatus, VerifyOptions};

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn td() -> SimTd {
    SimTd {
        mrtd: [0x42; 48],
        report_data: [0x07; 64],
        rtmr: [[1; 48], [2; 48], [3; 48], [0; 48]],
        ..SimTd::default()
    }
}

#[test]
fn tdx_sim_quote_verifies_only_with_allow_simulated() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("sim qe");
    let t = td();
    let quote = qe.quote(&t).expect("quote");
    let coll = Collateral::from_json(&qe.collateral_json(&t.tee_tcb_svn).expect("collateral"))
        .expect("parse");
    let policy = Policy {
        mrtd: vec![[0x42; 48]],
        report_data: Some([0x07; 64]),
        ..Policy::default()
    };
    let opts = VerifyOptions {
        collateral: Some(&coll),
        at: now(),
        policy: &policy,
        allow_simulated: true,
    };
    let r = verify_quote(&quote, &opts).expect("parse");
    assert!(r.verified(), "{:?}", r.failures);
    assert!(r.simulated);
    assert_eq!(r.authenticity.root, Some(Root::Simulated));
    assert_eq!(r.tcb_status(), Some(TcbStatus::UpToDate));
    let tcb = r.tcb.as_ref().expect("tcb");
    assert_eq!(tcb.module_identity_id.as_deref(), Some("TDX_01"));
    assert_eq!(tcb.sgx_level_index, Some(0));
    let pck = r.pck.as_ref().expect("pck");
    assert_eq!(pck.fmspc, SimPlatform::default().fmspc);
    assert_eq!(
        pck.sgx_tcb_components,
        SimPlatform::default().sgx_tcb_components
    );
    assert_eq!(pck.ppid, qe.ppid());

    let strict = VerifyOptions {
        allow_simulated: false,
        ..opts
    };
    let r = verify_quote(&quote, &strict).expect("parse");
    assert!(!r.verified());
    assert_eq!(
        r.failures
            .iter()
            .map(|f| f.check.as_ref())
            .collect::<Vec<_>>(),
        ["pck-chain-root-pin"]
    );
}

#[test]
fn tdx_sim_keys_persist_and_the_td15_path_works() {
    let dir = tempfile::tempdir().expect("tmp");
    let a = SimQe::new(dir.path()).expect("first open");
    let b = SimQe::new(dir.path()).expect("second open");
    let root_key = |der: &[u8]| {
        verifier_lib::tdx::x509::Cert::from_der("root", der)
            .expect("cert")
            .spki_sha256()
    };
    assert_eq!(root_key(a.root_der()), root_key(b.root_der()));
    let other = tempfile::tempdir().expect("tmp");
    let c = SimQe::new(other.path()).expect("other state");
    assert_ne!(root_key(a.root_der()), root_key(c.root_der()));

    let mut t = td();
    t.td15 = Some(([1; 16], [0; 48]));
    let quote = b.quote(&t).expect("v5 quote");
    let parsed = attestation::tdx::Quote::parse(&quote).expect("parse");
    assert_eq!(parsed.header.version, 5);
    assert!(parsed.body.td15().is_some());
    let coll =
        Collateral::from_json(&b.collateral_json(&t.tee_tcb_svn).expect("c")).expect("parse");
    let policy = Policy::default();
    let opts = VerifyOptions {
        collateral: Some(&coll),
        at: now(),
        policy: &policy,
        allow_simulated: true,
    };
    let r = verify_quote(&quote, &opts).expect("parse");
    assert!(r.verified(), "{:?}", r.failures);

    t.td15 = Some(([1; 16], [9; 48]));
    let r = verify_quote(&b.quote(&t).expect("q"), &opts).expect("parse");
    assert_eq!(
        r.failures
            .iter()
            .map(|f| f.check.as_ref())
            .collect::<Vec<_>>(),
        ["mr-servicetd"]
    );
    let allow = Policy {
        allow_service_td: true,
        ..Policy::default()
    };
    let r = verify_quote(
        &b.quote(&t).expect("q"),
        &VerifyOptions {
            policy: &allow,
            ..opts
        },
    )
    .expect("parse");
    assert!(r.verified(), "{:?}", r.failures);
}

#[test]
fn tdx_sim_tcb_grading_out_of_date_platform_and_module() {
    let dir = tempfile::tempdir().expect("tmp");
    let high = SimPlatform {
        sgx_tcb_components: [9; 16],
        pcesvn: 13,
        ..SimPlatform::default()
    };
    let pcs = SimQe::with_platform(dir.path(), high).expect("pcs");
    let t = td();
    let coll =
        Collateral::from_json(&pcs.collateral_json(&t.tee_tcb_svn).expect("c")).expect("parse");
    let policy = Policy::default();
    let opts = VerifyOptions {
        collateral: Some(&coll),
        at: now(),
        policy: &policy,
        allow_simulated: true,
    };

    // An older platform (same FMSPC, same keys) falls to the OutOfDate level with its advisory.
    let old = SimQe::new(dir.path()).expect("old platform");
    let r = verify_quote(&old.quote(&t).expect("q"), &opts).expect("parse");
    assert_eq!(r.tcb_status(), Some(TcbStatus::OutOfDate));
    assert_eq!(r.tcb.as_ref().expect("tcb").advisory_ids, [SIM_ADVISORY]);
    assert_eq!(
        r.failures
            .iter()
            .map(|f| f.check.as_ref())
            .collect::<Vec<_>>(),
        ["tcb-status"]
    );

    // A TDX module below its identity's UpToDate level is OutOfDate; the converged status follows it.
    let mut low = td();
    low.tee_tcb_svn[0] = 3;
    let current = SimQe::with_platform(
        dir.path(),
        SimPlatform {
            sgx_tcb_components: [9; 16],
            pcesvn: 13,
            ..SimPlatform::default()
        },
    )
    .expect("current");
    let r = verify_quote(&current.quote(&low).expect("q"), &opts).expect("parse");
    let tcb = r.tcb.as_ref().expect("tcb");
    assert_eq!(tcb.module_status, Some(TcbStatus::OutOfDate));
    assert_eq!(tcb.tdx_level_status, Some(TcbStatus::UpToDate));
    assert_eq!(r.tcb_status(), Some(TcbStatus::OutOfDate));
    // TD 1.5: the same outdated TD on a module updated in place (TEE_TCB_SVN2 current) is advised to relaunch.
    let mut updated = low.clone();
    updated.td15 = Some((td().tee_tcb_svn, [0; 48]));
    let r = verify_quote(&current.quote(&updated).expect("q"), &opts).expect("parse");
    assert_eq!(r.tcb_status(), Some(TcbStatus::TDRelaunchAdvised));
    let mut not_updated = low.clone();
    not_updated.td15 = Some((low.tee_tcb_svn, [0; 48]));
    let r = verify_quote(&current.quote(&not_updated).expect("q"), &opts).expect("parse");
    assert_eq!(r.tcb_status(), Some(TcbStatus::OutOfDate));
    // A module major version without an identity is not supported.
    let mut major = td();
    major.tee_tcb_svn[1] = 2;
    let r = verify_quote(&current.quote(&major).expect("q"), &opts).expect("parse");
    assert_eq!(
        r.tcb.as_ref().expect("tcb").module_identity_id.as_deref(),
        Some("TDX_02")
    );
    assert_eq!(r.tcb_status(), Some(TcbStatus::NotSupported));
    // A TDX component below the level (index 2, not skipped) finds only the OutOfDate level.
    let mut comp = td();
    comp.tee_tcb_svn[2] = 6;
    let r = verify_quote(&current.quote(&comp).expect("q"), &opts).expect("parse");
    assert_eq!(r.tcb.as_ref().expect("tcb").tdx_level_index, Some(1));
    assert_eq!(r.tcb_status(), Some(TcbStatus::OutOfDate));
    // A different FMSPC is named.
    let other = SimQe::with_platform(
        dir.path(),
        SimPlatform {
            fmspc: [1; 6],
            ..SimPlatform::default()
        },
    )
    .expect("o");
    let r = verify_quote(&other.quote(&t).expect("q"), &opts).expect("parse");
    assert!(r.failed("tcb-info-fmspc"), "{:?}", r.failures);
}

#[test]
fn tdx_sim_cli_says_simulated_on_every_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let t = td();
    let q = dir.path().join("quote.bin");
    let c = dir.path().join("collateral.json");
    std::fs::write(&q, qe.quote(&t).expect("q")).expect("w");
    std::fs::write(&c, qe.collateral_json(&t.tee_tcb_svn).expect("c")).expect("w");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("tdx-quote")
            .arg(&q)
            .arg("--collateral")
            .arg(&c)
            .args(extra)
            .output()
            .expect("run")
    };
    let out = run(&["--allow-simulated", "--mrtd", &"42".repeat(48)]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().count() > 5 && text.lines().all(|l| l.starts_with("SIMULATED ")),
        "{text}"
    );
    let out = run(&["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["tee"], "sim-tdx");
    assert_eq!(v["failures"][0]["check"], "pck-chain-root-pin");
}

/// A CCEL log (TCG2 crypto-agile, SHA-384 only) with one event per RTMR.
fn ccel_log() -> Vec<u8> {
    let mut spec = b"Spec ID Event03\0".to_vec();
    spec.extend_from_slice(&0u32.to_le_bytes());
    spec.extend_from_slice(&[0, 2, 0, 2]);
    spec.extend_from_slice(&1u32.to_le_bytes());
    spec.extend_from_slice(&0x000cu16.to_le_bytes());
    spec.extend_from_slice(&48u16.to_le_bytes());
    spec.push(0);
    let mut l = Vec::new();
    l.extend_from_slice(&0u32.to_le_bytes());
    l.extend_from_slice(&3u32.to_le_bytes()); // EV_NO_ACTION
    l.extend_from_slice(&[0; 20]);
    l.extend_from_slice(&(spec.len() as u32).to_le_bytes());
    l.extend_from_slice(&spec);
    for mr in 1u32..=4 {
        let data = format!("event for RTMR{}", mr - 1).into_bytes();
        l.extend_from_slice(&mr.to_le_bytes());
        l.extend_from_slice(&0x8000_0001u32.to_le_bytes());
        l.extend_from_slice(&1u32.to_le_bytes());
        l.extend_from_slice(&0x000cu16.to_le_bytes());
        l.extend_from_slice(&[mr as u8; 48]);
        l.extend_from_slice(&(data.len() as u32).to_le_bytes());
        l.extend_from_slice(&data);
    }
    l
}

#[test]
fn tdx_sim_cli_event_log_replay_must_match_the_rtmrs() {
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let log = ccel_log();
    let replay = measurements::tdx::replay_rtmrs(&log).expect("replay");
    assert!(replay.rtmrs.iter().all(|r| *r != [0; 48]));
    let l = dir.path().join("ccel.bin");
    std::fs::write(&l, &log).expect("w");
    let c = dir.path().join("collateral.json");
    let run = |t: &SimTd| {
        let q = dir.path().join("quote.bin");
        std::fs::write(&q, qe.quote(t).expect("q")).expect("w");
        std::fs::write(&c, qe.collateral_json(&t.tee_tcb_svn).expect("c")).expect("w");
        let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("tdx-quote")
            .arg(&q)
            .arg("--collateral")
            .arg(&c)
            .arg("--event-log")
            .arg(&l)
            .args(["--allow-simulated", "--json"])
            .output()
            .expect("run");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        (out.status.code(), v)
    };
    let matching = SimTd {
        rtmr: replay.rtmrs,
        ..td()
    };
    let (code, v) = run(&matching);
    assert_eq!(code, Some(0), "{v}");
    let mut other = matching.clone();
    other.rtmr[2] = [0xee; 48];
    let (code, v) = run(&other);
    assert_eq!(code, Some(1));
    assert_eq!(v["failures"].as_array().expect("f").len(), 1, "{v}");
    assert_eq!(v["failures"][0]["check"], "event-log-rtmr2");
    assert_eq!(
        v["failures"][0]["wanted"],
        format!("replayed {}", hex::encode(replay.rtmrs[2]))
    );
    // An unreadable log is unusable input.
    std::fs::write(&l, b"garbage").expect("w");
    let (code, _) = run(&matching);
    assert_eq!(code, Some(2));
}

#[test]
fn tdx_sim_revoked_certificates_are_named() {
    use attestation::sim::tdx::SimCert;
    let dir = tempfile::tempdir().expect("tmp");
    let qe = SimQe::new(dir.path()).expect("qe");
    let t = td();
    let quote = qe.quote(&t).expect("q");
    let issued = now() as u64 - 3600;
    let policy = Policy::default();
    for (revoke, check) in [
        (SimCert::PckLeaf, "pck-chain-leaf-revoked"),
        (SimCert::PckCa, "pck-chain-ca-revoked"),
        (SimCert::TcbSigning, "tcb-info-issuer-chain-leaf-revoked"),
    ] {
        let json = qe
            .collateral_json_revoking(&t.tee_tcb_svn, issued, &[revoke])
            .expect("collateral");
        let coll = Collateral::from_json(&json).expect("parse");
        let opts = VerifyOptions {
            collateral: Some(&coll),
            at: now(),
            policy: &policy,
            allow_simulated: true,
        };
        let r = verify_quote(&quote, &opts).expect("parse");
        assert!(!r.verified(), "{revoke:?}");
        assert!(
            r.failures.iter().any(|f| f.check == check),
            "{revoke:?}: {:?}",
            r.failures
        );
        assert!(!r.collateral.as_ref().expect("checked").none_revoked);
    }
    // Nothing revoked: verified, and the CRLs were really checked.
    let coll = Collateral::from_json(
        &qe.collateral_json_revoking(&t.tee_tcb_svn, issued, &[])
            .expect("c"),
    )
    .expect("parse");
    let opts = VerifyOptions {
        collateral: Some(&coll),
        at: now(),
        policy: &policy,
        allow_simulated: true,
    };
    let r = verify_quote(&quote, &opts).expect("parse");
    assert!(r.verified(), "{:?}", r.failures);
    let c = r.collateral.as_ref().expect("checked");
    assert!(c.none_revoked && c.pck_crl_signature && c.root_ca_crl_signature);
}
