//! The verdict (run document) of DESIGN.md, in CBOR and JSON.
//!
//! One named [`Outcome`] plus everything a founder needs to see why: the inputs, both phases, the egress log,
//! process accounting, output tails and the limits applied. The JSON keys are the "Verdict as JSON" contract;
//! the CBOR form (the COSE_Sign1 payload of the evidence) carries the same keys.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// The value of the `format` key of every verdict this crate writes.
pub const VERDICT_FORMAT: &str = "fenced-run-verdict/1";

/// Largest encoded verdict (CBOR or JSON) that [`Verdict::from_cbor`] and [`Verdict::from_json`] accept.
pub const MAX_VERDICT_LEN: usize = 8 * 1024 * 1024;

/// Most output kept per phase in `output_tail` (the last 64 KiB).
pub const OUTPUT_TAIL_MAX: usize = 64 * 1024;

/// Deepest nesting of CBOR items accepted when decoding a verdict.
const CBOR_RECURSION_LIMIT: usize = 32;

/// Why a verdict could not be encoded or decoded.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum VerdictError {
    /// The encoded verdict is larger than [`MAX_VERDICT_LEN`].
    #[error("verdict is {len} bytes, more than the {max} bytes accepted")]
    TooLarge {
        /// Length of the input.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The CBOR did not decode into a verdict (the message names the key or type that is wrong).
    #[error("verdict CBOR: {0}")]
    Cbor(String),
    /// The JSON did not decode into a verdict (the message names the key and position).
    #[error("verdict JSON: {0}")]
    Json(String),
    /// The CBOR decoded but bytes were left after the verdict item.
    #[error("verdict CBOR: {0} trailing bytes after the verdict")]
    TrailingBytes(usize),
    /// The verdict decoded but its fields contradict each other.
    #[error("verdict is inconsistent: {0}")]
    Inconsistent(String),
    /// Encoding failed (only on an I/O or serializer bug).
    #[error("encoding verdict: {0}")]
    Encode(String),
}

/// The one named answer of a run (DESIGN.md "Verdict").
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The run declined to judge (intake refusal, missing input, patch does not apply).
    Refused,
    /// The test command ran and every counted test passed.
    TestsPassed,
    /// The tests failed: the only answer that may mean the patch is at fault.
    TestsFailed,
    /// The command succeeded and ran no test.
    NoTestsObserved,
    /// The command finished but its counts could not be read.
    CountsUnparsed,
    /// The test command could not be started (not found, not executable).
    TestCommandUnavailable,
    /// Our side gave out: memory, disk, processes.
    EnvironmentExhausted,
    /// The time budget ran out.
    BudgetExpired,
}

impl Outcome {
    /// All eight outcomes, in the order of DESIGN.md.
    pub const ALL: [Outcome; 8] = [
        Outcome::Refused,
        Outcome::TestsPassed,
        Outcome::TestsFailed,
        Outcome::NoTestsObserved,
        Outcome::CountsUnparsed,
        Outcome::TestCommandUnavailable,
        Outcome::EnvironmentExhausted,
        Outcome::BudgetExpired,
    ];

    /// The contract name (`tests_passed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Refused => "refused",
            Outcome::TestsPassed => "tests_passed",
            Outcome::TestsFailed => "tests_failed",
            Outcome::NoTestsObserved => "no_tests_observed",
            Outcome::CountsUnparsed => "counts_unparsed",
            Outcome::TestCommandUnavailable => "test_command_unavailable",
            Outcome::EnvironmentExhausted => "environment_exhausted",
            Outcome::BudgetExpired => "budget_expired",
        }
    }

    /// Whether the run judged (every outcome but `refused`).
    pub fn is_judged(self) -> bool {
        self != Outcome::Refused
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The isolation tier the run used (DESIGN.md "Isolation tiers"): the one enum, [`job_policy::Isolation`].
pub use job_policy::Isolation;

/// The `format` key: always [`VERDICT_FORMAT`]; any other string is rejected when decoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VerdictFormat;

impl Serialize for VerdictFormat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(VERDICT_FORMAT)
    }
}

impl<'de> Deserialize<'de> for VerdictFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == VERDICT_FORMAT {
            Ok(VerdictFormat)
        } else {
            Err(serde::de::Error::custom(format!(
                "unknown verdict format {s:?}, expected {VERDICT_FORMAT:?}"
            )))
        }
    }
}

/// Why the run declined to judge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    /// Where the refusal happened (an intake stage such as `unpack`, or `job`, `patch`, `commit`).
    pub stage: String,
    /// Human-readable reason naming what is wrong.
    pub reason: String,
}

/// What the run was asked to judge.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    /// The repository commit (hex object id), when the repository has one.
    pub commit: Option<String>,
    /// The tree hash of the repository after the patch (hex object id), when computed.
    pub tree: Option<String>,
    /// SHA-256 of the patch bytes (hex), `null` when the job has no patch.
    pub patch_sha256: Option<String>,
    /// SHA-256 of the job file bytes (hex), `null` only when no job was received.
    pub job_sha256: Option<String>,
    /// The founder's nonce, hex in JSON and CBOR alike.
    #[serde(with = "hex_bytes")]
    pub nonce: Vec<u8>,
    /// The job's `[test] protect` globs (absent when the job protects nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protect: Vec<String>,
    /// Git tree object id (hex) of the protected paths as the test phase ran them: only the paths the globs
    /// match, in their directories (absent when the job protects nothing or the run ended before the test phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_tree: Option<String>,
}

/// A change to a protected path that the fence undid before the test phase (`[test] protect`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectedRestore {
    /// The path, relative to the repository, `/`-separated.
    pub path: String,
    /// What had happened to it: `modified`, `added`, `deleted`, `type_changed` (a file became a link or a
    /// directory, or the other way round) or `mode_changed`.
    pub change: String,
    /// Who changed it: `patch` or `install`.
    pub by: String,
}

/// One attempt to reach the network through the egress proxy during the install phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRecord {
    /// The host name (or IP literal) asked for, as normalised by the proxy.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// Whether the proxy let the connection through.
    pub allowed: bool,
    /// Why it was allowed or refused (allowlist entry, or the failed rule).
    pub reason: String,
    /// Bytes sent from the sandbox to the remote.
    pub bytes_up: u64,
    /// Bytes sent from the remote to the sandbox.
    pub bytes_down: u64,
}

/// The install phase as it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallPhase {
    /// The command line run (as given to `sh -c`).
    pub command: String,
    /// Where the command came from: `job`, or `detected:<file>` (such as `detected:Cargo.toml`).
    pub source: String,
    /// Exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// Signal number, when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// Every egress attempt, allowed or refused, in order.
    pub egress: Vec<EgressRecord>,
    /// Names (never values) of the environment variables the command saw.
    pub env_names: Vec<String>,
    /// The sandbox the command saw (mounts and namespaces, one short line each).
    pub sandbox: Vec<String>,
    /// The operator's `[egress]` settings in force for this phase, when there were any (absent in evidence
    /// written before the field existed, and when the operator set nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_egress: Option<OperatorEgress>,
}

/// The operator's egress settings an install phase ran with (docs/job-file.md, `[egress]` of the operator's
/// configuration): never the job's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorEgress {
    /// Networks the address policy accepted for allowlisted names (canonical CIDR form).
    #[serde(default)]
    pub allow_networks: Vec<String>,
    /// The HTTP CONNECT proxy allowed connections went through (`http://HOST:PORT`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_proxy: Option<String>,
    /// SHA-256 (hex) of the operator's `ca_certificates` PEM text (CRLF made LF) the install phase trusted
    /// besides the system bundle, if any: such an anchor lets the operator serve any package for an
    /// allowlisted name (docs/threat-model.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates_sha256: Option<String>,
}

/// The network the test phase had: only `none` exists.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestNetwork {
    /// A network namespace with loopback up and nothing else.
    #[default]
    None,
}

/// The test phase as it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestPhase {
    /// The command line run (as given to `sh -c`).
    pub command: String,
    /// Where the command came from: `job`, or `detected:<file>` (such as `detected:package.json`).
    pub source: String,
    /// Exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// Signal number, when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// The network the phase had (always `none`).
    pub network: TestNetwork,
    /// Names (never values) of the environment variables the command saw.
    pub env_names: Vec<String>,
    /// The sandbox the command saw (mounts and namespaces, one short line each).
    pub sandbox: Vec<String>,
}

/// Test counts as a parser read them from the test phase's output (claims of the repository).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCounts {
    /// Tests reported passed.
    pub passed: u64,
    /// Tests reported failed.
    pub failed: u64,
    /// Tests reported skipped or ignored.
    pub skipped: u64,
    /// The parser that read them (`cargo`, `pytest`, `junit`, ...).
    pub parser: String,
}

/// Process accounting of the run (both phases together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessCounts {
    /// Processes started by the untrusted commands.
    pub started: u64,
    /// Processes still running when a phase's command ended.
    pub running_at_end: u64,
    /// Processes left after teardown (must be 0; anything else is a finding).
    pub left_after_teardown: u64,
}

/// The last [`OUTPUT_TAIL_MAX`] bytes of each phase's output, lossy UTF-8.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputTail {
    /// Tail of the install phase (empty when there was none).
    pub install: String,
    /// Tail of the test phase (empty when there was none).
    pub test: String,
}

impl OutputTail {
    /// Keeps the last [`OUTPUT_TAIL_MAX`] bytes of `bytes` as lossy UTF-8.
    pub fn tail_of(bytes: &[u8]) -> String {
        let start = bytes.len().saturating_sub(OUTPUT_TAIL_MAX);
        let s = String::from_utf8_lossy(&bytes[start..]);
        // An invalid byte becomes U+FFFD (3 bytes): drop leading characters until 64 KiB of UTF-8 remain.
        let mut cut = s.len().saturating_sub(OUTPUT_TAIL_MAX);
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s[cut..].to_string()
    }
}

/// One resource limit set with setrlimit(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlimitValue {
    /// Soft limit (`null` = unlimited).
    pub soft: Option<u64>,
    /// Hard limit (`null` = unlimited).
    pub hard: Option<u64>,
}

/// The limits the fence applied (`null` where a limit was not applied, as in a refused run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppliedLimits {
    /// Memory limit of each phase's cgroup, MiB.
    pub memory_mib: Option<u64>,
    /// Process limit of each phase's cgroup.
    pub pids: Option<u64>,
    /// Size of the writable scratch, MiB.
    pub disk_mib: Option<u64>,
    /// RLIMIT_NOFILE.
    pub open_files: Option<u64>,
    /// Wall-clock budget of the install phase, seconds.
    pub install_timeout_seconds: Option<u64>,
    /// Wall-clock budget of the test phase, seconds.
    pub test_timeout_seconds: Option<u64>,
    /// Every rlimit set, by its name (`RLIMIT_NOFILE`, `RLIMIT_FSIZE`, `RLIMIT_CORE`, ...).
    pub rlimits: BTreeMap<String, RlimitValue>,
}

/// The agent that produced the verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentInfo {
    /// The agent's version string.
    pub version: String,
}

/// A finding of the intake scan (stage 5) or of any other stage, recorded whether or not it refused the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// The stage that made it (`receive`, `unpack`, `structure`, `normalise`, `scan`, `teardown`, ...).
    pub stage: String,
    /// The path inside the repository it concerns (empty when none).
    pub path: String,
    /// A short machine-readable kind (`docker-socket`, `remote-code-load`, ...).
    pub kind: String,
    /// Human-readable detail.
    pub detail: String,
}

/// The toolchain image whose file system the sandbox showed as its system directories (`[image] toolchains`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageInfo {
    /// The toolchain sets the image holds (sorted).
    pub toolchains: Vec<String>,
    /// The image's dm-verity root hash (hex), as on the measured kernel command line.
    pub root_hash: String,
    /// A task's environment image id (`sha256:<hex>`), when the image was built from a task's Dockerfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Whether the toolchain the sandbox ran satisfies one of the repository's toolchain pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinSatisfied {
    /// The image's version satisfies the pin.
    Yes,
    /// It does not (a nightly channel, a newer version, a range that excludes it).
    No,
    /// Not known: the run used no toolchain image (the runner's own system), or the pin could not be read.
    Unknown,
}

/// One toolchain pin of the repository (`rust-toolchain.toml`, `.nvmrc`, `package.json` `engines.node`,
/// `.python-version`, `pyproject.toml` `requires-python`, `go.mod` `go`), read as text before the install
/// phase, and whether the toolchain image's version satisfies it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolchainPin {
    /// The file at the repository's root that holds the pin (`package.json` for `engines.node`).
    pub file: String,
    /// The toolchain set it concerns (`rust`, `python`, `node`, `go`).
    pub toolchain: String,
    /// What the file asks for, as written (escaped, at most 200 characters).
    pub wants: String,
    /// The image's version of that toolchain (`null` when the run used no toolchain image holding it).
    pub have: Option<String>,
    /// Whether `have` satisfies `wants`.
    pub satisfied: PinSatisfied,
    /// Why not, or why unknown (empty when satisfied).
    pub reason: String,
}

/// The run document: one named outcome and the record that explains it (DESIGN.md "Verdict as JSON").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// Always [`VERDICT_FORMAT`].
    pub format: VerdictFormat,
    /// The named answer.
    pub outcome: Outcome,
    /// `false` only for `refused`.
    pub judged: bool,
    /// Why the run declined to judge (`null` unless `refused`).
    pub refusal: Option<Refusal>,
    /// The isolation tier.
    pub isolation: Isolation,
    /// What was judged.
    pub inputs: Inputs,
    /// The install phase (`null` when the job has none or the run was refused before it).
    pub install: Option<InstallPhase>,
    /// The test phase (`null` when the run was refused before it).
    pub test: Option<TestPhase>,
    /// Test counts (`null` when none could be read).
    pub tests: Option<TestCounts>,
    /// Process accounting.
    pub processes: ProcessCounts,
    /// Last 64 KiB of each phase's output.
    pub output_tail: OutputTail,
    /// The limits applied.
    pub limits: AppliedLimits,
    /// The agent.
    pub agent: AgentInfo,
    /// Intake and teardown findings (may be empty).
    pub findings: Vec<Finding>,
    /// Changes to protected paths undone before the test phase (absent when there were none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<ProtectedRestore>,
    /// The toolchain image the sandbox ran on (absent when the job asked for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageInfo>,
    /// The repository's toolchain pins and whether the image satisfies each (absent when it has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toolchain_pins: Vec<ToolchainPin>,
    /// Where the repository was fetched from, when the job named it by `[repository] url` (absent for a
    /// repository carried in the bundle, and in verdicts written before the field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositorySource>,
}

/// A repository the fence fetched by URL (`[repository] url`): what the founder pins with
/// `verify-attestation --repository URL`. The commit it was checked against is `inputs.commit`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositorySource {
    /// The URL as the job wrote it.
    pub url: String,
    /// How the commit came: `shallow` (only the pinned commit), `full` (the server refused a fetch by commit
    /// id, so its branches and tags were fetched), or `failed`.
    pub fetch: String,
    /// Wall-clock duration of the fetch in milliseconds.
    pub duration_ms: u64,
    /// The fetch's connections when the run ended at the fetch; otherwise they open `install.egress` (the fetch
    /// and the install phase share one egress proxy session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressRecord>,
}

impl Verdict {
    /// A judged verdict with `outcome`, the given inputs and everything else empty, for the fence to fill in.
    ///
    /// Passing [`Outcome::Refused`] gives a refusal with an empty stage and reason; use [`Verdict::refused`].
    pub fn new(
        outcome: Outcome,
        isolation: Isolation,
        inputs: Inputs,
        agent_version: &str,
    ) -> Verdict {
        Verdict {
            format: VerdictFormat,
            outcome,
            judged: outcome.is_judged(),
            refusal: (!outcome.is_judged()).then(|| Refusal {
                stage: String::new(),
                reason: String::new(),
            }),
            isolation,
            inputs,
            install: None,
            test: None,
            tests: None,
            processes: ProcessCounts::default(),
            output_tail: OutputTail::default(),
            limits: AppliedLimits::default(),
            agent: AgentInfo {
                version: agent_version.to_owned(),
            },
            findings: Vec::new(),
            protected: Vec::new(),
            image: None,
            toolchain_pins: Vec::new(),
            repository: None,
        }
    }

    /// A `refused` verdict: the run declined to judge at `stage` because of `reason`.
    pub fn refused(
        stage: &str,
        reason: &str,
        isolation: Isolation,
        inputs: Inputs,
        agent_version: &str,
    ) -> Verdict {
        let mut v = Verdict::new(Outcome::Refused, isolation, inputs, agent_version);
        v.refusal = Some(Refusal {
            stage: stage.to_owned(),
            reason: reason.to_owned(),
        });
        v
    }

    /// Sets the outcome and keeps `judged` and `refusal` consistent with it.
    pub fn set_outcome(&mut self, outcome: Outcome) {
        self.outcome = outcome;
        self.judged = outcome.is_judged();
        if outcome.is_judged() {
            self.refusal = None;
        } else if self.refusal.is_none() {
            self.refusal = Some(Refusal {
                stage: String::new(),
                reason: String::new(),
            });
        }
    }

    /// Checks that the fields agree: `judged` matches the outcome, `refusal` is present exactly when refused,
    /// the test phase says `network: none`, output tails are within 64 KiB.
    pub fn check_consistency(&self) -> Result<(), VerdictError> {
        if self.judged != self.outcome.is_judged() {
            return Err(VerdictError::Inconsistent(format!(
                "judged is {} but outcome is {}",
                self.judged, self.outcome
            )));
        }
        match (&self.refusal, self.outcome) {
            (None, Outcome::Refused) => {
                return Err(VerdictError::Inconsistent(
                    "outcome is refused but refusal is null".into(),
                ))
            }
            (Some(_), o) if o != Outcome::Refused => {
                return Err(VerdictError::Inconsistent(format!(
                    "refusal is set but outcome is {o}"
                )))
            }
            _ => {}
        }
        for (name, tail) in [
            ("install", &self.output_tail.install),
            ("test", &self.output_tail.test),
        ] {
            // `tail_of` never keeps more than 64 KiB of UTF-8, so neither may a reader accept more.
            if tail.len() > OUTPUT_TAIL_MAX {
                return Err(VerdictError::Inconsistent(format!(
                    "output_tail.{name} is {} bytes, more than a 64 KiB tail",
                    tail.len()
                )));
            }
        }
        Ok(())
    }

    /// The verdict as pretty-printed JSON (the contract form).
    pub fn to_json_pretty(&self) -> String {
        // Serialising these plain structs (string keys, no maps with non-string keys) cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The verdict as a JSON value.
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Decodes and checks a JSON verdict (bounded by [`MAX_VERDICT_LEN`]).
    pub fn from_json(bytes: &[u8]) -> Result<Verdict, VerdictError> {
        if bytes.len() > MAX_VERDICT_LEN {
            return Err(VerdictError::TooLarge {
                len: bytes.len(),
                max: MAX_VERDICT_LEN,
            });
        }
        let v: Verdict =
            serde_json::from_slice(bytes).map_err(|e| VerdictError::Json(e.to_string()))?;
        v.check_consistency()?;
        Ok(v)
    }

    /// The verdict as CBOR (a map with the same text keys as the JSON form).
    pub fn to_cbor(&self) -> Result<Vec<u8>, VerdictError> {
        let mut out = Vec::new();
        ciborium::ser::into_writer(self, &mut out)
            .map_err(|e| VerdictError::Encode(e.to_string()))?;
        Ok(out)
    }

    /// Decodes and checks a CBOR verdict from outside: bounded size and nesting, no trailing bytes, never panics.
    pub fn from_cbor(bytes: &[u8]) -> Result<Verdict, VerdictError> {
        if bytes.len() > MAX_VERDICT_LEN {
            return Err(VerdictError::TooLarge {
                len: bytes.len(),
                max: MAX_VERDICT_LEN,
            });
        }
        let mut reader = bytes;
        let v: Verdict =
            ciborium::de::from_reader_with_recursion_limit(&mut reader, CBOR_RECURSION_LIMIT)
                .map_err(|e| VerdictError::Cbor(cbor_error_text(&e)))?;
        if !reader.is_empty() {
            return Err(VerdictError::TrailingBytes(reader.len()));
        }
        v.check_consistency()?;
        Ok(v)
    }
}

/// Renders a ciborium decoding error with its offset.
pub(crate) fn cbor_error_text<T: fmt::Debug>(e: &ciborium::de::Error<T>) -> String {
    match e {
        // The reader's error type is Debug-only (`EndOfFile`, `Error { kind: .. }`): said in words instead.
        ciborium::de::Error::Io(_) => "input ended early (truncated CBOR)".to_owned(),
        ciborium::de::Error::Syntax(off) => format!("malformed CBOR at byte {off}"),
        ciborium::de::Error::Semantic(Some(off), msg) => format!("{msg} (at byte {off})"),
        ciborium::de::Error::Semantic(None, msg) => msg.clone(),
        ciborium::de::Error::RecursionLimitExceeded => "nesting too deep".to_owned(),
    }
}

/// Serde helper: `Vec<u8>` as a lowercase hex string.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the bytes as lowercase hex.
    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(b))
    }

    /// Reads a hex string (either case).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        hex::decode(&s).map_err(|e| serde::de::Error::custom(format!("nonce is not hex: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Verdict {
        let inputs = Inputs {
            commit: Some("a".repeat(40)),
            tree: Some("b".repeat(40)),
            patch_sha256: Some("c".repeat(64)),
            job_sha256: Some("d".repeat(64)),
            nonce: vec![0x5a; 32],
            protect: Vec::new(),
            test_tree: None,
        };
        let mut v = Verdict::new(Outcome::TestsPassed, Isolation::Process, inputs, "0.1.0");
        v.install = Some(InstallPhase {
            command: "sh install.sh".into(),
            source: "job".into(),
            exit_code: Some(0),
            signal: None,
            duration_ms: 1200,
            egress: vec![EgressRecord {
                host: "registry.example".into(),
                port: 443,
                allowed: true,
                reason: "allowlisted registry.example:443".into(),
                bytes_up: 10,
                bytes_down: 2000,
            }],
            env_names: vec!["HOME".into(), "PATH".into()],
            sandbox: vec!["net: loopback + proxy relay".into()],
            operator_egress: None,
        });
        v.test = Some(TestPhase {
            command: "cargo test".into(),
            source: "detected:Cargo.toml".into(),
            exit_code: Some(0),
            signal: None,
            duration_ms: 3000,
            network: TestNetwork::None,
            env_names: vec!["HOME".into()],
            sandbox: vec![],
        });
        v.tests = Some(TestCounts {
            passed: 3,
            failed: 0,
            skipped: 1,
            parser: "cargo".into(),
        });
        v.processes = ProcessCounts {
            started: 7,
            running_at_end: 0,
            left_after_teardown: 0,
        };
        v.output_tail = OutputTail {
            install: "ok\n".into(),
            test: "test result: ok\n".into(),
        };
        v.limits = AppliedLimits {
            memory_mib: Some(4096),
            pids: Some(512),
            disk_mib: Some(4096),
            open_files: Some(4096),
            install_timeout_seconds: Some(600),
            test_timeout_seconds: Some(900),
            rlimits: [(
                "RLIMIT_CORE".to_owned(),
                RlimitValue {
                    soft: Some(0),
                    hard: Some(0),
                },
            )]
            .into(),
        };
        v.findings.push(Finding {
            stage: "scan".into(),
            path: "install.sh".into(),
            kind: "remote-code-load".into(),
            detail: "curl | sh".into(),
        });
        v
    }

    #[test]
    fn json_has_every_contract_key() {
        let v = sample().to_json_value();
        let obj = v.as_object().expect("object");
        for key in [
            "format",
            "outcome",
            "judged",
            "refusal",
            "isolation",
            "inputs",
            "install",
            "test",
            "tests",
            "processes",
            "output_tail",
            "limits",
            "agent",
            "findings",
        ] {
            assert!(obj.contains_key(key), "missing top-level key {key}");
        }
        let sub = |path: &str, keys: &[&str]| {
            let o = v
                .pointer(path)
                .and_then(|x| x.as_object())
                .unwrap_or_else(|| panic!("{path} not an object"));
            for k in keys {
                assert!(o.contains_key(*k), "missing key {path}/{k}");
            }
        };
        sub(
            "/inputs",
            &["commit", "tree", "patch_sha256", "job_sha256", "nonce"],
        );
        sub(
            "/install",
            &[
                "command",
                "source",
                "exit_code",
                "signal",
                "duration_ms",
                "egress",
                "env_names",
                "sandbox",
            ],
        );
        sub(
            "/install/egress/0",
            &[
                "host",
                "port",
                "allowed",
                "reason",
                "bytes_up",
                "bytes_down",
            ],
        );
        sub(
            "/test",
            &[
                "command",
                "source",
                "exit_code",
                "signal",
                "duration_ms",
                "network",
                "env_names",
                "sandbox",
            ],
        );
        sub("/tests", &["passed", "failed", "skipped", "parser"]);
        sub(
            "/processes",
            &["started", "running_at_end", "left_after_teardown"],
        );
        sub("/output_tail", &["install", "test"]);
        sub(
            "/limits",
            &[
                "memory_mib",
                "pids",
                "disk_mib",
                "open_files",
                "install_timeout_seconds",
                "test_timeout_seconds",
            ],
        );
        sub("/agent", &["version"]);
        sub("/findings/0", &["stage", "path", "kind", "detail"]);
        assert_eq!(v["format"], VERDICT_FORMAT);
        assert_eq!(v["outcome"], "tests_passed");
        assert_eq!(v["isolation"], "process");
        assert_eq!(v["test"]["network"], "none");
        assert_eq!(v["inputs"]["nonce"], "5a".repeat(32));
        assert_eq!(v["refusal"], serde_json::Value::Null);
    }

    #[test]
    fn outcome_and_isolation_names() {
        let names: Vec<String> = Outcome::ALL
            .iter()
            .map(|o| {
                serde_json::to_value(o)
                    .expect("ser")
                    .as_str()
                    .expect("str")
                    .to_owned()
            })
            .collect();
        assert_eq!(
            names,
            [
                "refused",
                "tests_passed",
                "tests_failed",
                "no_tests_observed",
                "counts_unparsed",
                "test_command_unavailable",
                "environment_exhausted",
                "budget_expired"
            ]
        );
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).expect("ser"), o.as_str());
        }
        for i in [
            Isolation::SevSnp,
            Isolation::Tdx,
            Isolation::Vm,
            Isolation::Process,
        ] {
            assert_eq!(serde_json::to_value(i).expect("ser"), i.as_str());
        }
    }

    #[test]
    fn cbor_and_json_round_trip() {
        let v = sample();
        let cbor = v.to_cbor().expect("cbor");
        assert_eq!(Verdict::from_cbor(&cbor).expect("decode"), v);
        let json = v.to_json_pretty();
        assert_eq!(Verdict::from_json(json.as_bytes()).expect("decode"), v);
        let r = Verdict::refused(
            "patch",
            "does not apply",
            Isolation::Vm,
            Inputs::default(),
            "0.1.0",
        );
        let back = Verdict::from_cbor(&r.to_cbor().expect("cbor")).expect("decode");
        assert_eq!(back, r);
        assert!(!back.judged);
        assert_eq!(
            back.refusal.as_ref().map(|x| x.stage.as_str()),
            Some("patch")
        );
    }

    #[test]
    fn toolchain_pins_round_trip_and_a_verdict_without_them_still_decodes() {
        let mut v = sample();
        // Absent when empty: a verdict written before the field existed is the same document.
        let json = v.to_json_value();
        assert!(json.get("toolchain_pins").is_none(), "{json}");
        assert_eq!(
            Verdict::from_json(json.to_string().as_bytes()).expect("old"),
            v
        );
        v.toolchain_pins = vec![
            ToolchainPin {
                file: "rust-toolchain.toml".into(),
                toolchain: "rust".into(),
                wants: "1.80".into(),
                have: Some("1.96.0".into()),
                satisfied: PinSatisfied::Yes,
                reason: String::new(),
            },
            ToolchainPin {
                file: ".nvmrc".into(),
                toolchain: "node".into(),
                wants: "22".into(),
                have: None,
                satisfied: PinSatisfied::Unknown,
                reason: "no toolchain image".into(),
            },
        ];
        assert_eq!(
            Verdict::from_cbor(&v.to_cbor().expect("cbor")).expect("cbor"),
            v
        );
        let json = v.to_json_value();
        assert_eq!(json["toolchain_pins"][0]["satisfied"], "yes", "{json}");
        assert_eq!(json["toolchain_pins"][1]["have"], serde_json::Value::Null);
        assert_eq!(json["toolchain_pins"][1]["satisfied"], "unknown");
        assert_eq!(
            Verdict::from_json(json.to_string().as_bytes()).expect("json"),
            v
        );
        let bad = json.to_string().replace("\"unknown\"", "\"maybe\"");
        assert!(Verdict::from_json(bad.as_bytes()).is_err());
    }

    #[test]
    fn inconsistent_or_unknown_rejected() {
        let mut v = sample();
        v.judged = false;
        let err = Verdict::from_cbor(&v.to_cbor().expect("cbor")).expect_err("judged mismatch");
        assert!(err.to_string().contains("judged"), "{err}");

        let mut j = sample().to_json_value();
        j["format"] = "fenced-run-verdict/2".into();
        let err = Verdict::from_json(j.to_string().as_bytes()).expect_err("format");
        assert!(err.to_string().contains("format"), "{err}");

        let mut j = sample().to_json_value();
        j["surprise"] = 1.into();
        let err = Verdict::from_json(j.to_string().as_bytes()).expect_err("unknown key");
        assert!(err.to_string().contains("surprise"), "{err}");

        let mut j = sample().to_json_value();
        j.as_object_mut().expect("obj").remove("processes");
        let err = Verdict::from_json(j.to_string().as_bytes()).expect_err("missing key");
        assert!(err.to_string().contains("processes"), "{err}");

        let mut cbor = sample().to_cbor().expect("cbor");
        cbor.push(0);
        assert!(matches!(
            Verdict::from_cbor(&cbor),
            Err(VerdictError::TrailingBytes(1))
        ));
    }

    #[test]
    fn set_outcome_keeps_fields_consistent() {
        let mut v = Verdict::refused("job", "missing", Isolation::Process, Inputs::default(), "x");
        v.set_outcome(Outcome::TestsFailed);
        assert!(v.judged && v.refusal.is_none());
        v.check_consistency().expect("consistent");
        v.set_outcome(Outcome::Refused);
        assert!(!v.judged && v.refusal.is_some());
        v.check_consistency().expect("consistent");
    }

    #[test]
    fn output_tail_keeps_last_64k() {
        let mut big = vec![b'a'; OUTPUT_TAIL_MAX + 10];
        big.extend_from_slice(b"END");
        let t = OutputTail::tail_of(&big);
        assert_eq!(t.len(), OUTPUT_TAIL_MAX);
        assert!(t.ends_with("END"));
    }

    #[test]
    fn output_tail_of_invalid_utf8_stays_within_64k_and_a_longer_one_is_refused() {
        // Every invalid byte widens to U+FFFD (3 bytes); the tail is cut back to 64 KiB of UTF-8.
        let mut junk = vec![0xffu8; OUTPUT_TAIL_MAX];
        junk.extend_from_slice(b"END");
        let t = OutputTail::tail_of(&junk);
        assert!(t.len() <= OUTPUT_TAIL_MAX, "{}", t.len());
        assert!(t.len() > OUTPUT_TAIL_MAX - 3);
        assert!(t.ends_with("END"));
        let mut v = Verdict::refused("job", "missing", Isolation::Process, Inputs::default(), "x");
        v.output_tail.test = t;
        v.check_consistency()
            .expect("a tail_of result is consistent");
        v.output_tail.test = "a".repeat(OUTPUT_TAIL_MAX + 1);
        let e = v.check_consistency().expect_err("a tail above 64 KiB");
        assert!(e.to_string().contains("output_tail.test"), "{e}");
    }

    #[test]
    fn operator_egress_is_recorded_and_evidence_without_it_still_decodes() {
        // Without the field (as every verdict before it): the encodings carry no key and decode to `None`.
        let old = sample();
        let j = old.to_json_value();
        assert!(j["install"].get("operator_egress").is_none(), "{j}");
        assert_eq!(
            Verdict::from_cbor(&old.to_cbor().expect("cbor")).expect("decode"),
            old
        );
        let mut v = sample();
        if let Some(i) = v.install.as_mut() {
            i.operator_egress = Some(OperatorEgress {
                allow_networks: vec!["10.20.0.0/16".into()],
                upstream_proxy: Some("http://proxy.example:3128".into()),
                ca_certificates_sha256: Some("ab".repeat(32)),
            });
        }
        let j = v.to_json_value();
        assert_eq!(
            j["install"]["operator_egress"]["ca_certificates_sha256"],
            "ab".repeat(32)
        );
        assert_eq!(
            j["install"]["operator_egress"]["allow_networks"][0],
            "10.20.0.0/16"
        );
        assert_eq!(
            j["install"]["operator_egress"]["upstream_proxy"],
            "http://proxy.example:3128"
        );
        assert_eq!(
            Verdict::from_cbor(&v.to_cbor().expect("cbor")).expect("decode"),
            v
        );
        assert_eq!(
            Verdict::from_json(v.to_json_pretty().as_bytes()).expect("decode"),
            v
        );
    }

    #[test]
    fn repository_url_is_recorded_and_evidence_without_it_still_decodes() {
        let old = sample();
        assert!(old.to_json_value().get("repository").is_none());
        let mut v = sample();
        v.repository = Some(RepositorySource {
            url: "https://git.example/org/repo.git".into(),
            fetch: "shallow".into(),
            duration_ms: 120,
            egress: Vec::new(),
        });
        let j = v.to_json_value();
        assert_eq!(j["repository"]["url"], "https://git.example/org/repo.git");
        assert_eq!(j["repository"]["fetch"], "shallow");
        assert!(j["repository"].get("egress").is_none(), "{j}");
        assert_eq!(
            Verdict::from_cbor(&v.to_cbor().expect("cbor")).expect("decode"),
            v
        );
        assert_eq!(
            Verdict::from_json(v.to_json_pretty().as_bytes()).expect("decode"),
            v
        );
    }
}
