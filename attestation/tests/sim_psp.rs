//! Sim PSP: the chain verifies, the VCEK carries the report's TCB and chip ID in AMD's exact encoding (compared
//! with real AMD certificates from the vectors), and the state directory is reused or regenerated as it should.

use attestation::sim::snp::{hwid_len, oid, PSS_PARAMS_ARK_ASK, PSS_PARAMS_VCEK, SIM_ORGANIZATION};
use attestation::sim::{process_launch_measurement, SimPsp, SimSnpTee};
use attestation::snp::{AttestationReport, GuestPolicy, Product, TcbParts, TcbVersion};
use attestation::tee::Tee;
use der::{Decode, DecodePem, Encode, Tagged};
use sha2::{Digest, Sha384};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use x509_cert::Certificate;

/// One state directory per test process (RSA-4096 generation happens once).
fn shared_state() -> &'static Path {
    // Under the target's own temporary directory, not a TempDir in a static: statics are never dropped, so
    // a TempDir there would be left in /tmp by every run.
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("fenced-run-attestation-sim-psp-tests-sim")
    })
}

fn vectors() -> Option<PathBuf> {
    attestation::vectors::dir("snp").map(|_| attestation::vectors::root())
}

fn cn(name: &x509_cert::name::Name) -> String {
    for rdn in name.0.iter() {
        for atv in rdn.0.iter() {
            if atv.oid == der::oid::db::rfc4519::CN {
                return String::from_utf8_lossy(atv.value.value()).into_owned();
            }
        }
    }
    String::new()
}

fn name_shape(name: &x509_cert::name::Name) -> Vec<(String, der::Tag)> {
    name.0
        .iter()
        .flat_map(|rdn| {
            rdn.0
                .iter()
                .map(|a| (a.oid.to_string(), a.value.tag()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn pss_verifies(issuer: &Certificate, cert: &Certificate) -> bool {
    use rsa::pkcs8::DecodePublicKey;
    let spki = issuer
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .expect("spki");
    let key = rsa::RsaPublicKey::from_public_key_der(&spki).expect("rsa key");
    let sig = rsa::pss::Signature::try_from(cert.signature.raw_bytes()).expect("sig");
    let tbs = cert.tbs_certificate.to_der().expect("tbs");
    rsa::signature::Verifier::verify(&rsa::pss::VerifyingKey::<Sha384>::new(key), &tbs, &sig)
        .is_ok()
}

fn ext_value(cert: &Certificate, o: der::oid::ObjectIdentifier) -> Option<&[u8]> {
    cert.tbs_certificate
        .extensions
        .as_ref()?
        .iter()
        .find(|e| e.extn_id == o)
        .map(|e| e.extn_value.as_bytes())
}

fn spl(cert: &Certificate, o: der::oid::ObjectIdentifier) -> u8 {
    let v = ext_value(cert, o).unwrap_or_else(|| panic!("extension {o} missing"));
    u8::from_der(v).expect("SPL is a DER INTEGER")
}

fn check_signed(psp: &SimPsp, report: &[u8], certs: &[Vec<u8>]) -> AttestationReport {
    let product = psp.product();
    let parsed = AttestationReport::from_bytes(report).expect("sim report parses");
    assert_eq!(
        parsed.to_bytes().as_slice(),
        report,
        "byte-exact round trip"
    );
    assert_eq!(certs.len(), 3);
    let vcek = Certificate::from_der(&certs[0]).expect("vcek");
    let ask = Certificate::from_der(&certs[1]).expect("ask");
    let ark = Certificate::from_der(&certs[2]).expect("ark");
    assert!(pss_verifies(&ark, &ark), "ARK self-signature");
    assert!(pss_verifies(&ark, &ask), "ASK by ARK");
    assert!(pss_verifies(&ask, &vcek), "VCEK by ASK");
    assert_eq!(
        cn(&ark.tbs_certificate.subject),
        format!("ARK-{}", product.name())
    );
    assert_eq!(
        cn(&ask.tbs_certificate.subject),
        format!("SEV-{}", product.name())
    );
    assert_eq!(
        cn(&vcek.tbs_certificate.issuer),
        format!("SEV-{}", product.name())
    );
    assert_eq!(cn(&vcek.tbs_certificate.subject), "SEV-VCEK");
    assert_eq!(vcek.tbs_certificate.serial_number.as_bytes(), &[0]);
    // The report signature verifies with the VCEK key.
    let point = vcek
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    let vk = p384::ecdsa::VerifyingKey::from_sec1_bytes(point).expect("P-384 VCEK");
    let sig =
        p384::ecdsa::Signature::from_scalars(parsed.signature.r_be(), parsed.signature.s_be())
            .expect("sig");
    signature::Verifier::verify(&vk, &parsed.signed_bytes(), &sig).expect("report signature");
    // The TCB extensions are the REPORTED_TCB, hwID is the CHIP_ID.
    let tcb = parsed.reported_tcb.decode(product);
    assert_eq!(spl(&vcek, oid::BL_SPL), tcb.bootloader);
    assert_eq!(spl(&vcek, oid::TEE_SPL), tcb.tee);
    assert_eq!(spl(&vcek, oid::SNP_SPL), tcb.snp);
    assert_eq!(spl(&vcek, oid::UCODE_SPL), tcb.microcode);
    if let Some(fmc) = tcb.fmc {
        assert_eq!(spl(&vcek, oid::FMC_SPL), fmc);
    } else {
        assert!(ext_value(&vcek, oid::FMC_SPL).is_none());
    }
    assert_eq!(
        ext_value(&vcek, oid::HW_ID),
        Some(&parsed.chip_id[..hwid_len(product)])
    );
    parsed
}

#[test]
fn sim_reports_verify_for_every_product() {
    for product in Product::ALL {
        let psp = SimPsp::new(shared_state(), product).expect("psp");
        let template = psp.report_template([0x11; 48], [0x22; 64]);
        let (report, certs) = psp.sign_report(template.clone()).expect("sign");
        let parsed = check_signed(&psp, &report, &certs);
        assert_eq!(parsed.measurement, [0x11; 48]);
        assert_eq!(parsed.report_data, [0x22; 64]);
        assert_eq!(
            parsed.product_from_cpuid(),
            Some(product),
            "CPUID names {product}"
        );
        assert_eq!(parsed.version, if product.has_fmc() { 5 } else { 3 });
    }
}

#[test]
fn caller_chosen_fields_are_kept_and_certified() {
    let psp = SimPsp::new(shared_state(), Product::Genoa).expect("psp");
    let mut r = psp.report_template([0x33; 48], [0x44; 64]);
    r.policy = GuestPolicy((1 << 17) | (1 << 19));
    r.vmpl = 2;
    r.guest_svn = 7;
    r.host_data = [0x55; 32];
    r.reported_tcb = TcbVersion::from_parts(
        Product::Genoa,
        TcbParts {
            fmc: None,
            bootloader: 200,
            tee: 1,
            snp: 130,
            microcode: 255,
        },
    );
    r.chip_id = [0x66; 64];
    let (report, certs) = psp.sign_report(r.clone()).expect("sign");
    let parsed = check_signed(&psp, &report, &certs);
    assert_eq!(parsed.policy, r.policy);
    assert_eq!(parsed.vmpl, 2);
    assert_eq!(parsed.guest_svn, 7);
    assert_eq!(parsed.host_data, [0x55; 32]);
    assert_eq!(parsed.chip_id, [0x66; 64]);
    // A different TCB gets a different VCEK.
    let (_, other) = psp
        .sign_report(psp.report_template([0; 48], [0; 64]))
        .expect("sign");
    assert_ne!(other[0], certs[0]);
}

#[test]
fn tampered_sim_report_fails_its_signature() {
    let psp = SimPsp::new(shared_state(), Product::Milan).expect("psp");
    let (mut report, certs) = psp
        .sign_report(psp.report_template([1; 48], [2; 64]))
        .expect("sign");
    report[0x90] ^= 1;
    let parsed = AttestationReport::from_bytes(&report).expect("parses");
    let vcek = Certificate::from_der(&certs[0]).expect("vcek");
    let vk = p384::ecdsa::VerifyingKey::from_sec1_bytes(
        vcek.tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .raw_bytes(),
    )
    .expect("key");
    let sig =
        p384::ecdsa::Signature::from_scalars(parsed.signature.r_be(), parsed.signature.s_be())
            .expect("sig");
    assert!(signature::Verifier::verify(&vk, &parsed.signed_bytes(), &sig).is_err());
}

#[test]
fn sim_tee_binds_report_data_and_measurement() {
    let psp = SimPsp::new(shared_state(), Product::Turin).expect("psp");
    let tee = SimSnpTee::new(psp, [0x77; 48]).with_host_data([0x12; 32]);
    assert_eq!(tee.label(), attestation::evidence::TeeLabel::SimSevSnp);
    let raw = tee.get_report(&[0x88; 64]).expect("report");
    let parsed = check_signed(tee.psp(), &raw.report, &raw.certs);
    assert_eq!(parsed.report_data, [0x88; 64]);
    assert_eq!(parsed.measurement, [0x77; 48]);
    assert_eq!(parsed.host_data, [0x12; 32]);
    assert!(raw.collateral.is_none());
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn state_is_reused_when_present_and_regenerated_when_missing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = SimPsp::new(dir.path(), Product::Milan).expect("first");
    let tcb = a.default_tcb();
    let vcek_a = a.vcek_der(&a.chip_id(), tcb).expect("vcek");
    let b = SimPsp::new(dir.path(), Product::Milan).expect("second");
    assert_eq!(a.ark_der(), b.ark_der(), "ARK reused");
    assert_eq!(a.ask_der(), b.ask_der(), "ASK reused");
    assert_eq!(a.chip_id(), b.chip_id(), "chip ID reused");
    assert_eq!(
        b.vcek_der(&b.chip_id(), tcb).expect("vcek"),
        vcek_a,
        "VCEK reused"
    );
    for f in files_under(dir.path()) {
        let mode = std::fs::metadata(&f).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", f.display());
        assert!(
            !f.file_name()
                .expect("name")
                .to_string_lossy()
                .contains(".tmp."),
            "leftover {}",
            f.display()
        );
    }

    // A missing VCEK is issued again (new key), the roots stay.
    for f in files_under(&dir.path().join("snp/milan")) {
        if f.file_name()
            .expect("name")
            .to_string_lossy()
            .starts_with("vcek-")
        {
            std::fs::remove_file(f).expect("rm");
        }
    }
    let c = SimPsp::new(dir.path(), Product::Milan).expect("third");
    assert_eq!(c.ark_der(), a.ark_der());
    let vcek_c = c.vcek_der(&c.chip_id(), tcb).expect("vcek");
    assert_ne!(vcek_c, vcek_a, "VCEK regenerated");

    // A missing ASK certificate is reissued for the same ASK key, and VCEKs under it are reissued.
    std::fs::remove_file(dir.path().join("snp/milan/ask.der")).expect("rm ask");
    let d = SimPsp::new(dir.path(), Product::Milan).expect("fourth");
    let spki = |der: &[u8]| {
        Certificate::from_der(der)
            .expect("cert")
            .tbs_certificate
            .subject_public_key_info
    };
    assert_ne!(d.ask_der(), a.ask_der());
    assert_eq!(spki(d.ask_der()), spki(a.ask_der()));
    let vcek_d = d.vcek_der(&d.chip_id(), tcb).expect("vcek");
    assert_ne!(vcek_d, vcek_c);
    let (report, certs) = d
        .sign_report(d.report_template([0; 48], [0; 64]))
        .expect("sign");
    check_signed(&d, &report, &certs);

    // A missing root key regenerates the chain: new ASK key, everything reissued.
    std::fs::remove_file(dir.path().join("snp/ask.pk8")).expect("rm ask key");
    let e = SimPsp::new(dir.path(), Product::Milan).expect("fifth");
    assert_ne!(spki(e.ask_der()), spki(a.ask_der()));
    assert_eq!(spki(e.ark_der()), spki(a.ark_der()));
    let (report, certs) = e
        .sign_report(e.report_template([0; 48], [0; 64]))
        .expect("sign");
    check_signed(&e, &report, &certs);

    // A corrupt key file is an error that names it.
    std::fs::write(dir.path().join("snp/ark.pk8"), b"garbage").expect("write");
    let err = SimPsp::new(dir.path(), Product::Milan).expect_err("corrupt");
    assert!(err.to_string().contains("ark.pk8"), "{err}");
}

/// Finds every real VCEK in the vectors (not VLEKs: they carry a csp_id, not a hwID).
fn real_vceks(vectors: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for base in [vectors.join("snp"), vectors.join("snp/chain-only")] {
        for e in std::fs::read_dir(&base).expect("read vectors").flatten() {
            let p = e.path().join("vcek.der");
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_file() && !name.contains("-neg-") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn vcek_profile_matches_real_amd_certificates() {
    let Some(vectors) = vectors() else { return };
    let paths = real_vceks(&vectors);
    assert!(
        paths.len() >= 5,
        "expected real VCEKs, found {}",
        paths.len()
    );
    let mut products_seen = std::collections::BTreeSet::new();
    let mut same_alg_as_current_kds = false;
    for path in paths {
        let real =
            Certificate::from_der(&std::fs::read(&path).expect("read")).expect("real VCEK parses");
        let issuer = cn(&real.tbs_certificate.issuer);
        let product = Product::from_name(&issuer)
            .unwrap_or_else(|| panic!("{}: issuer {issuer}", path.display()));
        products_seen.insert(product.name());
        // Rebuild the TCB and chip ID the real certificate was issued for, and have the sim issue the same.
        let parts = TcbParts {
            fmc: product.has_fmc().then(|| spl(&real, oid::FMC_SPL)),
            bootloader: spl(&real, oid::BL_SPL),
            tee: spl(&real, oid::TEE_SPL),
            snp: spl(&real, oid::SNP_SPL),
            microcode: spl(&real, oid::UCODE_SPL),
        };
        let tcb = TcbVersion::from_parts(product, parts);
        let hwid = ext_value(&real, oid::HW_ID).expect("hwID");
        let mut chip = [0u8; 64];
        chip[..hwid.len()].copy_from_slice(hwid);
        let psp = SimPsp::new(shared_state(), product).expect("psp");
        let sim = Certificate::from_der(&psp.vcek_der(&chip, tcb).expect("sim vcek"))
            .expect("sim parses");
        let what = path.display();
        // Every extension: same OID, same criticality, same value bytes, same order.
        let exts = |c: &Certificate| -> Vec<(String, bool, Vec<u8>)> {
            c.tbs_certificate
                .extensions
                .as_ref()
                .expect("extensions")
                .iter()
                .map(|e| {
                    (
                        e.extn_id.to_string(),
                        e.critical,
                        e.extn_value.as_bytes().to_vec(),
                    )
                })
                .collect()
        };
        assert_eq!(exts(&sim), exts(&real), "{what}: extensions differ");
        // The signature AlgorithmIdentifier, inside and outside the TBS, byte for byte.
        // AMD's key server writes the PSS trailer field explicitly on VCEKs issued before late 2024 and omits
        // it since; the sim issues the current form and the real one must be one of the two.
        let real_alg = real.signature_algorithm.to_der().expect("der");
        assert_eq!(
            real_alg,
            real.tbs_certificate.signature.to_der().expect("der"),
            "{what}: algs agree"
        );
        let alg = |params: &[u8]| {
            let mut v = vec![0x30, (11 + params.len()) as u8, 0x06, 0x09];
            v.extend_from_slice(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a]);
            v.extend_from_slice(params);
            v
        };
        assert!(
            real_alg == alg(&PSS_PARAMS_VCEK) || real_alg == alg(&PSS_PARAMS_ARK_ASK),
            "{what}: real algorithm is neither known AMD form"
        );
        same_alg_as_current_kds |= real_alg == alg(&PSS_PARAMS_VCEK);
        assert_eq!(
            sim.signature_algorithm.to_der().expect("der"),
            alg(&PSS_PARAMS_VCEK),
            "{what}: sim alg"
        );
        assert_eq!(
            sim.tbs_certificate.signature.to_der().expect("der"),
            alg(&PSS_PARAMS_VCEK)
        );
        assert_eq!(sim.tbs_certificate.version, real.tbs_certificate.version);
        assert_eq!(
            sim.tbs_certificate.serial_number, real.tbs_certificate.serial_number,
            "{what}: serial"
        );
        assert_eq!(
            name_shape(&sim.tbs_certificate.issuer),
            name_shape(&real.tbs_certificate.issuer),
            "{what}"
        );
        assert_eq!(
            name_shape(&sim.tbs_certificate.subject),
            name_shape(&real.tbs_certificate.subject),
            "{what}"
        );
        assert_eq!(
            cn(&sim.tbs_certificate.subject),
            cn(&real.tbs_certificate.subject)
        );
        assert_eq!(
            cn(&sim.tbs_certificate.issuer),
            cn(&real.tbs_certificate.issuer)
        );
        assert_eq!(
            sim.tbs_certificate.subject_public_key_info.algorithm,
            real.tbs_certificate.subject_public_key_info.algorithm,
            "{what}: key type"
        );
        let o = sim
            .tbs_certificate
            .subject
            .0
            .iter()
            .flat_map(|r| r.0.iter())
            .find(|a| a.oid == der::oid::db::rfc4519::O);
        assert_eq!(
            o.map(|a| a.value.value()),
            Some(SIM_ORGANIZATION.as_bytes()),
            "sim is marked in O"
        );
    }
    assert!(
        products_seen.contains("Milan")
            && products_seen.contains("Genoa")
            && products_seen.contains("Turin")
    );
    assert!(
        same_alg_as_current_kds,
        "no real VCEK uses the sim's (current) algorithm encoding"
    );
}

#[test]
fn ark_and_ask_profile_matches_real_amd_roots() {
    let Some(vectors) = vectors() else { return };
    for product in Product::ALL {
        let dir = vectors
            .join("snp/roots")
            .join(product.name().to_lowercase());
        let psp = SimPsp::new(shared_state(), product).expect("psp");
        for (file, sim_der) in [("ark.pem", psp.ark_der()), ("ask.pem", psp.ask_der())] {
            let real = Certificate::from_pem(std::fs::read(dir.join(file)).expect("read root"))
                .expect("root");
            let sim = Certificate::from_der(sim_der).expect("sim");
            let what = format!("{product} {file}");
            assert_eq!(
                sim.signature_algorithm.to_der().expect("der"),
                real.signature_algorithm.to_der().expect("der"),
                "{what}: signatureAlgorithm"
            );
            let shape = |c: &Certificate| -> Vec<(String, bool)> {
                c.tbs_certificate
                    .extensions
                    .as_ref()
                    .expect("extensions")
                    .iter()
                    .map(|e| (e.extn_id.to_string(), e.critical))
                    .collect()
            };
            assert_eq!(
                shape(&sim),
                shape(&real),
                "{what}: extension OIDs/criticality"
            );
            for o in [
                der::oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
                der::oid::db::rfc5280::ID_CE_KEY_USAGE,
            ] {
                assert_eq!(ext_value(&sim, o), ext_value(&real, o), "{what}: {o}");
            }
            assert_eq!(
                cn(&sim.tbs_certificate.subject),
                cn(&real.tbs_certificate.subject),
                "{what}"
            );
            assert_eq!(
                cn(&sim.tbs_certificate.issuer),
                cn(&real.tbs_certificate.issuer),
                "{what}"
            );
            assert_eq!(
                name_shape(&sim.tbs_certificate.subject),
                name_shape(&real.tbs_certificate.subject)
            );
            assert_eq!(
                sim.tbs_certificate.subject_public_key_info.algorithm,
                real.tbs_certificate.subject_public_key_info.algorithm
            );
        }
    }
}

#[test]
fn process_launch_measurement_definition() {
    let binary = b"\x7fELF pretend agent";
    let mut h = Sha384::new();
    h.update(b"fenced-run/v1/sim-process-launch");
    h.update(Sha384::digest(binary));
    let expect: [u8; 48] = h.finalize().into();
    assert_eq!(process_launch_measurement(binary), expect);
    assert_ne!(process_launch_measurement(b"other"), expect);
}
