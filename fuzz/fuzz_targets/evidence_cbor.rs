//! Evidence CBOR (and the verdict COSE_Sign1 and CBOR inside it), then the whole evidence verification.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = attestation::verdict::Verdict::from_cbor(data);
    if let Ok(ev) = attestation::evidence::Evidence::from_cbor(data) {
        let opts = verifier_lib::evidence::EvidenceOptions {
            any_measurement: true,
            ..Default::default()
        };
        let _ = verifier_lib::evidence::verify_evidence(&ev, &opts);
    }
});
