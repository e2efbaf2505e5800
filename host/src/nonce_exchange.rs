//! Nonces issued for a key (the hosted pool, docs/pool.md): the run makes its ephemeral evidence key first,
//! announces the key's SHA-256 ([`attestation::pool_ledger::key_sha256`]) and only then receives the nonce, from
//! a [`NonceSource`]. A direct `fenced-run run --nonce HEX` uses [`Fixed`]; `fenced-run run --nonce-exchange`
//! uses [`StdioExchange`]: one line `key-sha256 HEX` on stdout, one line of nonce hex back on stdin, within
//! `--nonce-timeout` seconds ([`DEFAULT_NONCE_TIMEOUT`]).

use std::io::{BufRead, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// How long `--nonce-exchange` waits for the nonce by default (`--nonce-timeout`): the pool's worker answers
/// as soon as the store has recorded the execution; a peer that says nothing holds the run (and, in the vm
/// tier, a booted guest) for no one.
pub const DEFAULT_NONCE_TIMEOUT: Duration = Duration::from_secs(120);

/// The first word of the line `--nonce-exchange` writes on stdout.
pub const KEY_LINE_PREFIX: &str = "key-sha256 ";

/// Gives the nonce for a key whose hash is announced.
pub trait NonceSource: Send {
    /// The nonce for the key whose SHA-256 is `key_sha256`, or why there is none.
    fn nonce_for(&mut self, key_sha256: &[u8; 32]) -> Result<Vec<u8>, String>;
}

/// A nonce fixed in advance (the founder's `--nonce`): the key hash is not looked at.
#[derive(Debug, Clone)]
pub struct Fixed(pub Vec<u8>);

impl NonceSource for Fixed {
    fn nonce_for(&mut self, _key_sha256: &[u8; 32]) -> Result<Vec<u8>, String> {
        Ok(self.0.clone())
    }
}

/// The `--nonce-exchange` protocol over this process's stdout and stdin (the pool's worker is at the other end),
/// waiting at most `timeout` for the nonce.
#[derive(Debug, Clone, Copy)]
pub struct StdioExchange {
    /// The longest wait for the nonce line (`--nonce-timeout`).
    pub timeout: Duration,
}

impl Default for StdioExchange {
    fn default() -> Self {
        StdioExchange {
            timeout: DEFAULT_NONCE_TIMEOUT,
        }
    }
}

impl StdioExchange {
    /// The exchange waiting at most `timeout` for the nonce.
    pub fn within(timeout: Duration) -> Self {
        StdioExchange { timeout }
    }
}

/// Longest line of nonce hex read back (64 bytes as hex, whitespace and a `0x` allowed).
const MAX_LINE: u64 = 256;

/// The exchange over any writer and reader: writes `key-sha256 HEX\n`, flushes, reads one line and parses it
/// as a nonce of 16 to 64 bytes.
pub fn exchange(
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    key_sha256: &[u8; 32],
) -> Result<Vec<u8>, String> {
    writeln!(out, "{KEY_LINE_PREFIX}{}", hex::encode(key_sha256))
        .and_then(|()| out.flush())
        .map_err(|e| format!("--nonce-exchange: writing the key hash: {e}"))?;
    let mut line = String::new();
    let n = std::io::Read::take(input, MAX_LINE)
        .read_line(&mut line)
        .map_err(|e| format!("--nonce-exchange: reading the nonce: {e}"))?;
    if n == 0 {
        return Err("--nonce-exchange: stdin closed before a nonce arrived".into());
    }
    if !line.ends_with('\n') {
        return Err(format!(
            "--nonce-exchange: the nonce line is not one line of at most {MAX_LINE} bytes"
        ));
    }
    attestation::binding::parse_nonce_hex(line.trim())
        .map_err(|e| format!("--nonce-exchange: the nonce received: {e}"))
}

/// Reads one line (at most [`MAX_LINE`] bytes, the newline included) from `fd`, a byte at a time so that
/// nothing after it is consumed, giving up when no full line has arrived within `timeout`.
fn read_line_within(fd: BorrowedFd<'_>, timeout: Duration) -> Result<Vec<u8>, String> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    while !line.ends_with(b"\n") && (line.len() as u64) < MAX_LINE {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "--nonce-exchange: no nonce arrived on stdin within {} s (--nonce-timeout)",
                timeout.as_secs_f64()
            ));
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("--nonce-exchange: waiting for the nonce: {e}")),
        }
        let mut b = [0u8; 1];
        match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut b) {
            Ok(0) => break,
            Ok(_) => line.push(b[0]),
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(e) => return Err(format!("--nonce-exchange: reading the nonce: {e}")),
        }
    }
    Ok(line)
}

/// [`exchange`] with the nonce read from `input` (a pipe, stdin) within `timeout`: the key hash written, then
/// one line read, or an error naming `--nonce-timeout` when none arrived in time.
pub fn exchange_within(
    out: &mut dyn Write,
    input: BorrowedFd<'_>,
    key_sha256: &[u8; 32],
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    writeln!(out, "{KEY_LINE_PREFIX}{}", hex::encode(key_sha256))
        .and_then(|()| out.flush())
        .map_err(|e| format!("--nonce-exchange: writing the key hash: {e}"))?;
    let line = read_line_within(input, timeout)?;
    // The line read is parsed as `exchange` parses it.
    exchange(&mut std::io::sink(), &mut line.as_slice(), key_sha256)
}

impl NonceSource for StdioExchange {
    fn nonce_for(&mut self, key_sha256: &[u8; 32]) -> Result<Vec<u8>, String> {
        let stdout = std::io::stdout();
        let stdin = std::io::stdin();
        exchange_within(&mut stdout.lock(), stdin.as_fd(), key_sha256, self.timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announces_then_reads_one_nonce() {
        let mut out = Vec::new();
        let mut input: &[u8] = b"00112233445566778899aabbccddeeff\nrest";
        let n = exchange(&mut out, &mut input, &[0xab; 32]).expect("nonce");
        assert_eq!(
            n,
            hex::decode("00112233445566778899aabbccddeeff").expect("hex")
        );
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("key-sha256 {}\n", "ab".repeat(32))
        );
    }

    #[test]
    fn refuses_what_is_not_a_nonce() {
        for bad in [
            &b""[..],
            b"0011\n",
            b"zz\n",
            b"00112233445566778899aabbccddeeff",
        ] {
            let mut input: &[u8] = bad;
            assert!(exchange(&mut Vec::new(), &mut input, &[0; 32]).is_err());
        }
        let long = vec![b'0'; 400];
        let mut input: &[u8] = &long;
        assert!(exchange(&mut Vec::new(), &mut input, &[0; 32]).is_err());
    }

    #[test]
    fn a_nonce_within_the_deadline_is_taken_and_nothing_after_it_is_read() {
        use std::io::Read;
        let (mut r, mut w) = std::io::pipe().expect("pipe");
        w.write_all(b"00112233445566778899aabbccddeeff\nafter")
            .expect("write");
        let mut out = Vec::new();
        let n =
            exchange_within(&mut out, r.as_fd(), &[1; 32], Duration::from_secs(5)).expect("nonce");
        assert_eq!(
            n,
            hex::decode("00112233445566778899aabbccddeeff").expect("hex")
        );
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("key-sha256 {}\n", "01".repeat(32))
        );
        drop(w);
        let mut rest = String::new();
        r.read_to_string(&mut rest).expect("rest");
        assert_eq!(rest, "after");
    }

    #[test]
    fn no_nonce_within_the_deadline_is_an_error_naming_the_flag() {
        // The writer stays open and silent: without a deadline this would wait forever.
        let (r, _w) = std::io::pipe().expect("pipe");
        let t0 = Instant::now();
        let e = exchange_within(
            &mut Vec::new(),
            r.as_fd(),
            &[0; 32],
            Duration::from_millis(300),
        )
        .expect_err("no nonce");
        assert!(e.contains("--nonce-timeout"), "{e}");
        assert!(e.contains("no nonce arrived"), "{e}");
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        // A line that starts but never ends is no nonce either.
        let (r, mut w) = std::io::pipe().expect("pipe");
        w.write_all(b"0011").expect("write");
        let e = exchange_within(
            &mut Vec::new(),
            r.as_fd(),
            &[0; 32],
            Duration::from_millis(200),
        )
        .expect_err("half a line");
        assert!(e.contains("--nonce-timeout"), "{e}");
        // A closed stdin is said as such, at once.
        let (r, w) = std::io::pipe().expect("pipe");
        drop(w);
        let e = exchange_within(
            &mut Vec::new(),
            r.as_fd(),
            &[0; 32],
            Duration::from_secs(30),
        )
        .expect_err("closed");
        assert!(e.contains("closed"), "{e}");
    }
}
