//! The per-attempt nonce of the hosted pool (docs/pool.md): every attempt at a pooled run is bound to its own
//! nonce, derived from the founder's nonce and the attempt number, so evidence of one attempt can never be passed
//! off as another's and a founder can check which attempt the pool delivered.

use sha2::{Digest, Sha512};

/// The domain-separation prefix hashed before the founder's nonce and the attempt number.
pub const POOL_ATTEMPT_DOMAIN: &[u8] = b"fenced-run pool attempt";

/// The nonce of attempt `attempt` (1, 2, ...) of a pooled run whose founder sent `nonce`:
/// SHA-512(`"fenced-run pool attempt"` || nonce || u32 big-endian attempt), truncated to the nonce's length.
/// A nonce of 16 to 64 bytes ([`crate::binding::check_nonce`]) gives one of the same length.
pub fn attempt_nonce(nonce: &[u8], attempt: u32) -> Vec<u8> {
    let mut h = Sha512::new();
    h.update(POOL_ATTEMPT_DOMAIN);
    h.update(nonce);
    h.update(attempt.to_be_bytes());
    let digest = h.finalize();
    digest[..nonce.len().min(digest.len())].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_definition() {
        let nonce = [7u8; 32];
        let mut input = POOL_ATTEMPT_DOMAIN.to_vec();
        input.extend_from_slice(&nonce);
        input.extend_from_slice(&[0, 0, 0, 2]);
        let expected = Sha512::digest(&input);
        assert_eq!(attempt_nonce(&nonce, 2), expected[..32].to_vec());
    }

    #[test]
    fn attempts_and_nonces_differ_and_lengths_are_kept() {
        let nonce = [1u8; 16];
        assert_ne!(attempt_nonce(&nonce, 1), attempt_nonce(&nonce, 2));
        assert_ne!(attempt_nonce(&nonce, 1), attempt_nonce(&[2u8; 16], 1));
        assert_ne!(attempt_nonce(&nonce, 1), nonce.to_vec());
        for len in [16usize, 33, 64] {
            let n = vec![9u8; len];
            assert_eq!(attempt_nonce(&n, 1).len(), len);
            assert!(crate::binding::check_nonce(&attempt_nonce(&n, 3)).is_ok());
        }
    }
}
