//! A minimal QMP client for the cut: the host removes the install phase's network backend from the running VM
//! (`netdev_del`), so that after the cut QEMU itself has no user network left for the guest, whatever the guest
//! (or a job that took it over) does with its virtio-net device.
//!
//! QMP is line-delimited JSON on a Unix socket (`-qmp unix:PATH,server=on,wait=off`): QEMU greets with
//! `{"QMP": {...}}`, the client enters command mode with `qmp_capabilities`, then each command is answered by
//! `{"return": ...}` or `{"error": {"class": .., "desc": ..}}`; asynchronous `{"event": ..}` lines may come in
//! between and are skipped. Every read and write is bounded in time and each line in length.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The QMP socket's file name in the VM's directory.
pub const SOCKET_FILE: &str = "qmp.sock";
/// The id of the install phase's netdev (`-netdev user,id=...`).
pub const NETDEV_ID: &str = "net0";
/// The longest QMP line read (QEMU's answers here are a few hundred bytes).
const MAX_LINE: u64 = 64 << 10;

/// One QMP session.
pub struct Qmp {
    rd: BufReader<UnixStream>,
    wr: UnixStream,
    deadline: Instant,
    path: String,
}

impl Qmp {
    /// Connects to `sock`, reads the greeting and enters command mode, all within `timeout`.
    pub fn connect(sock: &Path, timeout: Duration) -> Result<Qmp, String> {
        let path = sock.display().to_string();
        let s = UnixStream::connect(sock).map_err(|e| format!("QMP {path}: connect: {e}"))?;
        let wr = s
            .try_clone()
            .map_err(|e| format!("QMP {path}: socket: {e}"))?;
        let mut q = Qmp {
            rd: BufReader::new(s),
            wr,
            deadline: Instant::now() + timeout,
            path,
        };
        let greeting = q.line()?;
        if greeting.get("QMP").is_none() {
            return Err(format!(
                "QMP {}: the first line is not QMP's greeting: {}",
                q.path,
                attestation::text::escape(&greeting.to_string())
            ));
        }
        q.execute("qmp_capabilities", None)?;
        Ok(q)
    }

    /// Runs `command` with `arguments`; returns its `return` value, or QEMU's error as text.
    pub fn execute(
        &mut self,
        command: &str,
        arguments: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, String> {
        let mut msg = serde_json::json!({ "execute": command });
        if let Some(a) = arguments {
            msg["arguments"] = a;
        }
        self.set_timeouts()?;
        writeln!(self.wr, "{msg}").map_err(|e| format!("QMP {}: {command}: {e}", self.path))?;
        loop {
            let v = self.line()?;
            if v.get("event").is_some() {
                continue;
            }
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                let desc = e
                    .get("desc")
                    .and_then(|d| d.as_str())
                    .unwrap_or("(no description)");
                return Err(format!(
                    "QMP {}: {command}: QEMU refused: {}",
                    self.path,
                    attestation::text::escape(desc)
                ));
            }
            return Err(format!(
                "QMP {}: {command}: an answer that is neither a return nor an error: {}",
                self.path,
                attestation::text::escape(&v.to_string())
            ));
        }
    }

    fn set_timeouts(&self) -> Result<(), String> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("QMP {}: no answer in time", self.path))?;
        for r in [
            self.wr.set_read_timeout(Some(left)),
            self.wr.set_write_timeout(Some(left)),
        ] {
            r.map_err(|e| format!("QMP {}: {e}", self.path))?;
        }
        Ok(())
    }

    /// The next line, parsed as a JSON object.
    fn line(&mut self) -> Result<serde_json::Value, String> {
        self.set_timeouts()?;
        let mut buf = Vec::new();
        let n = (&mut self.rd)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    format!("QMP {}: no answer in time", self.path)
                }
                _ => format!("QMP {}: read: {e}", self.path),
            })?;
        if n == 0 {
            return Err(format!("QMP {}: QEMU closed the socket", self.path));
        }
        if buf.last() != Some(&b'\n') {
            return Err(format!(
                "QMP {}: a line longer than {MAX_LINE} bytes, or cut off",
                self.path
            ));
        }
        let v: serde_json::Value = serde_json::from_slice(&buf).map_err(|e| {
            format!(
                "QMP {}: not JSON ({e}): {}",
                self.path,
                attestation::text::escape(&String::from_utf8_lossy(&buf[..buf.len().min(200)]))
            )
        })?;
        if !v.is_object() {
            return Err(format!(
                "QMP {}: a line that is not a JSON object",
                self.path
            ));
        }
        Ok(v)
    }
}

/// Removes the netdev `id` from the VM behind `sock` within `timeout` (the NIC's link goes down and the user
/// network's slirp instance, with its guestfwd, is freed).
pub fn netdev_del(sock: &Path, id: &str, timeout: Duration) -> Result<(), String> {
    let mut q = Qmp::connect(sock, timeout)?;
    q.execute("netdev_del", Some(serde_json::json!({ "id": id })))
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A fake QEMU: answers each line read with the next of `answers` (a `None` closes the socket); returns
    /// the lines it read.
    fn fake(
        dir: &Path,
        greeting: &'static str,
        answers: Vec<Option<&'static str>>,
    ) -> (std::path::PathBuf, std::thread::JoinHandle<Vec<String>>) {
        let sock = dir.join(SOCKET_FILE);
        let l = UnixListener::bind(&sock).expect("bind");
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().expect("accept");
            let mut w = s.try_clone().expect("clone");
            let mut r = BufReader::new(s);
            w.write_all(greeting.as_bytes()).expect("greet");
            let mut seen = Vec::new();
            for a in answers {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                seen.push(line.trim().to_string());
                match a {
                    Some(a) => w.write_all(a.as_bytes()).expect("answer"),
                    None => return seen,
                }
            }
            seen
        });
        (sock, h)
    }

    const GREETING: &str =
        "{\"QMP\": {\"version\": {\"qemu\": {\"major\": 10}}, \"capabilities\": []}}\n";

    /// A fake QEMU that greets, accepts `qmp_capabilities` and answers the next command with `answer`.
    fn after_capabilities(
        dir: &Path,
        answer: &'static str,
    ) -> (std::path::PathBuf, std::thread::JoinHandle<Vec<String>>) {
        fake(
            dir,
            GREETING,
            vec![Some("{\"return\": {}}\n"), Some(answer)],
        )
    }

    /// The error of `netdev_del` against the fake QEMU `start` makes in a fresh directory.
    fn refusal(
        start: impl FnOnce(&Path) -> (std::path::PathBuf, std::thread::JoinHandle<Vec<String>>),
    ) -> String {
        let d = tempfile::tempdir().expect("tmp");
        let (sock, h) = start(d.path());
        let e = netdev_del(&sock, NETDEV_ID, Duration::from_secs(5)).expect_err("an error");
        h.join().expect("fake");
        e
    }

    #[test]
    fn netdev_del_enters_command_mode_skips_events_and_names_the_netdev() {
        let d = tempfile::tempdir().expect("tmp");
        let (sock, h) = after_capabilities(
            d.path(),
            "{\"event\": \"NIC_RX_FILTER_CHANGED\", \"data\": {}}\n{\"return\": {}}\n",
        );
        netdev_del(&sock, NETDEV_ID, Duration::from_secs(5)).expect("deleted");
        let seen = h.join().expect("fake");
        let v: Vec<serde_json::Value> = seen
            .iter()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(v[0], serde_json::json!({"execute": "qmp_capabilities"}));
        assert_eq!(
            v[1],
            serde_json::json!({"execute": "netdev_del", "arguments": {"id": "net0"}})
        );
    }

    #[test]
    fn qemus_refusal_garbage_silence_and_a_closed_socket_are_named() {
        let e = refusal(|d| {
            after_capabilities(
                d,
                "{\"error\": {\"class\": \"DeviceNotFound\", \"desc\": \"Device 'net0' not found\"}}\n",
            )
        });
        assert!(
            e.contains("netdev_del: QEMU refused: Device 'net0' not found"),
            "{e}"
        );
        let e = refusal(|d| fake(d, "not json\n", vec![]));
        assert!(e.contains("not JSON") && e.contains("not json"), "{e}");
        let e = refusal(|d| fake(d, "{\"hello\": 1}\n", vec![]));
        assert!(e.contains("not QMP's greeting"), "{e}");
        let e = refusal(|d| fake(d, GREETING, vec![None]));
        assert!(e.contains("QEMU closed the socket"), "{e}");

        // A QEMU that greets and then never answers: bounded by the timeout.
        let d = tempfile::tempdir().expect("tmp");
        let sock = d.path().join(SOCKET_FILE);
        let l = UnixListener::bind(&sock).expect("bind");
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            s.write_all(GREETING.as_bytes()).expect("greet");
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        });
        let t = Instant::now();
        let e = netdev_del(&sock, NETDEV_ID, Duration::from_millis(300)).expect_err("silent");
        assert!(e.contains("no answer in time"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().expect("fake");

        let e = netdev_del(
            &d.path().join("none.sock"),
            NETDEV_ID,
            Duration::from_secs(1),
        )
        .expect_err("no socket");
        assert!(e.contains("connect"), "{e}");
    }
}
