//! SEV-SNP ATTESTATION_REPORT parsing and its write-back (`verify-attestation snp-report`, evidence).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(r) = attestation::snp::AttestationReport::from_bytes(data) {
        assert_eq!(
            &r.to_bytes()[..],
            data,
            "a parsed report writes back byte for byte"
        );
    }
});
