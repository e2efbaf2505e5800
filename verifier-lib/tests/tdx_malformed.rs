//! Malformed TDX quotes and collateral give errors or failures, never a panic (proptest over garbage and
//! over mutations of real quotes and collateral, including the PEM chain, CRLs and the signed JSON).

use proptest::prelude::*;
use verifier_lib::tdx::{verify_quote, Collateral, Policy, VerifyOptions};

fn vector() -> Option<(Vec<u8>, serde_json::Value, i64)> {
    let dir = attestation::vectors::dir("tdx/dcapqvl-v4-b0c06f-uptodate")?;
    let q = std::fs::read(dir.join("quote.bin")).expect("quote");
    let c = serde_json::from_slice(&std::fs::read(dir.join("collateral.json")).expect("c"))
        .expect("json");
    let e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("e")).expect("j");
    Some((q, c, e["reference_time_unix"].as_i64().expect("t")))
}

fn verify_all(quote: &[u8], coll: Option<&Collateral>, at: i64) {
    let policy = Policy::default();
    let opts = VerifyOptions {
        collateral: coll,
        at,
        policy: &policy,
        allow_simulated: true,
    };
    if let Ok(r) = verify_quote(quote, &opts) {
        // A mutated input may still verify only if nothing that is signed changed; never panic either way.
        let _ = r.verified();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn tdx_garbage_collateral_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = Collateral::from_json(&bytes);
    }

    #[test]
    fn tdx_mutated_collateral_never_panics(
        field in 0usize..9,
        pos in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        truncate in any::<bool>(),
    ) {
        let Some((quote, coll, at)) = vector() else { return Ok(()) };
        let keys = [
            "pck_crl_issuer_chain", "root_ca_crl", "pck_crl", "tcb_info_issuer_chain", "tcb_info",
            "tcb_info_signature", "qe_identity_issuer_chain", "qe_identity", "qe_identity_signature",
        ];
        let mut c = coll.clone();
        let s = c[keys[field]].as_str().expect("string").as_bytes().to_vec();
        let i = pos.index(s.len());
        let mut m = s.clone();
        if truncate { m.truncate(i) } else { m[i] = byte }
        c[keys[field]] = serde_json::Value::String(String::from_utf8_lossy(&m).into_owned());
        if let Ok(parsed) = Collateral::from_json(serde_json::to_string(&c).expect("json").as_bytes()) {
            verify_all(&quote, Some(&parsed), at);
        }
    }

    #[test]
    fn tdx_mutated_quote_signature_data_never_panics(
        pos in 632usize..5006,
        byte in any::<u8>(),
        cut in proptest::option::of(632usize..5006),
    ) {
        let Some((quote, coll, at)) = vector() else { return Ok(()) };
        let parsed = Collateral::from_json(serde_json::to_string(&coll).expect("json").as_bytes()).expect("collateral");
        let mut q = quote.clone();
        q[pos] = byte;
        if let Some(c) = cut { q.truncate(c) }
        verify_all(&q, Some(&parsed), at);
    }
}

/// An edit of the TCB Info JSON.
type Edit = Box<dyn Fn(&mut serde_json::Value)>;

#[test]
fn tdx_hostile_tcb_info_shapes_never_panic() {
    let Some((quote, coll, at)) = vector() else {
        return;
    };
    let mut info: serde_json::Value =
        serde_json::from_str(coll["tcb_info"].as_str().expect("s")).expect("json");
    let variants: Vec<Edit> = vec![
        Box::new(|v| v["tcbLevels"] = serde_json::json!([])),
        Box::new(|v| {
            v["tcbLevels"][0]["tcb"]["sgxtcbcomponents"] = serde_json::json!([{ "svn": 1 }])
        }),
        Box::new(|v| v["tcbLevels"][0]["tcb"]["tdxtcbcomponents"] = serde_json::json!([])),
        Box::new(|v| v["tdxModuleIdentities"] = serde_json::json!([])),
        Box::new(|v| v["tdxModuleIdentities"][0]["tcbLevels"] = serde_json::json!([])),
        Box::new(|v| v["tdxModule"]["attributesMask"] = serde_json::json!("zz")),
        Box::new(|v| v["fmspc"] = serde_json::json!("not hex")),
        Box::new(|v| v["nextUpdate"] = serde_json::json!("yesterday")),
        Box::new(|v| v["tcbLevels"][0]["tcbStatus"] = serde_json::json!("Bogus")),
    ];
    let policy = Policy::default();
    for (i, f) in variants.iter().enumerate() {
        let mut v = info.clone();
        f(&mut v);
        let mut c = coll.clone();
        c["tcb_info"] = serde_json::Value::String(v.to_string());
        let parsed = Collateral::from_json(c.to_string().as_bytes()).expect("still the layout");
        let opts = VerifyOptions {
            collateral: Some(&parsed),
            at,
            policy: &policy,
            allow_simulated: false,
        };
        let r = verify_quote(&quote, &opts).expect("quote parses");
        // The text changed, so the TCB Info signature must fail whatever else happens.
        assert!(
            r.failed("tcb-info-signature"),
            "variant {i}: {:?}",
            r.failures
        );
    }
    info["tcbLevels"] = serde_json::json!("not a list");
    let mut c = coll.clone();
    c["tcb_info"] = serde_json::Value::String(info.to_string());
    assert!(Collateral::from_json(c.to_string().as_bytes()).is_err());
}
