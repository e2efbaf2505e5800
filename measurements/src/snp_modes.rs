//! The other guest modes of sev-snp-measure 0.0.13 beside plain SNP: SEV and SEV-ES (a SHA-256 launch digest
//! over the OVMF image, the SEV hashes table and, for SEV-ES, the VMSAs) and SNP with a Coconut SVSM loaded below
//! OVMF (`snp:svsm`), plus the VMSA pages each mode measures, for `--dump-vmsa`.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::snp::{
    self, measure_sections, vmsa_page, Gctx, KernelHashes, LaunchDigest, Ovmf, OvmfError,
    SnpConfig, VmmType, SEV_HASH_TABLE_RV_GUID,
};

const PAGE: usize = 4096;

/// GUID of the SVSM image's entry giving the offset of its entry point from the image's start.
pub const SVSM_INFO_GUID: [u8; 16] = snp::guid_le("a789a612-0597-4c4b-a49f-cbb1fe9d1ddd");

/// The guest mode, as sev-snp-measure's `--mode` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SevMode {
    /// SEV: SHA-256 of the OVMF image (and the SEV hashes table with a kernel).
    Sev,
    /// SEV-ES: SEV's digest continued over one VMSA per vCPU (SEV_FEATURES 0).
    SevEs,
    /// SEV-SNP: the SHA-384 PAGE_INFO chain of [`crate::snp::launch_digest`].
    Snp,
    /// SEV-SNP with a Coconut SVSM below OVMF (and its variable store): OVMF, the SVSM and its metadata, the
    /// SVSM's VMSAs.
    SnpSvsm,
}

impl SevMode {
    /// The name sev-snp-measure prints with `-v` ("Calculated SEV_SNP guest measurement: ...").
    pub fn name(self) -> &'static str {
        match self {
            SevMode::Sev => "SEV",
            SevMode::SevEs => "SEV_ES",
            SevMode::Snp => "SEV_SNP",
            SevMode::SnpSvsm => "SEV_SNP_SVSM",
        }
    }
}

/// A SEV mode name sev-snp-measure does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown SEV mode {name:?}")]
pub struct UnknownSevMode {
    /// The name given.
    pub name: String,
}

impl FromStr for SevMode {
    type Err = UnknownSevMode;
    /// The spellings sev-snp-measure accepts (`sev`, `seves`/`sev-es`, `snp`/`sev-snp`, `snp:svsm`).
    fn from_str(s: &str) -> Result<Self, UnknownSevMode> {
        Ok(match s {
            "sev" | "SEV" => SevMode::Sev,
            "seves" | "sev-es" | "SEVES" | "SEV-ES" => SevMode::SevEs,
            "snp" | "sev-snp" | "SNP" | "SEV-SNP" => SevMode::Snp,
            _ if matches!(s.to_ascii_lowercase().as_str(), "snp:svsm" | "sev-snp:svsm") => {
                SevMode::SnpSvsm
            }
            _ => return Err(UnknownSevMode { name: s.to_owned() }),
        })
    }
}

impl fmt::Display for SevMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The VMSA pages a launch measures, in vCPU order: the first is the BSP's, the others repeat one AP page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vmsas {
    bsp: Box<[u8; PAGE]>,
    ap: Box<[u8; PAGE]>,
    vcpus: u32,
}

impl Vmsas {
    /// The number of pages (one per vCPU).
    pub fn len(&self) -> u32 {
        self.vcpus
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.vcpus == 0
    }

    /// The page of vCPU `i` (`None` past the last vCPU).
    pub fn page(&self, i: u32) -> Option<&[u8; PAGE]> {
        match i {
            _ if i >= self.vcpus => None,
            0 => Some(&self.bsp),
            _ => Some(&self.ap),
        }
    }

    /// Every page in vCPU order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8; PAGE]> + '_ {
        (0..self.vcpus).filter_map(|i| self.page(i))
    }

    /// Writes `vmsa0.bin`, `vmsa1.bin`, ... (the names sev-snp-measure's `--dump-vmsa` writes) into `dir`.
    pub fn write_to(&self, dir: &std::path::Path) -> std::io::Result<()> {
        for (i, p) in self.iter().enumerate() {
            std::fs::write(dir.join(format!("vmsa{i}.bin")), &p[..])?;
        }
        Ok(())
    }
}

/// The SNP/SEV-ES VMSAs of `cfg.vcpus` vCPUs on `ovmf`: BSP at the reset vector, APs at OVMF's SEV-ES reset
/// block; errors as [`crate::snp::launch_digest`] has them.
pub fn snp_vmsas(ovmf: &Ovmf, cfg: &SnpConfig) -> Result<Vmsas, OvmfError> {
    let ap_eip = u64::from(ovmf.sev_es_reset_eip()?);
    if cfg.vcpus > 1 && ap_eip == 0 {
        return Err(OvmfError::NoApResetVector(cfg.vcpus));
    }
    Ok(Vmsas {
        bsp: vmsa_page(snp::BSP_RESET_EIP, cfg),
        ap: vmsa_page(ap_eip, cfg),
        vcpus: cfg.vcpus,
    })
}

/// Whether the firmware can measure a kernel under SEV/SEV-ES: its GUIDed table has a SEV hashes table entry
/// with a non-zero base (SEV and SEV-ES need no SNP_KERNEL_HASHES section).
fn sev_hashes_supported(ovmf: &Ovmf) -> Result<(), OvmfError> {
    match ovmf.table_entry(&SEV_HASH_TABLE_RV_GUID) {
        None => Err(OvmfError::CannotMeasureKernel(
            "GUID table has no SEV hashes table entry".into(),
        )),
        Some(_) => match ovmf.sev_hashes_table()? {
            (0, _) => Err(OvmfError::CannotMeasureKernel(
                "SEV hashes table has base 0".into(),
            )),
            _ => Ok(()),
        },
    }
}

fn sev_hasher(ovmf: &Ovmf, hashes: Option<&KernelHashes>) -> Result<Sha256, OvmfError> {
    if hashes.is_some() {
        sev_hashes_supported(ovmf)?;
    }
    let mut h = Sha256::new();
    h.update(ovmf.data());
    if let Some(k) = hashes {
        h.update(k.table());
    }
    Ok(h)
}

/// The SEV launch digest: SHA-256 of the OVMF image followed, with a kernel, by the padded SEV hashes table.
pub fn sev_digest(ovmf: &Ovmf, hashes: Option<&KernelHashes>) -> Result<[u8; 32], OvmfError> {
    Ok(sev_hasher(ovmf, hashes)?.finalize().into())
}

/// The SEV-ES launch digest: [`sev_digest`]'s bytes followed by one VMSA per vCPU, built as for SNP but with
/// SEV_FEATURES 0 (so `cfg.guest_features` is not used). Returns the VMSAs too.
pub fn seves_digest(
    ovmf: &Ovmf,
    hashes: Option<&KernelHashes>,
    cfg: &SnpConfig,
) -> Result<([u8; 32], Vmsas), OvmfError> {
    let mut h = sev_hasher(ovmf, hashes)?;
    let cfg = SnpConfig {
        guest_features: 0,
        ovmf_hash: None,
        ..*cfg
    };
    let vmsas = snp_vmsas(ovmf, &cfg)?;
    for p in vmsas.iter() {
        h.update(&p[..]);
    }
    Ok((h.finalize().into(), vmsas))
}

/// What is wrong with an SVSM launch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SvsmError {
    /// The variable store does not fit below OVMF.
    #[error("--vars-size {vars_size} does not fit below OVMF's base {ovmf_base:#x}")]
    VarsTooLarge {
        /// The size given.
        vars_size: u64,
        /// OVMF's base GPA.
        ovmf_base: u64,
    },
    /// The SVSM image does not fit below the variable store.
    #[error("SVSM of {svsm_len} bytes does not fit below {end:#x}")]
    SvsmTooLarge {
        /// The SVSM's size.
        svsm_len: usize,
        /// Where it must end.
        end: u64,
    },
    /// The SVSM image's GUIDed table has no SVSM_INFO entry (or a short one).
    #[error("SVSM GUID table has no SVSM_INFO entry of 4 bytes or more")]
    NoSvsmInfo,
    /// The SVSM image's metadata is unusable.
    #[error("SVSM: {0}")]
    Svsm(OvmfError),
}

/// The SVSM's GPA: it ends where the OVMF variable store (of `vars_size` bytes, just below OVMF) begins.
pub fn svsm_gpa(ovmf: &Ovmf, svsm: &Ovmf, vars_size: u64) -> Result<u64, SvsmError> {
    let end = ovmf
        .gpa()
        .checked_sub(vars_size)
        .ok_or(SvsmError::VarsTooLarge {
            vars_size,
            ovmf_base: ovmf.gpa(),
        })?;
    end.checked_sub(svsm.data().len() as u64)
        .ok_or(SvsmError::SvsmTooLarge {
            svsm_len: svsm.data().len(),
            end,
        })
}

/// The VMSA page a Coconut SVSM vCPU starts with: 32-bit protected mode flat segments, CR0.PE set, RIP at the
/// SVSM's entry point, SEV_FEATURES 1. As in sev-snp-measure 0.0.13, the x87 FCW stays 0 (its SVSM save area
/// passes the FCW under a field name the structure does not have, so the value is dropped).
pub fn svsm_vmsa_page(eip: u64, vcpu_sig: u32) -> Box<[u8; PAGE]> {
    let mut p = Box::new([0u8; PAGE]);
    let mut put = |at: usize, b: &[u8]| p[at..at + b.len()].copy_from_slice(b);
    let seg = |sel: u16, attr: u16, limit: u32| {
        let mut s = [0u8; 16];
        s[0..2].copy_from_slice(&sel.to_le_bytes());
        s[2..4].copy_from_slice(&attr.to_le_bytes());
        s[4..8].copy_from_slice(&limit.to_le_bytes());
        s
    };
    put(0x00, &seg(16, 0xc93, 0xffff_ffff)); // es
    put(0x10, &seg(8, 0xc9b, 0xffff_ffff)); // cs
    put(0x20, &seg(16, 0xc93, 0xffff_ffff)); // ss
    put(0x30, &seg(16, 0xc93, 0xffff_ffff)); // ds
    put(0x40, &seg(16, 0xc93, 0xffff_ffff)); // fs
    put(0x50, &seg(0, 0x093, 0xffff)); // gs
    put(0x60, &seg(0, 0, 0xffff)); // gdtr
    put(0x70, &seg(0, 0x82, 0xffff)); // ldtr
    put(0x80, &seg(0, 0, 0xffff)); // idtr
    put(0x90, &seg(0, 0x8b, 0xffff)); // tr
    put(0xd0, &0x1000u64.to_le_bytes()); // efer
    put(0x148, &0x40u64.to_le_bytes()); // cr4
    put(0x158, &0x11u64.to_le_bytes()); // cr0 (PE)
    put(0x160, &0x400u64.to_le_bytes()); // dr7
    put(0x168, &0xffff_0ff0u64.to_le_bytes()); // dr6
    put(0x170, &0x2u64.to_le_bytes()); // rflags
    put(0x178, &eip.to_le_bytes()); // rip
    put(0x268, &0x0007_0406_0007_0406u64.to_le_bytes()); // g_pat
    put(0x310, &u64::from(vcpu_sig).to_le_bytes()); // rdx
    put(0x3b0, &1u64.to_le_bytes()); // sev_features
    put(0x3e8, &1u64.to_le_bytes()); // xcr0
    put(0x408, &0x1f80u32.to_le_bytes()); // mxcsr
    p
}

/// The `snp:svsm` launch digest (QEMU only): OVMF as normal pages ending at 4 GiB, the SVSM as normal pages
/// ending `vars_size` bytes below OVMF, the SVSM's SEV metadata sections (no kernel hashes), then one identical
/// VMSA per vCPU starting at the SVSM's entry point (SVSM_INFO offset + its GPA). Returns the VMSAs too.
pub fn svsm_digest(
    ovmf: &Ovmf,
    svsm: &Ovmf,
    vars_size: u64,
    vcpus: u32,
    vcpu_sig: u32,
) -> Result<(LaunchDigest, Vmsas), SvsmError> {
    let gpa = svsm_gpa(ovmf, svsm, vars_size)?;
    let info = svsm
        .table_entry(&SVSM_INFO_GUID)
        .and_then(|e| e.get(0..4))
        .ok_or(SvsmError::NoSvsmInfo)?;
    let offset = u32::from_le_bytes([info[0], info[1], info[2], info[3]]);
    let eip = u64::from(offset) + gpa;
    let mut g = Gctx::new(snp::ovmf_hash(ovmf));
    g.normal_pages(gpa, svsm.data());
    measure_sections(&mut g, svsm, None, VmmType::Qemu);
    let page = svsm_vmsa_page(eip, vcpu_sig);
    let vmsas = Vmsas {
        bsp: page.clone(),
        ap: page,
        vcpus,
    };
    for p in vmsas.iter() {
        g.update_vmsa(p);
    }
    Ok((g.ld(), vmsas))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svsm_info_guid_is_the_textual_one() {
        // a789a612-0597-4c4b-a49f-cbb1fe9d1ddd, first three fields little-endian.
        assert_eq!(SVSM_INFO_GUID[..4], [0x12, 0xa6, 0x89, 0xa7]);
        assert_eq!(SVSM_INFO_GUID[4..8], [0x97, 0x05, 0x4b, 0x4c]);
        assert_eq!(
            SVSM_INFO_GUID[8..],
            [0xa4, 0x9f, 0xcb, 0xb1, 0xfe, 0x9d, 0x1d, 0xdd]
        );
    }

    #[test]
    fn modes_parse_as_sev_snp_measure_spells_them() {
        for (s, m) in [
            ("sev", SevMode::Sev),
            ("SEV-ES", SevMode::SevEs),
            ("seves", SevMode::SevEs),
            ("sev-snp", SevMode::Snp),
            ("SNP:SVSM", SevMode::SnpSvsm),
        ] {
            assert_eq!(s.parse::<SevMode>(), Ok(m), "{s}");
        }
        assert!("tdx".parse::<SevMode>().is_err());
        assert_eq!(SevMode::SnpSvsm.name(), "SEV_SNP_SVSM");
    }

    #[test]
    fn vmsas_repeat_the_ap_page() {
        let v = Vmsas {
            bsp: Box::new([1; PAGE]),
            ap: Box::new([2; PAGE]),
            vcpus: 3,
        };
        let firsts: Vec<u8> = v.iter().map(|p| p[0]).collect();
        assert_eq!(firsts, [1, 2, 2]);
        assert!(v.page(3).is_none());
    }

    #[test]
    fn svsm_layout_refuses_what_does_not_fit() {
        let o = Ovmf::parse(vec![0; 2 * PAGE]).expect("parse");
        let s = Ovmf::parse(vec![0; PAGE]).expect("parse");
        assert_eq!(svsm_gpa(&o, &s, 0x1000), Ok((1u64 << 32) - 4 * PAGE as u64));
        assert!(matches!(
            svsm_gpa(&o, &s, u64::MAX),
            Err(SvsmError::VarsTooLarge { .. })
        ));
        assert_eq!(
            svsm_digest(&o, &s, 0, 1, 0).map(|_| ()),
            Err(SvsmError::NoSvsmInfo)
        );
    }
}
