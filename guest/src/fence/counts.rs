//! Test-count parsers: read the counts a test runner claims from its whole output stream.
//!
//! Every known runner summary anywhere in the stream is read (not only the tail) and summed per runner, as the
//! stream arrives and in bounded memory ([`Scanner`]); parsers are combined so that no claimed failure is ever
//! dropped ([`count`]). A JUnit report file, when the job names one, is the only source. Counts are claims made by the repository, so the
//! result is always cross-checked with the exit code and any disagreement is reported, never smoothed over.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The largest JUnit report read; a bigger file is `unparsed` rather than read into memory.
pub const MAX_JUNIT_BYTES: u64 = 64 * 1024 * 1024;

/// Test counts as a runner claims them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Tests that ran and passed.
    pub passed: u64,
    /// Tests that ran and failed (errors included).
    pub failed: u64,
    /// Tests skipped, ignored or pending.
    pub skipped: u64,
}

impl Counts {
    /// A new count triple.
    pub const fn new(passed: u64, failed: u64, skipped: u64) -> Self {
        Self {
            passed,
            failed,
            skipped,
        }
    }

    /// Passed plus failed: the tests that actually ran.
    pub fn ran(&self) -> u64 {
        self.passed.saturating_add(self.failed)
    }

    fn add(&mut self, other: Counts) {
        self.passed = self.passed.saturating_add(other.passed);
        self.failed = self.failed.saturating_add(other.failed);
        self.skipped = self.skipped.saturating_add(other.skipped);
    }
}

/// The parser (runner output format) that read the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Parser {
    /// `cargo test`: every `test result:` line summed (unit, integration and doctests).
    CargoTest,
    /// `cargo nextest run`: the `Summary` line.
    CargoNextest,
    /// pytest: the final summary line (`N passed, N failed in 0.1s`, `no tests ran`).
    Pytest,
    /// `go test -v`: top-level `--- PASS/FAIL/SKIP:` lines.
    GoTest,
    /// `go test` without `-v`: package `ok`/`FAIL` lines; counts are packages, not tests.
    GoTestPackages,
    /// `go test -json`: top-level test `pass`/`fail`/`skip` events.
    GoTestJson,
    /// node's test runner (and other TAP producers): `# pass N`, `# fail N`.
    NodeTap,
    /// node's test runner, spec reporter: `ℹ pass N`, `ℹ fail N`.
    NodeSpec,
    /// jest: the `Tests:` summary line.
    Jest,
    /// vitest: the `Tests  N passed (N)` summary line.
    Vitest,
    /// mocha: `N passing`, `N failing`, `N pending`.
    Mocha,
    /// The plain `N passed, N failed[, N skipped]` line, alone on its line.
    Plain,
    /// A JUnit XML report file named by the job.
    Junit,
}

impl Parser {
    /// The stable name recorded in the verdict.
    pub fn as_str(&self) -> &'static str {
        match self {
            Parser::CargoTest => "cargo-test",
            Parser::CargoNextest => "cargo-nextest",
            Parser::Pytest => "pytest",
            Parser::GoTest => "go-test",
            Parser::GoTestPackages => "go-test-packages",
            Parser::GoTestJson => "go-test-json",
            Parser::NodeTap => "node-tap",
            Parser::NodeSpec => "node-spec",
            Parser::Jest => "jest",
            Parser::Vitest => "vitest",
            Parser::Mocha => "mocha",
            Parser::Plain => "plain",
            Parser::Junit => "junit",
        }
    }
}

impl fmt::Display for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the claimed counts compare with the exit code of the test command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum ExitCheck {
    /// The exit code says what the counts say (0 with no failure, non-zero with failures, pytest 5 with none).
    Agrees,
    /// The counts claim no failure but the command exited non-zero: the run failed whatever the counts say.
    CountsHidFailure {
        /// The non-zero exit code.
        exit_code: i32,
    },
    /// The counts claim failures but the command exited 0: the counts' failures stand.
    ExitHidFailure {
        /// The number of failures claimed.
        failed: u64,
    },
    /// No exit code (killed by a signal, or not known): nothing to compare.
    NoExitCode,
}

/// Counts read from the stream or report, with their source and the exit-code cross-check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted {
    /// The counts, summed over every summary found.
    pub counts: Counts,
    /// The parsers that found a summary (sorted; more than one when a script runs several runners).
    pub parsers: Vec<Parser>,
    /// Whether the exit code agrees with the counts.
    pub exit_check: ExitCheck,
}

impl Counted {
    /// The parser name of the verdict: the parsers joined by `+` (e.g. `cargo-test+pytest`).
    pub fn parser_name(&self) -> String {
        let names: Vec<&str> = self.parsers.iter().map(Parser::as_str).collect();
        names.join("+")
    }

    /// True when the run failed: failures claimed, or a non-zero exit the counts hid.
    pub fn failed(&self) -> bool {
        self.counts.failed > 0 || matches!(self.exit_check, ExitCheck::CountsHidFailure { .. })
    }

    /// True when no test ran and nothing failed (`no_tests_observed`).
    pub fn no_tests(&self) -> bool {
        self.counts.ran() == 0 && !self.failed()
    }

    /// A one-line account of the cross-check, or `None` when the exit code agrees.
    pub fn disagreement(&self) -> Option<String> {
        match &self.exit_check {
            ExitCheck::Agrees | ExitCheck::NoExitCode => None,
            ExitCheck::CountsHidFailure { exit_code } => Some(format!(
                "{} claims {} passed and no failure, but the command exited with {exit_code}",
                self.parser_name(),
                self.counts.passed
            )),
            ExitCheck::ExitHidFailure { failed } => Some(format!(
                "{} claims {failed} failed, but the command exited with 0",
                self.parser_name()
            )),
        }
    }
}

/// The outcome of reading counts: counted, or unparsed with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result")]
#[non_exhaustive]
pub enum CountsResult {
    /// Counts were read.
    Counted(Counted),
    /// No counts could be read; `why` says what was looked for and what went wrong.
    Unparsed {
        /// Why no counts were read.
        why: String,
    },
}

impl CountsResult {
    /// The counted result, if any.
    pub fn counted(&self) -> Option<&Counted> {
        match self {
            CountsResult::Counted(c) => Some(c),
            CountsResult::Unparsed { .. } => None,
        }
    }
}

/// Reads the counts of a test command from its whole output `stream` (stdout and stderr as captured), cross-checked
/// with its `exit_code`; when `junit` names a report file, the counts come from that file only. The same as
/// feeding `stream` to a [`Scanner`] and calling [`count`] on what it found.
pub fn parse(stream: &[u8], exit_code: Option<i32>, junit: Option<&Path>) -> CountsResult {
    let mut scanner = Scanner::new();
    scanner.feed(stream);
    count(&scanner.finish(), exit_code, junit)
}

/// The longest part of one line the parsers look at, bytes (1 MiB). A longer line is parsed from its first
/// `MAX_PARSED_LINE` bytes after its last carriage return (that part is found however long the line is); no
/// runner's summary is that long, and every parser reads a summary from the start of its line.
pub const MAX_PARSED_LINE: usize = 1024 * 1024;

/// Reads a test command's output as it arrives, line by line, in bounded memory (at most [`MAX_PARSED_LINE`]
/// bytes of the current line are held): a stream of any length is counted whole.
#[derive(Default)]
pub struct Scanner {
    acc: Accumulator,
    /// The current line since its last carriage return, up to [`MAX_PARSED_LINE`] bytes.
    line: Vec<u8>,
    /// A carriage return was the last byte seen: it ends the line if a newline follows, else it starts over.
    cr: bool,
    /// Bytes of the current line dropped past [`MAX_PARSED_LINE`].
    cut: bool,
    bytes: u64,
    long_lines: u64,
}

impl Scanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Reads the next `chunk` of the stream (chunks may split lines and characters anywhere).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes = self.bytes.saturating_add(chunk.len() as u64);
        let mut rest = chunk;
        while !rest.is_empty() {
            // Only `\r` and `\n` change the state; everything between them is appended in one go.
            let stop = rest.iter().position(|&b| b == b'\r' || b == b'\n');
            if self.cr && rest[0] != b'\n' {
                // A carriage return inside the line: only what follows it is the line now (progress redraws).
                self.cr = false;
                self.line.clear();
                self.cut = false;
            }
            match stop {
                None => {
                    self.append(rest);
                    rest = &[];
                }
                Some(i) => {
                    self.append(&rest[..i]);
                    if rest[i] == b'\n' {
                        // A `\r` just before it was the line's end (`\r\n`), not a redraw.
                        self.cr = false;
                        self.end_line();
                    } else {
                        self.cr = true;
                    }
                    rest = &rest[i + 1..];
                }
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = MAX_PARSED_LINE.saturating_sub(self.line.len());
        if bytes.len() > room {
            self.cut = true;
        }
        self.line.extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    fn end_line(&mut self) {
        if self.cut {
            self.long_lines += 1;
        }
        let text = String::from_utf8_lossy(&self.line);
        let cleaned = strip_ansi(&text);
        self.acc.line(&cleaned);
        self.line.clear();
        self.cut = false;
    }

    /// Ends the stream (a last line without a newline is read too) and returns what was found.
    pub fn finish(mut self) -> Scanned {
        if !self.line.is_empty() || self.cut {
            self.end_line();
        }
        let (found, fallbacks) = self.acc.finish();
        Scanned {
            found,
            fallbacks,
            bytes: self.bytes,
            long_lines: self.long_lines,
        }
    }
}

/// What a [`Scanner`] found in a whole stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Each parser's sum over the stream, in parser order.
    pub found: Vec<(Parser, Counts)>,
    /// Fallback parsers (`plain`, `go-test-packages`) that matched beside a more specific one and claimed
    /// failures: only their failures count, as `max` with the others' (see [`count`]).
    pub fallbacks: Vec<(Parser, Counts)>,
    /// Bytes in the stream.
    pub bytes: u64,
    /// Lines longer than [`MAX_PARSED_LINE`] (parsed from their start only).
    pub long_lines: u64,
}

/// The counts of what a [`Scanner`] found, cross-checked with `exit_code`; when `junit` names a report file,
/// the counts come from that file only.
///
/// The combination rule: passed, failed and skipped are summed over every parser that matched (several
/// runners in one script are several suites). A fallback parser (`plain`, and `go-test-packages` beside
/// per-test go lines) adds nothing when a more specific parser matched, except its failures: then
/// `failed = max(failed of the others, failed of the fallback)`, and the fallback is named in `parsers` when its
/// claim is the larger (when it changed the answer). So no
/// parser's claimed failures are ever dropped because another parser also matched, and a runner's summary
/// restated by a script's own `N passed, N failed` line is not counted twice.
pub fn count(scanned: &Scanned, exit_code: Option<i32>, junit: Option<&Path>) -> CountsResult {
    let (counts, parsers, pytest_no_tests) = match junit {
        Some(path) => match read_junit_file(path) {
            Ok(c) => (c, vec![Parser::Junit], false),
            Err(why) => return CountsResult::Unparsed { why },
        },
        None => {
            if scanned.found.is_empty() {
                return CountsResult::Unparsed {
                    why: unparsed_reason(scanned.bytes, exit_code),
                };
            }
            let mut total = Counts::default();
            let mut parsers = Vec::new();
            for (parser, c) in &scanned.found {
                total.add(*c);
                parsers.push(*parser);
            }
            let pytest_only = parsers == [Parser::Pytest];
            for (parser, c) in &scanned.fallbacks {
                if c.failed > total.failed {
                    total.failed = c.failed;
                    parsers.push(*parser);
                }
            }
            parsers.sort();
            parsers.dedup();
            (total, parsers, pytest_only && total.ran() == 0)
        }
    };
    let exit_check = match exit_code {
        None => ExitCheck::NoExitCode,
        Some(0) if counts.failed > 0 => ExitCheck::ExitHidFailure {
            failed: counts.failed,
        },
        Some(0) => ExitCheck::Agrees,
        // pytest exits 5 when it collected no tests; that agrees with a zero count.
        Some(5) if pytest_no_tests => ExitCheck::Agrees,
        Some(_) if counts.failed > 0 => ExitCheck::Agrees,
        Some(code) => ExitCheck::CountsHidFailure { exit_code: code },
    };
    CountsResult::Counted(Counted {
        counts,
        parsers,
        exit_check,
    })
}

fn unparsed_reason(bytes: u64, exit_code: Option<i32>) -> String {
    let exit = match exit_code {
        Some(c) => format!("exit code {c}"),
        None => "no exit code".to_string(),
    };
    if bytes == 0 {
        return format!("the test command printed nothing ({exit})");
    }
    format!(
        "no test summary of a known runner (cargo test, nextest, pytest, go test, node, jest, vitest, mocha, \
         `N passed, N failed`) in {bytes} bytes of output ({exit})"
    )
}

/// Strips ANSI escape sequences (the [`Scanner`] already kept only the text after a line's last carriage return).
fn strip_ansi(raw: &str) -> Cow<'_, str> {
    if !raw.contains('\u{1b}') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // CSI: parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                // OSC: up to BEL or ESC \.
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        chars.next();
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    Cow::Owned(out)
}

/// Counts per parser, in parser order.
type PerParser = Vec<(Parser, Counts)>;

#[derive(Default)]
struct Accumulator {
    found: std::collections::BTreeMap<Parser, Counts>,
    /// Go packages: ok (with tests), FAIL.
    go_pkg: Counts,
    go_pkg_seen: bool,
    /// Mocha summary block state: counts collected since the last `passing` line.
    mocha: Option<Counts>,
}

impl Accumulator {
    fn add(&mut self, parser: Parser, c: Counts) {
        self.found.entry(parser).or_default().add(c);
    }

    fn line(&mut self, line: &str) {
        let t = line.trim();
        if t.is_empty() {
            return;
        }
        if t.starts_with('{') {
            if let Some(c) = go_json_event(t) {
                self.add(Parser::GoTestJson, c);
            }
            return;
        }
        if let Some(c) = cargo_test(t) {
            self.add(Parser::CargoTest, c);
        } else if let Some(c) = nextest(t) {
            self.add(Parser::CargoNextest, c);
        } else if let Some(c) = pytest(t) {
            self.add(Parser::Pytest, c);
        } else if let Some(c) = go_verbose(line) {
            self.add(Parser::GoTest, c);
        } else if let Some(c) = go_package(t) {
            self.go_pkg.add(c);
            self.go_pkg_seen = true;
        } else if let Some((p, c)) = node_summary(t) {
            self.add(p, c);
        } else if let Some(c) = jest(t) {
            self.add(Parser::Jest, c);
        } else if let Some(c) = vitest(t) {
            self.add(Parser::Vitest, c);
        } else if let Some((kind, n)) = mocha(t) {
            self.mocha_line(kind, n);
        } else if let Some(c) = plain(t) {
            self.add(Parser::Plain, c);
        }
    }

    fn mocha_line(&mut self, kind: MochaKind, n: u64) {
        match kind {
            MochaKind::Passing => {
                if let Some(prev) = self.mocha.take() {
                    self.add(Parser::Mocha, prev);
                }
                self.mocha = Some(Counts::new(n, 0, 0));
            }
            MochaKind::Failing | MochaKind::Pending => {
                // `failing`/`pending` belong to the block opened by `passing`; mocha prints `0 passing` too.
                let block = self.mocha.get_or_insert_with(Counts::default);
                if kind == MochaKind::Failing {
                    block.failed = block.failed.saturating_add(n);
                } else {
                    block.skipped = block.skipped.saturating_add(n);
                }
            }
        }
    }

    /// Each parser's sum, and the fallbacks that matched beside a more specific parser with failures claimed.
    fn finish(mut self) -> (PerParser, PerParser) {
        if let Some(block) = self.mocha.take() {
            self.add(Parser::Mocha, block);
        }
        let mut fallbacks = Vec::new();
        // Package lines only stand in when go printed no per-test lines (no `-v`); beside them only their
        // failures count (a `FAIL pkg` line is never dropped because a `--- PASS` line was printed).
        if self.go_pkg_seen {
            let c = self.go_pkg;
            if self.found.contains_key(&Parser::GoTest)
                || self.found.contains_key(&Parser::GoTestJson)
            {
                if c.failed > 0 {
                    fallbacks.push((Parser::GoTestPackages, c));
                }
            } else {
                self.add(Parser::GoTestPackages, c);
            }
        }
        // The plain line is the fallback format: a specific runner's summary replaces its passed and skipped
        // counts, never its failures.
        if self.found.len() > 1 {
            if let Some(c) = self.found.remove(&Parser::Plain) {
                if c.failed > 0 {
                    fallbacks.push((Parser::Plain, c));
                }
            }
        }
        (self.found.into_iter().collect(), fallbacks)
    }
}

/// Parses `N word` (an unsigned decimal number, whitespace, then a word).
fn number_word(item: &str) -> Option<(u64, &str)> {
    let item = item.trim();
    let (num, rest) = item.split_once(char::is_whitespace)?;
    let n = parse_u64(num)?;
    Some((n, rest.trim()))
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s`
fn cargo_test(t: &str) -> Option<Counts> {
    let rest = t.strip_prefix("test result: ")?;
    let (status, rest) = rest.split_once(". ")?;
    if status != "ok" && status != "FAILED" {
        return None;
    }
    let mut c = Counts::default();
    let mut seen = (false, false);
    for item in rest.split(';') {
        let Some((n, word)) = number_word(item) else {
            continue;
        };
        match word {
            "passed" => {
                c.passed = n;
                seen.0 = true;
            }
            "failed" => {
                c.failed = n;
                seen.1 = true;
            }
            "ignored" => c.skipped = n,
            _ => {}
        }
    }
    (seen.0 && seen.1).then_some(c)
}

/// `Summary [   0.010s] 4 tests run: 3 passed (1 slow), 1 failed, 2 skipped`
fn nextest(t: &str) -> Option<Counts> {
    let rest = t.strip_prefix("Summary [")?;
    let (_, rest) = rest.split_once(']')?;
    let (head, list) = rest.split_once(':')?;
    let head = head.trim();
    if !(head.ends_with(" tests run") || head.ends_with(" test run")) {
        return None;
    }
    let mut c = Counts::default();
    let mut any = false;
    for item in list.split(',') {
        // Drop parentheticals such as `(1 slow)` or `(2 flaky)`.
        let item = item.split('(').next().unwrap_or("");
        let Some((n, word)) = number_word(item) else {
            continue;
        };
        any = true;
        match word {
            "passed" => c.passed = c.passed.saturating_add(n),
            "failed" | "timed out" | "exec failed" => c.failed = c.failed.saturating_add(n),
            "skipped" => c.skipped = c.skipped.saturating_add(n),
            _ => {}
        }
    }
    any.then_some(c)
}

/// `===== 1 failed, 2 passed, 1 skipped, 2 warnings in 0.12s =====`, `no tests ran in 0.01s`
fn pytest(t: &str) -> Option<Counts> {
    let inner = t.trim_matches('=').trim();
    let (body, tail) = inner.rsplit_once(" in ")?;
    // The duration: `0.12s` or `12.30s (0:00:12)`.
    let dur = tail.split_whitespace().next()?;
    let secs = dur.strip_suffix('s')?;
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    if body == "no tests ran" {
        return Some(Counts::default());
    }
    let mut c = Counts::default();
    let mut any = false;
    for item in body.split(", ") {
        let (n, word) = number_word(item)?;
        match word {
            "passed" | "xpassed" => c.passed = c.passed.saturating_add(n),
            "failed" | "error" | "errors" => c.failed = c.failed.saturating_add(n),
            "skipped" | "xfailed" => c.skipped = c.skipped.saturating_add(n),
            "deselected" | "warning" | "warnings" | "rerun" => {}
            _ => return None,
        }
        any = true;
    }
    any.then_some(c)
}

/// `--- PASS: TestAdd (0.00s)` at the start of the line (subtests are indented and not counted).
fn go_verbose(line: &str) -> Option<Counts> {
    let rest = line.strip_prefix("--- ")?;
    let (status, rest) = rest.split_once(": ")?;
    if !rest.starts_with("Test") && !rest.starts_with("Example") && !rest.starts_with("Fuzz") {
        return None;
    }
    match status {
        "PASS" => Some(Counts::new(1, 0, 0)),
        "FAIL" => Some(Counts::new(0, 1, 0)),
        "SKIP" => Some(Counts::new(0, 0, 1)),
        _ => None,
    }
}

/// `ok  \texample.com/pkg\t0.003s`, `FAIL\texample.com/pkg\t0.004s`; `[no tests to run]` counts nothing.
fn go_package(t: &str) -> Option<Counts> {
    let mut fields = t.split_whitespace();
    let status = fields.next()?;
    let pkg = fields.next()?;
    let third = fields.next()?;
    if pkg.starts_with('[') || pkg.contains(':') {
        return None;
    }
    // The third field is a duration (`0.003s`) or `(cached)`.
    if status == "FAIL" && (third == "[build" || third == "[setup") {
        return Some(Counts::new(0, 1, 0));
    }
    let is_dur = third == "(cached)"
        || third
            .strip_suffix('s')
            .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    if !is_dur {
        return None;
    }
    match status {
        "ok" if t.contains("[no tests to run]") => Some(Counts::default()),
        "ok" => Some(Counts::new(1, 0, 0)),
        "FAIL" => Some(Counts::new(0, 1, 0)),
        _ => None,
    }
}

#[derive(Deserialize)]
struct GoEvent {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Test")]
    test: Option<String>,
}

/// A `go test -json` event; top-level tests only (a name without `/`).
fn go_json_event(t: &str) -> Option<Counts> {
    let ev: GoEvent = serde_json::from_str(t).ok()?;
    let test = ev.test?;
    if test.contains('/') {
        return None;
    }
    match ev.action.as_str() {
        "pass" => Some(Counts::new(1, 0, 0)),
        "fail" => Some(Counts::new(0, 1, 0)),
        "skip" => Some(Counts::new(0, 0, 1)),
        _ => None,
    }
}

/// node's test runner summary lines: TAP `# pass 3` or spec `ℹ pass 3`.
fn node_summary(t: &str) -> Option<(Parser, Counts)> {
    let (parser, rest) = if let Some(r) = t.strip_prefix("# ") {
        (Parser::NodeTap, r)
    } else if let Some(r) = t.strip_prefix("ℹ ") {
        (Parser::NodeSpec, r)
    } else {
        return None;
    };
    let (word, num) = rest.trim().split_once(' ')?;
    let n = parse_u64(num.trim())?;
    let c = match word {
        "pass" => Counts::new(n, 0, 0),
        "fail" | "cancelled" => Counts::new(0, n, 0),
        "skip" | "skipped" | "todo" => Counts::new(0, 0, n),
        _ => return None,
    };
    Some((parser, c))
}

/// jest: `Tests:       1 failed, 1 skipped, 2 passed, 4 total`
fn jest(t: &str) -> Option<Counts> {
    let rest = t.strip_prefix("Tests:")?;
    let mut c = Counts::default();
    let mut total = None;
    for item in rest.split(',') {
        let (n, word) = number_word(item)?;
        match word {
            "passed" => c.passed = n,
            "failed" => c.failed = n,
            "skipped" | "todo" => c.skipped = c.skipped.saturating_add(n),
            "total" => total = Some(n),
            _ => return None,
        }
    }
    total.map(|_| c)
}

/// vitest: `Tests  1 failed | 2 passed | 1 skipped (4)`
fn vitest(t: &str) -> Option<Counts> {
    let rest = t.strip_prefix("Tests")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim();
    let (body, total) = rest.rsplit_once('(')?;
    let total = total.strip_suffix(')')?;
    parse_u64(total.trim())?;
    let mut c = Counts::default();
    for item in body.split('|') {
        let (n, word) = number_word(item)?;
        match word {
            "passed" => c.passed = n,
            "failed" => c.failed = n,
            "skipped" | "todo" => c.skipped = c.skipped.saturating_add(n),
            _ => return None,
        }
    }
    Some(c)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MochaKind {
    Passing,
    Failing,
    Pending,
}

/// mocha: `3 passing (12ms)`, `1 failing`, `2 pending`
fn mocha(t: &str) -> Option<(MochaKind, u64)> {
    let (num, rest) = t.split_once(' ')?;
    let n = parse_u64(num)?;
    let rest = rest.trim();
    let (word, tail) = match rest.split_once(' ') {
        Some((w, tail)) => (w, tail.trim()),
        None => (rest, ""),
    };
    let kind = match word {
        "passing" => MochaKind::Passing,
        "failing" => MochaKind::Failing,
        "pending" => MochaKind::Pending,
        _ => return None,
    };
    // Only a duration may follow: `(12ms)`, `(1s)`.
    if !(tail.is_empty() || (tail.starts_with('(') && tail.ends_with(')'))) {
        return None;
    }
    Some((kind, n))
}

/// `N passed, N failed[, N skipped]`, alone on its line, optionally after one word and a colon (`Results:`).
fn plain(t: &str) -> Option<Counts> {
    let body = match t.split_once(':') {
        Some((word, rest))
            if !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-') =>
        {
            rest.trim()
        }
        Some(_) => return None,
        None => t,
    };
    let items: Vec<&str> = body.split(", ").collect();
    if items.len() != 2 && items.len() != 3 {
        return None;
    }
    let (p, w1) = number_word(items[0])?;
    let (f, w2) = number_word(items[1])?;
    if w1 != "passed" || w2 != "failed" {
        return None;
    }
    let s = match items.get(2) {
        Some(item) => match number_word(item)? {
            (s, "skipped") => s,
            _ => return None,
        },
        None => 0,
    };
    Some(Counts::new(p, f, s))
}

/// Reads a JUnit report file: regular files only, at most [`MAX_JUNIT_BYTES`], never following a final symlink.
fn read_junit_file(path: &Path) -> Result<Counts, String> {
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("junit report {shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("junit report {shown}: not a regular file"));
    }
    if meta.len() > MAX_JUNIT_BYTES {
        return Err(format!(
            "junit report {shown}: {} bytes, more than the {MAX_JUNIT_BYTES} read",
            meta.len()
        ));
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = opts
        .open(path)
        .map_err(|e| format!("junit report {shown}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_JUNIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("junit report {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_JUNIT_BYTES {
        return Err(format!(
            "junit report {shown}: grew past the {MAX_JUNIT_BYTES} bytes read"
        ));
    }
    parse_junit(&bytes).map_err(|e| format!("junit report {shown}: {e}"))
}

/// Counts the `<testcase>` elements of a JUnit XML document: a `<failure>` or `<error>` child makes it failed, a
/// `<skipped>` child skipped, otherwise passed.
pub fn parse_junit(xml: &[u8]) -> Result<Counts, String> {
    use quick_xml::events::Event;

    #[derive(Clone, Copy, PartialEq)]
    enum Case {
        Passed,
        Failed,
        Skipped,
    }
    let mut reader = quick_xml::Reader::from_reader(xml);
    reader.config_mut().check_end_names = true;
    let mut buf = Vec::new();
    let mut counts = Counts::default();
    let mut depth: usize = 0;
    let mut case: Option<(usize, Case)> = None;
    let mut root_seen = false;
    loop {
        let pos = reader.buffer_position();
        let ev = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("bad XML at byte {pos}: {e}"))?;
        match ev {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(ev, Event::Empty(_));
                let name = e.local_name();
                let name = name.as_ref();
                if depth == 0 {
                    if root_seen {
                        return Err(format!("second root element at byte {pos}"));
                    }
                    root_seen = true;
                    if name != b"testsuites" && name != b"testsuite" {
                        return Err(format!(
                            "root element is <{}>, not <testsuites> or <testsuite>",
                            String::from_utf8_lossy(name)
                        ));
                    }
                }
                match (name, case) {
                    (b"testcase", None) => {
                        if empty {
                            counts.passed = counts.passed.saturating_add(1);
                        } else {
                            case = Some((depth, Case::Passed));
                        }
                    }
                    (b"testcase", Some(_)) => {
                        return Err(format!("<testcase> nested in <testcase> at byte {pos}"))
                    }
                    (b"failure" | b"error", Some((d, _))) if depth == d + 1 => {
                        case = Some((d, Case::Failed))
                    }
                    (b"skipped", Some((d, c))) if depth == d + 1 && c != Case::Failed => {
                        case = Some((d, Case::Skipped))
                    }
                    _ => {}
                }
                if !empty {
                    depth += 1;
                }
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                if let Some((d, c)) = case {
                    if depth == d {
                        match c {
                            Case::Passed => counts.passed = counts.passed.saturating_add(1),
                            Case::Failed => counts.failed = counts.failed.saturating_add(1),
                            Case::Skipped => counts.skipped = counts.skipped.saturating_add(1),
                        }
                        case = None;
                    }
                }
            }
            Event::Eof => break,
            Event::Text(ref t) if depth == 0 && !t.iter().all(|b| b.is_ascii_whitespace()) => {
                return Err(format!("text outside the root element at byte {pos}"));
            }
            _ => {}
        }
        buf.clear();
    }
    if !root_seen {
        return Err("no root element".to_string());
    }
    if depth != 0 {
        return Err("document ends inside an element".to_string());
    }
    Ok(counts)
}
