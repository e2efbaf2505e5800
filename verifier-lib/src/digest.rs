//! SHA-256 on the verification path (signature-cache keys, key and root fingerprints, the QE report binding),
//! over ring's implementation. ring checks the TDX signatures, so by the time a hash is taken it has already
//! probed the CPU; hashing with a second library would probe it again, and on the VMs this project runs on every
//! `cpuid` is a trip to the hypervisor of several microseconds (docs/benchmarks.md, "One thread, one static
//! binary").

/// SHA-256 over the concatenation of `parts`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// SHA-256 over the concatenation of `parts` (wasm32: sha2, ring does not build there).
#[cfg(target_arch = "wasm32")]
pub(crate) fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn the_same_digest_as_sha2_over_the_concatenation() {
        let a: Vec<u8> = (0..200u8).collect();
        let b = b"second part";
        let mut h = Sha256::new();
        h.update(&a);
        h.update(b);
        let want: [u8; 32] = h.finalize().into();
        assert_eq!(sha256(&[&a, b]), want);
        assert_eq!(sha256(&[]), <[u8; 32]>::from(Sha256::digest(b"")));
        assert_ne!(sha256(&[&a]), want);
    }
}
