//! Acceptability of an authentic SEV-SNP report: one declarative [`Policy`] that the library and every CLI flag
//! share, and [`Policy::check`], which collects every violated field as a [`Failure`].
//!
//! Defaults: debug and the migration agent forbidden; SMT and multi-socket guests allowed; any VMPL;
//! provisional firmware allowed; no minimums; no expected values unless given.

use crate::failure::Failure;
use attestation::hex::Hex;
use attestation::snp::{AttestationReport, Product, TcbParts, TcbVersion};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Minimum security patch levels per TCB component; absent components are not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcbMinimum {
    /// Minimum FMC SVN (Turin only).
    pub fmc: Option<u8>,
    /// Minimum boot loader SVN.
    pub bootloader: Option<u8>,
    /// Minimum TEE SVN.
    pub tee: Option<u8>,
    /// Minimum SNP firmware SVN.
    pub snp: Option<u8>,
    /// Minimum microcode SVN.
    pub microcode: Option<u8>,
}

impl TcbMinimum {
    /// Whether no component has a minimum.
    pub fn is_empty(&self) -> bool {
        *self == TcbMinimum::default()
    }

    /// The components of `parts` below this minimum, as `name seen < min`.
    pub fn shortfalls(&self, parts: &TcbParts) -> Vec<String> {
        let mut out = Vec::new();
        let mut cmp = |name: &str, seen: Option<u8>, min: Option<u8>| {
            if let Some(min) = min {
                let seen = seen.unwrap_or(0);
                if seen < min {
                    out.push(format!("{name} {seen} < {min}"));
                }
            }
        };
        cmp("fmc", parts.fmc, self.fmc);
        cmp("bl", Some(parts.bootloader), self.bootloader);
        cmp("tee", Some(parts.tee), self.tee);
        cmp("snp", Some(parts.snp), self.snp);
        cmp("ucode", Some(parts.microcode), self.microcode);
        out
    }
}

/// A `--min-tcb` list or a `--min-abi` version that does not parse; the text names the part that is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyValueError(pub String);

impl FromStr for TcbMinimum {
    type Err = PolicyValueError;
    /// Parses `bl=3,tee=0,snp=10,ucode=115[,fmc=1]`.
    fn from_str(s: &str) -> Result<Self, PolicyValueError> {
        TcbMinimum::parse(s).map_err(PolicyValueError)
    }
}

impl TcbMinimum {
    fn parse(s: &str) -> Result<Self, String> {
        let mut m = TcbMinimum::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not NAME=VALUE"))?;
            let v: u8 = v
                .trim()
                .parse()
                .map_err(|_| format!("`{v}` is not a number 0..=255"))?;
            match k.trim() {
                "fmc" => m.fmc = Some(v),
                "bl" | "bootloader" => m.bootloader = Some(v),
                "tee" => m.tee = Some(v),
                "snp" => m.snp = Some(v),
                "ucode" | "microcode" => m.microcode = Some(v),
                other => {
                    return Err(format!(
                        "unknown TCB component `{other}` (fmc, bl, tee, snp, ucode)"
                    ))
                }
            }
        }
        Ok(m)
    }
}

/// A firmware ABI version `major.minor`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AbiVersion {
    /// Major version.
    pub major: u8,
    /// Minor version.
    pub minor: u8,
}

impl FromStr for AbiVersion {
    type Err = PolicyValueError;
    fn from_str(s: &str) -> Result<Self, PolicyValueError> {
        AbiVersion::parse(s).map_err(PolicyValueError)
    }
}

impl AbiVersion {
    fn parse(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once('.')
            .ok_or_else(|| format!("`{s}` is not MAJOR.MINOR"))?;
        Ok(AbiVersion {
            major: a
                .parse()
                .map_err(|_| format!("`{a}` is not a number 0..=255"))?,
            minor: b
                .parse()
                .map_err(|_| format!("`{b}` is not a number 0..=255"))?,
        })
    }
}

impl fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What makes an authentic report acceptable. [`Policy::default`] is the documented default policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// Accept a guest whose policy allows debugging (its memory is then readable by the host). Default false.
    pub allow_debug: bool,
    /// Accept a guest whose policy allows a migration agent. Default false.
    pub allow_migration_agent: bool,
    /// Accept a guest whose policy allows SMT, or a platform with SMT enabled. Default true.
    pub allow_smt: bool,
    /// Require the guest policy's SINGLE_SOCKET bit. Default false (multi-socket allowed).
    pub require_single_socket: bool,
    /// Minimum firmware ABI (CURRENT major.minor). Default none.
    pub min_abi: Option<AbiVersion>,
    /// Required VMPL of the request. Default none (any VMPL).
    pub vmpl: Option<u32>,
    /// Minimum GUEST_SVN. Default none.
    pub min_guest_svn: Option<u32>,
    /// Minimum of CURRENT_TCB, COMMITTED_TCB and REPORTED_TCB per component. Default none.
    pub min_tcb: TcbMinimum,
    /// Minimum of LAUNCH_TCB per component. Default none.
    pub min_launch_tcb: TcbMinimum,
    /// Minimum firmware build (current and committed). Default none.
    pub min_build: Option<u8>,
    /// Accept provisional firmware (CURRENT differs from COMMITTED TCB or version). Default true.
    pub allow_provisional_firmware: bool,
    /// Accepted launch measurements (any of); empty means not checked here.
    pub measurements: Vec<Hex<48>>,
    /// Required REPORT_DATA. Default none.
    pub report_data: Option<Hex<64>>,
    /// Required HOST_DATA. Default none.
    pub host_data: Option<Hex<32>>,
    /// Required FAMILY_ID. Default none.
    pub family_id: Option<Hex<16>>,
    /// Required IMAGE_ID. Default none.
    pub image_id: Option<Hex<16>>,
    /// Accepted ID_KEY_DIGESTs (any of); empty means not checked.
    pub id_key_digests: Vec<Hex<48>>,
    /// Accepted AUTHOR_KEY_DIGESTs (any of, with AUTHOR_KEY_EN set); empty means not checked.
    pub author_key_digests: Vec<Hex<48>>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow_debug: false,
            allow_migration_agent: false,
            allow_smt: true,
            require_single_socket: false,
            min_abi: None,
            vmpl: None,
            min_guest_svn: None,
            min_tcb: TcbMinimum::default(),
            min_launch_tcb: TcbMinimum::default(),
            min_build: None,
            allow_provisional_firmware: true,
            measurements: Vec::new(),
            report_data: None,
            host_data: None,
            family_id: None,
            image_id: None,
            id_key_digests: Vec::new(),
            author_key_digests: Vec::new(),
        }
    }
}

/// Check names a policy failure can carry.
pub mod checks {
    /// Guest policy reserved bit 17 is not one.
    pub const GUEST_POLICY: &str = "guest-policy";
    /// Debugging allowed but not permitted.
    pub const DEBUG: &str = "debug";
    /// Migration agent allowed but not permitted.
    pub const MIGRATION_AGENT: &str = "migration-agent";
    /// SMT allowed/enabled but not permitted.
    pub const SMT: &str = "smt";
    /// SINGLE_SOCKET required but not set.
    pub const SINGLE_SOCKET: &str = "single-socket";
    /// Firmware ABI below the minimum.
    pub const ABI: &str = "abi";
    /// VMPL differs.
    pub const VMPL: &str = "vmpl";
    /// GUEST_SVN below the minimum.
    pub const GUEST_SVN: &str = "guest-svn";
    /// A TCB component below the minimum.
    pub const MIN_TCB: &str = "min-tcb";
    /// A launch TCB component below the minimum.
    pub const MIN_LAUNCH_TCB: &str = "min-launch-tcb";
    /// Firmware build below the minimum.
    pub const MIN_BUILD: &str = "min-build";
    /// Provisional firmware not permitted.
    pub const PROVISIONAL_FIRMWARE: &str = "provisional-firmware";
    /// MEASUREMENT is not one of the accepted values.
    pub const MEASUREMENT: &str = "measurement";
    /// REPORT_DATA differs.
    pub const REPORT_DATA: &str = "report-data";
    /// HOST_DATA differs.
    pub const HOST_DATA: &str = "host-data";
    /// FAMILY_ID differs.
    pub const FAMILY_ID: &str = "family-id";
    /// IMAGE_ID differs.
    pub const IMAGE_ID: &str = "image-id";
    /// ID_KEY_DIGEST is not one of the accepted values.
    pub const ID_KEY_DIGEST: &str = "id-key-digest";
    /// AUTHOR_KEY_DIGEST is not one of the accepted values (or absent).
    pub const AUTHOR_KEY_DIGEST: &str = "author-key-digest";
}

fn any_of<const N: usize>(list: &[Hex<N>]) -> String {
    list.iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(" or ")
}

impl Policy {
    /// Every way `report` violates this policy; `product` decodes the TCB (minimums need it).
    pub fn check(&self, report: &AttestationReport, product: Option<Product>) -> Vec<Failure> {
        let mut f = Vec::new();
        let gp = report.policy;
        if !gp.reserved_one() {
            f.push(Failure::new(
                checks::GUEST_POLICY,
                format!(
                    "guest policy {:#018x}: reserved bit 17 is 0, must be 1",
                    gp.0
                ),
            ));
        }
        if gp.debug_allowed() && !self.allow_debug {
            f.push(Failure::new(
                checks::DEBUG,
                "guest policy allows debugging (bit 19 set), expected debugging forbidden",
            ));
        }
        if gp.migrate_ma_allowed() && !self.allow_migration_agent {
            f.push(Failure::new(
                checks::MIGRATION_AGENT,
                "guest policy allows a migration agent (bit 18 set), expected none",
            ));
        }
        if !self.allow_smt {
            if gp.smt_allowed() {
                f.push(Failure::new(
                    checks::SMT,
                    "guest policy allows SMT (bit 16 set), expected SMT forbidden",
                ));
            }
            if report.platform_info.smt_enabled() {
                f.push(Failure::new(
                    checks::SMT,
                    "platform has SMT enabled (PLATFORM_INFO bit 0), expected disabled",
                ));
            }
        }
        if self.require_single_socket && !gp.single_socket() {
            f.push(Failure::new(
                checks::SINGLE_SOCKET,
                "guest policy SINGLE_SOCKET (bit 20) is 0, expected 1",
            ));
        }
        if let Some(min) = self.min_abi {
            let seen = AbiVersion {
                major: report.current_fw.major,
                minor: report.current_fw.minor,
            };
            if seen < min {
                f.push(Failure::new(
                    checks::ABI,
                    format!("firmware ABI is {seen}, expected at least {min}"),
                ));
            }
        }
        if let Some(v) = self.vmpl {
            if report.vmpl != v {
                f.push(Failure::new(
                    checks::VMPL,
                    format!("VMPL is {}, expected {v}", report.vmpl),
                ));
            }
        }
        if let Some(min) = self.min_guest_svn {
            if report.guest_svn < min {
                f.push(Failure::new(
                    checks::GUEST_SVN,
                    format!("GUEST_SVN is {}, expected at least {min}", report.guest_svn),
                ));
            }
        }
        let tcb_check = |f: &mut Vec<Failure>,
                         check: &'static str,
                         name: &str,
                         tcb: TcbVersion,
                         min: &TcbMinimum| {
            if min.is_empty() {
                return;
            }
            let Some(p) = product else {
                f.push(Failure::new(
                    check,
                    format!("{name} {tcb} cannot be decoded: product unknown"),
                ));
                return;
            };
            let short = min.shortfalls(&tcb.decode(p));
            if !short.is_empty() {
                f.push(Failure::new(
                    check,
                    format!("{name} {tcb} is below the minimum: {}", short.join(", ")),
                ));
            }
        };
        tcb_check(
            &mut f,
            checks::MIN_TCB,
            "CURRENT_TCB",
            report.current_tcb,
            &self.min_tcb,
        );
        tcb_check(
            &mut f,
            checks::MIN_TCB,
            "COMMITTED_TCB",
            report.committed_tcb,
            &self.min_tcb,
        );
        tcb_check(
            &mut f,
            checks::MIN_TCB,
            "REPORTED_TCB",
            report.reported_tcb,
            &self.min_tcb,
        );
        tcb_check(
            &mut f,
            checks::MIN_LAUNCH_TCB,
            "LAUNCH_TCB",
            report.launch_tcb,
            &self.min_launch_tcb,
        );
        if let Some(min) = self.min_build {
            for (name, fw) in [
                ("CURRENT_BUILD", report.current_fw),
                ("COMMITTED_BUILD", report.committed_fw),
            ] {
                if fw.build < min {
                    f.push(Failure::new(
                        checks::MIN_BUILD,
                        format!("{name} is {}, expected at least {min}", fw.build),
                    ));
                }
            }
        }
        if !self.allow_provisional_firmware
            && (report.current_tcb != report.committed_tcb
                || report.current_fw != report.committed_fw)
        {
            f.push(Failure::new(
                checks::PROVISIONAL_FIRMWARE,
                format!(
                    "firmware is provisional: CURRENT {} / {} differs from COMMITTED {} / {}",
                    report.current_fw,
                    report.current_tcb,
                    report.committed_fw,
                    report.committed_tcb
                ),
            ));
        }
        if !self.measurements.is_empty()
            && !self.measurements.iter().any(|m| m.0 == report.measurement)
        {
            f.push(Failure::new(
                checks::MEASUREMENT,
                format!(
                    "MEASUREMENT is {}, expected {}",
                    hex::encode(report.measurement),
                    any_of(&self.measurements)
                ),
            ));
        }
        let exact = |f: &mut Vec<Failure>,
                     check: &'static str,
                     name: &str,
                     seen: &[u8],
                     want: Option<&[u8]>| {
            if let Some(w) = want {
                if seen != w {
                    f.push(Failure::new(
                        check,
                        format!(
                            "{name} is {}, expected {}",
                            hex::encode(seen),
                            hex::encode(w)
                        ),
                    ));
                }
            }
        };
        exact(
            &mut f,
            checks::REPORT_DATA,
            "REPORT_DATA",
            &report.report_data,
            self.report_data.as_ref().map(|h| &h.0[..]),
        );
        exact(
            &mut f,
            checks::HOST_DATA,
            "HOST_DATA",
            &report.host_data,
            self.host_data.as_ref().map(|h| &h.0[..]),
        );
        exact(
            &mut f,
            checks::FAMILY_ID,
            "FAMILY_ID",
            &report.family_id,
            self.family_id.as_ref().map(|h| &h.0[..]),
        );
        exact(
            &mut f,
            checks::IMAGE_ID,
            "IMAGE_ID",
            &report.image_id,
            self.image_id.as_ref().map(|h| &h.0[..]),
        );
        if !self.id_key_digests.is_empty()
            && !self
                .id_key_digests
                .iter()
                .any(|d| d.0 == report.id_key_digest)
        {
            f.push(Failure::new(
                checks::ID_KEY_DIGEST,
                format!(
                    "ID_KEY_DIGEST is {}, expected {}",
                    hex::encode(report.id_key_digest),
                    any_of(&self.id_key_digests)
                ),
            ));
        }
        if !self.author_key_digests.is_empty() {
            if !report.key_info.author_key_en {
                f.push(Failure::new(
                    checks::AUTHOR_KEY_DIGEST,
                    format!(
                        "AUTHOR_KEY_EN is 0 (no author key), expected {}",
                        any_of(&self.author_key_digests)
                    ),
                ));
            } else if !self
                .author_key_digests
                .iter()
                .any(|d| d.0 == report.author_key_digest)
            {
                f.push(Failure::new(
                    checks::AUTHOR_KEY_DIGEST,
                    format!(
                        "AUTHOR_KEY_DIGEST is {}, expected {}",
                        hex::encode(report.author_key_digest),
                        any_of(&self.author_key_digests)
                    ),
                ));
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(f: &[Failure]) -> Vec<&str> {
        f.iter().map(|x| x.check.as_ref()).collect()
    }

    #[test]
    fn default_policy_forbids_debug_and_migration_agent_only() {
        let mut r = AttestationReport::new(3);
        r.policy.0 = (1 << 17) | (1 << 16) | (1 << 20);
        assert!(Policy::default().check(&r, Some(Product::Milan)).is_empty());
        r.policy.0 |= (1 << 19) | (1 << 18);
        assert_eq!(
            names(&Policy::default().check(&r, Some(Product::Milan))),
            vec!["debug", "migration-agent"]
        );
        let p = Policy {
            allow_debug: true,
            allow_migration_agent: true,
            ..Policy::default()
        };
        assert!(p.check(&r, Some(Product::Milan)).is_empty());
    }

    #[test]
    fn every_failure_is_collected_with_seen_and_expected() {
        let mut r = AttestationReport::new(5);
        r.vmpl = 2;
        r.reported_tcb = TcbVersion::from_parts(
            Product::Genoa,
            TcbParts {
                fmc: None,
                bootloader: 1,
                tee: 0,
                snp: 5,
                microcode: 9,
            },
        );
        r.current_tcb = r.reported_tcb;
        r.committed_tcb = r.reported_tcb;
        let p = Policy {
            vmpl: Some(0),
            min_tcb: "snp=6".parse().expect("tcb"),
            measurements: vec!["11".repeat(48).parse().expect("hex")],
            report_data: Some("22".repeat(64).parse().expect("hex")),
            min_guest_svn: Some(1),
            ..Policy::default()
        };
        let f = p.check(&r, Some(Product::Genoa));
        assert_eq!(
            names(&f),
            vec![
                "vmpl",
                "guest-svn",
                "min-tcb",
                "min-tcb",
                "min-tcb",
                "measurement",
                "report-data"
            ]
        );
        assert!(
            f[0].detail.contains("VMPL is 2, expected 0"),
            "{}",
            f[0].detail
        );
        assert!(f[2].detail.contains("snp 5 < 6"), "{}", f[2].detail);
        assert!(f[5].detail.contains(&"11".repeat(48)), "{}", f[5].detail);
    }

    #[test]
    fn hex_and_tcb_flags_parse_or_say_why_not() {
        assert!("ab"
            .parse::<Hex<48>>()
            .expect_err("short")
            .to_string()
            .contains("expected 48"));
        assert_eq!(
            "bl=3, tee=0,snp=10,ucode=115".parse::<TcbMinimum>(),
            Ok(TcbMinimum {
                fmc: None,
                bootloader: Some(3),
                tee: Some(0),
                snp: Some(10),
                microcode: Some(115)
            })
        );
        assert!("foo=1".parse::<TcbMinimum>().is_err());
        assert_eq!(
            "1.55".parse::<AbiVersion>(),
            Ok(AbiVersion {
                major: 1,
                minor: 55
            })
        );
    }
}
