//! Mutation sweep over the real SEV-SNP vectors: flipping any byte of the signed part of a report, or of the
//! tbsCertificate of a VCEK/VLEK, ASK/ASVK or ARK, is rejected and the right check is named.

mod snp_common;

use attestation::snp::{AttestationReport, ReportError, SIGNED_LEN};
use sha2::{Digest, Sha256};
use snp_common::{report_vectors, snp_vectors, Vector};
use std::collections::HashSet;
use verifier_lib::snp::chain::checks;
use verifier_lib::snp::{verify_chain, verify_report_with_chain, CertBundle, ChainOptions, Policy};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Positive vectors with one representative per (product, version, signing key) first.
fn positives(snp: &std::path::Path) -> Vec<Vector> {
    report_vectors(snp)
        .into_iter()
        .filter(|v| {
            !v.is_negative()
                && v.expected["signature_valid"] == true
                && v.expected["chain_valid"] == true
        })
        .collect()
}

#[test]
fn flipping_any_signed_report_byte_is_rejected() {
    let Some(snp) = snp_vectors() else { return };
    let mut seen_kinds = HashSet::new();
    let mut reports = 0;
    for v in positives(&snp) {
        let kind = (
            v.expected["product"].to_string(),
            v.expected["report_version"].to_string(),
            v.signing_key(),
        );
        // Every signed byte of every report (the chain is checked once per report and reused).
        seen_kinds.insert(kind);
        let (start, step) = (0, 1);
        reports += 1;
        let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("bundle");
        let original = AttestationReport::from_bytes(&v.report).expect("parse");
        let opts = ChainOptions {
            at: v.at(),
            crl: None,
            allow_simulated: false,
        };
        let chain = verify_chain(&bundle, &opts, original.product_from_cpuid());
        let policy = Policy {
            allow_debug: true,
            allow_migration_agent: true,
            ..Policy::default()
        };
        assert!(
            verify_report_with_chain(&original, &chain, &policy).verified(),
            "{}",
            v.name
        );
        for off in (start..SIGNED_LEN).step_by(step) {
            let mut bytes = v.report.clone();
            bytes[off] ^= 0x01;
            match AttestationReport::from_bytes(&bytes) {
                Ok(r) => {
                    let res = verify_report_with_chain(&r, &chain, &policy);
                    assert!(
                        res.failures
                            .iter()
                            .any(|f| f.check == checks::REPORT_SIGNATURE),
                        "{} offset {off:#05x}: not rejected by the signature check: {:?}",
                        v.name,
                        res.failures
                    );
                }
                // A flipped VERSION changes the layout, so any parse error is right there.
                Err(_) if off < 4 => {}
                Err(ReportError::NonZeroReserved { start, end, .. }) => {
                    assert!(
                        (start..end).contains(&off),
                        "{} offset {off:#05x}: wrong range",
                        v.name
                    )
                }
                Err(ReportError::BadKeyInfo { .. }) => {
                    assert!((0x48..0x4C).contains(&off), "{} offset {off:#05x}", v.name)
                }
                Err(e) => panic!("{} offset {off:#05x}: unexpected error {e}", v.name),
            }
        }
    }
    assert!(reports >= 15, "only {reports} positive reports");
}

/// The byte range of the tbsCertificate inside a DER certificate.
fn tbs_range(der: &[u8]) -> std::ops::Range<usize> {
    let (_, cert) = X509Certificate::from_der(der).expect("cert parses");
    let tbs = cert.tbs_certificate.as_ref();
    let start = tbs.as_ptr() as usize - der.as_ptr() as usize;
    start..start + tbs.len()
}

#[test]
fn flipping_any_tbs_byte_of_any_certificate_is_rejected() {
    let Some(snp) = snp_vectors() else { return };
    let mut done = HashSet::new();
    let mut full_sweeps = 0;
    for v in positives(&snp) {
        let bundle = CertBundle::from_dir(&v.dir, v.signing_key()).expect("bundle");
        let report = AttestationReport::from_bytes(&v.report).expect("parse");
        let opts = ChainOptions {
            at: v.at(),
            crl: None,
            allow_simulated: false,
        };
        let policy = Policy {
            allow_debug: true,
            allow_migration_agent: true,
            ..Policy::default()
        };
        for (which, accepted) in [
            ("leaf", &[checks::LEAF_SIGNATURE, checks::CERT_PARSE][..]),
            (
                "intermediate",
                &[checks::INTERMEDIATE_SIGNATURE, checks::CERT_PARSE][..],
            ),
            // The ARK: a flip in its key breaks the pin (root), anywhere else its self-signature.
            (
                "ark",
                &[checks::ROOT, checks::ARK_SIGNATURE, checks::CERT_PARSE][..],
            ),
        ] {
            let der = match which {
                "leaf" => &bundle.leaf,
                "intermediate" => &bundle.intermediate,
                _ => &bundle.ark,
            };
            if !done.insert(Sha256::digest(der).to_vec()) {
                continue;
            }
            // Every byte of every distinct certificate's tbsCertificate.
            let step = 1;
            full_sweeps += 1;
            for off in tbs_range(der).step_by(step) {
                let mut b = bundle.clone();
                let target = match which {
                    "leaf" => &mut b.leaf,
                    "intermediate" => &mut b.intermediate,
                    _ => &mut b.ark,
                };
                target[off] ^= 0x01;
                let chain = verify_chain(&b, &opts, report.product_from_cpuid());
                let res = verify_report_with_chain(&report, &chain, &policy);
                assert!(
                    res.failures
                        .iter()
                        .any(|f| accepted.iter().any(|c| f.check == *c)),
                    "{} {which} offset {off:#x}: not rejected by {accepted:?}: {:?}",
                    v.name,
                    res.failures
                );
            }
        }
    }
    assert!(full_sweeps >= 2, "no full sweep ran");
}
