//! Time per verification of evidence bytes through the library (decode, report, key binding, verdict, pins), on
//! one real SEV-SNP report and one real TDX quote of `$FENCED_RUN_VECTORS`, each sealed here with a verdict signed
//! by the example's own key (so only `key-binding` fails, as it must). No criterion: a loop, and the thread's CPU
//! time from `/proc/thread-self/schedstat` beside the wall time. It uses only what the library offered before and
//! after the one-pass change (`verify_evidence_bytes`), so the same file times both (docs/benchmarks.md,
//! "The library before and after the one pass").
//!
//! ```sh
//! FENCED_RUN_VECTORS=/work/shared/vectors cargo run -p verifier-lib --example evidence_time -- 300
//! ```

use attestation::evidence::{Evidence, TeeLabel};
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use std::path::{Path, PathBuf};
use std::time::Instant;

const NONCE: [u8; 32] = [0x5a; 32];

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn der_of(bytes: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(bytes);
    if !text.contains("-----BEGIN") {
        return bytes.to_vec();
    }
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .unwrap_or_default()
}

fn seal(tee: TeeLabel, report: Vec<u8>, certs: Vec<Vec<u8>>) -> Vec<u8> {
    use sha2::Digest as _;
    let key = p384::ecdsa::SigningKey::from_slice(&sha2::Sha384::digest(b"evidence_time"))
        .expect("a P-384 scalar");
    let isolation = if tee.is_snp() {
        Isolation::SevSnp
    } else {
        Isolation::Tdx
    };
    let inputs = Inputs {
        nonce: NONCE.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, isolation, inputs, "evidence_time");
    Evidence::seal(tee, report, certs, None, &key, &verdict)
        .and_then(|e| e.to_cbor())
        .expect("sealed evidence")
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let root = PathBuf::from(
        std::env::var_os("FENCED_RUN_VECTORS").unwrap_or_else(|| "../shared/vectors".into()),
    );
    let mut cases = Vec::new();

    let snp = root.join("snp/milan-v2-virtee-sev");
    let report = read(&snp.join("report.bin"));
    let certs = vec![
        der_of(&read(&snp.join("vcek.der"))),
        der_of(&read(&snp.join("ask.pem"))),
        der_of(&read(&snp.join("ark.pem"))),
    ];
    let mut opts = verifier_lib::evidence::EvidenceOptions {
        nonce: Some(NONCE.to_vec()),
        any_measurement: true,
        ..Default::default()
    };
    opts.chain.at = time::OffsetDateTime::now_utc();
    cases.push((
        "SEV-SNP milan-v2-virtee-sev",
        seal(TeeLabel::SevSnp, report, certs),
        opts,
    ));

    let tdx = root.join("tdx/dcapqvl-v4-b0c06f-uptodate");
    let expected: serde_json::Value =
        serde_json::from_slice(&read(&tdx.join("expected.json"))).expect("expected.json");
    let mut opts = verifier_lib::evidence::EvidenceOptions {
        nonce: Some(NONCE.to_vec()),
        any_measurement: true,
        tdx_collateral: Some(read(&tdx.join("collateral.json"))),
        ..Default::default()
    };
    opts.chain.at = expected["reference_time_unix"]
        .as_i64()
        .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
        .expect("reference_time_unix");
    let quote = read(&tdx.join("quote.bin"));
    cases.push((
        "TDX dcapqvl-v4-b0c06f-uptodate",
        seal(TeeLabel::Tdx, quote, Vec::new()),
        opts,
    ));

    for (name, ev, opts) in &cases {
        let first = verifier_lib::evidence::verify_evidence_bytes(ev, opts).expect("decodes");
        let failed: Vec<String> = first.failures.iter().map(|f| f.check.to_string()).collect();
        let (t, c) = (Instant::now(), cpu_ns());
        for _ in 0..n {
            std::hint::black_box(verifier_lib::evidence::verify_evidence_bytes(
                std::hint::black_box(ev),
                opts,
            ))
            .ok();
        }
        let wall = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        let cpu = (cpu_ns() - c) as f64 / 1e3 / f64::from(n);
        println!("{name}: {cpu:.1} us CPU, {wall:.1} us wall per verification over {n} (failed: {failed:?})");
    }
}
