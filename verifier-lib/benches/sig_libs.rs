//! Criterion benchmarks that chose the signature library of `attestation::sig`: each algorithm fenced-run
//! verifies through `attestation::sig`, through ring and aws-lc-rs called directly on the same bytes, and with
//! the pure-Rust RustCrypto crate used before issue 19.
//!
//! RSA-PSS uses AMD's real ARK -> ASK signature of the Genoa vector (`FENCED_RUN_VECTORS`); the EC and Ed25519
//! keys are made here from fixed seeds.

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::PathBuf;
use x509_parser::prelude::{FromDer, X509Certificate};

fn vector_dir() -> Option<PathBuf> {
    let root = std::env::var_os("FENCED_RUN_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"));
    let dir = root.join("snp/genoa-v5-oak-oc");
    dir.is_dir().then_some(dir)
}

fn pem_der(path: &std::path::Path) -> Vec<u8> {
    let text = std::fs::read(path).expect("pem");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text).expect("pem block");
    pem.contents
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// ring and aws-lc-rs side by side in one group, on the same public key, message and signature.
fn backends(
    g: &mut Group<'_>,
    name: &str,
    (ring_alg, aws_alg): (
        &'static dyn ring::signature::VerificationAlgorithm,
        &'static dyn aws_lc_rs::signature::VerificationAlgorithm,
    ),
    key: &[u8],
    msg: &[u8],
    sig: &[u8],
) {
    g.bench_function(format!("{name} ring"), |b| {
        let key = ring::signature::UnparsedPublicKey::new(ring_alg, key);
        b.iter(|| key.verify(black_box(msg), sig).expect("ok"))
    });
    g.bench_function(format!("{name} aws-lc-rs"), |b| {
        let key = aws_lc_rs::signature::UnparsedPublicKey::new(aws_alg, key);
        b.iter(|| key.verify(black_box(msg), sig).expect("ok"))
    });
}

fn ecdsa(c: &mut Criterion) {
    use p256::ecdsa::signature::{Signer, Verifier};
    let mut g = c.benchmark_group("sig");
    let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("key");
    let msg = vec![0x5a; 632];
    let sig: p256::ecdsa::Signature = sk.sign(&msg);
    let vk = *sk.verifying_key();
    let key = attestation::sig::P256Key::from_sec1(vk.to_sec1_bytes().as_ref()).expect("pk");
    let raw = sig.to_bytes();
    g.bench_function("p256 sha256 attestation::sig", |b| {
        b.iter(|| attestation::sig::p256_sha256_fixed(&key, black_box(&msg), &raw).expect("ok"))
    });
    backends(
        &mut g,
        "p256 sha256",
        (
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
        ),
        key.sec1(),
        &msg,
        &raw,
    );
    g.bench_function("p256 sha256 rustcrypto", |b| {
        b.iter(|| vk.verify(black_box(&msg), &sig).expect("ok"))
    });

    let sk = p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).expect("key");
    let msg = vec![0xa5; 0x2A0];
    let sig: p384::ecdsa::Signature = sk.sign(&msg);
    let vk = *sk.verifying_key();
    let key = attestation::sig::P384Key::from_sec1(vk.to_sec1_bytes().as_ref()).expect("pk");
    let (r, s) = sig.split_bytes();
    let (r, s): ([u8; 48], [u8; 48]) = (r.into(), s.into());
    g.bench_function("p384 sha384 attestation::sig", |b| {
        b.iter(|| attestation::sig::p384_sha384_scalars(&key, black_box(&msg), &r, &s).expect("ok"))
    });
    backends(
        &mut g,
        "p384 sha384",
        (
            &ring::signature::ECDSA_P384_SHA384_FIXED,
            &aws_lc_rs::signature::ECDSA_P384_SHA384_FIXED,
        ),
        key.sec1(),
        &msg,
        &sig.to_bytes(),
    );
    g.bench_function("p384 sha384 rustcrypto", |b| {
        b.iter(|| vk.verify(black_box(&msg), &sig).expect("ok"))
    });

    let sk = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
    let msg = vec![0x33; 512];
    let sig = ed25519_dalek::Signer::sign(&sk, &msg);
    let pk = sk.verifying_key();
    backends(
        &mut g,
        "ed25519",
        (&ring::signature::ED25519, &aws_lc_rs::signature::ED25519),
        &pk.to_bytes(),
        &msg,
        &sig.to_bytes(),
    );
    g.bench_function("ed25519 strict attestation::sig", |b| {
        b.iter(|| {
            attestation::sig::ed25519_strict(&pk.to_bytes(), black_box(&msg), &sig.to_bytes())
                .expect("ok")
        })
    });
    g.bench_function("ed25519 strict dalek", |b| {
        b.iter(|| pk.verify_strict(black_box(&msg), &sig).expect("ok"))
    });
    g.finish();
}

fn rsa_pss(c: &mut Criterion) {
    let Some(dir) = vector_dir() else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            "vector snp/genoa-v5-oak-oc not found",
        );
        return;
    };
    let ark_der = pem_der(&dir.join("ark.pem"));
    let ask_der = pem_der(&dir.join("ask.pem"));
    let (_, ark) = X509Certificate::from_der(&ark_der).expect("ark");
    let (_, ask) = X509Certificate::from_der(&ask_der).expect("ask");
    let key: &[u8] = &ark.public_key().subject_public_key.data;
    let tbs = ask.tbs_certificate.as_ref();
    let sig: &[u8] = &ask.signature_value.data;
    let mut g = c.benchmark_group("sig");
    g.bench_function("rsa-4096 pss sha384 attestation::sig", |b| {
        b.iter(|| attestation::sig::rsa_pss_sha384(key, black_box(tbs), sig).expect("ok"))
    });
    backends(
        &mut g,
        "rsa-4096 pss sha384",
        (
            &ring::signature::RSA_PSS_2048_8192_SHA384,
            &aws_lc_rs::signature::RSA_PSS_2048_8192_SHA384,
        ),
        key,
        tbs,
        sig,
    );
    g.bench_function("rsa-4096 pss sha384 rustcrypto", |b| {
        use rsa::pkcs1::DecodeRsaPublicKey;
        use rsa::signature::Verifier;
        b.iter(|| {
            let k = rsa::RsaPublicKey::from_pkcs1_der(key).expect("key");
            let vk = rsa::pss::VerifyingKey::<sha2::Sha384>::new_with_salt_len(k, 48);
            let s = rsa::pss::Signature::try_from(sig).expect("sig");
            vk.verify(black_box(tbs), &s).expect("ok")
        })
    });
    g.finish();
}

criterion_group!(benches, ecdsa, rsa_pss);
criterion_main!(benches);
