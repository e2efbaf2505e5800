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
    /// The guest image to check (default vm-image/ of the data directory, docs/install.md).
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
    /// Where the vm tier's files are kept (image::datadir), or why none can be named.
    pub data_dir: DataDirReport,
}

/// The data directory as `doctor` shows it.
#[derive(Debug, serde::Serialize)]
pub struct DataDirReport {
    /// The directory, when one can be named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// How it was chosen (`--data-dir`, `FENCED_RUN_DATA_DIR`, the build tree, XDG, HOME), or why none is.
    pub source: String,
    /// The static agent an image build would use without `--agent`: linked from the build tree, or the file
    /// installed in the data directory or /usr/share/fenced-run; absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// The data directory's report.
pub fn data_dir_report() -> DataDirReport {
    use crate::image::datadir;
    match datadir::resolve() {
        Ok(d) => DataDirReport {
            dir: Some(d.dir.display().to_string()),
            source: d.source.as_str().into(),
            agent: match &d.build_tree {
                Some(t) => Some(format!(
                    "linked from this build tree on image build (`{}`)",
                    crate::image::agent::command(&t.profile)
                )),
                None => d.installed_agent().map(|p| p.display().to_string()),
            },
        },
        Err(e) => DataDirReport {
            dir: None,
            source: e.to_string(),
            agent: None,
        },
    }
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
        data_dir: data_dir_report(),
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
    let d = &r.data_dir;
    match &d.dir {
        Some(dir) => {
            let _ = writeln!(
                out,
                "data     {} ({})",
                attestation::text::escape(dir),
                attestation::text::escape(&d.source)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "data     none: {}",
                attestation::text::escape(&d.source)
            );
        }
    }
    let _ = writeln!(
        out,
        "agent    {}",
        attestation::text::escape(d.agent.as_deref().unwrap_or(
            "none (scripts/install.sh installs the static guest agent; image build --agent FILE)"
        ))
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
        // The data directory and the agent an image build would use are named (image::datadir).
        assert!(text.lines().any(|l| l.starts_with("data     ")), "{text}");
        assert!(text.lines().any(|l| l.starts_with("agent    ")), "{text}");
        let v: serde_json::Value = serde_json::to_value(&r).expect("json");
        assert_eq!(v["tiers"][0]["tier"], "process");
        assert_eq!(v["tiers"][0]["can_run"], true);
    }
}
