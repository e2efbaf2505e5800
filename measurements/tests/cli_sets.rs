//! `measure-guest keygen`, `pin`, `sign` and `verify-set` as processes: an auditor's whole workflow, and the
//! exit codes and messages a founder sees when signatures are missing or a measurement is not in the set.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use measurements::{set, sim, snp};

fn mg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .args(args)
        .output()
        .expect("run measure-guest")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn shared_ovmf() -> Option<PathBuf> {
    let p = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
    if p.exists() {
        return Some(p);
    }
    attestation::vectors::skip(&format!("shared AmdSev OVMF not found at {}", p.display()));
    None
}

#[test]
fn auditor_workflow_pin_sign_verify() {
    let Some(ovmf) = shared_ovmf() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (kernel, initrd) = (d.join("vmlinuz"), d.join("initrd"));
    std::fs::write(&kernel, b"not really a kernel, but bytes to hash").expect("write");
    std::fs::write(&initrd, b"initrd bytes").expect("write");
    let set_path = d.join("release.toml");
    let mut pin = vec![
        "pin",
        "--name",
        "fenced-run-guest",
        "--release-version",
        "0.1.0",
        "--kernel",
        s(&kernel),
        "--initrd",
        s(&initrd),
        "--append",
        "console=ttyS0",
        "--ovmf",
        s(&ovmf),
        "--snp-vcpus",
        "1,2",
        "--snp-vcpu-types",
        "EPYC-Milan",
        "--snp-policy",
        "0x30000",
        "--out",
        s(&set_path),
    ];
    let debian = "/usr/share/ovmf/OVMF.fd";
    if Path::new(debian).exists() {
        pin.extend(["--tdvf", debian]); // Debian's OVMF.fd carries TDVF metadata: a TDX entry
    }
    let out = mg(&pin);
    assert!(
        out.status.success(),
        "pin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = set::MeasurementSet::load(&set_path).expect("pinned set parses");
    assert_eq!(pinned.snp.len(), 2);
    // The pinned digests are the library's, computed independently here.
    let cfg = snp::SnpConfig {
        vcpus: 2,
        vcpu_sig: 0xa00f11,
        guest_features: 1,
        vmm: snp::VmmType::Qemu,
        ovmf_hash: None,
    };
    let want = snp::measure_files(
        &snp::SnpInputs {
            ovmf: ovmf.clone(),
            kernel: Some(kernel.clone()),
            initrd: Some(initrd.clone()),
            append: Some("console=ttyS0".into()),
        },
        &cfg,
    )
    .expect("measure");
    assert_eq!(pinned.snp[1].measurement.0, want);
    assert_eq!(
        pinned.sim[0].measurement.0,
        sim::vm_launch_measurement(
            b"not really a kernel, but bytes to hash",
            b"initrd bytes",
            "console=ttyS0"
        )
    );

    for who in ["alice", "bob", "mallory"] {
        let o = mg(&["keygen", "--out", s(&d.join(who))]);
        assert!(
            o.status.success(),
            "keygen: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // keygen refuses to overwrite.
    assert_eq!(
        mg(&["keygen", "--out", s(&d.join("alice"))]).status.code(),
        Some(2)
    );
    for who in ["alice", "mallory"] {
        let o = mg(&[
            "sign",
            "--key",
            s(&d.join(format!("{who}.key"))),
            "--set",
            s(&set_path),
            "--auditor",
            who,
        ]);
        assert!(
            o.status.success(),
            "sign: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let sig = |who: &str| d.join(format!("release.toml.{who}.sig"));
    let key = |who: &str| d.join(format!("{who}.pub"));
    let m = hex::encode(want);
    // 1 of {alice, bob} required: alice signed; the measurement is in the set.
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--signature",
        s(&sig("alice")),
        "--signature",
        s(&sig("mallory")),
        "--auditor-key",
        s(&key("alice")),
        "--auditor-key",
        s(&key("bob")),
        "--snp-measurement",
        &m,
        "--snp-policy",
        "0x30000",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        // The signer is named by the founder's key file, never by the signature's `auditor` field.
        stdout.contains(&format!(
            "signed by 1 trusted auditor(s): {}",
            key("alice").display()
        )) && stdout.contains("untrusted key"),
        "{stdout}"
    );
    // 2 required: bob's signature is missing and mallory is not trusted: exit 1, naming both.
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--signature",
        s(&sig("alice")),
        "--signature",
        s(&sig("mallory")),
        "--auditor-key",
        s(&key("alice")),
        "--auditor-key",
        s(&key("bob")),
        "--auditors-required",
        "2",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("1 of 2 required") && err.contains("(missing)") && err.contains("mallory"),
        "{err}"
    );
    // A measurement outside the set: exit 1, naming the set and the nearest entry.
    let mut other = want;
    other[0] ^= 1;
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--signature",
        s(&sig("alice")),
        "--auditor-key",
        s(&key("alice")),
        "--snp-measurement",
        &hex::encode(other),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not in measurement set fenced-run-guest 0.1.0"),
        "{err}"
    );
    // Editing the set after signing (a digest changed) breaks every signature.
    let text = std::fs::read_to_string(&set_path).expect("read");
    let tampered = text.replacen(
        &hex::encode(pinned.snp[0].measurement.0),
        &hex::encode(other),
        1,
    );
    assert_ne!(tampered, text);
    std::fs::write(&set_path, tampered).expect("write");
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--signature",
        s(&sig("alice")),
        "--auditor-key",
        s(&key("alice")),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("signed a different set"), "{err}");
}

#[test]
fn tdx_subcommand_reports_mrtd_and_refuses_non_tdvf() {
    let debian = Path::new("/usr/share/ovmf/OVMF.fd");
    if !debian.exists() {
        attestation::vectors::skip("/usr/share/ovmf/OVMF.fd (apt package ovmf) not found");
        return;
    }
    let o = mg(&["tdx", "--ovmf", s(debian), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let ovmf = snp::load_ovmf(debian).expect("load");
    assert_eq!(
        v["mrtd"],
        hex::encode(measurements::tdx::mrtd(&ovmf).expect("mrtd"))
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.fd");
    std::fs::write(&junk, vec![0u8; 8192]).expect("write");
    let o = mg(&["tdx", "--ovmf", s(&junk)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("junk.fd: GUID table has no TDX metadata entry"),
        "{err}"
    );
}

#[test]
fn tdx_event_log_prints_events_and_rtmrs() {
    use sha2::{Digest, Sha384};
    // Spec ID event declaring SHA-384 only, then one EV_SEPARATOR into MR index 2 (RTMR1), then 0xFF fill.
    let mut spec = b"Spec ID Event03\0".to_vec();
    spec.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 2]);
    spec.extend_from_slice(&1u32.to_le_bytes());
    spec.extend_from_slice(&0x000Cu16.to_le_bytes());
    spec.extend_from_slice(&48u16.to_le_bytes());
    spec.push(0);
    let mut log = vec![0u8; 4];
    log.extend_from_slice(&3u32.to_le_bytes());
    log.extend_from_slice(&[0; 20]);
    log.extend_from_slice(&(spec.len() as u32).to_le_bytes());
    log.extend_from_slice(&spec);
    let digest: [u8; 48] = Sha384::digest([0u8; 4]).into();
    log.extend_from_slice(&2u32.to_le_bytes());
    log.extend_from_slice(&4u32.to_le_bytes());
    log.extend_from_slice(&1u32.to_le_bytes());
    log.extend_from_slice(&0x000Cu16.to_le_bytes());
    log.extend_from_slice(&digest);
    log.extend_from_slice(&4u32.to_le_bytes());
    log.extend_from_slice(&[0; 4]);
    log.extend_from_slice(&[0xFF; 64]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ccel.bin");
    std::fs::write(&path, &log).expect("write");
    let o = mg(&["tdx", "--event-log", s(&path)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut chain = vec![0u8; 48];
    chain.extend_from_slice(&digest);
    let rtmr1 = hex::encode(Sha384::digest(&chain));
    assert!(out.contains(&format!("RTMR1: {rtmr1}")), "{out}");
    assert!(out.contains(&format!("RTMR0: {}", "0".repeat(96))), "{out}");
    assert!(out.contains("MR2 -> RTMR1 EV_SEPARATOR"), "{out}");
    // Cut inside the event: exit 2 naming the file and the offset.
    std::fs::write(&path, &log[..log.len() - 70]).expect("write");
    let o = mg(&["tdx", "--event-log", s(&path)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ccel.bin: event log truncated at offset"),
        "{err}"
    );
}
