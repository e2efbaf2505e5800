//! Table-driven tests of the test-count parsers: realistic output of each runner, written here by hand, with the
//! counts, parser and exit-code cross-check each must give.

use std::io::Write;

use guest::fence::counts::{
    count, parse, parse_junit, Counts, CountsResult, ExitCheck, Parser, Scanner, MAX_PARSED_LINE,
};

struct Case {
    name: &'static str,
    stream: &'static str,
    exit: Option<i32>,
    want: Option<(Counts, &'static [Parser], ExitCheck)>,
}

const CARGO_TEST: &str = "\
   Compiling demo v0.1.0 (/src/demo)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 1.20s
     Running unittests src/lib.rs (target/debug/deps/demo-1a2b3c)

running 3 tests
test tests::adds ... ok
test tests::subtracts ... ok
test tests::slow ... ignored

test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/api.rs (target/debug/deps/api-4d5e6f)

running 2 tests
test lists ... ok
test creates ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

   Doc-tests demo

running 4 tests
test src/lib.rs - add (line 3) ... ok
test src/lib.rs - sub (line 12) ... ok
test src/lib.rs - mul (line 20) ... ok
test src/lib.rs - div (line 28) ... ok

test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.31s

";

const CARGO_TEST_FAILED: &str = "\
running 2 tests
test tests::adds ... ok
test tests::divides ... FAILED

failures:

---- tests::divides stdout ----
thread 'tests::divides' panicked at src/lib.rs:20:9:
assertion `left == right` failed
  left: 3
 right: 2

failures:
    tests::divides

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
";

const NEXTEST: &str = "\
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.05s
\x1b[32;1m    Starting\x1b[0m 6 tests across 2 binaries (2 skipped)
        PASS [   0.004s] demo tests::adds
        PASS [   0.004s] demo tests::subtracts
        FAIL [   0.005s] demo tests::divides
        PASS [   1.204s] demo::api lists
------------
\x1b[32;1m     Summary\x1b[0m [   1.210s] 4 tests run: 3 passed (1 slow), 1 failed, 2 skipped
        FAIL [   0.005s] demo tests::divides
error: test run failed
";

const PYTEST: &str = "\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0
rootdir: /src/demo
collected 7 items

tests/test_math.py ..F.s.x                                               [100%]

=================================== FAILURES ===================================
________________________________ test_divide ___________________________________

    def test_divide():
>       assert divide(6, 3) == 3
E       assert 2.0 == 3

tests/test_math.py:12: AssertionError
=========================== short test summary info ============================
FAILED tests/test_math.py::test_divide - assert 2.0 == 3
============== 1 failed, 4 passed, 1 skipped, 1 xfailed in 0.12s ===============
";

const PYTEST_NONE: &str = "\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0
rootdir: /src/demo
collected 0 items

============================ no tests ran in 0.01s =============================
";

const PYTEST_QUIET: &str = "\
.....                                                                    [100%]
5 passed, 2 warnings in 0.04s
";

const GO_VERBOSE: &str = "\
=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
=== RUN   TestTable
=== RUN   TestTable/zero
=== RUN   TestTable/negative
    math_test.go:31: got -1, want 1
--- FAIL: TestTable (0.00s)
    --- PASS: TestTable/zero (0.00s)
    --- FAIL: TestTable/negative (0.00s)
=== RUN   TestNetwork
    net_test.go:9: needs network
--- SKIP: TestNetwork (0.00s)
FAIL
FAIL\texample.com/demo/math\t0.004s
=== RUN   TestParse
--- PASS: TestParse (0.00s)
PASS
ok  \texample.com/demo/parse\t0.002s
FAIL
";

const GO_PACKAGES: &str = "\
ok  \texample.com/demo/math\t0.004s
ok  \texample.com/demo/parse\t(cached)
?   \texample.com/demo/cmd\t[no test files]
ok  \texample.com/demo/empty\t0.001s [no tests to run]
--- FAIL: TestBroken (0.00s)
    broken_test.go:8: boom
";

const GO_PACKAGES_ONLY: &str = "\
ok  \texample.com/demo/math\t0.004s
ok  \texample.com/demo/parse\t(cached)
FAIL\texample.com/demo/io [build failed]
FAIL
";

const GO_JSON: &str = r#"{"Time":"2026-01-01T00:00:00Z","Action":"start","Package":"example.com/demo"}
{"Time":"2026-01-01T00:00:00Z","Action":"run","Package":"example.com/demo","Test":"TestAdd"}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"example.com/demo","Test":"TestAdd","Output":"--- PASS: TestAdd (0.00s)\n"}
{"Time":"2026-01-01T00:00:00Z","Action":"pass","Package":"example.com/demo","Test":"TestAdd","Elapsed":0}
{"Time":"2026-01-01T00:00:00Z","Action":"run","Package":"example.com/demo","Test":"TestTable"}
{"Time":"2026-01-01T00:00:00Z","Action":"pass","Package":"example.com/demo","Test":"TestTable/zero","Elapsed":0}
{"Time":"2026-01-01T00:00:00Z","Action":"fail","Package":"example.com/demo","Test":"TestTable/neg","Elapsed":0}
{"Time":"2026-01-01T00:00:00Z","Action":"fail","Package":"example.com/demo","Test":"TestTable","Elapsed":0}
{"Time":"2026-01-01T00:00:00Z","Action":"skip","Package":"example.com/demo","Test":"TestNet","Elapsed":0}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"example.com/demo","Output":"FAIL\n"}
{"Time":"2026-01-01T00:00:00Z","Action":"fail","Package":"example.com/demo","Elapsed":0.004}
"#;

const NODE_TAP: &str = "\
TAP version 13
# Subtest: adds
ok 1 - adds
  ---
  duration_ms: 0.41
  ...
# Subtest: divides
not ok 2 - divides
  ---
  duration_ms: 0.52
  failureType: 'testCodeFailure'
  error: 'Expected values to be strictly equal'
  ...
# Subtest: later
ok 3 - later # SKIP
1..3
# tests 3
# suites 0
# pass 1
# fail 1
# cancelled 0
# skipped 1
# todo 0
# duration_ms 41.2
";

const NODE_SPEC: &str = "\
\u{2714} adds (0.41ms)
\u{2716} divides (0.52ms)
\u{2139} tests 5
\u{2139} suites 1
\u{2139} pass 3
\u{2139} fail 1
\u{2139} cancelled 0
\u{2139} skipped 0
\u{2139} todo 1
\u{2139} duration_ms 52.3
";

const JEST: &str = "\
 PASS  src/add.test.js
 FAIL  src/divide.test.js
  \u{25cf} divide \u{203a} by zero

    expect(received).toBe(expected) // Object.is equality

Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 1 skipped, 5 passed, 7 total
Snapshots:   0 total
Time:        1.42 s
Ran all test suites.
";

const VITEST: &str = "\
 \x1b[32m\u{2713}\x1b[39m src/add.test.ts \x1b[2m(3 tests)\x1b[22m\x1b[2m 2ms\x1b[22m
 \x1b[31m\u{276f}\x1b[39m src/divide.test.ts \x1b[2m(2 tests | 1 failed)\x1b[22m

\x1b[2m Test Files \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[1m\x1b[32m1 passed\x1b[39m\x1b[22m\x1b[90m (2)\x1b[39m
\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[1m\x1b[32m4 passed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[33m1 skipped\x1b[39m\x1b[90m (6)\x1b[39m
\x1b[2m   Start at \x1b[22m 10:00:00
\x1b[2m   Duration \x1b[22m 410ms
";

const MOCHA: &str = "
  math
    \u{2714} adds
    \u{2714} subtracts
    - multiplies later
    1) divides


  2 passing (12ms)
  1 pending
  1 failing

  1) math
       divides:
     AssertionError [ERR_ASSERTION]: 2 == 3
";

const PLAIN: &str = "\
running my own little test harness
check add ... ok
check div ... FAIL
Results: 9 passed, 1 failed, 2 skipped
";

const PLAIN_BARE: &str = "12 passed, 0 failed\n";

const MIXED_CARGO_PYTEST: &str = "\
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
== 2 passed in 0.03s ==
";

fn table() -> Vec<Case> {
    use ExitCheck::*;
    vec![
        Case {
            name: "cargo test sums unit, integration and doc tests",
            stream: CARGO_TEST,
            exit: Some(0),
            want: Some((Counts::new(8, 0, 1), &[Parser::CargoTest], Agrees)),
        },
        Case {
            name: "cargo test failure",
            stream: CARGO_TEST_FAILED,
            exit: Some(101),
            want: Some((Counts::new(1, 1, 0), &[Parser::CargoTest], Agrees)),
        },
        Case {
            name: "nextest summary with colours, slow and skipped",
            stream: NEXTEST,
            exit: Some(100),
            want: Some((Counts::new(3, 1, 2), &[Parser::CargoNextest], Agrees)),
        },
        Case {
            name: "pytest full summary",
            stream: PYTEST,
            exit: Some(1),
            want: Some((Counts::new(4, 1, 2), &[Parser::Pytest], Agrees)),
        },
        Case {
            name: "pytest exit 5 means no tests",
            stream: PYTEST_NONE,
            exit: Some(5),
            want: Some((Counts::new(0, 0, 0), &[Parser::Pytest], Agrees)),
        },
        Case {
            name: "pytest -q",
            stream: PYTEST_QUIET,
            exit: Some(0),
            want: Some((Counts::new(5, 0, 0), &[Parser::Pytest], Agrees)),
        },
        Case {
            name: "go test -v counts top-level tests",
            stream: GO_VERBOSE,
            exit: Some(1),
            want: Some((Counts::new(2, 1, 1), &[Parser::GoTest], Agrees)),
        },
        Case {
            name: "go test -v failure lines win over package lines",
            stream: GO_PACKAGES,
            exit: Some(1),
            want: Some((Counts::new(0, 1, 0), &[Parser::GoTest], Agrees)),
        },
        Case {
            name: "go test without -v counts packages",
            stream: GO_PACKAGES_ONLY,
            exit: Some(1),
            want: Some((Counts::new(2, 1, 0), &[Parser::GoTestPackages], Agrees)),
        },
        Case {
            name: "go test -json top-level events",
            stream: GO_JSON,
            exit: Some(1),
            want: Some((Counts::new(1, 1, 1), &[Parser::GoTestJson], Agrees)),
        },
        Case {
            name: "node test runner TAP",
            stream: NODE_TAP,
            exit: Some(1),
            want: Some((Counts::new(1, 1, 1), &[Parser::NodeTap], Agrees)),
        },
        Case {
            name: "node test runner spec reporter",
            stream: NODE_SPEC,
            exit: Some(1),
            want: Some((Counts::new(3, 1, 1), &[Parser::NodeSpec], Agrees)),
        },
        Case {
            name: "jest summary, not the suites line",
            stream: JEST,
            exit: Some(1),
            want: Some((Counts::new(5, 1, 1), &[Parser::Jest], Agrees)),
        },
        Case {
            name: "vitest summary with colours, not the files line",
            stream: VITEST,
            exit: Some(1),
            want: Some((Counts::new(4, 1, 1), &[Parser::Vitest], Agrees)),
        },
        Case {
            name: "mocha passing/pending/failing",
            stream: MOCHA,
            exit: Some(1),
            want: Some((Counts::new(2, 1, 1), &[Parser::Mocha], Agrees)),
        },
        Case {
            name: "plain line after one word and a colon",
            stream: PLAIN,
            exit: Some(1),
            want: Some((Counts::new(9, 1, 2), &[Parser::Plain], Agrees)),
        },
        Case {
            name: "plain line alone",
            stream: PLAIN_BARE,
            exit: Some(0),
            want: Some((Counts::new(12, 0, 0), &[Parser::Plain], Agrees)),
        },
        Case {
            name: "nextest single test",
            stream: "     Summary [   0.002s] 1 test run: 1 passed, 0 skipped\n",
            exit: Some(0),
            want: Some((Counts::new(1, 0, 0), &[Parser::CargoNextest], Agrees)),
        },
        Case {
            name: "nextest cancelled run with timeouts",
            stream: "     Summary [  60.001s] 3/5 tests run: 1 passed, 1 failed, 1 timed out, 0 skipped\n",
            exit: Some(100),
            want: Some((Counts::new(1, 2, 0), &[Parser::CargoNextest], Agrees)),
        },
        Case {
            name: "pytest deselected and long duration",
            stream: "==== 3 passed, 2 deselected, 1 error in 75.20s (0:01:15) ====\n",
            exit: Some(1),
            want: Some((Counts::new(3, 1, 0), &[Parser::Pytest], Agrees)),
        },
        Case {
            name: "go packages with no tests to run",
            stream: "ok  \texample.com/demo\t0.001s [no tests to run]\n",
            exit: Some(0),
            want: Some((Counts::new(0, 0, 0), &[Parser::GoTestPackages], Agrees)),
        },
        Case {
            name: "jest all passed",
            stream: "Tests:       3 passed, 3 total\n",
            exit: Some(0),
            want: Some((Counts::new(3, 0, 0), &[Parser::Jest], Agrees)),
        },
        Case {
            name: "vitest all passed",
            stream: "      Tests  12 passed (12)\n",
            exit: Some(0),
            want: Some((Counts::new(12, 0, 0), &[Parser::Vitest], Agrees)),
        },
        Case {
            name: "mocha with nothing to run",
            stream: "\n  0 passing (1ms)\n\n",
            exit: Some(0),
            want: Some((Counts::new(0, 0, 0), &[Parser::Mocha], Agrees)),
        },
        Case {
            name: "two mocha runs are summed",
            stream: "  2 passing (3ms)\n  1 failing\n\n  4 passing (5ms)\n  1 pending\n",
            exit: Some(2),
            want: Some((Counts::new(6, 1, 1), &[Parser::Mocha], Agrees)),
        },
        Case {
            name: "a plain line is dropped when a runner's summary is present",
            stream: "Results: 50 passed, 0 failed\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
            exit: Some(0),
            want: Some((Counts::new(2, 0, 0), &[Parser::CargoTest], Agrees)),
        },
        Case {
            name: "a plain line's failures stand beside a fake runner success",
            stream: "1 passed, 2 failed\ntest result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
            exit: Some(0),
            want: Some((Counts::new(5, 2, 0), &[Parser::CargoTest, Parser::Plain], ExitHidFailure { failed: 2 })),
        },
        Case {
            name: "a plain line restating a runner's failures is not counted twice",
            stream: "test result: FAILED. 4 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\nResults: 4 passed, 3 failed\n",
            exit: Some(101),
            want: Some((Counts::new(4, 3, 0), &[Parser::CargoTest], Agrees)),
        },
        Case {
            name: "more failures in the plain line than in the runner's: the larger claim stands",
            stream: "test result: FAILED. 4 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\nResults: 0 passed, 7 failed\n",
            exit: Some(101),
            want: Some((Counts::new(4, 7, 0), &[Parser::CargoTest, Parser::Plain], Agrees)),
        },
        Case {
            name: "a go FAIL package line stands beside fake per-test PASS lines",
            stream: "--- PASS: TestFake (0.00s)\nFAIL\texample.com/demo\t0.004s\n",
            exit: Some(0),
            want: Some((Counts::new(1, 1, 0), &[Parser::GoTest, Parser::GoTestPackages], ExitHidFailure { failed: 1 })),
        },
        Case {
            name: "two runners' failures are summed",
            stream: "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n=== 2 failed, 1 passed in 0.10s ===\n",
            exit: Some(1),
            want: Some((Counts::new(2, 3, 0), &[Parser::CargoTest, Parser::Pytest], Agrees)),
        },
        Case {
            name: "progress redraws with carriage returns",
            stream: "running...\r\x1b[2Ktest result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\r\n",
            exit: Some(0),
            want: Some((Counts::new(4, 0, 0), &[Parser::CargoTest], Agrees)),
        },
        Case {
            name: "two runners in one script are summed",
            stream: MIXED_CARGO_PYTEST,
            exit: Some(0),
            want: Some((Counts::new(5, 0, 0), &[Parser::CargoTest, Parser::Pytest], Agrees)),
        },
        Case {
            name: "fake cargo success with a failing exit code",
            stream: "test result: ok. 999 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
            exit: Some(1),
            want: Some((Counts::new(999, 0, 0), &[Parser::CargoTest], CountsHidFailure { exit_code: 1 })),
        },
        Case {
            name: "fake plain success with a failing exit code",
            stream: "ok. 999 passed, 0 failed\n",
            exit: Some(1),
            want: None,
        },
        Case {
            name: "failures claimed with exit 0",
            stream: "Tests:       2 failed, 3 passed, 5 total\n",
            exit: Some(0),
            want: Some((Counts::new(3, 2, 0), &[Parser::Jest], ExitHidFailure { failed: 2 })),
        },
        Case {
            name: "exit 5 without pytest's word is a hidden failure",
            stream: "Results: 0 passed, 0 failed\n",
            exit: Some(5),
            want: Some((Counts::new(0, 0, 0), &[Parser::Plain], CountsHidFailure { exit_code: 5 })),
        },
        Case {
            name: "killed by a signal: nothing to compare",
            stream: CARGO_TEST,
            exit: None,
            want: Some((Counts::new(8, 0, 1), &[Parser::CargoTest], NoExitCode)),
        },
        Case {
            name: "counts early in a long stream are still read",
            stream: "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
                     and then a lot of noise\nmore noise\n",
            exit: Some(0),
            want: Some((Counts::new(1, 0, 0), &[Parser::CargoTest], Agrees)),
        },
        Case {
            name: "compile error: no counts",
            stream: "error[E0425]: cannot find value `x` in this scope\nerror: could not compile `demo`\n",
            exit: Some(101),
            want: None,
        },
        Case { name: "empty output", stream: "", exit: Some(0), want: None },
        Case {
            name: "plain line with trailing words is not plain",
            stream: "we had 3 passed, 1 failed yesterday\n",
            exit: Some(0),
            want: None,
        },
        Case {
            name: "plain line with two words before the colon is not plain",
            stream: "Final results: 3 passed, 1 failed\n",
            exit: Some(0),
            want: None,
        },
    ]
}

#[test]
fn stream_table() {
    let mut failures = Vec::new();
    for case in table() {
        let got = parse(case.stream.as_bytes(), case.exit, None);
        match (&got, &case.want) {
            (CountsResult::Counted(c), Some((counts, parsers, check))) => {
                if c.counts != *counts || c.parsers != *parsers || c.exit_check != *check {
                    failures.push(format!(
                        "{}: got {:?} {:?} {:?}, want {:?} {:?} {:?}",
                        case.name, c.counts, c.parsers, c.exit_check, counts, parsers, check
                    ));
                }
            }
            (CountsResult::Unparsed { why }, None) => {
                if why.is_empty() {
                    failures.push(format!("{}: unparsed without a reason", case.name));
                }
            }
            (got, want) => failures.push(format!("{}: got {got:?}, want {want:?}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn lying_success_is_a_failure() {
    let stream = b"test result: ok. 999 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
    let got = parse(stream, Some(1), None);
    let c = got.counted().expect("counted");
    assert!(c.failed(), "a non-zero exit must make the run failed");
    assert!(!c.no_tests());
    let why = c.disagreement().expect("disagreement reported");
    assert!(
        why.contains("999") && why.contains("exited with 1"),
        "{why}"
    );
}

#[test]
fn pytest_no_tests_is_no_tests() {
    let got = parse(PYTEST_NONE.as_bytes(), Some(5), None);
    let c = got.counted().expect("counted");
    assert!(c.no_tests());
    assert!(!c.failed());
    assert_eq!(c.parser_name(), "pytest");
}

#[test]
fn parser_names_are_joined() {
    let got = parse(MIXED_CARGO_PYTEST.as_bytes(), Some(0), None);
    assert_eq!(
        got.counted().expect("counted").parser_name(),
        "cargo-test+pytest"
    );
}

#[test]
fn whole_stream_is_read_past_a_large_tail() {
    let mut stream = String::from(CARGO_TEST);
    stream.push_str(&"x".repeat(200_000));
    stream.push('\n');
    stream.push_str(CARGO_TEST_FAILED);
    let got = parse(stream.as_bytes(), Some(101), None);
    assert_eq!(got.counted().expect("counted").counts, Counts::new(9, 1, 1));
}

const JUNIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- written by a test runner -->
<testsuites name="demo" tests="6" failures="1" errors="1" skipped="1">
  <testsuite name="math" tests="4">
    <testcase classname="math" name="adds" time="0.001"/>
    <testcase classname="math" name="subtracts" time="0.001"></testcase>
    <testcase classname="math" name="divides" time="0.002">
      <failure message="expected 3, got 2" type="AssertionError"><![CDATA[at divide (math.js:3) <not a tag>]]></failure>
      <system-out>some &amp; output</system-out>
    </testcase>
    <testcase classname="math" name="later"><skipped/></testcase>
  </testsuite>
  <testsuite name="io" tests="2">
    <testcase classname="io" name="reads"><system-err>warning</system-err></testcase>
    <testcase classname="io" name="writes"><error message="EACCES"/></testcase>
  </testsuite>
</testsuites>
"#;

#[test]
fn junit_counts_testcases() {
    assert_eq!(
        parse_junit(JUNIT.as_bytes()).expect("valid junit"),
        Counts::new(3, 2, 1)
    );
    let single = r#"<testsuite name="x"><testcase name="a"/><testcase name="b"><failure/></testcase></testsuite>"#;
    assert_eq!(
        parse_junit(single.as_bytes()).expect("valid junit"),
        Counts::new(1, 1, 0)
    );
}

#[test]
fn junit_bad_xml_is_an_error_not_a_panic() {
    let cases: &[(&str, &str)] = &[
        (
            "<testsuites><testcase name=\"a\"></testsuite>",
            "mismatched end",
        ),
        ("<testsuites><testcase name=\"a\">", "unterminated"),
        ("", "empty"),
        ("<html><body/></html>", "wrong root"),
        ("<testsuites/><testsuites/>", "two roots"),
        (
            "<testsuites><testcase><testcase/></testcase></testsuites>",
            "nested testcase",
        ),
        ("\u{0}\u{1}\u{2}<<<>>>", "garbage"),
        (
            "<testsuites attr=\"unterminated></testsuites>",
            "bad attribute",
        ),
    ];
    for (xml, what) in cases {
        assert!(
            parse_junit(xml.as_bytes()).is_err(),
            "{what}: {xml:?} was accepted"
        );
    }
}

#[test]
fn junit_file_is_the_only_source_when_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("junit.xml");
    std::fs::File::create(&path)
        .expect("create")
        .write_all(JUNIT.as_bytes())
        .expect("write");
    // The stream claims something else: the report file wins.
    let got = parse(CARGO_TEST.as_bytes(), Some(1), Some(&path));
    let c = got.counted().expect("counted");
    assert_eq!(c.counts, Counts::new(3, 2, 1));
    assert_eq!(c.parser_name(), "junit");
    assert_eq!(c.exit_check, ExitCheck::Agrees);

    let missing = dir.path().join("nope.xml");
    match parse(CARGO_TEST.as_bytes(), Some(0), Some(&missing)) {
        CountsResult::Unparsed { why } => assert!(why.contains("nope.xml"), "{why}"),
        other => panic!("missing report counted: {other:?}"),
    }

    let link = dir.path().join("link.xml");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    match parse(b"", Some(0), Some(&link)) {
        CountsResult::Unparsed { why } => assert!(why.contains("not a regular file"), "{why}"),
        other => panic!("symlinked report counted: {other:?}"),
    }

    let fifo = dir.path().join("fifo.xml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    match parse(b"", Some(0), Some(&fifo)) {
        CountsResult::Unparsed { why } => assert!(why.contains("not a regular file"), "{why}"),
        other => panic!("fifo report counted: {other:?}"),
    }
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), exit in proptest::option::of(-1i32..300)) {
            let _ = parse(&bytes, exit, None);
            let _ = parse_junit(&bytes);
        }

        #[test]
        fn cargo_lines_sum(lines in proptest::collection::vec((0u64..10_000, 0u64..100, 0u64..100), 1..8)) {
            let mut stream = String::new();
            let mut want = Counts::default();
            for (p, f, i) in &lines {
                let status = if *f == 0 { "ok" } else { "FAILED" };
                stream.push_str(&format!(
                    "test result: {status}. {p} passed; {f} failed; {i} ignored; 0 measured; 0 filtered out; finished in 0.01s\n"
                ));
                want.passed += p;
                want.failed += f;
                want.skipped += i;
            }
            let got = parse(stream.as_bytes(), Some(if want.failed > 0 { 101 } else { 0 }), None);
            let c = got.counted().expect("counted");
            prop_assert_eq!(c.counts, want);
            prop_assert_eq!(&c.exit_check, &ExitCheck::Agrees);
        }
    }
}

fn scan_in_chunks(stream: &[u8], chunk: usize) -> guest::fence::counts::Scanned {
    let mut s = Scanner::new();
    for piece in stream.chunks(chunk.max(1)) {
        s.feed(piece);
    }
    s.finish()
}

#[test]
fn chunked_streams_count_the_same_as_whole_ones() {
    for case in table() {
        let whole = parse(case.stream.as_bytes(), case.exit, None);
        for chunk in [1, 2, 3, 7, 64] {
            let got = count(
                &scan_in_chunks(case.stream.as_bytes(), chunk),
                case.exit,
                None,
            );
            assert_eq!(got, whole, "{} in chunks of {chunk}", case.name);
        }
    }
    // `\r\n` split across chunks is a line end, `\r` then text is a redraw.
    let got = count(
        &scan_in_chunks(b"noise\r\n1 passed, 1 failed\r", 1),
        Some(1),
        None,
    );
    assert_eq!(got.counted().expect("counted").counts, Counts::new(1, 1, 0));
}

#[test]
fn a_summary_after_a_carriage_return_ends_a_very_long_line() {
    let mut stream = vec![b'x'; 3 * MAX_PARSED_LINE];
    stream.extend_from_slice(b"\r1 passed, 2 failed\n");
    let scanned = scan_in_chunks(&stream, 65536);
    assert_eq!(scanned.long_lines, 0, "the redraw started the line over");
    let got = count(&scanned, Some(1), None);
    assert_eq!(got.counted().expect("counted").counts, Counts::new(1, 2, 0));
}

#[test]
fn a_line_longer_than_the_bound_is_parsed_from_its_start() {
    let mut stream = b"test result: FAILED. 0 passed; 2 failed; ".to_vec();
    stream.extend(std::iter::repeat_n(b'y', 2 * MAX_PARSED_LINE));
    stream.extend_from_slice(b"\nand a normal line\n");
    let scanned = scan_in_chunks(&stream, 65536);
    assert_eq!(scanned.long_lines, 1);
    assert_eq!(scanned.bytes, stream.len() as u64);
    let got = count(&scanned, Some(101), None);
    assert_eq!(got.counted().expect("counted").counts, Counts::new(0, 2, 0));
}

#[test]
fn the_summary_after_a_huge_stream_is_counted() {
    // 64 MiB of short lines in 64 KiB chunks, then the summary: nothing is kept but the current line.
    let block: Vec<u8> = b"noise line 0123456789\n".repeat(65536 / 22);
    let mut s = Scanner::new();
    let mut fed = 0u64;
    while fed < 64 << 20 {
        s.feed(&block);
        fed += block.len() as u64;
    }
    s.feed(b"1 passed, 2 failed\n");
    let got = count(&s.finish(), Some(0), None);
    let c = got.counted().expect("counted");
    assert_eq!(c.counts, Counts::new(1, 2, 0));
    assert_eq!(c.exit_check, ExitCheck::ExitHidFailure { failed: 2 });
}
