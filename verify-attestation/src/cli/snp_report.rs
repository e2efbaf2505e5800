//! `verify-attestation snp-report`: a raw SEV-SNP ATTESTATION_REPORT against its VCEK/VLEK chain and a policy,
//! and [`PolicyArgs`], the policy flags every SEV-SNP subcommand shares (one flag per [`Policy`] field).
//!
//! Exit 0 verified, 1 rejected, 2 unusable input (unreadable file, malformed report or certificates).

use attestation::snp::AttestationReport;
use std::path::PathBuf;
use std::process::ExitCode;
use verifier_lib::output;
use verifier_lib::sev_snp::{self as snp, CertBundle, ChainOptions};

use super::exit::{refusal_exit, rejected, unusable, Exit};
// Shared with every SEV-SNP subcommand; named here as before.
pub use super::input::parse_time;
pub use super::policy_args::PolicyArgs;

/// Arguments of `verify-attestation snp-report`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The raw 1184-byte ATTESTATION_REPORT.
    pub report: PathBuf,
    /// Directory with ark.pem, ask.pem or asvk.pem, and vcek.der/vcek.pem or vlek.der/vlek.pem (or cert_chain.pem
    /// in place of ark.pem + ask.pem/asvk.pem), the layout snpguest and AMD's key server use. Without it: from
    /// `--collateral`, or the cache / KDS (`--cache`, `--online`).
    #[arg(long, value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// An offline collateral bundle (`verify-attestation fetch --bundle`) with the ARK, ASK, VCEK (and CRL).
    #[arg(long, value_name = "BUNDLE", conflicts_with = "certs")]
    pub collateral: Option<PathBuf>,
    /// Fetching, cache, bundle auditors, TCB baseline.
    #[command(flatten)]
    pub collateral_args: super::fetch::CollateralArgs,
    /// Check certificate validity at this time (RFC 3339 or Unix seconds). Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<time::OffsetDateTime>,
    /// A CRL (DER or PEM) signed by the ARK; a revoked ASK/ASVK is rejected. Default: no revocation check.
    #[arg(long, value_name = "FILE")]
    pub crl: Option<PathBuf>,
    /// Accept a chain whose root is not a pinned AMD ARK (sim evidence); output then says SIMULATED.
    #[arg(long)]
    pub allow_simulated: bool,
    /// The SEV-SNP policy in a TOML file (keys are the policy flags' names without `--`, docs/cli.md); a
    /// policy flag given as well overrides the file's value.
    #[arg(long = "policy", value_name = "FILE")]
    pub policy_file: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Policy flags.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Checks the report's REPORTED_TCB (the TCB its VCEK attests) against a TCB baseline: one `tcb-baseline`
/// failure per component below its floor. Returns the JSON summary.
pub fn apply_baseline(
    b: &verifier_lib::collateral::Baseline,
    v: &mut snp::SnpVerification,
) -> serde_json::Value {
    let Some(product) = v.product() else {
        v.failures.push(verifier_lib::Failure::new(
            "tcb-baseline",
            "the product is unknown: the baseline cannot be applied",
        ));
        return serde_json::json!({"version": b.version, "applied": false});
    };
    let parts = v.report.reported_tcb.decode(product);
    let short = b.check(product, &parts);
    for s in &short {
        v.failures
            .push(verifier_lib::Failure::new("tcb-baseline", s.describe()));
    }
    serde_json::json!({
        "version": b.version,
        "applied": true,
        "product": product.name(),
        "below": short,
        "unverified_floors": b.floors.iter().filter(|f| !f.verified_at_source && attestation::snp::Product::from_name(&f.product) == Some(product)).map(|f| f.bulletin.clone()).collect::<Vec<_>>(),
    })
}

/// The flags that conflict with one another (exit 2), then, with auditor keys named, the collateral inputs that
/// cannot carry an auditor's signature (`collateral-unsigned`, exit 1): `--certs DIR`, `--crl FILE`, a
/// `--tcb-baseline` file.
fn refuse_unsigned_inputs(args: &Args) -> Result<(), super::exit::Refusal> {
    let c = &args.collateral_args;
    c.check_usage()?;
    if let (Some(dir), true) = (&args.certs, c.wants_cache_or_network()) {
        return Err((
            Exit::Unusable,
            "usage",
            format!(
                "--certs {} with {}: the certificates would come from the directory and the {} would go \
                 unused; give one of them",
                dir.display(),
                if c.online { "--online" } else { "--cache" },
                if c.online { "network" } else { "cache" }
            ),
        ));
    }
    if let Some(dir) = &args.certs {
        c.refuse_unsigned(&format!("the certificates in --certs {}", dir.display()))?;
    }
    if let Some(p) = &args.crl {
        c.refuse_unsigned(&format!("the CRL file --crl {}", p.display()))?;
    }
    c.refuse_unsigned_baseline()
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let bytes = match super::input::read_main_input(
        args.json,
        "report",
        &args.report,
        super::kind::Kind::SnpReport,
    ) {
        Ok(b) => b,
        Err(exit) => return exit,
    };
    let report = match AttestationReport::from_bytes(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return unusable(
                args.json,
                "report-format",
                format!("{}: {e}", args.report.display()),
            )
        }
    };
    if let Err(refusal) = refuse_unsigned_inputs(&args) {
        return refusal_exit(args.json, refusal);
    }
    let at_s = super::input::at_or_now(args.at).unix_timestamp();
    let mut source_crl = None;
    let collateral_note: serde_json::Value;
    let bundle = if let Some(dir) = &args.certs {
        collateral_note = serde_json::json!({"source": "certs", "dir": dir.display().to_string()});
        match CertBundle::from_dir(dir, report.key_info.signing_key) {
            Ok(b) => b,
            Err(e) => return unusable(args.json, "input", format!("--certs: {e}")),
        }
    } else {
        match super::fetch::snp_collateral(
            &args.collateral_args,
            args.collateral.as_deref(),
            &report,
            args.crl.is_none(),
            args.allow_simulated,
            at_s,
        ) {
            Ok(Some(c)) => {
                source_crl = c.crl;
                collateral_note = c.note;
                c.certs
            }
            Ok(None) => {
                return unusable(
                    args.json,
                    "usage",
                    "snp-report needs the report's certificates: give --certs DIR, --collateral BUNDLE, --cache DIR or --online"
                        .into(),
                )
            }
            Err((Exit::Rejected, check, why)) => return rejected(args.json, check, why),
            Err((_, check, why)) => return unusable(args.json, check, why),
        }
    };
    let baseline = match args.collateral_args.baseline() {
        Ok(b) => b,
        Err(e) => return unusable(args.json, "input", e),
    };
    let crl = match super::input::read_crl(args.json, args.crl.as_deref()) {
        Ok(b) => b.or(source_crl),
        Err(exit) => return exit,
    };
    let opts = ChainOptions {
        at: super::input::at_or_now(args.at),
        crl,
        allow_simulated: args.allow_simulated,
    };
    let policy = match super::policy_file::effective(args.policy_file.as_deref(), &args.policy) {
        Ok(p) => p,
        Err(e) => return unusable(args.json, "policy-file", e),
    };
    let input = snp::SnpInput {
        report: &bytes,
        certs: &bundle,
    };
    let policy = policy.to_policy();
    let mut v = match snp::verify_report_bytes(&input, &opts, &policy) {
        Ok(v) => v,
        Err(e) => {
            return unusable(
                args.json,
                "report-format",
                format!("{}: {e}", args.report.display()),
            )
        }
    };
    let baseline_json = baseline.as_ref().map(|b| apply_baseline(b, &mut v));
    let ctx = output::ClaimContext {
        pool_attempt: None,
        pool_ledger: None,
        collateral_source: collateral_note.clone(),
        policy_file: args.policy_file.as_ref().map(|p| p.display().to_string()),
        tcb_baseline: args
            .collateral_args
            .tcb_baseline
            .as_ref()
            .map(|p| p.display().to_string()),
    };
    let claims = output::snp_claims(&v, &opts, &policy, &ctx);
    if args.json {
        let mut j = output::snp_json(&v, &opts);
        if let Some(o) = j.as_object_mut() {
            if let Some(b) = baseline_json {
                o.insert("tcb_baseline".into(), b);
            }
            if !collateral_note.is_null() {
                o.insert("collateral_source".into(), collateral_note);
            }
            o.insert(
                "claims".into(),
                serde_json::to_value(&claims).unwrap_or_default(),
            );
        }
        println!("{}", attestation::text::json_safe(&j.to_string()));
    } else {
        let mut rows = output::snp_rows(&v, &opts);
        let at = rows
            .iter()
            .position(|(k, _)| k == "failures" || k.starts_with("FAIL "))
            .unwrap_or(rows.len());
        rows.splice(at..at, output::claim_rows(&claims));
        print!(
            "{}",
            output::print_table(&rows, if v.simulated() { "SIMULATED " } else { "" })
        );
    }
    if v.verified() {
        Exit::Success.into()
    } else {
        Exit::Rejected.into()
    }
}
