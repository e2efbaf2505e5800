//! Wrong-kind hints and the inputs `verify-attestation` accepts (docs/cli.md), table-driven: a TDX quote given to
//! `snp-report`, a report given to `tdx-quote`, a report, quote, PEM or JSON given as evidence, a certificate as
//! `--crl`, flags that cannot apply to the evidence given; hex and base64 text and `-` for standard input; the
//! DER certificate layout of `snpguest fetch ca der` and a swapped ARK/ASK pair (real AMD vectors); `show`;
//! `--policy FILE`.

use base64::Engine;
use fenced_run_tests::cli::{run, s, Corpus, NONCE};
use std::path::Path;

const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");

#[test]
fn a_wrong_kind_of_file_gets_a_hint_naming_what_it_is() {
    let c = Corpus::new();
    let tmp = c.tmp();
    let (ev, tdx_ev, rep, quote, certs, json, pem) = (
        s(&c.snp_evidence),
        s(&c.tdx_evidence),
        s(&c.snp_report),
        s(&c.tdx_quote),
        s(&c.snp_certs),
        s(&c.verdict_json),
        s(&c.pem_cert),
    );
    let any = ["--any-measurement", "--no-nonce", "--allow-simulated"];
    let ev_args = |f: &str| -> Vec<String> {
        let mut v = vec!["evidence".to_string(), f.to_string()];
        v.extend(any.iter().map(|a| a.to_string()));
        v
    };
    let own = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    // (arguments, exit code, words the message must hold)
    let cases: Vec<(Vec<String>, i32, Vec<&str>)> = vec![
        (
            own(&["snp-report", quote, "--certs", certs]),
            2,
            vec!["TDX quote", "tdx-quote"],
        ),
        (
            own(&["tdx-quote", rep]),
            2,
            vec!["SEV-SNP attestation report", "snp-report"],
        ),
        (
            ev_args(rep),
            2,
            vec![
                "SEV-SNP attestation report",
                "not CBOR (fenced-run evidence)",
            ],
        ),
        (ev_args(quote), 2, vec!["TDX quote", "tdx-quote"]),
        (ev_args(pem), 2, vec!["PEM text (CERTIFICATE)", "--certs"]),
        (ev_args(json), 2, vec!["JSON, not CBOR", "--evidence OUT"]),
        (
            own(&["snp-report", ev, "--certs", certs]),
            2,
            vec!["CBOR (fenced-run evidence)", "verify-attestation evidence"],
        ),
        (
            {
                let mut v = ev_args(ev);
                v.extend(own(&["--crl", pem]));
                v
            },
            2,
            vec!["--crl", "not a CRL", "PEM text (CERTIFICATE)"],
        ),
        (
            own(&[
                "snp-report",
                rep,
                "--certs",
                certs,
                "--allow-simulated",
                "--crl",
                json,
            ]),
            2,
            vec!["--crl", "not a CRL", "JSON text"],
        ),
        (
            {
                let mut v = ev_args(tdx_ev);
                v.extend(own(&[
                    "--vmpl",
                    "0",
                    "--min-tcb",
                    "bl=1,tee=0,snp=1,ucode=1",
                ]));
                v
            },
            2,
            vec!["--vmpl", "--min-tcb", "do not apply to TDX evidence"],
        ),
        (
            {
                let mut v = ev_args(ev);
                v.extend(own(&[
                    "--xfam",
                    "e702060000000000",
                    "--min-tcb-eval-num",
                    "17",
                ]));
                v
            },
            2,
            vec![
                "--xfam",
                "--min-tcb-eval-num",
                "do not apply to SEV-SNP evidence",
            ],
        ),
        (
            {
                let mut v = ev_args(ev);
                v.extend(own(&[
                    "--min-tcb-eval-num",
                    "17",
                    "--collateral-grace",
                    "60",
                ]));
                v
            },
            2,
            vec![
                "--min-tcb-eval-num",
                "--collateral-grace",
                "do not apply to SEV-SNP evidence",
            ],
        ),
        (
            {
                let mut v = ev_args(tdx_ev);
                v.extend(own(&["--tcb-baseline", json]));
                v
            },
            2,
            vec!["--tcb-baseline", "does not apply to TDX evidence"],
        ),
        (
            own(&["tdx-quote", quote, "--tcb-baseline", json]),
            2,
            vec!["--tcb-baseline", "does not apply to a TDX quote"],
        ),
        (
            {
                let mut v = ev_args(ev);
                v.extend(own(&["--auditors-required", "2"]));
                v
            },
            2,
            vec!["--auditors-required", "--measurements"],
        ),
        // Text encodings are decoded, and what they hold is verified.
        (ev_args(s(&c.snp_evidence_base64)), 0, vec!["VERIFIED"]),
        (
            own(&[
                "snp-report",
                s(&c.snp_report_hex),
                "--certs",
                certs,
                "--allow-simulated",
            ]),
            0,
            vec!["VERIFIED"],
        ),
        (
            own(&["show", s(&c.tdx_quote_base64)]),
            0,
            vec!["base64 text, decoded", "TDX quote"],
        ),
    ];
    let mut problems = Vec::new();
    for (args, code, words) in &cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(VERIFY, &a, None, &tmp);
        let all = format!("{}{}", o.stdout, o.stderr);
        if o.code != *code {
            problems.push(format!(
                "{}: exit {} (wanted {code}): {all}",
                a.join(" "),
                o.code
            ));
        }
        for w in words {
            if !all.contains(w) {
                problems.push(format!("{}: {w:?} not said: {all}", a.join(" ")));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_dash_reads_standard_input() {
    let c = Corpus::new();
    let tmp = c.tmp();
    let bytes = std::fs::read(&c.snp_evidence).expect("evidence");
    let o = run(
        VERIFY,
        &[
            "evidence",
            "-",
            "--any-measurement",
            "--nonce",
            NONCE,
            "--allow-simulated",
            "--json",
        ],
        Some(&bytes),
        &tmp,
    );
    assert_eq!(o.code, 0, "{o:?}");
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    assert_eq!(j["verified"], true, "{j}");
    let quote = std::fs::read(&c.tdx_quote).expect("quote");
    let o = run(VERIFY, &["show", "-", "--json"], Some(&quote), &tmp);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    assert_eq!(j["kind"], "tdx-quote", "{j}");
    // An empty standard input is unusable, naming it.
    let o = run(VERIFY, &["show", "-"], Some(b""), &tmp);
    assert_eq!(o.code, 2, "{o:?}");
}

fn pem_to_der(p: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(p).expect("pem");
    let b64: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .expect("base64")
}

#[test]
fn snpguest_der_layout_is_accepted_and_a_swapped_ark_ask_is_named() {
    let Some(v) = attestation::vectors::dir("snp/milan-v2-virtee-sev") else {
        return;
    };
    let t = tempfile::tempdir().expect("tmp");
    let at = ["--at", "2025-01-01T00:00:00Z"];
    let verify = |dir: &Path| {
        let r = v.join("report.bin");
        let mut a = vec!["snp-report", s(&r), "--certs", s(dir)];
        a.extend(at);
        run(VERIFY, &a, None, t.path())
    };
    let pem_layout = verify(&v);
    assert_eq!(pem_layout.code, 0, "{pem_layout:?}");
    // `snpguest fetch ca der` writes ark.der, ask.der (and the VCEK as vcek.der).
    let der = t.path().join("der");
    std::fs::create_dir(&der).expect("mkdir");
    std::fs::write(der.join("ark.der"), pem_to_der(&v.join("ark.pem"))).expect("ark");
    std::fs::write(der.join("ask.der"), pem_to_der(&v.join("ask.pem"))).expect("ask");
    std::fs::copy(v.join("vcek.der"), der.join("vcek.der")).expect("vcek");
    let o = verify(&der);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(
        o.stdout.contains("VERIFIED") && o.stdout.contains("AMD ARK-Milan"),
        "{o:?}"
    );
    // The ARK and the ASK in each other's files: swapped, not simulated.
    let swapped = t.path().join("swapped");
    std::fs::create_dir(&swapped).expect("mkdir");
    std::fs::copy(v.join("ask.pem"), swapped.join("ark.pem")).expect("copy");
    std::fs::copy(v.join("ark.pem"), swapped.join("ask.pem")).expect("copy");
    std::fs::copy(v.join("vcek.der"), swapped.join("vcek.der")).expect("copy");
    let o = verify(&swapped);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr.contains("swapped") && o.stderr.contains("Milan ARK"),
        "{o:?}"
    );
    assert!(
        !o.stderr.contains("SIMULATED") && !o.stdout.contains("SIMULATED"),
        "{o:?}"
    );
    // The verify table now shows every TCB of the report.
    for row in ["current tcb", "committed tcb", "launch tcb", "reported tcb"] {
        assert!(
            pem_layout.stdout.contains(row),
            "{row}: {}",
            pem_layout.stdout
        );
    }
}

#[test]
fn show_decodes_every_kind_without_verifying() {
    let c = Corpus::new();
    let tmp = c.tmp();
    let o = run(VERIFY, &["show", s(&c.snp_evidence)], None, &tmp);
    assert_eq!(o.code, 0, "{o:?}");
    for w in [
        "NOT VERIFIED",
        "fenced-run evidence",
        "verdict outcome",
        "tests_passed",
        "guest policy",
        "platform info",
        "current tcb",
        "committed tcb",
        "launch tcb",
        "reported tcb",
        "bl=",
        "measurement",
        NONCE,
    ] {
        assert!(o.stdout.contains(w), "{w}: {}", o.stdout);
    }
    let o = run(VERIFY, &["show", s(&c.tdx_quote), "--json"], None, &tmp);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    assert_eq!(
        (j["verified"].clone(), j["kind"].clone()),
        (false.into(), "tdx-quote".into()),
        "{j}"
    );
    assert_eq!(j["mrtd"], "3c".repeat(48), "{j}");
    assert!(
        j["fmspc"].is_string(),
        "the sim PCK certificate carries an FMSPC: {j}"
    );
    let o = run(VERIFY, &["show", s(&c.snp_report), "--json"], None, &tmp);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    assert_eq!(j["kind"], "sev-snp-report");
    assert_eq!(j["measurement"], "11".repeat(48), "{j}");
    assert!(j["launch_tcb_decoded"]["snp"].is_u64(), "{j}");
    assert!(j["policy"]["debug"].is_boolean(), "{j}");
    // A real TDX quote: its FMSPC comes from the PCK certificate.
    if let Some(d) = attestation::vectors::dir("tdx/dcapqvl-v4-b0c06f-uptodate") {
        let o = run(
            VERIFY,
            &["show", s(&d.join("quote.bin")), "--json"],
            None,
            &tmp,
        );
        let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
        assert_eq!(j["fmspc"], "b0c06f000000", "{j}");
    }
}

#[test]
fn a_policy_file_fills_the_policy_and_flags_override_it() {
    let c = Corpus::new();
    let tmp = c.tmp();
    let policy = c.path().join("policy.toml");
    let base = |extra: &[&str]| {
        let mut a = vec![
            "evidence",
            s(&c.snp_evidence),
            "--nonce",
            NONCE,
            "--allow-simulated",
            "--policy",
            s(&policy),
            "--json",
        ];
        a.extend(extra);
        run(VERIFY, &a, None, &tmp)
    };
    // The sim report carries VMPL 0 and measurement 11..11.
    std::fs::write(
        &policy,
        format!("vmpl = 1\nmeasurement = [\"{}\"]\n", "11".repeat(48)),
    )
    .expect("w");
    let o = base(&[]);
    assert_eq!(o.code, 1, "the file's vmpl = 1 rejects: {o:?}");
    assert!(o.stdout.contains("vmpl"), "{o:?}");
    let o = base(&["--vmpl", "0"]);
    assert_eq!(o.code, 0, "the flag overrides the file: {o:?}");
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    assert_eq!(
        j["measurement_pinned"][0], "measurement",
        "the file's measurement pins: {j}"
    );
    std::fs::write(&policy, "vmpl = 0\nallow-anything = true\n").expect("w");
    let o = base(&[]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stdout.contains("allow-anything") && o.stdout.contains("policy-file"),
        "{o:?}"
    );
}
