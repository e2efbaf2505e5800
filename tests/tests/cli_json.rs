//! The `--json` contract (docs/cli.md): with `--json`, every exit path of every binary prints exactly one JSON
//! object on stdout, usage errors of the argument parser included, with the documented exit code and
//! `{"<key>": false, "error": {"check", "detail"}}` for a failure. Table-driven over bad invocations.

use fenced_run_tests::cli::{run, s, Corpus, NONCE};

const FENCED_RUN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const MEASURE: &str = env!("CARGO_BIN_EXE_measure-guest-e2e");

/// One bad invocation: the binary, its arguments, the exit code, the result key and the error's check.
struct Case<'a> {
    bin: &'a str,
    args: Vec<String>,
    code: i32,
    key: &'a str,
    check: &'a str,
}

fn case<'a>(bin: &'a str, args: &[&str], code: i32, key: &'a str, check: &'a str) -> Case<'a> {
    Case {
        bin,
        args: args.iter().map(|a| a.to_string()).collect(),
        code,
        key,
        check,
    }
}

#[test]
fn every_bad_invocation_prints_one_json_object_with_its_exit_code() {
    let c = Corpus::new();
    let tmp = c.tmp();
    let (ev, tdx_ev, rep, quote, certs) = (
        s(&c.snp_evidence),
        s(&c.tdx_evidence),
        s(&c.snp_report),
        s(&c.tdx_quote),
        s(&c.snp_certs),
    );
    let (garbage, missing, json, pem) = (
        s(&c.garbage),
        s(&c.missing),
        s(&c.verdict_json),
        s(&c.pem_cert),
    );
    let out_in_missing_dir = c.path().join("no-dir/run.evidence");
    let job = c.path().join("job.toml");
    std::fs::write(&job, "[repository]\npath = \"repo\"\n").expect("job");
    let v = "verified";
    let cases = vec![
        // verify-attestation: usage errors.
        case(VERIFY, &["--json"], 2, v, "usage"),
        case(VERIFY, &["--frobnicate", "--json"], 2, v, "usage"),
        case(VERIFY, &["evidence", ev, "--json"], 2, v, "usage"),
        case(
            VERIFY,
            &["evidence", ev, "--any-measurement", "--json"],
            2,
            v,
            "usage",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                ev,
                "--any-measurement",
                "--no-nonce",
                "--nonce",
                NONCE,
                "--json",
            ],
            2,
            v,
            "usage",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                ev,
                "--any-measurement",
                "--nonce",
                "abc",
                "--json",
            ],
            2,
            v,
            "usage",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                ev,
                "--any-measurement",
                "--no-nonce",
                "--auditors-required",
                "2",
                "--json",
            ],
            2,
            v,
            "usage",
        ),
        case(VERIFY, &["snp-report", rep, "--json"], 2, v, "usage"),
        case(
            VERIFY,
            &[
                "snp-report",
                rep,
                "--certs",
                certs,
                "--min-tcb",
                "x",
                "--json",
            ],
            2,
            v,
            "usage",
        ),
        case(VERIFY, &["tdx-quote", "--json"], 2, v, "usage"),
        case(VERIFY, &["show", "--json"], 2, v, "usage"),
        // verify-attestation: unusable input.
        case(
            VERIFY,
            &[
                "evidence",
                missing,
                "--any-measurement",
                "--no-nonce",
                "--json",
            ],
            2,
            v,
            "input",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                garbage,
                "--any-measurement",
                "--no-nonce",
                "--json",
            ],
            2,
            v,
            "evidence-format",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                json,
                "--any-measurement",
                "--no-nonce",
                "--json",
            ],
            2,
            v,
            "input-kind",
        ),
        case(
            VERIFY,
            &["evidence", rep, "--any-measurement", "--no-nonce", "--json"],
            2,
            v,
            "input-kind",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                ev,
                "--any-measurement",
                "--no-nonce",
                "--crl",
                pem,
                "--json",
            ],
            2,
            v,
            "input-kind",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                ev,
                "--any-measurement",
                "--no-nonce",
                "--collateral",
                json,
                "--json",
            ],
            2,
            v,
            // SEV-SNP evidence takes a collateral bundle (its certificates); any other file is named.
            "collateral-format",
        ),
        case(
            VERIFY,
            &[
                "evidence",
                tdx_ev,
                "--any-measurement",
                "--no-nonce",
                "--vmpl",
                "0",
                "--json",
            ],
            2,
            v,
            "flag-not-applicable",
        ),
        case(
            VERIFY,
            &["snp-report", quote, "--certs", certs, "--json"],
            2,
            v,
            "input-kind",
        ),
        case(
            VERIFY,
            &["snp-report", rep, "--certs", missing, "--json"],
            2,
            v,
            "input",
        ),
        case(VERIFY, &["tdx-quote", rep, "--json"], 2, v, "input-kind"),
        case(VERIFY, &["show", garbage, "--json"], 2, v, "input-kind"),
        case(VERIFY, &["show", missing, "--json"], 2, v, "input"),
        case(
            VERIFY,
            &[
                "evidence",
                ev,
                "--any-measurement",
                "--no-nonce",
                "--policy",
                missing,
                "--json",
            ],
            2,
            v,
            "policy-file",
        ),
        // verify-attestation: the collateral flags' usage errors (issue 35): a count without keys, a file with
        // --online.
        case(
            VERIFY,
            &[
                "evidence",
                tdx_ev,
                "--any-measurement",
                "--no-nonce",
                "--collateral-auditors-required",
                "2",
                "--json",
            ],
            2,
            v,
            "usage",
        ),
        case(
            VERIFY,
            &[
                "tdx-quote",
                quote,
                "--collateral",
                missing,
                "--online",
                "--json",
            ],
            2,
            v,
            "usage",
        ),
        // verify-attestation: a rejection (sim evidence without --allow-simulated).
        case(
            VERIFY,
            &["evidence", ev, "--any-measurement", "--no-nonce", "--json"],
            1,
            v,
            "",
        ),
        // measure-guest.
        case(MEASURE, &["--json"], 2, "ok", "usage"),
        case(MEASURE, &["snp", "--json"], 2, "ok", "usage"),
        case(
            MEASURE,
            &["snp", "--ovmf", missing, "--vcpus", "1", "--json"],
            2,
            "ok",
            "input",
        ),
        case(
            MEASURE,
            &["tdx", "--ovmf", garbage, "--json"],
            2,
            "ok",
            "input",
        ),
        case(
            MEASURE,
            &["tdx", "--event-log", missing, "--json"],
            2,
            "ok",
            "input",
        ),
        case(
            MEASURE,
            &["process", "--binary", missing, "--json"],
            2,
            "ok",
            "input",
        ),
        case(MEASURE, &["process", "--json", "--bogus"], 2, "ok", "usage"),
        // fenced-run (the subcommands of this contract: run, intake).
        case(FENCED_RUN, &["--json"], 2, "ok", "usage"),
        case(FENCED_RUN, &["run", "--json"], 2, "ok", "usage"),
        case(
            FENCED_RUN,
            &["run", s(&job), "--isolation", "tdx", "--json"],
            2,
            "ok",
            "isolation",
        ),
        case(
            FENCED_RUN,
            &["run", s(&job), "--nonce", "zz", "--json"],
            2,
            "ok",
            "nonce",
        ),
        case(
            FENCED_RUN,
            &["run", s(&job), "--operator-config", missing, "--json"],
            2,
            "ok",
            "operator-config",
        ),
        case(
            FENCED_RUN,
            &[
                "run",
                s(&job),
                "--evidence",
                s(&out_in_missing_dir),
                "--json",
            ],
            2,
            "ok",
            "evidence-path",
        ),
        case(FENCED_RUN, &["intake", "--json"], 2, "ok", "usage"),
        case(
            FENCED_RUN,
            &["demo", "--nonce", "zz", "--json"],
            2,
            "ok",
            "demo-not-started",
        ),
        case(FENCED_RUN, &["view", "--json"], 2, "ok", "usage"),
        case(FENCED_RUN, &["view", missing, "--json"], 2, "ok", "input"),
        case(
            FENCED_RUN,
            &["doctor", "--json", "--bogus"],
            2,
            "ok",
            "usage",
        ),
        case(FENCED_RUN, &["image", "build", "--json"], 2, "ok", "usage"),
        case(
            FENCED_RUN,
            &["intake", missing, "--operator-config", missing, "--json"],
            2,
            "ok",
            "operator-config",
        ),
    ];
    let mut problems = Vec::new();
    for k in &cases {
        let args: Vec<&str> = k.args.iter().map(String::as_str).collect();
        let o = run(k.bin, &args, None, &tmp);
        let name = format!(
            "{} {}",
            k.bin.rsplit('/').next().unwrap_or(k.bin),
            args.join(" ")
        );
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(o.stdout.trim());
        let Ok(j) = parsed else {
            problems.push(format!(
                "{name}: stdout is not one JSON object: {:?}",
                o.stdout
            ));
            continue;
        };
        if !j.is_object() {
            problems.push(format!("{name}: stdout is JSON but not an object: {j}"));
        }
        if o.code != k.code {
            problems.push(format!("{name}: exit {} (wanted {}): {j}", o.code, k.code));
        }
        if j[k.key] != false {
            problems.push(format!("{name}: `{}` is not false: {j}", k.key));
        }
        if !k.check.is_empty() {
            if j["error"]["check"] != k.check {
                problems.push(format!("{name}: error.check is not {}: {j}", k.check));
            }
            if j["error"]["detail"].as_str().is_none_or(|d| d.is_empty()) {
                problems.push(format!("{name}: error.detail is empty: {j}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Help is JSON too with --json, and exit 0; without --json it stays text.
    for bin in [VERIFY, MEASURE, FENCED_RUN] {
        let o = run(bin, &["--help", "--json"], None, &tmp);
        assert_eq!(o.code, 0, "{bin} --help --json");
        let j: serde_json::Value = serde_json::from_str(o.stdout.trim()).expect("help is JSON");
        assert!(
            j["help"].as_str().is_some_and(|h| h.contains("Usage")),
            "{j}"
        );
        let o = run(bin, &["--frobnicate"], None, &tmp);
        assert_eq!(o.code, 2);
        assert!(
            o.stdout.is_empty() && o.stderr.contains("--frobnicate"),
            "{o:?}"
        );
    }
}
