//! Stage 4: normalise. The job's resources against the limits of the isolation tier it will run in (each
//! refusal names the limit), its environment against the deny list (again: the loader refused it already,
//! this stage keeps the rule where the tier's policy lives), and allow entries naming non-public IPs noted.

use crate::addr;
use crate::job::{env_name_denied, AllowHost, Job};
use crate::report::{Finding, Severity, Stage};
use serde::Serialize;
use std::fmt;

/// The isolation tiers of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Isolation {
    /// AMD SEV-SNP confidential VM.
    SevSnp,
    /// Intel TDX trust domain.
    Tdx,
    /// Plain KVM/TCG VM.
    Vm,
    /// Linux namespaces on the host.
    Process,
}

impl Isolation {
    /// The tier's name as in verdicts.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::SevSnp => "sev-snp",
            Isolation::Tdx => "tdx",
            Isolation::Vm => "vm",
            Isolation::Process => "process",
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The most a job may ask for in one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TierLimits {
    /// Largest `limits.memory_mib`.
    pub memory_mib: u64,
    /// Largest `limits.pids`.
    pub pids: u64,
    /// Largest `limits.disk_mib`.
    pub disk_mib: u64,
    /// Largest `limits.open_files`.
    pub open_files: u64,
    /// Largest `install.timeout_seconds`.
    pub install_timeout_seconds: u64,
    /// Largest `test.timeout_seconds`.
    pub test_timeout_seconds: u64,
    /// Most `install.allow` entries.
    pub allow_entries: usize,
}

impl TierLimits {
    /// The default limits of a tier: the VM tiers are bounded by the guest the launcher gives (8 GiB RAM,
    /// 16 GiB scratch); the process tier by what a developer machine reasonably lends.
    pub fn for_tier(tier: Isolation) -> TierLimits {
        match tier {
            Isolation::SevSnp | Isolation::Tdx | Isolation::Vm => TierLimits {
                memory_mib: 8192,
                pids: 4096,
                disk_mib: 16384,
                open_files: 65536,
                install_timeout_seconds: 3600,
                test_timeout_seconds: 3600,
                allow_entries: 64,
            },
            Isolation::Process => TierLimits {
                memory_mib: 16384,
                pids: 4096,
                disk_mib: 32768,
                open_files: 65536,
                install_timeout_seconds: 7200,
                test_timeout_seconds: 7200,
                allow_entries: 64,
            },
        }
    }
}

/// Stage 4 on a loaded job: refusals for resources above the tier's limits and denied environment
/// names; notes for allow entries that name non-public IP literals (allowed because listed).
pub fn normalise(job: &Job, tier: Isolation, limits: &TierLimits) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut over = |key: &str, asked: u64, max: u64| {
        if asked > max {
            out.push(Finding::new(
                Stage::Normalise,
                Severity::Refusal,
                key,
                format!("{key} = {asked} is above the {tier} tier's limit of {max}"),
            ));
        }
    };
    over(
        "limits.memory_mib",
        job.limits.memory_mib,
        limits.memory_mib,
    );
    over("limits.pids", job.limits.pids, limits.pids);
    over("limits.disk_mib", job.limits.disk_mib, limits.disk_mib);
    over(
        "limits.open_files",
        job.limits.open_files,
        limits.open_files,
    );
    over(
        "test.timeout_seconds",
        job.test.timeout_seconds,
        limits.test_timeout_seconds,
    );
    if let Some(i) = &job.install {
        over(
            "install.timeout_seconds",
            i.timeout_seconds,
            limits.install_timeout_seconds,
        );
        over(
            "install.allow (entries)",
            i.allow.len() as u64,
            limits.allow_entries as u64,
        );
        for a in &i.allow {
            if let AllowHost::Ip(ip) = a.host {
                if let Err(r) = addr::check(ip) {
                    out.push(Finding::new(
                        Stage::Normalise,
                        Severity::Note,
                        "install.allow",
                        format!(
                            "`{a}` names a {} address; allowed only because it is listed",
                            r.why
                        ),
                    ));
                }
            }
        }
    }
    for name in job.env.passthrough.iter().chain(job.env.set.keys()) {
        if let Some(why) = env_name_denied(name) {
            out.push(Finding::new(
                Stage::Normalise,
                Severity::Refusal,
                "env",
                why,
            ));
        }
    }
    out
}
