//! Bytes after a TDX quote's signature data are unsigned and must not change the verdict: every real vector is
//! verified as it is, with its trailing bytes removed and with 64 junk bytes appended, and the failures, TCB
//! evaluation and verdict are identical.

use verifier_lib::tdx::{verify_quote, Collateral, Policy, VerifyOptions};

#[test]
fn tdx_trailing_bytes_do_not_change_failures_or_tcb_status() {
    let Some(names) = attestation::vectors::cases("tdx", "quote.bin") else {
        return;
    };
    assert!(!names.is_empty(), "no TDX vectors");
    let policy = Policy::default();
    let mut with_trailing = 0;
    for d in &names {
        let n = d.display();
        let quote = std::fs::read(d.join("quote.bin")).expect("quote.bin");
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("expected.json")).expect("expected"))
                .expect("json");
        let collateral =
            Collateral::from_json(&std::fs::read(d.join("collateral.json")).expect("collateral"))
                .unwrap_or_else(|e| panic!("{n}: {e}"));
        let opts = VerifyOptions {
            collateral: Some(&collateral),
            at: expected["reference_time_unix"]
                .as_i64()
                .expect("reference_time_unix"),
            policy: &policy,
            allow_simulated: false,
        };
        let as_is = verify_quote(&quote, &opts).unwrap_or_else(|e| panic!("{n}: {e}"));
        let trailing = as_is.quote.trailing.len();
        assert_eq!(
            Some(trailing as u64),
            expected["trailing_bytes_after_sig_data"].as_u64(),
            "{n}: trailing bytes"
        );
        if trailing > 0 {
            with_trailing += 1;
        }
        let stripped = &quote[..quote.len() - trailing];
        let mut junk = quote.clone();
        junk.extend((0..64u8).map(|i| 0xa5 ^ i.wrapping_mul(37)));
        for (what, bytes) in [("stripped", stripped.to_vec()), ("junk appended", junk)] {
            let v = verify_quote(&bytes, &opts).unwrap_or_else(|e| panic!("{n} {what}: {e}"));
            assert_eq!(v.failures, as_is.failures, "{n} {what}: failures");
            assert_eq!(v.tcb, as_is.tcb, "{n} {what}: TCB evaluation");
            assert_eq!(v.tcb_status(), as_is.tcb_status(), "{n} {what}: TCB status");
            assert_eq!(v.verified(), as_is.verified(), "{n} {what}: verdict");
            let want_trailing = if what == "stripped" { 0 } else { trailing + 64 };
            assert_eq!(v.quote.trailing.len(), want_trailing, "{n} {what}");
        }
    }
    assert!(
        with_trailing > 0,
        "no vector has trailing bytes: the stripped case tests nothing"
    );
}
