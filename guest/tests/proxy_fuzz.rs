//! Robustness of the egress proxy against arbitrary and mutated requests: it always answers with an error status
//! (or closes on an empty request), never panics, never forwards a byte, and keeps serving. The injected dialer
//! refuses every address, so even a request the mutation happens to make valid goes nowhere.

mod proxy_common;

use std::io::Write;

use proptest::prelude::*;
use proxy_common::*;

const SEED_REQUESTS: &[&str] = &[
    "CONNECT registry.example:443 HTTP/1.1\r\nHost: registry.example:443\r\n\r\n",
    "GET http://registry.example:80/a?b=c HTTP/1.1\r\nHost: registry.example\r\nContent-Length: 3\r\n\r\nabc",
    "POST http://registry.example/x HTTP/1.1\r\nHost: registry.example\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
];

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        0..SEED_REQUESTS.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8),
    )
        .prop_map(|(i, edits)| {
            let mut b = SEED_REQUESTS[i].as_bytes().to_vec();
            for (at, byte, kind) in edits {
                if b.is_empty() {
                    b.push(byte);
                    continue;
                }
                let at = at.index(b.len());
                match kind {
                    0 => b[at] = byte,
                    1 => b.insert(at, byte),
                    _ => {
                        b.remove(at);
                    }
                }
            }
            b
        })
}

fn check_answer(fx: &Fixture, bytes: &[u8]) -> Result<(), TestCaseError> {
    let mut c = fx.client();
    // The proxy may answer and close before reading everything.
    let _ = c.write_all(bytes);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let answer = read_all(&mut c);
    if bytes.is_empty() {
        prop_assert!(answer.is_empty());
        return Ok(());
    }
    let text = String::from_utf8_lossy(&answer);
    let code: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    prop_assert!(
        text.starts_with("HTTP/1.1 ") && (400..600).contains(&code),
        "answer {text:?} to {bytes:?}"
    );
    Ok(())
}

#[test]
fn arbitrary_and_mutated_requests_get_error_answers() {
    let resolver = MapResolver::new(&[("registry.example", &["93.184.216.34"])]);
    let dialer = RecordingDialer::new(&[]);
    let mut fx = Fixture::start(
        &["registry.example:443", "registry.example:80"],
        resolver,
        dialer.clone(),
        false,
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    });
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..512), |bytes| {
            check_answer(&fx, &bytes)
        })
        .expect("arbitrary bytes");
    runner
        .run(&mutated(), |bytes| check_answer(&fx, &bytes))
        .expect("mutated requests");
    let log = fx.shutdown();
    assert!(!log.is_empty());
    assert!(
        log.iter().all(|r| r.bytes_up == 0 && r.bytes_down == 0),
        "bytes moved: {log:?}"
    );
    // Only the public test address may ever have been asked for, and the dialer refused it.
    assert!(dialer
        .calls()
        .iter()
        .all(|a| a.ip().to_string() == "93.184.216.34"));
}
