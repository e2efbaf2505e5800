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
#[command(group(clap::ArgGroup::new("launch").required(true).multiple(true).args(["measurement", "any_measurement"])))]
pub struct Args {
    /// The evidence file (CBOR, `.evidence`).
    pub evidence: PathBuf,
    /// Skip the launch-measurement pin on purpose: without a pin any guest code could have produced the verdict,
    /// and the output says so.
    #[arg(long, conflicts_with = "measurement")]
    pub any_measurement: bool,
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
    let bytes = match std::fs::read(&args.evidence) {
        Ok(b) => b,
        Err(e) => {
            return unusable(
                args.json,
                "input",
                format!("cannot read evidence {}: {e}", args.evidence.display()),
            )
        }
    };
    let crl = match &args.crl {
        Some(p) => match std::fs::read(p) {
            Ok(b) => Some(b),
            Err(e) => {
                return unusable(
                    args.json,
                    "input",
                    format!("cannot read --crl {}: {e}", p.display()),
                )
            }
        },
        None => None,
    };
    let at = args.at.unwrap_or_else(|| {
        let now = time::OffsetDateTime::now_utc();
        now.replace_nanosecond(0).unwrap_or(now)
    });
    let opts = EvidenceOptions {
        chain: ChainOptions {
            at,
            crl,
            allow_simulated: args.allow_simulated,
        },
        policy: args.policy.to_policy(),
        nonce: args.nonce.as_ref().map(|n| n.0.clone()),
        any_measurement: args.any_measurement,
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
