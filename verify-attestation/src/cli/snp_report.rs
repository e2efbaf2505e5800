//! `verify-attestation snp-report`: a raw SEV-SNP ATTESTATION_REPORT against its VCEK/VLEK chain and a policy,
//! and [`PolicyArgs`], the policy flags every SEV-SNP subcommand shares (one flag per [`Policy`] field).
//!
//! Exit 0 verified, 1 rejected, 2 unusable input (unreadable file, malformed report or certificates).

use attestation::hex::Hex;
use attestation::snp::AttestationReport;
use std::path::PathBuf;
use std::process::ExitCode;
use verifier_lib::output;
use verifier_lib::snp::policy::{AbiVersion, TcbMinimum};
use verifier_lib::snp::{self, CertBundle, ChainOptions, Policy};

/// The acceptability policy as flags; each flag sets one field of [`Policy`], the rest keep their defaults.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PolicyArgs {
    /// Accepted launch MEASUREMENT (96 hex digits); repeat for any of several. Default: not checked.
    #[arg(long = "measurement", value_name = "HEX")]
    pub measurement: Vec<Hex<48>>,
    /// Required REPORT_DATA (128 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub report_data: Option<Hex<64>>,
    /// Required HOST_DATA (64 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub host_data: Option<Hex<32>>,
    /// Required FAMILY_ID (32 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub family_id: Option<Hex<16>>,
    /// Required IMAGE_ID (32 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub image_id: Option<Hex<16>>,
    /// Accepted ID_KEY_DIGEST (96 hex digits); repeatable. Default: not checked.
    #[arg(long = "id-key-digest", value_name = "HEX")]
    pub id_key_digest: Vec<Hex<48>>,
    /// Accepted AUTHOR_KEY_DIGEST (96 hex digits, AUTHOR_KEY_EN must be set); repeatable. Default: not checked.
    #[arg(long = "author-key-digest", value_name = "HEX")]
    pub author_key_digest: Vec<Hex<48>>,
    /// Accept a guest whose policy allows debugging. Default: forbidden.
    #[arg(long)]
    pub allow_debug: bool,
    /// Accept a guest whose policy allows a migration agent. Default: forbidden.
    #[arg(long)]
    pub allow_migration_agent: bool,
    /// Reject a guest policy that allows SMT, or a platform with SMT enabled. Default: SMT allowed.
    #[arg(long)]
    pub forbid_smt: bool,
    /// Require the guest policy's SINGLE_SOCKET bit. Default: not required.
    #[arg(long)]
    pub require_single_socket: bool,
    /// Minimum firmware ABI as MAJOR.MINOR (current firmware). Default: none.
    #[arg(long, value_name = "MAJOR.MINOR")]
    pub min_abi: Option<AbiVersion>,
    /// Required VMPL of the report request. Default: any VMPL.
    #[arg(long, value_name = "N")]
    pub vmpl: Option<u32>,
    /// Minimum GUEST_SVN. Default: none.
    #[arg(long, value_name = "N")]
    pub min_guest_svn: Option<u32>,
    /// Minimum CURRENT/COMMITTED/REPORTED TCB, e.g. `bl=3,tee=0,snp=10,ucode=115[,fmc=1]`. Default: none.
    #[arg(long, value_name = "LIST")]
    pub min_tcb: Option<TcbMinimum>,
    /// Minimum LAUNCH_TCB, same syntax as --min-tcb. Default: none.
    #[arg(long, value_name = "LIST")]
    pub min_launch_tcb: Option<TcbMinimum>,
    /// Minimum firmware build (current and committed). Default: none.
    #[arg(long, value_name = "N")]
    pub min_build: Option<u8>,
    /// Reject provisional firmware (CURRENT differs from COMMITTED). Default: allowed.
    #[arg(long)]
    pub forbid_provisional_firmware: bool,
}

impl PolicyArgs {
    /// The SEV-SNP-only flags given (every flag but `--measurement`, `--report-data` and `--allow-debug`, which
    /// TDX evidence uses too), by name: on TDX evidence each is an error, not silently ignored.
    pub fn snp_only_flags_given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut given = |b: bool, name: &'static str| {
            if b {
                out.push(name);
            }
        };
        given(self.host_data.is_some(), "--host-data");
        given(self.family_id.is_some(), "--family-id");
        given(self.image_id.is_some(), "--image-id");
        given(!self.id_key_digest.is_empty(), "--id-key-digest");
        given(!self.author_key_digest.is_empty(), "--author-key-digest");
        given(self.allow_migration_agent, "--allow-migration-agent");
        given(self.forbid_smt, "--forbid-smt");
        given(self.require_single_socket, "--require-single-socket");
        given(self.min_abi.is_some(), "--min-abi");
        given(self.vmpl.is_some(), "--vmpl");
        given(self.min_guest_svn.is_some(), "--min-guest-svn");
        given(self.min_tcb.is_some(), "--min-tcb");
        given(self.min_launch_tcb.is_some(), "--min-launch-tcb");
        given(self.min_build.is_some(), "--min-build");
        given(
            self.forbid_provisional_firmware,
            "--forbid-provisional-firmware",
        );
        out
    }

    /// The [`Policy`] these flags describe.
    pub fn to_policy(&self) -> Policy {
        Policy {
            allow_debug: self.allow_debug,
            allow_migration_agent: self.allow_migration_agent,
            allow_smt: !self.forbid_smt,
            require_single_socket: self.require_single_socket,
            min_abi: self.min_abi,
            vmpl: self.vmpl,
            min_guest_svn: self.min_guest_svn,
            min_tcb: self.min_tcb.unwrap_or_default(),
            min_launch_tcb: self.min_launch_tcb.unwrap_or_default(),
            min_build: self.min_build,
            allow_provisional_firmware: !self.forbid_provisional_firmware,
            measurements: self.measurement.clone(),
            report_data: self.report_data,
            host_data: self.host_data,
            family_id: self.family_id,
            image_id: self.image_id,
            id_key_digests: self.id_key_digest.clone(),
            author_key_digests: self.author_key_digest.clone(),
        }
    }
}

/// Parses a verification time: RFC 3339 (`2025-01-01T00:00:00Z`) or Unix seconds.
pub fn parse_time(s: &str) -> Result<time::OffsetDateTime, String> {
    if let Ok(secs) = s.parse::<i64>() {
        return time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| format!("`{s}`: {e}"));
    }
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{s}` is neither RFC 3339 nor Unix seconds ({e})"))
}

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

/// Prints an unusable-input result and returns exit code 2: with `json` the one object
/// `{"verified": false, "error": {"check", "detail"}, "failures": [the error]}`, otherwise a message on stderr.
pub fn unusable(json: bool, check: &str, detail: String) -> ExitCode {
    if json {
        let v = attestation::cli_io::error_json("verified", check, &detail);
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        eprintln!("verify-attestation: {}", attestation::text::escape(&detail));
    }
    ExitCode::from(2)
}

/// Prints a rejection found before verification (exit 1), e.g. a bundle without enough auditor signatures.
pub fn rejected(json: bool, check: &'static str, detail: String) -> ExitCode {
    if json {
        let v = serde_json::json!({ "verified": false, "failures": [verifier_lib::Failure::new(check, detail)] });
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        eprintln!(
            "verify-attestation: REJECTED: {}",
            attestation::text::escape(&detail)
        );
    }
    ExitCode::from(1)
}

/// Checks the report's REPORTED_TCB (the TCB its VCEK attests) against a TCB baseline: one `tcb-baseline`
/// failure per component below its floor. Returns the JSON summary.
pub fn apply_baseline(
    b: &verifier_lib::collateral::baseline::Baseline,
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

/// Prints a refusal of the collateral: exit 1 a rejection (`collateral-unsigned`), exit 2 unusable input.
pub(crate) fn refusal_exit(json: bool, (exit, check, why): super::fetch::Refusal) -> ExitCode {
    if exit == 1 {
        rejected(json, check, why)
    } else {
        unusable(json, check, why)
    }
}

/// The flags that conflict with one another (exit 2), then, with auditor keys named, the collateral inputs that
/// cannot carry an auditor's signature (`collateral-unsigned`, exit 1): `--certs DIR`, `--crl FILE`, a
/// `--tcb-baseline` file.
fn refuse_unsigned_inputs(args: &Args) -> Result<(), super::fetch::Refusal> {
    let c = &args.collateral_args;
    c.check_usage()?;
    if let (Some(dir), true) = (&args.certs, c.wants_cache_or_network()) {
        return Err((
            2,
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
    let bytes = match super::read_main_input(
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
    let at_s = super::at_or_now(args.at).unix_timestamp();
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
            Err((1, check, why)) => return rejected(args.json, check, why),
            Err((_, check, why)) => return unusable(args.json, check, why),
        }
    };
    let baseline = match args.collateral_args.baseline() {
        Ok(b) => b,
        Err(e) => return unusable(args.json, "input", e),
    };
    let crl = match super::read_crl(args.json, args.crl.as_deref()) {
        Ok(b) => b.or(source_crl),
        Err(exit) => return exit,
    };
    let opts = ChainOptions {
        at: super::at_or_now(args.at),
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
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
