//! Counts are read from the whole stream however long, in bounded memory: a suite that prints 200 MiB (short
//! lines, then one 200 MiB line) before its summary is counted through the real fence, and the runner's peak
//! resident set stays far below the output's size. The output is made inside the sandbox by a tiny script, so
//! nothing big is stored. This file holds a single test so that the peak RSS of the children (ru_maxrss of
//! RUSAGE_CHILDREN: the largest waited-for descendant, here the runner) is this test's own.

use fenced_run_tests::fence::{skip, Case};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
/// 200 MiB.
const BIG: u64 = 200 << 20;
/// The runner's peak RSS allowed, KiB (8 MiB measured). The streaming parsers hold one line (at most 1 MiB) and 64-192 KiB of
/// head and tail; the rest is the binary, its threads and the verdict. Keeping the whole stream, as the parsers
/// once did up to a 64 MiB cap, would be far above it.
const MAX_PEAK_KIB: i64 = 32 * 1024;

#[allow(unsafe_code)]
fn children_peak_kib() -> i64 {
    // SAFETY: rusage is plain old data (all-zero is valid); getrusage only writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a pointer to a live, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    assert_eq!(rc, 0, "getrusage");
    u.ru_maxrss
}

#[test]
fn a_summary_after_200_mib_of_output_is_counted_in_bounded_memory() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        &format!(
            "yes 'noise line 0123456789' | head -c {BIG}\necho\necho '1 passed, 2 failed'\n\
             head -c {BIG} /dev/zero | tr '\\000' x\nprintf '\\r3 passed, 1 failed\\n'\nexit 0\n"
        ),
    );
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 600\n",
    );
    let r = c.run();
    assert_eq!(r.code, 0, "{}", r.dump());
    assert_eq!(r.outcome(), "tests_failed", "{}", r.dump());
    assert_eq!(r.verdict["tests"]["passed"], 4, "{}", r.dump());
    assert_eq!(r.verdict["tests"]["failed"], 3, "{}", r.dump());
    assert_eq!(r.verdict["tests"]["parser"], "plain", "{}", r.dump());
    assert!(
        r.test_tail().len() <= 3 * 64 * 1024 && r.test_tail().ends_with("3 passed, 1 failed\n"),
        "tail of {} bytes",
        r.test_tail().len()
    );
    let peak = children_peak_kib();
    println!(
        "runner peak RSS: {peak} KiB for {} MiB of output",
        2 * (BIG >> 20)
    );
    assert!(
        peak < MAX_PEAK_KIB,
        "the runner's peak RSS was {peak} KiB for {} bytes of output (bound {MAX_PEAK_KIB} KiB)",
        2 * BIG
    );
    c.assert_clean(&r, &[]);
}
