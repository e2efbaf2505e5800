//! `fenced-run doctor [--json] [--image DIR]`: which isolation tiers this host can run (process, vm, sev-snp,
//! tdx), each check that decides it and what is missing, and the tier `--isolation auto` would choose.
//! Exit 0 (it reports; it does not judge).

use crate::vm::confidential::{self, Check, HostEnv, Tier};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `fenced-run doctor`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The guest image to check (default target/vm-image).
    #[arg(long, value_name = "DIR")]
    pub image: Option<PathBuf>,
    /// The QEMU binary to check.
    #[arg(long, value_name = "FILE", default_value = "qemu-system-x86_64")]
    pub qemu: PathBuf,
}

/// One tier's result.
#[derive(Debug, serde::Serialize)]
pub struct TierReport {
    /// The tier.
    pub tier: &'static str,
    /// Whether every check passed.
    pub can_run: bool,
    /// What is missing (the failed checks, joined), when it cannot run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    /// Every check, in order.
    pub checks: Vec<Check>,
}

/// The whole report.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// One entry per tier, best first.
    pub tiers: Vec<TierReport>,
    /// What `--isolation auto` picks.
    pub auto: String,
    /// Why.
    pub auto_why: String,
}

/// The report for `env`.
pub fn report(env: &HostEnv) -> Report {
    let mut tiers = Vec::new();
    for tier in [Tier::Process, Tier::Vm, Tier::SevSnp, Tier::Tdx] {
        let checks = confidential::checks(tier, env);
        let why_not = confidential::missing(&checks);
        tiers.push(TierReport {
            tier: tier.as_str(),
            can_run: why_not.is_none(),
            why_not,
            checks,
        });
    }
    let auto = confidential::choose_auto(env);
    Report {
        tiers,
        auto: auto.tier.as_str().into(),
        auto_why: auto.why,
    }
}

/// The table form of `r`.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for t in &r.tiers {
        let _ = writeln!(
            out,
            "{:<8} {}",
            t.tier,
            if t.can_run { "can run" } else { "cannot run" }
        );
        for c in &t.checks {
            let _ = writeln!(
                out,
                "  {} {:<30} {}",
                if c.ok { "ok  " } else { "MISS" },
                attestation::text::escape(&c.name),
                attestation::text::escape(&c.detail)
            );
        }
    }
    let _ = writeln!(
        out,
        "auto     {} ({})",
        r.auto,
        attestation::text::escape(&r.auto_why)
    );
    out
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let image = args.image.unwrap_or_else(super::vm::default_image);
    let env = HostEnv::probe(&args.qemu, &image);
    let r = report(&env);
    if args.json {
        match serde_json::to_string_pretty(&r) {
            Ok(j) => outln!("{}", attestation::text::json_safe(&j)),
            Err(e) => {
                eprintln!("fenced-run doctor: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        out!("{}", render(&r));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_over_a_fake_pvm_root() {
        let root = tempfile::tempdir().expect("root");
        for (p, t) in [
            ("dev/kvm", ""),
            ("sys/module/kvm_pvm/initstate", "live"),
            ("proc/sys/user/max_user_namespaces", "100\n"),
            ("sys/fs/cgroup/cgroup.controllers", "memory pids\n"),
        ] {
            let p = root.path().join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
            std::fs::write(p, t).expect("write");
        }
        let env = HostEnv {
            root: root.path().to_owned(),
            qemu: "qemu-system-x86_64".into(),
            qemu_version: confidential::parse_qemu_version("QEMU emulator version 10.0.2"),
            image: root.path().join("no-image"),
        };
        let r = report(&env);
        let by = |n: &str| r.tiers.iter().find(|t| t.tier == n).expect(n);
        assert!(by("process").can_run);
        assert!(!by("vm").can_run);
        assert!(by("vm")
            .why_not
            .as_deref()
            .unwrap_or("")
            .contains("image build"));
        let accel = by("vm")
            .checks
            .iter()
            .find(|c| c.name == "accelerator")
            .expect("accelerator");
        assert!(
            accel.detail.starts_with("tcg") && accel.detail.contains("kvm_pvm"),
            "{}",
            accel.detail
        );
        assert!(by("sev-snp")
            .why_not
            .as_deref()
            .unwrap_or("")
            .contains("/dev/sev does not exist"));
        assert!(by("tdx")
            .why_not
            .as_deref()
            .unwrap_or("")
            .contains("older than 10.1"));
        assert_eq!(r.auto, "process");
        let text = render(&r);
        assert!(text.contains("sev-snp  cannot run"), "{text}");
        assert!(text.contains("MISS"), "{text}");
        let v: serde_json::Value = serde_json::to_value(&r).expect("json");
        assert_eq!(v["tiers"][0]["tier"], "process");
        assert_eq!(v["tiers"][0]["can_run"], true);
    }
}
