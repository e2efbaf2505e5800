//! Progress of a VM run, step by step (boot, attest, transfer, intake, install, cut, test, shutdown), on stderr:
//! an `indicatif` spinner on a terminal, plain lines where stderr is not a terminal (`vm          STEP: ...`,
//! and `vm          still STEP ...` at least every [`STILL_EVERY`] while a step lasts), JSON lines with
//! `--progress json`, nothing with `none`. The guest's own phases (its `Progress` frames: intake, prepare,
//! install, cut, test, classify) are shown beside the host's steps. Never on stdout, which carries only the
//! verdict. [`Ticker`] gives the steps before a VM runs (set-up, image build) the same "still" lines.

use guest::channel::ProgressNote;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a step may go without a line: a "still" line follows after this.
pub const STILL_EVERY: Duration = Duration::from_secs(5);

/// The column every progress line's label is padded to (as the demo's summary lines are).
const LABEL: usize = 12;

/// How progress is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// A spinner when stderr is a terminal, else plain lines ([`Mode::Text`]).
    #[default]
    Auto,
    /// Plain lines on stderr: each step as it starts, each phase of the guest as it starts, and a "still" line
    /// at least every [`STILL_EVERY`].
    Text,
    /// One JSON object per line on stderr: `{"step":..,"event":"start"|"done"|"failed"|"still"|"guest",
    /// "elapsed_ms":..}` (`done`/`failed`/`still` add `"step_ms"`; `failed` adds `"error"`; `guest` and
    /// `still` add the guest's `"phase"` and `"phase_s"` where it reported one).
    Json,
    /// Nothing.
    None,
}

impl Mode {
    /// Parses `auto`, `text`, `json` or `none`.
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "text" => Ok(Mode::Text),
            "json" => Ok(Mode::Json),
            "none" => Ok(Mode::None),
            other => Err(format!(
                "`{}`: expected auto, text, json or none",
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
    out: Box<dyn Write + Send>,
    start: Instant,
    current: Option<(&'static str, Instant, String)>,
    /// The guest's last reported phase, and when it arrived.
    guest: Option<(ProgressNote, Instant)>,
    last_line: Instant,
    still_every: Duration,
    /// Every finished step with its duration (for the summary and benchmarks).
    pub done: Vec<(&'static str, Duration)>,
}

impl Progress {
    /// A display in `mode` on stderr (the spinner only when stderr is a terminal; plain lines otherwise).
    pub fn new(mode: Mode) -> Progress {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        let mode = match mode {
            Mode::Auto if !terminal => Mode::Text,
            m => m,
        };
        let bar = (mode == Mode::Auto).then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} vm {msg} [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Progress::with_output(mode, bar, Box::new(std::io::stderr()), STILL_EVERY)
    }

    /// A display writing its lines (text or JSON) to `out`, with a "still" line after `still_every`.
    pub fn to_writer(mode: Mode, out: Box<dyn Write + Send>, still_every: Duration) -> Progress {
        Progress::with_output(mode, None, out, still_every)
    }

    fn with_output(
        mode: Mode,
        bar: Option<indicatif::ProgressBar>,
        out: Box<dyn Write + Send>,
        still_every: Duration,
    ) -> Progress {
        Progress {
            mode,
            bar,
            out,
            start: Instant::now(),
            current: None,
            guest: None,
            last_line: Instant::now(),
            still_every,
            done: Vec::new(),
        }
    }

    fn json(&mut self, v: serde_json::Value) {
        if self.mode == Mode::Json {
            let _ = writeln!(self.out, "{v}");
            self.last_line = Instant::now();
        }
    }

    fn text(&mut self, line: &str) {
        if self.mode == Mode::Text {
            let _ = writeln!(self.out, "{:<LABEL$}{line}", "vm");
            self.last_line = Instant::now();
        }
    }

    fn close_current(&mut self, error: Option<&str>) {
        if let Some((name, since, _)) = self.current.take() {
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
                self.text(&format!(
                    "failed at {name} after {:.1} s: {e}",
                    took.as_secs_f64()
                ));
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

    /// Ends the current step (done) and starts `name`, with `detail` (what it does) beside it.
    pub fn step(&mut self, name: &'static str, detail: &str) {
        self.close_current(None);
        self.current = Some((name, Instant::now(), detail.to_owned()));
        self.json(serde_json::json!({
            "step": name,
            "event": "start",
            "elapsed_ms": self.start.elapsed().as_millis() as u64,
        }));
        self.text(&format!("{name}: {detail}"));
        if let Some(b) = &self.bar {
            b.set_message(format!("{name}: {detail}"));
        }
    }

    /// What the guest said (a `Progress` frame): a line when its phase changed, and the phase in the
    /// following "still" lines.
    pub fn guest(&mut self, note: ProgressNote) {
        let changed = self
            .guest
            .as_ref()
            .is_none_or(|(n, _)| n.phase != note.phase);
        if changed {
            let step = self.current.as_ref().map_or("", |c| c.0);
            self.json(serde_json::json!({
                "step": step,
                "event": "guest",
                "phase": note.phase,
                "phase_s": note.elapsed_s,
                "elapsed_ms": self.start.elapsed().as_millis() as u64,
            }));
            self.text(&format!("guest: its {} phase started", note.phase));
        }
        if let (Some(b), Some((name, _, detail))) = (&self.bar, &self.current) {
            b.set_message(format!(
                "{name}: {detail} (guest: {} {} s)",
                note.phase, note.elapsed_s
            ));
        }
        self.guest = Some((note, Instant::now()));
    }

    /// Called while a step waits: a "still" line when nothing was printed for [`STILL_EVERY`].
    pub fn tick(&mut self) {
        if self.last_line.elapsed() < self.still_every {
            return;
        }
        let Some((name, since, detail)) = self.current.clone() else {
            return;
        };
        let took = since.elapsed();
        // The guest's phase, with the seconds it reported plus those since it reported them.
        let guest = self.guest.as_ref().map(|(n, at)| {
            (
                n.phase.clone(),
                u64::from(n.elapsed_s).saturating_add(at.elapsed().as_secs()),
                at.elapsed().as_secs(),
            )
        });
        let mut v = serde_json::json!({
            "step": name,
            "event": "still",
            "elapsed_ms": self.start.elapsed().as_millis() as u64,
            "step_ms": took.as_millis() as u64,
        });
        let mut line = format!("still {name}: {detail} ({} s)", took.as_secs());
        if let Some((phase, s, ago)) = &guest {
            v["phase"] = serde_json::Value::String(phase.clone());
            v["phase_s"] = serde_json::Value::from(*s);
            line.push_str(&format!(
                "; the guest is in its {phase} phase ({s} s, last heard {ago} s ago)"
            ));
        }
        self.json(v);
        self.text(&line);
        // A mode that prints nothing still counts this as the line, so the check above stays cheap.
        self.last_line = Instant::now();
    }

    /// Ends the run: the current step done, or failed with `error`; the spinner is cleared.
    pub fn finish(&mut self, error: Option<&str>) {
        let ok = error.is_none();
        self.close_current(error);
        if ok {
            self.text(&format!(
                "done in {:.1} s",
                self.start.elapsed().as_secs_f64()
            ));
        }
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

/// A step done before (or beside) a VM run that may take long: its label and what it does are printed on
/// stderr when it starts, and `LABEL still WHAT (N s)` every [`STILL_EVERY`] after the last line until it is
/// dropped. Used for the vm tier's set-up and the image build.
pub struct Ticker {
    state: Arc<(Mutex<TickState>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct TickState {
    label: String,
    what: String,
    since: Instant,
    stop: bool,
    out: Box<dyn Write + Send>,
}

impl Ticker {
    /// Prints `label what` on stderr and starts the "still" lines.
    pub fn start(label: &str, what: &str) -> Ticker {
        Ticker::to_writer(label, what, Box::new(std::io::stderr()), STILL_EVERY)
    }

    /// [`Ticker::start`] on `out`, with a "still" line after `every` without a line.
    pub fn to_writer(
        label: &str,
        what: &str,
        out: Box<dyn Write + Send>,
        every: Duration,
    ) -> Ticker {
        let state = Arc::new((
            Mutex::new(TickState {
                label: label.to_owned(),
                what: what.to_owned(),
                since: Instant::now(),
                stop: false,
                out,
            }),
            Condvar::new(),
        ));
        {
            let mut g = state.0.lock().unwrap_or_else(|p| p.into_inner());
            let line = format!("{:<LABEL$}{}", g.label, g.what);
            let _ = writeln!(g.out, "{line}");
        }
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let (lock, cv) = &*shared;
            let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut last = Instant::now();
            loop {
                if g.stop {
                    return;
                }
                let wait = every.saturating_sub(last.elapsed());
                if wait.is_zero() {
                    let line = format!(
                        "{:<LABEL$}still {} ({} s)",
                        g.label,
                        g.what,
                        g.since.elapsed().as_secs()
                    );
                    let _ = writeln!(g.out, "{line}");
                    last = Instant::now();
                    continue;
                }
                let (ng, _) = cv.wait_timeout(g, wait).unwrap_or_else(|p| p.into_inner());
                g = ng;
                if g.since > last {
                    // A new step printed its own line.
                    last = g.since;
                }
            }
        });
        Ticker {
            state,
            thread: Some(thread),
        }
    }

    /// Prints `label what` and makes `what` the step the "still" lines name.
    pub fn step(&self, what: &str) {
        self.update(what, true);
    }

    /// Makes `what` the step the "still" lines name, after a line the caller printed itself.
    pub fn set(&self, what: &str) {
        self.update(what, false);
    }

    fn update(&self, what: &str, print: bool) {
        let mut g = self.state.0.lock().unwrap_or_else(|p| p.into_inner());
        g.what = what.to_owned();
        g.since = Instant::now();
        if print {
            let line = format!("{:<LABEL$}{}", g.label, g.what);
            let _ = writeln!(g.out, "{line}");
        }
        drop(g);
        self.state.1.notify_all();
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.state.0.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        self.state.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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

#[cfg(test)]
mod line_tests {
    use super::*;

    /// A sink shared with the test.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
        }
    }

    /// Plain lines: each step as it starts, the guest's phase when it changes, "still" lines naming the step and
    /// the guest's phase once the interval passed without a line, and how the run ended.
    #[test]
    fn text_lines_name_each_step_the_guests_phase_and_what_is_still_running() {
        let sink = Shared::default();
        let mut p = Progress::to_writer(Mode::Text, Box::new(sink.clone()), Duration::ZERO);
        p.tick();
        assert!(sink.text().is_empty(), "no step yet: {}", sink.text());
        p.step("install", "the install phase");
        p.guest(ProgressNote {
            phase: "install".into(),
            elapsed_s: 0,
        });
        p.guest(ProgressNote {
            phase: "install".into(),
            elapsed_s: 2,
        });
        p.tick();
        p.tick();
        p.finish(Some("the guest went away"));
        let t = sink.text();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "vm          install: the install phase", "{t}");
        assert_eq!(
            lines[1], "vm          guest: its install phase started",
            "{t}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.contains("guest: its")).count(),
            1,
            "a repeated phase is no new line: {t}"
        );
        let still: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("vm          still install: the install phase ("))
            .collect();
        assert_eq!(still.len(), 2, "{t}");
        assert!(
            still[0].contains("the guest is in its install phase (2 s"),
            "{t}"
        );
        assert!(
            lines
                .last()
                .is_some_and(|l| l.starts_with("vm          failed at install after ")
                    && l.ends_with("the guest went away")),
            "{t}"
        );

        // JSON: the same events as objects; none in `none`.
        let sink = Shared::default();
        let mut p = Progress::to_writer(Mode::Json, Box::new(sink.clone()), Duration::ZERO);
        p.step("test", "x");
        p.guest(ProgressNote {
            phase: "test".into(),
            elapsed_s: 1,
        });
        p.tick();
        p.finish(None);
        let events: Vec<serde_json::Value> = sink
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let kinds: Vec<&str> = events
            .iter()
            .map(|v| v["event"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(kinds, ["start", "guest", "still", "done"], "{events:?}");
        assert_eq!(events[2]["phase"], "test");
        let sink = Shared::default();
        let mut p = Progress::to_writer(Mode::None, Box::new(sink.clone()), Duration::ZERO);
        p.step("test", "x");
        p.tick();
        p.finish(None);
        assert!(sink.text().is_empty());
    }

    /// Progress never waits on its own: a step with nothing new prints no "still" line before the interval.
    #[test]
    fn no_still_line_before_the_interval() {
        let sink = Shared::default();
        let mut p = Progress::to_writer(
            Mode::Text,
            Box::new(sink.clone()),
            Duration::from_secs(3600),
        );
        p.step("boot", "starting QEMU");
        p.tick();
        assert_eq!(sink.text().lines().count(), 1, "{}", sink.text());
    }

    /// A ticker prints its step at once, "still" lines while it lasts, each new step's line, and nothing after
    /// it is dropped.
    #[test]
    fn a_ticker_says_what_it_does_and_that_it_is_still_at_it() {
        let sink = Shared::default();
        let t = Ticker::to_writer(
            "image",
            "packing the initramfs",
            Box::new(sink.clone()),
            Duration::from_millis(10),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while sink.text().matches("still packing").count() < 2 {
            assert!(Instant::now() < deadline, "{}", sink.text());
            std::thread::sleep(Duration::from_millis(5));
        }
        t.step("hashing");
        while !sink.text().contains("still hashing") {
            assert!(Instant::now() < deadline, "{}", sink.text());
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(t);
        let n = sink.text().len();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(sink.text().len(), n, "nothing after the drop");
        let text = sink.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "image       packing the initramfs");
        assert!(lines.contains(&"image       hashing"), "{text}");
        assert!(
            lines.iter().all(|l| l.starts_with("image       ")),
            "{text}"
        );
    }
}
