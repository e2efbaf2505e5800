//! The RTMR1 and RTMR2 values of a TD that QEMU starts by direct kernel boot (`-kernel`, `-initrd`, `-append`)
//! under TDVF, computed from the kernel, initramfs and command line alone, event by event, so that a guest
//! image can be pinned without a reference boot. RTMR0 (TD HOB, ACPI tables, firmware variables) depends on the
//! host's QEMU configuration and RTMR3 on the running guest; neither is computed here (docs/measurements.md).

use sha2::{Digest, Sha384};

use crate::tdx::Mr;

/// The ACPI data size QEMU's q35 machine keeps free at the top of memory below 4 GiB (`acpi_data_size`): 0x30000
/// for QEMU 10.0's `q35` as read back from a guest here (tests/tests/vm_confidential.rs, which fails if the QEMU
/// installed disagrees); older machine types used 0x28000.
pub const QEMU_ACPI_DATA_SIZE: u64 = 0x30000;
/// From this guest memory size up, QEMU's q35 machine puts 2 GiB below 4 GiB whatever the size, so the
/// initramfs address QEMU 10.1 writes into the kernel header no longer depends on the memory size.
pub const QEMU_STABLE_MEMORY_MIB: u64 = 0xB000_0000 >> 20;
/// The string OVMF's QEMU kernel loader appends to the command line when there is an initramfs.
pub const OVMF_INITRD_SUFFIX: &str = " initrd=initrd";

/// The kernel bytes TDVF loads and measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelBlob {
    /// The file byte for byte: QEMU 10.2 and later ("x86/loader: Don't update kernel header for CoCo VMs"), or a
    /// TDVF that reads fw_cfg `etc/boot/kernel`.
    AsFile,
    /// The file with the setup header as QEMU 10.1's `x86_load_linux` patches it for a guest of `memory_mib`.
    PatchedByQemu {
        /// Guest memory in MiB (`-m`).
        memory_mib: u64,
    },
}

/// What is wrong with the inputs of a direct-boot measurement.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirectBootError {
    /// The kernel is shorter than its setup header.
    #[error("kernel: {0} bytes, shorter than a setup header (0x260 bytes)")]
    KernelTooShort(usize),
    /// The kernel has no `HdrS` magic at 0x202: QEMU would not load it as a Linux kernel.
    #[error("kernel: no Linux boot protocol header (no \"HdrS\" at 0x202)")]
    NoSetupHeader,
    /// The boot protocol is older than 2.00 and cannot take an initramfs.
    #[error("kernel: boot protocol {0:#06x} is older than 2.00 and cannot take an initramfs")]
    ProtocolTooOld(u16),
    /// The initramfs does not fit below QEMU's initramfs limit.
    #[error("initramfs: {size} bytes do not fit below QEMU's limit {max:#x}")]
    InitrdTooLarge {
        /// Its size.
        size: u64,
        /// The highest address QEMU would load it at.
        max: u64,
    },
    /// The guest memory leaves no room for the ACPI data.
    #[error("guest memory {0} MiB leaves no room below 4 GiB for QEMU's ACPI data")]
    MemoryTooSmall(u64),
    /// The kernel is not a PE image TDVF could start.
    #[error("kernel: {0}")]
    Pe(#[from] crate::pe::PeError),
}

/// One event of the computed log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootEvent {
    /// The RTMR it extends (1 or 2).
    pub rtmr: u8,
    /// Its TCG event type.
    pub event_type: &'static str,
    /// What was measured, and by whom.
    pub what: String,
    /// The SHA-384 digest extended.
    pub digest: Mr,
}

/// The computed log and the RTMR values it folds to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectBoot {
    /// The events of RTMR1 then RTMR2, each in log order.
    pub events: Vec<BootEvent>,
    /// RTMR1: the kernel and the firmware's boot actions.
    pub rtmr1: Mr,
    /// RTMR2: the command line and the initramfs, as the kernel's EFI stub measures them.
    pub rtmr2: Mr,
}

fn sha384(data: &[u8]) -> Mr {
    Sha384::digest(data).into()
}

/// RTMR = SHA-384(RTMR || digest) from zero, over `digests` in order.
pub fn fold(digests: impl IntoIterator<Item = Mr>) -> Mr {
    let mut r = [0u8; 48];
    for d in digests {
        let mut h = Sha384::new();
        h.update(r);
        h.update(d);
        r = h.finalize().into();
    }
    r
}

/// The kernel's load options as OVMF hands them to the EFI stub: the command line with
/// [`OVMF_INITRD_SUFFIX`] when there is an initramfs, as UTF-16LE with its NUL terminator.
pub fn load_options(cmdline: &str, initrd: bool) -> Vec<u8> {
    let full = if initrd {
        format!("{cmdline}{OVMF_INITRD_SUFFIX}")
    } else {
        cmdline.to_owned()
    };
    let mut out: Vec<u8> = full.encode_utf16().flat_map(u16::to_le_bytes).collect();
    out.extend([0, 0]);
    out
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The kernel as QEMU 10.1 hands it to the firmware of a guest with `memory_mib` of memory and an initramfs of
/// `initrd_len` bytes: the setup header gets the loader type, CAN_USE_HEAP and the heap end, the command line
/// address, a `vga=` mode, and the initramfs address and size (hw/i386/x86-common.c, `x86_load_linux`). Only
/// the first 8 KiB, QEMU's header buffer, can change.
pub fn qemu_patched_kernel(
    kernel: &[u8],
    cmdline: &str,
    initrd_len: u64,
    memory_mib: u64,
) -> Result<Vec<u8>, DirectBootError> {
    if kernel.len() < 0x260 {
        return Err(DirectBootError::KernelTooShort(kernel.len()));
    }
    if u32_at(kernel, 0x202) != 0x5372_6448 {
        return Err(DirectBootError::NoSetupHeader);
    }
    let mut k = kernel.to_vec();
    let protocol = u16_at(&k, 0x206);
    if protocol < 0x200 {
        return Err(DirectBootError::ProtocolTooOld(protocol));
    }
    // QEMU aligns the command line's size to 16 bytes "as a paranoia measure" (strlen + 16, rounded down).
    let cmdline_size = ((cmdline.len() as u64) + 16) & !15;
    let (real_addr, cmdline_addr) = if k[0x211] & 0x01 == 0 || protocol < 0x202 {
        (0x90000u64, 0x9a000 - cmdline_size)
    } else {
        (0x10000u64, 0x20000u64)
    };
    // q35: 2 GiB below 4 GiB from 2816 MiB of memory up, all of it below that.
    let memory = memory_mib << 20;
    let below_4g = if memory >= 0xB000_0000 {
        0x8000_0000
    } else {
        memory
    };
    let top = below_4g
        .checked_sub(QEMU_ACPI_DATA_SIZE)
        .filter(|&t| t > 0)
        .ok_or(DirectBootError::MemoryTooSmall(memory_mib))?;
    let mut initrd_max: u64 = if protocol >= 0x20c && u16_at(&k, 0x236) & (1 << 1) != 0 {
        u64::from(u32::MAX)
    } else if protocol >= 0x203 {
        u64::from(u32_at(&k, 0x22c))
    } else {
        0x37ff_ffff
    };
    if initrd_max >= top {
        initrd_max = top - 1;
    }
    if protocol >= 0x202 {
        k[0x228..0x22c].copy_from_slice(&(cmdline_addr as u32).to_le_bytes());
    } else {
        k[0x20..0x22].copy_from_slice(&0xA33Fu16.to_le_bytes());
        k[0x22..0x24].copy_from_slice(&((cmdline_addr - real_addr) as u16).to_le_bytes());
    }
    if let Some(mode) = vga_mode(cmdline) {
        k[0x1fa..0x1fc].copy_from_slice(&mode.to_le_bytes());
    }
    k[0x210] = 0xB0;
    if protocol >= 0x201 {
        k[0x211] |= 0x80;
        let heap_end = (cmdline_addr - real_addr - 0x200) as u16;
        k[0x224..0x226].copy_from_slice(&heap_end.to_le_bytes());
    }
    if initrd_len >= initrd_max {
        return Err(DirectBootError::InitrdTooLarge {
            size: initrd_len,
            max: initrd_max,
        });
    }
    let initrd_addr = (initrd_max - initrd_len) & !4095;
    k[0x218..0x21c].copy_from_slice(&(initrd_addr as u32).to_le_bytes());
    k[0x21c..0x220].copy_from_slice(&(initrd_len as u32).to_le_bytes());
    Ok(k)
}

/// The video mode QEMU writes for a `vga=` parameter (the first one), as QEMU reads it.
fn vga_mode(cmdline: &str) -> Option<u16> {
    let at = cmdline.find("vga=")?;
    let v = &cmdline[at + 4..];
    let word = v.split(' ').next().unwrap_or("");
    if v.starts_with("normal") {
        Some(0xffff)
    } else if v.starts_with("ext") {
        Some(0xfffe)
    } else if v.starts_with("ask") {
        Some(0xfffd)
    } else if let Some(h) = word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
        u16::from_str_radix(h, 16).ok()
    } else {
        word.parse().ok()
    }
}

/// The RTMR1 and RTMR2 events and values of a direct boot of `kernel` with `initrd` and `cmdline` under TDVF.
///
/// RTMR1 (PCR 4 events): the Authenticode SHA-384 of the kernel as loaded ([`KernelBlob`]), then at
/// ReadyToBoot "Calling EFI Application from Boot Option" and the separator, then the two ExitBootServices
/// actions. RTMR2 (PCR 9 events of the Linux EFI stub, 6.10 and later in a TD): the load options
/// ([`load_options`]), then the initramfs.
pub fn direct_boot(
    kernel: &[u8],
    initrd: &[u8],
    cmdline: &str,
    blob: KernelBlob,
) -> Result<DirectBoot, DirectBootError> {
    let (loaded, how) = match blob {
        KernelBlob::AsFile => (kernel.to_vec(), "the kernel file as is".to_owned()),
        KernelBlob::PatchedByQemu { memory_mib } => (
            qemu_patched_kernel(kernel, cmdline, initrd.len() as u64, memory_mib)?,
            format!("the kernel with QEMU 10.1's setup-header patch for {memory_mib} MiB"),
        ),
    };
    let kernel_digest: Mr = crate::pe::authenticode::<Sha384>(&loaded)?
        .try_into()
        .map_err(|_| crate::pe::PeError("SHA-384 digest of the wrong length".into()))?;
    let action = |s: &str| BootEvent {
        rtmr: 1,
        event_type: "EV_EFI_ACTION",
        what: format!("\"{s}\" (TDVF)"),
        digest: sha384(s.as_bytes()),
    };
    let events = vec![
        BootEvent {
            rtmr: 1,
            event_type: "EV_EFI_BOOT_SERVICES_APPLICATION",
            what: format!("PE Authenticode SHA-384 of {how} (TDVF's LoadImage)"),
            digest: kernel_digest,
        },
        action("Calling EFI Application from Boot Option"),
        BootEvent {
            rtmr: 1,
            event_type: "EV_SEPARATOR",
            what: "separator 00000000 (TDVF at ReadyToBoot)".into(),
            digest: sha384(&[0, 0, 0, 0]),
        },
        action("Exit Boot Services Invocation"),
        action("Exit Boot Services Returned with Success"),
        BootEvent {
            rtmr: 2,
            event_type: "EV_EVENT_TAG",
            what: format!(
                "the load options: the command line and \"{OVMF_INITRD_SUFFIX}\" in UTF-16LE with NUL \
                 (Linux EFI stub, LOADED_IMAGE::LoadOptions)"
            ),
            digest: sha384(&load_options(cmdline, true)),
        },
        BootEvent {
            rtmr: 2,
            event_type: "EV_EVENT_TAG",
            what: "SHA-384 of the initramfs (Linux EFI stub, \"Linux initrd\")".into(),
            digest: sha384(initrd),
        },
    ];
    let rtmr = |i: u8| fold(events.iter().filter(|e| e.rtmr == i).map(|e| e.digest));
    Ok(DirectBoot {
        rtmr1: rtmr(1),
        rtmr2: rtmr(2),
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal bzImage-like PE: MZ, the setup header fields QEMU reads, a PE header with no sections.
    fn kernel(protocol: u16, loadflags: u8, xlf: u16) -> Vec<u8> {
        let mut k = vec![0u8; 0x1000];
        k[0..2].copy_from_slice(b"MZ");
        k[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        k[0x80..0x84].copy_from_slice(b"PE\0\0");
        // COFF: no sections, optional header of 0xf0 bytes (PE32+).
        k[0x84 + 16..0x84 + 18].copy_from_slice(&0xf0u16.to_le_bytes());
        k[0x98..0x9a].copy_from_slice(&0x20bu16.to_le_bytes());
        k[0x98 + 60..0x98 + 64].copy_from_slice(&0x400u32.to_le_bytes());
        k[0x1f1] = 1;
        k[0x202..0x206].copy_from_slice(b"HdrS");
        k[0x206..0x208].copy_from_slice(&protocol.to_le_bytes());
        k[0x211] = loadflags;
        k[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        k[0x236..0x238].copy_from_slice(&xlf.to_le_bytes());
        k
    }

    fn u32_of(k: &[u8], at: usize) -> u32 {
        u32_at(k, at)
    }

    #[test]
    fn the_patch_changes_only_the_fields_qemu_writes() {
        let k = kernel(0x20f, 0x01, 0x2);
        let p = qemu_patched_kernel(&k, "console=ttyS0", 0x12345, 4096).expect("test input");
        let changed: Vec<usize> = (0..k.len()).filter(|&i| k[i] != p[i]).collect();
        for i in &changed {
            assert!(
                [
                    0x210, 0x211, 0x218, 0x219, 0x21a, 0x21b, 0x21c, 0x21d, 0x21e, 0x224, 0x225,
                    0x228, 0x229, 0x22a
                ]
                .contains(i),
                "byte {i:#x} changed"
            );
        }
        assert_eq!(p[0x210], 0xB0);
        assert_eq!(p[0x211], 0x81);
        assert_eq!(u32::from(u16_at(&p, 0x224)), 0x20000 - 0x10000 - 0x200);
        assert_eq!(u32_of(&p, 0x228), 0x20000);
        assert_eq!(u32_of(&p, 0x21c), 0x12345);
        // 4096 MiB: 2 GiB below 4 GiB, minus the ACPI data, minus one, minus the size, page aligned.
        assert_eq!(
            u64::from(u32_of(&p, 0x218)),
            (0x8000_0000 - QEMU_ACPI_DATA_SIZE - 1 - 0x12345) & !4095
        );
    }

    #[test]
    fn the_initrd_address_is_the_same_from_2816_mib_up_and_differs_below() {
        let k = kernel(0x20f, 0x01, 0x2);
        let at = |m| {
            u32_of(
                &qemu_patched_kernel(&k, "", 1 << 20, m).expect("test input"),
                0x218,
            )
        };
        assert_eq!(at(QEMU_STABLE_MEMORY_MIB), at(8704));
        assert_eq!(at(QEMU_STABLE_MEMORY_MIB), at(2048));
        assert_ne!(at(QEMU_STABLE_MEMORY_MIB), at(2560));
        assert_ne!(at(1024), at(2560));
    }

    #[test]
    fn without_the_above_4g_flag_the_header_limit_applies() {
        let mut k = kernel(0x20f, 0x01, 0);
        k[0x22c..0x230].copy_from_slice(&0x37ff_ffffu32.to_le_bytes());
        let p = qemu_patched_kernel(&k, "", 4096, 4096).expect("test input");
        assert_eq!(u32_of(&p, 0x218), (0x37ff_ffff - 4096) & !4095);
        // With the flag, the top of memory below 4 GiB applies instead.
        k[0x236] = 0x2;
        let p = qemu_patched_kernel(&k, "", 4096, 4096).expect("test input");
        assert_eq!(
            u64::from(u32_of(&p, 0x218)),
            (0x8000_0000 - QEMU_ACPI_DATA_SIZE - 1 - 4096) & !4095
        );
    }

    #[test]
    fn a_low_kernel_gets_the_command_line_below_0x9a000() {
        let k = kernel(0x201, 0x00, 0);
        let p = qemu_patched_kernel(&k, "abc", 0, 1024).expect("test input");
        assert_eq!(u16_at(&p, 0x20), 0xA33F);
        assert_eq!(u16_at(&p, 0x22), (0x9a000 - 16 - 0x90000) as u16);
        assert_eq!(u16_at(&p, 0x224), (0x9a000 - 16 - 0x90000 - 0x200) as u16);
    }

    #[test]
    fn vga_modes_are_read_as_qemu_reads_them() {
        assert_eq!(vga_mode("quiet vga=normal"), Some(0xffff));
        assert_eq!(vga_mode("vga=ext"), Some(0xfffe));
        assert_eq!(vga_mode("vga=0x318 quiet"), Some(0x318));
        assert_eq!(vga_mode("vga=791"), Some(791));
        assert_eq!(vga_mode("quiet"), None);
        let k = kernel(0x20f, 0x01, 0x2);
        let p = qemu_patched_kernel(&k, "vga=0x318", 0, 4096).expect("test input");
        assert_eq!(u16_at(&p, 0x1fa), 0x318);
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        assert_eq!(
            qemu_patched_kernel(&[0; 16], "", 0, 4096),
            Err(DirectBootError::KernelTooShort(16))
        );
        assert_eq!(
            qemu_patched_kernel(&[0; 0x1000], "", 0, 4096),
            Err(DirectBootError::NoSetupHeader)
        );
        assert_eq!(
            qemu_patched_kernel(&kernel(0x1ff, 0x01, 0), "", 0, 4096),
            Err(DirectBootError::ProtocolTooOld(0x1ff))
        );
        assert!(matches!(
            qemu_patched_kernel(&kernel(0x20f, 0x01, 2), "", 3 << 30, 4096),
            Err(DirectBootError::InitrdTooLarge { .. })
        ));
        assert_eq!(
            qemu_patched_kernel(&kernel(0x20f, 0x01, 2), "", 0, 0),
            Err(DirectBootError::MemoryTooSmall(0))
        );
    }

    #[test]
    fn load_options_are_utf16_with_the_initrd_suffix_and_a_nul() {
        let lo = load_options("a b", true);
        let text: Vec<u16> = lo
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(
            String::from_utf16(&text).expect("test input"),
            "a b initrd=initrd\0"
        );
        assert_eq!(load_options("", false), vec![0, 0]);
    }

    #[test]
    fn the_values_fold_the_events_and_each_input_changes_its_register() {
        let k = kernel(0x20f, 0x01, 0x2);
        let b =
            direct_boot(&k, b"initrd", "console=ttyS0", KernelBlob::AsFile).expect("test input");
        assert_eq!(b.events.len(), 7);
        assert_eq!(b.rtmr1, fold(b.events[..5].iter().map(|e| e.digest)));
        assert_eq!(b.rtmr2, fold(b.events[5..].iter().map(|e| e.digest)));
        assert_eq!(
            b.events[0].digest.to_vec(),
            crate::pe::authenticode::<Sha384>(&k).expect("test input")
        );
        let other_initrd =
            direct_boot(&k, b"initrD", "console=ttyS0", KernelBlob::AsFile).expect("test input");
        assert_eq!(other_initrd.rtmr1, b.rtmr1);
        assert_ne!(other_initrd.rtmr2, b.rtmr2);
        let other_cmdline =
            direct_boot(&k, b"initrd", "console=ttyS1", KernelBlob::AsFile).expect("test input");
        assert_eq!(other_cmdline.rtmr1, b.rtmr1);
        assert_ne!(other_cmdline.rtmr2, b.rtmr2);
        let mut k2 = k.clone();
        k2[0x500] ^= 1;
        let other_kernel =
            direct_boot(&k2, b"initrd", "console=ttyS0", KernelBlob::AsFile).expect("test input");
        assert_ne!(other_kernel.rtmr1, b.rtmr1);
        let patched = direct_boot(
            &k,
            b"initrd",
            "console=ttyS0",
            KernelBlob::PatchedByQemu { memory_mib: 4096 },
        )
        .expect("test input");
        assert_ne!(patched.rtmr1, b.rtmr1);
        assert_eq!(patched.rtmr2, b.rtmr2);
    }
}
