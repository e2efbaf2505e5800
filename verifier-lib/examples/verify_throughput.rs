//! Bench binary: per-operation CPU time of the signature libraries and of whole verifications (SEV-SNP report,
//! TDX quote), with and without `verifier_lib::Verifier`'s chain cache. CPU time is read from
//! `/proc/thread-self/schedstat` (nanoseconds this thread ran), so the figures hold on a machine shared with
//! other builds, where wall-clock time does not. The first rows call ring and aws-lc-rs directly on the same
//! bytes (the benchmark that chose the backend of `attestation::sig`). Run (see docs/benchmarks.md):
//! `FENCED_RUN_VECTORS=../shared/vectors cargo run --release -p verifier-lib --example verify_throughput`

use std::hint::black_box;
use std::path::PathBuf;

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Runs `f` `n` times and prints the CPU time per run in microseconds; with `VERIFY_ONLY=TEXT` in the
/// environment, only the rows whose name contains TEXT run (for profiling one row, e.g. under callgrind).
fn time(name: &str, n: u32, mut f: impl FnMut()) -> f64 {
    if std::env::var("VERIFY_ONLY").is_ok_and(|only| !name.contains(&only)) {
        return 0.0;
    }
    f();
    let t = cpu_ns();
    for _ in 0..n {
        f();
    }
    let us = (cpu_ns() - t) as f64 / 1000.0 / f64::from(n);
    println!(
        "{name:<58} {us:>10.1} us CPU  ({:>8.0} per s per core)",
        1e6 / us
    );
    us
}

fn vectors() -> PathBuf {
    std::env::var_os("FENCED_RUN_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"))
}

/// ring against aws-lc-rs, each called directly on the same key, message and signature bytes, for the four
/// operations of `attestation::sig` (RSA-PSS on AMD's real ARK -> ASK signature when the vectors are there).
fn backends(n: u32) {
    use p256::ecdsa::signature::Signer;
    let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("key");
    let msg = vec![0x5a; 632];
    let sig: p256::ecdsa::Signature = sk.sign(&msg);
    let key = sk.verifying_key().to_encoded_point(false);
    let (key, raw) = (key.as_bytes().to_vec(), sig.to_bytes().to_vec());
    time("ECDSA P-256 SHA-256 verify, ring 0.17", n, || {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &key)
            .verify(black_box(&msg), &raw)
            .expect("ok")
    });
    time("ECDSA P-256 SHA-256 verify, aws-lc-rs 1", n, || {
        aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
            &key,
        )
        .verify(black_box(&msg), &raw)
        .expect("ok")
    });
    let sk = p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).expect("key");
    let msg = vec![0xa5; 0x2A0];
    let sig: p384::ecdsa::Signature = sk.sign(&msg);
    let key = sk.verifying_key().to_encoded_point(false);
    let (key, raw) = (key.as_bytes().to_vec(), sig.to_bytes().to_vec());
    time("ECDSA P-384 SHA-384 verify, ring 0.17", n, || {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P384_SHA384_FIXED, &key)
            .verify(black_box(&msg), &raw)
            .expect("ok")
    });
    time("ECDSA P-384 SHA-384 verify, aws-lc-rs 1", n, || {
        aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P384_SHA384_FIXED,
            &key,
        )
        .verify(black_box(&msg), &raw)
        .expect("ok")
    });
    let sk = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
    let msg = vec![0x33; 512];
    let sig = ed25519_dalek::Signer::sign(&sk, &msg).to_bytes();
    let key = sk.verifying_key().to_bytes();
    time("Ed25519 verify, ring 0.17", n, || {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &key)
            .verify(black_box(&msg), &sig)
            .expect("ok")
    });
    time("Ed25519 verify, aws-lc-rs 1", n, || {
        aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ED25519, &key)
            .verify(black_box(&msg), &sig)
            .expect("ok")
    });
    let dir = vectors().join("snp/genoa-v5-oak-oc");
    if !dir.is_dir() {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            &format!("RSA-PSS: {} not found", dir.display()),
        );
        return;
    }
    use x509_parser::prelude::FromDer;
    let pem = |name: &str| {
        x509_parser::pem::parse_x509_pem(&std::fs::read(dir.join(name)).expect("pem"))
            .expect("pem")
            .1
            .contents
    };
    let (ark, ask) = (pem("ark.pem"), pem("ask.pem"));
    let (_, ark) = x509_parser::certificate::X509Certificate::from_der(&ark).expect("ark");
    let (_, ask) = x509_parser::certificate::X509Certificate::from_der(&ask).expect("ask");
    let key: &[u8] = &ark.public_key().subject_public_key.data;
    let tbs = ask.tbs_certificate.as_ref();
    let sig: &[u8] = &ask.signature_value.data;
    time("RSA-4096 PSS SHA-384 verify, ring 0.17", n, || {
        ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PSS_2048_8192_SHA384, key)
            .verify(black_box(tbs), sig)
            .expect("ok")
    });
    time("RSA-4096 PSS SHA-384 verify, aws-lc-rs 1", n, || {
        aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::RSA_PSS_2048_8192_SHA384,
            key,
        )
        .verify(black_box(tbs), sig)
        .expect("ok")
    });
}

fn main() {
    use p256::ecdsa::signature::{Signer, Verifier as _};
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);

    // Signature libraries.
    let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("key");
    let msg = vec![0x5a; 632];
    let sig: p256::ecdsa::Signature = sk.sign(&msg);
    let vk = *sk.verifying_key();
    let key = attestation::sig::P256Key::from_sec1(vk.to_sec1_bytes().as_ref()).expect("pk");
    let raw = sig.to_bytes();
    time(
        "ECDSA P-256 SHA-256 verify, attestation::sig (ring)",
        n,
        || attestation::sig::p256_sha256_fixed(&key, black_box(&msg), &raw).expect("ok"),
    );
    time("ECDSA P-256 SHA-256 verify, RustCrypto p256", n, || {
        vk.verify(black_box(&msg), &sig).expect("ok")
    });
    let sk = p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).expect("key");
    let msg = vec![0xa5; 0x2A0];
    let sig: p384::ecdsa::Signature = sk.sign(&msg);
    let vk = *sk.verifying_key();
    let key = attestation::sig::P384Key::from_sec1(vk.to_sec1_bytes().as_ref()).expect("pk");
    let (r, s) = sig.split_bytes();
    let (r, s): ([u8; 48], [u8; 48]) = (r.into(), s.into());
    time(
        "ECDSA P-384 SHA-384 verify, attestation::sig (aws-lc-rs)",
        n,
        || attestation::sig::p384_sha384_scalars(&key, black_box(&msg), &r, &s).expect("ok"),
    );
    time("ECDSA P-384 SHA-384 verify, RustCrypto p384", n, || {
        vk.verify(black_box(&msg), &sig).expect("ok")
    });
    backends(n);
    let sk = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
    let msg = vec![0x33; 512];
    let esig = ed25519_dalek::Signer::sign(&sk, &msg);
    let pk = sk.verifying_key();
    time(
        "Ed25519 strict verify, attestation::sig (aws-lc-rs + small-order checks)",
        n,
        || {
            attestation::sig::ed25519_strict(&pk.to_bytes(), black_box(&msg), &esig.to_bytes())
                .expect("ok")
        },
    );
    time("Ed25519 verify_strict, ed25519-dalek", n * 20, || {
        pk.verify_strict(black_box(&msg), &esig).expect("ok")
    });

    // SEV-SNP: the real Genoa report with its chain.
    let dir = vectors().join("snp/genoa-v5-oak-oc");
    if dir.is_dir() {
        use verifier_lib::snp::{self, CertBundle, ChainOptions, Policy, SnpInput};
        let report = std::fs::read(dir.join("report.bin")).expect("report");
        let bundle = CertBundle::from_dir(&dir, attestation::snp::SigningKey::Vcek).expect("certs");
        let opts = ChainOptions {
            at: time::macros::datetime!(2026-01-01 00:00 UTC),
            crl: None,
            allow_simulated: false,
        };
        let policy = Policy::default();
        let input = SnpInput {
            report: &report,
            certs: &bundle,
        };
        let ark =
            x509_parser::pem::parse_x509_pem(&std::fs::read(dir.join("ark.pem")).expect("ark"))
                .expect("pem")
                .1
                .contents;
        let ask =
            x509_parser::pem::parse_x509_pem(&std::fs::read(dir.join("ask.pem")).expect("ask"))
                .expect("pem")
                .1
                .contents;
        {
            use x509_parser::prelude::FromDer;
            let (_, ark) = x509_parser::certificate::X509Certificate::from_der(&ark).expect("ark");
            let (_, ask) = x509_parser::certificate::X509Certificate::from_der(&ask).expect("ask");
            let k: &[u8] = &ark.public_key().subject_public_key.data;
            let tbs = ask.tbs_certificate.as_ref();
            let sg: &[u8] = &ask.signature_value.data;
            time(
                "RSA-4096 PSS SHA-384 verify, attestation::sig (aws-lc-rs)",
                n,
                || attestation::sig::rsa_pss_sha384(k, black_box(tbs), sg).expect("ok"),
            );
            time("RSA-4096 PSS SHA-384 verify, RustCrypto rsa", n, || {
                use rsa::pkcs1::DecodeRsaPublicKey;
                use rsa::signature::Verifier;
                let key = rsa::RsaPublicKey::from_pkcs1_der(k).expect("key");
                let v = rsa::pss::VerifyingKey::<sha2::Sha384>::new_with_salt_len(key, 48);
                let s = rsa::pss::Signature::try_from(sg).expect("sig");
                v.verify(black_box(tbs), &s).expect("ok")
            });
        }
        assert!(snp::verify_report_bytes(&input, &opts, &policy)
            .expect("parse")
            .verified());
        time("SNP report, whole verification, chain uncached", n, || {
            black_box(snp::verify_report_bytes(&input, &opts, &policy).expect("parse"));
        });
        let verifier = verifier_lib::Verifier::new();
        time("SNP report, Verifier (chain signatures cached)", n, || {
            black_box(verifier.snp(&input, &opts, &policy).expect("parse"));
        });
    } else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            &format!("{} not found", dir.display()),
        );
    }

    // TDX: the real v4 quote with its collateral.
    let dir = vectors().join("tdx/dcapqvl-v4-b0c06f-uptodate");
    if dir.is_dir() {
        use verifier_lib::tdx::{self, Collateral, VerifyOptions};
        let quote = std::fs::read(dir.join("quote.bin")).expect("quote");
        let coll = Collateral::from_json(&std::fs::read(dir.join("collateral.json")).expect("c"))
            .expect("c");
        let exp: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("e"))
                .expect("e");
        let policy = tdx::Policy::default();
        let opts = VerifyOptions {
            collateral: Some(&coll),
            at: exp["reference_time_unix"].as_i64().expect("t"),
            policy: &policy,
            allow_simulated: false,
        };
        assert!(tdx::verify_quote(&quote, &opts).expect("parse").verified());
        time(
            "TDX quote + collateral, whole verification, uncached",
            n,
            || {
                black_box(tdx::verify_quote(&quote, &opts).expect("parse"));
            },
        );
        let verifier = verifier_lib::Verifier::new();
        time(
            "TDX quote, Verifier (chains and collateral cached)",
            n,
            || {
                black_box(verifier.tdx(&quote, &opts).expect("parse"));
            },
        );
    } else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            &format!("{} not found", dir.display()),
        );
    }
}
