//! The job channel between the host and the guest agent: one virtio-serial port carrying length-prefixed frames.
//!
//! A frame is `type (1 byte) || length (4 bytes, big-endian) || payload (length bytes)`. Both sides read each
//! frame with a per-type size limit and treat a short read, an unknown type or an oversized length as an error
//! naming what arrived. The exchange, in order (docs/vm.md):
//! `Hello` (guest) -> `KeyAnnounce` (guest) -> `JobHeader` (host) -> `ReportRequest`/`Report` (sim only) -> `BundleRequest` (guest) ->
//! `Bundle` (host) -> [`InstallStart` (guest) -> `Cut` (guest) -> `CutDone` (host), for a job with an install
//! phase] -> `Evidence` or `Failure` (guest) -> `Ack` (host) -> the guest powers off. From the bundle's arrival
//! to the evidence the guest also sends `Progress` frames (its phase, on each change and every
//! [`PROGRESS_EVERY`]), which the host shows on its stderr and otherwise ignores.

use attestation::wire::{Reader, WireError};
use std::io::{Read, Write};

/// The protocol name the guest sends in its `Hello` frame.
pub const PROTOCOL: &[u8] = b"fenced-run-channel/1";
/// The name of the virtio-serial port (`-device virtserialport,name=...`).
pub const PORT_NAME: &str = "fenced-run.job";
/// Largest bundle the channel carries (the guest keeps it in memory once).
pub const MAX_BUNDLE: u32 = 512 << 20;
/// Largest evidence the guest sends back.
pub const MAX_EVIDENCE: u32 = 16 << 20;
/// Largest payload of every other frame.
pub const MAX_SMALL: u32 = 1 << 20;

/// Frame types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// Guest -> host: the agent is up; payload [`PROTOCOL`].
    Hello = 1,
    /// Host -> guest: the job header ([`JobHeader`]).
    JobHeader = 2,
    /// Guest -> host (sim tier only): 64 bytes of report data for the host's sim PSP.
    ReportRequest = 3,
    /// Host -> guest: the report and its certificates ([`encode_report`]).
    Report = 4,
    /// Host -> guest: the bundle bytes, exactly as many as the header announced.
    Bundle = 5,
    /// Guest -> host: the evidence (CBOR, docs/evidence-format.md).
    Evidence = 6,
    /// Host -> guest: the evidence arrived whole; the guest may power off.
    Ack = 7,
    /// Guest -> host: the agent could not produce evidence at all; payload is the reason (UTF-8).
    Failure = 8,
    /// Host -> guest: the sim PSP could not sign a report; payload is the reason (UTF-8).
    ReportFailure = 9,
    /// Guest -> host: the report is taken; send the bundle now (empty payload).
    BundleRequest = 10,
    /// Guest -> host: the install phase starts (its egress proxy is up); empty payload.
    InstallStart = 11,
    /// Guest -> host: the install phase is over and the guest has taken its network link down; the host must
    /// cut the install network (refuse every further dialer connection) and answer `CutDone`. Empty payload.
    Cut = 12,
    /// Host -> guest: the install network is cut on the host's side; payload: what the host did (UTF-8).
    CutDone = 13,
    /// Guest -> host, right after `Hello`: the SHA-256 of the agent's ephemeral evidence key
    /// ([`attestation::pool_ledger::key_sha256`], [`KEY_ANNOUNCE_LEN`] bytes). The key exists before the nonce:
    /// the host obtains the nonce for this key (a hosted pool issues it, docs/pool.md), then sends the header.
    KeyAnnounce = 14,
    /// Guest -> host, at any point after the bundle arrived: the phase the guest is in and for how long
    /// ([`ProgressNote`]); sent on every change of phase and every [`PROGRESS_EVERY`] while a phase lasts.
    Progress = 15,
}

/// How often the guest repeats its current phase in a `Progress` frame while the phase lasts.
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// The longest phase name a `Progress` frame carries.
pub const MAX_PHASE_NAME: usize = 32;

/// A `Progress` payload: `phase || ' ' || seconds` (ASCII): the guest's phase (lowercase letters and `-`, 1 to
/// [`MAX_PHASE_NAME`] bytes) and the whole seconds it has lasted so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressNote {
    /// The phase (`intake`, `prepare`, `install`, `cut`, `test`, `classify`, `seal`).
    pub phase: String,
    /// Whole seconds since the phase started.
    pub elapsed_s: u32,
}

impl ProgressNote {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        format!("{} {}", self.phase, self.elapsed_s).into_bytes()
    }

    /// Parses a payload; anything but a well-formed phase name, one space and a decimal number is malformed.
    pub fn decode(p: &[u8]) -> Result<ProgressNote, ChannelError> {
        let bad = |detail: String| ChannelError::Malformed {
            kind: FrameType::Progress,
            detail,
        };
        let shown = || {
            attestation::text::escape(&String::from_utf8_lossy(&p[..p.len().min(48)])).into_owned()
        };
        let text =
            std::str::from_utf8(p).map_err(|_| bad(format!("`{}` is not UTF-8", shown())))?;
        let (phase, secs) = text
            .split_once(' ')
            .ok_or_else(|| bad(format!("`{}`: expected `PHASE SECONDS`", shown())))?;
        if phase.is_empty()
            || phase.len() > MAX_PHASE_NAME
            || !phase.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        {
            return Err(bad(format!(
                "`{}`: the phase must be 1 to {MAX_PHASE_NAME} lowercase letters or `-`",
                shown()
            )));
        }
        if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!(
                "`{}`: the seconds are not a decimal number",
                shown()
            )));
        }
        let elapsed_s = secs
            .parse()
            .map_err(|_| bad(format!("`{}`: the seconds exceed {}", shown(), u32::MAX)))?;
        Ok(ProgressNote {
            phase: phase.to_owned(),
            elapsed_s,
        })
    }
}

/// The length of a `KeyAnnounce` payload: a SHA-256.
pub const KEY_ANNOUNCE_LEN: usize = 32;

/// Parses a `KeyAnnounce` payload: exactly [`KEY_ANNOUNCE_LEN`] bytes.
pub fn decode_key_announce(p: &[u8]) -> Result<[u8; KEY_ANNOUNCE_LEN], ChannelError> {
    p.try_into().map_err(|_| ChannelError::Malformed {
        kind: FrameType::KeyAnnounce,
        detail: format!("{} bytes; the key's SHA-256 is {KEY_ANNOUNCE_LEN}", p.len()),
    })
}

impl FrameType {
    /// The type of byte `b`, if it is one.
    pub fn from_byte(b: u8) -> Option<FrameType> {
        use FrameType::*;
        Some(match b {
            1 => Hello,
            2 => JobHeader,
            3 => ReportRequest,
            4 => Report,
            5 => Bundle,
            6 => Evidence,
            7 => Ack,
            8 => Failure,
            9 => ReportFailure,
            10 => BundleRequest,
            11 => InstallStart,
            12 => Cut,
            13 => CutDone,
            14 => KeyAnnounce,
            15 => Progress,
            _ => return None,
        })
    }

    /// The largest payload a frame of this type may carry.
    pub fn max_len(self) -> u32 {
        match self {
            FrameType::Bundle => MAX_BUNDLE,
            FrameType::Evidence => MAX_EVIDENCE,
            _ => MAX_SMALL,
        }
    }
}

/// Why a frame could not be read or written.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The other side closed the channel before a frame started.
    #[error("the channel closed (expected {0})")]
    Closed(&'static str),
    /// The channel closed inside a frame.
    #[error("the channel closed inside a {kind:?} frame: {got} of {want} bytes")]
    Truncated {
        /// The frame's type.
        kind: FrameType,
        /// Bytes announced.
        want: u64,
        /// Bytes that arrived.
        got: u64,
    },
    /// The channel closed inside a frame header.
    #[error("the channel closed inside a frame header ({0} of 5 bytes)")]
    TruncatedHeader(usize),
    /// A frame type byte that is not in the protocol.
    #[error("unknown frame type {0:#04x} (expected {1})")]
    UnknownType(u8, &'static str),
    /// A frame longer than its type allows.
    #[error("{kind:?} frame of {len} bytes exceeds its limit of {max}")]
    TooLarge {
        /// The frame's type.
        kind: FrameType,
        /// Announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A frame that is not the one the protocol expects here.
    #[error("unexpected {got:?} frame (expected {want})")]
    Unexpected {
        /// What arrived.
        got: FrameType,
        /// What was expected.
        want: &'static str,
    },
    /// A payload that does not parse.
    #[error("malformed {kind:?} frame: {detail}")]
    Malformed {
        /// The frame's type.
        kind: FrameType,
        /// What is wrong.
        detail: String,
    },
    /// The sink a streamed frame's payload goes to ([`read_frame_into`]) refused a write.
    #[error("storing the {kind:?} frame's payload after {stored} bytes: {source}")]
    Store {
        /// The frame's type.
        kind: FrameType,
        /// Bytes stored before the failure.
        stored: u64,
        /// What the sink said.
        #[source]
        source: std::io::Error,
    },
    /// A read or write failed (a timeout shows here as `WouldBlock`/`TimedOut`).
    #[error("channel {op}: {source}")]
    Io {
        /// `read` or `write`.
        op: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl ChannelError {
    /// Whether this is a read timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ChannelError::Io { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Its type.
    pub kind: FrameType,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Writes one frame and flushes.
pub fn write_frame(
    w: &mut impl Write,
    kind: FrameType,
    payload: &[u8],
) -> Result<(), ChannelError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= kind.max_len())
        .ok_or(ChannelError::TooLarge {
            kind,
            len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            max: kind.max_len(),
        })?;
    let mut head = [0u8; 5];
    head[0] = kind as u8;
    head[1..].copy_from_slice(&len.to_be_bytes());
    let io = |source| ChannelError::Io {
        op: "write",
        source,
    };
    w.write_all(&head).map_err(io)?;
    w.write_all(payload).map_err(io)?;
    w.flush().map_err(io)
}

/// Reads one frame header: its type and announced length, checked against the type's limit.
fn read_header(r: &mut impl Read, expect: &'static str) -> Result<(FrameType, u32), ChannelError> {
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Err(ChannelError::Closed(expect)),
            Ok(0) => return Err(ChannelError::TruncatedHeader(got)),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ChannelError::Io { op: "read", source }),
        }
    }
    let kind = FrameType::from_byte(head[0]).ok_or(ChannelError::UnknownType(head[0], expect))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    if len > kind.max_len() {
        return Err(ChannelError::TooLarge {
            kind,
            len,
            max: kind.max_len(),
        });
    }
    Ok((kind, len))
}

/// Reads one frame; `expect` names what the caller waits for (used in errors).
pub fn read_frame(r: &mut impl Read, expect: &'static str) -> Result<Frame, ChannelError> {
    let (kind, len) = read_header(r, expect)?;
    let mut payload = Vec::new();
    let read = r
        .take(u64::from(len))
        .read_to_end(&mut payload)
        .map_err(|source| ChannelError::Io { op: "read", source })?;
    if read as u64 != u64::from(len) {
        return Err(ChannelError::Truncated {
            kind,
            want: u64::from(len),
            got: read as u64,
        });
    }
    Ok(Frame { kind, payload })
}

/// Reads one frame and checks that it has type `want`.
pub fn expect_frame(
    r: &mut impl Read,
    want: FrameType,
    name: &'static str,
) -> Result<Vec<u8>, ChannelError> {
    let f = read_frame(r, name)?;
    if f.kind != want {
        return Err(ChannelError::Unexpected {
            got: f.kind,
            want: name,
        });
    }
    Ok(f.payload)
}

/// How many payload bytes [`read_frame_into`] gathers before handing them to its sink. A virtio-serial port
/// returns at most one 4 KiB buffer per `read`; gathering 256 KiB first makes the sink's work (hashing,
/// writing a file) a few hundred calls for a large bundle instead of one per 4 KiB.
pub const STREAM_CHUNK: usize = 256 << 10;

/// Reads one frame of type `want` and streams its payload into `sink` in chunks of at most [`STREAM_CHUNK`]
/// bytes as they arrive, never holding it whole in memory; returns the payload's length. The same limits and
/// errors as [`read_frame`]: an unknown type, a length above the type's limit, a frame of another type
/// ([`ChannelError::Unexpected`], its payload left unread) and a stream that ends inside the frame
/// ([`ChannelError::Truncated`], after what arrived went to the sink) are errors naming what arrived; a sink
/// that fails is [`ChannelError::Store`].
pub fn read_frame_into(
    r: &mut impl Read,
    want: FrameType,
    name: &'static str,
    sink: &mut impl Write,
) -> Result<u64, ChannelError> {
    let (kind, len) = read_header(r, name)?;
    if kind != want {
        return Err(ChannelError::Unexpected {
            got: kind,
            want: name,
        });
    }
    let want_len = u64::from(len);
    let mut buf = vec![0u8; STREAM_CHUNK.min(len as usize)];
    let mut got: u64 = 0;
    while got < want_len {
        // Fill the chunk (or what is left of the payload) from as many reads as the channel needs.
        let take = buf.len().min((want_len - got) as usize);
        let mut filled = 0;
        while filled < take {
            match r.read(&mut buf[filled..take]) {
                Ok(0) => {
                    let arrived = got + filled as u64;
                    let _ = sink.write_all(&buf[..filled]);
                    return Err(ChannelError::Truncated {
                        kind,
                        want: want_len,
                        got: arrived,
                    });
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => return Err(ChannelError::Io { op: "read", source }),
            }
        }
        sink.write_all(&buf[..filled])
            .map_err(|source| ChannelError::Store {
                kind,
                stored: got,
                source,
            })?;
        got += filled as u64;
    }
    sink.flush().map_err(|source| ChannelError::Store {
        kind,
        stored: got,
        source,
    })?;
    Ok(got)
}

/// How the bundle bytes are packed (what intake in the guest unpacks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleKind {
    /// An uncompressed tar.
    Tar = 0,
    /// A gzip-compressed tar.
    TarGz = 1,
    /// A zip archive.
    Zip = 2,
}

impl BundleKind {
    /// The file name extension intake recognises.
    pub fn extension(self) -> &'static str {
        match self {
            BundleKind::Tar => "tar",
            BundleKind::TarGz => "tar.gz",
            BundleKind::Zip => "zip",
        }
    }
}

/// The job header: `kind (1) || nonce length (1) || nonce || SHA-256 of the bundle (32) || bundle length (8, BE)`,
/// then, only when the operator set `[egress]`, `settings length (2, BE) || settings` (UTF-8 lines, see
/// [`job_policy::egress::OperatorEgress::encode`]; checked again here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobHeader {
    /// How the bundle is packed.
    pub kind: BundleKind,
    /// The founder's nonce (16 to 64 bytes; the binding checks it).
    pub nonce: Vec<u8>,
    /// SHA-256 of the bundle bytes that follow.
    pub bundle_sha256: [u8; 32],
    /// Length of the bundle.
    pub bundle_len: u64,
    /// The operator's `[egress]` settings (empty: none), recorded in the verdict; the host dialer applies them.
    pub egress: job_policy::egress::OperatorEgress,
}

impl JobHeader {
    /// Encodes the header payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(42 + self.nonce.len());
        v.push(self.kind as u8);
        v.push(u8::try_from(self.nonce.len()).unwrap_or(u8::MAX));
        v.extend_from_slice(&self.nonce);
        v.extend_from_slice(&self.bundle_sha256);
        v.extend_from_slice(&self.bundle_len.to_be_bytes());
        if !self.egress.is_empty() {
            let text = self.egress.encode();
            v.extend_from_slice(&u16::try_from(text.len()).unwrap_or(u16::MAX).to_be_bytes());
            v.extend_from_slice(text.as_bytes());
        }
        v
    }

    /// Parses a header payload; every byte must be accounted for.
    pub fn decode(p: &[u8]) -> Result<JobHeader, ChannelError> {
        let bad = |detail: String| ChannelError::Malformed {
            kind: FrameType::JobHeader,
            detail,
        };
        let mut r = Reader::new("job header", p);
        let (Ok(kind), Ok(n)) = (r.u8("bundle kind"), r.u8("nonce length")) else {
            return Err(bad(format!("{} bytes, shorter than 2", p.len())));
        };
        let kind = match kind {
            0 => BundleKind::Tar,
            1 => BundleKind::TarGz,
            2 => BundleKind::Zip,
            k => {
                return Err(bad(format!(
                    "bundle kind {k} is not 0 (tar), 1 (tar.gz) or 2 (zip)"
                )))
            }
        };
        let n = usize::from(n);
        if p.len() < 2 + n + 32 + 8 {
            return Err(bad(format!(
                "{} bytes; a nonce of {n} bytes needs {}",
                p.len(),
                2 + n + 40
            )));
        }
        let wire = |e: WireError| bad(e.to_string());
        let nonce = r.take("nonce", n).map_err(wire)?.to_vec();
        let bundle_sha256 = r.array("bundle SHA-256").map_err(wire)?;
        let bundle_len = r.u64_be("bundle length").map_err(wire)?;
        let egress = if r.is_empty() {
            job_policy::egress::OperatorEgress::default()
        } else {
            let len = r.take("egress settings length", 2).map_err(wire)?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            let text = r.take("egress settings", len).map_err(wire)?;
            let text = std::str::from_utf8(text)
                .map_err(|_| bad("the egress settings are not UTF-8".into()))?;
            job_policy::egress::OperatorEgress::decode(text).map_err(|e| bad(e.to_string()))?
        };
        r.finish().map_err(wire)?;
        if bundle_len > u64::from(MAX_BUNDLE) {
            return Err(bad(format!(
                "bundle length {bundle_len} exceeds the limit of {MAX_BUNDLE}"
            )));
        }
        Ok(JobHeader {
            kind,
            nonce,
            bundle_sha256,
            bundle_len,
            egress,
        })
    }
}

/// Encodes a `Report` payload: `count (4, BE)` then `length (4, BE) || bytes` for the report and each certificate.
pub fn encode_report(report: &[u8], certs: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(1 + certs.len() as u32).to_be_bytes());
    for item in std::iter::once(report).chain(certs.iter().map(Vec::as_slice)) {
        v.extend_from_slice(&(item.len() as u32).to_be_bytes());
        v.extend_from_slice(item);
    }
    v
}

/// Parses a `Report` payload into the report and its certificates.
pub fn decode_report(p: &[u8]) -> Result<(Vec<u8>, Vec<Vec<u8>>), ChannelError> {
    let bad = |detail: String| ChannelError::Malformed {
        kind: FrameType::Report,
        detail,
    };
    let mut r = Reader::new("report payload", p);
    let wire = |e: WireError| match e {
        WireError::Truncated {
            field,
            needed,
            available,
            ..
        } => bad(format!("{field}: {needed} bytes needed, {available} left")),
        WireError::Trailing { count, .. } => bad(format!("{count} trailing bytes")),
        other => bad(other.to_string()),
    };
    let count = r.u32_be("count").map_err(wire)? as usize;
    if count == 0 || count > 8 {
        return Err(bad(format!("{count} items; expected 1 to 8")));
    }
    let mut items = Vec::with_capacity(count);
    for i in 0..count {
        let len = r.u32_be("item length").map_err(wire)? as usize;
        let item = r.take("item", len).map_err(|e| match e {
            WireError::Truncated { available, .. } => {
                bad(format!("item {i}: {len} bytes needed, {available} left"))
            }
            other => wire(other),
        })?;
        items.push(item.to_vec());
    }
    r.finish().map_err(wire)?;
    let report = items.remove(0);
    Ok((report, items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_input_is_named() {
        let mut buf = Vec::new();
        write_frame(&mut buf, FrameType::Hello, PROTOCOL).expect("write");
        write_frame(&mut buf, FrameType::Ack, b"").expect("write");
        let mut r = buf.as_slice();
        assert_eq!(
            expect_frame(&mut r, FrameType::Hello, "hello").expect("hello"),
            PROTOCOL
        );
        assert!(expect_frame(&mut r, FrameType::Ack, "ack")
            .expect("ack")
            .is_empty());
        assert!(matches!(
            read_frame(&mut r, "x"),
            Err(ChannelError::Closed("x"))
        ));

        let mut short = buf[..buf.len() - 3].to_vec();
        short.truncate(5 + PROTOCOL.len() - 2);
        assert!(matches!(
            read_frame(&mut short.as_slice(), "x"),
            Err(ChannelError::Truncated { got, want, .. }) if got + 2 == want
        ));
        assert!(matches!(
            read_frame(&mut [0x42u8, 0, 0, 0, 0].as_slice(), "x"),
            Err(ChannelError::UnknownType(0x42, _))
        ));
        assert!(matches!(
            read_frame(&mut [1u8, 0xff, 0xff, 0xff, 0xff].as_slice(), "x"),
            Err(ChannelError::TooLarge { .. })
        ));
        assert!(matches!(
            read_frame(&mut [1u8, 0].as_slice(), "x"),
            Err(ChannelError::TruncatedHeader(2))
        ));
    }

    #[test]
    fn a_progress_note_round_trips_and_anything_else_is_named() {
        let n = ProgressNote {
            phase: "install".into(),
            elapsed_s: 12,
        };
        assert_eq!(n.encode(), b"install 12");
        let mut buf = Vec::new();
        write_frame(&mut buf, FrameType::Progress, &n.encode()).expect("write");
        let p = expect_frame(&mut buf.as_slice(), FrameType::Progress, "progress").expect("read");
        assert_eq!(ProgressNote::decode(&p).expect("decode"), n);
        assert_eq!(FrameType::from_byte(15), Some(FrameType::Progress));
        for bad in [
            &b""[..],
            b"install",
            b"install ",
            b" 3",
            b"Install 3",
            b"install 3 4",
            b"install -3",
            b"install 99999999999",
            b"in\x1bstall 3",
            b"\xff 3",
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1",
        ] {
            let e = ProgressNote::decode(bad).expect_err("malformed");
            assert!(
                matches!(
                    e,
                    ChannelError::Malformed {
                        kind: FrameType::Progress,
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(!e.to_string().contains('\x1b'), "escaped: {e}");
        }
    }

    #[test]
    fn a_key_announce_is_exactly_a_sha256() {
        let mut buf = Vec::new();
        write_frame(&mut buf, FrameType::KeyAnnounce, &[0xab; 32]).expect("write");
        let p = expect_frame(&mut buf.as_slice(), FrameType::KeyAnnounce, "the key").expect("read");
        assert_eq!(decode_key_announce(&p).expect("32 bytes"), [0xab; 32]);
        assert_eq!(FrameType::from_byte(14), Some(FrameType::KeyAnnounce));
        for len in [0, 31, 33, 97] {
            let e = decode_key_announce(&vec![1; len]).expect_err("wrong length");
            assert!(
                matches!(
                    e,
                    ChannelError::Malformed {
                        kind: FrameType::KeyAnnounce,
                        ..
                    }
                ) && e.to_string().contains(&format!("{len} bytes")),
                "{e}"
            );
        }
    }

    #[test]
    fn header_and_report_round_trip_and_reject_trailing_bytes() {
        let h = JobHeader {
            kind: BundleKind::TarGz,
            nonce: vec![7; 32],
            bundle_sha256: [9; 32],
            bundle_len: 1234,
            egress: Default::default(),
        };
        let enc = h.encode();
        assert_eq!(
            enc.len(),
            2 + 32 + 32 + 8,
            "no settings: the header as before"
        );
        assert_eq!(JobHeader::decode(&enc).expect("decode"), h);
        let mut longer = enc.clone();
        longer.push(0);
        assert!(JobHeader::decode(&longer).is_err());
        assert!(JobHeader::decode(&enc[..enc.len() - 1]).is_err());

        // With the operator's egress settings: carried, checked again, nothing after them.
        let with = JobHeader {
            egress: job_policy::egress::OperatorEgress::parse(
                &["10.20.0.0/16"],
                Some("http://10.0.0.5:3128"),
            )
            .expect("settings"),
            ..h.clone()
        };
        let enc = with.encode();
        assert_eq!(JobHeader::decode(&enc).expect("decode"), with);
        let mut longer = enc.clone();
        longer.push(b'\n');
        assert!(JobHeader::decode(&longer).is_err());
        assert!(JobHeader::decode(&enc[..enc.len() - 1]).is_err());
        let mut bad = h.encode();
        let text = b"network 127.0.0.0/8\n";
        bad.extend_from_slice(&(text.len() as u16).to_be_bytes());
        bad.extend_from_slice(text);
        let e = JobHeader::decode(&bad).expect_err("a range over loopback");
        assert!(e.to_string().contains("127.0.0.0/8"), "{e}");

        let p = encode_report(b"report", &[b"vcek".to_vec(), b"ask".to_vec()]);
        let (r, c) = decode_report(&p).expect("report");
        assert_eq!(r, b"report");
        assert_eq!(c, vec![b"vcek".to_vec(), b"ask".to_vec()]);
        let mut bad = p.clone();
        bad.push(1);
        assert!(decode_report(&bad).is_err());
        assert!(decode_report(&p[..p.len() - 1]).is_err());
    }

    /// A reader that hands out at most 4 KiB per `read`, as a virtio-serial port does.
    struct Port4k<'a>(&'a [u8]);

    impl Read for Port4k<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.0.len()).min(4096);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// A sink that records the size of every write and fails after `fail_after` bytes.
    struct Sink {
        data: Vec<u8>,
        writes: Vec<usize>,
        fail_after: usize,
    }

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.data.len() + b.len() > self.fail_after {
                return Err(std::io::Error::other("disk full"));
            }
            self.data.extend_from_slice(b);
            self.writes.push(b.len());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn sink() -> Sink {
        Sink {
            data: Vec::new(),
            writes: Vec::new(),
            fail_after: usize::MAX,
        }
    }

    #[test]
    fn a_streamed_frame_arrives_whole_in_large_chunks_and_bad_input_is_named() {
        let payload: Vec<u8> = (0..(STREAM_CHUNK * 3 + 1234))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut wire = Vec::new();
        write_frame(&mut wire, FrameType::Bundle, &payload).expect("write");
        write_frame(&mut wire, FrameType::Ack, b"").expect("write");
        let mut r = Port4k(&wire);
        let mut s = sink();
        let n = read_frame_into(&mut r, FrameType::Bundle, "the bundle", &mut s).expect("read");
        assert_eq!(n, payload.len() as u64);
        assert_eq!(s.data, payload);
        // Gathered across 4 KiB reads: whole chunks, then the rest, not one write per read.
        assert_eq!(s.writes, [STREAM_CHUNK, STREAM_CHUNK, STREAM_CHUNK, 1234]);
        // The next frame is intact behind it.
        assert!(expect_frame(&mut r, FrameType::Ack, "ack")
            .expect("ack")
            .is_empty());

        // An empty payload: nothing written, length 0.
        let mut wire = Vec::new();
        write_frame(&mut wire, FrameType::Bundle, b"").expect("write");
        let mut s = sink();
        assert_eq!(
            read_frame_into(&mut wire.as_slice(), FrameType::Bundle, "b", &mut s).expect("empty"),
            0
        );
        assert!(s.data.is_empty());

        // Cut off inside the payload: what arrived is named, and was stored.
        let mut wire = Vec::new();
        write_frame(&mut wire, FrameType::Bundle, &payload).expect("write");
        let cut = 5 + STREAM_CHUNK + 100;
        let mut s = sink();
        let e = read_frame_into(
            &mut Port4k(&wire[..cut]),
            FrameType::Bundle,
            "the bundle",
            &mut s,
        )
        .expect_err("truncated");
        assert!(
            matches!(e, ChannelError::Truncated { kind: FrameType::Bundle, want, got }
                if want == payload.len() as u64 && got == (STREAM_CHUNK + 100) as u64),
            "{e:?}"
        );
        assert_eq!(s.data, payload[..STREAM_CHUNK + 100]);
        assert!(
            e.to_string().contains(&format!(
                "{} of {} bytes",
                STREAM_CHUNK + 100,
                payload.len()
            )),
            "{e}"
        );

        // Over the Bundle limit: refused from the header, before any payload is read.
        let mut head = vec![FrameType::Bundle as u8];
        head.extend_from_slice(&(MAX_BUNDLE + 1).to_be_bytes());
        let e = read_frame_into(&mut head.as_slice(), FrameType::Bundle, "b", &mut sink())
            .expect_err("too large");
        assert!(
            matches!(e, ChannelError::TooLarge { len, max, .. } if len == MAX_BUNDLE + 1 && max == MAX_BUNDLE),
            "{e:?}"
        );

        // Another frame type, an unknown type, a short header.
        let mut wire = Vec::new();
        write_frame(&mut wire, FrameType::Failure, b"no").expect("write");
        let e = read_frame_into(
            &mut wire.as_slice(),
            FrameType::Bundle,
            "the bundle",
            &mut sink(),
        )
        .expect_err("unexpected");
        assert!(
            matches!(
                e,
                ChannelError::Unexpected {
                    got: FrameType::Failure,
                    want: "the bundle"
                }
            ),
            "{e:?}"
        );
        assert!(matches!(
            read_frame_into(
                &mut [0x42u8, 0, 0, 0, 0].as_slice(),
                FrameType::Bundle,
                "b",
                &mut sink()
            ),
            Err(ChannelError::UnknownType(0x42, _))
        ));
        assert!(matches!(
            read_frame_into(
                &mut [5u8, 0].as_slice(),
                FrameType::Bundle,
                "b",
                &mut sink()
            ),
            Err(ChannelError::TruncatedHeader(2))
        ));

        // A sink that fails: named with what was stored before.
        let mut wire = Vec::new();
        write_frame(&mut wire, FrameType::Bundle, &payload).expect("write");
        let mut s = Sink {
            fail_after: STREAM_CHUNK + 10,
            ..sink()
        };
        let e = read_frame_into(&mut Port4k(&wire), FrameType::Bundle, "the bundle", &mut s)
            .expect_err("store");
        assert!(
            matches!(&e, ChannelError::Store { stored, .. } if *stored == STREAM_CHUNK as u64),
            "{e:?}"
        );
        assert!(e.to_string().contains("disk full"), "{e}");
    }
}
