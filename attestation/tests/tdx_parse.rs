//! TDX quote parsing over every real vector in `../shared/vectors/tdx`: fields equal `expected.json`, the
//! round trip is byte-exact, trailing bytes are reported, truncation is an error and no input panics.

use attestation::tdx::{CertificationData, PckCertData, Quote, QuoteBody, QuoteError};
use proptest::prelude::*;
use std::path::PathBuf;

fn vectors_dir() -> Option<PathBuf> {
    attestation::vectors::dir("tdx")
}

/// Every vector folder: (name, quote bytes, expected.json).
fn vectors() -> Vec<(String, Vec<u8>, serde_json::Value)> {
    let Some(dir) = vectors_dir() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("read vectors dir")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        if !p.join("quote.bin").is_file() {
            continue;
        }
        let quote = std::fs::read(p.join("quote.bin")).expect("quote.bin");
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(p.join("expected.json")).expect("expected.json"))
                .expect("json");
        out.push((
            e.file_name().to_string_lossy().into_owned(),
            quote,
            expected,
        ));
    }
    assert!(!out.is_empty(), "no vector folders in {}", dir.display());
    out
}

fn s(v: &serde_json::Value, k: &str) -> String {
    v[k].as_str()
        .unwrap_or_else(|| panic!("{k} missing"))
        .to_owned()
}

#[test]
fn tdx_vectors_parse_fields_and_round_trip() {
    for (name, bytes, exp) in vectors() {
        let q = Quote::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            q.to_bytes().expect("serialise"),
            bytes,
            "{name}: round trip"
        );
        assert_eq!(
            u64::from(q.header.version),
            exp["quote_version"].as_u64().expect("version"),
            "{name}"
        );
        assert_eq!(
            format!("{:#x}", q.header.tee_type),
            s(&exp, "tee_type"),
            "{name}"
        );
        let (body_type, size) = match &q.body {
            QuoteBody::Td10(_) => ("td10", 584),
            QuoteBody::Td15(_) => ("td15", 648),
        };
        assert_eq!(body_type, s(&exp, "body_type"), "{name}");
        assert_eq!(size, exp["body_size"].as_u64().expect("size"), "{name}");
        assert_eq!(
            q.signed_bytes().len() as u64,
            exp["signed_region_len"].as_u64().expect("len"),
            "{name}"
        );
        assert_eq!(
            q.trailing.len() as u64,
            exp["trailing_bytes_after_sig_data"].as_u64().expect("t"),
            "{name}"
        );
        assert_eq!(
            q.trailing_nonzero(),
            exp["trailing_bytes_nonzero"].as_bool().expect("nz"),
            "{name}"
        );
        assert_eq!(
            hex::encode(q.signature_data.attestation_key),
            s(&exp, "attestation_pubkey"),
            "{name}"
        );
        let h = &exp["header"];
        assert_eq!(
            u64::from(q.header.qe_svn),
            h["qe_svn"].as_u64().expect("qe_svn"),
            "{name}"
        );
        assert_eq!(
            hex::encode(q.header.qe_vendor_id),
            s(h, "qe_vendor_id"),
            "{name}"
        );
        assert_eq!(hex::encode(q.header.user_data), s(h, "user_data"), "{name}");

        let f = &exp["fields"];
        let td = q.td();
        assert_eq!(hex::encode(td.mrtd), s(f, "mrtd"), "{name}");
        for (i, r) in td.rtmr.iter().enumerate() {
            assert_eq!(hex::encode(r), s(f, &format!("rtmr{i}")), "{name} rtmr{i}");
        }
        assert_eq!(hex::encode(td.report_data), s(f, "report_data"), "{name}");
        assert_eq!(hex::encode(td.mr_config_id), s(f, "mr_config_id"), "{name}");
        assert_eq!(
            hex::encode(td.td_attributes),
            s(f, "td_attributes"),
            "{name}"
        );
        assert_eq!(hex::encode(td.xfam), s(f, "xfam"), "{name}");
        assert_eq!(hex::encode(td.tee_tcb_svn), s(f, "tee_tcb_svn"), "{name}");
        assert_eq!(hex::encode(td.mr_seam), s(f, "mr_seam"), "{name}");
        assert_eq!(
            hex::encode(td.mr_signer_seam),
            s(f, "mr_signer_seam"),
            "{name}"
        );
        assert_eq!(
            hex::encode(td.seam_attributes),
            s(f, "seam_attributes"),
            "{name}"
        );
        assert_eq!(hex::encode(td.mr_owner), s(f, "mr_owner"), "{name}");
        assert_eq!(
            hex::encode(td.mr_owner_config),
            s(f, "mr_owner_config"),
            "{name}"
        );
        let flags = &exp["policy_flags"];
        let attrs = td.attributes();
        assert_eq!(
            attrs.debug(),
            flags["td_attributes_debug"].as_bool().expect("debug"),
            "{name}"
        );
        assert_eq!(
            attrs.sept_ve_disable(),
            flags["td_attributes_sept_ve_disable"]
                .as_bool()
                .expect("sept"),
            "{name}"
        );
        assert_eq!(
            attrs.pks(),
            flags["td_attributes_pks"].as_bool().expect("pks"),
            "{name}"
        );
        assert_eq!(
            attrs.perfmon(),
            flags["td_attributes_perfmon"].as_bool().expect("perfmon"),
            "{name}"
        );
        if let Some(nz) = flags["mr_service_td_nonzero"].as_bool() {
            let td15 = q.body.td15().expect("mr_service_td_nonzero only for TD15");
            assert_eq!(td15.mr_servicetd.iter().any(|b| *b != 0), nz, "{name}");
        }

        let CertificationData::QeReport(c) = &q.signature_data.certification else {
            panic!("{name}: certification data is not type 6");
        };
        assert_eq!(exp["outer_cert_data_type"].as_u64(), Some(6), "{name}");
        assert!(
            matches!(c.pck, PckCertData::PemChain(_)),
            "{name}: inner type"
        );
        assert_eq!(exp["inner_cert_data_type"].as_u64(), Some(5), "{name}");
        assert_eq!(
            c.qe_auth_data.len() as u64,
            exp["qe_auth_data_len"].as_u64().expect("auth"),
            "{name}"
        );
        let qr = &exp["qe_report"];
        assert_eq!(
            hex::encode(c.qe_report.mr_signer),
            s(qr, "mr_signer"),
            "{name}"
        );
        assert_eq!(
            hex::encode(c.qe_report.mr_enclave),
            s(qr, "mr_enclave"),
            "{name}"
        );
        assert_eq!(
            u64::from(c.qe_report.isv_prod_id),
            qr["isv_prod_id"].as_u64().expect("prod"),
            "{name}"
        );
        assert_eq!(
            u64::from(c.qe_report.isv_svn),
            qr["isv_svn"].as_u64().expect("svn"),
            "{name}"
        );
        assert_eq!(
            hex::encode(c.qe_report.misc_select.to_le_bytes()),
            s(qr, "misc_select"),
            "{name}"
        );
        assert_eq!(
            hex::encode(c.qe_report.attributes),
            s(qr, "attributes"),
            "{name}"
        );
        assert_eq!(hex::encode(c.qe_report.cpu_svn), s(qr, "cpu_svn"), "{name}");
        let sig_len = bytes.len() - q.signed_bytes().len() - 4 - q.trailing.len();
        assert_eq!(
            sig_len as u64,
            exp["sig_data_len"].as_u64().expect("sig len"),
            "{name}"
        );
        assert!(
            q.pck_chain_pem()
                .expect("chain")
                .starts_with(b"-----BEGIN CERTIFICATE-----"),
            "{name}"
        );
    }
}

#[test]
fn tdx_trailing_bytes_do_not_change_the_parse() {
    for (name, bytes, _) in vectors() {
        let q = Quote::parse(&bytes).expect("parse");
        let end = bytes.len() - q.trailing.len();
        let bare = Quote::parse(&bytes[..end]).expect("parse without trailing bytes");
        assert!(bare.trailing.is_empty(), "{name}");
        let mut extra = bytes[..end].to_vec();
        extra.extend_from_slice(b"\nanything at all\n");
        let more = Quote::parse(&extra).expect("parse with other trailing bytes");
        assert_eq!(more.trailing, b"\nanything at all\n", "{name}");
        for other in [bare, more] {
            assert_eq!(other.header, q.header, "{name}");
            assert_eq!(other.body, q.body, "{name}");
            assert_eq!(other.signature_data, q.signature_data, "{name}");
        }
    }
}

#[test]
fn tdx_truncated_quote_is_an_error_naming_field_and_offset() {
    for (name, bytes, _) in vectors() {
        let q = Quote::parse(&bytes).expect("parse");
        let end = bytes.len() - q.trailing.len();
        // Every cut inside the announced structure must fail, and say which field at which offset.
        for cut in (0..end).step_by(7).chain([end - 1, 47, 48, 631, 632]) {
            if cut >= end {
                continue;
            }
            match Quote::parse(&bytes[..cut]) {
                Err(QuoteError::Truncated {
                    field,
                    offset,
                    needed,
                    available,
                }) => {
                    assert!(!field.is_empty(), "{name}");
                    assert!(offset <= cut, "{name}: offset {offset} beyond cut {cut}");
                    assert!(available < needed, "{name}");
                    let msg = QuoteError::Truncated {
                        field,
                        offset,
                        needed,
                        available,
                    }
                    .to_string();
                    assert!(
                        msg.contains(field) && msg.contains(&offset.to_string()),
                        "{msg}"
                    );
                }
                other => panic!("{name}: cut at {cut} gave {other:?}"),
            }
        }
    }
}

#[test]
fn tdx_wrong_header_values_are_named() {
    for (_, bytes, _) in vectors().into_iter().take(1) {
        let mut b = bytes.clone();
        b[0] = 3;
        assert_eq!(Quote::parse(&b), Err(QuoteError::UnsupportedVersion(3)));
        let mut b = bytes.clone();
        b[2] = 3;
        assert_eq!(Quote::parse(&b), Err(QuoteError::UnsupportedKeyType(3)));
        let mut b = bytes.clone();
        b[4] = 0;
        assert_eq!(Quote::parse(&b), Err(QuoteError::UnsupportedTeeType(0)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn tdx_parse_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..6000)) {
        let _ = Quote::parse(&bytes);
    }

    #[test]
    fn tdx_parse_never_panics_on_mutated_headers(
        version in prop_oneof![Just(4u16), Just(5u16), any::<u16>()],
        body_type in any::<u16>(),
        lens in proptest::collection::vec(any::<u32>(), 4),
        tail in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        let mut b = Vec::new();
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&0x81u32.to_le_bytes());
        b.resize(48, 0);
        if version == 5 {
            b.extend_from_slice(&body_type.to_le_bytes());
            b.extend_from_slice(&lens[0].to_le_bytes());
        }
        b.resize(b.len() + 584, 0);
        b.extend_from_slice(&lens[1].to_le_bytes());
        b.extend_from_slice(&tail);
        if let Ok(q) = Quote::parse(&b) {
            prop_assert_eq!(q.to_bytes().expect("serialise"), b);
        }
    }
}

#[test]
fn tdx_mutated_real_quotes_never_panic_and_round_trip() {
    for (_, bytes, _) in vectors() {
        // Flip each length field and a spread of other bytes; whatever parses must round trip.
        for i in (0..bytes.len().min(5200)).step_by(3) {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= x;
                if let Ok(q) = Quote::parse(&b) {
                    assert_eq!(q.to_bytes().expect("serialise"), b);
                }
            }
        }
    }
}
