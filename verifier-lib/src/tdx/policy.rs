//! Acceptability of an authentic TDX quote: one declarative `Policy` that every `tdx-quote` flag maps to.
//! Defaults: TCB status UpToDate or SWHardeningNeeded, debug TDs forbidden, SEPT_VE_DISABLE required,
//! MIGRATABLE and PERFMON forbidden, every TD attribute bit this verifier does not know refused, MR_SERVICETD
//! zero, collateral required, no expected measurement unless given.

use std::collections::BTreeSet;

use attestation::tdx::Quote;

use super::tcb::TcbStatus;
use crate::failure::Failure;

/// What a founder accepts of an authentic TDX quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// TCB statuses accepted.
    pub accepted_tcb_statuses: BTreeSet<TcbStatus>,
    /// Advisory IDs that reject the quote whatever its status.
    pub denied_advisories: BTreeSet<String>,
    /// Accept a debug TD (its memory is readable by the host: a verdict from it proves nothing).
    pub allow_debug: bool,
    /// Require TD attribute SEPT_VE_DISABLE.
    pub require_sept_ve_disable: bool,
    /// Accept TD attribute MIGRATABLE (bit 29): a migration TD chosen by the host could move the TD's state.
    pub allow_migratable: bool,
    /// Accept TD attribute PERFMON (bit 63): the TD may use the PMU, a timing side channel the run never needs.
    pub allow_perfmon: bool,
    /// Accept a non-zero MR_SERVICETD (TD 1.5 quotes).
    pub allow_service_td: bool,
    /// Require collateral (TCB status, revocation); without it the TCB cannot be judged.
    pub require_collateral: bool,
    /// Expected MRTD: the quote must carry one of these (empty: not checked).
    pub mrtd: Vec<[u8; 48]>,
    /// Expected RTMR0..3.
    pub rtmr: [Option<[u8; 48]>; 4],
    /// Expected MRCONFIGID.
    pub mr_config_id: Option<[u8; 48]>,
    /// Expected MROWNER.
    pub mr_owner: Option<[u8; 48]>,
    /// Expected MROWNERCONFIG.
    pub mr_owner_config: Option<[u8; 48]>,
    /// Expected XFAM.
    pub xfam: Option<[u8; 8]>,
    /// Expected TD attributes (all 64 bits).
    pub td_attributes: Option<[u8; 8]>,
    /// Minimum TEE_TCB_SVN, compared component by component.
    pub min_tee_tcb_svn: Option<[u8; 16]>,
    /// Expected REPORTDATA.
    pub report_data: Option<[u8; 64]>,
    /// Freshness: minimum tcbEvaluationDataNumber of the TCB Info (and QE Identity) used. None: any.
    pub min_tcb_evaluation_data_number: Option<u32>,
    /// Freshness: minimum tcbDate (unix seconds) of the matched TCB level. None: any.
    pub min_tcb_date: Option<i64>,
    /// Freshness: seconds after a TCB Info, QE Identity or CRL `nextUpdate` during which it is still accepted
    /// (0: none, the default).
    pub collateral_grace_secs: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            accepted_tcb_statuses: [TcbStatus::UpToDate, TcbStatus::SWHardeningNeeded]
                .into_iter()
                .collect(),
            denied_advisories: BTreeSet::new(),
            allow_debug: false,
            require_sept_ve_disable: true,
            allow_migratable: false,
            allow_perfmon: false,
            allow_service_td: false,
            require_collateral: true,
            mrtd: Vec::new(),
            rtmr: [None; 4],
            mr_config_id: None,
            mr_owner: None,
            mr_owner_config: None,
            xfam: None,
            td_attributes: None,
            min_tee_tcb_svn: None,
            report_data: None,
            min_tcb_evaluation_data_number: None,
            min_tcb_date: None,
            collateral_grace_secs: 0,
        }
    }
}

fn eq_check(failures: &mut Vec<Failure>, check: &str, seen: &[u8], want: Option<&[u8]>) {
    if let Some(w) = want {
        if seen != w {
            failures.push(Failure::seen_wanted(
                check.to_string(),
                hex::encode(seen),
                hex::encode(w),
            ));
        }
    }
}

/// TD attribute bits this verifier knows: DEBUG (0), SEPT_VE_DISABLE (28), MIGRATABLE (29), PKS (30), KL (31),
/// PERFMON (63). Any other bit is reserved or not yet understood, and refused whatever the policy: its meaning
/// for the TD's isolation is not known here.
pub const KNOWN_TD_ATTRIBUTES: u64 =
    1 | (1 << 28) | TD_ATTRIBUTE_MIGRATABLE | (1 << 30) | (1 << 31) | TD_ATTRIBUTE_PERFMON;
/// TD attribute MIGRATABLE (bit 29).
pub const TD_ATTRIBUTE_MIGRATABLE: u64 = 1 << 29;
/// TD attribute PERFMON (bit 63).
pub const TD_ATTRIBUTE_PERFMON: u64 = 1 << 63;

impl Policy {
    /// Checks the TD fields of `quote` against this policy, pushing every failure.
    pub fn check_td(&self, quote: &Quote, failures: &mut Vec<Failure>) {
        let td = quote.td();
        let attrs = td.attributes();
        if attrs.debug() && !self.allow_debug {
            failures.push(Failure::seen_wanted(
                "td-attributes-debug",
                "set (debug TD)",
                "clear (--allow-debug to accept)",
            ));
        }
        if attrs.0 & TD_ATTRIBUTE_MIGRATABLE != 0 && !self.allow_migratable {
            failures.push(Failure::seen_wanted(
                "td-attributes-migratable",
                "set (MIGRATABLE)",
                "clear (--allow-migratable to accept)",
            ));
        }
        if attrs.0 & TD_ATTRIBUTE_PERFMON != 0 && !self.allow_perfmon {
            failures.push(Failure::seen_wanted(
                "td-attributes-perfmon",
                "set (PERFMON)",
                "clear (--allow-perfmon to accept)",
            ));
        }
        let unknown = attrs.0 & !KNOWN_TD_ATTRIBUTES;
        if unknown != 0 {
            let bits: Vec<String> = (0..64)
                .filter(|b| unknown & (1u64 << b) != 0)
                .map(|b| b.to_string())
                .collect();
            failures.push(Failure::seen_wanted(
                "td-attributes-reserved",
                format!("bit(s) {} set", bits.join(", ")),
                "only DEBUG, SEPT_VE_DISABLE, MIGRATABLE, PKS, KL, PERFMON (bits 0, 28-31, 63)",
            ));
        }
        if self.require_sept_ve_disable && !attrs.sept_ve_disable() {
            failures.push(Failure::seen_wanted(
                "td-attributes-sept-ve-disable",
                "clear",
                "set",
            ));
        }
        if let Some(b) = quote.body.td15() {
            if !self.allow_service_td && b.mr_servicetd.iter().any(|x| *x != 0) {
                failures.push(Failure::seen_wanted(
                    "mr-servicetd",
                    hex::encode(b.mr_servicetd),
                    "zero (--allow-service-td)",
                ));
            }
        }
        if !self.mrtd.is_empty() && !self.mrtd.contains(&td.mrtd) {
            let want: Vec<String> = self.mrtd.iter().map(hex::encode).collect();
            failures.push(Failure::seen_wanted(
                "mrtd",
                hex::encode(td.mrtd),
                format!("one of {}", want.join(", ")),
            ));
        }
        for (i, want) in self.rtmr.iter().enumerate() {
            eq_check(
                failures,
                &format!("rtmr{i}"),
                &td.rtmr[i],
                want.as_ref().map(|w| &w[..]),
            );
        }
        eq_check(
            failures,
            "mr-config-id",
            &td.mr_config_id,
            self.mr_config_id.as_ref().map(|w| &w[..]),
        );
        eq_check(
            failures,
            "mr-owner",
            &td.mr_owner,
            self.mr_owner.as_ref().map(|w| &w[..]),
        );
        eq_check(
            failures,
            "mr-owner-config",
            &td.mr_owner_config,
            self.mr_owner_config.as_ref().map(|w| &w[..]),
        );
        eq_check(
            failures,
            "xfam",
            &td.xfam,
            self.xfam.as_ref().map(|w| &w[..]),
        );
        eq_check(
            failures,
            "td-attributes",
            &td.td_attributes,
            self.td_attributes.as_ref().map(|w| &w[..]),
        );
        eq_check(
            failures,
            "report-data",
            &td.report_data,
            self.report_data.as_ref().map(|w| &w[..]),
        );
        if let Some(min) = &self.min_tee_tcb_svn {
            if td
                .tee_tcb_svn
                .iter()
                .zip(min)
                .any(|(have, want)| have < want)
            {
                failures.push(Failure::seen_wanted(
                    "tee-tcb-svn",
                    hex::encode(td.tee_tcb_svn),
                    format!("each component >= {}", hex::encode(min)),
                ));
            }
        }
    }

    /// Checks a TCB status and its advisories against this policy.
    pub fn check_tcb(&self, status: TcbStatus, advisories: &[String], failures: &mut Vec<Failure>) {
        if !self.accepted_tcb_statuses.contains(&status) {
            let want: Vec<&str> = self
                .accepted_tcb_statuses
                .iter()
                .map(|s| s.name())
                .collect();
            failures.push(Failure::seen_wanted(
                "tcb-status",
                status.name(),
                format!("one of {}", want.join(", ")),
            ));
        }
        for a in advisories {
            if self.denied_advisories.contains(a) {
                failures.push(Failure::seen_wanted(
                    "advisory-ids",
                    a,
                    "not a denied advisory",
                ));
            }
        }
    }

    /// The freshness policy: Intel's evaluation data number and the matched level's date against the
    /// founder's minimums. Intel's status is judged separately ([`Self::check_tcb`]) and kept beside these.
    pub fn check_freshness(&self, eval: &super::tcb::TcbEvaluation, failures: &mut Vec<Failure>) {
        if let Some(min) = self.min_tcb_evaluation_data_number {
            for (what, n) in [
                ("tcb-info", eval.tcb_evaluation_data_number),
                ("qe-identity", eval.qe_identity_evaluation_data_number),
            ] {
                if n < min {
                    failures.push(Failure::seen_wanted(
                        format!("{what}-tcb-evaluation-data-number"),
                        format!("{n} ({} below the minimum)", min - n),
                        format!("at least {min} (--min-tcb-eval-num)"),
                    ));
                }
            }
        }
        if let Some(min) = self.min_tcb_date {
            let want = time::OffsetDateTime::from_unix_timestamp(min)
                .ok()
                .and_then(|d| {
                    d.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_else(|| min.to_string());
            let seen = eval.tcb_date.as_deref().and_then(|d| {
                time::OffsetDateTime::parse(d, &time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(|t| (d, t.unix_timestamp()))
            });
            match seen {
                Some((_, t)) if t >= min => {}
                Some((d, t)) => failures.push(Failure::seen_wanted(
                    "tcb-date",
                    format!("{d} ({} days older)", (min - t) / 86_400),
                    format!("at or after {want} (--min-tcb-date)"),
                )),
                None => failures.push(Failure::seen_wanted(
                    "tcb-date",
                    eval.tcb_date
                        .clone()
                        .unwrap_or_else(|| "no matched TCB level".into()),
                    format!("a matched TCB level dated at or after {want} (--min-tcb-date)"),
                )),
            }
        }
    }
}
