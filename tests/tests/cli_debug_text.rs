//! No Rust `Debug` text reaches a user: every binary runs over the whole corpus (sim evidence, reports and
//! quotes, the real AMD and Intel vectors where present, wrong kinds, truncated and empty files, text
//! encodings, missing paths), human and `--json`, and stdout plus stderr are searched for `Some(`, `None,`,
//! `Error {`, `kind:`, `UnexpectedTag`, `Der(` ... (docs/cli.md).

use fenced_run_tests::cli::{debug_text_in, run, s, Corpus};
use std::path::PathBuf;

const FENCED_RUN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const MEASURE: &str = env!("CARGO_BIN_EXE_measure-guest-e2e");

/// The real vectors used as more inputs: each SNP vector's report and certificate directory, each TDX
/// vector's quote and collateral (none when the vectors are absent; the skip is recorded).
fn vector_inputs() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for (sub, names) in [
        ("snp", &["report.bin", "vcek.der", "ark.pem"][..]),
        ("tdx", &["quote.bin", "collateral.json"][..]),
    ] {
        let Some(root) = attestation::vectors::dir(sub) else {
            continue;
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&root)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        entries.sort();
        for e in entries.iter().filter(|e| e.is_dir()).take(4) {
            for n in names {
                let p = e.join(n);
                if p.is_file() {
                    files.push(p);
                }
            }
            if e.join("report.bin").is_file() {
                dirs.push(e.clone());
            }
        }
    }
    (files, dirs)
}

#[test]
fn no_binary_prints_debug_text_over_the_corpus() {
    let c = Corpus::new();
    let tmp = c.tmp();
    let (vfiles, vdirs) = vector_inputs();
    let mut files: Vec<PathBuf> = vec![
        c.snp_evidence.clone(),
        c.tdx_evidence.clone(),
        c.snp_report.clone(),
        c.tdx_quote.clone(),
        c.verdict_json.clone(),
        c.pem_cert.clone(),
        c.garbage.clone(),
        c.empty.clone(),
        c.truncated_report.clone(),
        c.truncated_evidence.clone(),
        c.truncated_quote.clone(),
        c.snp_report_hex.clone(),
        c.tdx_quote_base64.clone(),
        c.snp_evidence_base64.clone(),
        c.missing.clone(),
        c.snp_certs.clone(),
    ];
    files.extend(vfiles);
    let mut cert_dirs = vec![
        c.snp_certs.clone(),
        c.path().to_path_buf(),
        c.missing.clone(),
    ];
    cert_dirs.extend(vdirs);
    let (ev, rep, quote, certs) = (
        s(&c.snp_evidence),
        s(&c.snp_report),
        s(&c.tdx_quote),
        s(&c.snp_certs),
    );
    let mut invocations: Vec<(&str, Vec<String>)> = Vec::new();
    let own = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    for f in &files {
        let f = s(f);
        for json in [false, true] {
            let j = |mut v: Vec<String>| {
                if json {
                    v.push("--json".into());
                }
                v
            };
            invocations.push((VERIFY, j(own(&["show", f]))));
            invocations.push((
                VERIFY,
                j(own(&[
                    "snp-report",
                    f,
                    "--certs",
                    certs,
                    "--allow-simulated",
                ])),
            ));
            invocations.push((VERIFY, j(own(&["tdx-quote", f, "--allow-simulated"]))));
            invocations.push((
                VERIFY,
                j(own(&[
                    "evidence",
                    f,
                    "--any-measurement",
                    "--no-nonce",
                    "--allow-simulated",
                ])),
            ));
            invocations.push((
                VERIFY,
                j(own(&[
                    "evidence",
                    ev,
                    "--any-measurement",
                    "--no-nonce",
                    "--crl",
                    f,
                ])),
            ));
            invocations.push((
                VERIFY,
                j(own(&[
                    "snp-report",
                    rep,
                    "--certs",
                    certs,
                    "--crl",
                    f,
                    "--allow-simulated",
                ])),
            ));
            invocations.push((VERIFY, j(own(&["tdx-quote", quote, "--collateral", f]))));
            invocations.push((
                VERIFY,
                j(own(&[
                    "evidence",
                    ev,
                    "--any-measurement",
                    "--no-nonce",
                    "--policy",
                    f,
                ])),
            ));
            invocations.push((MEASURE, j(own(&["tdx", "--event-log", f]))));
            invocations.push((MEASURE, j(own(&["tdx", "--ovmf", f]))));
            invocations.push((MEASURE, j(own(&["snp", "--ovmf", f, "--vcpus", "1"]))));
            invocations.push((MEASURE, j(own(&["process", "--binary", f]))));
            invocations.push((FENCED_RUN, j(own(&["intake", f]))));
        }
        invocations.push((
            MEASURE,
            own(&["verify-set", "--set", f, "--auditor-key", f]),
        ));
        invocations.push((
            MEASURE,
            own(&[
                "sign",
                "--set",
                f,
                "--key",
                f,
                "--auditor",
                "a",
                "--out",
                s(&tmp.join("x.sig")),
            ]),
        ));
    }
    for d in &cert_dirs {
        let d = s(d);
        let report = format!("{d}/report.bin");
        let report = if std::path::Path::new(&report).is_file() {
            report
        } else {
            rep.to_string()
        };
        for json in [false, true] {
            let mut v = own(&["snp-report", &report, "--certs", d]);
            if json {
                v.push("--json".into());
            }
            invocations.push((VERIFY, v));
        }
    }
    let mut found = Vec::new();
    for (bin, args) in &invocations {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(bin, &a, None, &tmp);
        let all = format!("{}{}", o.stdout, o.stderr);
        let hits = debug_text_in(&all);
        if !hits.is_empty() {
            found.push(format!(
                "{} {}: {hits:?}\n{all}",
                bin.rsplit('/').next().unwrap_or(bin),
                a.join(" ")
            ));
        }
        if o.code == 101 || all.contains("panicked") {
            found.push(format!("{} {}: panicked\n{all}", bin, a.join(" ")));
        }
    }
    assert!(
        invocations.len() > 300,
        "the corpus ran only {} invocations",
        invocations.len()
    );
    assert!(
        found.is_empty(),
        "{} invocation(s) printed Debug text:\n{}",
        found.len(),
        found.join("\n---\n")
    );
    // Whatever ran, nothing was written beside the corpus but what the runs were told to write.
    assert!(
        !tmp.join("x.sig").exists(),
        "sign wrote a signature over an unusable set"
    );
}
