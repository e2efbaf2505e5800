//! SEV-SNP report parser against the real vectors in `../shared/vectors/snp` (fields, byte-exact round trip),
//! and property tests: arbitrary bytes never panic, valid reports round-trip.

use attestation::snp::{AttestationReport, Product, ReportError, REPORT_LEN, SUPPORTED_VERSIONS};
use proptest::prelude::*;
use std::path::PathBuf;

fn vectors_dir() -> Option<PathBuf> {
    attestation::vectors::dir("snp")
}

fn hex_u64(v: &serde_json::Value) -> u64 {
    let s = v.as_str().expect("hex u64 string");
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex u64")
}

#[test]
fn every_vector_parses_to_expected_fields_and_round_trips() {
    let Some(dir) = vectors_dir() else { return };
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("read vectors dir") {
        let path = entry.expect("dir entry").path();
        let report_path = path.join("report.bin");
        if !report_path.is_file() {
            continue;
        }
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let bytes = std::fs::read(&report_path).expect("read report");
        let exp: serde_json::Value = serde_json::from_slice(
            &std::fs::read(path.join("expected.json")).expect("expected.json"),
        )
        .expect("json");
        let f = &exp["fields"];
        let report = match AttestationReport::from_bytes(&bytes) {
            Ok(r) => r,
            Err(e) => {
                // Only a negative vector whose flipped byte lies in a must-be-zero range may fail to parse.
                assert!(exp.get("negative").is_some(), "{name}: {e}");
                assert!(
                    matches!(e, ReportError::NonZeroReserved { .. }),
                    "{name}: {e}"
                );
                let off = exp["negative"]["report_offset"].as_u64().or_else(|| {
                    let m = exp["negative"]["modification"].as_str()?;
                    let i = m.find("0x")?;
                    u64::from_str_radix(m[i + 2..].split_whitespace().next()?, 16).ok()
                });
                if let (Some(off), ReportError::NonZeroReserved { start, end, .. }) = (off, &e) {
                    assert!(
                        (*start as u64..*end as u64).contains(&off),
                        "{name}: {e} vs offset {off:#x}"
                    );
                }
                seen += 1;
                continue;
            }
        };
        assert_eq!(
            report.to_bytes().as_slice(),
            bytes.as_slice(),
            "{name}: round trip"
        );
        assert_eq!(
            u64::from(report.version),
            exp["report_version"].as_u64().expect("version"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.measurement),
            f["measurement"].as_str().expect("m"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.report_data),
            f["report_data"].as_str().expect("rd"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.chip_id),
            f["chip_id"].as_str().expect("chip"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.host_data),
            f["host_data"].as_str().expect("hd"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.family_id),
            f["family_id"].as_str().expect("fam"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.image_id),
            f["image_id"].as_str().expect("img"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.report_id),
            f["report_id"].as_str().expect("rid"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.id_key_digest),
            f["id_key_digest"].as_str().expect("idk"),
            "{name}"
        );
        assert_eq!(
            hex::encode(report.author_key_digest),
            f["author_key_digest"].as_str().expect("ak"),
            "{name}"
        );
        assert_eq!(report.policy.0, hex_u64(&f["policy"]), "{name}");
        assert_eq!(report.reported_tcb.0, hex_u64(&f["reported_tcb"]), "{name}");
        assert_eq!(report.current_tcb.0, hex_u64(&f["current_tcb"]), "{name}");
        assert_eq!(
            report.committed_tcb.0,
            hex_u64(&f["committed_tcb"]),
            "{name}"
        );
        assert_eq!(report.launch_tcb.0, hex_u64(&f["launch_tcb"]), "{name}");
        assert_eq!(
            report.platform_info.0,
            hex_u64(&f["platform_info"]),
            "{name}"
        );
        assert_eq!(
            u64::from(report.key_info.to_u32()),
            hex_u64(&f["key_info"]),
            "{name}"
        );
        assert_eq!(
            u64::from(report.vmpl),
            f["vmpl"].as_u64().expect("vmpl"),
            "{name}"
        );
        assert_eq!(
            u64::from(report.guest_svn),
            f["guest_svn"].as_u64().expect("svn"),
            "{name}"
        );
        assert_eq!(
            u64::from(report.signature_algo),
            f["signature_algo"].as_u64().expect("alg"),
            "{name}"
        );
        let cpuid = report.cpuid.unwrap_or_default();
        assert_eq!(
            u64::from(cpuid.family),
            f["cpuid_fam_id"].as_u64().expect("fam"),
            "{name}"
        );
        assert_eq!(
            u64::from(cpuid.model),
            f["cpuid_mod_id"].as_u64().expect("mod"),
            "{name}"
        );
        assert_eq!(
            u64::from(cpuid.stepping),
            f["cpuid_step"].as_u64().expect("step"),
            "{name}"
        );
        assert_eq!(report.cpuid.is_some(), report.version >= 3, "{name}");
        assert_eq!(
            report.current_fw.to_string(),
            f["current_fw"].as_str().expect("fw"),
            "{name}"
        );
        assert_eq!(
            report.committed_fw.to_string(),
            f["committed_fw"].as_str().expect("cfw"),
            "{name}"
        );
        let mit = |v: Option<u64>| v.map(|x| format!("0x{x:016x}"));
        assert_eq!(
            mit(report.launch_mit_vector).as_deref(),
            f["launch_mit_vector"].as_str(),
            "{name}"
        );
        assert_eq!(
            mit(report.current_mit_vector).as_deref(),
            f["current_mit_vector"].as_str(),
            "{name}"
        );
        assert_eq!(
            report.key_info.signing_key.name(),
            exp["signing_key"].as_str().expect("key"),
            "{name}"
        );
        let product =
            Product::from_name(exp["product"].as_str().expect("product")).expect("known product");
        if let Some(p) = report.product_from_cpuid() {
            assert_eq!(p, product, "{name}: product from CPUID");
        }
        let d = report.reported_tcb.decode(product);
        let e = &exp["reported_tcb_decoded"];
        assert_eq!(
            u64::from(d.bootloader),
            e["bootloader"].as_u64().expect("bl"),
            "{name}"
        );
        assert_eq!(u64::from(d.tee), e["tee"].as_u64().expect("tee"), "{name}");
        assert_eq!(u64::from(d.snp), e["snp"].as_u64().expect("snp"), "{name}");
        assert_eq!(
            u64::from(d.microcode),
            e["microcode"].as_u64().expect("uc"),
            "{name}"
        );
        seen += 1;
    }
    assert!(
        seen >= 20,
        "expected at least 20 report vectors, saw {seen}"
    );
}

fn valid_report() -> impl Strategy<Value = AttestationReport> {
    (
        prop::sample::select(SUPPORTED_VERSIONS.to_vec()),
        any::<u64>(),
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
        any::<u64>(),
        (
            0u32..4,
            any::<bool>(),
            any::<bool>(),
            prop::sample::select(vec![0u8, 1, 7]),
        ),
        any::<[u8; 32]>(),
    )
        .prop_map(
            |(version, policy, rd, chip, tcb, (vmpl, mask, author, key), sig)| {
                let mut r = AttestationReport::new(version);
                r.policy.0 = policy;
                r.report_data[..32].copy_from_slice(&rd);
                r.chip_id[..32].copy_from_slice(&chip);
                r.reported_tcb.0 = tcb;
                r.current_tcb.0 = tcb.rotate_left(8);
                r.vmpl = vmpl;
                r.key_info = attestation::snp::KeyInfo::from_u32(
                    u32::from(key) << 2 | u32::from(mask) << 1 | u32::from(author),
                )
                .expect("valid key info");
                if let Some(c) = r.cpuid.as_mut() {
                    c.family = rd[0];
                    c.model = rd[1];
                    c.stepping = rd[2];
                }
                if r.version >= 5 {
                    r.launch_mit_vector = Some(tcb ^ 1);
                    r.current_mit_vector = Some(tcb ^ 2);
                }
                let mut s48 = [0u8; 48];
                s48[..32].copy_from_slice(&sig);
                r.set_signature_p384(&s48, &s48);
                r
            },
        )
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = AttestationReport::from_bytes(&bytes);
    }

    #[test]
    fn arbitrary_report_sized_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), REPORT_LEN), v in 0u32..8) {
        bytes[..4].copy_from_slice(&v.to_le_bytes());
        if let Ok(r) = AttestationReport::from_bytes(&bytes) {
            prop_assert_eq!(r.to_bytes().to_vec(), bytes);
        }
    }

    #[test]
    fn valid_reports_round_trip(r in valid_report()) {
        let bytes = r.to_bytes();
        let parsed = AttestationReport::from_bytes(&bytes).expect("valid report parses");
        prop_assert_eq!(&parsed, &r);
        prop_assert_eq!(parsed.to_bytes(), bytes);
    }

    #[test]
    fn truncated_or_oversized_reports_are_length_errors(r in valid_report(), cut in 1usize..REPORT_LEN, extra in 1usize..64) {
        let bytes = r.to_bytes();
        prop_assert_eq!(AttestationReport::from_bytes(&bytes[..REPORT_LEN - cut]), Err(ReportError::WrongLength { len: REPORT_LEN - cut }));
        let mut long = bytes.to_vec();
        long.extend(std::iter::repeat_n(0u8, extra));
        prop_assert_eq!(AttestationReport::from_bytes(&long), Err(ReportError::WrongLength { len: REPORT_LEN + extra }));
    }
}
