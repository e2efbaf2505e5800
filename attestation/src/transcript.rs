//! The fence transcript: an append-only, hash-chained list of typed events the agent writes as the run happens
//! (docs/transcript.md), carried in the evidence under the key `transcript` and anchored by a second
//! attestation report at the end.
//!
//! - Each event is one CBOR map in deterministic encoding (RFC 8949 section 4.2.1: definite lengths, the
//!   shortest integer forms, keys sorted by their encoded bytes), with text keys; the key `event` holds the
//!   event's name. Every key of an event is always present (`null` where a value is absent).
//! - The chain is SHA-384: `h0 = SHA-384("fenced-run/v1/transcript")`, `h(i) = SHA-384(h(i-1) || e(i))` over
//!   each event's encoded bytes `e(i)`; the transcript's hash is `h(n)`.
//! - On TDX each event is extended into RTMR3 as it is appended, with the digest `SHA-384(e(i))`; RTMR3 at the
//!   end is then `fold(SHA-384(e(1)), ..., SHA-384(e(n)))` from zero ([`rtmr3_of`]).
//! - The anchor (a second report, taken after the verdict event) carries
//!   `REPORT_DATA = SHA-512("fenced-run/v1/transcript-anchor" || h(n) || SHA-384(verdict payload) || nonce)`
//!   ([`anchor_report_data`]).
//!
//! Decoding is strict: an event that is not in deterministic encoding, names an unknown event, lacks or adds
//! a key, or has a value of the wrong type is refused, naming the event's index and the key.

use ciborium::Value;
use sha2::{Digest, Sha384, Sha512};
use std::sync::{Arc, Mutex};

/// A SHA-384 digest.
pub type Hash = [u8; 48];

/// The domain of the chain's first value `h0`.
pub const CHAIN_DOMAIN: &[u8] = b"fenced-run/v1/transcript";
/// The domain of the anchor report's REPORT_DATA.
pub const ANCHOR_DOMAIN: &[u8] = b"fenced-run/v1/transcript-anchor";
/// Most events a transcript may hold (a run judges at most a few thousand egress connections).
pub const MAX_EVENTS: usize = 65_536;
/// Largest encoded event accepted.
pub const MAX_EVENT_LEN: usize = 16 * 1024;
/// Longest text field an event keeps (longer ones are cut, on a character boundary, when written).
pub const MAX_TEXT: usize = 1024;

/// Why a transcript or one of its events could not be read, or does not verify.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscriptError {
    /// The `transcript` value is not the map the format describes.
    #[error("transcript: {0}")]
    Shape(String),
    /// Too many events.
    #[error("transcript: {0} events, more than the {MAX_EVENTS} accepted")]
    TooManyEvents(usize),
    /// An event is larger than [`MAX_EVENT_LEN`].
    #[error("transcript event {index}: {len} bytes, more than the {MAX_EVENT_LEN} accepted")]
    EventTooLarge {
        /// The event's position (0-based).
        index: usize,
        /// Its length.
        len: usize,
    },
    /// An event is not well-formed CBOR, or bytes follow it.
    #[error("transcript event {index}: {detail}")]
    Cbor {
        /// The event's position (0-based).
        index: usize,
        /// What is wrong.
        detail: String,
    },
    /// An event is well-formed but not in deterministic encoding (its hash would not be the writer's).
    #[error(
        "transcript event {index}: not in deterministic CBOR encoding (RFC 8949 section 4.2.1)"
    )]
    NotDeterministic {
        /// The event's position (0-based).
        index: usize,
    },
    /// An event's field is missing, unknown, duplicated or of the wrong type.
    #[error("transcript event {index} ({event}): {detail}")]
    Field {
        /// The event's position (0-based).
        index: usize,
        /// The event's name (or `?` when it has none).
        event: String,
        /// What is wrong.
        detail: String,
    },
    /// Encoding failed.
    #[error("encoding a transcript event: {0}")]
    Encode(String),
}

/// One event of the run, in the order the agent writes them (docs/transcript.md lists every field).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `agent-ready`: the agent runs; which agent and on which image.
    AgentReady {
        /// The agent version (the verdict's `agent`).
        agent_version: String,
        /// The image identity the agent knows of itself: the vm tier's toolchain image root hash from the
        /// measured command line, the process tier's sim launch measurement (hex); `None` when there is none.
        image: Option<String>,
    },
    /// `job-header`: the job as announced before any byte of it is read.
    JobHeader {
        /// The founder's nonce.
        nonce: Vec<u8>,
        /// SHA-256 (hex) of the job file, when known at this point (process tier: none yet).
        job_sha256: Option<String>,
        /// SHA-256 (hex) of the bundle the header announces (vm tier), else `None`.
        bundle_sha256: Option<String>,
    },
    /// `report-requested`: the first report is about to be requested with this REPORT_DATA.
    ReportRequested {
        /// The report data (the key binding).
        report_data: Vec<u8>,
    },
    /// `intake`: intake's stages 1-5 ended.
    Intake {
        /// Whether intake accepted the bundle.
        accepted: bool,
        /// SHA-256 (hex) of the job file as intake read it, when it read it.
        job_sha256: Option<String>,
        /// The refusal (`stage: reason`) or the empty string.
        detail: String,
    },
    /// `install-start`: the install phase's command is about to start behind the egress proxy.
    InstallStart {
        /// The install command.
        command: String,
        /// SHA-256 (hex) of the allowlist: its entries as `host:port`, each followed by a newline, in the job's
        /// order ([`allowlist_sha256`]).
        allowlist_sha256: String,
        /// The allowlist's entries.
        allow: Vec<String>,
    },
    /// `egress`: one connection the proxy judged, written when the proxy stopped (its byte counts are known
    /// then), in the order the proxy judged them, before the `cut`.
    Egress {
        /// The host asked for.
        host: String,
        /// The port asked for.
        port: u16,
        /// Whether the proxy let it through.
        allowed: bool,
        /// Bytes from the sandbox to the remote.
        bytes_up: u64,
        /// Bytes from the remote to the sandbox.
        bytes_down: u64,
    },
    /// `cut`: what the fence checked between the phases before it would start the test phase.
    Cut {
        /// The install namespace's PID 1 was reaped (so every process of that PID namespace was dead).
        pid1_reaped: bool,
        /// Processes of the install phase found left after its teardown (0 for the cut to hold).
        processes_left: u64,
        /// Whether the cut held (PID 1 reaped and no process left): the test phase starts only then.
        held: bool,
    },
    /// `test-start`: the test command is about to start in a new network namespace with no interface
    /// configured (the fence's own construction).
    TestStart {
        /// The test command.
        command: String,
    },
    /// `test-end`: the test phase's processes are gone.
    TestEnd {
        /// Exit code, when the command exited.
        exit_code: Option<i64>,
        /// Signal, when it was killed by one.
        signal: Option<i64>,
        /// Tests passed, when counts were read.
        passed: Option<u64>,
        /// Tests failed, when counts were read.
        failed: Option<u64>,
        /// Tests skipped, when counts were read.
        skipped: Option<u64>,
    },
    /// `verdict`: the verdict, about to be signed.
    Verdict {
        /// Its named outcome.
        outcome: String,
        /// SHA-384 of its CBOR (the COSE_Sign1 payload).
        sha384: Vec<u8>,
    },
}

/// The names of the events, as written in `event`.
pub const EVENT_NAMES: [&str; 10] = [
    "agent-ready",
    "job-header",
    "report-requested",
    "intake",
    "install-start",
    "egress",
    "cut",
    "test-start",
    "test-end",
    "verdict",
];

fn text(s: &str) -> Value {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Value::Text(s[..end].to_owned())
}

fn opt_text(s: &Option<String>) -> Value {
    s.as_deref().map_or(Value::Null, text)
}

fn uint(n: u64) -> Value {
    Value::Integer(n.into())
}

fn opt_uint(n: Option<u64>) -> Value {
    n.map_or(Value::Null, uint)
}

fn opt_int(n: Option<i64>) -> Value {
    n.map_or(Value::Null, |n| Value::Integer(n.into()))
}

/// Encodes `v` in deterministic CBOR: maps' keys sorted by their encoded bytes, recursively (ciborium writes
/// definite lengths and the shortest integer forms already).
fn deterministic(v: &Value) -> Result<Vec<u8>, TranscriptError> {
    fn sort(v: &Value) -> Result<Value, TranscriptError> {
        Ok(match v {
            Value::Map(m) => {
                let mut entries = Vec::with_capacity(m.len());
                for (k, v) in m {
                    let mut kb = Vec::new();
                    ciborium::ser::into_writer(k, &mut kb)
                        .map_err(|e| TranscriptError::Encode(e.to_string()))?;
                    entries.push((kb, sort(k)?, sort(v)?));
                }
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Map(entries.into_iter().map(|(_, k, v)| (k, v)).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect::<Result<_, _>>()?),
            other => other.clone(),
        })
    }
    let mut out = Vec::new();
    ciborium::ser::into_writer(&sort(v)?, &mut out)
        .map_err(|e| TranscriptError::Encode(e.to_string()))?;
    Ok(out)
}

impl Event {
    /// The `egress` event of one connection the verdict records (`install.egress`): what the agent writes, and
    /// what a verifier compares the transcript's `egress` events with (the record's `reason` is not part of it).
    pub fn egress(record: &crate::verdict::EgressRecord) -> Event {
        Event::Egress {
            host: record.host.clone(),
            port: record.port,
            allowed: record.allowed,
            bytes_up: record.bytes_up,
            bytes_down: record.bytes_down,
        }
    }

    /// The event's name (`agent-ready`, `egress`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Event::AgentReady { .. } => "agent-ready",
            Event::JobHeader { .. } => "job-header",
            Event::ReportRequested { .. } => "report-requested",
            Event::Intake { .. } => "intake",
            Event::InstallStart { .. } => "install-start",
            Event::Egress { .. } => "egress",
            Event::Cut { .. } => "cut",
            Event::TestStart { .. } => "test-start",
            Event::TestEnd { .. } => "test-end",
            Event::Verdict { .. } => "verdict",
        }
    }

    fn fields(&self) -> Vec<(&'static str, Value)> {
        match self {
            Event::AgentReady {
                agent_version,
                image,
            } => vec![
                ("agent_version", text(agent_version)),
                ("image", opt_text(image)),
            ],
            Event::JobHeader {
                nonce,
                job_sha256,
                bundle_sha256,
            } => vec![
                ("nonce", Value::Bytes(nonce.clone())),
                ("job_sha256", opt_text(job_sha256)),
                ("bundle_sha256", opt_text(bundle_sha256)),
            ],
            Event::ReportRequested { report_data } => {
                vec![("report_data", Value::Bytes(report_data.clone()))]
            }
            Event::Intake {
                accepted,
                job_sha256,
                detail,
            } => vec![
                ("accepted", Value::Bool(*accepted)),
                ("job_sha256", opt_text(job_sha256)),
                ("detail", text(detail)),
            ],
            Event::InstallStart {
                command,
                allowlist_sha256,
                allow,
            } => vec![
                ("command", text(command)),
                ("allowlist_sha256", text(allowlist_sha256)),
                (
                    "allow",
                    Value::Array(allow.iter().map(|a| text(a)).collect()),
                ),
            ],
            Event::Egress {
                host,
                port,
                allowed,
                bytes_up,
                bytes_down,
            } => vec![
                ("host", text(host)),
                ("port", uint(u64::from(*port))),
                ("allowed", Value::Bool(*allowed)),
                ("bytes_up", uint(*bytes_up)),
                ("bytes_down", uint(*bytes_down)),
            ],
            Event::Cut {
                pid1_reaped,
                processes_left,
                held,
            } => vec![
                ("pid1_reaped", Value::Bool(*pid1_reaped)),
                ("processes_left", uint(*processes_left)),
                ("held", Value::Bool(*held)),
            ],
            Event::TestStart { command } => vec![("command", text(command))],
            Event::TestEnd {
                exit_code,
                signal,
                passed,
                failed,
                skipped,
            } => vec![
                ("exit_code", opt_int(*exit_code)),
                ("signal", opt_int(*signal)),
                ("passed", opt_uint(*passed)),
                ("failed", opt_uint(*failed)),
                ("skipped", opt_uint(*skipped)),
            ],
            Event::Verdict { outcome, sha384 } => vec![
                ("outcome", text(outcome)),
                ("sha384", Value::Bytes(sha384.clone())),
            ],
        }
    }

    /// The event's bytes: one CBOR map in deterministic encoding.
    pub fn encode(&self) -> Result<Vec<u8>, TranscriptError> {
        let mut m = vec![(Value::Text("event".into()), Value::Text(self.name().into()))];
        m.extend(
            self.fields()
                .into_iter()
                .map(|(k, v)| (Value::Text(k.into()), v)),
        );
        deterministic(&Value::Map(m))
    }

    /// Decodes one event (the `index`-th, for the errors), strictly.
    pub fn decode(index: usize, bytes: &[u8]) -> Result<Event, TranscriptError> {
        if bytes.len() > MAX_EVENT_LEN {
            return Err(TranscriptError::EventTooLarge {
                index,
                len: bytes.len(),
            });
        }
        let mut reader = bytes;
        let value: Value =
            ciborium::de::from_reader_with_recursion_limit(&mut reader, 8).map_err(|e| {
                TranscriptError::Cbor {
                    index,
                    detail: crate::verdict::cbor_error_text(&e),
                }
            })?;
        if !reader.is_empty() {
            return Err(TranscriptError::Cbor {
                index,
                detail: format!("{} bytes after the event's map", reader.len()),
            });
        }
        if deterministic(&value)? != bytes {
            return Err(TranscriptError::NotDeterministic { index });
        }
        let Value::Map(entries) = value else {
            return Err(TranscriptError::Cbor {
                index,
                detail: "not a CBOR map".into(),
            });
        };
        let mut fields = Fields {
            index,
            event: "?".into(),
            map: Vec::new(),
        };
        for (k, v) in entries {
            let Value::Text(k) = k else {
                return Err(fields.err("a key is not a text string"));
            };
            if fields.map.iter().any(|(n, _)| *n == k) {
                return Err(fields.err(&format!("key `{k}` appears more than once")));
            }
            fields.map.push((k, v));
        }
        let name = match fields.take("event")? {
            Value::Text(t) => t,
            _ => return Err(fields.err("key `event` must be a text string")),
        };
        fields.event = name.clone();
        let ev = match name.as_str() {
            "agent-ready" => Event::AgentReady {
                agent_version: fields.text("agent_version")?,
                image: fields.opt_text("image")?,
            },
            "job-header" => Event::JobHeader {
                nonce: fields.bytes("nonce")?,
                job_sha256: fields.opt_text("job_sha256")?,
                bundle_sha256: fields.opt_text("bundle_sha256")?,
            },
            "report-requested" => Event::ReportRequested {
                report_data: fields.bytes("report_data")?,
            },
            "intake" => Event::Intake {
                accepted: fields.bool("accepted")?,
                job_sha256: fields.opt_text("job_sha256")?,
                detail: fields.text("detail")?,
            },
            "install-start" => Event::InstallStart {
                command: fields.text("command")?,
                allowlist_sha256: fields.text("allowlist_sha256")?,
                allow: fields.texts("allow")?,
            },
            "egress" => Event::Egress {
                host: fields.text("host")?,
                port: {
                    let p = fields.uint("port")?;
                    u16::try_from(p)
                        .map_err(|_| fields.err(&format!("key `port` is {p}, not a TCP port")))?
                },
                allowed: fields.bool("allowed")?,
                bytes_up: fields.uint("bytes_up")?,
                bytes_down: fields.uint("bytes_down")?,
            },
            "cut" => Event::Cut {
                pid1_reaped: fields.bool("pid1_reaped")?,
                processes_left: fields.uint("processes_left")?,
                held: fields.bool("held")?,
            },
            "test-start" => Event::TestStart {
                command: fields.text("command")?,
            },
            "test-end" => Event::TestEnd {
                exit_code: fields.opt_int("exit_code")?,
                signal: fields.opt_int("signal")?,
                passed: fields.opt_uint("passed")?,
                failed: fields.opt_uint("failed")?,
                skipped: fields.opt_uint("skipped")?,
            },
            "verdict" => Event::Verdict {
                outcome: fields.text("outcome")?,
                sha384: fields.bytes("sha384")?,
            },
            other => {
                return Err(fields.err(&format!(
                    "`{other}` is not an event of the transcript (one of {})",
                    EVENT_NAMES.join(", ")
                )))
            }
        };
        if let Some((k, _)) = fields.map.first() {
            return Err(fields.err(&format!("key `{k}` is not part of this event")));
        }
        Ok(ev)
    }
}

/// An event's fields while they are taken out one by one.
struct Fields {
    index: usize,
    event: String,
    map: Vec<(String, Value)>,
}

impl Fields {
    fn err(&self, detail: &str) -> TranscriptError {
        TranscriptError::Field {
            index: self.index,
            event: self.event.clone(),
            detail: detail.to_owned(),
        }
    }

    fn take(&mut self, key: &str) -> Result<Value, TranscriptError> {
        match self.map.iter().position(|(k, _)| k == key) {
            Some(i) => Ok(self.map.remove(i).1),
            None => Err(self.err(&format!("key `{key}` is missing"))),
        }
    }

    fn wrong(&self, key: &str, what: &str) -> TranscriptError {
        self.err(&format!("key `{key}` must be {what}"))
    }

    fn text(&mut self, key: &str) -> Result<String, TranscriptError> {
        match self.take(key)? {
            Value::Text(t) => Ok(t),
            _ => Err(self.wrong(key, "a text string")),
        }
    }

    fn opt_text(&mut self, key: &str) -> Result<Option<String>, TranscriptError> {
        match self.take(key)? {
            Value::Text(t) => Ok(Some(t)),
            Value::Null => Ok(None),
            _ => Err(self.wrong(key, "a text string or null")),
        }
    }

    fn texts(&mut self, key: &str) -> Result<Vec<String>, TranscriptError> {
        match self.take(key)? {
            Value::Array(a) => a
                .into_iter()
                .map(|v| match v {
                    Value::Text(t) => Ok(t),
                    _ => Err(self.wrong(key, "an array of text strings")),
                })
                .collect(),
            _ => Err(self.wrong(key, "an array of text strings")),
        }
    }

    fn bytes(&mut self, key: &str) -> Result<Vec<u8>, TranscriptError> {
        match self.take(key)? {
            Value::Bytes(b) => Ok(b),
            _ => Err(self.wrong(key, "a byte string")),
        }
    }

    fn bool(&mut self, key: &str) -> Result<bool, TranscriptError> {
        match self.take(key)? {
            Value::Bool(b) => Ok(b),
            _ => Err(self.wrong(key, "a boolean")),
        }
    }

    fn uint(&mut self, key: &str) -> Result<u64, TranscriptError> {
        match self.take(key)? {
            Value::Integer(i) => {
                u64::try_from(i).map_err(|_| self.wrong(key, "an unsigned integer"))
            }
            _ => Err(self.wrong(key, "an unsigned integer")),
        }
    }

    fn opt_uint(&mut self, key: &str) -> Result<Option<u64>, TranscriptError> {
        match self.take(key)? {
            Value::Null => Ok(None),
            Value::Integer(i) => u64::try_from(i)
                .map(Some)
                .map_err(|_| self.wrong(key, "an unsigned integer or null")),
            _ => Err(self.wrong(key, "an unsigned integer or null")),
        }
    }

    fn opt_int(&mut self, key: &str) -> Result<Option<i64>, TranscriptError> {
        match self.take(key)? {
            Value::Null => Ok(None),
            Value::Integer(i) => i64::try_from(i)
                .map(Some)
                .map_err(|_| self.wrong(key, "an integer (64-bit) or null")),
            _ => Err(self.wrong(key, "an integer or null")),
        }
    }
}

/// SHA-256 (hex) of an allowlist: each entry (`host:port`) followed by a newline, in order.
pub fn allowlist_sha256(entries: &[String]) -> String {
    let mut h = sha2::Sha256::new();
    for e in entries {
        h.update(e.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

/// The chain's first value: `SHA-384("fenced-run/v1/transcript")`.
pub fn chain_start() -> Hash {
    Sha384::digest(CHAIN_DOMAIN).into()
}

/// One step of the chain: `SHA-384(prev || event)`.
pub fn chain_step(prev: &Hash, event: &[u8]) -> Hash {
    let mut h = Sha384::new();
    h.update(prev);
    h.update(event);
    h.finalize().into()
}

/// The chain over encoded events: `h(n)`.
pub fn chain(events: &[Vec<u8>]) -> Hash {
    events.iter().fold(chain_start(), |h, e| chain_step(&h, e))
}

/// The digest each event is extended into RTMR3 with: `SHA-384(e(i))`.
pub fn event_digest(event: &[u8]) -> Hash {
    Sha384::digest(event).into()
}

/// RTMR3 after extending every event's digest from zero: `RTMR = SHA-384(RTMR || SHA-384(e(i)))`.
pub fn rtmr3_of(events: &[Vec<u8>]) -> Hash {
    events.iter().fold([0u8; 48], |r, e| {
        let mut h = Sha384::new();
        h.update(r);
        h.update(event_digest(e));
        h.finalize().into()
    })
}

/// SHA-384 of a verdict's CBOR (the COSE_Sign1 payload).
pub fn verdict_sha384(payload: &[u8]) -> Hash {
    Sha384::digest(payload).into()
}

/// The anchor report's REPORT_DATA:
/// `SHA-512("fenced-run/v1/transcript-anchor" || transcript hash || verdict SHA-384 || nonce)`.
pub fn anchor_report_data(transcript: &Hash, verdict: &Hash, nonce: &[u8]) -> [u8; 64] {
    let mut h = Sha512::new();
    h.update(ANCHOR_DOMAIN);
    h.update(transcript);
    h.update(verdict);
    h.update(nonce);
    h.finalize().into()
}

/// The domain of the job's launch digest.
pub const JOB_LAUNCH_DOMAIN: &[u8] = b"fenced-run/v1/job-launch";

/// The job's digest the host puts into the launch (SEV-SNP `HOST_DATA`, TDX `MRCONFIGID`'s first 32 bytes, the
/// sim PSP's `HOST_DATA`): `SHA-256("fenced-run/v1/job-launch" || the bundle's SHA-256)`. The nonce is not in it:
/// the launch is fixed before the guest's key exists, and the nonce is issued for that key.
pub fn job_launch_digest(bundle_sha256: &[u8; 32]) -> [u8; 32] {
    let mut h = sha2::Sha256::new();
    h.update(JOB_LAUNCH_DOMAIN);
    h.update(bundle_sha256);
    h.finalize().into()
}

/// The launch field that carries the job's digest in `report`: SEV-SNP `HOST_DATA`; TDX `MRCONFIGID`, whose first
/// 32 bytes are the digest and whose last 16 must be zero (`None` when they are not, or the report does not
/// parse far enough).
pub fn launch_job_field(snp: bool, report: &[u8]) -> Option<[u8; 32]> {
    if snp {
        crate::snp::AttestationReport::from_bytes(report)
            .ok()
            .map(|r| r.host_data)
    } else {
        let q = crate::tdx::Quote::parse(report).ok()?;
        let id = q.td().mr_config_id;
        if id[32..].iter().any(|b| *b != 0) {
            return None;
        }
        id[..32].try_into().ok()
    }
}

/// A transcript: the encoded events, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transcript {
    events: Vec<Vec<u8>>,
}

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Transcript {
        Transcript::default()
    }

    /// Appends `event`; returns its encoded bytes.
    pub fn append(&mut self, event: &Event) -> Result<&[u8], TranscriptError> {
        if self.events.len() >= MAX_EVENTS {
            return Err(TranscriptError::TooManyEvents(self.events.len() + 1));
        }
        let bytes = event.encode()?;
        if bytes.len() > MAX_EVENT_LEN {
            return Err(TranscriptError::EventTooLarge {
                index: self.events.len(),
                len: bytes.len(),
            });
        }
        self.events.push(bytes);
        Ok(self.events.last().map(Vec::as_slice).unwrap_or_default())
    }

    /// The encoded events.
    pub fn raw(&self) -> &[Vec<u8>] {
        &self.events
    }

    /// The transcript's hash `h(n)`.
    pub fn hash(&self) -> Hash {
        chain(&self.events)
    }

    /// Every event decoded, strictly.
    pub fn events(&self) -> Result<Vec<Event>, TranscriptError> {
        self.events
            .iter()
            .enumerate()
            .map(|(i, e)| Event::decode(i, e))
            .collect()
    }

    /// A transcript of already-encoded events (as carried in evidence): every event is decoded strictly.
    pub fn from_raw(events: Vec<Vec<u8>>) -> Result<Transcript, TranscriptError> {
        if events.len() > MAX_EVENTS {
            return Err(TranscriptError::TooManyEvents(events.len()));
        }
        for (i, e) in events.iter().enumerate() {
            Event::decode(i, e)?;
        }
        Ok(Transcript { events })
    }
}

/// A transcript together with its anchor, as the evidence carries it under `transcript`:
/// `{"events": [bstr, ...], "anchor": bstr / null}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Anchored {
    /// The events.
    pub transcript: Transcript,
    /// The anchor: a second SNP report or TDX quote whose report data is [`anchor_report_data`]; `None` when the
    /// agent could not get one (verification then fails).
    pub anchor: Option<Vec<u8>>,
}

impl Anchored {
    /// The CBOR value of the evidence's `transcript` key.
    pub fn to_value(&self) -> Value {
        Value::Map(vec![
            (
                Value::Text("events".into()),
                Value::Array(
                    self.transcript
                        .raw()
                        .iter()
                        .map(|e| Value::Bytes(e.clone()))
                        .collect(),
                ),
            ),
            (
                Value::Text("anchor".into()),
                self.anchor.clone().map_or(Value::Null, Value::Bytes),
            ),
        ])
    }

    /// Reads the evidence's `transcript` value, strictly.
    pub fn from_value(v: Value) -> Result<Anchored, TranscriptError> {
        let shape = |m: &str| TranscriptError::Shape(m.to_owned());
        let Value::Map(entries) = v else {
            return Err(shape("must be a map with keys `events` and `anchor`"));
        };
        let (mut events, mut anchor) = (None, None);
        for (k, v) in entries {
            let slot = match &k {
                Value::Text(t) if t == "events" => &mut events,
                Value::Text(t) if t == "anchor" => &mut anchor,
                Value::Text(t) => return Err(shape(&format!("key `{t}` is not part of it"))),
                _ => return Err(shape("a key is not a text string")),
            };
            if slot.replace(v).is_some() {
                return Err(shape(&format!("key {k:?} appears more than once")));
            }
        }
        let events = match events {
            Some(Value::Array(a)) => {
                if a.len() > MAX_EVENTS {
                    return Err(TranscriptError::TooManyEvents(a.len()));
                }
                a.into_iter()
                    .enumerate()
                    .map(|(i, e)| match e {
                        Value::Bytes(b) => Ok(b),
                        _ => Err(TranscriptError::Shape(format!(
                            "`events` item {i} is not a byte string"
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(_) => return Err(shape("`events` must be an array of byte strings")),
            None => return Err(shape("key `events` is missing")),
        };
        let anchor = match anchor {
            Some(Value::Bytes(b)) => Some(b),
            Some(Value::Null) => None,
            Some(_) => return Err(shape("`anchor` must be a byte string or null")),
            None => return Err(shape("key `anchor` is missing")),
        };
        Ok(Anchored {
            transcript: Transcript::from_raw(events)?,
            anchor,
        })
    }
}

/// Extends a runtime measurement register with an event's digest (TDX RTMR3): the agent's hook.
pub type Extender = Arc<dyn Fn(&Hash) -> Result<(), String> + Send + Sync>;

/// The transcript being written during a run, shared by the agent and the fence (cheap to clone). Each
/// [`Recorder::record`] appends the event and, when an [`Extender`] is set, extends its digest into RTMR3
/// under the same lock, so the register sees the events in the transcript's order. The first failure is kept
/// ([`Recorder::failure`]) and every later event still appended.
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<RecorderState>>,
}

#[derive(Default)]
struct RecorderState {
    transcript: Transcript,
    extender: Option<Extender>,
    failure: Option<String>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Recorder")
            .field("events", &s.transcript.raw().len())
            .field("extends", &s.extender.is_some())
            .field("failure", &s.failure)
            .finish()
    }
}

impl Recorder {
    /// A recorder with an empty transcript and no register to extend.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// A recorder that extends each event's digest with `extend` (TDX RTMR3).
    pub fn extending(extend: Extender) -> Recorder {
        let r = Recorder::new();
        r.lock().extender = Some(extend);
        r
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecorderState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `event` (and extends its digest), before the step it announces takes effect.
    pub fn record(&self, event: Event) {
        let mut s = self.lock();
        let name = event.name();
        let digest = match s.transcript.append(&event) {
            Ok(bytes) => event_digest(bytes),
            Err(e) => {
                if s.failure.is_none() {
                    s.failure = Some(format!("appending `{name}`: {e}"));
                }
                return;
            }
        };
        if let Some(x) = s.extender.clone() {
            if let Err(e) = x(&digest) {
                if s.failure.is_none() {
                    s.failure = Some(format!("extending RTMR3 with `{name}`: {e}"));
                }
            }
        }
    }

    /// A copy of the transcript so far.
    pub fn transcript(&self) -> Transcript {
        self.lock().transcript.clone()
    }

    /// The first failure to append or extend, if any.
    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Vec<Event> {
        vec![
            Event::AgentReady {
                agent_version: "fenced-run 0.1.0".into(),
                image: None,
            },
            Event::JobHeader {
                nonce: vec![7; 32],
                job_sha256: None,
                bundle_sha256: Some("ab".repeat(32)),
            },
            Event::ReportRequested {
                report_data: vec![1; 64],
            },
            Event::Intake {
                accepted: true,
                job_sha256: Some("cd".repeat(32)),
                detail: String::new(),
            },
            Event::InstallStart {
                command: "make deps".into(),
                allowlist_sha256: allowlist_sha256(&["registry.example:443".into()]),
                allow: vec!["registry.example:443".into()],
            },
            Event::Egress {
                host: "registry.example".into(),
                port: 443,
                allowed: true,
                bytes_up: 10,
                bytes_down: 2000,
            },
            Event::Cut {
                pid1_reaped: true,
                processes_left: 0,
                held: true,
            },
            Event::TestStart {
                command: "make test".into(),
            },
            Event::TestEnd {
                exit_code: Some(-1),
                signal: None,
                passed: Some(3),
                failed: Some(0),
                skipped: None,
            },
            Event::Verdict {
                outcome: "tests_passed".into(),
                sha384: vec![5; 48],
            },
        ]
    }

    fn transcript() -> Transcript {
        let mut t = Transcript::new();
        for e in run() {
            t.append(&e).expect("append");
        }
        t
    }

    #[test]
    fn every_event_round_trips_and_the_chain_is_the_fold() {
        let t = transcript();
        assert_eq!(t.events().expect("decode"), run());
        let mut h = Sha384::digest(CHAIN_DOMAIN).to_vec();
        for e in t.raw() {
            let mut x = Sha384::new();
            x.update(&h);
            x.update(e);
            h = x.finalize().to_vec();
        }
        assert_eq!(t.hash().to_vec(), h);
        let back = Anchored::from_value(
            Anchored {
                transcript: t.clone(),
                anchor: Some(vec![1, 2]),
            }
            .to_value(),
        )
        .expect("anchored");
        assert_eq!(back.transcript, t);
        assert_eq!(back.anchor, Some(vec![1, 2]));
    }

    #[test]
    fn removed_reordered_added_or_changed_events_change_the_hash_and_rtmr3() {
        let t = transcript();
        let (h, r) = (t.hash(), rtmr3_of(t.raw()));
        let mut variants: Vec<Vec<Vec<u8>>> = Vec::new();
        for i in 0..t.raw().len() {
            let mut v = t.raw().to_vec();
            v.remove(i);
            variants.push(v);
        }
        let mut v = t.raw().to_vec();
        v.swap(5, 6);
        variants.push(v);
        let mut v = t.raw().to_vec();
        v.insert(
            6,
            Event::Egress {
                host: "other.example".into(),
                port: 80,
                allowed: false,
                bytes_up: 0,
                bytes_down: 0,
            }
            .encode()
            .expect("enc"),
        );
        variants.push(v);
        let mut v = t.raw().to_vec();
        v[5] = Event::Egress {
            host: "registry.example".into(),
            port: 443,
            allowed: true,
            bytes_up: 10,
            bytes_down: 2001,
        }
        .encode()
        .expect("enc");
        variants.push(v);
        for v in variants {
            assert_ne!(chain(&v), h);
            assert_ne!(rtmr3_of(&v), r);
        }
    }

    #[test]
    fn strict_decoding_names_the_event_and_key() {
        let good = Event::Cut {
            pid1_reaped: true,
            processes_left: 0,
            held: true,
        };
        let enc = |m: Vec<(&str, Value)>| {
            let mut out = Vec::new();
            let v = Value::Map(
                m.into_iter()
                    .map(|(k, v)| (Value::Text(k.into()), v))
                    .collect(),
            );
            ciborium::ser::into_writer(&v, &mut out).expect("enc");
            out
        };
        // Not sorted: refused as not deterministic.
        let unsorted = enc(vec![
            ("pid1_reaped", Value::Bool(true)),
            ("held", Value::Bool(true)),
            ("event", Value::Text("cut".into())),
            ("processes_left", uint(0)),
        ]);
        assert_eq!(
            Event::decode(3, &unsorted),
            Err(TranscriptError::NotDeterministic { index: 3 })
        );
        // A key missing, one added, one of the wrong type; an unknown event.
        let missing = deterministic(&Value::Map(vec![
            (Value::Text("event".into()), Value::Text("cut".into())),
            (Value::Text("held".into()), Value::Bool(true)),
            (Value::Text("pid1_reaped".into()), Value::Bool(true)),
        ]))
        .expect("enc");
        let e = Event::decode(2, &missing).expect_err("missing").to_string();
        assert!(
            e.contains("event 2 (cut)") && e.contains("`processes_left` is missing"),
            "{e}"
        );
        let mut m = vec![
            (Value::Text("event".into()), Value::Text("cut".into())),
            (Value::Text("held".into()), Value::Bool(true)),
            (Value::Text("pid1_reaped".into()), Value::Bool(true)),
            (Value::Text("processes_left".into()), uint(0)),
        ];
        assert_eq!(
            Event::decode(0, &deterministic(&Value::Map(m.clone())).expect("enc")),
            Ok(good)
        );
        m.push((Value::Text("extra".into()), Value::Null));
        let e = Event::decode(0, &deterministic(&Value::Map(m.clone())).expect("enc"))
            .expect_err("extra")
            .to_string();
        assert!(e.contains("`extra` is not part of this event"), "{e}");
        m.pop();
        m[1].1 = uint(1);
        let e = Event::decode(0, &deterministic(&Value::Map(m.clone())).expect("enc"))
            .expect_err("type")
            .to_string();
        assert!(e.contains("`held` must be a boolean"), "{e}");
        m[1].1 = Value::Bool(true);
        m[0].1 = Value::Text("cut-maybe".into());
        let e = Event::decode(0, &deterministic(&Value::Map(m)).expect("enc"))
            .expect_err("name")
            .to_string();
        assert!(e.contains("`cut-maybe` is not an event"), "{e}");
        // Trailing bytes, garbage, an oversized event.
        let mut t = good_bytes();
        t.push(0);
        assert!(matches!(
            Event::decode(0, &t),
            Err(TranscriptError::Cbor { .. })
        ));
        assert!(matches!(
            Event::decode(0, &[0xff, 0x00]),
            Err(TranscriptError::Cbor { .. })
        ));
        assert!(matches!(
            Event::decode(0, &vec![0; MAX_EVENT_LEN + 1]),
            Err(TranscriptError::EventTooLarge { .. })
        ));
        // The evidence value: an event that is not bytes, an unknown key, `anchor` absent.
        let e = Anchored::from_value(Value::Map(vec![
            (
                Value::Text("events".into()),
                Value::Array(vec![Value::Bool(true)]),
            ),
            (Value::Text("anchor".into()), Value::Null),
        ]))
        .expect_err("not bytes");
        assert!(e.to_string().contains("item 0"), "{e}");
        let e = Anchored::from_value(Value::Map(vec![(
            Value::Text("events".into()),
            Value::Array(vec![]),
        )]))
        .expect_err("anchor missing");
        assert!(e.to_string().contains("`anchor` is missing"), "{e}");
    }

    fn good_bytes() -> Vec<u8> {
        Event::TestStart {
            command: "true".into(),
        }
        .encode()
        .expect("enc")
    }

    #[test]
    fn the_recorder_extends_each_event_in_order_and_keeps_the_first_failure() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let r = Recorder::extending(Arc::new(move |d: &Hash| {
            s2.lock().expect("lock").push(*d);
            Ok(())
        }));
        for e in run() {
            r.record(e);
        }
        let t = r.transcript();
        let digests: Vec<Hash> = t.raw().iter().map(|e| event_digest(e)).collect();
        assert_eq!(*seen.lock().expect("lock"), digests);
        assert_eq!(r.failure(), None);
        let failing = Recorder::extending(Arc::new(|_: &Hash| Err("no register".to_string())));
        failing.record(run().remove(0));
        failing.record(run().remove(1));
        assert_eq!(failing.transcript().raw().len(), 2);
        assert!(failing
            .failure()
            .is_some_and(|f| f.contains("agent-ready") && f.contains("no register")));
    }

    #[test]
    fn the_anchor_binds_hash_verdict_and_nonce() {
        let a = anchor_report_data(&[1; 48], &[2; 48], &[3; 32]);
        assert_ne!(a, anchor_report_data(&[1; 48], &[2; 48], &[4; 32]));
        assert_ne!(a, anchor_report_data(&[0; 48], &[2; 48], &[3; 32]));
        assert_ne!(a, anchor_report_data(&[1; 48], &[0; 48], &[3; 32]));
        let mut h = Sha512::new();
        h.update(b"fenced-run/v1/transcript-anchor");
        h.update([1; 48]);
        h.update([2; 48]);
        h.update([3; 32]);
        assert_eq!(a.to_vec(), h.finalize().to_vec());
    }
}
