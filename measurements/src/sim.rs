//! The launch measurement of the `vm` isolation tier, which the sim PSP/QE puts in its simulated reports.
//! A plain KVM/TCG guest has no hardware measurement, so the host computes one from the exact kernel,
//! initramfs and command line it launched with; the verifier recomputes it from a measurement set's artifact hashes.

use sha2::{Digest, Sha256, Sha384};

/// Domain string that opens the hashed message, so that no other fenced-run hash can collide with it.
pub const VM_LAUNCH_DOMAIN: &[u8] = b"fenced-run/v1/sim-vm-launch\0";

/// SHA-256 of the kernel command line followed by one NUL byte (the value QEMU puts in the SEV hashes table).
pub fn cmdline_sha256(cmdline: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cmdline.as_bytes());
    h.update([0u8]);
    h.finalize().into()
}

/// The `vm` tier launch measurement from the three artifacts' SHA-256 hashes:
/// SHA-384(VM_LAUNCH_DOMAIN || SHA-256(kernel) || SHA-256(initramfs) || SHA-256(cmdline || NUL)).
pub fn vm_launch_measurement_from_hashes(
    kernel: &[u8; 32],
    initrd: &[u8; 32],
    cmdline: &[u8; 32],
) -> [u8; 48] {
    let mut h = Sha384::new();
    h.update(VM_LAUNCH_DOMAIN);
    h.update(kernel);
    h.update(initrd);
    h.update(cmdline);
    h.finalize().into()
}

/// The `vm` tier launch measurement of the exact kernel, initramfs and command line the host launched.
pub fn vm_launch_measurement(kernel: &[u8], initrd: &[u8], cmdline: &str) -> [u8; 48] {
    vm_launch_measurement_from_hashes(
        &Sha256::digest(kernel).into(),
        &Sha256::digest(initrd).into(),
        &cmdline_sha256(cmdline),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurement_is_the_documented_hash() {
        let mut msg = b"fenced-run/v1/sim-vm-launch\0".to_vec();
        msg.extend_from_slice(&Sha256::digest(b"K"));
        msg.extend_from_slice(&Sha256::digest(b"I"));
        msg.extend_from_slice(&Sha256::digest(b"console=ttyS0\0"));
        let want: [u8; 48] = Sha384::digest(&msg).into();
        assert_eq!(vm_launch_measurement(b"K", b"I", "console=ttyS0"), want);
    }

    #[test]
    fn every_artifact_counts_and_they_cannot_be_swapped() {
        let base = vm_launch_measurement(b"kernel", b"initrd", "quiet");
        assert_ne!(base, vm_launch_measurement(b"kernel!", b"initrd", "quiet"));
        assert_ne!(base, vm_launch_measurement(b"kernel", b"initrd!", "quiet"));
        assert_ne!(base, vm_launch_measurement(b"kernel", b"initrd", "quiet "));
        assert_ne!(base, vm_launch_measurement(b"initrd", b"kernel", "quiet"));
    }
}
