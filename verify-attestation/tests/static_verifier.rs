//! The static verify-attestation (`scripts/build-verifier.sh`: musl, dlmalloc, fat LTO) against the ordinary one
//! this test is built with: on every real report and quote, with and without `--json`, both print the same bytes
//! and exit with the same code. Another libc, another allocator and another optimisation of the whole program
//! must change nothing a founder sees.
//!
//! The static binary is named by `FENCED_RUN_STATIC_VERIFIER` (.ci/run builds it and sets it); without it the
//! test says it was skipped, unless `FENCED_RUN_REQUIRE_STATIC=1`.

#[path = "../../verifier-lib/tests/snp_common/mod.rs"]
mod snp_common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn static_verifier() -> Option<PathBuf> {
    match std::env::var_os("FENCED_RUN_STATIC_VERIFIER") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "FENCED_RUN_STATIC_VERIFIER={} is not a file",
                p.display()
            );
            Some(p)
        }
        None => {
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::StaticVerifier,
                "FENCED_RUN_STATIC_VERIFIER is not set (scripts/build-verifier.sh prints the path)",
            );
            None
        }
    }
}

/// Runs `bin` with `args`: exit code, stdout, stderr.
fn run(bin: &Path, args: &[String]) -> (Option<i32>, Vec<u8>, Vec<u8>) {
    let out = Command::new(bin).args(args).output().expect("run verifier");
    (out.status.code(), out.stdout, out.stderr)
}

/// Both binaries on `args`, with and without `--json`; panics naming the vector on the first difference.
/// Returns the ordinary binary's exit code.
fn same(name: &str, stat: &Path, args: &[String]) -> Option<i32> {
    let ours = Path::new(env!("CARGO_BIN_EXE_verify-attestation"));
    let mut code = None;
    for json in [true, false] {
        let mut a = args.to_vec();
        if json {
            a.push("--json".into());
        }
        let (c1, o1, e1) = run(ours, &a);
        let (c2, o2, e2) = run(stat, &a);
        assert!(
            !o1.is_empty() || !e1.is_empty(),
            "{name}: no output from {a:?}"
        );
        assert_eq!(c1, c2, "{name} {a:?}: exit codes differ");
        assert!(
            o1 == o2,
            "{name} {a:?}: stdout differs\nordinary:\n{}\nstatic:\n{}",
            String::from_utf8_lossy(&o1),
            String::from_utf8_lossy(&o2)
        );
        assert!(
            e1 == e2,
            "{name} {a:?}: stderr differs\nordinary:\n{}\nstatic:\n{}",
            String::from_utf8_lossy(&e1),
            String::from_utf8_lossy(&e2)
        );
        code = c1;
    }
    code
}

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

#[test]
fn the_static_verifier_prints_what_the_ordinary_one_prints_on_every_snp_report() {
    let Some(stat) = static_verifier() else {
        return;
    };
    let Some(snp) = snp_common::snp_vectors() else {
        return;
    };
    let vectors = snp_common::report_vectors(&snp);
    assert!(!vectors.is_empty(), "no SEV-SNP report vectors");
    let mut codes = Vec::new();
    for v in &vectors {
        let at = v.at().unix_timestamp().to_string();
        let args = vec![
            "snp-report".into(),
            s(&v.dir.join("report.bin")),
            "--certs".into(),
            s(&v.dir),
            "--at".into(),
            at,
        ];
        codes.push(same(&v.name, &stat, &args));
    }
    // Verified and rejected reports both went through (the negatives are rejected or do not parse).
    assert!(codes.contains(&Some(0)), "{codes:?}");
    assert!(codes.contains(&Some(1)), "{codes:?}");
}

#[test]
fn the_static_verifier_prints_what_the_ordinary_one_prints_on_every_tdx_quote() {
    let Some(stat) = static_verifier() else {
        return;
    };
    let Some(entries) = attestation::vectors::cases("tdx", "quote.bin") else {
        return;
    };
    let mut codes = Vec::new();
    assert!(!entries.is_empty(), "no TDX quote vectors");
    for d in &entries {
        let exp: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("expected.json")).expect("expected"))
                .expect("expected.json");
        let at = exp["reference_time_unix"]
            .as_i64()
            .expect("reference_time_unix")
            .to_string();
        let name = d.file_name().expect("name").to_string_lossy().into_owned();
        let args = vec![
            "tdx-quote".into(),
            s(&d.join("quote.bin")),
            "--collateral".into(),
            s(&d.join("collateral.json")),
            "--at".into(),
            at,
        ];
        codes.push(same(&name, &stat, &args));
    }
    assert!(codes.contains(&Some(0)), "{codes:?}");
    assert!(codes.contains(&Some(1)), "{codes:?}");
}
