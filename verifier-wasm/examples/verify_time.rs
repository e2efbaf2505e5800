//! Native time per verification of `verifier_wasm::verify`, the function the browser runs as wasm, on one real
//! SEV-SNP and one real TDX vector sealed into evidence here (docs/benchmarks.md, "The browser check").
//!
//! ```sh
//! cargo build --release -p verifier-wasm --example verify_time
//! FENCED_RUN_VECTORS=/work/shared/vectors target/release/examples/verify_time 200
//! ```

use std::time::Instant;

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let root = std::path::PathBuf::from(
        std::env::var_os("FENCED_RUN_VECTORS").unwrap_or_else(|| "../shared/vectors".into()),
    );
    for (name, ev, req) in verifier_wasm::vectors::bench_cases(&root) {
        let first = verifier_wasm::verify(&ev, &req);
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(verifier_wasm::verify(&ev, &req));
        }
        let per = t.elapsed().as_secs_f64() * 1000.0 / f64::from(n);
        println!(
            "{name}: {per:.3} ms per verification over {n} (verified {}, failures {})",
            first["verified"],
            first["failures"]
                .as_array()
                .map(|a| a.len())
                .unwrap_or_default()
        );
    }
}
