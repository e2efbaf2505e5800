//! `fenced-run run JOB|BUNDLE --isolation vm [--image DIR]`: intake on the host (to refuse early and learn the
//! job's time budget), then the bundle in a QEMU guest (host::vm), the verdict printed and the evidence written.
//! Exit 0 judged, 1 refused, 2 unusable input or a VM that did not produce evidence.

use super::run::Args;
use crate::vm::{self, VmOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The default image directory: `target/vm-image` of this workspace.
pub fn default_image() -> PathBuf {
    crate::image::agent::workspace_root().join("target/vm-image")
}

/// Runs `args` in the `vm` tier (or, for `tier` sev-snp/tdx, a confidential guest) with `nonce`.
pub fn run(args: &Args, nonce: Vec<u8>, tier: crate::vm::confidential::Tier) -> ExitCode {
    let image = args.image.clone().unwrap_or_else(default_image);
    if !image.join(crate::image::MANIFEST_FILE).is_file() {
        eprintln!(
            "fenced-run run: --image {}: no guest image there; build one with `fenced-run image build --out {}`",
            image.display(),
            image.display()
        );
        return ExitCode::from(2);
    }
    // Intake on the host first: nothing is launched for a bundle intake refuses.
    let work = match tempfile::Builder::new()
        .prefix("fenced-run-intake-vm-")
        .tempdir()
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("fenced-run run: cannot create intake's work directory: {e}");
            return ExitCode::from(2);
        }
    };
    let mut report = intake::run_stages(
        &args.job,
        &intake::IntakeOptions::for_tier(intake::normalise::Isolation::Vm)
            .with_work_parent(work.path()),
    );
    if let Some(why) = report.unusable.clone() {
        let _ = report.cleanup();
        eprintln!("fenced-run run: {}: {why}", args.job.display());
        return ExitCode::from(2);
    }
    let job = match (report.accepted, report.job.take()) {
        (true, Some(job)) => job,
        _ => {
            let reason = report
                .refusal
                .as_ref()
                .map(|r| format!("{}: {}", r.stage.name(), r.reason))
                .unwrap_or_else(|| "intake did not accept the job".into());
            let _ = report.cleanup();
            println!("outcome: refused");
            println!("refused by intake on the host before launch: {reason}");
            return ExitCode::from(1);
        }
    };
    let _ = report.cleanup();
    drop(work);
    let (kind, bytes) = match vm::bundle::pack(&args.job) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("fenced-run run: {e}");
            return ExitCode::from(2);
        }
    };
    let mut opts = VmOptions::new(image);
    opts.confidential = crate::vm::confidential::for_tier(tier, &opts.image);
    // The run's deadline: the job's own phase budgets plus room for intake, the fence and TCG.
    let phases = job.test.timeout_seconds + job.install.as_ref().map_or(0, |i| i.timeout_seconds);
    opts.timeouts.run = Duration::from_secs(phases + 120);
    vm::install_interrupt_handler();
    let out = match vm::run(kind, &bytes, &nonce, &opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fenced-run run --isolation vm: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.json {
        println!(
            "vm          {} (agent ready after {:.2} s, VM exited after {:.2} s), measurement {}",
            out.accel.as_str(),
            out.ready.as_secs_f64(),
            out.total.as_secs_f64(),
            hex::encode(out.measurement)
        );
    }
    super::run::print_verdict(&out.verdict, args.json);
    if let Some(path) = &args.evidence {
        if let Err(e) = std::fs::write(path, &out.evidence_bytes) {
            eprintln!("fenced-run run: --evidence {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if out.verdict.judged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
