//! The vendors' root certificates whose self-signatures are known good: AMD's ARKs and Intel's SGX Root CA, by the
//! SHA-256 of their exact DER. A root is a trust anchor (RFC 5280 §6.1.1 (d): its key is an input, not something
//! the path proves), so its self-signature proves nothing the pin does not; it is still checked for every root
//! whose bytes are not exactly one of these, and for these it was checked when the hash was added here (the unit
//! test `pinned_roots_self_signatures_verify` checks it again on the vendors' files).

/// SHA-256 of the DER of each vendor root whose self-signature verifies: ARK-Milan, ARK-Genoa, ARK-Turin (AMD KDS
/// `cert_chain`), Intel SGX Root CA (the root of every PCK, TCB Signing and PCK CRL issuer chain).
const VERIFIED_ROOTS_DER_SHA256: [(&str, &str); 4] = [
    (
        "ARK-Milan",
        "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd",
    ),
    (
        "ARK-Genoa",
        "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1",
    ),
    (
        "ARK-Turin",
        "1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a",
    ),
    (
        "Intel SGX Root CA",
        "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3",
    ),
];

/// The name of Intel's root as the output's anchors give it.
pub(crate) const INTEL_ROOT: &str = "Intel SGX Root CA";

/// The anchor of a verified SEV-SNP chain as the output names it: the pinned ARK of the product, the intermediate
/// it signed (ASK for a VCEK, ASVK for a VLEK) and the leaf.
pub(crate) fn amd_chain(product: attestation::snp::Product, vlek: bool) -> String {
    let p = product.name();
    let ark = format!("ARK-{p}");
    let sha = VERIFIED_ROOTS_DER_SHA256
        .iter()
        .find(|(n, _)| *n == ark)
        .map(|(_, h)| format!(", DER SHA-256 {}...", &h[..16]))
        .unwrap_or_default();
    if vlek {
        format!("AMD {ark} (pinned key{sha}) -> ASVK-{p} -> VLEK")
    } else {
        format!("AMD {ark} (pinned key{sha}) -> ASK-{p} -> VCEK")
    }
}

/// Whether `der` is byte for byte one of the vendor roots whose self-signature is known to verify.
pub(crate) fn self_signature_known_good(der: &[u8]) -> bool {
    let h = hex::encode(crate::digest::sha256(&[der]));
    VERIFIED_ROOTS_DER_SHA256.iter().any(|(_, want)| *want == h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// The vendors' roots from the vectors: each listed root's self-signature verifies with the full check, and a
    /// root one byte off is not listed.
    #[test]
    fn pinned_roots_self_signatures_verify() {
        let (Some(roots), Some(tdx)) = (
            attestation::vectors::dir("snp/roots"),
            attestation::vectors::dir("tdx/dcapqvl-v4-b0c06f-uptodate"),
        ) else {
            return;
        };
        let mut seen = std::collections::BTreeSet::new();
        for product in ["milan", "genoa", "turin"] {
            let pem = std::fs::read(roots.join(product).join("ark.pem")).expect("ark.pem");
            let der = x509_parser::pem::parse_x509_pem(&pem)
                .expect("PEM")
                .1
                .contents;
            let (_, ark) = x509_parser::parse_x509_certificate(&der).expect("ARK");
            crate::snp::chain::verify_pss_signature(&ark, &ark).expect("ARK self-signature");
            assert!(self_signature_known_good(&der), "{product}");
            seen.insert(hex::encode(Sha256::digest(&der)));
            let mut off = der.clone();
            let last = off.len() - 1;
            off[last] ^= 1;
            assert!(!self_signature_known_good(&off), "{product}, one bit off");
        }
        let col: serde_json::Value = serde_json::from_slice(
            &std::fs::read(tdx.join("collateral.json")).expect("collateral.json"),
        )
        .expect("JSON");
        let pem = col["tcb_info_issuer_chain"].as_str().expect("chain");
        let chain =
            crate::tdx::x509::parse_pem_chain("TCB Info chain", pem.as_bytes()).expect("chain");
        let root = chain.last().expect("root");
        root.verify_self_signature_fully()
            .expect("root self-signature");
        assert!(self_signature_known_good(root.der()));
        seen.insert(hex::encode(Sha256::digest(root.der())));
        let listed: std::collections::BTreeSet<_> = VERIFIED_ROOTS_DER_SHA256
            .iter()
            .map(|(_, h)| h.to_string())
            .collect();
        assert_eq!(
            seen, listed,
            "every listed root was checked, and only those"
        );
    }
}
