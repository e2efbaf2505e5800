//! The 1184-byte ATTESTATION_REPORT as typed fields, parsed from and written back to its exact bytes.
//!
//! Offsets follow the AMD SEV-SNP ABI specification; fields are read in order with `attestation::wire::Reader`.
//! Reserved ranges must be zero (the error names the range),
//! and fields that only exist in later versions (CPUID in v3, mitigation vectors in v5) are `Option`s.

use super::tcb::{Product, TcbVersion};
use crate::wire::{Reader, WireError};
use serde::{Serialize, Serializer};
use std::fmt;

/// Size of an ATTESTATION_REPORT in bytes.
pub const REPORT_LEN: usize = 0x4A0;
/// Length of the signed part of the report (bytes 0x000..0x29F).
pub const SIGNED_LEN: usize = 0x2A0;
/// Report versions this parser accepts.
pub const SUPPORTED_VERSIONS: [u32; 3] = [2, 3, 5];
/// SIGNATURE_ALGO value for ECDSA P-384 with SHA-384, the only algorithm AMD defines.
pub const SIGNATURE_ALGO_ECDSA_P384_SHA384: u32 = 1;

/// Why bytes are not a well-formed ATTESTATION_REPORT.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The input does not have the fixed report size.
    #[error("attestation report is {len} bytes, expected exactly {REPORT_LEN}")]
    WrongLength {
        /// The length seen.
        len: usize,
    },
    /// The VERSION field (offset 0x000) names a layout this parser does not know.
    #[error("attestation report version {version} at offset 0x000 is not supported (supported: 2, 3, 5)")]
    UnsupportedVersion {
        /// The version seen.
        version: u32,
    },
    /// A reserved range holds a non-zero byte.
    #[error("must-be-zero bytes 0x{start:03X}..0x{end:03X} ({what}) are not zero (first non-zero at 0x{first:03X})")]
    NonZeroReserved {
        /// First offset of the range.
        start: usize,
        /// One past the last offset of the range.
        end: usize,
        /// Offset of the first non-zero byte.
        first: usize,
        /// What the range is.
        what: &'static str,
    },
    /// The byte reader failed otherwise (after the length check it cannot; kept so that no read panics).
    #[error("{0}")]
    Wire(WireError),
    /// KEY_INFO (offset 0x048) has a reserved signing-key value or reserved bits set.
    #[error("KEY_INFO at offset 0x048 is 0x{value:08x}: {why}")]
    BadKeyInfo {
        /// The raw KEY_INFO value.
        value: u32,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// GUEST_POLICY (offset 0x008): the policy the guest owner launched with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuestPolicy(pub u64);

impl GuestPolicy {
    /// Minimum ABI minor version (bits 7:0).
    pub fn abi_minor(self) -> u8 {
        (self.0 & 0xFF) as u8
    }
    /// Minimum ABI major version (bits 15:8).
    pub fn abi_major(self) -> u8 {
        ((self.0 >> 8) & 0xFF) as u8
    }
    /// SMT allowed (bit 16).
    pub fn smt_allowed(self) -> bool {
        self.bit(16)
    }
    /// Reserved bit 17, which must be one.
    pub fn reserved_one(self) -> bool {
        self.bit(17)
    }
    /// Association with a migration agent allowed (bit 18).
    pub fn migrate_ma_allowed(self) -> bool {
        self.bit(18)
    }
    /// Debugging allowed (bit 19).
    pub fn debug_allowed(self) -> bool {
        self.bit(19)
    }
    /// Guest restricted to a single socket (bit 20).
    pub fn single_socket(self) -> bool {
        self.bit(20)
    }
    /// CXL may be populated with guest memory (bit 21).
    pub fn cxl_allowed(self) -> bool {
        self.bit(21)
    }
    /// AES-256-XTS required for memory encryption (bit 22).
    pub fn mem_aes_256_xts(self) -> bool {
        self.bit(22)
    }
    /// Running with RAPL disabled required (bit 23).
    pub fn rapl_dis(self) -> bool {
        self.bit(23)
    }
    /// Ciphertext hiding required (bit 24).
    pub fn ciphertext_hiding(self) -> bool {
        self.bit(24)
    }
    /// Page swap commands disabled (bit 25).
    pub fn page_swap_disable(self) -> bool {
        self.bit(25)
    }
    fn bit(self, n: u32) -> bool {
        (self.0 >> n) & 1 == 1
    }
}

impl Serialize for GuestPolicy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Decoded {
            raw: String,
            abi_major: u8,
            abi_minor: u8,
            smt: bool,
            migrate_ma: bool,
            debug: bool,
            single_socket: bool,
            cxl_allowed: bool,
            mem_aes_256_xts: bool,
            rapl_dis: bool,
            ciphertext_hiding: bool,
            page_swap_disable: bool,
        }
        Decoded {
            raw: format!("0x{:016x}", self.0),
            abi_major: self.abi_major(),
            abi_minor: self.abi_minor(),
            smt: self.smt_allowed(),
            migrate_ma: self.migrate_ma_allowed(),
            debug: self.debug_allowed(),
            single_socket: self.single_socket(),
            cxl_allowed: self.cxl_allowed(),
            mem_aes_256_xts: self.mem_aes_256_xts(),
            rapl_dis: self.rapl_dis(),
            ciphertext_hiding: self.ciphertext_hiding(),
            page_swap_disable: self.page_swap_disable(),
        }
        .serialize(s)
    }
}

/// PLATFORM_INFO (offset 0x040): platform state when the report was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PlatformInfo(pub u64);

impl PlatformInfo {
    /// SMT enabled on the host (bit 0).
    pub fn smt_enabled(self) -> bool {
        self.0 & 1 == 1
    }
    /// Transparent SME enabled (bit 1).
    pub fn tsme_enabled(self) -> bool {
        (self.0 >> 1) & 1 == 1
    }
    /// ECC memory in use (bit 2).
    pub fn ecc_enabled(self) -> bool {
        (self.0 >> 2) & 1 == 1
    }
    /// RAPL disabled (bit 3).
    pub fn rapl_disabled(self) -> bool {
        (self.0 >> 3) & 1 == 1
    }
    /// Ciphertext hiding enabled for DRAM (bit 4).
    pub fn ciphertext_hiding_enabled(self) -> bool {
        (self.0 >> 4) & 1 == 1
    }
    /// Memory alias check completed (bit 5).
    pub fn alias_check_complete(self) -> bool {
        (self.0 >> 5) & 1 == 1
    }
    /// SEV-TIO enabled (bit 7).
    pub fn tio_enabled(self) -> bool {
        (self.0 >> 7) & 1 == 1
    }
}

impl Serialize for PlatformInfo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Decoded {
            raw: String,
            smt_enabled: bool,
            tsme_enabled: bool,
            ecc_enabled: bool,
            rapl_disabled: bool,
            ciphertext_hiding_enabled: bool,
            alias_check_complete: bool,
            tio_enabled: bool,
        }
        Decoded {
            raw: format!("0x{:016x}", self.0),
            smt_enabled: self.smt_enabled(),
            tsme_enabled: self.tsme_enabled(),
            ecc_enabled: self.ecc_enabled(),
            rapl_disabled: self.rapl_disabled(),
            ciphertext_hiding_enabled: self.ciphertext_hiding_enabled(),
            alias_check_complete: self.alias_check_complete(),
            tio_enabled: self.tio_enabled(),
        }
        .serialize(s)
    }
}

/// Which key signed the report (KEY_INFO bits 4:2).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum SigningKey {
    /// Versioned Chip Endorsement Key (value 0).
    #[serde(rename = "VCEK")]
    Vcek,
    /// Versioned Loaded Endorsement Key, provisioned by a cloud provider (value 1).
    #[serde(rename = "VLEK")]
    Vlek,
    /// The report is not signed (value 7).
    #[serde(rename = "none")]
    None,
}

impl SigningKey {
    /// The 3-bit KEY_INFO encoding.
    pub fn bits(self) -> u32 {
        match self {
            SigningKey::Vcek => 0,
            SigningKey::Vlek => 1,
            SigningKey::None => 7,
        }
    }
    /// The short name (`VCEK`, `VLEK`, `none`).
    pub fn name(self) -> &'static str {
        match self {
            SigningKey::Vcek => "VCEK",
            SigningKey::Vlek => "VLEK",
            SigningKey::None => "none",
        }
    }
}

impl fmt::Display for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// KEY_INFO (offset 0x048): signing key and key-related flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct KeyInfo {
    /// The key that signed the report.
    pub signing_key: SigningKey,
    /// MASK_CHIP_KEY (bit 1): the chip key was masked, so CHIP_ID carries no chip identity.
    pub mask_chip_key: bool,
    /// AUTHOR_KEY_EN (bit 0): AUTHOR_KEY_DIGEST is present.
    pub author_key_en: bool,
}

impl Default for KeyInfo {
    fn default() -> Self {
        KeyInfo {
            signing_key: SigningKey::Vcek,
            mask_chip_key: false,
            author_key_en: false,
        }
    }
}

impl KeyInfo {
    /// Decodes the raw field; reserved signing-key values and reserved bits are errors.
    pub fn from_u32(value: u32) -> Result<KeyInfo, ReportError> {
        if value >> 5 != 0 {
            return Err(ReportError::BadKeyInfo {
                value,
                why: "reserved bits 31:5 are set",
            });
        }
        let signing_key = match (value >> 2) & 0b111 {
            0 => SigningKey::Vcek,
            1 => SigningKey::Vlek,
            7 => SigningKey::None,
            _ => {
                return Err(ReportError::BadKeyInfo {
                    value,
                    why: "SIGNING_KEY is a reserved value",
                })
            }
        };
        Ok(KeyInfo {
            signing_key,
            mask_chip_key: value & 0b10 != 0,
            author_key_en: value & 1 != 0,
        })
    }

    /// The raw field.
    pub fn to_u32(self) -> u32 {
        (self.signing_key.bits() << 2)
            | (u32::from(self.mask_chip_key) << 1)
            | u32::from(self.author_key_en)
    }
}

/// CPUID family, model and stepping of the chip (report version 3 and later).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Cpuid {
    /// Combined family (CPUID_FAM_ID, offset 0x188), e.g. 0x19.
    pub family: u8,
    /// Combined model (CPUID_MOD_ID, offset 0x189).
    pub model: u8,
    /// Stepping (CPUID_STEP, offset 0x18A).
    pub stepping: u8,
}

/// A SEV-SNP firmware version (major.minor.build).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FirmwareVersion {
    /// Major version.
    pub major: u8,
    /// Minor version.
    pub minor: u8,
    /// Build number.
    pub build: u8,
}

impl fmt::Display for FirmwareVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.build)
    }
}

impl Serialize for FirmwareVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The report signature: R and S as 72-byte little-endian fields (offsets 0x2A0 and 0x2E8).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature {
    /// R, little-endian, zero-padded to 72 bytes.
    pub r: [u8; 72],
    /// S, little-endian, zero-padded to 72 bytes.
    pub s: [u8; 72],
}

impl Default for Signature {
    fn default() -> Self {
        Signature {
            r: [0; 72],
            s: [0; 72],
        }
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signature")
            .field("r", &hex::encode(self.r))
            .field("s", &hex::encode(self.s))
            .finish()
    }
}

impl Signature {
    /// Builds the field from big-endian 48-byte P-384 scalars (as ECDSA libraries produce them).
    pub fn from_p384_be(r: &[u8; 48], s: &[u8; 48]) -> Signature {
        let mut sig = Signature::default();
        for i in 0..48 {
            sig.r[i] = r[47 - i];
            sig.s[i] = s[47 - i];
        }
        sig
    }

    /// R as a big-endian 48-byte scalar (the low 48 bytes of the field).
    pub fn r_be(&self) -> [u8; 48] {
        be48(&self.r)
    }

    /// S as a big-endian 48-byte scalar (the low 48 bytes of the field).
    pub fn s_be(&self) -> [u8; 48] {
        be48(&self.s)
    }

    /// Whether the 24 high bytes of R and S, which a P-384 scalar never uses, are zero.
    pub fn padding_is_zero(&self) -> bool {
        self.r[48..]
            .iter()
            .chain(self.s[48..].iter())
            .all(|&b| b == 0)
    }
}

fn be48(le: &[u8; 72]) -> [u8; 48] {
    let mut out = [0u8; 48];
    for i in 0..48 {
        out[i] = le[47 - i];
    }
    out
}

fn ser_sig<S: Serializer>(v: &Signature, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Rs {
        r: String,
        s: String,
    }
    Rs {
        r: hex::encode(v.r_be()),
        s: hex::encode(v.s_be()),
    }
    .serialize(s)
}

/// A parsed SEV-SNP ATTESTATION_REPORT. Every field is public so that a report can be built field by field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttestationReport {
    /// VERSION (0x000): 2, 3 or 5.
    pub version: u32,
    /// GUEST_SVN (0x004).
    pub guest_svn: u32,
    /// POLICY (0x008).
    pub policy: GuestPolicy,
    /// FAMILY_ID (0x010).
    #[serde(serialize_with = "crate::hex::serialize")]
    pub family_id: [u8; 16],
    /// IMAGE_ID (0x020).
    #[serde(serialize_with = "crate::hex::serialize")]
    pub image_id: [u8; 16],
    /// VMPL (0x030) of the request.
    pub vmpl: u32,
    /// SIGNATURE_ALGO (0x034); 1 is ECDSA P-384 with SHA-384.
    pub signature_algo: u32,
    /// CURRENT_TCB (0x038).
    pub current_tcb: TcbVersion,
    /// PLATFORM_INFO (0x040).
    pub platform_info: PlatformInfo,
    /// KEY_INFO (0x048).
    pub key_info: KeyInfo,
    /// REPORT_DATA (0x050), chosen by the guest.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub report_data: [u8; 64],
    /// MEASUREMENT (0x090), the launch digest.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub measurement: [u8; 48],
    /// HOST_DATA (0x0C0), chosen by the host at launch.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub host_data: [u8; 32],
    /// ID_KEY_DIGEST (0x0E0): SHA-384 of the ID key that signed the ID block.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub id_key_digest: [u8; 48],
    /// AUTHOR_KEY_DIGEST (0x110): SHA-384 of the author key that signed the ID key.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub author_key_digest: [u8; 48],
    /// REPORT_ID (0x140).
    #[serde(serialize_with = "crate::hex::serialize")]
    pub report_id: [u8; 32],
    /// REPORT_ID_MA (0x160), the migration agent's report ID.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub report_id_ma: [u8; 32],
    /// REPORTED_TCB (0x180), the TCB the VCEK was derived from.
    pub reported_tcb: TcbVersion,
    /// CPUID_FAM_ID/MOD_ID/STEP (0x188..0x18A), version 3 and later.
    pub cpuid: Option<Cpuid>,
    /// CHIP_ID (0x1A0); zero when masked or signed by a VLEK.
    #[serde(serialize_with = "crate::hex::serialize")]
    pub chip_id: [u8; 64],
    /// COMMITTED_TCB (0x1E0).
    pub committed_tcb: TcbVersion,
    /// CURRENT_BUILD/MINOR/MAJOR (0x1E8..0x1EA).
    pub current_fw: FirmwareVersion,
    /// COMMITTED_BUILD/MINOR/MAJOR (0x1EC..0x1EE).
    pub committed_fw: FirmwareVersion,
    /// LAUNCH_TCB (0x1F0).
    pub launch_tcb: TcbVersion,
    /// LAUNCH_MIT_VECTOR (0x1F8), version 5 and later.
    pub launch_mit_vector: Option<u64>,
    /// CURRENT_MIT_VECTOR (0x200), version 5 and later.
    pub current_mit_vector: Option<u64>,
    /// SIGNATURE (0x2A0), over bytes 0x000..0x29F.
    #[serde(serialize_with = "ser_sig")]
    pub signature: Signature,
}

impl From<WireError> for ReportError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::NonZero {
                field,
                start,
                end,
                first,
                ..
            } => ReportError::NonZeroReserved {
                start,
                end,
                first,
                what: field,
            },
            other => ReportError::Wire(other),
        }
    }
}

impl AttestationReport {
    /// A report of `version` with every field zero except SIGNATURE_ALGO (ECDSA P-384) and the policy's
    /// must-be-one bit 17; version-dependent fields are present as zero where the version has them.
    pub fn new(version: u32) -> AttestationReport {
        AttestationReport {
            version,
            guest_svn: 0,
            policy: GuestPolicy(1 << 17),
            family_id: [0; 16],
            image_id: [0; 16],
            vmpl: 0,
            signature_algo: SIGNATURE_ALGO_ECDSA_P384_SHA384,
            current_tcb: TcbVersion::default(),
            platform_info: PlatformInfo::default(),
            key_info: KeyInfo::default(),
            report_data: [0; 64],
            measurement: [0; 48],
            host_data: [0; 32],
            id_key_digest: [0; 48],
            author_key_digest: [0; 48],
            report_id: [0; 32],
            report_id_ma: [0; 32],
            reported_tcb: TcbVersion::default(),
            cpuid: (version >= 3).then(Cpuid::default),
            chip_id: [0; 64],
            committed_tcb: TcbVersion::default(),
            current_fw: FirmwareVersion::default(),
            committed_fw: FirmwareVersion::default(),
            launch_tcb: TcbVersion::default(),
            launch_mit_vector: (version >= 5).then_some(0),
            current_mit_vector: (version >= 5).then_some(0),
            signature: Signature::default(),
        }
    }

    /// Parses exactly [`REPORT_LEN`] bytes; any other length, an unknown version, a non-zero reserved range or a
    /// reserved KEY_INFO value is an error.
    pub fn from_bytes(b: &[u8]) -> Result<AttestationReport, ReportError> {
        if b.len() != REPORT_LEN {
            return Err(ReportError::WrongLength { len: b.len() });
        }
        let mut r = Reader::new("attestation report", b);
        let version = r.u32_le("VERSION")?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(ReportError::UnsupportedVersion { version });
        }
        let guest_svn = r.u32_le("GUEST_SVN")?;
        let policy = GuestPolicy(r.u64_le("POLICY")?);
        let family_id = r.array("FAMILY_ID")?;
        let image_id = r.array("IMAGE_ID")?;
        let vmpl = r.u32_le("VMPL")?;
        let signature_algo = r.u32_le("SIGNATURE_ALGO")?;
        let current_tcb = TcbVersion(r.u64_le("CURRENT_TCB")?);
        let platform_info = PlatformInfo(r.u64_le("PLATFORM_INFO")?);
        // Decoded after every must-be-zero range is checked, so that those errors come first.
        let key_info = r.u32_le("KEY_INFO")?;
        r.zeros("reserved after KEY_INFO", 0x050 - 0x04C)?;
        let report_data = r.array("REPORT_DATA")?;
        let measurement = r.array("MEASUREMENT")?;
        let host_data = r.array("HOST_DATA")?;
        let id_key_digest = r.array("ID_KEY_DIGEST")?;
        let author_key_digest = r.array("AUTHOR_KEY_DIGEST")?;
        let report_id = r.array("REPORT_ID")?;
        let report_id_ma = r.array("REPORT_ID_MA")?;
        let reported_tcb = TcbVersion(r.u64_le("REPORTED_TCB")?);
        let cpuid = if version >= 3 {
            let [family, model, stepping] = r.array("CPUID_FAM_ID/MOD_ID/STEP")?;
            r.zeros("reserved after CPUID_STEP", 0x1A0 - 0x18B)?;
            Some(Cpuid {
                family,
                model,
                stepping,
            })
        } else {
            r.zeros("reserved after REPORTED_TCB", 0x1A0 - 0x188)?;
            None
        };
        let chip_id = r.array("CHIP_ID")?;
        let committed_tcb = TcbVersion(r.u64_le("COMMITTED_TCB")?);
        let [build, minor, major] = r.array("CURRENT_BUILD/MINOR/MAJOR")?;
        let current_fw = FirmwareVersion {
            major,
            minor,
            build,
        };
        r.zeros("reserved after CURRENT_MAJOR", 1)?;
        let [build, minor, major] = r.array("COMMITTED_BUILD/MINOR/MAJOR")?;
        let committed_fw = FirmwareVersion {
            major,
            minor,
            build,
        };
        r.zeros("reserved after COMMITTED_MAJOR", 1)?;
        let launch_tcb = TcbVersion(r.u64_le("LAUNCH_TCB")?);
        let (launch_mit_vector, current_mit_vector) = if version >= 5 {
            let launch = r.u64_le("LAUNCH_MIT_VECTOR")?;
            let current = r.u64_le("CURRENT_MIT_VECTOR")?;
            r.zeros("reserved after CURRENT_MIT_VECTOR", SIGNED_LEN - 0x208)?;
            (Some(launch), Some(current))
        } else {
            r.zeros("reserved after LAUNCH_TCB", SIGNED_LEN - 0x1F8)?;
            (None, None)
        };
        let signature = Signature {
            r: r.array("SIGNATURE.R")?,
            s: r.array("SIGNATURE.S")?,
        };
        r.zeros("reserved part of SIGNATURE", REPORT_LEN - 0x330)?;
        r.finish()?;
        Ok(AttestationReport {
            version,
            guest_svn,
            policy,
            family_id,
            image_id,
            vmpl,
            signature_algo,
            current_tcb,
            platform_info,
            key_info: KeyInfo::from_u32(key_info)?,
            report_data,
            measurement,
            host_data,
            id_key_digest,
            author_key_digest,
            report_id,
            report_id_ma,
            reported_tcb,
            cpuid,
            chip_id,
            committed_tcb,
            current_fw,
            committed_fw,
            launch_tcb,
            launch_mit_vector,
            current_mit_vector,
            signature,
        })
    }

    /// Writes the report back; for a parsed report this is exactly the input bytes.
    pub fn to_bytes(&self) -> [u8; REPORT_LEN] {
        let mut b = [0u8; REPORT_LEN];
        let mut put = |off: usize, src: &[u8]| b[off..off + src.len()].copy_from_slice(src);
        put(0x000, &self.version.to_le_bytes());
        put(0x004, &self.guest_svn.to_le_bytes());
        put(0x008, &self.policy.0.to_le_bytes());
        put(0x010, &self.family_id);
        put(0x020, &self.image_id);
        put(0x030, &self.vmpl.to_le_bytes());
        put(0x034, &self.signature_algo.to_le_bytes());
        put(0x038, &self.current_tcb.0.to_le_bytes());
        put(0x040, &self.platform_info.0.to_le_bytes());
        put(0x048, &self.key_info.to_u32().to_le_bytes());
        put(0x050, &self.report_data);
        put(0x090, &self.measurement);
        put(0x0C0, &self.host_data);
        put(0x0E0, &self.id_key_digest);
        put(0x110, &self.author_key_digest);
        put(0x140, &self.report_id);
        put(0x160, &self.report_id_ma);
        put(0x180, &self.reported_tcb.0.to_le_bytes());
        if let Some(c) = self.cpuid {
            put(0x188, &[c.family, c.model, c.stepping]);
        }
        put(0x1A0, &self.chip_id);
        put(0x1E0, &self.committed_tcb.0.to_le_bytes());
        let fw = |v: FirmwareVersion| [v.build, v.minor, v.major];
        put(0x1E8, &fw(self.current_fw));
        put(0x1EC, &fw(self.committed_fw));
        put(0x1F0, &self.launch_tcb.0.to_le_bytes());
        if let Some(v) = self.launch_mit_vector {
            put(0x1F8, &v.to_le_bytes());
        }
        if let Some(v) = self.current_mit_vector {
            put(0x200, &v.to_le_bytes());
        }
        put(0x2A0, &self.signature.r);
        put(0x2E8, &self.signature.s);
        b
    }

    /// The bytes the signature covers (0x000..0x29F).
    pub fn signed_bytes(&self) -> Vec<u8> {
        self.to_bytes()[..SIGNED_LEN].to_vec()
    }

    /// Sets the signature from big-endian P-384 scalars (R, S).
    pub fn set_signature_p384(&mut self, r: &[u8; 48], s: &[u8; 48]) {
        self.signature = Signature::from_p384_be(r, s);
    }

    /// The product named by CPUID (version 3 and later), if the family/model is known.
    pub fn product_from_cpuid(&self) -> Option<Product> {
        self.cpuid
            .and_then(|c| Product::from_cpuid(c.family, c.model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_report_round_trips_for_each_version() {
        for v in SUPPORTED_VERSIONS {
            let mut r = AttestationReport::new(v);
            r.measurement = [0xAB; 48];
            r.key_info = KeyInfo {
                signing_key: SigningKey::Vlek,
                mask_chip_key: true,
                author_key_en: true,
            };
            r.current_fw = FirmwareVersion {
                major: 1,
                minor: 55,
                build: 43,
            };
            r.set_signature_p384(&[1; 48], &[2; 48]);
            let bytes = r.to_bytes();
            assert_eq!(AttestationReport::from_bytes(&bytes), Ok(r.clone()));
            assert_eq!(r.signature.r_be(), [1; 48]);
            assert_eq!(&bytes[0x1E8..0x1EB], &[43, 55, 1]);
        }
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            AttestationReport::from_bytes(&[0; 10]),
            Err(ReportError::WrongLength { len: 10 })
        );
        let mut b = AttestationReport::new(2).to_bytes();
        b[0] = 4;
        assert_eq!(
            AttestationReport::from_bytes(&b),
            Err(ReportError::UnsupportedVersion { version: 4 })
        );
        let mut b = AttestationReport::new(3).to_bytes();
        b[0x1F9] = 1;
        let e = AttestationReport::from_bytes(&b).expect_err("reserved byte set");
        assert!(e.to_string().contains("0x1F8..0x2A0"), "{e}");
        let mut b = AttestationReport::new(5).to_bytes();
        b[0x48] = 0x08; // signing key 2: reserved
        assert!(matches!(
            AttestationReport::from_bytes(&b),
            Err(ReportError::BadKeyInfo { .. })
        ));
    }
}
