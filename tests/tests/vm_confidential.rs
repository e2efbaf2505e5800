//! The confidential tiers' paths on this machine, as processes: `fenced-run doctor --json` on the real host;
//! `fenced-run run --isolation sev-snp|tdx` refused before anything starts, naming what is missing; an image
//! built with the AmdSev OVMF and a TDX OVMF lists SNP digests and the TDX MRTD and event digests and carries
//! both firmware files; `measure-guest pin --image` turns it into a set (and refuses an image whose files differ
//! from its manifest); `--isolation auto` picks the `vm` tier here and says why, and its evidence is accepted by
//! `verify-attestation evidence --measurements SET` signed by an auditor, and rejected under a set pinning
//! another measurement.
//!
//! The image and boot parts skip with a printed reason where QEMU, the kernel or the firmware is missing,
//! unless FENCED_RUN_REQUIRE_VM=1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const MEASURE: &str = env!("CARGO_BIN_EXE_measure-guest-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const NONCE: &str = "7e577e577e577e57aabbccddeeff00117e577e577e577e57";
const DEBIAN_OVMF: &str = "/usr/share/ovmf/OVMF.fd";

fn ws() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

fn amdsev_ovmf() -> PathBuf {
    std::env::var_os("FENCED_RUN_VECTORS")
        .map(|v| PathBuf::from(v).join("../firmware"))
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| ws().join("../shared/firmware"))
        .join("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd")
}

/// `Some(reason)` when an image cannot be built and booted here.
fn missing() -> Option<String> {
    let qemu = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("qemu-system-x86_64").is_file()))
        .unwrap_or(false);
    let why = if !qemu {
        Some("qemu-system-x86_64 is not installed (.ci/run installs it)".to_string())
    } else if host::cli::image::default_kernel().is_none() {
        Some("no kernel under target/vm-kernel (.ci/run extracts it)".to_string())
    } else if !nix::unistd::geteuid().is_root() {
        Some("not root".to_string())
    } else if !amdsev_ovmf().is_file() || !Path::new(DEBIAN_OVMF).is_file() {
        Some(format!(
            "{} or {DEBIAN_OVMF} is missing (the shared firmware; Debian's ovmf)",
            amdsev_ovmf().display()
        ))
    } else {
        None
    };
    if let Some(w) = &why {
        if std::env::var_os("FENCED_RUN_REQUIRE_VM").is_some_and(|v| v == "1") {
            panic!("FENCED_RUN_REQUIRE_VM=1 but: {w}");
        }
        eprintln!("skipped: {w}");
    }
    why
}

#[test]
fn doctor_reports_this_host() {
    let o = Command::new(BIN)
        .args(["doctor", "--json", "--image"])
        .arg("/nonexistent/image")
        .output()
        .expect("doctor");
    assert!(o.status.success(), "{}", text(&o));
    let v = json(&o);
    let tiers = v["tiers"].as_array().expect("tiers");
    let names: Vec<&str> = tiers.iter().filter_map(|t| t["tier"].as_str()).collect();
    assert_eq!(names, ["process", "vm", "sev-snp", "tdx"]);
    let by = |n: &str| tiers.iter().find(|t| t["tier"] == n).expect(n).clone();
    // No image at that path: the vm tier names the missing manifest.
    assert_eq!(by("vm")["can_run"], false);
    assert!(
        by("vm")["why_not"]
            .as_str()
            .unwrap_or("")
            .contains("image build"),
        "{v}"
    );
    // What this machine has decides the rest; each claim is checked against the machine itself.
    let snp_host = Path::new("/dev/sev").exists();
    assert_eq!(by("sev-snp")["can_run"], false, "no image, so never: {v}");
    if !snp_host {
        assert!(
            by("sev-snp")["why_not"]
                .as_str()
                .unwrap_or("")
                .contains("/dev/sev does not exist"),
            "{v}"
        );
    }
    if !Path::new("/sys/module/kvm_intel").exists() {
        assert!(
            by("tdx")["why_not"]
                .as_str()
                .unwrap_or("")
                .contains("kvm_intel module is not loaded"),
            "{v}"
        );
    }
    let accel = by("vm")["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "accelerator")
        .expect("accelerator")["detail"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let pvm_only = Path::new("/sys/module/kvm_pvm").exists()
        && !Path::new("/sys/module/kvm_intel").exists()
        && !Path::new("/sys/module/kvm_amd").exists();
    if pvm_only || !Path::new("/dev/kvm").exists() {
        assert!(accel.starts_with("tcg"), "{accel}");
    } else {
        assert!(accel.starts_with("kvm"), "{accel}");
    }
    let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .is_ok_and(|t| t.trim() != "0");
    assert_eq!(by("process")["can_run"], userns, "{v}");
    assert!(["process", "vm", "sev-snp", "tdx"].contains(&v["auto"].as_str().unwrap_or("")));
    // The table form says the same.
    let t = Command::new(BIN).args(["doctor"]).output().expect("doctor");
    let table = String::from_utf8_lossy(&t.stdout);
    assert!(table.contains("sev-snp  cannot run"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("auto ")), "{table}");
}

#[test]
fn confidential_isolation_on_a_host_without_it_fails_before_anything_runs() {
    if Path::new("/dev/sev").exists() || Path::new("/sys/module/kvm_intel/parameters/tdx").exists()
    {
        eprintln!("skipped: this host may have SEV-SNP or TDX");
        return;
    }
    for (tier, needle) in [("sev-snp", "/dev/sev does not exist"), ("tdx", "tdx")] {
        let started = Instant::now();
        let o = Command::new(BIN)
            .args(["run", "--isolation", tier, "--image", "/nonexistent/image"])
            .arg(ws().join("host/demo"))
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("nothing was started"), "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(err.contains("fenced-run doctor"), "{err}");
        assert!(o.stdout.is_empty(), "nothing judged: {}", text(&o));
        // Refused before intake or QEMU: a QEMU boot alone takes seconds.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }
}

#[test]
fn image_with_both_firmwares_pins_into_a_set_that_accepts_the_vm_evidence() {
    if missing().is_some() {
        return;
    }
    let t = tempfile::tempdir().expect("tmp");
    let d = t.path();
    let image = d.join("image");
    let o = Command::new(BIN)
        .args(["image", "build", "--out"])
        .arg(&image)
        .arg("--ovmf")
        .arg(amdsev_ovmf())
        .args(["--tdx-ovmf", DEBIAN_OVMF])
        .output()
        .expect("image build");
    assert!(o.status.success(), "{}", text(&o));
    let m = host::image::Manifest::load(&image).expect("manifest");
    assert_eq!(m.measurements.sev_snp.len(), host::image::SNP_VCPUS.len());
    let tdx = m.measurements.tdx.clone().expect("tdx measurements");
    // The firmware launched is the firmware measured.
    use sha2::{Digest, Sha256};
    let fw = |f: &str| hex::encode(Sha256::digest(std::fs::read(image.join(f)).expect(f)));
    assert_eq!(fw("OVMF.amdsev.fd"), m.measurements.sev_snp[0].ovmf_sha256);
    assert_eq!(fw("OVMF.tdx.fd"), tdx.ovmf_sha256);
    // MRTD as `measure-guest tdx` computes it for the same TDVF.
    let o = Command::new(MEASURE)
        .args(["tdx", "--ovmf", DEBIAN_OVMF, "--json"])
        .output()
        .expect("measure-guest tdx");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json(&o)["mrtd"], tdx.mrtd, "{}", text(&o));
    // The RTMR2 event digest is the initramfs's SHA-384; no whole RTMR value is claimed.
    let initrd_event = tdx
        .rtmr_events
        .iter()
        .find(|e| e.rtmr == 2)
        .expect("rtmr2 event");
    assert_eq!(initrd_event.digest, m.initramfs.sha384);
    assert!(tdx
        .rtmr_events
        .iter()
        .any(|e| e.rtmr == 1 && e.event_type == "EV_EFI_BOOT_SERVICES_APPLICATION"));
    assert_eq!(tdx.rtmrs, [None, None, None, None]);

    // Pin, keygen, sign.
    let set = d.join("set.toml");
    let o = Command::new(MEASURE)
        .args(["pin", "--image"])
        .arg(&image)
        .arg("--out")
        .arg(&set)
        .output()
        .expect("pin");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("pins MRTD only"),
        "{}",
        text(&o)
    );
    let set_text = std::fs::read_to_string(&set).expect("set");
    assert!(set_text.contains(&m.measurements.vm), "{set_text}");
    for s in &m.measurements.sev_snp {
        assert!(set_text.contains(&s.measurement), "{set_text}");
    }
    assert!(set_text.contains(&tdx.mrtd), "{set_text}");
    let key = d.join("alice");
    let o = Command::new(MEASURE)
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(o.status.success(), "{}", text(&o));
    let sign = |set: &Path| {
        let o = Command::new(MEASURE)
            .args(["sign", "--auditor", "alice", "--force", "--key"])
            .arg(key.with_extension("key"))
            .arg("--set")
            .arg(set)
            .output()
            .expect("sign");
        assert!(o.status.success(), "{}", text(&o));
    };
    sign(&set);

    // A pin over an image whose file differs from its manifest is refused (exit 1, the file named).
    let tampered = d.join("tampered");
    std::fs::create_dir(&tampered).expect("dir");
    // One byte of `file` flipped at `at` (the other files as built): the pin is refused, naming the file.
    let refused_with = |file: &str, at: usize| {
        for e in std::fs::read_dir(&image).expect("image") {
            let e = e.expect("entry");
            std::fs::copy(e.path(), tampered.join(e.file_name())).expect("copy");
        }
        let mut bytes = std::fs::read(tampered.join(file)).expect(file);
        bytes[at] ^= 1;
        std::fs::write(tampered.join(file), bytes).expect("write");
        let o = Command::new(MEASURE)
            .args(["pin", "--image"])
            .arg(&tampered)
            .output()
            .expect("pin");
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(&format!("{file}: sha256")),
            "{}",
            text(&o)
        );
    };
    let initrd_len = std::fs::metadata(image.join("initramfs.cpio"))
        .expect("initrd")
        .len() as usize;
    refused_with("initramfs.cpio", initrd_len - 1);
    // The same for the vm tier's PVH kernel, which the vm measurement covers.
    let vm_kernel = m.vm_kernel.as_ref().expect("a PVH kernel in the image");
    refused_with(&vm_kernel.file, 0x1000);

    // --isolation auto on this host: the vm tier (no SEV-SNP/TDX here), said on stderr, evidence written.
    let ev = d.join("run.evidence");
    let o = Command::new(BIN)
        .args([
            "run",
            "--isolation",
            "auto",
            "--json",
            "--nonce",
            NONCE,
            "--image",
        ])
        .arg(&image)
        .arg("--evidence")
        .arg(&ev)
        .arg(ws().join("host/demo"))
        .output()
        .expect("run auto");
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("auto chose vm; passed over sev-snp ("),
        "{err}"
    );
    assert!(err.contains("tdx ("), "{err}");
    assert_eq!(json(&o)["outcome"], "tests_passed", "{}", text(&o));

    let verify = |set: &Path| {
        Command::new(VERIFY)
            .arg("evidence")
            .arg(&ev)
            .args([
                "--json",
                "--allow-simulated",
                "--nonce",
                NONCE,
                "--expect-outcome",
                "tests_passed",
            ])
            .arg("--measurements")
            .arg(set)
            .arg("--auditor-key")
            .arg(key.with_extension("pub"))
            .output()
            .expect("verify")
    };
    let o = verify(&set);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["verdict"]["isolation"], "vm", "{v}");

    // The same evidence under a set (signed by the same auditor) that pins another vm measurement: rejected.
    let mut other = m.measurements.vm.clone().into_bytes();
    other[0] = if other[0] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8(other).expect("hex");
    let other_set = d.join("other.toml");
    std::fs::write(&other_set, set_text.replace(&m.measurements.vm, &other)).expect("other set");
    sign(&other_set);
    let o = verify(&other_set);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}
