//! Warm against cold cache: verifying a real TDX quote (dcapqvl-v4-b0c06f-uptodate) with collateral fetched
//! from a loopback fake PCS that answers each request after a fixed delay, once with an empty cache per run
//! (four requests) and once with the cache already filled (none). A bench binary: prints mean and min per
//! run; the numbers and the command are in docs/benchmarks.md.

#[path = "../tests/collateral_common/mod.rs"]
mod collateral_common;

use collateral_common::*;
use std::time::{Duration, Instant};
use verifier_lib::collateral::cache::Cache;
use verifier_lib::collateral::pcs::QuoteNeeds;

fn verify(tv: &PcsVector, json: &[u8]) {
    let coll = verifier_lib::tdx::Collateral::from_json(json).expect("collateral");
    let policy = verifier_lib::tdx::Policy::default();
    let opts = verifier_lib::tdx::VerifyOptions {
        collateral: Some(&coll),
        at: tv.reference_time,
        policy: &policy,
        allow_simulated: false,
    };
    let r = verifier_lib::tdx::verify_quote(&tv.quote, &opts).expect("quote");
    assert!(r.verified(), "{:?}", r.failures);
}

fn main() {
    let Some(v) = vectors() else { return };
    let delay_ms: u64 = std::env::var("DELAY_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let runs: u32 = std::env::var("RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let tv = tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let srv = FakeServer::start();
    let d = Duration::from_millis(delay_ms);
    srv.route(&tcb_route(&tv.fmspc), vec![tv.tcb_reply().delay(d)]);
    srv.route(QE_ROUTE, vec![tv.qe_reply().delay(d)]);
    srv.route(PCK_CRL_ROUTE, vec![tv.pck_crl_reply().delay(d)]);
    srv.route(ROOT_CRL_ROUTE, vec![tv.root_crl_reply().delay(d)]);
    let http = client(Duration::from_secs(10), 0);
    let needs = QuoteNeeds::of_quote(&tv.quote).expect("needs");
    let report = |name: &str, warm: bool| {
        let warm_dir = tempfile::tempdir().expect("tmp");
        let warm_cache = Cache::new(warm_dir.path());
        if warm {
            pcs(&http, &srv, Some(&warm_cache))
                .for_quote(&needs, tv.reference_time)
                .expect("fill");
        }
        let mut times = Vec::new();
        for _ in 0..runs {
            let cold_dir = tempfile::tempdir().expect("tmp");
            let cold_cache = Cache::new(cold_dir.path());
            let cache = if warm { &warm_cache } else { &cold_cache };
            let t = Instant::now();
            let got = pcs(&http, &srv, Some(cache))
                .for_quote(&needs, tv.reference_time)
                .expect("fetch");
            verify(&tv, &got.json);
            times.push(t.elapsed());
        }
        let mean = times.iter().sum::<Duration>() / runs;
        let min = times.iter().min().copied().unwrap_or_default();
        println!("{name}: mean {:.2} ms, min {:.2} ms over {runs} runs (server delay {delay_ms} ms per request)", mean.as_secs_f64() * 1e3, min.as_secs_f64() * 1e3);
    };
    report("cold cache (fetch 4 parts + verify + store)", false);
    report("warm cache (read entry + verify)", true);
}
