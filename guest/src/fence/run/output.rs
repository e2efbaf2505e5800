//! A phase's output: read to its end in bounded memory (head and tail kept, every byte fed to the count
//! parsers) and cut to the verdict's size with the phase's header in front.

use crate::fence::counts;
use attestation::verdict::OUTPUT_TAIL_MAX;
use std::io::Read;

/// Output of one phase, read to its end in bounded memory: the count parsers see every byte as it arrives
/// ([`counts::Scanner`]), and only the head and the tail are kept for display.
#[derive(Debug, Default)]
pub struct Output {
    /// The first bytes of the stream (at most [`OUTPUT_TAIL_MAX`]).
    pub head: Vec<u8>,
    /// Total bytes the phase wrote.
    pub total: u64,
    /// The last bytes written (at most twice [`OUTPUT_TAIL_MAX`]).
    pub tail: Vec<u8>,
    /// What the count parsers found in the whole stream.
    pub scanned: counts::Scanned,
}

impl Output {
    /// Reads `r` to its end, feeding every byte to the count parsers.
    pub fn read_all(mut r: impl Read) -> Output {
        let mut out = Output::default();
        let mut scanner = counts::Scanner::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = &buf[..n];
            out.total += n as u64;
            scanner.feed(chunk);
            let room = OUTPUT_TAIL_MAX.saturating_sub(out.head.len());
            out.head.extend_from_slice(&chunk[..room.min(n)]);
            out.tail.extend_from_slice(chunk);
            if out.tail.len() > 2 * OUTPUT_TAIL_MAX {
                let cut = out.tail.len() - OUTPUT_TAIL_MAX;
                out.tail.drain(..cut);
            }
        }
        out.scanned = scanner.finish();
        out
    }
}

/// The tail of `out` after `header`, at most [`OUTPUT_TAIL_MAX`] bytes in all.
pub(super) fn tail_with_header(header: &str, out: &Output) -> String {
    let room = OUTPUT_TAIL_MAX.saturating_sub(header.len());
    let start = out.tail.len().saturating_sub(room);
    let mut s = header.to_owned();
    s.push_str(&String::from_utf8_lossy(&out.tail[start..]));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_the_head_and_the_tail_and_counts_everything() {
        let mut data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        data.extend_from_slice(b"\n3 passed, 2 failed\n");
        let out = Output::read_all(&data[..]);
        assert_eq!(out.total, data.len() as u64);
        assert_eq!(out.head, &data[..OUTPUT_TAIL_MAX]);
        assert!(out.tail.len() >= OUTPUT_TAIL_MAX && out.tail.len() <= 2 * OUTPUT_TAIL_MAX);
        assert!(data.ends_with(&out.tail));
        assert_eq!(
            out.scanned.found,
            vec![(counts::Parser::Plain, counts::Counts::new(3, 2, 0))]
        );
        let small = Output::read_all(&b"abc"[..]);
        assert_eq!(
            (small.head.as_slice(), small.tail.as_slice()),
            (&b"abc"[..], &b"abc"[..])
        );
    }

    #[test]
    fn tail_with_header_stays_within_the_limit() {
        let out = Output {
            total: 200_000,
            tail: vec![b'x'; 2 * OUTPUT_TAIL_MAX],
            ..Default::default()
        };
        let t = tail_with_header("# header\n", &out);
        assert!(t.starts_with("# header\n"));
        assert_eq!(t.len(), OUTPUT_TAIL_MAX);
    }
}
