//! `verify-attestation tdx-quote`: an Intel TDX DCAP quote against its PCK chain (pinned to the Intel SGX
//! Root CA), offline collateral at a given time, Intel's TCB rules and a policy; optionally the RTMRs
//! replayed from a CCEL event log. Exit 0 verified, 1 rejected, 2 unusable input.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::exit::Exit;
use super::input::parse_time;
use attestation::hex::Hex;
use attestation::tdx::Quote;
use verifier_lib::intel_tdx::{verify_parsed_quote, Policy, Root, TcbStatus, TdxVerification};
use verifier_lib::output::print_table;
use verifier_lib::Failure;

/// The TDX acceptability flags shared by `tdx-quote` and `evidence` (everything but the launch-measurement pin,
/// whose flags differ between the two, and the flags `evidence` shares with SEV-SNP).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TdxAcceptArgs {
    /// TDX: required MRCONFIGID (96 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub mr_config_id: Option<Hex<48>>,
    /// TDX: required MROWNER (96 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub mr_owner: Option<Hex<48>>,
    /// TDX: required MROWNERCONFIG (96 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub mr_owner_config: Option<Hex<48>>,
    /// TDX: required XFAM (16 hex digits, as in the quote). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub xfam: Option<Hex<8>>,
    /// TDX: required TD attributes (16 hex digits, as in the quote). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub td_attributes: Option<Hex<8>>,
    /// TDX: minimum TEE_TCB_SVN (32 hex digits), compared byte by byte. Default: none.
    #[arg(long, value_name = "HEX")]
    pub min_tee_tcb_svn: Option<Hex<16>>,
    /// TDX: accept this TCB status too (UpToDate, SWHardeningNeeded, ConfigurationNeeded,
    /// ConfigurationAndSWHardeningNeeded, OutOfDate, OutOfDateConfigurationNeeded, TDRelaunchAdvised,
    /// TDRelaunchAdvisedConfigurationNeeded, NotSupported, Revoked);
    /// repeatable. Default: UpToDate and SWHardeningNeeded only.
    #[arg(long = "accept-tcb-status", value_name = "STATUS", value_parser = parse_status)]
    pub accept_tcb_status: Vec<TcbStatus>,
    /// TDX: reject a TCB level carrying this advisory ID (e.g. INTEL-SA-00837); repeatable.
    #[arg(long = "deny-advisory", value_name = "ID")]
    pub deny_advisory: Vec<String>,
    /// TDX: accept a TD without SEPT_VE_DISABLE. Default: required.
    #[arg(long)]
    pub allow_sept_ve: bool,
    /// TDX: accept a non-zero MR_SERVICETD (TD 1.5). Default: must be zero.
    #[arg(long)]
    pub allow_service_td: bool,
    /// TDX: accept TD attribute MIGRATABLE. Default: forbidden.
    #[arg(long)]
    pub allow_migratable: bool,
    /// TDX: accept TD attribute PERFMON. Default: forbidden.
    #[arg(long)]
    pub allow_perfmon: bool,
    /// TDX freshness: reject TCB Info or QE Identity with a tcbEvaluationDataNumber below N (Intel's TCB
    /// recovery counter). Intel's status is still reported beside it. Default: any.
    #[arg(long, value_name = "N")]
    pub min_tcb_eval_num: Option<u32>,
    /// TDX freshness: reject a platform whose matched TCB level is dated before DATE (RFC 3339, or YYYY-MM-DD).
    /// Default: any.
    #[arg(long, value_name = "DATE", value_parser = parse_date)]
    pub min_tcb_date: Option<i64>,
    /// TDX freshness: accept TCB Info, QE Identity and CRLs up to SECONDS past their nextUpdate. Default: 0.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub collateral_grace: u32,
}

/// Parses `--min-tcb-date`: RFC 3339 or a calendar date (midnight UTC), to unix seconds.
pub fn parse_date(s: &str) -> Result<i64, String> {
    if let Ok(t) = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        return Ok(t.unix_timestamp());
    }
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    time::Date::parse(s, &fmt)
        .map(|d| d.midnight().assume_utc().unix_timestamp())
        .map_err(|_| format!("`{s}` is neither RFC 3339 nor YYYY-MM-DD"))
}

fn parse_status(s: &str) -> Result<TcbStatus, String> {
    match TcbStatus::from_name(s) {
        TcbStatus::Unrecognized => Err(format!("`{s}` is not a TCB status name")),
        st => Ok(st),
    }
}

impl TdxAcceptArgs {
    /// The flags given, by name (on SEV-SNP evidence each is an error, not silently ignored).
    pub fn flags_given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut given = |b: bool, name: &'static str| {
            if b {
                out.push(name);
            }
        };
        given(self.mr_config_id.is_some(), "--mr-config-id");
        given(self.mr_owner.is_some(), "--mr-owner");
        given(self.mr_owner_config.is_some(), "--mr-owner-config");
        given(self.xfam.is_some(), "--xfam");
        given(self.td_attributes.is_some(), "--td-attributes");
        given(self.min_tee_tcb_svn.is_some(), "--min-tee-tcb-svn");
        given(!self.accept_tcb_status.is_empty(), "--accept-tcb-status");
        given(!self.deny_advisory.is_empty(), "--deny-advisory");
        given(self.allow_sept_ve, "--allow-sept-ve");
        given(self.allow_service_td, "--allow-service-td");
        given(self.allow_migratable, "--allow-migratable");
        given(self.allow_perfmon, "--allow-perfmon");
        given(self.min_tcb_eval_num.is_some(), "--min-tcb-eval-num");
        given(self.min_tcb_date.is_some(), "--min-tcb-date");
        given(self.collateral_grace != 0, "--collateral-grace");
        out
    }

    /// Sets the fields of `p` these flags describe.
    pub fn apply(&self, p: &mut Policy) {
        p.accepted_tcb_statuses
            .extend(self.accept_tcb_status.iter().copied());
        p.denied_advisories = self.deny_advisory.iter().cloned().collect::<BTreeSet<_>>();
        p.require_sept_ve_disable = !self.allow_sept_ve;
        p.allow_service_td = self.allow_service_td;
        p.allow_migratable = self.allow_migratable;
        p.allow_perfmon = self.allow_perfmon;
        p.mr_config_id = self.mr_config_id.map(|h| h.0);
        p.mr_owner = self.mr_owner.map(|h| h.0);
        p.mr_owner_config = self.mr_owner_config.map(|h| h.0);
        p.xfam = self.xfam.map(|h| h.0);
        p.td_attributes = self.td_attributes.map(|h| h.0);
        p.min_tee_tcb_svn = self.min_tee_tcb_svn.map(|h| h.0);
        p.min_tcb_evaluation_data_number = self.min_tcb_eval_num;
        p.min_tcb_date = self.min_tcb_date;
        p.collateral_grace_secs = i64::from(self.collateral_grace);
    }
}

/// The TDX policy of `tdx-quote` as flags; each flag sets one field of [`Policy`], the rest keep their defaults.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TdxPolicyArgs {
    /// Accepted MRTD (96 hex digits); repeat for any of several. Default: not checked.
    #[arg(long = "mrtd", value_name = "HEX")]
    pub mrtd: Vec<Hex<48>>,
    /// Required RTMR0 (96 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub rtmr0: Option<Hex<48>>,
    /// Required RTMR1. Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub rtmr1: Option<Hex<48>>,
    /// Required RTMR2. Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub rtmr2: Option<Hex<48>>,
    /// Required RTMR3. Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub rtmr3: Option<Hex<48>>,
    /// Required REPORTDATA (128 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub report_data: Option<Hex<64>>,
    /// Accept a debug TD (the host can read its memory). Default: forbidden.
    #[arg(long)]
    pub allow_debug: bool,
    /// The acceptability flags shared with `evidence`.
    #[command(flatten)]
    pub accept: TdxAcceptArgs,
}

impl TdxPolicyArgs {
    /// The [`Policy`] these flags describe.
    pub fn to_policy(&self) -> Policy {
        let mut p = Policy::default();
        self.accept.apply(&mut p);
        p.allow_debug = self.allow_debug;
        p.mrtd = self.mrtd.iter().map(|m| m.0).collect();
        p.rtmr = [self.rtmr0, self.rtmr1, self.rtmr2, self.rtmr3].map(|r| r.map(|h| h.0));
        p.report_data = self.report_data.map(|h| h.0);
        p
    }
}

/// Arguments of `verify-attestation tdx-quote`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The raw DCAP quote (v4 or v5), as configfs-tsm or the QGS returns it.
    pub quote: PathBuf,
    /// Collateral JSON (dcap-qvl QuoteCollateralV3 layout: TCB Info, QE Identity, CRLs, issuer chains).
    /// Without it the TCB status and revocation cannot be judged and the quote is rejected. A collateral
    /// bundle (`verify-attestation fetch --bundle`) is accepted too.
    #[arg(long, value_name = "FILE")]
    pub collateral: Option<PathBuf>,
    /// Fetching, cache, bundle auditors.
    #[command(flatten)]
    pub collateral_args: super::fetch::CollateralArgs,
    /// Judge certificates and collateral at this time (RFC 3339 or Unix seconds). Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<time::OffsetDateTime>,
    /// A CCEL event log: RTMR0-3 are replayed from it and must equal the quote's.
    #[arg(long, value_name = "FILE")]
    pub event_log: Option<PathBuf>,
    /// Accept a PCK chain whose root is not the Intel SGX Root CA (sim quotes); output then says SIMULATED.
    #[arg(long)]
    pub allow_simulated: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Policy flags.
    #[command(flatten)]
    pub policy: Box<TdxPolicyArgs>,
}

fn unusable(json: bool, check: &str, detail: String) -> ExitCode {
    if json {
        let mut v = attestation::cli_io::error_json("verified", check, &detail);
        v["tee"] = "tdx".into();
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        eprintln!(
            "verify-attestation tdx-quote: {}",
            attestation::text::escape(&detail)
        );
    }
    Exit::Unusable.into()
}

/// The `tee` label the chain implies: `tdx` for the Intel root, `sim-tdx` otherwise.
pub fn tee_label(v: &TdxVerification) -> &'static str {
    if v.simulated {
        "sim-tdx"
    } else {
        "tdx"
    }
}

fn iso(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| t.to_string())
}

/// The JSON object of `tdx-quote --json`: the keys the issue fixes, then details.
pub fn json(v: &TdxVerification) -> serde_json::Value {
    let td = v.quote.td();
    let failures: Vec<serde_json::Value> = v
        .failures
        .iter()
        .map(|f| serde_json::json!({ "check": f.check, "detail": f.detail, "seen": f.seen, "wanted": f.wanted }))
        .collect();
    serde_json::json!({
        "verified": v.verified(),
        "tee": tee_label(v),
        "mrtd": hex::encode(td.mrtd),
        "rtmr0": hex::encode(td.rtmr[0]),
        "rtmr1": hex::encode(td.rtmr[1]),
        "rtmr2": hex::encode(td.rtmr[2]),
        "rtmr3": hex::encode(td.rtmr[3]),
        "mr_config_id": hex::encode(td.mr_config_id),
        "report_data": hex::encode(td.report_data),
        "td_attributes": hex::encode(td.td_attributes),
        "xfam": hex::encode(td.xfam),
        "tcb_status": v.tcb_status().map(|s| s.name()),
        "advisory_ids": v.tcb.as_ref().map(|t| t.advisory_ids.clone()).unwrap_or_default(),
        "failures": failures,
        "simulated": v.simulated,
        "quote_version": v.quote.header.version,
        "tee_tcb_svn": hex::encode(td.tee_tcb_svn),
        "mr_owner": hex::encode(td.mr_owner),
        "mr_servicetd": v.quote.body.td15().map(|b| hex::encode(b.mr_servicetd)),
        "trailing_bytes": v.quote.trailing.len(),
        "fmspc": v.pck.as_ref().map(|p| hex::encode(&p.fmspc)),
        "authenticity": v.authenticity,
        "collateral": v.collateral,
        "collateral_used": v.collateral_used,
        "tcb": v.tcb,
        "checked_at": iso(v.at),
    })
}

/// The human table; every line says SIMULATED when the root is not Intel's.
pub fn table(v: &TdxVerification) -> String {
    table_with(v, &[])
}

/// The human table with one `claim` row per claim before the failures; every line says SIMULATED when the root
/// is not Intel's.
pub fn table_with(v: &TdxVerification, claims: &[verifier_lib::output::Claim]) -> String {
    let td = v.quote.td();
    let attrs = td.attributes();
    let mut rows: Vec<(String, String)> = vec![
        (
            "result".into(),
            if v.verified() { "VERIFIED" } else { "REJECTED" }.into(),
        ),
        ("tee".into(), tee_label(v).into()),
        (
            "root".into(),
            match v.authenticity.root {
                Some(Root::Intel) => "Intel SGX Root CA (pinned)".into(),
                Some(_) => "not Intel's root (simulated)".into(),
                None => "unreadable".into(),
            },
        ),
        ("quote version".into(), v.quote.header.version.to_string()),
        ("mrtd".into(), hex::encode(td.mrtd)),
    ];
    for (i, r) in td.rtmr.iter().enumerate() {
        rows.push((format!("rtmr{i}"), hex::encode(r)));
    }
    rows.extend([
        ("mr config id".into(), hex::encode(td.mr_config_id)),
        ("report data".into(), hex::encode(td.report_data)),
        (
            "td attributes".into(),
            format!(
                "{} (debug={} sept_ve_disable={})",
                hex::encode(td.td_attributes),
                attrs.debug(),
                attrs.sept_ve_disable()
            ),
        ),
        ("xfam".into(), hex::encode(td.xfam)),
        ("tee tcb svn".into(), hex::encode(td.tee_tcb_svn)),
        (
            "tcb status".into(),
            v.tcb_status()
                .map(|s| s.name().to_string())
                .unwrap_or_else(|| "not evaluated".into()),
        ),
        (
            "advisory ids".into(),
            v.tcb
                .as_ref()
                .map(|t| t.advisory_ids.join(", "))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "none".into()),
        ),
        ("checked at".into(), iso(v.at)),
    ]);
    match &v.collateral_used {
        Some(c) => rows.extend(c.rows()),
        None => rows.push(("collateral".into(), "none".into())),
    }
    if !v.quote.trailing.is_empty() {
        rows.push((
            "trailing bytes".into(),
            format!(
                "{} after the signature data ({}; not signed, ignored)",
                v.quote.trailing.len(),
                if v.quote.trailing_nonzero() {
                    "not all zero"
                } else {
                    "zero padding"
                }
            ),
        ));
    }
    rows.extend(verifier_lib::output::claim_rows(claims));
    if v.failures.is_empty() {
        rows.push(("failures".into(), "none".into()));
    }
    for f in &v.failures {
        rows.push((format!("FAIL {}", f.check), f.detail.clone()));
    }
    print_table(&rows, if v.simulated { "SIMULATED " } else { "" })
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let bytes = match super::input::read_main_input(
        args.json,
        "quote",
        &args.quote,
        super::kind::Kind::TdxQuote,
    ) {
        Ok(b) => b,
        Err(exit) => return exit,
    };
    let quote = match Quote::parse(&bytes) {
        Ok(q) => q,
        Err(e) => {
            return unusable(
                args.json,
                "quote-format",
                format!("{}: {e}", args.quote.display()),
            )
        }
    };
    if args.collateral_args.tcb_baseline.is_some() {
        return unusable(
            args.json,
            "flag-not-applicable",
            "--tcb-baseline does not apply to a TDX quote (it holds SEV-SNP TCB floors); remove it"
                .into(),
        );
    }
    let at = super::input::at_or_now(args.at).unix_timestamp();
    let (collateral_bytes, collateral_note) = match super::fetch::tdx_collateral(
        &args.collateral_args,
        args.collateral.as_deref(),
        &bytes,
        at,
    ) {
        Ok(Some((b, n))) => (Some(b), n),
        Ok(None) => {
            if let Err((_, check, why)) = args
                .collateral_args
                .refuse_unsigned("no collateral (none was given)")
            {
                return super::exit::rejected(args.json, check, why);
            }
            (None, serde_json::Value::Null)
        }
        Err((Exit::Rejected, check, why)) => return super::exit::rejected(args.json, check, why),
        Err((_, check, why)) => return unusable(args.json, check, why),
    };
    let policy = args.policy.to_policy();
    let mut v = match verify_parsed_quote(
        &bytes,
        quote,
        collateral_bytes.as_deref(),
        at,
        &policy,
        args.allow_simulated,
    ) {
        Ok(v) => v,
        Err(e) => {
            let p = args.collateral.as_deref().unwrap_or(Path::new("(fetched)"));
            return unusable(
                args.json,
                "collateral-format",
                format!("{}: {e}", p.display()),
            );
        }
    };
    let replay =
        match super::input::read_flag_file(args.json, "--event-log", args.event_log.as_deref()) {
            Ok(None) => None,
            Ok(Some(b)) => match measurements::tdx::replay_rtmrs(&b) {
                Ok(r) => Some(r),
                Err(e) => {
                    let p = args.event_log.as_deref().unwrap_or(Path::new("-"));
                    return unusable(
                        args.json,
                        "event-log-format",
                        format!("{}: {e}", p.display()),
                    );
                }
            },
            Err(exit) => return exit,
        };
    if let Some(r) = replay {
        let quoted = v.quote.td().rtmr;
        for i in r.mismatches(&quoted) {
            v.failures.push(Failure::seen_wanted(
                format!("event-log-rtmr{i}"),
                format!("quote {}", hex::encode(quoted[i])),
                format!("replayed {}", hex::encode(r.rtmrs[i])),
            ));
        }
    }
    let ctx = verifier_lib::output::ClaimContext {
        collateral_source: collateral_note.clone(),
        ..Default::default()
    };
    let claims = verifier_lib::output::tdx_claims(&v, &policy, &ctx);
    if args.json {
        let mut j = json(&v);
        if let Some(o) = j.as_object_mut() {
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
        print!("{}", table_with(&v, &claims));
    }
    if v.verified() {
        Exit::Success.into()
    } else {
        Exit::Rejected.into()
    }
}
