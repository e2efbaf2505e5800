//! TDX quote parsing and the whole authenticity path without collateral: PEM chain, path validation, SGX
//! extensions, signatures (`verify-attestation tdx-quote`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(q) = attestation::tdx::Quote::parse(data) {
        let _ = q.to_bytes();
        let policy = verifier_lib::tdx::Policy::default();
        let opts = verifier_lib::tdx::VerifyOptions {
            collateral: None,
            at: 1_750_000_000,
            policy: &policy,
            allow_simulated: true,
        };
        let _ = verifier_lib::tdx::verify_quote_parsed(q, None, &opts);
    }
});
