//! The guest's phases, reported to the host on the job channel (`Progress` frames, guest::channel): the fence
//! names each phase as it starts (RunOptions::on_phase), and a thread of the agent sends the current phase at
//! once and again every [`channel::PROGRESS_EVERY`] while it lasts, so that the host can show on its stderr that
//! the guest is alive and what it is doing (a 12 s install phase gives several lines).
//!
//! Every frame the agent writes while this thread runs goes through [`send`], which holds one lock for the
//! whole frame: the reporter's frames and the install network's (`InstallStart`, `Cut`) never interleave.

use crate::channel::{self, ChannelError, FrameType, ProgressNote};
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Held while one frame is written to the job channel.
static WRITE: Mutex<()> = Mutex::new(());

/// Writes one frame to the job channel, whole, while no other writer of the agent is inside a frame.
pub fn send(w: &mut impl Write, kind: FrameType, payload: &[u8]) -> Result<(), ChannelError> {
    let _held = WRITE.lock().unwrap_or_else(|p| p.into_inner());
    channel::write_frame(w, kind, payload)
}

#[derive(Default)]
struct State {
    phase: Option<(String, Instant)>,
    changed: bool,
    stop: bool,
}

/// The reporting thread and the phase it reports; [`Reporter::stop`] (or dropping it) ends the thread.
pub struct Reporter {
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reporter {
    /// Starts reporting on `port` every `every` (the agent: [`channel::PROGRESS_EVERY`]). A write that fails ends
    /// the reporting (the run goes on; the host then sees no more progress).
    pub fn start<W: Write + Send + 'static>(mut port: W, every: Duration) -> Reporter {
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let (lock, cv) = &*shared;
            let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if g.stop {
                    return;
                }
                if !g.changed {
                    g = cv
                        .wait_timeout(g, every)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    if g.stop {
                        return;
                    }
                }
                g.changed = false;
                let Some((phase, since)) = g.phase.clone() else {
                    continue;
                };
                drop(g);
                let note = ProgressNote {
                    phase,
                    elapsed_s: u32::try_from(since.elapsed().as_secs()).unwrap_or(u32::MAX),
                };
                if send(&mut port, FrameType::Progress, &note.encode()).is_err() {
                    return;
                }
                g = lock.lock().unwrap_or_else(|p| p.into_inner());
            }
        });
        Reporter {
            state,
            thread: Some(thread),
        }
    }

    /// A hook for `RunOptions::on_phase` that names the phase to this reporter.
    pub fn hook(&self) -> crate::fence::run::PhaseHook {
        let state = self.state.clone();
        Arc::new(move |name: &str| set_phase(&state, name))
    }

    /// Names the phase the guest is in now (reported at once).
    pub fn phase(&self, name: &str) {
        set_phase(&self.state, name);
    }

    /// Ends the reporting thread and waits for it (no frame is sent after this returns).
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        {
            let mut g = self.state.0.lock().unwrap_or_else(|p| p.into_inner());
            g.stop = true;
        }
        self.state.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.end();
    }
}

fn set_phase(state: &(Mutex<State>, Condvar), name: &str) {
    let mut g = state.0.lock().unwrap_or_else(|p| p.into_inner());
    g.phase = Some((name.to_owned(), Instant::now()));
    g.changed = true;
    drop(g);
    state.1.notify_all();
}

#[cfg(test)]
mod tests {
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

    fn notes(s: &Shared) -> Vec<ProgressNote> {
        let bytes = s.0.lock().expect("lock").clone();
        let mut r = bytes.as_slice();
        let mut out = Vec::new();
        while !r.is_empty() {
            let p = channel::expect_frame(&mut r, FrameType::Progress, "progress").expect("frame");
            out.push(ProgressNote::decode(&p).expect("note"));
        }
        out
    }

    /// Each phase is sent when it starts and repeated while it lasts; nothing is sent before the first phase or
    /// after the stop; the frames are whole and in order.
    #[test]
    fn each_phase_is_sent_at_once_and_repeated_while_it_lasts() {
        let sink = Shared::default();
        let r = Reporter::start(sink.clone(), Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(60));
        assert!(notes(&sink).is_empty(), "nothing before the first phase");
        r.phase("install");
        // Wait (bounded) until the install phase was repeated at least twice.
        let deadline = Instant::now() + Duration::from_secs(10);
        while notes(&sink).iter().filter(|n| n.phase == "install").count() < 3 {
            assert!(Instant::now() < deadline, "install not repeated");
            std::thread::sleep(Duration::from_millis(10));
        }
        let hook = r.hook();
        hook("test");
        while !notes(&sink).iter().any(|n| n.phase == "test") {
            assert!(Instant::now() < deadline, "test never sent");
            std::thread::sleep(Duration::from_millis(10));
        }
        r.stop();
        let all = notes(&sink);
        let after = all.len();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(notes(&sink).len(), after, "nothing after the stop");
        let phases: Vec<&str> = all.iter().map(|n| n.phase.as_str()).collect();
        let first_test = phases.iter().position(|p| *p == "test").expect("test");
        assert!(
            phases[..first_test].iter().all(|p| *p == "install"),
            "{phases:?}"
        );
        assert!(
            phases[first_test..].iter().all(|p| *p == "test"),
            "{phases:?}"
        );
    }
}
