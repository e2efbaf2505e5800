//! Outcome classification: turns what a phase did (exit, signal, limits that fired, counts) into one of the
//! eight named outcomes of DESIGN.md. Pure functions, so that every rule has a unit test.

use super::counts::CountsResult;
use attestation::verdict::Outcome;

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

/// Whether the install phase ends the run, and how: `None` when the test phase may start.
pub fn install_stops(f: &PhaseFacts) -> Option<(Outcome, String)> {
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
    match (f.exit_code, f.signal) {
        (Some(0), _) => None,
        (Some(c), _) => Some((
            Outcome::TestsFailed,
            format!("install phase failed with exit code {c}"),
        )),
        (None, Some(s)) => Some((
            Outcome::TestsFailed,
            format!("install phase killed by signal {s}"),
        )),
        (None, None) => Some((
            Outcome::EnvironmentExhausted,
            "install phase ended without an exit status".into(),
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

    #[test]
    fn install_rules() {
        assert_eq!(install_stops(&exited(0)), None);
        assert_eq!(
            install_stops(&exited(1)).map(|x| x.0),
            Some(Outcome::TestsFailed)
        );
        assert_eq!(
            install_stops(&exited(127)).map(|x| x.0),
            Some(Outcome::TestCommandUnavailable)
        );
        let timed = PhaseFacts {
            timed_out: true,
            ..Default::default()
        };
        assert_eq!(
            install_stops(&timed).map(|x| x.0),
            Some(Outcome::BudgetExpired)
        );
    }
}
