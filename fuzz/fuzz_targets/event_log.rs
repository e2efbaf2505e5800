//! CCEL / TCG2 event log replay (`measure-guest tdx --event-log`, `verify-attestation tdx-quote --event-log`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = measurements::tdx::replay_rtmrs(data);
});
