//! Criterion benchmarks of SEV-SNP verification: one real report with its chain (chain verified each time, and
//! chain cached), and one sim evidence bundle end to end.
//!
//! Real vectors come from `FENCED_RUN_VECTORS` (default `../shared/vectors`); without them those benches skip.

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

use attestation::binding;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::hex::Hex;
use attestation::sim::SimPsp;
use attestation::snp::{AttestationReport, Product, SigningKey};
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use criterion::{criterion_group, criterion_main, Criterion};
use sha2::{Digest, Sha384};
use std::hint::black_box;
use std::path::PathBuf;
use verifier_lib::evidence::{verify_evidence_bytes, EvidenceOptions};
use verifier_lib::snp::{
    verify_chain, verify_report, verify_report_with_chain, CertBundle, ChainOptions, Policy,
};

/// The real vector the report benches use.
const VECTOR: &str = "snp/genoa-v5-oak-oc";

fn vector_dir() -> Option<PathBuf> {
    let root = std::env::var_os("FENCED_RUN_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"));
    let dir = root.join(VECTOR);
    dir.is_dir().then_some(dir)
}

fn real_report(c: &mut Criterion) {
    let Some(dir) = vector_dir() else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            &format!("vector {VECTOR} not found"),
        );
        return;
    };
    let bytes = std::fs::read(dir.join("report.bin")).expect("report.bin");
    let bundle = CertBundle::from_dir(&dir, SigningKey::Vcek).expect("certs");
    let at = time::macros::datetime!(2026-01-01 00:00 UTC);
    let opts = ChainOptions {
        at,
        crl: None,
        allow_simulated: false,
    };
    let policy = Policy::default();
    let report = AttestationReport::from_bytes(&bytes).expect("parse");
    assert!(verify_report(&report, &bundle, &opts, &policy).verified());

    c.bench_function(
        "snp real report: parse + chain + signature + policy (uncached chain)",
        |b| {
            b.iter(|| {
                let r = AttestationReport::from_bytes(black_box(&bytes)).expect("parse");
                black_box(verify_report(&r, &bundle, &opts, &policy).verified())
            })
        },
    );
    let chain = verify_chain(&bundle, &opts, report.product_from_cpuid());
    c.bench_function(
        "snp real report: parse + signature + policy (cached chain)",
        |b| {
            b.iter(|| {
                let r = AttestationReport::from_bytes(black_box(&bytes)).expect("parse");
                black_box(verify_report_with_chain(&r, &chain, &policy).verified())
            })
        },
    );
    let verifier = verifier_lib::Verifier::new();
    let input = verifier_lib::snp::SnpInput {
        report: &bytes,
        certs: &bundle,
    };
    assert!(verifier
        .snp(&input, &opts, &policy)
        .expect("parse")
        .verified());
    c.bench_function(
        "snp real report: Verifier (chain signatures cached, every other check run)",
        |b| {
            b.iter(|| {
                let input = verifier_lib::snp::SnpInput {
                    report: black_box(&bytes),
                    certs: &bundle,
                };
                black_box(
                    verifier
                        .snp(&input, &opts, &policy)
                        .expect("parse")
                        .verified(),
                )
            })
        },
    );
    c.bench_function("snp report parse + to_bytes", |b| {
        b.iter(|| {
            black_box(
                AttestationReport::from_bytes(black_box(&bytes))
                    .expect("parse")
                    .to_bytes(),
            )
        })
    });
}

fn sim_evidence(c: &mut Criterion) {
    let state = std::env::temp_dir().join("fenced-run-verifier-lib-bench-sim");
    let psp = SimPsp::new(&state, Product::Milan).expect("sim psp");
    let key = p384::ecdsa::SigningKey::from_slice(&Sha384::digest(b"bench")).expect("key");
    let nonce = vec![0x42; 32];
    let measurement = [0x11; 48];
    let rd = binding::report_data(&p384::PublicKey::from(key.verifying_key()), &nonce);
    let (report, certs) = psp
        .sign_report(psp.report_template(measurement, rd))
        .expect("sign");
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::Vm,
        Inputs {
            nonce: nonce.clone(),
            ..Inputs::default()
        },
        "bench",
    );
    let ev =
        Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, &key, &verdict).expect("seal");
    let bytes = ev.to_cbor().expect("cbor");
    let opts = EvidenceOptions {
        chain: ChainOptions {
            allow_simulated: true,
            ..ChainOptions::default()
        },
        policy: Policy {
            measurements: vec![Hex(measurement)],
            ..Policy::default()
        },
        nonce: Some(nonce),
        any_measurement: false,
        measurement_set: None,
        tdx_collateral: None,
        ..EvidenceOptions::default()
    };
    assert!(verify_evidence_bytes(&bytes, &opts)
        .expect("decode")
        .verified());
    c.bench_function(
        "evidence bundle (sim Milan): decode + report + binding + COSE + nonce",
        |b| {
            b.iter(|| {
                black_box(
                    verify_evidence_bytes(black_box(&bytes), &opts)
                        .expect("decode")
                        .verified(),
                )
            })
        },
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(4));
    targets = real_report, sim_evidence
}
criterion_main!(benches);
