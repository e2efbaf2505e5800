//! The optional CRL check on a sim chain: a CRL issued and signed by the ARK that lists the ASK revokes it; one
//! that does not list it passes; one signed by another key, or issued by another name, is itself a failure.
//! The CRL is built here in DER by hand and signed with the sim ARK key from the sim state directory.

use attestation::sim::SimPsp;
use attestation::snp::Product;
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{RandomizedSigner, SignatureEncoding};
use sha2::Sha384;
use std::path::PathBuf;
use verifier_lib::snp::chain::checks;
use verifier_lib::snp::{verify_chain, CertBundle, ChainOptions};
use x509_parser::prelude::{FromDer, X509Certificate};

fn state_dir() -> PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-verifier-lib-tests-sim")
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .iter()
            .copied()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn pss_alg() -> Vec<u8> {
    let oid = tlv(
        0x06,
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a],
    );
    tlv(
        0x30,
        &[oid, attestation::sim::snp::PSS_PARAMS_ARK_ASK.to_vec()].concat(),
    )
}

/// A v2 CRL issued by `issuer` (raw Name DER), listing `serials`, signed with `key`.
fn crl(issuer: &[u8], serials: &[&[u8]], key: &rsa::RsaPrivateKey) -> Vec<u8> {
    let time = tlv(0x17, b"250101000000Z");
    let next = tlv(0x17, b"491231000000Z");
    let mut tbs = [
        tlv(0x02, &[1]),
        pss_alg(),
        issuer.to_vec(),
        time.clone(),
        next,
    ]
    .concat();
    if !serials.is_empty() {
        let entries: Vec<u8> = serials
            .iter()
            .flat_map(|s| tlv(0x30, &[tlv(0x02, s), time.clone()].concat()))
            .collect();
        tbs.extend(tlv(0x30, &entries));
    }
    let tbs = tlv(0x30, &tbs);
    let signer = rsa::pss::SigningKey::<Sha384>::new_with_salt_len(key.clone(), 48);
    let sig = signer
        .sign_with_rng(&mut rsa::rand_core::OsRng, &tbs)
        .to_vec();
    let bits = tlv(0x03, &[&[0u8][..], &sig].concat());
    tlv(0x30, &[tbs, pss_alg(), bits].concat())
}

#[test]
fn crl_revokes_the_intermediate_only_when_genuine() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let (_, certs) = psp
        .sign_report(psp.report_template([0; 48], [0; 64]))
        .expect("sign");
    let bundle = CertBundle::from_der_list(&certs).expect("bundle");
    let ark_key = rsa::RsaPrivateKey::from_pkcs8_der(
        &std::fs::read(state_dir().join("snp/ark.pk8")).expect("ark key"),
    )
    .expect("pkcs8");
    let ask_key = rsa::RsaPrivateKey::from_pkcs8_der(
        &std::fs::read(state_dir().join("snp/ask.pk8")).expect("ask key"),
    )
    .expect("pkcs8");
    let (_, ark) = X509Certificate::from_der(&bundle.ark).expect("ark");
    let (_, ask) = X509Certificate::from_der(&bundle.intermediate).expect("ask");
    let issuer = ark.subject().as_raw();
    let ask_serial = ask.raw_serial();

    let check = |crl_bytes: Vec<u8>| {
        let opts = ChainOptions {
            crl: Some(crl_bytes),
            allow_simulated: true,
            ..ChainOptions::default()
        };
        verify_chain(&bundle, &opts, None).failures
    };
    assert!(
        check(crl(issuer, &[&[0x7f, 0x01]], &ark_key)).is_empty(),
        "a CRL listing another serial"
    );
    assert!(check(crl(issuer, &[], &ark_key)).is_empty(), "an empty CRL");

    let revoked = check(crl(issuer, &[&[0x7f, 0x01], ask_serial], &ark_key));
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert_eq!(revoked[0].check, checks::CRL);
    assert!(
        revoked[0].detail.contains("revoked"),
        "{}",
        revoked[0].detail
    );

    // The same CRL as PEM.
    let der = crl(issuer, &[ask_serial], &ark_key);
    let pem = format!(
        "-----BEGIN X509 CRL-----\n{}\n-----END X509 CRL-----\n",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der)
    );
    let f = check(pem.into_bytes());
    assert!(f.len() == 1 && f[0].detail.contains("revoked"), "{f:?}");

    // Signed by the ASK key instead of the ARK: the CRL itself fails, whatever it lists.
    let forged = check(crl(issuer, &[], &ask_key));
    assert!(
        forged.len() == 1 && forged[0].detail.contains("signature"),
        "{forged:?}"
    );
    // Issued under the ASK's name (and signed with the ARK key): the ASK may not sign CRLs (its key usage has
    // no cRLSign) and the signature does not verify with its key.
    let other = check(crl(ask.subject().as_raw(), &[], &ark_key));
    assert!(
        !other.is_empty()
            && other.iter().all(|f| f.check == checks::CRL)
            && other.iter().any(|f| f.detail.contains("cRLSign")),
        "{other:?}"
    );
    // Issued by a name that is neither the ARK's nor the ASK's.
    let mut foreign_name = issuer.to_vec();
    let n = foreign_name.len();
    foreign_name[n - 1] ^= 0x01;
    let foreign = check(crl(&foreign_name, &[], &ark_key));
    assert!(
        foreign.len() == 1 && foreign[0].detail.contains("neither the ARK"),
        "{foreign:?}"
    );
}

fn pem_of(ders: &[Vec<u8>]) -> Vec<u8> {
    let mut out = String::new();
    for der in ders {
        out.push_str(&format!(
            "-----BEGIN X509 CRL-----\n{}\n-----END X509 CRL-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der)
        ));
    }
    out.into_bytes()
}

fn now() -> u64 {
    time::OffsetDateTime::now_utc().unix_timestamp() as u64
}

#[test]
fn an_expired_or_future_crl_is_a_named_failure_saying_which_date() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let (_, certs) = psp
        .sign_report(psp.report_template([0; 48], [0; 64]))
        .expect("sign");
    let bundle = CertBundle::from_der_list(&certs).expect("bundle");
    let check = |crl_bytes: Vec<u8>| {
        let opts = ChainOptions {
            crl: Some(crl_bytes),
            allow_simulated: true,
            ..ChainOptions::default()
        };
        verify_chain(&bundle, &opts, None).failures
    };
    let day = 86_400;
    // Expired in 2001, as in the issue.
    let expired = psp
        .ark_crl_der(978_307_200, 978_307_200 + 30 * day, &[])
        .expect("crl");
    let f = check(expired);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].check, checks::CRL_NEXT_UPDATE);
    assert!(
        f[0].detail.contains("2001-01-31T00:00:00Z"),
        "{}",
        f[0].detail
    );
    let future = psp
        .ark_crl_der(now() + 10 * day, now() + 40 * day, &[])
        .expect("crl");
    let f = check(future);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].check, checks::CRL_THIS_UPDATE);
    let current = psp.ark_crl_der(now() - day, now() + day, &[]).expect("crl");
    assert!(check(current).is_empty());
}

#[test]
fn every_crl_of_a_pem_file_is_read() {
    let psp = SimPsp::new(&state_dir(), Product::Milan).expect("sim psp");
    let (_, certs) = psp
        .sign_report(psp.report_template([0; 48], [0; 64]))
        .expect("sign");
    let bundle = CertBundle::from_der_list(&certs).expect("bundle");
    let (_, ask) = X509Certificate::from_der(&bundle.intermediate).expect("ask");
    let day = 86_400;
    let clean = psp.ark_crl_der(now() - day, now() + day, &[]).expect("crl");
    let revoking = psp
        .ark_crl_der(now() - day, now() + day, &[ask.raw_serial()])
        .expect("crl");
    let opts = |crl: Vec<u8>| ChainOptions {
        crl: Some(crl),
        allow_simulated: true,
        ..ChainOptions::default()
    };
    // The revoking CRL second: reading only the first would accept the revoked ASK.
    let f = verify_chain(&bundle, &opts(pem_of(&[clean.clone(), revoking])), None).failures;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].check, checks::CRL);
    assert!(
        f[0].detail.starts_with("CRL 2 of 2") && f[0].detail.contains("revoked"),
        "{}",
        f[0].detail
    );
    assert!(
        verify_chain(&bundle, &opts(pem_of(&[clean.clone(), clean])), None)
            .failures
            .is_empty()
    );
    // A PEM block that is not a CRL is refused, not skipped.
    let mut mixed = pem_of(&[psp.ark_crl_der(now() - day, now() + day, &[]).expect("crl")]);
    mixed.extend_from_slice(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    let f = verify_chain(&bundle, &opts(mixed), None).failures;
    assert!(f.len() == 1 && f[0].check == checks::CRL, "{f:?}");
}
