//! Stage 4: normalise. The job's resources against the limits of the isolation tier it will run in and of
//! the runner itself (each refusal names the limit), its environment against the deny list (again: the
//! loader refused it already, this stage keeps the rule where the tier's policy lives), what it takes from
//! the runner's machine (`[env] passthrough`, `[sandbox] read`) against the operator's configuration
//! ([`crate::operator`]), and allow entries naming non-public IPs noted.

use crate::addr;
use crate::job::{env_name_denied, AllowHost, Job};
use crate::operator::{self, OperatorPolicy};
use crate::report::{Finding, Severity, Stage};
use serde::Serialize;
use std::path::PathBuf;

/// The isolation tiers (one enum, [`job_policy::Isolation`], shared with the verdict and the fence).
pub use job_policy::Isolation;

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

/// The most the runner itself may set for the command's RLIMIT_NOFILE, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunnerLimit {
    /// The largest value.
    pub value: u64,
    /// Where it comes from, for the refusal.
    pub why: String,
}

impl RunnerLimit {
    /// A limit of `value` explained by `why` (tests and callers that know better than [`Self::open_files`]).
    pub fn new(value: u64, why: impl Into<String>) -> RunnerLimit {
        RunnerLimit {
            value,
            why: why.into(),
        }
    }

    /// What this process may set: with CAP_SYS_RESOURCE (root) up to `fs.nr_open`; otherwise its own hard
    /// RLIMIT_NOFILE (a user namespace cannot raise it). `None` when neither can be read.
    pub fn open_files() -> Option<RunnerLimit> {
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        #[allow(unsafe_code)]
        // SAFETY: getrlimit writes the `rlimit` we own and reads nothing else.
        let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 };
        // Raising the hard limit takes CAP_SYS_RESOURCE (bit 24 of the effective set), not uid 0 as such.
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|st| {
                st.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
            })
            .is_some_and(|caps| caps & (1 << 24) != 0);
        let hard = got.then_some(lim.rlim_max);
        match (root, nr_open, hard) {
            (true, Some(n), _) | (_, Some(n), None) => Some(RunnerLimit::new(
                n,
                format!("fs.nr_open of this machine ({n})"),
            )),
            (_, n, Some(h)) => {
                let value = n.map_or(h, |n| n.min(h));
                Some(RunnerLimit::new(
                    value,
                    format!("the runner's hard RLIMIT_NOFILE ({value}; it lacks CAP_SYS_RESOURCE)"),
                ))
            }
            _ => None,
        }
    }
}

/// What stage 4 checks the job against beyond the tier: the operator's configuration and the runner's own
/// limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunnerPolicy {
    /// What the job may take from the runner's machine.
    pub operator: OperatorPolicy,
    /// The home directory `~/` means (the runner's); `None` compares `~/` paths as written.
    pub home: Option<PathBuf>,
    /// The most the runner may set for RLIMIT_NOFILE (`None`: not checked).
    pub open_files: Option<RunnerLimit>,
}

impl RunnerPolicy {
    /// The built-in operator defaults, the runner's `HOME`, and this process's own limits.
    pub fn probe() -> RunnerPolicy {
        RunnerPolicy::with_operator(OperatorPolicy::default(), None)
    }

    /// `operator`, `home` (the runner's `HOME` when `None`), and this process's own limits.
    pub fn with_operator(operator: OperatorPolicy, home: Option<PathBuf>) -> RunnerPolicy {
        RunnerPolicy {
            operator,
            home: home.or_else(|| std::env::var_os("HOME").map(PathBuf::from)),
            open_files: RunnerLimit::open_files(),
        }
    }
}

/// Stage 4 on a loaded job with the runner's own policy ([`RunnerPolicy`]): [`normalise`], and refusals
/// for passthrough names and read paths the operator does not allow and for an `open_files` above what the
/// runner may set.
pub fn normalise_for_runner(
    job: &Job,
    tier: Isolation,
    limits: &TierLimits,
    runner: &RunnerPolicy,
) -> Vec<Finding> {
    let mut out = normalise(job, tier, limits);
    if let Some(max) = &runner.open_files {
        if job.limits.open_files > max.value {
            out.push(Finding::new(
                Stage::Normalise,
                Severity::Refusal,
                "limits.open_files",
                format!(
                    "limits.open_files = {} is above what this runner may set: {}",
                    job.limits.open_files, max.why
                ),
            ));
        }
    }
    let op = &runner.operator;
    for name in &job.env.passthrough {
        if env_name_denied(name).is_none() && !op.allows_env(name) {
            out.push(Finding::new(
                Stage::Normalise,
                Severity::Refusal,
                "env.passthrough",
                format!(
                    "`{name}` is not a name the operator allows to pass through (allowed: {}; from {})",
                    op.passthrough_line(),
                    op.source
                ),
            ));
        }
    }
    for raw in &job.sandbox.read {
        let allowed = operator::expand(raw, runner.home.as_deref())
            .is_ok_and(|p| op.allows_read(&p, runner.home.as_deref()));
        if !allowed {
            out.push(Finding::new(
                Stage::Normalise,
                Severity::Refusal,
                "sandbox.read",
                format!(
                    "`{raw}` is not at or under a path the operator allows (allowed: {}; from {})",
                    op.read_line(),
                    op.source
                ),
            ));
        }
    }
    out
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
