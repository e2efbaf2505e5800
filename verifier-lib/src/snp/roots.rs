//! AMD's pinned roots: the SHA-256 of each product's ARK public key, and reading a certificate's against them.
//! Below both [`super::certs`] (which refuses an ARK and an intermediate given in each other's places) and
//! [`super::chain`] (which decides trust).

use attestation::snp::Product;
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;

/// SHA-256 of the SubjectPublicKeyInfo (DER) of AMD's ARK for each product. These public keys are the roots of
/// trust; the certificates are published by AMD's key server and shipped by virtee/sev and go-sev-guest.
pub const ARK_SPKI_SHA256: [(Product, &str); 3] = [
    (
        Product::Milan,
        "9f056bee44377e29308cb5ffa895bdfb62d18881fa6bed8d6f075b0204089cb9",
    ),
    (
        Product::Genoa,
        "429a69c9422aa258ee4d8db5fcda9c6470ef15f8cd5a9cebd6cbc7d90b863831",
    ),
    (
        Product::Turin,
        "4f125410563a2ab9a50356f9243f6fe0b6f73de98603f53f90339c70e9d7ad08",
    ),
];

/// SHA-256 of a certificate's SubjectPublicKeyInfo, hex.
pub fn spki_sha256(cert: &X509Certificate<'_>) -> String {
    hex::encode(Sha256::digest(cert.public_key().raw))
}

/// The product whose pinned ARK has this SPKI hash, if any.
pub fn pinned_product(spki_sha256_hex: &str) -> Option<Product> {
    ARK_SPKI_SHA256
        .iter()
        .find(|(_, h)| *h == spki_sha256_hex)
        .map(|(p, _)| *p)
}
