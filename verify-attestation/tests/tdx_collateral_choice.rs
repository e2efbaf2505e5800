//! Collateral the founder chose (issue 20): when TDX evidence carries collateral and the founder gives
//! `--collateral` too, the founder's is used, so a host cannot ship older, still-valid collateral to hide a
//! fresher CRL; the output (library, JSON and human) names the collateral used with its dates. The reserved
//! map form of evidence collateral is refused.

use attestation::binding;
use attestation::evidence::{Collateral as EvCollateral, Evidence, TeeLabel};
use attestation::hex::Hex;
use attestation::sim::tdx::{SimCert, SimQe, SimTd, SimTdxTee};
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use std::process::Command;
use verifier_lib::evidence::{verify_evidence, EvidenceOptions, ReportVerification, SharedPolicy};
use verifier_lib::snp::ChainOptions;
use verifier_lib::tdx::CollateralSource;

const MRTD: [u8; 48] = [0x3d; 48];
const NONCE: [u8; 32] = [0x4e; 32];
const DAY: u64 = 86_400;

fn now() -> u64 {
    time::OffsetDateTime::now_utc().unix_timestamp() as u64
}

fn key() -> SigningKey {
    SigningKey::from_slice(&Sha384::digest(b"collateral-choice")).expect("scalar")
}

/// Sim TDX evidence whose bundle carries `carried` as its collateral.
fn evidence(tee: &SimTdxTee, carried: Option<EvCollateral>) -> Evidence {
    let k = key();
    let rd = binding::report_data(&p384::PublicKey::from(k.verifying_key()), &NONCE);
    let raw = tee.get_report(&rd).expect("sim quote");
    let inputs = Inputs {
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    let ev = Evidence::seal(
        TeeLabel::SimTdx,
        raw.report,
        raw.certs,
        carried,
        &k,
        &verdict,
    )
    .expect("seal");
    Evidence::from_cbor(&ev.to_cbor().expect("encode")).expect("decode")
}

fn opts(founder: Option<Vec<u8>>) -> EvidenceOptions {
    EvidenceOptions {
        chain: ChainOptions {
            allow_simulated: true,
            ..ChainOptions::default()
        },
        shared: SharedPolicy {
            measurements: vec![Hex(MRTD)],
            ..SharedPolicy::default()
        },
        nonce: Some(NONCE.to_vec()),
        any_measurement: false,
        measurement_set: None,
        tdx_collateral: founder,
        // The image pin is not what these tests are about: only MRTD is pinned, on purpose.
        leave_rtmrs_unpinned: true,
        ..EvidenceOptions::default()
    }
}

fn setup() -> (tempfile::TempDir, SimTdxTee, SimQe, SimTd) {
    let dir = tempfile::tempdir().expect("tmp");
    let td = SimTd {
        mrtd: MRTD,
        ..SimTd::default()
    };
    let tee = SimTdxTee::new(SimQe::new(dir.path()).expect("qe"), td.clone());
    let qe = SimQe::new(dir.path()).expect("qe, same keys");
    (dir, tee, qe, td)
}

fn used(v: &verifier_lib::evidence::EvidenceVerification) -> verifier_lib::tdx::CollateralUsed {
    match &v.report {
        ReportVerification::Tdx(t) => t.collateral_used.clone().expect("collateral used"),
        other => panic!("not a TDX result: {other:?}"),
    }
}

#[test]
fn the_founders_collateral_wins_over_older_collateral_in_the_evidence() {
    let (_dir, tee, qe, td) = setup();
    // The host ships collateral from 20 days ago: still inside its 30-day window, but older than the
    // founder's, whose PCK CRL revokes the PCK leaf.
    let older = qe
        .collateral_json_at(&td.tee_tcb_svn, now() - 20 * DAY)
        .expect("older");
    let fresher = qe
        .collateral_json_revoking(&td.tee_tcb_svn, now() - 3600, &[SimCert::PckLeaf])
        .expect("fresher");
    let ev = evidence(&tee, Some(EvCollateral::Bytes(older.clone())));

    // Alone, the evidence's collateral verifies (that is what the host hoped for), and says where it came from.
    let alone = verify_evidence(&ev, &opts(None));
    assert!(alone.verified(), "{:?}", alone.failures);
    let u = used(&alone);
    assert_eq!(u.source, CollateralSource::Evidence);
    assert!(!u.evidence_collateral_ignored);

    // With the founder's, the revocation the host tried to hide is found.
    let v = verify_evidence(&ev, &opts(Some(fresher.clone())));
    assert!(!v.verified());
    assert!(
        v.failures
            .iter()
            .any(|f| f.check == "pck-chain-leaf-revoked"),
        "{:?}",
        v.failures
    );
    let u = used(&v);
    assert_eq!(u.source, CollateralSource::Founder);
    assert!(u.evidence_collateral_ignored);
    let founder = verifier_lib::tdx::Collateral::from_json(&fresher).expect("parse");
    assert_eq!(u.tcb_info_issue_date, founder.tcb_info.issue_date);
    assert_eq!(u.qe_identity_next_update, founder.qe_identity.next_update);
    assert!(u.pck_crl_next_update.is_some());
}

#[test]
fn the_reserved_map_form_of_collateral_is_refused() {
    let (_dir, tee, qe, td) = setup();
    let good = qe.collateral_json(&td.tee_tcb_svn).expect("collateral");
    let map = EvCollateral::Map(
        [("tcb_info".to_string(), b"{}".to_vec())]
            .into_iter()
            .collect(),
    );
    let ev = evidence(&tee, Some(map));
    // Refused even when the founder's own collateral would have sufficed.
    for founder in [None, Some(good)] {
        let v = verify_evidence(&ev, &opts(founder));
        assert!(!v.verified());
        assert!(
            v.failures
                .iter()
                .any(|f| f.check == "collateral-format" && f.detail.contains("reserved map form")),
            "{:?}",
            v.failures
        );
    }
}

#[test]
fn the_cli_names_the_collateral_used_with_its_dates() {
    let (dir, tee, qe, td) = setup();
    let older = qe
        .collateral_json_at(&td.tee_tcb_svn, now() - 20 * DAY)
        .expect("older");
    let fresher = qe
        .collateral_json_at(&td.tee_tcb_svn, now() - 3600)
        .expect("fresher");
    let ev = evidence(&tee, Some(EvCollateral::Bytes(older)));
    let ev_path = dir.path().join("run.evidence");
    std::fs::write(&ev_path, ev.to_cbor().expect("cbor")).expect("write");
    let coll_path = dir.path().join("collateral.json");
    std::fs::write(&coll_path, &fresher).expect("write");
    let founder = verifier_lib::tdx::Collateral::from_json(&fresher).expect("parse");
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_verify-attestation"));
        c.arg("evidence")
            .arg(&ev_path)
            .args(["--measurement", &hex::encode(MRTD)])
            .args(["--nonce", &hex::encode(NONCE)])
            .arg("--leave-rtmrs-unpinned")
            .arg("--allow-simulated")
            .arg("--collateral")
            .arg(&coll_path);
        if json {
            c.arg("--json");
        }
        let out = c.output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = run(true);
    assert_eq!(code, Some(0), "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).expect("json");
    let u = &j["collateral_used"];
    assert_eq!(u["source"], "founder", "{j:#}");
    assert_eq!(u["evidence_collateral_ignored"], true);
    assert_eq!(
        u["tcb_info_issue_date"],
        founder.tcb_info.issue_date.as_str()
    );
    assert_eq!(
        u["tcb_info_next_update"],
        founder.tcb_info.next_update.as_str()
    );
    assert!(u["root_ca_crl_next_update"].is_string());

    let (code, text) = run(false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("collateral") && l.contains("founder's --collateral")),
        "{text}"
    );
    assert!(
        text.contains(&format!("issued {}", founder.tcb_info.issue_date)),
        "{text}"
    );
    assert!(text.lines().all(|l| l.starts_with("SIMULATED ")), "{text}");
}
