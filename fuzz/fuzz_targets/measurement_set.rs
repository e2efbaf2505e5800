//! Measurement sets and their signature files (TOML), as `verify-attestation --measurements` and
//! `measure-guest verify-set` read them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = std::path::Path::new("fuzz.toml");
    if let Ok(set) = measurements::set::MeasurementSet::from_toml(text, path) {
        let _ = set.to_toml();
    }
    let _ = measurements::set::SignatureFile::from_toml(text, path);
});
