//! The command line of `verify-attestation`: the whole command tree ([`Cli`]), and [`parse`], which builds only
//! the subcommand that `argv[1]` names. Building clap's tree of all six subcommands (about 150 arguments) took
//! a large part of a whole `tdx-quote` run (docs/benchmarks.md, issue 19); the parse, its answers and its
//! errors are clap's either way, and a test compares the two for every subcommand.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

use super::{evidence, fetch, show, snp_report, tdx_quote};

// The one-line descriptions, without a final period, as clap's derive shows a one-sentence doc comment.

/// `snp-report`, in one line.
pub const SNP_REPORT_ABOUT: &str =
    "Verify a raw SEV-SNP ATTESTATION_REPORT against its VCEK/VLEK chain and a policy";
/// `evidence`, in one line.
pub const EVIDENCE_ABOUT: &str =
    "Verify a fenced-run evidence bundle: report, key binding, verdict signature, nonce, measurement";
/// `tdx-quote`, in one line.
pub const TDX_QUOTE_ABOUT: &str =
    "Verify an Intel TDX DCAP quote against its PCK chain, collateral and a policy";
/// `fetch`, in one line.
pub const FETCH_ABOUT: &str =
    "Fetch (or convert) the collateral a report, quote or evidence needs: KDS/PCS, verified, cached, bundled";
/// `bundle-sign`, in one line.
pub const BUNDLE_SIGN_ABOUT: &str = "Add an auditor's Ed25519 signature to a collateral bundle";
/// `show`, in one line.
pub const SHOW_ABOUT: &str =
    "Decode a report, quote or evidence WITHOUT verifying it: every field, TCBs decoded, the verdict";

/// Verify fenced-run evidence, SEV-SNP attestation reports and TDX quotes.
#[derive(Parser, Debug)]
#[command(name = "verify-attestation", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Verify a raw SEV-SNP report.
    #[command(about = SNP_REPORT_ABOUT)]
    SnpReport(snp_report::Args),
    /// Verify a fenced-run evidence bundle.
    #[command(about = EVIDENCE_ABOUT)]
    Evidence(evidence::Args),
    /// Verify a TDX quote.
    #[command(about = TDX_QUOTE_ABOUT)]
    TdxQuote(tdx_quote::Args),
    /// Fetch or convert collateral.
    #[command(about = FETCH_ABOUT)]
    Fetch(fetch::Args),
    /// Sign a collateral bundle.
    #[command(about = BUNDLE_SIGN_ABOUT)]
    BundleSign(fetch::SignArgs),
    /// Decode without verifying.
    #[command(about = SHOW_ABOUT)]
    Show(show::Args),
}

/// A subcommand's arguments added to a command (what clap's derive generates for each variant).
type Augment = fn(clap::Command) -> clap::Command;

/// Each subcommand's name, one-line description and arguments (what clap's derive adds for each variant).
const SUBCOMMANDS: [(&str, &str, Augment); 6] = [
    (
        "snp-report",
        SNP_REPORT_ABOUT,
        <snp_report::Args as clap::Args>::augment_args,
    ),
    (
        "evidence",
        EVIDENCE_ABOUT,
        <evidence::Args as clap::Args>::augment_args,
    ),
    (
        "tdx-quote",
        TDX_QUOTE_ABOUT,
        <tdx_quote::Args as clap::Args>::augment_args,
    ),
    (
        "fetch",
        FETCH_ABOUT,
        <fetch::Args as clap::Args>::augment_args,
    ),
    (
        "bundle-sign",
        BUNDLE_SIGN_ABOUT,
        <fetch::SignArgs as clap::Args>::augment_args,
    ),
    ("show", SHOW_ABOUT, <show::Args as clap::Args>::augment_args),
];

/// The command tree with only the subcommand `name` in it (`None` if there is no such subcommand): the same
/// root (name, version, about) as [`Cli`], and that subcommand built as the derive builds it.
fn lean_command(name: &str) -> Option<clap::Command> {
    let (name, about, augment) = SUBCOMMANDS.into_iter().find(|(n, _, _)| *n == name)?;
    let sub = augment(clap::Command::new(name)).about(about);
    Some(Cli::root_command().subcommand(sub))
}

impl Cli {
    /// The root of [`Cli::command`] without its subcommands.
    fn root_command() -> clap::Command {
        clap::Command::new("verify-attestation")
            .version(env!("CARGO_PKG_VERSION"))
            .about(env!("CARGO_PKG_DESCRIPTION"))
            .long_about(None)
            .subcommand_required(true)
            .arg_required_else_help(true)
    }
}

/// Parses `argv` (program name first) as [`Cli::try_parse_from`] does. When `argv[1]` is exactly a
/// subcommand's name, only that subcommand is built; anything else (no argument, `--help`, `--version`,
/// `help`, a misspelt name) goes through the whole tree, so the top level's help and errors are clap's own.
pub fn parse(argv: Vec<OsString>) -> Result<Cli, clap::Error> {
    let name = argv.get(1).and_then(|a| a.to_str());
    let plain = match name {
        Some("tdx-quote") => tdx_quote_plain(&argv[2..]).map(Command::TdxQuote),
        Some("snp-report") => snp_report_plain(&argv[2..]).map(Command::SnpReport),
        _ => None,
    };
    if let Some(command) = plain {
        return Ok(Cli { command });
    }
    match name.and_then(lean_command) {
        Some(mut cmd) => {
            let m = cmd.try_get_matches_from_mut(argv)?;
            Command::from_arg_matches(&m)
                .map(|command| Cli { command })
                .map_err(|e| e.format(&mut cmd))
        }
        None => Cli::try_parse_from(argv),
    }
}

/// A plain command line after the subcommand's name: one path, and flags from a short list, each at most once
/// (a valued flag takes the next argument). `None` for anything else (another flag, `--flag=value`, `--`, a
/// path or value that is empty, starts with `-` or is not UTF-8, a repeated flag, a second path).
struct Plain<'a> {
    path: &'a str,
    /// The values of the valued flags given, in the order of the list.
    values: Vec<Option<&'a str>>,
    /// The switches given, in the order of the list.
    switches: Vec<bool>,
}

impl<'a> Plain<'a> {
    fn read(args: &'a [OsString], valued: &[&str], switches: &[&str]) -> Option<Plain<'a>> {
        let word = |a: &'a OsString| a.to_str().filter(|w| !w.is_empty() && !w.starts_with('-'));
        let mut path = None;
        let mut values = vec![None; valued.len()];
        let mut given = vec![false; switches.len()];
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let a = a.to_str()?;
            if let Some(i) = valued.iter().position(|f| *f == a) {
                if values[i].is_some() {
                    return None;
                }
                values[i] = Some(word(it.next()?)?);
            } else if let Some(i) = switches.iter().position(|f| *f == a) {
                if given[i] {
                    return None;
                }
                given[i] = true;
            } else if path.is_none() && !a.is_empty() && !a.starts_with('-') {
                path = Some(a);
            } else {
                return None;
            }
        }
        Some(Plain {
            path: path?,
            values,
            switches: given,
        })
    }
}

/// `--at`'s value parsed as clap parses it; `None` (left to clap) when it does not parse.
fn plain_time(v: Option<&str>) -> Option<Option<time::OffsetDateTime>> {
    match v {
        None => Some(None),
        Some(v) => snp_report::parse_time(v).ok().map(Some),
    }
}

/// The collateral flags at their defaults.
fn default_collateral_args() -> fetch::CollateralArgs {
    fetch::CollateralArgs {
        online: false,
        collateral_auditor_key: Vec::new(),
        collateral_auditors_required: None,
        tcb_baseline: None,
        source: fetch::SourceArgs::default(),
    }
}

/// The plain `tdx-quote` command lines, read without clap: the quote path and any of `--collateral FILE`,
/// `--at TIME`, `--event-log FILE`, `--json`, `--allow-simulated` (each once); every other flag at its default.
/// `None` for anything else, or an `--at` that does not parse, and [`parse`] then asks clap, which parses it or
/// names what is wrong. A test checks that this gives what clap gives for every line it accepts.
fn tdx_quote_plain(args: &[OsString]) -> Option<tdx_quote::Args> {
    let p = Plain::read(
        args,
        &["--collateral", "--at", "--event-log"],
        &["--json", "--allow-simulated"],
    )?;
    Some(tdx_quote::Args {
        quote: PathBuf::from(p.path),
        collateral: p.values[0].map(PathBuf::from),
        collateral_args: default_collateral_args(),
        at: plain_time(p.values[1])?,
        event_log: p.values[2].map(PathBuf::from),
        allow_simulated: p.switches[1],
        json: p.switches[0],
        policy: Box::default(),
    })
}

/// The plain `snp-report` command lines, read without clap: the report path and any of `--certs DIR`,
/// `--at TIME`, `--crl FILE`, `--json`, `--allow-simulated` (each once); as [`tdx_quote_plain`] otherwise.
fn snp_report_plain(args: &[OsString]) -> Option<snp_report::Args> {
    let p = Plain::read(
        args,
        &["--certs", "--at", "--crl"],
        &["--json", "--allow-simulated"],
    )?;
    Some(snp_report::Args {
        report: PathBuf::from(p.path),
        certs: p.values[0].map(PathBuf::from),
        collateral: None,
        collateral_args: default_collateral_args(),
        at: plain_time(p.values[1])?,
        crl: p.values[2].map(PathBuf::from),
        allow_simulated: p.switches[1],
        policy_file: None,
        json: p.switches[0],
        policy: snp_report::PolicyArgs::default(),
    })
}

/// Parses the process's own arguments ([`parse`] of `std::env::args_os`).
pub fn parse_env() -> Result<Cli, clap::Error> {
    parse(std::env::args_os().collect())
}

/// The whole command tree (for tests and tools that list every subcommand).
pub fn full_command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 6] = [
        "snp-report",
        "evidence",
        "tdx-quote",
        "fetch",
        "bundle-sign",
        "show",
    ];

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("verify-attestation")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// What a parse gave, comparable: the parsed value's Debug, or the error's kind, exit code and text.
    fn outcome(r: Result<Cli, clap::Error>) -> String {
        match r {
            Ok(cli) => format!("ok {cli:?}"),
            Err(e) => format!("err {:?} {} {}", e.kind(), e.exit_code(), e.render().ansi()),
        }
    }

    #[test]
    fn every_subcommand_is_known_to_the_lean_parse_and_the_tree_has_no_other() {
        let full: Vec<String> = full_command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        assert_eq!(
            full, NAMES,
            "a new subcommand needs its line in `SUBCOMMANDS`"
        );
        let listed: Vec<&str> = SUBCOMMANDS.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(listed, NAMES);
    }

    #[test]
    fn the_descriptions_read_as_the_derive_showed_the_doc_comments_before() {
        // A one-sentence doc comment loses its final period in clap's derive; the lines `--help` printed
        // before the descriptions became constants.
        for (name, about, _) in SUBCOMMANDS {
            assert!(!about.ends_with('.'), "{name}: {about}");
        }
        let help = full_command().render_help().to_string();
        assert!(
            help.contains(
                "Verify an Intel TDX DCAP quote against its PCK chain, collateral and a policy\n"
            ),
            "{help}"
        );
    }

    #[test]
    fn the_lean_root_is_the_whole_tree_s_root() {
        let full = full_command();
        let lean = Cli::root_command();
        assert_eq!(lean.get_name(), full.get_name());
        assert_eq!(lean.get_version(), full.get_version());
        assert_eq!(
            lean.get_about().map(|s| s.to_string()),
            full.get_about().map(|s| s.to_string())
        );
        assert_eq!(
            lean.get_long_about().map(|s| s.to_string()),
            full.get_long_about().map(|s| s.to_string())
        );
        assert_eq!(
            lean.is_subcommand_required_set(),
            full.is_subcommand_required_set()
        );
        assert_eq!(
            lean.is_arg_required_else_help_set(),
            full.is_arg_required_else_help_set()
        );
    }

    #[test]
    fn each_lean_subcommand_is_built_as_in_the_whole_tree() {
        let mut full = full_command();
        full.build();
        for n in NAMES {
            let mut lean = lean_command(n).expect("known");
            lean.build();
            let want = full.find_subcommand_mut(n).expect("in the tree");
            let got = lean.find_subcommand_mut(n).expect("in the lean tree");
            assert_eq!(
                got.render_long_help().ansi().to_string(),
                want.render_long_help().ansi().to_string(),
                "{n} --help"
            );
            assert_eq!(
                got.render_usage().ansi().to_string(),
                want.render_usage().ansi().to_string(),
                "{n} usage"
            );
            assert_eq!(
                got.get_about().map(|s| s.to_string()),
                want.get_about().map(|s| s.to_string()),
                "{n} about"
            );
        }
    }

    #[test]
    fn the_lean_parse_answers_as_the_whole_tree_does() {
        let q = "quote.bin";
        let cases: Vec<Vec<&str>> = vec![
            vec![],
            vec!["--help"],
            vec!["--version"],
            vec!["-V"],
            vec!["help", "tdx-quote"],
            vec!["tdx-quot"],
            vec!["tdx-quote"],
            vec!["tdx-quote", "--help"],
            vec!["tdx-quote", "-h"],
            vec!["tdx-quote", q],
            vec![
                "tdx-quote",
                q,
                "--collateral",
                "c.json",
                "--at",
                "1752919234",
                "--json",
            ],
            vec![
                "tdx-quote",
                q,
                "--collateral=c.json",
                "--at=2025-07-19T10:00:34Z",
            ],
            vec!["tdx-quote", q, "--at", "yesterday"],
            vec!["tdx-quote", q, "--at", "1", "--at", "2"],
            vec!["tdx-quote", q, "--colateral", "c.json"],
            vec!["tdx-quote", q, "--mrtd", "00"],
            vec![
                "tdx-quote",
                q,
                "--accept-tcb-status",
                "OutOfDate",
                "--deny-advisory",
                "INTEL-SA-00837",
            ],
            vec!["tdx-quote", q, "--accept-tcb-status", "Sideways"],
            vec!["tdx-quote", q, "--version"],
            vec!["tdx-quote", q, "extra"],
            vec!["tdx-quote", "--", "--json"],
            vec!["snp-report"],
            vec![
                "snp-report",
                "r.bin",
                "--certs",
                "dir",
                "--at",
                "2026-01-01T00:00:00Z",
            ],
            vec!["snp-report", "r.bin", "--certs", "dir", "--json", "--bogus"],
            vec!["snp-report", "--help"],
            vec!["evidence", "e.evidence"],
            vec![
                "evidence",
                "e.evidence",
                "--any-measurement",
                "--no-nonce",
                "--json",
            ],
            vec!["evidence", "--help"],
            vec!["fetch"],
            vec!["fetch", "--help"],
            vec!["bundle-sign"],
            vec!["bundle-sign", "--help"],
            vec!["show", "r.bin"],
            vec!["show", "r.bin", "--json"],
            vec!["show"],
        ];
        for case in cases {
            let lean = outcome(parse(argv(&case)));
            let full = outcome(Cli::try_parse_from(argv(&case)));
            assert_eq!(lean, full, "argv {case:?}");
        }
    }

    /// `argv` after `tdx-quote` through the plain reader, and through clap's whole tree.
    fn plain_and_clap(rest: &[&str]) -> (Option<String>, String) {
        plain_and_clap_of("tdx-quote", rest)
    }

    /// `argv` after the subcommand `sub` through its plain reader, and through clap's whole tree.
    fn plain_and_clap_of(sub: &str, rest: &[&str]) -> (Option<String>, String) {
        let rest_os: Vec<OsString> = rest.iter().map(OsString::from).collect();
        let command = match sub {
            "tdx-quote" => tdx_quote_plain(&rest_os).map(Command::TdxQuote),
            _ => snp_report_plain(&rest_os).map(Command::SnpReport),
        };
        let plain = command.map(|command| format!("ok {:?}", Cli { command }));
        let mut all = vec![sub];
        all.extend_from_slice(rest);
        (plain, outcome(Cli::try_parse_from(argv(&all))))
    }

    #[test]
    fn the_plain_snp_report_reader_gives_what_clap_gives_or_leaves_the_line_to_clap() {
        let accepted: [&[&str]; 5] = [
            &["r.bin"],
            &["r.bin", "--certs", "dir", "--at", "2026-01-01T00:00:00Z"],
            &[
                "--json",
                "r.bin",
                "--certs",
                "dir",
                "--crl",
                "crl.der",
                "--allow-simulated",
            ],
            &["r.bin", "--at", "1752919234", "--json"],
            &["r.bin", "--crl", "crl.pem"],
        ];
        for rest in accepted {
            let (plain, clap) = plain_and_clap_of("snp-report", rest);
            assert_eq!(plain.as_deref(), Some(clap.as_str()), "{rest:?}");
        }
        let left_to_clap: [&[&str]; 8] = [
            &[],
            &["r.bin", "--certs", "a", "--certs", "b"],
            &["r.bin", "--collateral", "bundle.json"],
            &["r.bin", "--measurement", "00"],
            &["r.bin", "--policy", "p.toml"],
            &["r.bin", "--at", "noon"],
            &["r.bin", "--certs"],
            &["r.bin", "r2.bin"],
        ];
        for rest in left_to_clap {
            assert_eq!(plain_and_clap_of("snp-report", rest).0, None, "{rest:?}");
        }
    }

    #[test]
    fn the_plain_tdx_quote_reader_gives_what_clap_gives_or_leaves_the_line_to_clap() {
        let accepted: [&[&str]; 6] = [
            &["q.bin"],
            &["q.bin", "--json"],
            &[
                "q.bin",
                "--collateral",
                "c.json",
                "--at",
                "1752919234",
                "--json",
            ],
            &[
                "--json",
                "--at",
                "2025-07-19T10:00:34Z",
                "q.bin",
                "--collateral",
                "c.json",
            ],
            &["q.bin", "--allow-simulated", "--event-log", "ccel.bin"],
            &["q.bin", "--at", "0"],
        ];
        for rest in accepted {
            let (plain, clap) = plain_and_clap(rest);
            assert_eq!(plain.as_deref(), Some(clap.as_str()), "{rest:?}");
        }
        let left_to_clap: [&[&str]; 12] = [
            &[],
            &["--json"],
            &["q.bin", "--json", "--json"],
            &["q.bin", "other.bin"],
            &["q.bin", "--collateral"],
            &["q.bin", "--collateral", "--json"],
            &["q.bin", "--collateral=c.json"],
            &["q.bin", "--at", "yesterday"],
            &["q.bin", "--mrtd", "00"],
            &["q.bin", "--help"],
            &["--", "q.bin"],
            &["-", "--json"],
        ];
        for rest in left_to_clap {
            assert_eq!(plain_and_clap(rest).0, None, "{rest:?}");
        }
    }

    proptest::proptest! {
        /// Any line made of these words: when the plain reader accepts it, clap parses it to the same value.
        #[test]
        fn whatever_the_plain_reader_accepts_clap_parses_the_same(
            words in proptest::collection::vec(proptest::sample::select(vec![
                "q.bin", "c.json", "--json", "--allow-simulated", "--collateral", "--at", "--event-log",
                "1752919234", "2025-07-19T10:00:34Z", "-1", "x", "--", "-", "--online", "--mrtd", "",
                "--at=5", "ccel.bin", "--certs", "--crl", "dir",
            ]), 0..8)
        ) {
            for sub in ["tdx-quote", "snp-report"] {
                let (plain, clap) = plain_and_clap_of(sub, &words);
                if let Some(p) = plain {
                    proptest::prop_assert_eq!(p, clap, "{} {:?}", sub, words);
                }
            }
        }
    }
}
