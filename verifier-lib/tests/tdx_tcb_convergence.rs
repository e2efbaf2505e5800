//! The TDX TCB status convergence over its whole matrix, through the public `tdx::tcb::evaluate` on synthetic
//! TCB Info: every platform level status x TDX module identity status x QE identity status, plus no matching
//! level, an unmatched module SVN, a module identity mismatch and module version 0. Expected results are
//! written out from Intel's QVL rules (TcbLevelCheck / TdxModuleCheck): the module's OutOfDate lowers
//! UpToDate/SWHardeningNeeded to OutOfDate and the Configuration statuses to OutOfDateConfigurationNeeded, a
//! revoked module or level is final (returned before the QE), then the QE's OutOfDate lowers the same way, a
//! revoked QE revokes and an unsupported QE SVN makes the result NotSupported.

use attestation::tdx::TdReport10;
use verifier_lib::tdx::collateral::TcbInfo;
use verifier_lib::tdx::pck::PckExtensions;
use verifier_lib::tdx::tcb::evaluate;
use verifier_lib::tdx::TcbStatus;

use TcbStatus::{
    ConfigurationAndSWHardeningNeeded as CS, ConfigurationNeeded as C, NotSupported as N,
    OutOfDate as O, OutOfDateConfigurationNeeded as OC, Revoked as R, SWHardeningNeeded as S,
    UpToDate as U,
};

/// The level's SGX component SVNs and PCESVN; the platform has exactly these unless a row says otherwise.
const SGX_SVN: u8 = 2;
const PCESVN: u16 = 10;
/// The module identity's only level: ISVSVN 3.
const MODULE_SVN: u8 = 3;

fn components(svns: [u8; 16]) -> serde_json::Value {
    serde_json::Value::Array(
        svns.iter()
            .map(|s| serde_json::json!({ "svn": s }))
            .collect(),
    )
}

/// TCB Info with one level of `platform` status (TDX component 2 at SVN 1) and module identity TDX_01 whose only
/// level (ISVSVN 3) has `module` status; the module-0 `tdxModule` is present too.
fn tcb_info(platform: TcbStatus, module: TcbStatus) -> TcbInfo {
    let mut tdx = [0u8; 16];
    tdx[2] = 1;
    let v = serde_json::json!({
        "id": "TDX",
        "version": 3,
        "issueDate": "2025-01-01T00:00:00Z",
        "nextUpdate": "2025-02-01T00:00:00Z",
        "fmspc": "00806f050000",
        "pceId": "0000",
        "tcbType": 0,
        "tcbEvaluationDataNumber": 17,
        "tdxModule": {
            "mrsigner": "00".repeat(48),
            "attributes": "0000000000000000",
            "attributesMask": "FFFFFFFFFFFFFFFF"
        },
        "tdxModuleIdentities": [{
            "id": "TDX_01",
            "mrsigner": "00".repeat(48),
            "attributes": "0000000000000000",
            "attributesMask": "FFFFFFFFFFFFFFFF",
            "tcbLevels": [{ "tcb": { "isvsvn": MODULE_SVN }, "tcbDate": "", "tcbStatus": module.name() }]
        }],
        "tcbLevels": [{
            "tcb": {
                "sgxtcbcomponents": components([SGX_SVN; 16]),
                "pcesvn": PCESVN,
                "tdxtcbcomponents": components(tdx)
            },
            "tcbDate": "2025-01-01T00:00:00Z",
            "tcbStatus": platform.name(),
            "advisoryIDs": ["INTEL-SA-00001"]
        }]
    });
    serde_json::from_value(v).expect("TCB Info JSON")
}

fn pck(sgx: u8) -> PckExtensions {
    PckExtensions {
        ppid: vec![0; 16],
        sgx_tcb_components: [sgx; 16],
        pcesvn: PCESVN,
        cpusvn: vec![sgx; 16],
        pceid: vec![0; 2],
        fmspc: vec![0, 0x80, 0x6f, 5, 0, 0],
        sgx_type: 0,
    }
}

/// A TD on module `major`.`minor` with TDX component 2 at `comp2`.
fn td(minor: u8, major: u8, comp2: u8) -> TdReport10 {
    let mut tee_tcb_svn = [0u8; 16];
    tee_tcb_svn[0] = minor;
    tee_tcb_svn[1] = major;
    tee_tcb_svn[2] = comp2;
    TdReport10 {
        tee_tcb_svn,
        mr_seam: [0; 48],
        mr_signer_seam: [0; 48],
        seam_attributes: [0; 8],
        td_attributes: [0; 8],
        xfam: [0; 8],
        mrtd: [0; 48],
        mr_config_id: [0; 48],
        mr_owner: [0; 48],
        mr_owner_config: [0; 48],
        rtmr: [[0; 48]; 4],
        report_data: [0; 64],
    }
}

fn status(info: &TcbInfo, pck: &PckExtensions, td: &TdReport10, qe: TcbStatus) -> TcbStatus {
    let mut failures = Vec::new();
    let ev = evaluate(info, pck, td, None, (qe, Vec::new()), &mut failures);
    ev.status
}

const PLATFORM: [TcbStatus; 7] = [U, S, C, CS, O, OC, R];
const MODULE: [TcbStatus; 3] = [U, O, R];
const QE: [TcbStatus; 4] = [U, O, R, N];

/// Expected status for each platform level status (rows, in `PLATFORM` order); columns are module
/// UpToDate/OutOfDate/Revoked, each with QE UpToDate/OutOfDate/Revoked/NotSupported.
const EXPECTED: [[TcbStatus; 12]; 7] = [
    // module U:        module O:          module R:
    [U, O, R, N, O, O, R, N, R, R, R, R],
    [S, O, R, N, O, O, R, N, R, R, R, R],
    [C, OC, R, N, OC, OC, R, N, R, R, R, R],
    [CS, OC, R, N, OC, OC, R, N, R, R, R, R],
    [O, O, R, N, O, O, R, N, R, R, R, R],
    [OC, OC, R, N, OC, OC, R, N, R, R, R, R],
    // A revoked level is returned before the QE is looked at.
    [R, R, R, R, R, R, R, R, R, R, R, R],
];

#[test]
fn tdx_tcb_status_matrix_platform_module_qe() {
    let mut checked = 0;
    for (pi, &p) in PLATFORM.iter().enumerate() {
        for (mi, &m) in MODULE.iter().enumerate() {
            let info = tcb_info(p, m);
            for (qi, &q) in QE.iter().enumerate() {
                let want = EXPECTED[pi][mi * 4 + qi];
                let mut failures = Vec::new();
                let ev = evaluate(
                    &info,
                    &pck(SGX_SVN),
                    &td(MODULE_SVN, 1, 1),
                    None,
                    (q, Vec::new()),
                    &mut failures,
                );
                assert_eq!(
                    ev.status, want,
                    "platform {p} module {m} qe {q}: got {}, Intel's rules give {want}",
                    ev.status
                );
                assert!(failures.is_empty(), "{failures:?}");
                assert_eq!(ev.sgx_level_status, Some(p));
                assert_eq!(ev.tdx_level_status, Some(p));
                assert_eq!(ev.module_status, Some(m));
                assert_eq!(ev.module_identity_id.as_deref(), Some("TDX_01"));
                assert_eq!(ev.advisory_ids, vec!["INTEL-SA-00001".to_string()]);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 3 * 4);
}

#[test]
fn tdx_tcb_no_matching_level_is_not_supported_whatever_module_and_qe() {
    for &p in &PLATFORM {
        for &m in &MODULE {
            let info = tcb_info(p, m);
            for &q in &QE {
                // SGX components below the only level: no SGX level.
                assert_eq!(
                    status(&info, &pck(SGX_SVN - 1), &td(MODULE_SVN, 1, 1), q),
                    N,
                    "sgx no match, platform {p} module {m} qe {q}"
                );
                // SGX level matches, TDX component 2 below it: no TDX level.
                assert_eq!(
                    status(&info, &pck(SGX_SVN), &td(MODULE_SVN, 1, 0), q),
                    N,
                    "tdx no match, platform {p} module {m} qe {q}"
                );
                // Module SVN below every level of its identity: NotSupported (before the QE).
                assert_eq!(
                    status(&info, &pck(SGX_SVN), &td(MODULE_SVN - 1, 1, 1), q),
                    N,
                    "module svn unmatched, platform {p} module {m} qe {q}"
                );
                // No identity TDX_02 exists: NotSupported.
                assert_eq!(
                    status(&info, &pck(SGX_SVN), &td(MODULE_SVN, 2, 1), q),
                    N,
                    "module identity missing, platform {p} module {m} qe {q}"
                );
            }
        }
    }
}

#[test]
fn tdx_tcb_module_mismatch_and_module_version_zero() {
    for &p in &PLATFORM {
        for (qi, &q) in QE.iter().enumerate() {
            // A module signed by another key: TdxModuleMismatch, returned before any convergence.
            let info = tcb_info(p, O);
            let mut other = td(MODULE_SVN, 1, 1);
            other.mr_signer_seam[0] = 1;
            let mut failures = Vec::new();
            let ev = evaluate(
                &info,
                &pck(SGX_SVN),
                &other,
                None,
                (q, Vec::new()),
                &mut failures,
            );
            assert_eq!(
                ev.status,
                TcbStatus::TdxModuleMismatch,
                "platform {p} qe {q}"
            );
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert_eq!(failures[0].check, "tdx-module-identity");
            // Module version 0 is graded by the TDX level itself (module UpToDate): the module-UpToDate column.
            let pi = PLATFORM.iter().position(|x| *x == p).expect("in list");
            let want = EXPECTED[pi][qi];
            // With major 0 every TDX component counts: components 0 and 1 must meet the level (0 here).
            assert_eq!(
                status(&info, &pck(SGX_SVN), &td(0, 0, 1), q),
                want,
                "module v0, platform {p} qe {q}"
            );
        }
    }
}

/// TD 1.5: an OutOfDate module whose platform was updated in place (TEE_TCB_SVN2 at the latest module and TDX
/// levels) gives TDRelaunchAdvised (…ConfigurationNeeded when the platform needs configuration), only when the
/// SGX level is not OutOfDate/Revoked and the QE is UpToDate; otherwise the TD 1.0 result stands.
#[test]
fn tdx_tcb_td15_relaunch_advised_matrix() {
    use TcbStatus::{TDRelaunchAdvised as RA, TDRelaunchAdvisedConfigurationNeeded as RAC};
    // With the QE UpToDate, per platform status in `PLATFORM` order.
    const RELAUNCH_QE_UP: [TcbStatus; 7] = [RA, RA, RAC, RAC, O, OC, R];
    for (pi, &p) in PLATFORM.iter().enumerate() {
        // Module ISVSVN 3 is OutOfDate; ISVSVN 4 (the latest) UpToDate.
        let mut info = tcb_info(p, O);
        let mut latest = info.tdx_module_identities[0].tcb_levels[0].clone();
        latest.tcb.isvsvn = u16::from(MODULE_SVN) + 1;
        latest.tcb_status = "UpToDate".into();
        info.tdx_module_identities[0].tcb_levels.insert(0, latest);
        for (qi, &q) in QE.iter().enumerate() {
            let td10 = td(MODULE_SVN, 1, 1);
            let run = |svn2: [u8; 3]| {
                let mut s = [0u8; 16];
                s[..3].copy_from_slice(&svn2);
                let mut failures = Vec::new();
                evaluate(
                    &info,
                    &pck(SGX_SVN),
                    &td10,
                    Some(&s),
                    (q, Vec::new()),
                    &mut failures,
                )
                .status
            };
            let td10_result = EXPECTED[pi][4 + qi];
            let want = if q == U {
                RELAUNCH_QE_UP[pi]
            } else {
                td10_result
            };
            assert_eq!(
                run([MODULE_SVN + 1, 1, 1]),
                want,
                "updated in place: platform {p} qe {q}"
            );
            // Module in TEE_TCB_SVN2 not the latest, or TDX component 2 behind: no relaunch advice.
            assert_eq!(
                run([MODULE_SVN, 1, 1]),
                td10_result,
                "module not updated: platform {p} qe {q}"
            );
            assert_eq!(
                run([MODULE_SVN + 1, 1, 0]),
                td10_result,
                "component 2 behind: platform {p} qe {q}"
            );
        }
    }
}
