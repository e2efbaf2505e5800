//! Certificates and CRLs as both verifiers read them: the PEM/DER readers, AMD's KDS extensions and chain
//! checks (with a CRL file), Intel's PEM chain reader, SGX extensions and path validation.
#![no_main]
use verifier_lib::snp::certs::{ders_from_file_bytes, CertBundle};
use verifier_lib::snp::{verify_chain, ChainOptions};
use verifier_lib::tdx::pck::PckExtensions;
use verifier_lib::tdx::x509::parse_pem_chain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Intel: a PEM chain (as in a quote or collateral).
    if let Ok(chain) = parse_pem_chain("fuzz", data) {
        for c in &chain {
            let _ = PckExtensions::from_cert(c);
        }
    }
    // AMD: split the input in three DER certificates and a CRL file at the first three 0xFF 0x00 markers.
    let mut parts = data.splitn(4, |&b| b == 0xFF);
    let (Some(leaf), Some(inter), Some(ark)) = (parts.next(), parts.next(), parts.next()) else {
        let _ = ders_from_file_bytes(data, "fuzz");
        let _ = verifier_lib::pki::crls_from_file_bytes(data);
        return;
    };
    let crl = parts.next().map(<[u8]>::to_vec);
    if let Ok(bundle) = CertBundle::from_der_list(&[leaf.to_vec(), inter.to_vec(), ark.to_vec()]) {
        let opts = ChainOptions {
            at: time::OffsetDateTime::UNIX_EPOCH,
            crl,
            allow_simulated: true,
        };
        let _ = verify_chain(&bundle, &opts, None);
    }
});
