//! Measurement sets: the reviewable TOML file that lists, for one guest image release, its artifact hashes and
//! the launch measurements a genuine boot must report; its canonical encoding; detached Ed25519 auditor
//! signatures (one file per auditor); and [`TrustedSet`], the k-of-n check the verifier runs before matching.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// The `format` value of a measurement set file: version 2 has a `not_after` (required) and may hold
/// `[[identity]]` entries.
pub const SET_FORMAT: &str = "fenced-run-measurement-set/2";
/// The format of sets made before sets expired (no `not_after`, no identity entries): still parsed, so that
/// their signatures can be checked and the verifier can refuse them naming the fix.
pub const SET_FORMAT_V1: &str = "fenced-run-measurement-set/1";
/// How long a new set is valid when `measure-guest` is not told otherwise.
pub const DEFAULT_VALID_DAYS: u32 = 180;
/// The `format` value of a detached signature file.
pub const SIGNATURE_FORMAT: &str = "fenced-run-measurement-set-signature/1";
/// Domain string prepended to the canonical JSON before signing.
pub const SIGNING_DOMAIN: &[u8] = b"fenced-run/v1/measurement-set\0";

pub use attestation::hex::Hex;

/// An integer written as a `0x` hex string (a plain TOML integer is accepted on input).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HexU64(pub u64);

impl Serialize for HexU64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

impl<'de> Deserialize<'de> for HexU64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(HexU64(v)),
            Raw::Str(s) => {
                let t = s.trim();
                let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => t.parse(),
                };
                r.map(HexU64)
                    .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a number: {e}")))
            }
        }
    }
}

/// The guest image release a set describes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// Name of the guest image.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// SHA-256 hashes of the artifacts the measurements were computed from. The kernel, initramfs and command-line
/// hashes are present in every set with SNP, TDX or `vm` entries; a set of `process`-tier entries only (the
/// measurement of a `guest-agent`/`fenced-run` binary, no guest image) may leave them out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifacts {
    /// The kernel image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_sha256: Option<Hex<32>>,
    /// The initramfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initramfs_sha256: Option<Hex<32>>,
    /// The kernel command line, verbatim (optional; its hash is present whenever the kernel's is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// SHA-256 of the command line followed by one NUL byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline_sha256: Option<Hex<32>>,
    /// The OVMF image of the SNP entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovmf_sha256: Option<Hex<32>>,
    /// The TDVF image of the TDX entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdvf_sha256: Option<Hex<32>>,
}

/// An expected SEV-SNP launch digest with the parameters it was computed for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnpEntry {
    /// Number of vCPUs.
    pub vcpus: u32,
    /// QEMU CPU model name, when the signature came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_type: Option<String>,
    /// vCPU signature.
    pub vcpu_sig: HexU64,
    /// VMM type (QEMU, ec2, gce).
    pub vmm: String,
    /// SEV_FEATURES of the VMSAs.
    pub guest_features: HexU64,
    /// The guest policy a report must carry to match this entry.
    pub policy: HexU64,
    /// The launch digest.
    pub measurement: Hex<48>,
}

/// Expected TDX measurements; RTMRs left out are not checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TdxEntry {
    /// MRTD.
    pub mrtd: Hex<48>,
    /// RTMR0 (firmware configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtmr0: Option<Hex<48>>,
    /// RTMR1 (boot loader, kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtmr1: Option<Hex<48>>,
    /// RTMR2 (OS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtmr2: Option<Hex<48>>,
    /// RTMR3 (runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtmr3: Option<Hex<48>>,
}

impl TdxEntry {
    fn rtmrs(&self) -> [Option<&Hex<48>>; 4] {
        [
            self.rtmr0.as_ref(),
            self.rtmr1.as_ref(),
            self.rtmr2.as_ref(),
            self.rtmr3.as_ref(),
        ]
    }
}

/// The sim tiers a [`SimEntry`] may name.
pub const SIM_TIERS: [&str; 2] = ["vm", "process"];

/// An expected simulated launch measurement: the `vm` tier (see [`crate::sim`]) or the `process` tier (the
/// measurement of the exact `guest-agent`/`fenced-run` binary, [`attestation::sim::process_launch_measurement`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimEntry {
    /// The isolation tier (`vm` or `process`).
    pub tier: String,
    /// The measurement.
    pub measurement: Hex<48>,
    /// `process` tier: SHA-256 of the binary the measurement was computed from (informational, for review).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_sha256: Option<Hex<32>>,
}

/// A parsed measurement set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasurementSet {
    /// [`SET_FORMAT`] ([`SET_FORMAT_V1`] for an old set).
    pub format: String,
    /// RFC 3339 date-time after which the set is refused (required in [`SET_FORMAT`], covered by the
    /// signatures like every other field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// The release.
    pub release: Release,
    /// Artifact hashes.
    pub artifacts: Artifacts,
    /// SEV-SNP entries.
    #[serde(default)]
    pub snp: Vec<SnpEntry>,
    /// TDX entries.
    #[serde(default)]
    pub tdx: Vec<TdxEntry>,
    /// Simulated (`vm` tier) entries.
    #[serde(default)]
    pub sim: Vec<SimEntry>,
    /// Identity entries: an image and the launch profiles it admits ([`crate::identity`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identity: Vec<crate::identity::IdentityEntry>,
}

/// Why a set, a signature or a key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not what it should be.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The set's `not_after` is before the verification time.
    #[error("measurement set {set} expired: its not_after is {not_after}, the verification time is {at}; ask its auditors for a renewed set (`measure-guest renew`, then `measure-guest sign`)")]
    Expired {
        /// "name version (path)".
        set: String,
        /// The set's `not_after`, as written.
        not_after: String,
        /// The verification time (RFC 3339).
        at: String,
    },
    /// An old-format set has no `not_after`, so it never expires: refused.
    #[error("measurement set {set} has no not_after (format {SET_FORMAT_V1:?}, made before sets expired) and is refused: give it one with `measure-guest renew --set SET --valid-days N` (format {SET_FORMAT:?}) and have the auditors sign it again")]
    NoExpiry {
        /// "name version (path)".
        set: String,
    },
    /// Fewer than k trusted auditors signed the set.
    #[error(
        "measurement set {set}: {found} of {required} required auditor signatures are valid and trusted{}",
        problems.iter().map(|p| format!("; {p}")).collect::<String>()
    )]
    NotEnoughAuditors {
        /// "name version (path)".
        set: String,
        /// k.
        required: usize,
        /// Valid signatures by distinct trusted keys.
        found: usize,
        /// Each signature that did not count and each trusted key without a signature, with the reason.
        problems: Vec<String>,
    },
}

fn invalid(path: &Path, message: impl Into<String>) -> SetError {
    SetError::Invalid {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn read_text(path: &Path) -> Result<String, SetError> {
    // Sets, signatures and keys are kilobytes: the size is checked before anything is read.
    let bytes =
        attestation::cli_io::read_capped(path, attestation::cli_io::MAX_INPUT).map_err(|e| {
            let source = match e {
                attestation::cli_io::ReadError::Io { source, .. } => source,
                other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
            };
            SetError::Io {
                path: path.to_owned(),
                source,
            }
        })?;
    String::from_utf8(bytes).map_err(|e| SetError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    })
}

impl MeasurementSet {
    /// Parses and checks a set from TOML text; `path` only names the file in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, SetError> {
        let set: MeasurementSet = toml::from_str(text).map_err(|e| invalid(path, e.to_string()))?;
        set.check().map_err(|m| invalid(path, m))?;
        Ok(set)
    }

    /// Reads and parses a set file.
    pub fn load(path: &Path) -> Result<Self, SetError> {
        Self::from_toml(&read_text(path)?, path)
    }

    fn check(&self) -> Result<(), String> {
        match self.format.as_str() {
            SET_FORMAT => match &self.not_after {
                Some(t) => {
                    parse_time(t).map_err(|e| format!("not_after {t:?}: {e}"))?;
                }
                None => {
                    return Err(format!(
                        "not_after is missing: every {SET_FORMAT:?} set has one (an RFC 3339 date-time such as \
                         \"2027-01-31T00:00:00Z\")"
                    ))
                }
            },
            SET_FORMAT_V1 => {
                if self.not_after.is_some() || !self.identity.is_empty() {
                    return Err(format!(
                        "format {SET_FORMAT_V1:?} has neither not_after nor identity entries: a set with them is \
                         {SET_FORMAT:?} (and needs new signatures)"
                    ));
                }
            }
            other => {
                return Err(format!(
                    "format is {other:?}, expected {SET_FORMAT:?}"
                ))
            }
        }
        for (i, e) in self.identity.iter().enumerate() {
            e.check()
                .map_err(|m| format!("identity entry {}: {m}", i + 1))?;
        }
        let a = &self.artifacts;
        if let Some(c) = &a.cmdline {
            let h = crate::sim::cmdline_sha256(c);
            match &a.cmdline_sha256 {
                Some(have) if have.0 == h => {}
                Some(have) => {
                    return Err(format!(
                        "artifacts.cmdline_sha256 is {have}, but SHA-256 of the cmdline with its NUL is {}",
                        hex::encode(h)
                    ))
                }
                None => {
                    return Err(
                        "artifacts.cmdline is given but artifacts.cmdline_sha256 is missing".into(),
                    )
                }
            }
        }
        let image =
            a.kernel_sha256.is_some() && a.initramfs_sha256.is_some() && a.cmdline_sha256.is_some();
        let needs_image =
            !self.snp.is_empty() || !self.tdx.is_empty() || self.sim.iter().any(|e| e.tier == "vm");
        if needs_image && !image {
            return Err(
                "artifacts: kernel_sha256, initramfs_sha256 and cmdline_sha256 are required in a set with SNP, \
                 TDX or vm entries (only a set of process-tier entries may leave them out)"
                    .into(),
            );
        }
        if self.snp.is_empty()
            && self.tdx.is_empty()
            && self.sim.is_empty()
            && self.identity.is_empty()
        {
            return Err(
                "the set has no entries (no [[snp]], [[tdx]], [[sim]] or [[identity]])".into(),
            );
        }
        for (i, e) in self.snp.iter().enumerate() {
            if e.vcpus == 0 {
                return Err(format!("snp entry {}: vcpus is 0", i + 1));
            }
            if let Err(m) = e.vmm.parse::<crate::snp::VmmType>() {
                return Err(format!("snp entry {}: {m}", i + 1));
            }
            if let Some(t) = &e.vcpu_type {
                match crate::snp::vcpu_sig_for_type(t) {
                    Some(sig) if u64::from(sig) == e.vcpu_sig.0 => {}
                    Some(sig) => {
                        return Err(format!(
                            "snp entry {}: vcpu_sig {:#x} is not the signature {sig:#x} of {t}",
                            i + 1,
                            e.vcpu_sig.0
                        ))
                    }
                    None => return Err(format!("snp entry {}: unknown vcpu_type {t:?}", i + 1)),
                }
            }
        }
        for (i, e) in self.sim.iter().enumerate() {
            if !SIM_TIERS.contains(&e.tier.as_str()) {
                return Err(format!(
                    "sim entry {}: tier {:?}, expected \"vm\" or \"process\"",
                    i + 1,
                    e.tier
                ));
            }
            if e.binary_sha256.is_some() && e.tier != "process" {
                return Err(format!(
                    "sim entry {}: binary_sha256 belongs to a process-tier entry, this one is {:?}",
                    i + 1,
                    e.tier
                ));
            }
        }
        Ok(())
    }

    /// The canonical encoding: the parsed set as JSON with object keys sorted, no whitespace, absent optional
    /// fields left out, byte strings as lower-case hex and integers of the hex fields as `0x` strings.
    pub fn canonical_json(&self) -> String {
        let v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        let mut out = String::new();
        write_canonical(&v, &mut out);
        out
    }

    /// The signed message: [`SIGNING_DOMAIN`] followed by [`Self::canonical_json`].
    pub fn signing_message(&self) -> Vec<u8> {
        let mut m = SIGNING_DOMAIN.to_vec();
        m.extend_from_slice(self.canonical_json().as_bytes());
        m
    }

    /// SHA-256 of the signed message, quoted in signature files so a mismatch can be named.
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.signing_message()).into()
    }

    /// The `not_after` as a Unix time (`None` for an old set without one).
    pub fn not_after_unix(&self) -> Option<i64> {
        self.not_after
            .as_deref()
            .and_then(|t| parse_time(t).ok())
            .map(|t| t.unix_timestamp())
    }

    /// "name version".
    pub fn label(&self) -> String {
        format!("{} {}", self.release.name, self.release.version)
    }

    /// Writes the set as commented, reviewable TOML (parsing it back gives the same set).
    pub fn to_toml(&self) -> String {
        let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
        let mut t = String::new();
        t.push_str("# fenced-run measurement set: the launch measurements a genuine boot of this guest image release\n");
        t.push_str("# must report. To review: rebuild the image reproducibly, run `measure-guest pin` with the same\n");
        t.push_str("# flags and compare. Auditors sign it with `measure-guest sign` (detached files, one per auditor).\n");
        t.push_str(&format!(
            "format = {}\n{}\n[release]\nname = {}\nversion = {}\n\n",
            q(&self.format),
            match &self.not_after {
                Some(t) => format!(
                    "# The verifier refuses the set after this date-time (RFC 3339).\nnot_after = {}\n",
                    q(t)
                ),
                None => String::new(),
            },
            q(&self.release.name),
            q(&self.release.version)
        ));
        let a = &self.artifacts;
        t.push_str(
            "# SHA-256 of the artifacts the measurements below were computed from.\n[artifacts]\n",
        );
        if let Some(h) = &a.kernel_sha256 {
            t.push_str(&format!("kernel_sha256 = \"{h}\"\n"));
        }
        if let Some(h) = &a.initramfs_sha256 {
            t.push_str(&format!("initramfs_sha256 = \"{h}\"\n"));
        }
        if let Some(c) = &a.cmdline {
            t.push_str(&format!("cmdline = {}\n", q(c)));
        }
        if let Some(h) = &a.cmdline_sha256 {
            t.push_str(&format!(
                "# SHA-256 of the command line followed by one NUL byte\ncmdline_sha256 = \"{h}\"\n"
            ));
        }
        if let Some(h) = &a.ovmf_sha256 {
            t.push_str(&format!("ovmf_sha256 = \"{h}\"\n"));
        }
        if let Some(h) = &a.tdvf_sha256 {
            t.push_str(&format!("tdvf_sha256 = \"{h}\"\n"));
        }
        if !self.snp.is_empty() {
            t.push_str("\n# SEV-SNP launch digests, one per vCPU count / vCPU type / guest features / VMM.\n");
            t.push_str("# A report matches an entry when its MEASUREMENT equals `measurement` and its POLICY equals `policy`.\n");
        }
        for e in &self.snp {
            t.push_str(&format!("\n[[snp]]\nvcpus = {}\n", e.vcpus));
            if let Some(ty) = &e.vcpu_type {
                t.push_str(&format!("vcpu_type = {}\n", q(ty)));
            }
            t.push_str(&format!(
                "vcpu_sig = \"{:#x}\"\nvmm = {}\nguest_features = \"{:#x}\"\npolicy = \"{:#x}\"\nmeasurement = \"{}\"\n",
                e.vcpu_sig.0, q(&e.vmm), e.guest_features.0, e.policy.0, e.measurement
            ));
        }
        if !self.tdx.is_empty() {
            t.push_str(
                "\n# TDX: MRTD and, where given, RTMRs (an RTMR left out is not checked).\n",
            );
        }
        for e in &self.tdx {
            t.push_str(&format!("\n[[tdx]]\nmrtd = \"{}\"\n", e.mrtd));
            for (i, r) in e.rtmrs().iter().enumerate() {
                if let Some(r) = r {
                    t.push_str(&format!("rtmr{i} = \"{r}\"\n"));
                }
            }
        }
        if !self.sim.is_empty() {
            t.push_str("\n# Simulated launch measurements (docs/measurements.md): the `vm` tier from the artifacts above,\n");
            t.push_str("# the `process` tier from the exact guest-agent/fenced-run binary (`measure-guest process`).\n");
        }
        for e in &self.sim {
            t.push_str(&format!(
                "\n[[sim]]\ntier = {}\nmeasurement = \"{}\"\n",
                q(&e.tier),
                e.measurement
            ));
            if let Some(h) = &e.binary_sha256 {
                t.push_str(&format!("binary_sha256 = \"{h}\"\n"));
            }
        }
        crate::identity::write_toml(&self.identity, &mut t);
        t
    }
}

/// A date-time that is not RFC 3339 ([`parse_time`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 date-time: {0}")]
pub struct NotRfc3339(pub time::error::Parse);

/// Parses an RFC 3339 date-time.
pub fn parse_time(s: &str) -> Result<time::OffsetDateTime, NotRfc3339> {
    time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
        .map_err(NotRfc3339)
}

/// A Unix time as RFC 3339 (UTC).
pub fn format_time(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("unix time {unix}"))
}

/// `now + days` as RFC 3339 (UTC, whole seconds): the `not_after` of a new set.
pub fn not_after_in_days(now_unix: i64, days: u32) -> String {
    format_time(now_unix.saturating_add(i64::from(days) * 86_400))
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(x) = m.get(*k) {
                    write_canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A detached auditor signature over a set (one TOML file per auditor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureFile {
    /// Always [`SIGNATURE_FORMAT`].
    pub format: String,
    /// Who signed (informational; trust comes from the key).
    pub auditor: String,
    /// Always "ed25519".
    pub algorithm: String,
    /// The auditor's Ed25519 public key.
    pub public_key: Hex<32>,
    /// "name version" of the set signed (informational).
    pub set: String,
    /// SHA-256 of the signed message, to name a signature made over another set.
    pub set_sha256: Hex<32>,
    /// Ed25519 signature over [`MeasurementSet::signing_message`].
    pub signature: Hex<64>,
}

impl SignatureFile {
    /// Signs a set.
    pub fn sign(set: &MeasurementSet, key: &SigningKey, auditor: &str) -> Self {
        SignatureFile {
            format: SIGNATURE_FORMAT.to_owned(),
            auditor: auditor.to_owned(),
            algorithm: "ed25519".to_owned(),
            public_key: Hex(key.verifying_key().to_bytes()),
            set: set.label(),
            set_sha256: Hex(set.digest()),
            signature: Hex(key.sign(&set.signing_message()).to_bytes()),
        }
    }

    /// Parses a signature file's text.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, SetError> {
        let s: SignatureFile = toml::from_str(text).map_err(|e| invalid(path, e.to_string()))?;
        if s.format != SIGNATURE_FORMAT {
            return Err(invalid(
                path,
                format!("format is {:?}, expected {SIGNATURE_FORMAT:?}", s.format),
            ));
        }
        if s.algorithm != "ed25519" {
            return Err(invalid(
                path,
                format!("algorithm {:?}, only \"ed25519\" is supported", s.algorithm),
            ));
        }
        Ok(s)
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
        format!(
            "# Detached auditor signature over a fenced-run measurement set (docs/measurements.md).\n\
             format = {}\nauditor = {}\nalgorithm = \"ed25519\"\npublic_key = \"{}\"\nset = {}\nset_sha256 = \"{}\"\nsignature = \"{}\"\n",
            q(&self.format), q(&self.auditor), self.public_key, q(&self.set), self.set_sha256, self.signature
        )
    }

    /// Checks the signature over `set`; the error says what is wrong.
    pub fn verify(&self, set: &MeasurementSet) -> Result<VerifyingKey, SignatureError> {
        let key =
            VerifyingKey::from_bytes(&self.public_key.0).map_err(|_| SignatureError::BadKey)?;
        if self.set_sha256.0 != set.digest() {
            return Err(SignatureError::OtherSet {
                signed: self.set_sha256,
                this: Hex(set.digest()),
            });
        }
        // Strict Ed25519 (weak keys and small-order R refused) through the one signature module.
        attestation::sig::ed25519_strict(
            &self.public_key.0,
            &set.signing_message(),
            &self.signature.0,
        )
        .map_err(|_| SignatureError::Invalid)?;
        Ok(key)
    }
}

/// Why an auditor's detached signature does not sign a measurement set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// `public_key` is not an Ed25519 point.
    #[error("public key is not a valid Ed25519 point")]
    BadKey,
    /// `set_sha256` is the digest of another set.
    #[error("signed a different set (set_sha256 {signed}, this set {this})")]
    OtherSet {
        /// The digest the signature file names.
        signed: Hex<32>,
        /// The digest of the set at hand.
        this: Hex<32>,
    },
    /// The signature does not verify under the key.
    #[error("signature is invalid")]
    Invalid,
}

/// A key could not be written as PEM text (the encoder's message).
#[derive(Debug, thiserror::Error)]
#[error("cannot write the key as PEM: {0}")]
pub struct KeyPemError(String);

/// Every `SET.*.sig` file beside the set (the names `measure-guest sign` writes), sorted: the signatures
/// `verify-set` and `verify-attestation evidence --measurements` use when none is named.
pub fn default_signature_paths(set: &Path) -> Result<Vec<PathBuf>, SetError> {
    let dir = match set.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = set
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| invalid(set, "not a file name"))?;
    let prefix = format!("{name}.");
    let entries = std::fs::read_dir(&dir).map_err(|source| SetError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".sig"))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Generates an auditor key pair.
pub fn generate_key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}

/// The PKCS#8 PEM text of a private key.
pub fn private_key_pem(key: &SigningKey) -> Result<String, KeyPemError> {
    key.to_pkcs8_pem(Default::default())
        .map(|z| z.to_string())
        .map_err(|e| KeyPemError(e.to_string()))
}

/// The SubjectPublicKeyInfo PEM text of a public key.
pub fn public_key_pem(key: &VerifyingKey) -> Result<String, KeyPemError> {
    key.to_public_key_pem(Default::default())
        .map_err(|e| KeyPemError(e.to_string()))
}

/// Reads an auditor's private key (PKCS#8 PEM).
pub fn load_private_key(path: &Path) -> Result<SigningKey, SetError> {
    SigningKey::from_pkcs8_pem(&read_text(path)?)
        .map_err(|e| invalid(path, format!("not an Ed25519 PKCS#8 PEM private key: {e}")))
}

/// Reads an auditor's public key (SubjectPublicKeyInfo PEM, as `measure-guest keygen` writes it).
pub fn load_public_key(path: &Path) -> Result<VerifyingKey, SetError> {
    VerifyingKey::from_public_key_pem(read_text(path)?.trim())
        .map_err(|e| invalid(path, format!("not an Ed25519 PEM public key: {e}")))
}

/// A set whose signatures were checked: at least k distinct trusted auditors signed it.
#[derive(Debug, Clone)]
pub struct TrustedSet {
    /// The set.
    pub set: MeasurementSet,
    /// Where it was read from.
    pub path: PathBuf,
    /// The founder's name of each trusted key that made a valid signature (its key file's path with
    /// [`TrustedSet::load`]; never the signature file's unsigned `auditor` field), and the key as hex.
    pub signers: Vec<(String, String)>,
    /// Signatures that did not count, with the reason (the set may still have enough).
    pub problems: Vec<String>,
}

/// A measurement that is in no entry of the set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("measurement {measurement} is not in measurement set {set_name}; nearest entry: {nearest}")]
pub struct NotInSet {
    /// "name version (path)".
    pub set_name: String,
    /// The measurement looked up (hex).
    pub measurement: String,
    /// The parameters of the nearest entry, or why there is none.
    pub nearest: String,
}

impl fmt::Display for SnpEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "snp vcpus={} vcpu_type={} vcpu_sig={:#x} vmm={} guest_features={:#x} policy={:#x} measurement={}",
            self.vcpus,
            self.vcpu_type.as_deref().unwrap_or("-"),
            self.vcpu_sig.0,
            self.vmm,
            self.guest_features.0,
            self.policy.0,
            self.measurement
        )
    }
}

fn hex_label(fingerprint: &[u8; 32]) -> String {
    hex::encode(&fingerprint[..8])
}

impl TrustedSet {
    /// Loads a set and its signature files and accepts it only if at least `k` (>= 1) distinct keys among
    /// `trusted_auditor_keys` (PEM public key files) made valid signatures over it.
    pub fn load<P: AsRef<Path>, Q: AsRef<Path>>(
        set_path: &Path,
        signature_paths: &[P],
        trusted_auditor_keys: &[Q],
        k: usize,
    ) -> Result<Self, SetError> {
        let set = MeasurementSet::load(set_path)?;
        let keys = trusted_auditor_keys
            .iter()
            .map(|p| {
                let p = p.as_ref();
                load_public_key(p).map(|k| (p.display().to_string(), k))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut sigs = Vec::new();
        let mut problems = Vec::new();
        for p in signature_paths {
            let p = p.as_ref();
            match read_text(p).and_then(|t| SignatureFile::from_toml(&t, p)) {
                Ok(s) => sigs.push((p.display().to_string(), s)),
                Err(e) => problems.push(format!("{e}")),
            }
        }
        Self::from_named_parts(set, set_path, &sigs, &keys, k, problems)
    }

    /// As [`Self::load`], from parsed parts; `problems` are prior ones (unreadable signature files) to report.
    /// Each trusted key is named `key <first 8 bytes hex>`; see [`Self::from_named_parts`].
    pub fn from_parts(
        set: MeasurementSet,
        set_path: &Path,
        signatures: &[(String, SignatureFile)],
        trusted: &[VerifyingKey],
        k: usize,
        problems: Vec<String>,
    ) -> Result<Self, SetError> {
        let named: Vec<(String, VerifyingKey)> = trusted
            .iter()
            .map(|t| (format!("key {}", hex_label(&t.to_bytes())), *t))
            .collect();
        Self::from_named_parts(set, set_path, signatures, &named, k, problems)
    }

    /// As [`Self::from_parts`], with the founder's own name for each trusted key (the key file's path in
    /// [`Self::load`]). A signer is always named by this name, never by the signature file's unsigned
    /// `auditor` field, which anyone can write.
    pub fn from_named_parts(
        set: MeasurementSet,
        set_path: &Path,
        signatures: &[(String, SignatureFile)],
        trusted: &[(String, VerifyingKey)],
        k: usize,
        mut problems: Vec<String>,
    ) -> Result<Self, SetError> {
        let label = format!("{} ({})", set.label(), set_path.display());
        if k == 0 {
            return Err(invalid(
                set_path,
                "auditors required (k) must be at least 1",
            ));
        }
        let mut signers: Vec<(String, String)> = Vec::new();
        let mut signed_keys: Vec<[u8; 32]> = Vec::new();
        for (name, s) in signatures {
            let kb = s.public_key.0;
            let Some((key_name, _)) = trusted.iter().find(|(_, t)| t.to_bytes() == kb) else {
                problems.push(format!(
                    "{name}: signed by untrusted key {} (the file's unsigned auditor field says {:?})",
                    hex_label(&kb),
                    s.auditor
                ));
                continue;
            };
            match s.verify(&set) {
                Ok(_) if signed_keys.contains(&kb) => problems.push(format!(
                    "{name}: second signature by key {} counts once",
                    hex_label(&kb)
                )),
                Ok(_) => {
                    signed_keys.push(kb);
                    signers.push((key_name.clone(), hex::encode(kb)));
                }
                Err(why) => problems.push(format!(
                    "{name}: {why} (trusted key {key_name}, {})",
                    hex_label(&kb)
                )),
            }
        }
        if signers.len() < k {
            for (key_name, t) in trusted {
                if !signed_keys.contains(&t.to_bytes()) {
                    problems.push(format!(
                        "trusted key {key_name} ({}): no valid signature (missing)",
                        hex_label(&t.to_bytes())
                    ));
                }
            }
            return Err(SetError::NotEnoughAuditors {
                set: label,
                required: k,
                found: signers.len(),
                problems,
            });
        }
        Ok(TrustedSet {
            set,
            path: set_path.to_owned(),
            signers,
            problems,
        })
    }

    /// "name version (path)".
    pub fn name(&self) -> String {
        format!("{} ({})", self.set.label(), self.path.display())
    }

    fn not_in_set(&self, m: &[u8], nearest: String) -> NotInSet {
        NotInSet {
            set_name: self.name(),
            measurement: hex::encode(m),
            nearest,
        }
    }

    /// Refuses the set when the verification time `at_unix` is past its `not_after`, or when it has none (an
    /// old-format set), naming the date and the fix.
    pub fn check_current(&self, at_unix: i64) -> Result<(), SetError> {
        let Some(text) = &self.set.not_after else {
            return Err(SetError::NoExpiry { set: self.name() });
        };
        match self.set.not_after_unix() {
            Some(t) if at_unix <= t => Ok(()),
            _ => Err(SetError::Expired {
                set: self.name(),
                not_after: text.clone(),
                at: format_time(at_unix),
            }),
        }
    }

    /// The identity entries' admitted SNP profile whose computed digest is `measurement` (of an entry that
    /// requires `policy`, when given), as an [`SnpEntry`] naming the profile; or what the entries admit.
    fn match_snp_identity(
        &self,
        measurement: &[u8; 48],
        policy: Option<u64>,
    ) -> Result<SnpEntry, String> {
        let mut tried = Vec::new();
        for (i, e) in self.set.identity.iter().enumerate() {
            let Some(p) = &e.snp else { continue };
            if policy.is_some_and(|want| want != p.policy.0) {
                tried.push(format!(
                    "identity entry {} requires policy {:#x}, the report's is {:#x}",
                    i + 1,
                    p.policy.0,
                    policy.unwrap_or_default()
                ));
                continue;
            }
            match e.find_snp(measurement) {
                Ok(Some(m)) => {
                    let sig = m
                        .vcpu_type
                        .as_deref()
                        .and_then(crate::snp::vcpu_sig_for_type)
                        .map_or(0x600, u64::from);
                    return Ok(SnpEntry {
                        vcpus: m.vcpus,
                        vcpu_type: m.vcpu_type,
                        vcpu_sig: HexU64(sig),
                        vmm: m.vmm.to_string(),
                        guest_features: HexU64(m.guest_features),
                        policy: p.policy,
                        measurement: Hex(*measurement),
                    });
                }
                Ok(None) => tried.push(format!(
                    "identity entry {} ({}): none of its {} launch profiles ({}) gives this digest",
                    i + 1,
                    e.label(),
                    p.count(),
                    p.summary()
                )),
                Err(m) => tried.push(format!("identity entry {}: {m}", i + 1)),
            }
        }
        Err(tried.join("; "))
    }

    fn with_identity_note(&self, nearest: String, identity: String) -> String {
        if identity.is_empty() {
            nearest
        } else {
            format!("{nearest}; {identity}")
        }
    }

    /// The SNP entry with this launch digest (any policy): a digest entry, or an identity entry's admitted
    /// profile whose computed digest it is (returned as an entry naming the profile).
    pub fn match_snp(&self, measurement: &[u8; 48]) -> Result<Cow<'_, SnpEntry>, NotInSet> {
        if let Some(e) = self
            .set
            .snp
            .iter()
            .find(|e| &e.measurement.0 == measurement)
        {
            return Ok(Cow::Borrowed(e));
        }
        let identity = match self.match_snp_identity(measurement, None) {
            Ok(e) => return Ok(Cow::Owned(e)),
            Err(why) => why,
        };
        let nearest = match self.set.snp.first() {
            Some(e) if self.set.snp.len() == 1 => e.to_string(),
            Some(_) => format!(
                "none of its {} SNP entries ({})",
                self.set.snp.len(),
                self.set
                    .snp
                    .iter()
                    .map(|e| format!(
                        "vcpus={} {} {}",
                        e.vcpus,
                        e.vcpu_type.as_deref().unwrap_or("-"),
                        e.vmm
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None if !identity.is_empty() => String::new(),
            None => "the set has no SNP entries".to_owned(),
        };
        let n = self.with_identity_note(nearest, identity);
        Err(self.not_in_set(measurement, n.trim_start_matches("; ").to_owned()))
    }

    /// The SNP entry with this launch digest whose required guest policy is `policy`; a digest that matches
    /// with another policy is named as the nearest entry.
    pub fn match_snp_policy(
        &self,
        measurement: &[u8; 48],
        policy: u64,
    ) -> Result<Cow<'_, SnpEntry>, NotInSet> {
        if let Some(e) = self
            .set
            .snp
            .iter()
            .find(|e| &e.measurement.0 == measurement && e.policy.0 == policy)
        {
            return Ok(Cow::Borrowed(e));
        }
        let identity = match self.match_snp_identity(measurement, Some(policy)) {
            Ok(e) => return Ok(Cow::Owned(e)),
            Err(why) => why,
        };
        match self
            .set
            .snp
            .iter()
            .find(|e| &e.measurement.0 == measurement)
        {
            Some(e) => Err(self.not_in_set(
                measurement,
                format!("{e} (same measurement, but the report's policy is {policy:#x})"),
            )),
            None => match self.match_snp(measurement) {
                // A digest of an identity profile that requires another policy.
                Ok(_) => Err(self.not_in_set(measurement, identity)),
                Err(e) => Err(e),
            },
        }
    }

    /// The TDX entry with this MRTD whose given RTMRs all equal `rtmrs` (of several, the one that lists the
    /// most RTMRs).
    /// An identity entry's TDVF build and image RTMRs that the quote matches are returned as an entry pinning
    /// MRTD, RTMR1 and RTMR2.
    pub fn match_tdx(
        &self,
        mrtd: &[u8; 48],
        rtmrs: &[[u8; 48]; 4],
    ) -> Result<Cow<'_, TdxEntry>, NotInSet> {
        let fits = |e: &TdxEntry| {
            e.rtmrs()
                .iter()
                .zip(rtmrs)
                .all(|(want, got)| want.is_none_or(|w| &w.0 == got))
        };
        // Of the entries that fit, the one that lists the most RTMRs (the most complete pin of the image).
        if let Some(e) = self
            .set
            .tdx
            .iter()
            .filter(|e| &e.mrtd.0 == mrtd && fits(e))
            .max_by_key(|e| e.rtmrs().iter().filter(|r| r.is_some()).count())
        {
            return Ok(Cow::Borrowed(e));
        }
        if self
            .set
            .identity
            .iter()
            .any(|e| e.find_tdx(mrtd, rtmrs).is_some())
        {
            return Ok(Cow::Owned(TdxEntry {
                mrtd: Hex(*mrtd),
                rtmr0: None,
                rtmr1: Some(Hex(rtmrs[1])),
                rtmr2: Some(Hex(rtmrs[2])),
                rtmr3: None,
            }));
        }
        let identity: Vec<String> = self
            .set
            .identity
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let t = e.tdx.as_ref()?;
                let why = match t.firmware.iter().find(|f| &f.mrtd.0 == mrtd) {
                    Some(f) if f.rtmr2.0 != rtmrs[2] => {
                        "its RTMR2 (command line, initramfs) differs"
                    }
                    Some(_) => "its RTMR1 (kernel) differs for every admitted QEMU",
                    None => "no admitted TDVF build has this MRTD",
                };
                Some(format!("identity entry {} ({}): {why}", i + 1, e.label()))
            })
            .collect();
        let nearest = match self.set.tdx.iter().find(|e| &e.mrtd.0 == mrtd) {
            Some(e) => {
                let differ: Vec<String> = e
                    .rtmrs()
                    .iter()
                    .zip(rtmrs)
                    .enumerate()
                    .filter(|(_, (w, g))| w.is_some_and(|w| &w.0 != *g))
                    .map(|(i, _)| format!("RTMR{i}"))
                    .collect();
                format!(
                    "tdx mrtd={} (same MRTD, but {} differ)",
                    e.mrtd,
                    differ.join(", ")
                )
            }
            None => match self.set.tdx.first() {
                Some(e) => format!(
                    "tdx mrtd={} ({} TDX entries, none with this MRTD)",
                    e.mrtd,
                    self.set.tdx.len()
                ),
                None if !identity.is_empty() => String::new(),
                None => "the set has no TDX entries".to_owned(),
            },
        };
        let n = self.with_identity_note(nearest, identity.join("; "));
        Err(self.not_in_set(mrtd, n.trim_start_matches("; ").to_owned()))
    }

    /// The sim entry (any tier) with this measurement.
    pub fn match_sim(&self, measurement: &[u8; 48]) -> Result<&SimEntry, NotInSet> {
        self.match_sim_tier(measurement, None)
    }

    /// The sim entry with this measurement and, when `tier` is given, that tier (`vm` or `process`); an entry
    /// with the same measurement for another tier is named as the nearest.
    pub fn match_sim_tier(
        &self,
        measurement: &[u8; 48],
        tier: Option<&str>,
    ) -> Result<&SimEntry, NotInSet> {
        let same = |e: &&SimEntry| &e.measurement.0 == measurement;
        if let Some(e) = self
            .set
            .sim
            .iter()
            .filter(same)
            .find(|e| tier.is_none_or(|t| e.tier == t))
        {
            return Ok(e);
        }
        let nearest = match (self.set.sim.iter().find(same), self.set.sim.first()) {
            (Some(e), _) => format!(
                "sim tier={} measurement={} (same measurement, but the verdict's tier is {})",
                e.tier,
                e.measurement,
                tier.unwrap_or("-")
            ),
            (None, Some(e)) => format!(
                "sim tier={} measurement={} ({} sim entries)",
                e.tier,
                e.measurement,
                self.set.sim.len()
            ),
            (None, None) => "the set has no sim entries".to_owned(),
        };
        Err(self.not_in_set(measurement, nearest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> MeasurementSet {
        MeasurementSet {
            format: SET_FORMAT.into(),
            not_after: Some("2030-01-31T00:00:00Z".into()),
            release: Release {
                name: "fenced-run-guest".into(),
                version: "1.0.0".into(),
            },
            artifacts: Artifacts {
                kernel_sha256: Some(Hex([1; 32])),
                initramfs_sha256: Some(Hex([2; 32])),
                cmdline: Some("console=ttyS0 \"quoted\"".into()),
                cmdline_sha256: Some(Hex(crate::sim::cmdline_sha256("console=ttyS0 \"quoted\""))),
                ovmf_sha256: Some(Hex([3; 32])),
                tdvf_sha256: None,
            },
            snp: vec![
                SnpEntry {
                    vcpus: 1,
                    vcpu_type: Some("EPYC-Milan".into()),
                    vcpu_sig: HexU64(0xa00f11),
                    vmm: "QEMU".into(),
                    guest_features: HexU64(1),
                    policy: HexU64(0x30000),
                    measurement: Hex([0xaa; 48]),
                },
                SnpEntry {
                    vcpus: 4,
                    vcpu_type: Some("EPYC-Genoa".into()),
                    vcpu_sig: HexU64(0xa10f10),
                    vmm: "QEMU".into(),
                    guest_features: HexU64(0x21),
                    policy: HexU64(0x30000),
                    measurement: Hex([0xbb; 48]),
                },
            ],
            tdx: vec![TdxEntry {
                mrtd: Hex([0xcc; 48]),
                rtmr0: Some(Hex([0xdd; 48])),
                rtmr1: None,
                rtmr2: None,
                rtmr3: None,
            }],
            sim: vec![SimEntry {
                tier: "vm".into(),
                measurement: Hex([0xee; 48]),
                binary_sha256: None,
            }],
            identity: Vec::new(),
        }
    }

    /// [`sample`] with an identity entry admitting SNP and TDX launches.
    fn sample_with_identity() -> MeasurementSet {
        use crate::identity::*;
        let mut s = sample();
        s.identity.push(IdentityEntry {
            kernel_sha256: Hex([1; 32]),
            initramfs_sha256: Hex([2; 32]),
            cmdline_sha256: Hex(crate::sim::cmdline_sha256("console=ttyS0 \"quoted\"")),
            cmdline: Some("console=ttyS0 \"quoted\"".into()),
            toolchain_root_hash: None,
            snp: Some(SnpProfiles {
                vcpus: vec![
                    VcpuRange { first: 1, last: 16 },
                    VcpuRange {
                        first: 32,
                        last: 32,
                    },
                ],
                vcpu_types: vec!["EPYC-Milan".into()],
                vmm: vec!["QEMU".into(), "ec2".into()],
                guest_features: vec![HexU64(1), HexU64(0x21)],
                policy: HexU64(0x30000),
                ovmf: vec![SnpFirmware {
                    ovmf_sha256: Hex([3; 32]),
                    ovmf_hash: Hex([4; 48]),
                    sev_es_reset_eip: HexU64(0x80b004),
                    sev_hashes_table: HexU64(0x810c00),
                    sections: vec![
                        FirmwareSection {
                            kind: "SNP_SEC_MEM".into(),
                            gpa: HexU64(0x800000),
                            size: HexU64(0x9000),
                        },
                        FirmwareSection {
                            kind: "SNP_KERNEL_HASHES".into(),
                            gpa: HexU64(0x810000),
                            size: HexU64(0x1000),
                        },
                    ],
                }],
            }),
            tdx: Some(TdxProfiles {
                firmware: vec![TdxFirmware {
                    ovmf_sha256: Hex([5; 32]),
                    mrtd: Hex([6; 48]),
                    rtmr1: Hex([7; 48]),
                    rtmr1_qemu_10_1: None,
                    rtmr2: Hex([8; 48]),
                }],
            }),
        });
        s
    }

    #[test]
    fn identity_entries_round_trip_and_are_signed() {
        let s = sample_with_identity();
        let text = s.to_toml();
        let back = MeasurementSet::from_toml(&text, Path::new("set.toml")).expect("parse");
        assert_eq!(back, s);
        let c = s.canonical_json();
        assert!(c.contains(r#""vcpus":["1-16","32"]"#), "{c}");
        // Widening the admitted vCPU range after signing breaks the signature.
        let a = generate_key();
        let sig = SignatureFile::sign(&s, &a, "a");
        let edited = MeasurementSet::from_toml(
            &text.replace("vcpus = [\"1-16\", \"32\"]", "vcpus = [\"1-64\"]"),
            Path::new("set.toml"),
        )
        .expect("edited parses");
        assert!(matches!(
            sig.verify(&edited),
            Err(SignatureError::OtherSet { .. })
        ));
        // An identity entry is refused in an old-format set.
        let e = MeasurementSet::from_toml(
            &text
                .replace(SET_FORMAT, SET_FORMAT_V1)
                .replace("not_after = \"2030-01-31T00:00:00Z\"", ""),
            Path::new("set.toml"),
        )
        .expect_err("v1 with identity");
        assert!(e.to_string().contains("needs new signatures"), "{e}");
    }

    #[test]
    fn toml_round_trips_and_canonical_form_is_stable() {
        let s = sample();
        let text = s.to_toml();
        assert!(text.contains("# SEV-SNP launch digests"), "{text}");
        let back = MeasurementSet::from_toml(&text, Path::new("set.toml")).expect("parse");
        assert_eq!(back, s);
        // Reordering keys, upper-case hex and integer forms do not change the canonical encoding.
        let edited = text
            .replace("policy = \"0x30000\"", "policy = 196608")
            .replace(&"aa".repeat(48), &"AA".repeat(48));
        let back2 =
            MeasurementSet::from_toml(&edited, Path::new("set.toml")).expect("parse edited");
        assert_eq!(back2.canonical_json(), s.canonical_json());
        let c = s.canonical_json();
        assert!(c.starts_with("{\"artifacts\":{\"cmdline\":"), "{c}");
        assert!(c.contains(r#""policy":"0x30000","vcpu_sig":"0xa00f11","vcpu_type":"EPYC-Milan","vcpus":1,"vmm":"QEMU"}"#), "{c}");
        assert!(
            !c.contains("null") && !c.contains("tdvf_sha256") && !c.contains("rtmr1"),
            "absent fields: {c}"
        );
        let at = |k: &str| c.find(k).expect("key present");
        assert!(
            at("\"release\"") < at("\"sim\"")
                && at("\"sim\"") < at("\"snp\"")
                && at("\"snp\"") < at("\"tdx\"")
        );
    }

    #[test]
    fn inconsistent_sets_are_refused_with_the_reason() {
        let mut s = sample();
        s.artifacts.cmdline = Some("other".into());
        let e =
            MeasurementSet::from_toml(&s.to_toml(), Path::new("x.toml")).expect_err("cmdline hash");
        assert!(
            e.to_string()
                .starts_with("x.toml: artifacts.cmdline_sha256"),
            "{e}"
        );
        let mut s = sample();
        s.snp[0].vcpu_sig = HexU64(0x800f12);
        let e = MeasurementSet::from_toml(&s.to_toml(), Path::new("x.toml")).expect_err("sig");
        assert!(
            e.to_string().contains(
                "snp entry 1: vcpu_sig 0x800f12 is not the signature 0xa00f11 of EPYC-Milan"
            ),
            "{e}"
        );
        let e = MeasurementSet::from_toml("format = \"x\"\nbogus = 1\n", Path::new("x.toml"))
            .expect_err("unknown");
        assert!(e.to_string().starts_with("x.toml: "), "{e}");
    }

    fn sigs(set: &MeasurementSet, keys: &[&SigningKey]) -> Vec<(String, SignatureFile)> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| {
                (
                    format!("sig{i}"),
                    SignatureFile::sign(set, k, &format!("auditor{i}")),
                )
            })
            .collect()
    }

    #[test]
    fn k_of_n_counts_distinct_valid_trusted_signatures() {
        let set = sample();
        let (a, b, c) = (generate_key(), generate_key(), generate_key());
        let trusted = [a.verifying_key(), b.verifying_key()];
        let p = Path::new("set.toml");
        // Two trusted signers: k=2 accepted.
        let ok =
            TrustedSet::from_parts(set.clone(), p, &sigs(&set, &[&a, &b]), &trusted, 2, vec![])
                .expect("2 of 2");
        assert_eq!(ok.signers.len(), 2);
        // The same key twice counts once; an untrusted key does not count.
        let e = TrustedSet::from_parts(
            set.clone(),
            p,
            &sigs(&set, &[&a, &a, &c]),
            &trusted,
            2,
            vec![],
        )
        .expect_err("1 of 2");
        let msg = e.to_string();
        assert!(msg.contains("1 of 2 required"), "{msg}");
        assert!(msg.contains("sig1: second signature"), "{msg}");
        assert!(msg.contains("sig2: signed by untrusted key"), "{msg}");
        assert!(msg.contains("no valid signature (missing)"), "{msg}");
        // A signature over another set is named as such; a forged one as invalid.
        let mut other = set.clone();
        other.release.version = "1.0.1".into();
        let mut forged = sigs(&set, &[&b]);
        forged[0].1.signature.0[0] ^= 1;
        let mut all = sigs(&other, &[&a]);
        all.extend(forged);
        let e =
            TrustedSet::from_parts(set.clone(), p, &all, &trusted, 1, vec![]).expect_err("none");
        let msg = e.to_string();
        assert!(msg.contains("signed a different set"), "{msg}");
        assert!(msg.contains("signature is invalid"), "{msg}");
        assert!(TrustedSet::from_parts(set.clone(), p, &[], &trusted, 0, vec![]).is_err());
    }

    #[test]
    fn matching_names_set_and_nearest_entry() {
        let set = sample();
        let a = generate_key();
        let t = TrustedSet::from_parts(
            set.clone(),
            Path::new("s.toml"),
            &sigs(&set, &[&a]),
            &[a.verifying_key()],
            1,
            vec![],
        )
        .expect("trusted");
        assert_eq!(t.match_snp(&[0xbb; 48]).expect("in set").vcpus, 4);
        assert!(t.match_snp_policy(&[0xaa; 48], 0x30000).is_ok());
        let e = t
            .match_snp_policy(&[0xaa; 48], 0x10000)
            .expect_err("policy");
        assert!(
            e.to_string().contains("fenced-run-guest 1.0.0 (s.toml)"),
            "{e}"
        );
        assert!(
            e.nearest.contains("vcpus=1 vcpu_type=EPYC-Milan")
                && e.nearest.contains("policy is 0x10000"),
            "{e}"
        );
        let e = t.match_snp(&[0x11; 48]).expect_err("absent");
        assert!(e.nearest.contains("none of its 2 SNP entries"), "{e}");
        let mut rt = [[0u8; 48]; 4];
        rt[0] = [0xdd; 48];
        assert!(t.match_tdx(&[0xcc; 48], &rt).is_ok());
        rt[0][0] = 0;
        let e = t.match_tdx(&[0xcc; 48], &rt).expect_err("rtmr0");
        assert!(e.nearest.contains("RTMR0 differ"), "{e}");
        assert!(t.match_sim(&[0xee; 48]).is_ok());
        assert!(t.match_sim(&[0xef; 48]).is_err());
    }

    fn trusted(set: &MeasurementSet) -> TrustedSet {
        let a = generate_key();
        TrustedSet::from_parts(
            set.clone(),
            Path::new("s.toml"),
            &sigs(set, &[&a]),
            &[a.verifying_key()],
            1,
            vec![],
        )
        .expect("trusted")
    }

    #[test]
    fn not_after_is_required_signed_and_enforced() {
        let s = sample();
        let text = s.to_toml();
        assert!(
            text.contains("not_after = \"2030-01-31T00:00:00Z\""),
            "{text}"
        );
        assert!(s
            .canonical_json()
            .contains(r#""not_after":"2030-01-31T00:00:00Z""#));
        // Required in the current format, and must be RFC 3339.
        let e = MeasurementSet::from_toml(
            &text.replace("not_after = \"2030-01-31T00:00:00Z\"\n", ""),
            Path::new("x.toml"),
        )
        .expect_err("no not_after");
        assert!(e.to_string().contains("not_after is missing"), "{e}");
        let e = MeasurementSet::from_toml(
            &text.replace("2030-01-31T00:00:00Z", "next year"),
            Path::new("x.toml"),
        )
        .expect_err("not a date");
        assert!(
            e.to_string()
                .contains("not_after \"next year\": not an RFC 3339 date-time"),
            "{e}"
        );
        // Before, at and after not_after.
        let t = trusted(&s);
        let at = parse_time("2030-01-31T00:00:00Z")
            .expect("time")
            .unix_timestamp();
        assert!(t.check_current(at - 1).is_ok());
        assert!(t.check_current(at).is_ok());
        let e = t.check_current(at + 1).expect_err("expired");
        assert!(matches!(e, SetError::Expired { .. }), "{e}");
        assert!(
            e.to_string().contains("expired: its not_after is 2030-01-31T00:00:00Z, the verification time is 2030-01-31T00:00:01Z"),
            "{e}"
        );
        // Moving not_after after signing breaks every signature.
        let a = generate_key();
        let sig = SignatureFile::sign(&s, &a, "a");
        let mut later = s.clone();
        later.not_after = Some("2031-01-31T00:00:00Z".into());
        assert!(matches!(
            sig.verify(&later),
            Err(SignatureError::OtherSet { .. })
        ));
        assert!(sig.verify(&s).is_ok());
    }

    #[test]
    fn an_old_format_set_parses_but_is_refused_naming_the_fix() {
        let mut s = sample();
        s.format = SET_FORMAT_V1.into();
        s.not_after = None;
        let back =
            MeasurementSet::from_toml(&s.to_toml(), Path::new("old.toml")).expect("v1 parses");
        assert_eq!(back, s);
        // The canonical form of a v1 set is as before (no not_after, no identity key), so its old
        // signatures still verify and the refusal below is about the expiry, not a signature mismatch.
        let c = s.canonical_json();
        assert!(!c.contains("not_after") && !c.contains("identity"), "{c}");
        let e = trusted(&s).check_current(0).expect_err("no expiry");
        assert!(matches!(e, SetError::NoExpiry { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("measure-guest renew --set SET --valid-days N"),
            "{e}"
        );
        // A v1 set cannot carry the new fields.
        s.not_after = Some("2030-01-31T00:00:00Z".into());
        let e = MeasurementSet::from_toml(&s.to_toml(), Path::new("old.toml"))
            .expect_err("v1 with not_after");
        assert!(e.to_string().contains("needs new signatures"), "{e}");
    }

    #[test]
    fn keys_round_trip_through_pem_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let k = generate_key();
        let (kp, pp) = (dir.path().join("a.key"), dir.path().join("a.pub"));
        std::fs::write(&kp, private_key_pem(&k).expect("pem")).expect("write");
        std::fs::write(&pp, public_key_pem(&k.verifying_key()).expect("pem")).expect("write");
        assert_eq!(load_private_key(&kp).expect("key").to_bytes(), k.to_bytes());
        assert_eq!(load_public_key(&pp).expect("pub"), k.verifying_key());
        let e = load_public_key(&kp).expect_err("private key is not a public key");
        assert!(
            e.to_string()
                .contains("a.key: not an Ed25519 PEM public key"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "[a-z_=\\[\\]\"0-9x. \n#]{0,300}") {
            let _ = MeasurementSet::from_toml(&text, Path::new("p.toml"));
            let _ = SignatureFile::from_toml(&text, Path::new("p.sig"));
        }

        #[test]
        fn edited_valid_sets_never_panic(pos in 0usize..6000, byte in proptest::num::u8::ANY) {
            let mut b = sample_with_identity().to_toml().into_bytes();
            if pos < b.len() { b[pos] = byte; }
            if let Ok(t) = String::from_utf8(b) {
                if let Ok(s) = MeasurementSet::from_toml(&t, Path::new("p.toml")) {
                    let _ = s.canonical_json();
                }
            }
        }
    }

    #[test]
    fn trusted_set_load_reads_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let set = sample();
        let sp = dir.path().join("set.toml");
        std::fs::write(&sp, set.to_toml()).expect("write");
        let k = generate_key();
        let kp = dir.path().join("a.pub");
        std::fs::write(&kp, public_key_pem(&k.verifying_key()).expect("pem")).expect("write");
        let sig = dir.path().join("set.toml.a.sig");
        let reparsed = MeasurementSet::load(&sp).expect("load");
        std::fs::write(&sig, SignatureFile::sign(&reparsed, &k, "a").to_toml()).expect("write");
        let garbage = dir.path().join("garbage.sig");
        std::fs::write(&garbage, "not toml [").expect("write");
        let t = TrustedSet::load(&sp, &[&sig, &garbage], &[&kp], 1).expect("1 of 1");
        // Named by the founder's key file, not by the signature's unsigned `auditor` field ("a").
        assert_eq!(t.signers[0].0, kp.display().to_string());
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        let e = TrustedSet::load(&sp, &[&garbage], &[&kp], 1).expect_err("0 of 1");
        assert!(e.to_string().contains("garbage.sig"), "{e}");
    }
}
