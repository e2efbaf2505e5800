//! TCB status as Intel's reference Quote Verification Library computes it for TDX: match the platform TCB
//! level on the PCK certificate's SGX components and PCESVN and on TEE_TCB_SVN (indices 0-1 skipped when the
//! module major version TEE_TCB_SVN[1] is non-zero), grade the TDX module identity `TDX_%02X` on
//! TEE_TCB_SVN[0], grade the QE on its ISVSVN, then converge the statuses. Re-derived, not copied.
//! For TD 1.5 quotes, an OutOfDate TD whose module was updated in place (TEE_TCB_SVN2) is TDRelaunchAdvised.

use serde::Serialize;

use super::collateral::{IsvTcbLevel, QeIdentity, TcbInfo, TcbLevel};
use super::pck::PckExtensions;
use crate::failure::Failure;
use attestation::tdx::{EnclaveReport, TdReport10};

/// A TCB status, named as Intel's collateral names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[non_exhaustive]
pub enum TcbStatus {
    /// The platform is patched.
    UpToDate,
    /// Patched, but software hardening is needed.
    SWHardeningNeeded,
    /// Patched, but a platform configuration is needed.
    ConfigurationNeeded,
    /// Both of the above.
    ConfigurationAndSWHardeningNeeded,
    /// The platform needs patching.
    OutOfDate,
    /// Needs patching and configuration.
    OutOfDateConfigurationNeeded,
    /// The TCB is revoked.
    Revoked,
    /// No TCB level matches (Intel's STATUS_TCB_NOT_SUPPORTED).
    NotSupported,
    /// The TDX module's signer or attributes differ from its identity (STATUS_TDX_MODULE_MISMATCH).
    TdxModuleMismatch,
    /// TD 1.5: the platform was updated in place (TEE_TCB_SVN2 is current) but the TD still runs on the
    /// outdated module it launched with; relaunching it would make it UpToDate.
    TDRelaunchAdvised,
    /// As [`TcbStatus::TDRelaunchAdvised`], and a platform configuration is needed too.
    TDRelaunchAdvisedConfigurationNeeded,
    /// A status name Intel does not define.
    Unrecognized,
}

impl TcbStatus {
    /// The status for a collateral name.
    pub fn from_name(s: &str) -> Self {
        match s {
            "UpToDate" => Self::UpToDate,
            "SWHardeningNeeded" => Self::SWHardeningNeeded,
            "ConfigurationNeeded" => Self::ConfigurationNeeded,
            "ConfigurationAndSWHardeningNeeded" => Self::ConfigurationAndSWHardeningNeeded,
            "OutOfDate" => Self::OutOfDate,
            "OutOfDateConfigurationNeeded" => Self::OutOfDateConfigurationNeeded,
            "Revoked" => Self::Revoked,
            "NotSupported" => Self::NotSupported,
            "TdxModuleMismatch" => Self::TdxModuleMismatch,
            "TDRelaunchAdvised" => Self::TDRelaunchAdvised,
            "TDRelaunchAdvisedConfigurationNeeded" => Self::TDRelaunchAdvisedConfigurationNeeded,
            _ => Self::Unrecognized,
        }
    }

    /// The collateral name of this status.
    pub fn name(self) -> &'static str {
        match self {
            Self::UpToDate => "UpToDate",
            Self::SWHardeningNeeded => "SWHardeningNeeded",
            Self::ConfigurationNeeded => "ConfigurationNeeded",
            Self::ConfigurationAndSWHardeningNeeded => "ConfigurationAndSWHardeningNeeded",
            Self::OutOfDate => "OutOfDate",
            Self::OutOfDateConfigurationNeeded => "OutOfDateConfigurationNeeded",
            Self::Revoked => "Revoked",
            Self::NotSupported => "NotSupported",
            Self::TdxModuleMismatch => "TdxModuleMismatch",
            Self::TDRelaunchAdvised => "TDRelaunchAdvised",
            Self::TDRelaunchAdvisedConfigurationNeeded => "TDRelaunchAdvisedConfigurationNeeded",
            Self::Unrecognized => "Unrecognized",
        }
    }
}

impl std::fmt::Display for TcbStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The steps of the evaluation, kept so that a reader (and the tests) can see how the status arose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TcbEvaluation {
    /// Index (in TCB Info order, highest first) of the level matched on SGX components and PCESVN.
    pub sgx_level_index: Option<usize>,
    /// Index of the level matched on SGX components, PCESVN and TDX components.
    pub tdx_level_index: Option<usize>,
    /// Status of the SGX level.
    pub sgx_level_status: Option<TcbStatus>,
    /// Status of the TDX level.
    pub tdx_level_status: Option<TcbStatus>,
    /// `TDX_%02X` when `TEE_TCB_SVN[1]` is non-zero.
    pub module_identity_id: Option<String>,
    /// Status of the TDX module.
    pub module_status: Option<TcbStatus>,
    /// Status of the QE (graded on ISVSVN).
    pub qe_status: TcbStatus,
    /// The converged status.
    pub status: TcbStatus,
    /// Advisory IDs of the matched levels (platform, module, QE), in that order, without repeats.
    pub advisory_ids: Vec<String>,
    /// tcbDate of the matched TDX level (RFC 3339, as Intel signed it), for `--min-tcb-date`.
    pub tcb_date: Option<String>,
    /// tcbEvaluationDataNumber of the TCB Info graded against, for `--min-tcb-eval-num`.
    pub tcb_evaluation_data_number: u32,
    /// tcbEvaluationDataNumber of the QE Identity the QE was graded against (set by the caller that has it).
    pub qe_identity_evaluation_data_number: u32,
}

fn unhex_or_empty(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_default()
}

/// Grades an ISV SVN against identity levels: the first level (highest SVN first) not above it.
fn grade_isv(levels: &[IsvTcbLevel], svn: u16) -> Option<&IsvTcbLevel> {
    let mut sorted: Vec<&IsvTcbLevel> = levels.iter().collect();
    sorted.sort_by_key(|l| std::cmp::Reverse(l.tcb.isvsvn));
    sorted.into_iter().find(|l| l.tcb.isvsvn <= svn)
}

/// Grades the QE report against the QE Identity; identity mismatches are pushed to `failures`.
pub fn grade_qe(
    qe: &QeIdentity,
    report: &EnclaveReport,
    failures: &mut Vec<Failure>,
) -> (TcbStatus, Vec<String>) {
    let mrsigner = unhex_or_empty(&qe.mrsigner);
    if mrsigner != report.mr_signer {
        failures.push(Failure::seen_wanted(
            "qe-identity-mrsigner",
            hex::encode(report.mr_signer),
            qe.mrsigner.to_lowercase(),
        ));
    }
    if qe.isvprodid != report.isv_prod_id {
        failures.push(Failure::seen_wanted(
            "qe-identity-isvprodid",
            report.isv_prod_id,
            qe.isvprodid,
        ));
    }
    let misc = u32::from_str_radix(&qe.miscselect, 16).unwrap_or(u32::MAX);
    let misc_mask = u32::from_str_radix(&qe.miscselect_mask, 16).unwrap_or(0);
    if report.misc_select & misc_mask != misc {
        failures.push(Failure::seen_wanted(
            "qe-identity-miscselect",
            format!(
                "{:08x} (masked {:08x})",
                report.misc_select,
                report.misc_select & misc_mask
            ),
            format!("{misc:08x}"),
        ));
    }
    let attrs = unhex_or_empty(&qe.attributes);
    let mask = unhex_or_empty(&qe.attributes_mask);
    let masked: Vec<u8> = report
        .attributes
        .iter()
        .zip(mask.iter().chain(std::iter::repeat(&0)))
        .map(|(a, m)| a & m)
        .collect();
    if attrs.len() != 16 || masked != attrs {
        failures.push(Failure::seen_wanted(
            "qe-identity-attributes",
            hex::encode(&masked),
            qe.attributes.to_lowercase(),
        ));
    }
    match grade_isv(&qe.tcb_levels, report.isv_svn) {
        Some(l) => (TcbStatus::from_name(&l.tcb_status), l.advisory_ids.clone()),
        None => (TcbStatus::NotSupported, Vec::new()),
    }
}

fn sgx_ok(level: &TcbLevel, pck: &PckExtensions) -> bool {
    level.tcb.sgxtcbcomponents.len() == 16
        && pck
            .sgx_tcb_components
            .iter()
            .zip(&level.tcb.sgxtcbcomponents)
            .all(|(have, want)| *have >= want.svn)
        && pck.pcesvn >= level.tcb.pcesvn
}

fn tdx_ok(level: &TcbLevel, tee_tcb_svn: &[u8; 16]) -> bool {
    if level.tcb.tdxtcbcomponents.len() != 16 {
        return false;
    }
    let start = if tee_tcb_svn[1] > 0 { 2 } else { 0 };
    (start..16).all(|i| tee_tcb_svn[i] >= level.tcb.tdxtcbcomponents[i].svn)
}

fn level_key(l: &TcbLevel) -> (Vec<u8>, u16, Vec<u8>) {
    (
        l.tcb.sgxtcbcomponents.iter().map(|c| c.svn).collect(),
        l.tcb.pcesvn,
        l.tcb.tdxtcbcomponents.iter().map(|c| c.svn).collect(),
    )
}

fn converge_with_module(tdx: TcbStatus, module: TcbStatus) -> TcbStatus {
    match module {
        TcbStatus::OutOfDate => match tdx {
            TcbStatus::UpToDate | TcbStatus::SWHardeningNeeded => TcbStatus::OutOfDate,
            TcbStatus::ConfigurationNeeded | TcbStatus::ConfigurationAndSWHardeningNeeded => {
                TcbStatus::OutOfDateConfigurationNeeded
            }
            other => other,
        },
        TcbStatus::Revoked => TcbStatus::Revoked,
        _ => tdx,
    }
}

fn converge_with_qe(tcb: TcbStatus, qe: TcbStatus) -> TcbStatus {
    match qe {
        TcbStatus::OutOfDate => match tcb {
            TcbStatus::UpToDate | TcbStatus::SWHardeningNeeded => TcbStatus::OutOfDate,
            TcbStatus::ConfigurationNeeded | TcbStatus::ConfigurationAndSWHardeningNeeded => {
                TcbStatus::OutOfDateConfigurationNeeded
            }
            other => other,
        },
        TcbStatus::Revoked => TcbStatus::Revoked,
        TcbStatus::NotSupported => TcbStatus::NotSupported,
        _ => tcb,
    }
}

fn config_needed(s: TcbStatus) -> bool {
    matches!(
        s,
        TcbStatus::ConfigurationNeeded
            | TcbStatus::OutOfDateConfigurationNeeded
            | TcbStatus::ConfigurationAndSWHardeningNeeded
            | TcbStatus::TDRelaunchAdvisedConfigurationNeeded
    )
}

/// TD 1.5: an OutOfDate TD on a platform whose module was updated in place (TEE_TCB_SVN2 at the latest
/// level) is advised to relaunch rather than called OutOfDate.
fn relaunch(
    info: &TcbInfo,
    latest: Option<&TcbLevel>,
    svn2: &[u8; 16],
    sgx: TcbStatus,
    tdx: TcbStatus,
    module: TcbStatus,
    qe: TcbStatus,
) -> TcbStatus {
    use TcbStatus as S;
    if matches!(qe, S::OutOfDate | S::Revoked | S::NotSupported)
        || !matches!(
            sgx,
            S::UpToDate
                | S::SWHardeningNeeded
                | S::ConfigurationNeeded
                | S::ConfigurationAndSWHardeningNeeded
        )
        || !matches!(tdx, S::OutOfDate | S::OutOfDateConfigurationNeeded)
        || module != S::OutOfDate
    {
        return tdx;
    }
    let Some(latest) = latest else {
        return S::NotSupported;
    };
    let comp = |i: usize| {
        latest
            .tcb
            .tdxtcbcomponents
            .get(i)
            .map_or(u8::MAX, |c| c.svn)
    };
    let module_current = if svn2[1] == 0 {
        svn2[0] >= comp(0)
    } else {
        let id = format!("TDX_{:02X}", svn2[1]);
        let Some(ident) = info
            .tdx_module_identities
            .iter()
            .find(|m| m.id.to_uppercase() == id)
        else {
            return S::TdxModuleMismatch;
        };
        let Some(top) = ident.tcb_levels.iter().map(|l| l.tcb.isvsvn).max() else {
            return S::NotSupported;
        };
        u16::from(svn2[0]) >= top
    };
    if module_current && svn2[2] >= comp(2) {
        if config_needed(sgx) || config_needed(tdx) {
            S::TDRelaunchAdvisedConfigurationNeeded
        } else {
            S::TDRelaunchAdvised
        }
    } else {
        tdx
    }
}

fn push_unique(out: &mut Vec<String>, ids: &[String]) {
    for id in ids {
        if !out.contains(id) {
            out.push(id.clone());
        }
    }
}

/// Evaluates the TCB status of a TD (`td`) on a platform (`pck`) with a QE graded as `qe`.
pub fn evaluate(
    info: &TcbInfo,
    pck: &PckExtensions,
    td: &TdReport10,
    tee_tcb_svn2: Option<&[u8; 16]>,
    qe: (TcbStatus, Vec<String>),
    failures: &mut Vec<Failure>,
) -> TcbEvaluation {
    let (qe_status, qe_advisories) = qe;
    let mut ev = TcbEvaluation {
        sgx_level_index: None,
        tdx_level_index: None,
        sgx_level_status: None,
        tdx_level_status: None,
        module_identity_id: None,
        module_status: None,
        qe_status,
        status: TcbStatus::NotSupported,
        advisory_ids: Vec::new(),
        tcb_date: None,
        tcb_evaluation_data_number: info.tcb_evaluation_data_number,
        qe_identity_evaluation_data_number: 0,
    };
    // Highest level first, as Intel orders them (a stable sort keeps the published order for equal keys).
    let mut order: Vec<usize> = (0..info.tcb_levels.len()).collect();
    order.sort_by(|a, b| level_key(&info.tcb_levels[*b]).cmp(&level_key(&info.tcb_levels[*a])));
    let latest = order.first().map(|i| &info.tcb_levels[*i]);
    for i in order {
        let level = &info.tcb_levels[i];
        if !sgx_ok(level, pck) {
            continue;
        }
        if ev.sgx_level_index.is_none() {
            ev.sgx_level_index = Some(i);
            ev.sgx_level_status = Some(TcbStatus::from_name(&level.tcb_status));
        }
        if tdx_ok(level, &td.tee_tcb_svn) {
            ev.tdx_level_index = Some(i);
            ev.tdx_level_status = Some(TcbStatus::from_name(&level.tcb_status));
            ev.tcb_date = Some(level.tcb_date.clone()).filter(|d| !d.is_empty());
            break;
        }
    }
    let (Some(_), Some(tdx_index), Some(tdx_status)) =
        (ev.sgx_level_index, ev.tdx_level_index, ev.tdx_level_status)
    else {
        return ev;
    };

    // The TDX module: version 0 is graded by the TDX level itself; version > 0 by its identity.
    let minor = td.tee_tcb_svn[0];
    let major = td.tee_tcb_svn[1];
    let (module_status, signer, attributes, mask, module_advisories) = if major == 0 {
        let Some(m) = &info.tdx_module else {
            failures.push(Failure::seen_wanted(
                "tcb-info-tdx-module",
                "absent",
                "a tdxModule object for module version 0",
            ));
            return ev;
        };
        (
            TcbStatus::UpToDate,
            &m.mrsigner,
            &m.attributes,
            &m.attributes_mask,
            Vec::new(),
        )
    } else {
        let id = format!("TDX_{major:02X}");
        ev.module_identity_id = Some(id.clone());
        let Some(ident) = info
            .tdx_module_identities
            .iter()
            .find(|m| m.id.to_uppercase() == id)
        else {
            ev.module_status = Some(TcbStatus::NotSupported);
            return ev;
        };
        match grade_isv(&ident.tcb_levels, u16::from(minor)) {
            Some(l) => (
                TcbStatus::from_name(&l.tcb_status),
                &ident.mrsigner,
                &ident.attributes,
                &ident.attributes_mask,
                l.advisory_ids.clone(),
            ),
            None => {
                ev.module_status = Some(TcbStatus::NotSupported);
                return ev;
            }
        }
    };
    let signer_ok = unhex_or_empty(signer) == td.mr_signer_seam;
    let mask = unhex_or_empty(mask);
    let want = unhex_or_empty(attributes);
    let masked: Vec<u8> = td
        .seam_attributes
        .iter()
        .zip(mask.iter().chain(std::iter::repeat(&0)))
        .map(|(a, m)| a & m)
        .collect();
    if !signer_ok || masked != want {
        ev.module_status = Some(TcbStatus::TdxModuleMismatch);
        ev.status = TcbStatus::TdxModuleMismatch;
        failures.push(Failure::seen_wanted(
            "tdx-module-identity",
            format!(
                "mr_signer_seam {} seam_attributes {}",
                hex::encode(td.mr_signer_seam),
                hex::encode(td.seam_attributes)
            ),
            format!(
                "mrsigner {} attributes {} (mask {})",
                signer.to_lowercase(),
                attributes.to_lowercase(),
                hex::encode(&mask)
            ),
        ));
        return ev;
    }
    ev.module_status = Some(module_status);
    let mut converged = converge_with_module(tdx_status, module_status);
    if converged != TcbStatus::Revoked {
        if let Some(svn2) = tee_tcb_svn2 {
            let sgx_status = ev.sgx_level_status.unwrap_or(TcbStatus::NotSupported);
            converged = relaunch(
                info,
                latest,
                svn2,
                sgx_status,
                converged,
                module_status,
                qe_status,
            );
        }
    }
    ev.status = if converged == TcbStatus::Revoked {
        converged
    } else {
        converge_with_qe(converged, qe_status)
    };
    push_unique(
        &mut ev.advisory_ids,
        &info.tcb_levels[tdx_index].advisory_ids,
    );
    push_unique(&mut ev.advisory_ids, &module_advisories);
    push_unique(&mut ev.advisory_ids, &qe_advisories);
    ev
}
