//! Progress of a VM run, step by step (boot, attest, transfer, intake, install, cut, test, shutdown), on stderr: an
//! `indicatif` spinner on a terminal, JSON lines with `--progress json`, nothing otherwise. Never on stdout,
//! which carries only the verdict.

use std::io::Write;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// A spinner when stderr is a terminal, else nothing.
    #[default]
    Auto,
    /// One JSON object per line on stderr: `{"step":..,"event":"start"|"done"|"failed","elapsed_ms":..}`
    /// (`done`/`failed` add `"step_ms"` and, when failed, `"error"`).
    Json,
    /// Nothing.
    None,
}

impl Mode {
    /// Parses `auto`, `json` or `none`.
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "json" => Ok(Mode::Json),
            "none" => Ok(Mode::None),
            other => Err(format!(
                "`{}`: expected auto, json or none",
                attestation::text::escape(other)
            )),
        }
    }
}

/// The steps shown, in order.
pub const STEPS: &[&str] = &[
    "boot", "attest", "transfer", "intake", "install", "cut", "test", "shutdown",
];

/// The progress display of one run; [`Progress::step`] ends the current step and starts the next.
pub struct Progress {
    mode: Mode,
    bar: Option<indicatif::ProgressBar>,
    start: Instant,
    current: Option<(&'static str, Instant)>,
    /// Every finished step with its duration (for the summary and benchmarks).
    pub done: Vec<(&'static str, Duration)>,
}

impl Progress {
    /// A display in `mode` (the spinner only when stderr is a terminal).
    pub fn new(mode: Mode) -> Progress {
        use std::io::IsTerminal;
        let bar = (mode == Mode::Auto && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} vm {msg} [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Progress {
            mode,
            bar,
            start: Instant::now(),
            current: None,
            done: Vec::new(),
        }
    }

    fn json(&self, v: serde_json::Value) {
        if self.mode == Mode::Json {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "{v}");
        }
    }

    fn close_current(&mut self, error: Option<&str>) {
        if let Some((name, since)) = self.current.take() {
            let took = since.elapsed();
            self.done.push((name, took));
            let mut v = serde_json::json!({
                "step": name,
                "event": if error.is_some() { "failed" } else { "done" },
                "elapsed_ms": self.start.elapsed().as_millis() as u64,
                "step_ms": took.as_millis() as u64,
            });
            if let Some(e) = error {
                v["error"] = serde_json::Value::String(e.to_string());
            }
            self.json(v);
            if let Some(b) = &self.bar {
                b.println(format!(
                    "  {} {name} {:.1} s",
                    if error.is_some() { "failed" } else { "done  " },
                    took.as_secs_f64()
                ));
            }
        }
    }

    /// Ends the current step (done) and starts `name`, with `detail` shown beside it on a terminal.
    pub fn step(&mut self, name: &'static str, detail: &str) {
        self.close_current(None);
        self.current = Some((name, Instant::now()));
        self.json(serde_json::json!({
            "step": name,
            "event": "start",
            "elapsed_ms": self.start.elapsed().as_millis() as u64,
        }));
        if let Some(b) = &self.bar {
            b.set_message(format!("{name}: {detail}"));
        }
    }

    /// Ends the run: the current step done, or failed with `error`; the spinner is cleared.
    pub fn finish(&mut self, error: Option<&str>) {
        self.close_current(error);
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_steps_are_recorded_in_order() {
        assert_eq!(Mode::parse("json"), Ok(Mode::Json));
        assert!(Mode::parse("fancy").is_err());
        let mut p = Progress::new(Mode::None);
        p.step("boot", "");
        p.step("attest", "");
        p.finish(Some("x"));
        let names: Vec<&str> = p.done.iter().map(|d| d.0).collect();
        assert_eq!(names, ["boot", "attest"]);
    }
}
