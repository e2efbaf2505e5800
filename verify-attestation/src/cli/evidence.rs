//! `verify-attestation evidence`: a fenced-run evidence bundle, checked in the fixed order (report, key binding,
//! verdict signature, nonce) with a pinned launch measurement or an explicit `--any-measurement`, a nonce or an
//! explicit `--no-nonce`, and the founder's pins on the run (outcome, commit, tree, patch, job, isolation).
//!
//! Exit 0 verified, 1 rejected, 2 unusable input. Sim evidence is rejected unless `--allow-simulated`, and then
//! every line of the human output says SIMULATED.

use super::exit::{unusable, Exit};
use super::input::parse_time;
use super::policy_args::PolicyArgs;
use attestation::hex::Hex;
use attestation::verdict::{Isolation, Outcome};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::process::ExitCode;
use verifier_lib::output;
use verifier_lib::sev_snp::ChainOptions;
use verifier_lib::{verify_decoded, Decoded, EvidenceOptions, RunPins};

/// Arguments of `verify-attestation evidence`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("launch").required(true).multiple(true).args(["measurement", "any_measurement", "measurements", "mrtd", "rtmr", "policy_file"])))]
#[command(group(clap::ArgGroup::new("freshness").required(true).args(["nonce", "no_nonce"])))]
pub struct Args {
    /// The evidence file (CBOR, `.evidence`).
    pub evidence: PathBuf,
    /// Skip the launch-measurement pin on purpose: without a pin any guest code could have produced the verdict,
    /// and the output says so.
    #[arg(long, conflicts_with_all = ["measurement", "measurements", "mrtd", "rtmr"])]
    pub any_measurement: bool,
    /// A measurement set (TOML, from `measure-guest pin`): the launch measurement must be one of its entries,
    /// and at least `--auditors-required` of the `--auditor-key` keys must have signed it.
    #[arg(long, value_name = "SET", requires = "auditor_key")]
    pub measurements: Option<PathBuf>,
    /// A trusted auditor's public key (Ed25519 PEM, from `measure-guest keygen`); repeat for each auditor.
    #[arg(long = "auditor-key", value_name = "KEY", requires = "measurements")]
    pub auditor_key: Vec<PathBuf>,
    /// How many distinct trusted auditors must have signed the set (default 1; only with --measurements).
    #[arg(long, value_name = "K", requires = "measurements", value_parser = clap::value_parser!(u32).range(1..))]
    pub auditors_required: Option<u32>,
    /// An auditor's detached signature over the set; repeat for each. Default: every `SET.*.sig` beside the set
    /// (the name `measure-guest sign` writes).
    #[arg(long = "set-signature", value_name = "FILE", requires = "measurements")]
    pub set_signature: Vec<PathBuf>,
    /// The founder's nonce (hex, 16 to 64 bytes), the one sent with the job; the verdict's nonce must equal it.
    /// Required unless --no-nonce.
    #[arg(long, value_name = "HEX")]
    pub nonce: Option<NonceArg>,
    /// Evidence of attempt N of a hosted-pool run (docs/pool.md): the verdict's nonce must equal the nonce
    /// derived from --nonce and N (`attestation::pool_nonce::attempt_nonce`), not --nonce itself.
    #[arg(long, value_name = "N", requires = "nonce", value_parser = clap::value_parser!(u32).range(1..))]
    pub pool_attempt: Option<u32>,
    /// A hosted-pool run's signed execution ledger (`pool fetch --ledger-out`): the evidence's nonce must be one
    /// the pool issued for the run of --nonce, to the evidence's key, and the run may have at most
    /// --max-executions executions (`pool-executions`, `pool-ledger`; docs/verification.md).
    #[arg(long, value_name = "FILE", requires_all = ["nonce", "pool_key"], conflicts_with = "pool_attempt")]
    pub pool_ledger: Option<PathBuf>,
    /// The pool's public key (PEM, printed by `pool key`), pinned: the ledger must be signed by it.
    #[arg(long, value_name = "PUB", requires = "pool_ledger")]
    pub pool_key: Option<PathBuf>,
    /// Most executions of the run the founder accepts (default 1: a run executed more than once fails).
    #[arg(long, value_name = "N", requires = "pool_ledger", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_executions: u32,
    /// Skip the freshness check on purpose: the verdict may then be a replay of an older run, and the output
    /// says so.
    #[arg(long)]
    pub no_nonce: bool,
    /// The founder's pins on the run itself.
    #[command(flatten)]
    pub pins: Box<PinArgs>,
    /// TDX evidence: the image pin and the TDX policy.
    #[command(flatten)]
    pub tdx: Box<EvidenceTdxArgs>,
    /// Accept evidence whose chain does not end in a vendor root (sim tiers); every output line says SIMULATED.
    #[arg(long)]
    pub allow_simulated: bool,
    /// Check certificate validity at this time (RFC 3339 or Unix seconds). Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<time::OffsetDateTime>,
    /// A CRL (DER or PEM) signed by the ARK (SEV-SNP). Default: no revocation check.
    #[arg(long, value_name = "FILE")]
    pub crl: Option<PathBuf>,
    /// TDX collateral (`collateral.json`: TCB info, QE identity, CRLs) for evidence that carries none, or a
    /// collateral bundle (`verify-attestation fetch --bundle`); for SEV-SNP evidence a bundle only, whose
    /// ARK, ASK and VCEK (and CRL) are used in place of the evidence's certificates.
    #[arg(long, value_name = "FILE")]
    pub collateral: Option<PathBuf>,
    /// Fetching (TDX), cache, bundle auditors, SEV-SNP TCB baseline.
    #[command(flatten)]
    pub collateral_args: super::fetch::CollateralArgs,
    /// The SEV-SNP policy in a TOML file (keys are the policy flags' names without `--`, docs/cli.md); a
    /// policy flag given as well overrides the file's value.
    #[arg(long = "policy", value_name = "FILE")]
    pub policy_file: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Policy flags (the same as `snp-report`; `--measurement` pins the launch measurement).
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The standard forms: an in-toto statement in DSSE, an EAR (docs/verification.md, "Standard forms").
    #[command(flatten)]
    pub standard: Box<super::standard::StandardArgs>,
}

/// The founder's pins on the run: each flag given is a check of its own (`pin-outcome`, `pin-commit`, ...).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PinArgs {
    /// The outcome the founder pays for (refused, tests_passed, tests_failed, no_tests_observed,
    /// counts_unparsed, test_command_unavailable, environment_exhausted, budget_expired); repeat to accept any of
    /// several. Default: not pinned, and the output says so first.
    #[arg(long = "expect-outcome", value_name = "NAME", value_parser = parse_outcome)]
    pub expect_outcome: Vec<Outcome>,
    /// The repository commit the run must have tested: the full object id or a prefix of at least 12 hex digits.
    #[arg(long, value_name = "SHA", value_parser = verifier_lib::parse_commit_pin)]
    pub commit: Option<String>,
    /// The tree hash of the repository after the patch (full object id).
    #[arg(long, value_name = "SHA", value_parser = verifier_lib::parse_tree_pin)]
    pub tree: Option<String>,
    /// The git tree of the protected paths (`[test] protect`) that the test phase ran: the verdict's
    /// `inputs.test_tree` (full object id).
    #[arg(long = "protect-tree", value_name = "SHA", value_parser = verifier_lib::parse_tree_pin)]
    pub protect_tree: Option<String>,
    /// The contributor's patch: its SHA-256 must be the verdict's.
    #[arg(long, value_name = "FILE", conflicts_with = "patch_sha256")]
    pub patch: Option<PathBuf>,
    /// SHA-256 of the contributor's patch (64 hex digits).
    #[arg(long, value_name = "HEX")]
    pub patch_sha256: Option<Hex<32>>,
    /// The job file the founder sent: its SHA-256 must be the verdict's.
    #[arg(long, value_name = "FILE", conflicts_with = "job_sha256")]
    pub job: Option<PathBuf>,
    /// SHA-256 of the job file (64 hex digits).
    #[arg(long, value_name = "HEX")]
    pub job_sha256: Option<Hex<32>>,
    /// The isolation tier the verdict must record (sev-snp, tdx, vm, process).
    #[arg(long, value_name = "TIER", value_parser = parse_isolation)]
    pub isolation: Option<Isolation>,
    /// At least one test must be counted (passed + failed > 0): a run whose install failed, or whose suite ran
    /// nothing, is rejected whatever its outcome.
    #[arg(long = "expect-tests-ran")]
    pub expect_tests_ran: bool,
    /// At least N failed tests must be counted (N >= 1); with `--expect-outcome tests_failed` it checks that the
    /// base reproduces the bug, not merely that the run failed.
    #[arg(long = "min-failed", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub min_failed: Option<u64>,
    /// The URL the repository was fetched from (`[repository] url`): the verdict's `repository.url`, exactly.
    #[arg(long, value_name = "URL")]
    pub repository: Option<String>,
    /// Every connection the fence transcript records as let through by the egress proxy goes to one of these
    /// (HOST or HOST:PORT; `[IPV6]:PORT`): comma-separated, and the flag may be repeated. Needs a transcript.
    #[arg(long = "expect-egress-only", value_name = "HOST[:PORT],...", value_delimiter = ',', action = clap::ArgAction::Append, value_parser = verifier_lib::EgressPin::parse)]
    pub expect_egress_only: Option<Vec<verifier_lib::EgressPin>>,
    /// The fence transcript has a cut event that held (install PID 1 reaped, no process left) before the test
    /// phase started. Needs a transcript (and an install phase: a job without one has no cut).
    #[arg(long = "expect-cut")]
    pub expect_cut: bool,
}

fn parse_outcome(s: &str) -> Result<Outcome, String> {
    Outcome::ALL
        .into_iter()
        .find(|o| o.as_str() == s.trim())
        .ok_or_else(|| {
            format!(
                "`{s}` is not an outcome (one of {})",
                Outcome::ALL.map(|o| o.as_str()).join(", ")
            )
        })
}

fn parse_isolation(s: &str) -> Result<Isolation, String> {
    [
        Isolation::SevSnp,
        Isolation::Tdx,
        Isolation::Vm,
        Isolation::Process,
    ]
    .into_iter()
    .find(|i| i.as_str() == s.trim())
    .ok_or_else(|| format!("`{s}` is not an isolation tier (sev-snp, tdx, vm, process)"))
}

/// `--rtmr N=HEX`: RTMR index 0 to 3 and its 48-byte value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtmrPin(pub usize, pub [u8; 48]);

impl std::str::FromStr for RtmrPin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, h) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected N=HEX (N is 0 to 3)"))?;
        let n: usize = n
            .trim()
            .trim_start_matches(['r', 't', 'm', 'R', 'T', 'M'])
            .parse()
            .map_err(|_| format!("`{n}`: the RTMR index is 0 to 3"))?;
        if n > 3 {
            return Err(format!("RTMR{n}: the RTMR index is 0 to 3"));
        }
        let v: Hex<48> = h
            .parse()
            .map_err(|e: attestation::hex::HexError| e.to_string())?;
        Ok(RtmrPin(n, v.0))
    }
}

/// TDX evidence: the image pin (`--mrtd`, `--rtmr N=HEX`, `--leave-rtmrs-unpinned`) and the policy flags of
/// `tdx-quote` (`--allow-debug` and `--report-data` are the shared SEV-SNP flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EvidenceTdxArgs {
    /// TDX: accepted MRTD (96 hex digits, the firmware); repeatable. The image is pinned only with RTMR1 and
    /// RTMR2 as well (--rtmr), or a --measurements entry that lists them.
    #[arg(long = "mrtd", value_name = "HEX")]
    pub mrtd: Vec<Hex<48>>,
    /// TDX: required RTMR, as N=HEX (RTMR1 covers the kernel, RTMR2 the command line and initramfs); repeatable.
    #[arg(long = "rtmr", value_name = "N=HEX")]
    pub rtmr: Vec<RtmrPin>,
    /// TDX: accept a pin of MRTD alone (or a set entry without RTMR1/RTMR2), leaving the kernel, initramfs and
    /// command line unpinned on purpose; the output names the registers compared.
    #[arg(long)]
    pub leave_rtmrs_unpinned: bool,
    /// The TDX acceptability flags of `tdx-quote`, which apply to TDX evidence too.
    #[command(flatten)]
    pub accept: super::tdx_quote::TdxAcceptArgs,
}

impl EvidenceTdxArgs {
    /// The TDX [`verifier_lib::intel_tdx::Policy`] these flags describe (`--measurement`, `--allow-debug` and
    /// `--report-data` are the evidence options' `shared` part, which the verifier adds).
    pub fn to_policy(&self) -> verifier_lib::intel_tdx::Policy {
        let mut p = verifier_lib::intel_tdx::Policy::default();
        self.accept.apply(&mut p);
        p.mrtd = self.mrtd.iter().map(|m| m.0).collect();
        for r in &self.rtmr {
            p.rtmr[r.0] = Some(r.1);
        }
        p
    }
}

/// A founder's nonce given as hex on the command line (16 to 64 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonceArg(pub Vec<u8>);

impl std::str::FromStr for NonceArg {
    type Err = attestation::binding::NonceTextError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        attestation::binding::parse_nonce_hex(s).map(NonceArg)
    }
}

/// Why the flags could not be made into [`EvidenceOptions`].
#[derive(Debug)]
pub enum OptionsError {
    /// An input is unusable (exit 2): the check name and what is wrong.
    Unusable(&'static str, String),
    /// The check refused before the evidence was looked at (exit 1): the measurement set is readable but not
    /// signed by enough trusted auditors, or the collateral is refused; the check name and why.
    Rejected(&'static str, String),
}

/// What [`options_and_source`] makes: the evidence bytes, the options, the TCB baseline, where collateral
/// from outside the evidence came from (`collateral_source` of the JSON; `null` when none did), and the evidence
/// decoded (once: [`run`] verifies these values).
pub type Prepared = (
    Vec<u8>,
    EvidenceOptions,
    Option<verifier_lib::collateral::Baseline>,
    serde_json::Value,
    Decoded,
);

/// Reads the evidence and every file a flag names, and makes the [`EvidenceOptions`] the flags describe (also
/// used by `fenced-run view`, which flattens these [`Args`]: the standard forms' flags, which it does not act on,
/// are refused here as `flag-not-applicable`).
pub fn options(
    args: &Args,
) -> Result<
    (
        Vec<u8>,
        EvidenceOptions,
        Option<verifier_lib::collateral::Baseline>,
    ),
    OptionsError,
> {
    let given = args.standard.given();
    if !given.is_empty() {
        return Err(OptionsError::Unusable(
            "flag-not-applicable",
            format!(
                "{} belong to `verify-attestation evidence`, which writes the standard forms; remove them here",
                given.join(", ")
            ),
        ));
    }
    options_and_source(args).map(|(b, o, base, _, _)| (b, o, base))
}

/// [`options`], with where the collateral came from: the `--collateral` bundle (its auditors), the cache or
/// the network; for SEV-SNP evidence these certificates replace the evidence's own.
pub fn options_and_source(args: &Args) -> Result<Prepared, OptionsError> {
    use OptionsError::Unusable;
    let bytes = super::input::main_input("evidence", &args.evidence, super::kind::Kind::Cbor)
        .map_err(|(check, e)| Unusable(check, e))?;
    let policy = super::policy_file::effective(args.policy_file.as_deref(), &args.policy)
        .map_err(|e| Unusable("policy-file", e))?;
    let decoded = Decoded::from_cbor(&bytes).map_err(|e| {
        Unusable(
            verifier_lib::checks::EVIDENCE_FORMAT,
            format!("{}: {e}", args.evidence.display()),
        )
    })?;
    let ev = &decoded.evidence;
    let mut cannot_apply = inapplicable_flags(args, ev.tee.is_snp());
    if !ev.tee.is_snp() && args.policy_file.is_some() && !policy.snp_only_flags_given().is_empty() {
        cannot_apply.push("--policy (a file with SEV-SNP keys)");
    }
    if !cannot_apply.is_empty() {
        let one = cannot_apply.len() == 1;
        return Err(Unusable(
            "flag-not-applicable",
            format!(
                "{} {} not apply to {} evidence ({}); remove {}",
                cannot_apply.join(", "),
                if one { "does" } else { "do" },
                if ev.tee.is_snp() { "SEV-SNP" } else { "TDX" },
                ev.tee,
                if one { "it" } else { "them" }
            ),
        ));
    }
    let refused = |(exit, check, why): super::exit::Refusal| {
        if exit == Exit::Rejected {
            OptionsError::Rejected(check, why)
        } else {
            Unusable(check, why)
        }
    };
    refuse_unsigned_inputs(args, ev).map_err(refused)?;
    let crl =
        super::input::crl_input(args.crl.as_deref()).map_err(|(check, e)| Unusable(check, e))?;
    let at = super::input::at_or_now(args.at);
    let baseline = args
        .collateral_args
        .baseline()
        .map_err(|e| Unusable("input", e))?;
    // TDX evidence: the founder's collateral (file or bundle), else the cache or PCS when asked for.
    let quote = (!ev.tee.is_snp()).then_some(&ev.report);
    let mut collateral_source = serde_json::Value::Null;
    let tdx_collateral = match quote {
        None => None,
        Some(q) => super::fetch::tdx_collateral(
            &args.collateral_args,
            args.collateral.as_deref(),
            q,
            at.unix_timestamp(),
        )
        .map_err(refused)?
        .map(|(b, note)| {
            collateral_source = note;
            b
        }),
    };
    if quote.is_some() && tdx_collateral.is_none() {
        // Only the evidence's own collateral (the host's) is left: with auditor keys, refused.
        args.collateral_args
            .refuse_unsigned(if ev.collateral.is_some() {
                "the collateral the TDX evidence carries (the host's)"
            } else {
                "no collateral (the TDX evidence carries none and none was given)"
            })
            .map_err(refused)?;
    }
    // SEV-SNP evidence: the founder's certificates (bundle, cache or KDS) in place of the evidence's, which a
    // host that sets no certificate table leaves empty. The verification names a malformed report (parsed
    // once, in `decoded`); here a report that does not parse simply asks for nothing.
    let snp_report = decoded.snp_report.as_ref().and_then(|r| r.as_ref().ok());
    let mut snp_certs = None;
    let mut crl = crl;
    if let Some(report) = snp_report {
        if let Some(c) = super::fetch::snp_collateral(
            &args.collateral_args,
            args.collateral.as_deref(),
            report,
            crl.is_none(),
            args.allow_simulated,
            at.unix_timestamp(),
        )
        .map_err(refused)?
        {
            crl = crl.or(c.crl);
            collateral_source = c.note;
            if !ev.certs.is_empty() {
                if let Some(o) = collateral_source.as_object_mut() {
                    o.insert("evidence_certs".into(), "set aside".into());
                }
            }
            snp_certs = Some(c.certs);
        }
    }
    if ev.tee.is_snp() && snp_certs.is_none() {
        // The evidence's own certificates (the host's) would be used: with auditor keys, refused.
        args.collateral_args
            .refuse_unsigned("the VCEK/VLEK chain the SEV-SNP evidence carries (the host's)")
            .map_err(refused)?;
    }
    let measurement_set = match &args.measurements {
        Some(set) => match load_set(set, args, at.unix_timestamp()) {
            Ok(t) => Some(std::sync::Arc::new(t)),
            Err((Exit::Rejected, e)) => {
                return Err(OptionsError::Rejected(
                    verifier_lib::checks::MEASUREMENT_SET,
                    e,
                ))
            }
            Err((_, e)) => return Err(Unusable("measurement-set", e)),
        },
        None => None,
    };
    let pins = run_pins(&args.pins).map_err(|e| Unusable("input", e))?;
    if let Some(dup) = duplicate_rtmr(&args.tdx.rtmr) {
        return Err(Unusable(
            "input",
            format!("--rtmr {dup}= given twice with different values"),
        ));
    }
    // `--measurement`, `--allow-debug` and `--report-data` (flags or `--policy FILE`) apply to evidence of either
    // TEE: the shared part; the rest of the SEV-SNP flags make the SEV-SNP policy, the TDX flags the TDX one.
    let mut snp_policy = policy.to_policy();
    let shared = verifier_lib::SharedPolicy::take_from(&mut snp_policy);
    let opts = EvidenceOptions {
        chain: ChainOptions {
            at,
            crl,
            allow_simulated: args.allow_simulated,
        },
        shared,
        policy: snp_policy,
        nonce: args.nonce.as_ref().map(|n| match args.pool_attempt {
            Some(attempt) => attestation::pool_nonce::attempt_nonce(&n.0, attempt),
            None => n.0.clone(),
        }),
        any_measurement: args.any_measurement,
        measurement_set,
        tdx_collateral,
        snp_certs,
        no_nonce: args.no_nonce,
        tdx_policy: args.tdx.to_policy(),
        leave_rtmrs_unpinned: args.tdx.leave_rtmrs_unpinned,
        pins,
    };
    Ok((bytes, opts, baseline, collateral_source, decoded))
}

/// With auditor keys named, the collateral inputs that cannot carry an auditor's signature are refused before
/// anything else is read (`collateral-unsigned`): `--crl FILE` (it would replace the bundle's signed CRL) and a
/// `--tcb-baseline` file. The usage errors of the auditor flags come first (exit 2).
fn refuse_unsigned_inputs(
    args: &Args,
    ev: &attestation::evidence::Evidence,
) -> Result<(), super::exit::Refusal> {
    let c = &args.collateral_args;
    c.check_usage()?;
    if let (Some(p), true) = (&args.crl, ev.tee.is_snp()) {
        c.refuse_unsigned(&format!("the CRL file --crl {}", p.display()))?;
    }
    if ev.tee.is_snp() {
        c.refuse_unsigned_baseline()?;
    }
    Ok(())
}

/// The context of the claims rows: the pool attempt, the collateral's source, the policy file and the baseline.
pub fn claim_context(args: &Args, collateral_source: &serde_json::Value) -> output::ClaimContext {
    output::ClaimContext {
        pool_attempt: args.pool_attempt,
        pool_ledger: None,
        collateral_source: collateral_source.clone(),
        policy_file: args.policy_file.as_ref().map(|p| p.display().to_string()),
        tcb_baseline: args
            .collateral_args
            .tcb_baseline
            .as_ref()
            .map(|p| p.display().to_string()),
    }
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let (bytes, mut opts, baseline, collateral_source, decoded) = match options_and_source(&args) {
        Ok(x) => x,
        Err(OptionsError::Unusable(check, e)) => return unusable(args.json, check, e),
        Err(OptionsError::Rejected(check, e)) => return rejected(args.json, check, e),
    };
    // The founder's keys of the standard forms, read before anything is verified.
    let forms = match args.standard.load() {
        Ok(f) => f,
        Err(e) => return unusable(args.json, "founder-key", e.to_string()),
    };
    // A pool run's ledger: the evidence is checked against the nonce the pool issued to its key.
    let pool_ledger = match (&args.pool_ledger, &args.pool_key, &args.nonce) {
        (Some(l), Some(k), Some(n)) => {
            let read = std::fs::read(l).map_err(|e| format!("--pool-ledger {}: {e}", l.display()));
            let key = attestation::pool_ledger::load_public_key(k)
                .map_err(|e| format!("--pool-key: {e}"));
            match (read, key) {
                (Ok(l), Ok(k)) => {
                    let c =
                        verifier_lib::check_pool_ledger(&l, &k, &n.0, &bytes, args.max_executions);
                    opts.nonce = c.nonce.clone().or(opts.nonce);
                    Some(c)
                }
                (Err(e), _) | (_, Err(e)) => return unusable(args.json, "input", e),
            }
        }
        _ => None,
    };
    // The evidence decoded and its report parsed once, in options_and_source.
    let mut v = verify_decoded(&decoded, &opts);
    let mut baseline_json = None;
    if let (Some(b), verifier_lib::ReportVerification::Snp(sv)) = (&baseline, &mut v.report) {
        let before = sv.failures.len();
        baseline_json = Some(super::snp_report::apply_baseline(b, sv.as_mut()));
        let added: Vec<_> = sv.failures[before..].to_vec();
        v.failures.extend(added);
    }
    if !v.simulated {
        for f in &mut v.failures {
            super::explain_hint::add_explain_command(f, &args.evidence);
        }
    }
    let mut ctx = claim_context(&args, &collateral_source);
    if let Some(c) = pool_ledger {
        v.failures.extend(c.failures.iter().cloned());
        ctx.pool_ledger = Some(c);
    }
    let written = if forms.any() {
        let claims = output::evidence_claims(&v, &opts, &ctx);
        let facts = super::run_facts::RunFacts {
            claims: &claims,
            evidence: &v,
            evidence_sha256: Sha256::digest(&bytes).into(),
            // The fence transcript's final chain hash, when the evidence carries one.
            transcript_sha384: v.transcript.sha384,
            allow_debug: opts.shared.allow_debug,
        };
        match forms.write(&facts, time::OffsetDateTime::now_utc().unix_timestamp()) {
            Ok(w) => w,
            Err((check, e)) => return unusable(args.json, check, e),
        }
    } else {
        super::standard::Written::default()
    };
    if args.json {
        let mut j = output::evidence_json_with(&v, &opts, &ctx);
        if let Some(o) = j.as_object_mut() {
            for (k, w) in written.json {
                o.insert(k.into(), w);
            }
            if let Some(b) = baseline_json {
                o.insert("tcb_baseline".into(), b);
            }
            if !collateral_source.is_null() {
                o.insert("collateral_source".into(), collateral_source);
            }
        }
        println!("{}", attestation::text::json_safe(&j.to_string()));
    } else {
        print!("{}", output::evidence_table_with(&v, &opts, &ctx));
        let sim = if v.simulated { "SIMULATED " } else { "" };
        for l in &written.lines {
            println!("{sim}{}", attestation::text::escape(l));
        }
    }
    if v.verified() {
        Exit::Success.into()
    } else {
        Exit::Rejected.into()
    }
}

/// The flags given that cannot apply to this evidence: SEV-SNP policy flags, `--crl` and `--tcb-baseline` on
/// TDX evidence, TDX flags on SEV-SNP evidence (`--auditors-required` without `--measurements` is a usage
/// error of the parser).
fn inapplicable_flags(args: &Args, snp: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    if snp {
        if !args.tdx.mrtd.is_empty() {
            out.push("--mrtd");
        }
        if !args.tdx.rtmr.is_empty() {
            out.push("--rtmr");
        }
        if args.tdx.leave_rtmrs_unpinned {
            out.push("--leave-rtmrs-unpinned");
        }
        out.extend(args.tdx.accept.flags_given());
    } else {
        out.extend(args.policy.snp_only_flags_given());
        if args.crl.is_some() {
            out.push("--crl");
        }
        if args.collateral_args.tcb_baseline.is_some() {
            out.push("--tcb-baseline");
        }
    }
    out
}

/// The pins of the flags; `--patch`/`--job` files are hashed here (an unreadable one is unusable input).
fn run_pins(a: &PinArgs) -> Result<RunPins, String> {
    let hash = |flag: &str, p: &PathBuf| -> Result<[u8; 32], String> {
        std::fs::read(p)
            .map(|b| Sha256::digest(b).into())
            .map_err(|e| format!("cannot read {flag} {}: {e}", p.display()))
    };
    let patch_sha256 = match (&a.patch, a.patch_sha256) {
        (Some(p), _) => Some(hash("--patch", p)?),
        (None, h) => h.map(|h| h.0),
    };
    let job_sha256 = match (&a.job, a.job_sha256) {
        (Some(p), _) => Some(hash("--job", p)?),
        (None, h) => h.map(|h| h.0),
    };
    Ok(RunPins {
        expect_outcome: a.expect_outcome.clone(),
        commit: a.commit.clone(),
        tree: a.tree.clone(),
        protect_tree: a.protect_tree.clone(),
        patch_sha256,
        job_sha256,
        isolation: a.isolation,
        expect_tests_ran: a.expect_tests_ran,
        min_failed: a.min_failed,
        repository: a.repository.clone(),
        expect_egress_only: a.expect_egress_only.clone(),
        expect_cut: a.expect_cut,
    })
}

/// The index of an RTMR pinned twice with different values, if any.
fn duplicate_rtmr(pins: &[RtmrPin]) -> Option<usize> {
    pins.iter().enumerate().find_map(|(i, a)| {
        pins[..i]
            .iter()
            .any(|b| b.0 == a.0 && b.1 != a.1)
            .then_some(a.0)
    })
}

/// Loads the measurement set and checks its auditor signatures: `Err((Exit::Rejected, why))` when the set is readable but
/// not signed by enough trusted auditors (a rejection), `Err((Exit::Unusable, why))` when an input is unusable.
fn load_set(
    set: &std::path::Path,
    args: &Args,
    at: i64,
) -> Result<measurements::set::TrustedSet, (Exit, String)> {
    use measurements::set::{SetError, TrustedSet};
    let signatures = if args.set_signature.is_empty() {
        measurements::set::default_signature_paths(set)
            .map_err(|e| (Exit::Unusable, e.to_string()))?
    } else {
        args.set_signature.clone()
    };
    TrustedSet::load(
        set,
        &signatures,
        &args.auditor_key,
        args.auditors_required.unwrap_or(1) as usize,
    )
    .and_then(|t| t.check_current(at).map(|()| t))
    .map_err(|e| match e {
        SetError::NotEnoughAuditors { .. }
        | SetError::Expired { .. }
        | SetError::NoExpiry { .. } => (Exit::Rejected, e.to_string()),
        other => (Exit::Unusable, other.to_string()),
    })
}

/// A rejection before the evidence was looked at (the set or the collateral is not trusted): exit 1, naming
/// the check and why.
fn rejected(json: bool, check: &'static str, why: String) -> ExitCode {
    if json {
        let v = serde_json::json!({
            "verified": false,
            "failures": [{"check": check, "detail": why}],
        });
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        println!("REJECTED  {}: {}", check, attestation::text::escape(&why));
    }
    Exit::Rejected.into()
}
