//! The cost of counting: the count parsers over a long realistic stream (cargo test output repeated, with
//! pytest, go and progress-redraw lines mixed in). Needs no root.
//! Run with `cargo bench -p guest --bench counts`.

use criterion::{criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

const BLOCK: &str = "\
running 3 tests
test tests::adds ... ok
test tests::subtracts ... ok
test tests::slow ... ignored

test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

    \x1b[32mCompiling\x1b[0m demo v0.1.0 (/src/demo)
downloading 42%\rdownloading 87%\rdownloading 100%
--- PASS: TestAdd (0.00s)
=== RUN   TestSub
ok  \texample.com/demo\t0.003s
==================== 3 passed, 1 skipped in 0.12s ====================
some ordinary log line that a test printed while it ran, neither a summary nor empty
";

fn bench(c: &mut Criterion) {
    let mut stream = Vec::new();
    while stream.len() < 16 << 20 {
        stream.extend_from_slice(BLOCK.as_bytes());
    }
    let mut g = c.benchmark_group("counts");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("parse_16_mib", |b| {
        b.iter(|| guest::fence::counts::parse(black_box(&stream), Some(0), None))
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
