//! `verify-attestation evidence`: a fenced-run evidence bundle, checked in the fixed order (report, key binding,
//! verdict signature, nonce) with a pinned launch measurement or an explicit `--any-measurement`.
//!
//! Exit 0 verified, 1 rejected, 2 unusable input. Sim evidence is rejected unless `--allow-simulated`, and then
//! every line of the human output says SIMULATED.

use super::snp_report::{parse_time, unusable, PolicyArgs};
use crate::evidence::{verify_evidence_bytes, EvidenceOptions};
use crate::output;
use crate::snp::ChainOptions;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `verify-attestation evidence`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("launch").required(true).multiple(true).args(["measurement", "any_measurement", "measurements"])))]
pub struct Args {
    /// The evidence file (CBOR, `.evidence`).
    pub evidence: PathBuf,
    /// Skip the launch-measurement pin on purpose: without a pin any guest code could have produced the verdict,
    /// and the output says so.
    #[arg(long, conflicts_with_all = ["measurement", "measurements"])]
    pub any_measurement: bool,
    /// A measurement set (TOML, from `measure-guest pin`): the launch measurement must be one of its entries,
    /// and at least `--auditors-required` of the `--auditor-key` keys must have signed it.
    #[arg(long, value_name = "SET", requires = "auditor_key")]
    pub measurements: Option<PathBuf>,
    /// A trusted auditor's public key (Ed25519 PEM, from `measure-guest keygen`); repeat for each auditor.
    #[arg(long = "auditor-key", value_name = "KEY", requires = "measurements")]
    pub auditor_key: Vec<PathBuf>,
    /// How many distinct trusted auditors must have signed the set (default 1).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub auditors_required: u32,
    /// An auditor's detached signature over the set; repeat for each. Default: every `SET.*.sig` beside the set
    /// (the name `measure-guest sign` writes).
    #[arg(long = "set-signature", value_name = "FILE", requires = "measurements")]
    pub set_signature: Vec<PathBuf>,
    /// The founder's nonce (hex, 16 to 64 bytes); the verdict's nonce must equal it. Without it, freshness is
    /// not checked and the output says so.
    #[arg(long, value_name = "HEX")]
    pub nonce: Option<NonceArg>,
    /// Accept evidence whose chain does not end in a vendor root (sim tiers); every output line says SIMULATED.
    #[arg(long)]
    pub allow_simulated: bool,
    /// Check certificate validity at this time (RFC 3339 or Unix seconds). Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<time::OffsetDateTime>,
    /// A CRL (DER or PEM) signed by the ARK (SEV-SNP). Default: no revocation check.
    #[arg(long, value_name = "FILE")]
    pub crl: Option<PathBuf>,
    /// TDX collateral (`collateral.json`: TCB info, QE identity, CRLs) for evidence that carries none.
    #[arg(long, value_name = "FILE")]
    pub collateral: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Policy flags (the same as `snp-report`; `--measurement` pins the launch measurement).
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// A founder's nonce given as hex on the command line (16 to 64 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonceArg(pub Vec<u8>);

impl std::str::FromStr for NonceArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let v =
            hex::decode(s.trim().trim_start_matches("0x")).map_err(|e| format!("not hex ({e})"))?;
        attestation::binding::check_nonce(&v).map_err(|e| e.to_string())?;
        Ok(NonceArg(v))
    }
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let bytes = match super::read_input(&args.evidence) {
        Ok(b) => b,
        Err(e) => return unusable(args.json, "input", format!("evidence: {e}")),
    };
    let crl = match super::read_flag_file(args.json, "--crl", args.crl.as_deref()) {
        Ok(b) => b,
        Err(exit) => return exit,
    };
    let at = super::at_or_now(args.at);
    let tdx_collateral =
        match super::read_flag_file(args.json, "--collateral", args.collateral.as_deref()) {
            Ok(b) => b,
            Err(exit) => return exit,
        };
    let measurement_set = match &args.measurements {
        Some(set) => match load_set(set, &args) {
            Ok(t) => Some(std::sync::Arc::new(t)),
            Err((code, e)) => {
                return if code == 1 {
                    rejected(args.json, e)
                } else {
                    unusable(args.json, "measurement-set", e)
                }
            }
        },
        None => None,
    };
    let opts = EvidenceOptions {
        chain: ChainOptions {
            at,
            crl,
            allow_simulated: args.allow_simulated,
        },
        policy: args.policy.to_policy(),
        nonce: args.nonce.as_ref().map(|n| n.0.clone()),
        any_measurement: args.any_measurement,
        measurement_set,
        tdx_collateral,
    };
    let v = match verify_evidence_bytes(&bytes, &opts) {
        Ok(v) => v,
        Err(e) => {
            return unusable(
                args.json,
                crate::evidence::checks::EVIDENCE_FORMAT,
                format!("{}: {e}", args.evidence.display()),
            )
        }
    };
    if args.json {
        println!("{}", output::evidence_json(&v, &opts));
    } else {
        print!("{}", output::evidence_table(&v, &opts));
    }
    if v.verified() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Loads the measurement set and checks its auditor signatures: `Err((1, why))` when the set is readable but
/// not signed by enough trusted auditors (a rejection), `Err((2, why))` when an input is unusable.
fn load_set(
    set: &std::path::Path,
    args: &Args,
) -> Result<measurements::set::TrustedSet, (u8, String)> {
    use measurements::set::{SetError, TrustedSet};
    let signatures = if args.set_signature.is_empty() {
        default_signatures(set).map_err(|e| (2, e))?
    } else {
        args.set_signature.clone()
    };
    TrustedSet::load(
        set,
        &signatures,
        &args.auditor_key,
        args.auditors_required as usize,
    )
    .map_err(|e| match e {
        SetError::NotEnoughAuditors { .. } => (1, e.to_string()),
        other => (2, other.to_string()),
    })
}

/// Every `SET.*.sig` file beside the set, sorted.
fn default_signatures(set: &std::path::Path) -> Result<Vec<PathBuf>, String> {
    let dir = match set.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = set
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("--measurements {}: not a file name", set.display()))?;
    let prefix = format!("{name}.");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot list {} for signatures: {e}", dir.display()))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".sig"))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// A rejection before the evidence was looked at (the set is not trusted): exit 1, naming why.
fn rejected(json: bool, why: String) -> ExitCode {
    if json {
        let v = serde_json::json!({
            "verified": false,
            "failures": [{"check": crate::evidence::checks::MEASUREMENT_SET, "detail": why}],
        });
        println!("{v}");
    } else {
        println!(
            "REJECTED  {}: {why}",
            crate::evidence::checks::MEASUREMENT_SET
        );
    }
    ExitCode::from(1)
}
