//! The trust anchors against the real root certificates: each AMD ARK (Milan, Genoa, Turin) hashes to the SPKI
//! pin of its product, signs itself, and signs its ASK and ASVK; the Intel SGX Root CA hashes to its pin and
//! signs itself. A root of one product must not pin as another nor sign another product's ASK.

use attestation::snp::Product;
use verifier_lib::snp::certs::parse_cert;
use verifier_lib::snp::chain::{
    pinned_product, spki_sha256, verify_pss_signature, ARK_SPKI_SHA256,
};
use verifier_lib::tdx::x509::{parse_pem_chain, INTEL_SGX_ROOT_CA_SPKI_SHA256};

fn pem_der(path: &std::path::Path) -> Vec<u8> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pem.contents
}

#[test]
fn amd_arks_match_their_pins_and_sign_themselves_their_ask_and_asvk() {
    let Some(snp) = attestation::vectors::dir("snp") else {
        return;
    };
    let products = [
        ("milan", Product::Milan),
        ("genoa", Product::Genoa),
        ("turin", Product::Turin),
    ];
    let ders: Vec<[Vec<u8>; 3]> = products
        .iter()
        .map(|(dir, _)| {
            let d = snp.join("roots").join(dir);
            ["ark.pem", "ask.pem", "asvk.pem"].map(|f| pem_der(&d.join(f)))
        })
        .collect();
    for (i, (dir, product)) in products.iter().enumerate() {
        let [ark, ask, asvk] = &ders[i];
        let ark = parse_cert(ark, "ARK").expect("ARK parses");
        let ask = parse_cert(ask, "ASK").expect("ASK parses");
        let asvk = parse_cert(asvk, "ASVK").expect("ASVK parses");
        let pin = ARK_SPKI_SHA256
            .iter()
            .find(|(p, _)| p == product)
            .map(|(_, h)| *h)
            .expect("a pin for every product");
        assert_eq!(spki_sha256(&ark), pin, "{dir}: ARK SPKI SHA-256");
        assert_eq!(pinned_product(&spki_sha256(&ark)), Some(*product), "{dir}");
        assert_eq!(
            pinned_product(&spki_sha256(&ask)),
            None,
            "{dir}: ASK is no root"
        );
        verify_pss_signature(&ark, &ark)
            .unwrap_or_else(|e| panic!("{dir}: ARK self-signature: {e}"));
        verify_pss_signature(&ask, &ark).unwrap_or_else(|e| panic!("{dir}: ASK under ARK: {e}"));
        verify_pss_signature(&asvk, &ark).unwrap_or_else(|e| panic!("{dir}: ASVK under ARK: {e}"));
        // Another product's ARK signs neither this ASK nor this ARK.
        let other = &ders[(i + 1) % products.len()];
        let other_ark = parse_cert(&other[0], "other ARK").expect("parses");
        assert!(
            verify_pss_signature(&ask, &other_ark).is_err(),
            "{dir}: ASK verified under {}'s ARK",
            products[(i + 1) % products.len()].0
        );
        assert!(verify_pss_signature(&ark, &other_ark).is_err(), "{dir}");
    }
}

#[test]
fn intel_sgx_root_ca_matches_its_pin_and_signs_itself() {
    let Some(tdx) = attestation::vectors::dir("tdx") else {
        return;
    };
    let path = tdx.join("roots").join("intel_sgx_root_ca.pem");
    let pem = std::fs::read(&path).expect("root pem");
    let chain = parse_pem_chain("Intel SGX Root CA", &pem).expect("parses");
    assert_eq!(chain.len(), 1, "one certificate in {}", path.display());
    let root = &chain[0];
    assert_eq!(
        hex::encode(root.spki_sha256()),
        hex::encode(INTEL_SGX_ROOT_CA_SPKI_SHA256)
    );
    assert!(
        root.subject().contains("Intel SGX Root CA"),
        "{}",
        root.subject()
    );
    root.signed_by(root).expect("self-signed");
}
