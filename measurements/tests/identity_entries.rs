//! Identity entries: a set that pins an image's identity and admits vCPU counts 1-16 accepts a report (signed by
//! the sim PSP) whose launch digest is the one measurements computes for 8 vCPUs, naming the profile, and refuses
//! the digest for 32 vCPUs naming the entry; a TDX quote (sim QE) matches a TDVF build's MRTD and the image's
//! RTMRs; an expired set is refused naming the date; and `measure-guest identity` writes such an entry from an
//! image directory and an OVMF file.

use std::path::{Path, PathBuf};
use std::process::Command;

use attestation::sim::SimPsp;
use attestation::snp::{AttestationReport, Product};
use attestation::tee::Tee;
use measurements::identity::{
    IdentityEntry, SnpFirmware, SnpProfiles, TdxFirmware, TdxProfiles, VcpuRange,
};
use measurements::set::{self, Artifacts, Hex, HexU64, MeasurementSet, Release, TrustedSet};
use measurements::snp::{self, KernelHashes, Ovmf, SnpConfig, VmmType};

const CMDLINE: &str = "console=ttyS0 root=/dev/vda";

fn shared_ovmf() -> Option<(PathBuf, Ovmf)> {
    let p = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
    match std::fs::read(&p) {
        Ok(b) => Some((p, Ovmf::parse(b).expect("shared OVMF parses"))),
        Err(_) => {
            attestation::vectors::skip(&format!("shared AmdSev OVMF not found at {}", p.display()));
            None
        }
    }
}

fn hashes() -> KernelHashes {
    KernelHashes::new(b"the kernel", Some(b"the initramfs"), Some(CMDLINE))
}

fn entry(snp: Option<SnpProfiles>, tdx: Option<TdxProfiles>) -> IdentityEntry {
    let h = hashes();
    IdentityEntry {
        kernel_sha256: Hex(h.kernel),
        initramfs_sha256: Hex(h.initrd),
        cmdline_sha256: Hex(h.cmdline),
        cmdline: Some(CMDLINE.into()),
        toolchain_root_hash: None,
        snp,
        tdx,
    }
}

fn set_of(identity: Vec<IdentityEntry>, not_after: &str) -> MeasurementSet {
    MeasurementSet {
        format: set::SET_FORMAT.into(),
        not_after: Some(not_after.into()),
        release: Release {
            name: "fenced-run-guest".into(),
            version: "2.0.0".into(),
        },
        artifacts: Artifacts {
            kernel_sha256: None,
            initramfs_sha256: None,
            cmdline: None,
            cmdline_sha256: None,
            ovmf_sha256: None,
            tdvf_sha256: None,
        },
        snp: Vec::new(),
        tdx: Vec::new(),
        sim: Vec::new(),
        identity,
    }
}

/// The set written, signed by one auditor, read back and trusted, as the verifier does.
fn trusted(dir: &Path, s: &MeasurementSet) -> TrustedSet {
    let path = dir.join("release.toml");
    std::fs::write(&path, s.to_toml()).expect("write set");
    let key = set::generate_key();
    let pk = dir.join("auditor.pub");
    std::fs::write(&pk, set::public_key_pem(&key.verifying_key()).expect("pem")).expect("write");
    let reread = MeasurementSet::load(&path).expect("the set parses back");
    assert_eq!(&reread, s);
    let sig = dir.join("release.toml.auditor.sig");
    std::fs::write(
        &sig,
        set::SignatureFile::sign(&reread, &key, "auditor").to_toml(),
    )
    .expect("write sig");
    TrustedSet::load(&path, &[&sig], &[&pk], 1).expect("1 of 1")
}

fn milan(vcpus: u32) -> SnpConfig {
    SnpConfig {
        vcpus,
        vcpu_sig: snp::vcpu_sig_for_type("EPYC-Milan").expect("sig"),
        guest_features: 1,
        vmm: VmmType::Qemu,
        ovmf_hash: None,
    }
}

/// A sim PSP report of a launch with this digest, parsed back from its signed bytes.
fn sim_report(dir: &Path, measurement: [u8; 48]) -> AttestationReport {
    let psp = SimPsp::new(&dir.join("psp"), Product::Milan).expect("sim psp");
    let (bytes, _certs) = psp
        .sign_report(psp.report_template(measurement, [0x5a; 64]))
        .expect("sign report");
    AttestationReport::from_bytes(&bytes).expect("report parses")
}

#[test]
fn an_identity_entry_admitting_1_to_16_vcpus_accepts_8_and_refuses_32() {
    let Some((_, ovmf)) = shared_ovmf() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let fw = SnpFirmware::of(&ovmf, [0xf1; 32]).expect("firmware record");
    let profiles = SnpProfiles {
        vcpus: vec![VcpuRange::parse("1-16").expect("range")],
        vcpu_types: vec!["EPYC-Milan".into(), "EPYC-Genoa".into()],
        vmm: vec!["QEMU".into()],
        guest_features: vec![HexU64(1)],
        policy: HexU64(0), // set below to the sim report's policy
        ovmf: vec![fw],
    };
    let eight = snp::launch_digest(&ovmf, Some(&hashes()), &milan(8)).expect("digest 8");
    let thirty_two = snp::launch_digest(&ovmf, Some(&hashes()), &milan(32)).expect("digest 32");
    let r8 = sim_report(dir.path(), eight);
    let r32 = sim_report(dir.path(), thirty_two);
    let mut p = profiles;
    p.policy = HexU64(r8.policy.0);
    let t = trusted(
        dir.path(),
        &set_of(vec![entry(Some(p), None)], "2099-01-01T00:00:00Z"),
    );

    let m = t
        .match_snp_policy(&r8.measurement, r8.policy.0)
        .expect("8 vCPUs admitted");
    assert_eq!(m.vcpus, 8);
    assert_eq!(m.vcpu_type.as_deref(), Some("EPYC-Milan"));
    assert_eq!(m.measurement.0, eight);
    assert!(
        m.to_string().contains("vcpus=8 vcpu_type=EPYC-Milan"),
        "{m}"
    );

    let e = t
        .match_snp_policy(&r32.measurement, r32.policy.0)
        .expect_err("32 vCPUs not admitted");
    let msg = e.to_string();
    assert!(msg.contains(&hex::encode(thirty_two)), "{msg}");
    assert!(
        msg.contains("identity entry 1")
            && msg.contains(
                "none of its 32 launch profiles (vcpus 1-16, types EPYC-Milan/EPYC-Genoa"
            ),
        "{msg}"
    );
    // Another policy than the entry requires is refused naming it.
    let e = t
        .match_snp_policy(&r8.measurement, r8.policy.0 ^ 0x10000)
        .expect_err("policy");
    assert!(e.to_string().contains("requires policy"), "{e}");
}

#[test]
fn a_tdx_quote_matches_a_tdvf_build_and_the_images_rtmrs() {
    use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
    let dir = tempfile::tempdir().expect("tempdir");
    let (mrtd, rtmr1, rtmr1_10_1, rtmr2) = ([0x3c; 48], [0x71; 48], [0x7a; 48], [0x72; 48]);
    let quote = |r1: [u8; 48]| {
        let tee = SimTdxTee::new(
            SimQe::new(&dir.path().join("qe")).expect("sim qe"),
            SimTd {
                mrtd,
                rtmr: [[0; 48], r1, rtmr2, [0; 48]],
                ..SimTd::default()
            },
        );
        let raw = tee.get_report(&[0x5a; 64]).expect("sim quote");
        attestation::tdx::Quote::parse(&raw.report).expect("quote parses")
    };
    let tdx = TdxProfiles {
        firmware: vec![TdxFirmware {
            ovmf_sha256: Hex([9; 32]),
            mrtd: Hex(mrtd),
            rtmr1: Hex(rtmr1),
            rtmr1_qemu_10_1: Some(Hex(rtmr1_10_1)),
            rtmr2: Hex(rtmr2),
        }],
    };
    let t = trusted(
        dir.path(),
        &set_of(vec![entry(None, Some(tdx))], "2099-01-01T00:00:00Z"),
    );
    for r1 in [rtmr1, rtmr1_10_1] {
        let q = quote(r1);
        let e = t.match_tdx(&q.td().mrtd, &q.td().rtmr).expect("admitted");
        assert_eq!(
            (e.mrtd.0, e.rtmr1.map(|h| h.0), e.rtmr2.map(|h| h.0)),
            (mrtd, Some(r1), Some(rtmr2))
        );
    }
    let q = quote([0x01; 48]);
    let e = t
        .match_tdx(&q.td().mrtd, &q.td().rtmr)
        .expect_err("another kernel");
    assert!(
        e.to_string().contains("identity entry 1")
            && e.to_string().contains("RTMR1 (kernel) differs"),
        "{e}"
    );
}

#[test]
fn an_expired_set_is_refused_naming_the_date() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tdx = TdxProfiles {
        firmware: vec![TdxFirmware {
            ovmf_sha256: Hex([9; 32]),
            mrtd: Hex([1; 48]),
            rtmr1: Hex([2; 48]),
            rtmr1_qemu_10_1: None,
            rtmr2: Hex([3; 48]),
        }],
    };
    let t = trusted(
        dir.path(),
        &set_of(vec![entry(None, Some(tdx))], "2026-03-01T12:00:00Z"),
    );
    let at = set::parse_time("2026-06-01T00:00:00Z")
        .expect("time")
        .unix_timestamp();
    let e = t.check_current(at).expect_err("expired");
    assert!(
        e.to_string().contains("expired: its not_after is 2026-03-01T12:00:00Z, the verification time is 2026-06-01T00:00:00Z"),
        "{e}"
    );
    let before = set::parse_time("2026-02-01T00:00:00Z")
        .expect("time")
        .unix_timestamp();
    assert!(t.check_current(before).is_ok());
}

/// A minimal image directory: kernel, initramfs and a manifest listing them.
fn image_dir(dir: &Path) -> PathBuf {
    use measurements::manifest::{Artifact, Cmdline, Included, Manifest, Measurements};
    let img = dir.join("image");
    std::fs::create_dir_all(&img).expect("mkdir");
    std::fs::write(img.join("vmlinuz"), b"the kernel").expect("write");
    std::fs::write(img.join("initramfs.cpio.gz"), b"the initramfs").expect("write");
    let m = Manifest {
        format: measurements::manifest::MANIFEST_FORMAT.into(),
        kernel: Artifact::of("vmlinuz", b"the kernel"),
        vm_kernel: None,
        initramfs: Artifact::of("initramfs.cpio.gz", b"the initramfs"),
        cmdline: Cmdline {
            value: CMDLINE.into(),
            sha256: hex::encode(measurements::sim::cmdline_sha256(CMDLINE)),
            sha384: String::new(),
        },
        agent: Included {
            path: "/init".into(),
            sha256: String::new(),
        },
        included: Vec::new(),
        measurements: Measurements {
            vm: String::new(),
            sev_snp: Vec::new(),
            tdx: None,
        },
        toolchains: None,
        agent_build: None,
    };
    std::fs::write(
        img.join(measurements::manifest::MANIFEST_FILE),
        serde_json::to_vec(&m).expect("json"),
    )
    .expect("write manifest");
    img
}

#[test]
fn measure_guest_identity_writes_an_entry_the_verifier_matches() {
    let Some((ovmf_path, ovmf)) = shared_ovmf() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let img = image_dir(dir.path());
    let out = dir.path().join("identity.toml");
    let run = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .args(["identity", "--image"])
        .arg(&img)
        .arg("--ovmf")
        .arg(&ovmf_path)
        .args([
            "--vcpus",
            "1-16",
            "--vcpu-types",
            "EPYC-Milan",
            "--policy",
            "0x30000",
        ])
        .args(["--not-after", "2099-01-01T00:00:00Z", "--out"])
        .arg(&out)
        .output()
        .expect("run measure-guest");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("read set");
    assert!(
        text.contains("not_after = \"2099-01-01T00:00:00Z\""),
        "{text}"
    );
    assert!(
        text.contains("[[identity.snp.ovmf]]") && text.contains("vcpus = [\"1-16\"]"),
        "{text}"
    );
    let s = MeasurementSet::load(&out).expect("parses");
    let t = trusted(dir.path(), &s);
    let eight = snp::launch_digest(&ovmf, Some(&hashes()), &milan(8)).expect("digest");
    assert_eq!(
        t.match_snp_policy(&eight, 0x30000).expect("admitted").vcpus,
        8
    );
    let seventeen = snp::launch_digest(&ovmf, Some(&hashes()), &milan(17)).expect("digest");
    assert!(t.match_snp_policy(&seventeen, 0x30000).is_err());

    // --add-to appends a second entry to a current-format set, and refuses an old-format one naming renew.
    let add = |set: &Path| {
        Command::new(env!("CARGO_BIN_EXE_measure-guest"))
            .args(["identity", "--image"])
            .arg(&img)
            .arg("--ovmf")
            .arg(&ovmf_path)
            .args(["--vcpus", "32", "--vcpu-types", "EPYC-Genoa", "--add-to"])
            .arg(set)
            .output()
            .expect("run measure-guest")
    };
    let copy = dir.path().join("copy.toml");
    std::fs::copy(&out, &copy).expect("copy");
    let o = add(&copy);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("must sign it again"));
    let two = MeasurementSet::load(&copy).expect("parses");
    assert_eq!(two.identity.len(), 2);
    assert_eq!(two.not_after, s.not_after);
    let old = dir.path().join("old.toml");
    let mut v1 = s.clone();
    v1.format = set::SET_FORMAT_V1.into();
    v1.not_after = None;
    v1.identity.clear();
    v1.sim.push(set::SimEntry {
        tier: "process".into(),
        measurement: Hex([1; 48]),
        binary_sha256: None,
    });
    std::fs::write(&old, v1.to_toml()).expect("write");
    let o = add(&old);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("measure-guest renew --set"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // `verify-set` refuses it once expired, naming the date.
    let key = set::generate_key();
    let pk = dir.path().join("a.pub");
    std::fs::write(&pk, set::public_key_pem(&key.verifying_key()).expect("pem")).expect("write");
    std::fs::write(
        dir.path().join("identity.toml.a.sig"),
        set::SignatureFile::sign(&s, &key, "a").to_toml(),
    )
    .expect("write sig");
    let verify = |at: &str| {
        Command::new(env!("CARGO_BIN_EXE_measure-guest"))
            .args(["verify-set", "--set"])
            .arg(&out)
            .arg("--auditor-key")
            .arg(&pk)
            .args(["--at", at])
            .output()
            .expect("run verify-set")
    };
    let ok = verify("2098-12-31T00:00:00Z");
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("valid until 2099-01-01T00:00:00Z"));
    let late = verify("2099-01-02T00:00:00Z");
    assert_eq!(late.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&late.stderr)
            .contains("expired: its not_after is 2099-01-01T00:00:00Z"),
        "{}",
        String::from_utf8_lossy(&late.stderr)
    );
}
