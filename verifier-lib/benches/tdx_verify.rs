//! Criterion benchmarks of TDX verification on a real quote (`dcapqvl-v4-b0c06f-uptodate`) with its
//! collateral: parsing, the whole library verification (with and without parsing the collateral), and the whole
//! `verify-attestation tdx-quote` process. Results and the command are in docs/benchmarks.md.

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use std::process::Command;
use verifier_lib::tdx::{verify_quote, Collateral, Policy, VerifyOptions};

fn vector() -> Option<PathBuf> {
    let d = std::env::var_os("FENCED_RUN_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"))
        .join("tdx/dcapqvl-v4-b0c06f-uptodate");
    if d.is_dir() {
        Some(d)
    } else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            &format!("no TDX vectors at {}", d.display()),
        );
        None
    }
}

fn bench(c: &mut Criterion) {
    let Some(d) = vector() else { return };
    let quote = std::fs::read(d.join("quote.bin")).expect("quote");
    let coll_json = std::fs::read(d.join("collateral.json")).expect("collateral");
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("expected.json")).expect("expected"))
            .expect("json");
    let at = exp["reference_time_unix"].as_i64().expect("time");
    let coll = Collateral::from_json(&coll_json).expect("collateral parses");
    let policy = Policy::default();

    let mut g = c.benchmark_group("tdx");
    g.bench_function("parse_quote", |b| {
        b.iter(|| attestation::tdx::Quote::parse(std::hint::black_box(&quote)).expect("parse"))
    });
    g.bench_function("parse_collateral", |b| {
        b.iter(|| Collateral::from_json(std::hint::black_box(&coll_json)).expect("parse"))
    });
    g.bench_function("verify_quote_parsed_collateral", |b| {
        let opts = VerifyOptions {
            collateral: Some(&coll),
            at,
            policy: &policy,
            allow_simulated: false,
        };
        b.iter(|| {
            let r = verify_quote(std::hint::black_box(&quote), &opts).expect("parse");
            assert!(r.verified());
        })
    });
    g.bench_function("verifier_cached_chains_and_collateral", |b| {
        // A Verifier that has seen this platform once: only the quote signature is verified again.
        let opts = VerifyOptions {
            collateral: Some(&coll),
            at,
            policy: &policy,
            allow_simulated: false,
        };
        let verifier = verifier_lib::Verifier::new();
        assert!(verifier.tdx(&quote, &opts).expect("parse").verified());
        b.iter(|| {
            let r = verifier
                .tdx(std::hint::black_box(&quote), &opts)
                .expect("parse");
            assert!(r.verified());
        })
    });
    g.bench_function("verify_quote_with_collateral_parse", |b| {
        b.iter(|| {
            let coll = Collateral::from_json(&coll_json).expect("parse");
            let opts = VerifyOptions {
                collateral: Some(&coll),
                at,
                policy: &policy,
                allow_simulated: false,
            };
            let r = verify_quote(std::hint::black_box(&quote), &opts).expect("parse");
            assert!(r.verified());
        })
    });
    // The CLI is its own crate (verify-attestation); its binary is timed when VERIFY_ATTESTATION_BIN names it.
    let Some(bin) = std::env::var_os("VERIFY_ATTESTATION_BIN") else {
        eprintln!(
            "skipped: process_verify_attestation_tdx_quote (VERIFY_ATTESTATION_BIN is not set)"
        );
        g.finish();
        return;
    };
    g.bench_function("process_verify_attestation_tdx_quote", |b| {
        let at = at.to_string();
        b.iter(|| {
            let st = Command::new(&bin)
                .arg("tdx-quote")
                .arg(d.join("quote.bin"))
                .arg("--collateral")
                .arg(d.join("collateral.json"))
                .args(["--at", &at, "--json"])
                .stdout(std::process::Stdio::null())
                .status()
                .expect("run");
            assert!(st.success());
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
