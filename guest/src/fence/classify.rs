//! Outcome classification: turns what a phase did (exit, signal, limits that fired, counts) into one of the
//! eight named outcomes of DESIGN.md. Pure functions, so that every rule has a unit test.

use super::counts::CountsResult;
use attestation::verdict::{EgressRecord, Outcome};

/// SIGKILL, the signal the OOM killer and the wall clock use.
const SIGKILL: i32 = 9;
/// SIGXFSZ, sent when a file grows past RLIMIT_FSIZE.
const SIGXFSZ: i32 = 25;

/// What one phase did, as far as classification cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhaseFacts {
    /// The sandbox could not be built (nothing untrusted ran).
    pub setup_error: Option<String>,
    /// `/bin/sh` itself could not be executed.
    pub exec_error: Option<String>,
    /// Exit code of the command.
    pub exit_code: Option<i32>,
    /// Signal that ended the command.
    pub signal: Option<i32>,
    /// The wall clock ran out.
    pub timed_out: bool,
    /// OOM kills in the phase's cgroup.
    pub oom_kills: u64,
    /// Forks refused by the pids limit.
    pub pids_max: u64,
    /// The writable scratch was full when the command ended.
    pub disk_full: bool,
    /// The command's toolchain said it cannot start (see [`toolchain_error`]), with its own words.
    pub toolchain_error: Option<String>,
}

/// The line a toolchain manager prints when it cannot start the tool at all, if the output holds one: rustup
/// with no default toolchain, or with the requested toolchain not installed. Only lines that begin with the
/// manager's own `error:` prefix count; the caller uses it only when the command failed and no test was counted.
pub fn toolchain_error(output: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(output);
    text.lines().map(str::trim_end).find_map(|l| {
        let e = l.strip_prefix("error: ")?;
        let rustup = e.starts_with("rustup could not choose a version of")
            || e.starts_with("no default toolchain configured")
            || (e.starts_with("toolchain '") && e.ends_with("is not installed"))
            || e.starts_with("rustup is not installed at");
        rustup.then(|| {
            let mut why: String = e.chars().take(300).collect();
            if why.len() < e.len() {
                why.push_str("...");
            }
            format!("the toolchain could not start: {why}")
        })
    })
}

impl PhaseFacts {
    /// Why our side gave out, if it did (memory, processes, disk).
    pub fn exhausted(&self) -> Option<String> {
        if let Some(e) = &self.setup_error {
            return Some(format!("the sandbox could not be set up: {e}"));
        }
        if self.oom_kills > 0 {
            return Some(format!(
                "the memory limit was reached: {} process(es) killed by the OOM killer",
                self.oom_kills
            ));
        }
        if self.pids_max > 0 {
            return Some(format!(
                "the process limit was reached: {} fork(s) refused",
                self.pids_max
            ));
        }
        if self.disk_full || self.signal == Some(SIGXFSZ) {
            return Some(
                "the disk limit was reached (scratch full or RLIMIT_FSIZE exceeded)".into(),
            );
        }
        None
    }

    /// Why the command could not be started, if it could not (exec failure, or 126/127 from the shell).
    pub fn unavailable(&self) -> Option<String> {
        if let Some(e) = &self.exec_error {
            return Some(format!("the shell could not be executed: {e}"));
        }
        if let (Some(why), Some(c)) = (&self.toolchain_error, self.exit_code) {
            if c != 0 {
                return Some(format!("{why} (exit {c})"));
            }
        }
        match self.exit_code {
            Some(127) => Some("the command was not found (exit 127 from the shell)".into()),
            Some(126) => Some("the command is not executable (exit 126 from the shell)".into()),
            _ => None,
        }
    }
}

/// At most this many refusals are named in an install finding.
const REFUSALS_NAMED: usize = 5;
/// At most this many characters of one refusal's reason are quoted.
const REASON_CHARS: usize = 160;

/// Whether an egress record is a connection the environment did not provide: refused by the proxy's policy
/// or limits (`allowed == false`), or allowed and then not connected (the proxy records "connecting failed").
/// The proxy's own note that further attempts went unlogged is not a connection.
fn not_served(r: &EgressRecord) -> bool {
    if r.host.is_empty() && r.port == 0 && r.reason.contains("not logged") {
        return false;
    }
    !r.allowed || r.reason.contains("connecting failed")
}

/// The refused or failed connections of an egress log, named (`host:port (reason)`), at most
/// [`REFUSALS_NAMED`] distinct ones, and how many there were in all; `None` when every connection was served.
pub fn refusals(egress: &[EgressRecord]) -> Option<String> {
    let mut distinct: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut total = 0usize;
    for r in egress.iter().filter(|r| not_served(r)) {
        total += 1;
        let mut why: String = r.reason.chars().take(REASON_CHARS).collect();
        if why.len() < r.reason.len() {
            why.push_str("...");
        }
        let host = if r.host.is_empty() { "?" } else { &r.host };
        let one = format!("{host}:{} ({why})", r.port);
        if seen.insert(one.clone()) {
            distinct.push(one);
        }
    }
    if total == 0 {
        return None;
    }
    let shown = distinct.len().min(REFUSALS_NAMED);
    let mut text = format!(
        "{total} connection(s) refused or failed: {}",
        distinct[..shown].join("; ")
    );
    if distinct.len() > shown {
        text.push_str(&format!(" (and {} other(s))", distinct.len() - shown));
    }
    Some(text)
}

/// Whether the install phase ends the run, and how: `None` when the test phase may start. `egress` is the
/// install phase's egress log: a phase that failed (non-zero exit or a signal) while connections were refused
/// or failed is `environment_exhausted` (the environment could not provide the dependencies), naming them; one
/// that failed with every connection served is `tests_failed`.
pub fn install_stops(f: &PhaseFacts, egress: &[EgressRecord]) -> Option<(Outcome, String)> {
    if let Some(why) = f.exhausted() {
        return Some((
            Outcome::EnvironmentExhausted,
            format!("install phase: {why}"),
        ));
    }
    if f.timed_out {
        return Some((
            Outcome::BudgetExpired,
            "install phase: the wall-clock budget ran out".into(),
        ));
    }
    if let Some(why) = f.unavailable() {
        return Some((
            Outcome::TestCommandUnavailable,
            format!("install phase: {why}"),
        ));
    }
    let failed = match (f.exit_code, f.signal) {
        (Some(0), _) => return None,
        (Some(c), _) => format!("install phase failed with exit code {c}"),
        (None, Some(s)) => format!("install phase killed by signal {s}"),
        (None, None) => {
            return Some((
                Outcome::EnvironmentExhausted,
                "install phase ended without an exit status".into(),
            ))
        }
    };
    match refusals(egress) {
        Some(named) => Some((
            Outcome::EnvironmentExhausted,
            format!(
                "{failed} after the egress proxy refused or could not connect: {named}; the environment could not \
                 provide the dependencies, and no test ran"
            ),
        )),
        None => Some((Outcome::TestsFailed, format!("{failed}; no test ran"))),
    }
}

/// How a failed fetch of `[repository] url` ends the run (docs/job-file.md, "A repository fetched by URL"):
/// `None` when the fetch phase succeeded. What the environment did not provide is `environment_exhausted`:
/// the limits (memory, processes, disk: a pack larger than the run's disk), the wall clock (a server too
/// slow), `git` missing from the sandbox, a failure while the egress proxy refused or could not connect.
/// A fetch that failed with every connection served (the server has no such commit or repository) is
/// `refused` at stage `repository`: there is nothing to judge. `egress` is the egress log so far.
pub fn fetch_stops(f: &PhaseFacts, egress: &[EgressRecord]) -> Option<(Outcome, String)> {
    if let Some(why) = f.exhausted() {
        return Some((Outcome::EnvironmentExhausted, format!("fetch: {why}")));
    }
    if f.timed_out {
        return Some((
            Outcome::EnvironmentExhausted,
            "fetch: the time limit ran out before the server sent the commit".into(),
        ));
    }
    if let Some(e) = &f.exec_error {
        return Some((
            Outcome::EnvironmentExhausted,
            format!("fetch: the shell could not be executed: {e}"),
        ));
    }
    let failed = match (f.exit_code, f.signal) {
        (Some(0 | crate::fence::fetch::FULL_FETCH_EXIT), _) => return None,
        (Some(127), _) => {
            return Some((
                Outcome::EnvironmentExhausted,
                "fetch: git or its HTTP transport (git-remote-http) is not in the sandbox (the system or \
                 toolchain root has none; the toolchain image has both)"
                    .into(),
            ))
        }
        (Some(c), _) => format!("git fetch failed with exit code {c}"),
        (None, Some(s)) => format!("git fetch killed by signal {s}"),
        (None, None) => {
            return Some((
                Outcome::EnvironmentExhausted,
                "fetch: ended without an exit status".into(),
            ))
        }
    };
    match refusals(egress) {
        Some(named) => Some((
            Outcome::EnvironmentExhausted,
            format!("fetch: {failed} after the egress proxy refused or could not connect: {named}"),
        )),
        None => Some((
            Outcome::Refused,
            format!("{failed} with every connection served (the server has no such repository or commit)"),
        )),
    }
}

/// The outcome of the test phase and, when useful, a sentence saying why.
///
/// A suite that claimed failures and then exhausted memory, processes or disk is `tests_failed`, not
/// `environment_exhausted`: the failures were reported before our side gave out, so they stand (the caller
/// records the exhaustion as a finding of its own, [`PhaseFacts::exhausted`]). Exhaustion without a claimed
/// failure, and a sandbox that could not be set up, stay `environment_exhausted`.
pub fn test_outcome(f: &PhaseFacts, counts: &CountsResult) -> (Outcome, Option<String>) {
    if let Some(why) = f.exhausted() {
        let claimed = counts.counted().filter(|c| c.counts.failed > 0);
        return match claimed {
            Some(c) if f.setup_error.is_none() => (
                Outcome::TestsFailed,
                Some(format!(
                    "{} claims {} failed before the limit was reached ({why})",
                    c.parser_name(),
                    c.counts.failed
                )),
            ),
            _ => (Outcome::EnvironmentExhausted, Some(why)),
        };
    }
    if f.timed_out {
        return (
            Outcome::BudgetExpired,
            Some("the wall-clock budget ran out; the PID namespace was killed".into()),
        );
    }
    if let Some(why) = f.unavailable() {
        // 126/127 from the shell means "not found / not executable" only when no test ran before it: a script
        // that ran failing tests and then called a missing tool is still judged on its tests.
        let tests_ran = counts.counted().is_some_and(|c| c.counts.ran() > 0);
        if f.exec_error.is_some() || !tests_ran {
            return (Outcome::TestCommandUnavailable, Some(why));
        }
    }
    if f.signal == Some(SIGKILL) && f.exit_code.is_none() {
        // Killed without the OOM counter or the clock: still a failure of the command as far as we can tell.
        return (
            Outcome::TestsFailed,
            Some("the command was killed by SIGKILL".into()),
        );
    }
    match counts {
        CountsResult::Counted(c) if c.failed() => (Outcome::TestsFailed, c.disagreement()),
        CountsResult::Counted(c) if c.no_tests() => (Outcome::NoTestsObserved, None),
        CountsResult::Counted(_) if f.exit_code == Some(0) => (Outcome::TestsPassed, None),
        CountsResult::Counted(_) => (Outcome::TestsFailed, Some(nonzero(f))),
        _ if f.exit_code != Some(0) => (Outcome::TestsFailed, Some(nonzero(f))),
        CountsResult::Unparsed { why } => (Outcome::CountsUnparsed, Some(why.clone())),
    }
}

fn nonzero(f: &PhaseFacts) -> String {
    match (f.exit_code, f.signal) {
        (Some(c), _) => format!("the command exited with {c}"),
        (None, Some(s)) => format!("the command was killed by signal {s}"),
        _ => "the command ended without an exit status".into(),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_failed_fetch_is_refused_when_served_and_exhausted_otherwise() {
        use attestation::verdict::EgressRecord;
        let ok = PhaseFacts {
            exit_code: Some(0),
            ..PhaseFacts::default()
        };
        assert_eq!(fetch_stops(&ok, &[]), None);
        let full = PhaseFacts {
            exit_code: Some(crate::fence::fetch::FULL_FETCH_EXIT),
            ..PhaseFacts::default()
        };
        assert_eq!(fetch_stops(&full, &[]), None);
        let failed = PhaseFacts {
            exit_code: Some(128),
            ..PhaseFacts::default()
        };
        let served = EgressRecord {
            host: "git.example".into(),
            port: 443,
            allowed: true,
            reason: "allowlisted".into(),
            bytes_up: 10,
            bytes_down: 10,
        };
        let (o, why) = fetch_stops(&failed, std::slice::from_ref(&served)).expect("stops");
        assert_eq!(o, Outcome::Refused, "{why}");
        let refused = EgressRecord {
            allowed: false,
            reason: "resolves to 10.0.0.1: private".into(),
            ..served
        };
        let (o, why) = fetch_stops(&failed, &[refused]).expect("stops");
        assert_eq!(o, Outcome::EnvironmentExhausted);
        assert!(why.contains("git.example:443"), "{why}");
        for f in [
            PhaseFacts {
                timed_out: true,
                ..PhaseFacts::default()
            },
            PhaseFacts {
                disk_full: true,
                exit_code: Some(128),
                ..PhaseFacts::default()
            },
            PhaseFacts {
                exit_code: Some(127),
                ..PhaseFacts::default()
            },
        ] {
            let (o, why) = fetch_stops(&f, &[]).expect("stops");
            assert_eq!(o, Outcome::EnvironmentExhausted, "{why}");
        }
    }
    use super::*;
    use crate::fence::counts;

    fn exited(code: i32) -> PhaseFacts {
        PhaseFacts {
            exit_code: Some(code),
            ..Default::default()
        }
    }

    fn parse(s: &str, code: Option<i32>) -> CountsResult {
        counts::parse(s.as_bytes(), code, None)
    }

    #[test]
    fn exit_127_after_counted_tests_is_judged_on_the_tests() {
        let c = parse(
            "3 passed, 1 failed\nsh: 5: lint-tool: not found\n",
            Some(127),
        );
        assert_eq!(test_outcome(&exited(127), &c).0, Outcome::TestsFailed);
        let none = parse("sh: 1: cargo: not found\n", Some(127));
        assert_eq!(
            test_outcome(&exited(127), &none).0,
            Outcome::TestCommandUnavailable
        );
    }

    #[test]
    fn a_toolchain_that_cannot_start_is_unavailable_not_failed() {
        let out = b"error: rustup could not choose a version of cargo to run, because one wasn't specified \
explicitly, and no default is configured.\nhelp: run 'rustup default stable' to download the latest stable release\n";
        let why = toolchain_error(out).expect("recognised");
        assert!(why.contains("no default is configured"), "{why}");
        let facts = PhaseFacts {
            exit_code: Some(1),
            toolchain_error: Some(why),
            ..Default::default()
        };
        let none = parse(std::str::from_utf8(out).expect("utf8"), Some(1));
        let (outcome, reason) = test_outcome(&facts, &none);
        assert_eq!(outcome, Outcome::TestCommandUnavailable);
        let reason = reason.unwrap_or_default();
        assert!(reason.contains("the toolchain could not start"), "{reason}");
        let missing = b"error: toolchain 'nightly-x86_64-unknown-linux-gnu' is not installed\n";
        assert!(toolchain_error(missing).is_some());
        // Only the manager's own line at the start counts; counted tests still stand.
        assert!(
            toolchain_error(b"test x ... says error: rustup could not choose a version of\n")
                .is_none()
        );
        let ran = parse("3 passed, 1 failed\n", Some(1));
        assert_eq!(test_outcome(&facts, &ran).0, Outcome::TestsFailed);
        // A missing interpreter: the shell's 127.
        let gone = parse("sh: 1: python3: not found\n", Some(127));
        assert_eq!(
            test_outcome(&exited(127), &gone).0,
            Outcome::TestCommandUnavailable
        );
    }

    #[test]
    fn lying_counts_with_failing_exit_fail() {
        let c = parse(
            "test result: ok. 999 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n",
            Some(1),
        );
        assert_eq!(test_outcome(&exited(1), &c).0, Outcome::TestsFailed);
    }

    #[test]
    fn each_outcome_has_its_rule() {
        let ok = parse(
            "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n",
            Some(0),
        );
        assert_eq!(test_outcome(&exited(0), &ok).0, Outcome::TestsPassed);
        let none = parse(
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n",
            Some(0),
        );
        assert_eq!(test_outcome(&exited(0), &none).0, Outcome::NoTestsObserved);
        let garbage = parse("all good\n", Some(0));
        assert_eq!(
            test_outcome(&exited(0), &garbage).0,
            Outcome::CountsUnparsed
        );
        assert_eq!(test_outcome(&exited(2), &garbage).0, Outcome::TestsFailed);
        assert_eq!(
            test_outcome(&exited(127), &garbage).0,
            Outcome::TestCommandUnavailable
        );
        assert_eq!(
            test_outcome(&exited(126), &garbage).0,
            Outcome::TestCommandUnavailable
        );
        let timed = PhaseFacts {
            timed_out: true,
            signal: Some(9),
            ..Default::default()
        };
        assert_eq!(test_outcome(&timed, &garbage).0, Outcome::BudgetExpired);
        let oom = PhaseFacts {
            oom_kills: 1,
            signal: Some(9),
            ..Default::default()
        };
        assert_eq!(test_outcome(&oom, &ok).0, Outcome::EnvironmentExhausted);
        let pids = PhaseFacts {
            pids_max: 4,
            ..exited(0)
        };
        assert_eq!(test_outcome(&pids, &ok).0, Outcome::EnvironmentExhausted);
        let disk = PhaseFacts {
            disk_full: true,
            ..exited(1)
        };
        assert_eq!(
            test_outcome(&disk, &garbage).0,
            Outcome::EnvironmentExhausted
        );
        let xfsz = PhaseFacts {
            signal: Some(25),
            ..Default::default()
        };
        assert_eq!(
            test_outcome(&xfsz, &garbage).0,
            Outcome::EnvironmentExhausted
        );
    }

    #[test]
    fn failures_claimed_before_exhaustion_stand() {
        let failed = parse("3 passed, 2 failed\n", Some(1));
        let passed = parse("3 passed, 0 failed\n", Some(1));
        for facts in [
            PhaseFacts {
                pids_max: 3,
                ..exited(1)
            },
            PhaseFacts {
                disk_full: true,
                ..exited(1)
            },
            PhaseFacts {
                signal: Some(25),
                ..Default::default()
            },
            PhaseFacts {
                oom_kills: 1,
                signal: Some(9),
                ..Default::default()
            },
        ] {
            let (outcome, why) = test_outcome(&facts, &failed);
            assert_eq!(outcome, Outcome::TestsFailed, "{facts:?}");
            assert!(why.unwrap_or_default().contains("2 failed"), "{facts:?}");
            assert_eq!(
                test_outcome(&facts, &passed).0,
                Outcome::EnvironmentExhausted,
                "{facts:?}"
            );
        }
        let setup = PhaseFacts {
            setup_error: Some("no mount".into()),
            ..Default::default()
        };
        assert_eq!(
            test_outcome(&setup, &failed).0,
            Outcome::EnvironmentExhausted
        );
    }

    fn rec(host: &str, port: u16, allowed: bool, reason: &str) -> EgressRecord {
        EgressRecord {
            host: host.into(),
            port,
            allowed,
            reason: reason.into(),
            bytes_up: 0,
            bytes_down: 0,
        }
    }

    #[test]
    fn install_rules() {
        let served = rec(
            "registry.example",
            443,
            true,
            "allowlisted by registry.example; CONNECT to 127.0.0.1:443",
        );
        let refused = rec(
            "blocked.example",
            443,
            false,
            "blocked.example is not on the allowlist",
        );
        let unreachable = rec(
            "registry.example",
            443,
            true,
            "allowlisted by registry.example, but connecting failed: connection refused",
        );
        let unlogged = rec(
            "",
            0,
            false,
            "3 further attempts not logged (log limit 2 reached)",
        );
        let timed = PhaseFacts {
            timed_out: true,
            ..Default::default()
        };
        let killed = PhaseFacts {
            signal: Some(15),
            ..Default::default()
        };
        let oom = PhaseFacts {
            oom_kills: 1,
            signal: Some(9),
            ..Default::default()
        };
        use Outcome::*;
        // (facts, egress log, outcome, what the finding must say)
        let table: Vec<(PhaseFacts, Vec<EgressRecord>, Option<Outcome>, &str)> = vec![
            (exited(0), vec![], None, ""),
            (exited(0), vec![refused.clone()], None, ""),
            (
                exited(1),
                vec![],
                Some(TestsFailed),
                "exit code 1; no test ran",
            ),
            (
                exited(1),
                vec![served.clone()],
                Some(TestsFailed),
                "exit code 1",
            ),
            (
                exited(1),
                vec![unlogged.clone()],
                Some(TestsFailed),
                "exit code 1",
            ),
            (
                exited(1),
                vec![served.clone(), refused.clone()],
                Some(EnvironmentExhausted),
                "blocked.example:443 (blocked.example is not on the allowlist)",
            ),
            (
                exited(6),
                vec![unreachable.clone()],
                Some(EnvironmentExhausted),
                "registry.example:443 (allowlisted by registry.example, but connecting failed",
            ),
            (
                killed.clone(),
                vec![refused.clone()],
                Some(EnvironmentExhausted),
                "killed by signal 15 after the egress proxy refused",
            ),
            (killed, vec![served], Some(TestsFailed), "signal 15"),
            // Rules before the egress log: unavailable, the clock, our own limits.
            (
                exited(127),
                vec![refused.clone()],
                Some(TestCommandUnavailable),
                "exit 127",
            ),
            (
                timed,
                vec![refused.clone()],
                Some(BudgetExpired),
                "wall-clock",
            ),
            (oom, vec![], Some(EnvironmentExhausted), "memory limit"),
        ];
        for (facts, egress, want, says) in table {
            let got = install_stops(&facts, &egress);
            assert_eq!(got.as_ref().map(|x| x.0), want, "{facts:?} {egress:?}");
            let why = got.map(|x| x.1).unwrap_or_default();
            assert!(why.contains(says), "{facts:?} {egress:?}: {why}");
        }
    }

    #[test]
    fn refusals_are_named_bounded_and_counted() {
        assert_eq!(refusals(&[]), None);
        let many: Vec<EgressRecord> = (0..40)
            .map(|i| rec(&format!("h{i}.example"), 443, false, &"x".repeat(1000)))
            .collect();
        let text = refusals(&many).expect("refusals");
        assert!(
            text.starts_with("40 connection(s) refused or failed: h0.example:443 ("),
            "{text}"
        );
        assert!(text.contains("h4.example:443"), "{text}");
        assert!(!text.contains("h5.example"), "{text}");
        assert!(text.ends_with("(and 35 other(s))"), "{text}");
        assert!(text.len() < 1200, "{} bytes", text.len());
        // The same refusal repeated is named once and counted each time.
        let same = vec![rec("a.example", 80, false, "not allowed"); 3];
        assert_eq!(
            refusals(&same).as_deref(),
            Some("3 connection(s) refused or failed: a.example:80 (not allowed)")
        );
    }
}
