//! TDX collateral (`collateral.json`: JSON, hex CRLs, PEM chains, TCB Info and QE Identity bodies).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(c) = verifier_lib::tdx::Collateral::from_json(data) {
        let _ = c.used(verifier_lib::tdx::CollateralSource::Given);
    }
});
