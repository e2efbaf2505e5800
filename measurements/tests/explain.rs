//! `measure-guest explain`: for reports made here with known launch parameters (measurements' own launch digest,
//! which `snp_oracle.rs` and `snp_modes_oracle.rs` hold to sev-snp-measure), the explainer finds the configuration
//! and names how it differs from the image manifest's expected launch; for a near miss outside the search it
//! names the input it can see differs (an OVMF build not given, an image file whose hash is not the manifest's).
//!
//! Real SEV-SNP vectors (../shared/vectors/snp): none has known launch inputs. Their sources published reports
//! and certificates only, never the OVMF, kernel, initrd or command line of the launch (expected.json lists the
//! report fields and chain facts; ../shared/notes has no launch data), so no real report can be explained to a
//! configuration here. `real_vectors_are_read_and_answered_without_a_match` runs each real report through the
//! explainer to check that it is read (the measurement at 0x90, the CPUID of v3+ reports) and answered
//! "no configuration" with exit 1.

use std::path::{Path, PathBuf};
use std::process::Command;

use attestation::vectors::{skip_for, SkipKind};
use measurements::manifest::Artifact;
use measurements::snp::{self, KernelHashes, Ovmf, SnpConfig, VmmType};
use sha2::{Digest, Sha256, Sha384};

const CMDLINE: &str = "console=ttyS0 panic=-1 quiet";
const DEBIAN_OVMF: &str = "/usr/share/ovmf/OVMF.fd";

fn amdsev_ovmf() -> PathBuf {
    attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd")
}

struct Fixture {
    dir: tempfile::TempDir,
    image: PathBuf,
    kernel: Vec<u8>,
    initrd: Vec<u8>,
    amdsev: Ovmf,
    debian: Option<Ovmf>,
}

/// An image directory (kernel, initramfs, manifest.json) whose manifest expects the AmdSev OVMF with 2 vCPUs of
/// EPYC-Milan and guest features 0x1 (QEMU, kernel hashes on).
fn fixture() -> Option<Fixture> {
    if !amdsev_ovmf().exists() {
        skip_for(SkipKind::Vectors, "../shared/firmware OVMF not found");
        return None;
    }
    let amdsev = snp::load_ovmf(&amdsev_ovmf()).expect("AmdSev OVMF");
    let debian = snp::load_ovmf(Path::new(DEBIAN_OVMF)).ok();
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("image");
    std::fs::create_dir(&image).expect("mkdir");
    let kernel: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 253) as u8).collect();
    let initrd: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 241) as u8).collect();
    std::fs::write(image.join("vmlinuz"), &kernel).expect("write");
    std::fs::write(image.join("initramfs.cpio"), &initrd).expect("write");
    let expected = digest(
        &amdsev,
        Some((&kernel, &initrd, CMDLINE)),
        2,
        "EPYC-Milan",
        0x1,
        VmmType::Qemu,
    );
    let manifest = serde_json::json!({
        "format": "fenced-run-image/1",
        "kernel": Artifact::of("vmlinuz", &kernel),
        "initramfs": Artifact::of("initramfs.cpio", &initrd),
        "cmdline": {
            "value": CMDLINE,
            "sha256": hex::encode(Sha256::digest(format!("{CMDLINE}\0"))),
            "sha384": hex::encode(Sha384::digest(format!("{CMDLINE}\0"))),
        },
        "agent": {"path": "/init", "sha256": "00"},
        "included": [],
        "measurements": {
            "vm": "00",
            "sev_snp": [{
                "ovmf_sha256": hex::encode(Sha256::digest(amdsev.data())),
                "vcpus": 2,
                "vcpu_type": "EPYC-Milan",
                "guest_features": 1,
                "measurement": hex::encode(expected),
            }],
        },
    });
    std::fs::write(
        image.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).expect("json"),
    )
    .expect("write manifest");
    Some(Fixture {
        dir,
        image,
        kernel,
        initrd,
        amdsev,
        debian,
    })
}

fn digest(
    ovmf: &Ovmf,
    kernel: Option<(&[u8], &[u8], &str)>,
    vcpus: u32,
    vcpu_type: &str,
    features: u64,
    vmm: VmmType,
) -> [u8; 48] {
    let hashes = kernel.map(|(k, i, c)| KernelHashes::new(k, Some(i), Some(c)));
    let cfg = SnpConfig {
        vcpus,
        vcpu_sig: snp::vcpu_sig_for_type(vcpu_type).expect("type"),
        guest_features: features,
        vmm,
        ovmf_hash: None,
    };
    snp::launch_digest(ovmf, hashes.as_ref(), &cfg).expect("digest")
}

/// A raw version-3 Milan report carrying `measurement` (the explainer reads, it does not verify).
fn report_file(dir: &Path, name: &str, measurement: [u8; 48]) -> PathBuf {
    let mut r = attestation::snp::AttestationReport::new(3);
    r.measurement = measurement;
    r.cpuid = Some(attestation::snp::Cpuid {
        family: 0x19,
        model: 0x01,
        stepping: 0x01,
    });
    let p = dir.join(name);
    std::fs::write(&p, r.to_bytes()).expect("write report");
    p
}

struct Answer {
    code: Option<i32>,
    json: serde_json::Value,
    stderr: String,
}

fn explain(f: &Fixture, input: &Path, extra: &[&str]) -> Answer {
    let out = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .arg("explain")
        .arg(input)
        .arg("--image")
        .arg(&f.image)
        .args(extra)
        .arg("--json")
        .output()
        .expect("run");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Answer {
        code: out.status.code(),
        json,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn differences(a: &Answer) -> Vec<String> {
    a.json["matches"][0]["differs_from_manifest"]
        .as_array()
        .unwrap_or_else(|| panic!("no differences in {:#}", a.json))
        .iter()
        .map(|d| d.as_str().expect("str").to_owned())
        .collect()
}

#[test]
fn finds_known_configurations_and_names_what_differs() {
    let Some(f) = fixture() else { return };
    let amd = amdsev_ovmf().display().to_string();
    let k = Some((&f.kernel[..], &f.initrd[..], CMDLINE));
    let spaced = format!("{CMDLINE} ");
    struct Case {
        name: &'static str,
        ld: [u8; 48],
        vcpus: u64,
        vmm: &'static str,
        vcpu_type: Option<&'static str>,
        features: &'static str,
        hashes: bool,
        differ: &'static [&'static str],
    }
    let mut cases = vec![
        Case {
            name: "the expected launch",
            ld: digest(&f.amdsev, k, 2, "EPYC-Milan", 1, VmmType::Qemu),
            vcpus: 2,
            vmm: "QEMU",
            vcpu_type: Some("EPYC-Milan"),
            features: "0x1",
            hashes: true,
            differ: &[],
        },
        Case {
            name: "Genoa, 7 vCPUs, DebugSwap",
            ld: digest(&f.amdsev, k, 7, "EPYC-Genoa", 0x21, VmmType::Qemu),
            vcpus: 7,
            vmm: "QEMU",
            vcpu_type: Some("EPYC-Genoa"),
            features: "0x21",
            hashes: true,
            differ: &["vCPU type", "guest features", "vCPUs: 7"],
        },
        Case {
            name: "128 vCPUs of EPYC-v4",
            ld: digest(&f.amdsev, k, 128, "EPYC-v4", 1, VmmType::Qemu),
            vcpus: 128,
            vmm: "QEMU",
            vcpu_type: Some("EPYC-v4"),
            features: "0x1",
            hashes: true,
            differ: &["vCPU type", "vCPUs: 128"],
        },
        Case {
            name: "a trailing space on the command line",
            ld: digest(
                &f.amdsev,
                Some((&f.kernel[..], &f.initrd[..], spaced.as_str())),
                3,
                "EPYC-Milan",
                1,
                VmmType::Qemu,
            ),
            vcpus: 3,
            vmm: "QEMU",
            vcpu_type: Some("EPYC-Milan"),
            features: "0x1",
            hashes: true,
            differ: &["command line: with a trailing space", "vCPUs: 3"],
        },
        Case {
            name: "EC2, 5 vCPUs",
            ld: digest(&f.amdsev, k, 5, "EPYC-Milan", 1, VmmType::Ec2),
            vcpus: 5,
            vmm: "ec2",
            vcpu_type: None,
            features: "0x1",
            hashes: true,
            differ: &["VMM: ec2", "vCPUs: 5"],
        },
        Case {
            name: "GCE, 2 vCPUs",
            ld: digest(&f.amdsev, k, 2, "EPYC-Milan", 1, VmmType::Gce),
            vcpus: 2,
            vmm: "gce",
            vcpu_type: None,
            features: "0x1",
            hashes: true,
            differ: &["VMM: gce"],
        },
        Case {
            name: "kernel hashes off",
            ld: digest(&f.amdsev, None, 2, "EPYC-Milan", 1, VmmType::Qemu),
            vcpus: 2,
            vmm: "QEMU",
            vcpu_type: Some("EPYC-Milan"),
            features: "0x1",
            hashes: false,
            differ: &["kernel hashes: off"],
        },
    ];
    if let Some(d) = &f.debian {
        cases.push(Case {
            name: "Debian's OVMF, firmware only, EPYC-Rome",
            ld: digest(d, None, 4, "EPYC-Rome", 1, VmmType::Qemu),
            vcpus: 4,
            vmm: "QEMU",
            vcpu_type: Some("EPYC-Rome"),
            features: "0x1",
            hashes: false,
            differ: &[
                "OVMF: /usr/share/ovmf/OVMF.fd",
                "kernel hashes: off",
                "vCPU type",
                "vCPUs: 4",
            ],
        });
    } else {
        skip_for(
            SkipKind::Vectors,
            "Debian's OVMF.fd not found (apt package ovmf): its case left out",
        );
    }
    let mut ovmf_args = vec!["--ovmf", amd.as_str()];
    if f.debian.is_some() {
        ovmf_args.extend(["--ovmf", DEBIAN_OVMF]);
    }
    for (n, c) in cases.iter().enumerate() {
        let input = report_file(f.dir.path(), &format!("report{n}.bin"), c.ld);
        let a = explain(&f, &input, &ovmf_args);
        assert_eq!(a.code, Some(0), "{}: {:#} {}", c.name, a.json, a.stderr);
        assert_eq!(a.json["matched"], true, "{}", c.name);
        let m = &a.json["matches"];
        assert_eq!(m.as_array().map(Vec::len), Some(1), "{}: {m:#}", c.name);
        let m = &m[0];
        assert_eq!(m["vcpus"], c.vcpus, "{}", c.name);
        assert_eq!(m["vmm_type"], c.vmm, "{}", c.name);
        assert_eq!(m["vcpu_type"], serde_json::json!(c.vcpu_type), "{}", c.name);
        assert_eq!(m["guest_features"], c.features, "{}", c.name);
        assert_eq!(m["kernel_hashes"], c.hashes, "{}", c.name);
        let d = differences(&a);
        assert_eq!(d.len(), c.differ.len(), "{}: {d:?}", c.name);
        for want in c.differ {
            assert!(
                d.iter().any(|x| x.contains(want)),
                "{}: {want:?} not in {d:?}",
                c.name
            );
        }
        assert_eq!(a.json["timed_out"], false);
    }
}

#[test]
fn evidence_file_is_read_like_a_report() {
    let Some(f) = fixture() else { return };
    use attestation::evidence::{Evidence, TeeLabel};
    use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
    let ld = digest(
        &f.amdsev,
        Some((&f.kernel[..], &f.initrd[..], CMDLINE)),
        6,
        "EPYC-Milan",
        0x1,
        VmmType::Qemu,
    );
    let psp = attestation::sim::snp::SimPsp::new(
        &f.dir.path().join("psp"),
        attestation::snp::Product::Genoa,
    )
    .expect("sim psp");
    let (report, certs) = psp
        .sign_report(psp.report_template(ld, [0; 64]))
        .expect("sign");
    let key = p384::ecdsa::SigningKey::from_slice(&Sha384::digest(b"explain")).expect("key");
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::Vm,
        Inputs::default(),
        "test",
    );
    let ev =
        Evidence::seal(TeeLabel::SimSevSnp, report, certs, None, &key, &verdict).expect("seal");
    let p = f.dir.path().join("evidence.cbor");
    std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write");
    let amd = amdsev_ovmf().display().to_string();
    let a = explain(&f, &p, &["--ovmf", &amd]);
    assert_eq!(a.code, Some(0), "{:#} {}", a.json, a.stderr);
    assert_eq!(a.json["input"], "fenced-run evidence");
    assert_eq!(a.json["matches"][0]["vcpus"], 6);
    // The sim Genoa's CPUID (family 0x19 model 0x11 stepping 1) is not EPYC-Genoa's QEMU signature (stepping
    // 0): it is tried as one more type.
    assert!(
        a.json["searched"]
            .as_str()
            .is_some_and(|s| s.contains("host (the report's CPUID)")),
        "{:#}",
        a.json
    );
}

#[test]
fn near_misses_name_the_input_that_differs() {
    let Some(f) = fixture() else { return };
    let amd = amdsev_ovmf().display().to_string();
    // A command line outside the variants: no match; the nearest (the manifest's launch) and what was searched
    // are reported, exit 1.
    let other = format!("{CMDLINE} extra=1");
    let ld = digest(
        &f.amdsev,
        Some((&f.kernel[..], &f.initrd[..], other.as_str())),
        2,
        "EPYC-Milan",
        1,
        VmmType::Qemu,
    );
    let input = report_file(f.dir.path(), "other-cmdline.bin", ld);
    let a = explain(&f, &input, &["--ovmf", &amd, "--max-vcpus", "16"]);
    assert_eq!(a.code, Some(1), "{:#}", a.json);
    assert_eq!(a.json["matched"], false);
    assert_eq!(a.json["expected"][0]["vcpus"], 2);
    assert_eq!(a.json["compared"], a.json["space"]);
    // Given the command line, it is found, and the difference is named.
    let b = explain(
        &f,
        &input,
        &["--ovmf", &amd, "--max-vcpus", "16", "--cmdline", &other],
    );
    assert_eq!(b.code, Some(0), "{:#}", b.json);
    let d = differences(&b);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].contains("given with --cmdline"), "{d:?}");

    // The launch's OVMF is not given: the answer says the manifest's OVMF is not among those searched.
    if Path::new(DEBIAN_OVMF).exists() {
        let ld = digest(
            &f.amdsev,
            Some((&f.kernel[..], &f.initrd[..], CMDLINE)),
            2,
            "EPYC-Milan",
            1,
            VmmType::Qemu,
        );
        let input = report_file(f.dir.path(), "amdsev.bin", ld);
        let a = explain(&f, &input, &["--ovmf", DEBIAN_OVMF, "--max-vcpus", "8"]);
        assert_eq!(a.code, Some(1), "{:#}", a.json);
        let notes = a.json["not_searched"].to_string();
        assert!(
            notes.contains("the manifest's OVMF (sha256")
                && notes.contains(&hex::encode(Sha256::digest(f.amdsev.data()))),
            "{notes}"
        );
        // Debian's OVMF cannot measure a kernel: said, not an error.
        assert!(notes.contains("cannot measure a kernel"), "{notes}");
    }

    // The image's kernel was replaced after the manifest: the file is named.
    std::fs::write(f.image.join("vmlinuz"), b"another kernel").expect("write");
    let a = explain(&f, &input, &["--ovmf", &amd, "--max-vcpus", "4"]);
    assert_eq!(a.code, Some(1));
    let notes = a.json["not_searched"].to_string();
    assert!(notes.contains("vmlinuz: sha256"), "{notes}");
}

#[test]
fn search_is_bounded_in_time() {
    let Some(f) = fixture() else { return };
    let amd = amdsev_ovmf().display().to_string();
    let input = report_file(f.dir.path(), "zero.bin", [0; 48]);
    let a = explain(&f, &input, &["--ovmf", &amd, "--max-seconds", "0"]);
    assert_eq!(a.code, Some(1));
    assert_eq!(a.json["timed_out"], true, "{:#}", a.json);
    assert!(a.json["compared"].as_u64() < a.json["space"].as_u64());
    // A bound past what time can represent is no bound, not a panic.
    let b = explain(
        &f,
        &input,
        &[
            "--ovmf",
            &amd,
            "--max-seconds",
            "18446744073709551615",
            "--max-vcpus",
            "2",
        ],
    );
    assert_eq!(b.code, Some(1), "{}", b.stderr);
    assert_eq!(b.json["timed_out"], false);
}

#[test]
fn unreadable_input_names_the_file() {
    let Some(f) = fixture() else { return };
    let p = f.dir.path().join("junk.bin");
    std::fs::write(&p, b"junk").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .args(["explain"])
        .arg(&p)
        .arg("--image")
        .arg(&f.image)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("junk.bin") && err.contains("4-byte"), "{err}");
}

#[test]
fn real_vectors_are_read_and_answered_without_a_match() {
    let Some(f) = fixture() else { return };
    let root = attestation::vectors::firmware("").join("../vectors/snp");
    let Ok(rd) = std::fs::read_dir(&root) else {
        return skip_for(SkipKind::Vectors, "../shared/vectors/snp not found");
    };
    let amd = amdsev_ovmf().display().to_string();
    let mut n = 0;
    for e in rd.flatten() {
        let report = e.path().join("report.bin");
        let Ok(bytes) = std::fs::read(&report) else {
            continue;
        };
        let a = explain(&f, &report, &["--ovmf", &amd, "--max-vcpus", "4"]);
        assert_eq!(a.code, Some(1), "{}: {:#}", report.display(), a.json);
        assert_eq!(a.json["measurement"], hex::encode(&bytes[0x90..0xC0]));
        n += 1;
    }
    assert!(n > 10, "only {n} real reports");
}

/// A CCEL log: the Spec ID event (SHA-384 only), then `events` as (MR index, event type, digest).
fn ccel(events: &[(u32, u32, [u8; 48])]) -> Vec<u8> {
    let mut spec = b"Spec ID Event03\0".to_vec();
    spec.extend_from_slice(&0u32.to_le_bytes());
    spec.extend_from_slice(&[0, 2, 0, 2]);
    spec.extend_from_slice(&1u32.to_le_bytes());
    spec.extend_from_slice(&0x000Cu16.to_le_bytes());
    spec.extend_from_slice(&48u16.to_le_bytes());
    spec.push(0);
    let mut l = Vec::new();
    l.extend_from_slice(&0u32.to_le_bytes());
    l.extend_from_slice(&3u32.to_le_bytes());
    l.extend_from_slice(&[0; 20]);
    l.extend_from_slice(&(spec.len() as u32).to_le_bytes());
    l.extend_from_slice(&spec);
    for (mr, ty, d) in events {
        l.extend_from_slice(&mr.to_le_bytes());
        l.extend_from_slice(&ty.to_le_bytes());
        l.extend_from_slice(&1u32.to_le_bytes());
        l.extend_from_slice(&0x000Cu16.to_le_bytes());
        l.extend_from_slice(d);
        l.extend_from_slice(&4u32.to_le_bytes());
        l.extend_from_slice(b"data");
    }
    l
}

#[test]
fn tdx_names_the_first_differing_event_and_why() {
    let Some(f) = fixture() else { return };
    let quote = attestation::vectors::firmware("")
        .join("../vectors/tdx/dcapqvl-v4-b0c06f-uptodate/quote.bin");
    if !quote.exists() {
        return skip_for(SkipKind::Vectors, "../shared/vectors/tdx quote not found");
    }
    let (a, k, k_patched, c, i, i_other) = (
        [1u8; 48], [2u8; 48], [3u8; 48], [4u8; 48], [5u8; 48], [6u8; 48],
    );
    // The launch's log: RTMR1 (MR index 2) with the kernel as QEMU 10.1 patched it, RTMR2 (index 3) with
    // another initrd.
    let log = ccel(&[
        (2, 0x8000_0001, a),
        (2, 0x8000_0002, k_patched),
        (3, 0x8000_0001, c),
        (3, 0x8000_0001, i_other),
    ]);
    let log_path = f.dir.path().join("ccel.bin");
    std::fs::write(&log_path, &log).expect("write log");
    let replay = measurements::tdx::replay_rtmrs(&log).expect("replay");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.image.join("manifest.json")).expect("read"))
            .expect("json");
    let ev = |r: u8, what: &str, d: [u8; 48]| serde_json::json!({"rtmr": r, "event_type": "EV_EVENT_TAG", "what": what, "digest": hex::encode(d)});
    m["measurements"]["tdx"] = serde_json::json!({
        "ovmf_sha256": "00",
        "mrtd": hex::encode([0u8; 48]),
        "rtmr_events": [
            ev(1, "\"EFI_LOADER\" (TDVF)", a),
            ev(1, "PE Authenticode SHA-384 of the kernel (TDVF's LoadImage)", k),
            ev(2, "the command line", c),
            ev(2, "SHA-384 of the initramfs", i),
        ],
        "rtmrs": [null, hex::encode([9u8; 48]), hex::encode([9u8; 48]), null],
        "rtmr1_qemu_10_1": hex::encode(replay.rtmrs[1]),
        "note": "test",
    });
    std::fs::write(f.image.join("manifest.json"), m.to_string()).expect("write manifest");
    let amd = amdsev_ovmf().display().to_string();
    let ans = explain(
        &f,
        &quote,
        &[
            "--ovmf",
            &amd,
            "--event-log",
            &log_path.display().to_string(),
        ],
    );
    assert_eq!(ans.code, Some(1), "{:#}", ans.json);
    assert_eq!(ans.json["input"], "TDX quote");
    // One MRTD row per OVMF given, and the quote (another firmware's) matches none.
    let rows = ans.json["mrtd_per_ovmf"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0]["mrtd"].is_string() || rows[0]["error"].is_string(),
        "{rows:?}"
    );
    assert_ne!(rows[0]["matches"], true);
    let d = ans.json["first_differing_events"]
        .as_array()
        .expect("events");
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(
        (d[0]["rtmr"].as_u64(), d[0]["index"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(
        d[0]["why"]
            .as_str()
            .is_some_and(|w| w.contains("QEMU before 10.2")),
        "{d:?}"
    );
    assert!(
        d[0]["logged"]
            .as_str()
            .is_some_and(|w| w.contains(&hex::encode(k_patched))),
        "{d:?}"
    );
    assert_eq!(
        (d[1]["rtmr"].as_u64(), d[1]["index"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(
        d[1]["why"]
            .as_str()
            .is_some_and(|w| w.contains("different digest")),
        "{d:?}"
    );

    // The same quote with MRTD set to the OVMF's and RTMR1/RTMR2 to the image's (QEMU 10.1 RTMR1): a match. The
    // explainer reads, it does not verify the signature, so patching the body is enough (v4 quote: 48-byte
    // header, MRTD at body offset 136, RTMR1 and RTMR2 at 376 and 424).
    let ovmf = snp::load_ovmf(&amdsev_ovmf()).expect("ovmf");
    let Ok(mrtd) = measurements::tdx::mrtd(&ovmf) else {
        return skip_for(
            SkipKind::Vectors,
            "the shared OVMF has no TDVF metadata: the MRTD match is left out",
        );
    };
    let mut q = std::fs::read(&quote).expect("quote");
    q[48 + 136..48 + 184].copy_from_slice(&mrtd);
    let (r1, r2) = ([0x11u8; 48], [0x22u8; 48]);
    q[48 + 376..48 + 424].copy_from_slice(&r1);
    q[48 + 424..48 + 472].copy_from_slice(&r2);
    let patched = f.dir.path().join("quote-patched.bin");
    std::fs::write(&patched, &q).expect("write");
    m["measurements"]["tdx"]["rtmrs"] =
        serde_json::json!([null, hex::encode([9u8; 48]), hex::encode(r2), null]);
    m["measurements"]["tdx"]["rtmr1_qemu_10_1"] = serde_json::json!(hex::encode(r1));
    std::fs::write(f.image.join("manifest.json"), m.to_string()).expect("write manifest");
    let ans = explain(&f, &patched, &["--ovmf", &amd]);
    assert_eq!(ans.code, Some(0), "{:#}", ans.json);
    assert_eq!(ans.json["mrtd_per_ovmf"][0]["matches"], true);
    assert_eq!(ans.json["rtmr1_rtmr2_match_image"], true);
}

#[test]
fn ovmf_from_a_directory_and_from_the_image_and_text_answer() {
    let Some(f) = fixture() else { return };
    let ld = digest(
        &f.amdsev,
        Some((&f.kernel[..], &f.initrd[..], CMDLINE)),
        2,
        "EPYC-Milan",
        1,
        VmmType::Qemu,
    );
    let input = report_file(f.dir.path(), "expected.bin", ld);
    // A directory given with --ovmf: its *.fd files are tried.
    let fw = f.dir.path().join("firmware");
    std::fs::create_dir(&fw).expect("mkdir");
    std::os::unix::fs::symlink(amdsev_ovmf(), fw.join("build-a.fd")).expect("symlink");
    std::fs::write(fw.join("notes.txt"), b"not firmware").expect("write");
    let a = explain(
        &f,
        &input,
        &["--ovmf", &fw.display().to_string(), "--max-vcpus", "4"],
    );
    assert_eq!(a.code, Some(0), "{:#}", a.json);
    assert!(a.json["matches"][0]["ovmf"]
        .as_str()
        .is_some_and(|o| o.ends_with("build-a.fd")));
    // No --ovmf: the image directory's own OVMF*.fd; the text answer says MATCH and that the manifest expects it.
    std::os::unix::fs::symlink(amdsev_ovmf(), f.image.join("OVMF.amdsev.fd")).expect("symlink");
    let out = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .arg("explain")
        .arg(&input)
        .arg("--image")
        .arg(&f.image)
        .args(["--max-vcpus", "4"])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("MATCH: OVMF ") && text.contains("OVMF.amdsev.fd"),
        "{text}"
    );
    assert!(
        text.contains("this is a launch the image's manifest expects"),
        "{text}"
    );
    assert!(text.contains("2 vCPUs, vCPU type EPYC-Milan"), "{text}");
}
