//! The confidential tiers' paths on this machine, as processes: `fenced-run doctor --json` on the real host;
//! `fenced-run run --isolation sev-snp|tdx` refused before anything starts, naming what is missing; an image
//! built with the AmdSev OVMF and a TDX OVMF lists SNP digests and the TDX MRTD, RTMR1 and RTMR2 and carries
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
        attestation::vectors::skip_for(attestation::vectors::SkipKind::Vm, w);
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
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Host,
            "this host may have SEV-SNP or TDX",
        );
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

/// QEMU 10.1 hands a TD's firmware the kernel with its setup header patched (later QEMUs do not), and the
/// manifest's `rtmr1_qemu_10_1` is computed over that patch (measurements::tdx_boot::qemu_patched_kernel). The
/// patch is the same code path for a plain VM in every QEMU, so the header this QEMU writes into a plain guest's
/// memory, read back through the monitor, must equal the model's byte for byte.
#[test]
fn the_kernel_header_qemu_writes_is_the_one_the_tdx_rtmr1_model_computes() {
    if missing().is_some() {
        return;
    }
    use measurements::manifest::TDX_MEMORY_MIB_MIN;
    use std::io::Write;
    let kernel_path = host::cli::image::default_kernel().expect("kernel");
    let kernel = std::fs::read(&kernel_path).expect("kernel");
    let t = tempfile::tempdir().expect("tmp");
    let initrd = t.path().join("initrd");
    std::fs::write(&initrd, vec![0x5a; 300_000]).expect("initrd");
    let monitor = t.path().join("monitor");
    let dump = t.path().join("header");
    // No panic=-1: the guest (whose initramfs is not one) stays up until it is killed.
    let cmdline = "console=ttyS0 quiet";
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _qemu = Kill(
        Command::new("qemu-system-x86_64")
            .args([
                "-machine", "q35", "-accel", "tcg", "-display", "none", "-serial", "null",
            ])
            .args([
                "-m",
                &format!("{TDX_MEMORY_MIB_MIN}M"),
                "-no-reboot",
                "-kernel",
            ])
            .arg(&kernel_path)
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", cmdline, "-monitor"])
            .arg(format!("unix:{},server=on,wait=off", monitor.display()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("qemu"),
    );
    // The firmware's Linux loader copies the setup header to 0x10000; read it until it is there.
    let deadline = Instant::now() + Duration::from_secs(60);
    let header = loop {
        assert!(
            Instant::now() < deadline,
            "no setup header at 0x10000 within 60 s"
        );
        if let Ok(mut m) = std::os::unix::net::UnixStream::connect(&monitor) {
            let _ = std::fs::remove_file(&dump);
            let cmd = format!("pmemsave 0x10000 8192 \"{}\"\n", dump.display());
            m.write_all(cmd.as_bytes()).expect("monitor");
            // The monitor answers each command with its prompt; pmemsave has written the file by then.
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until
                && std::fs::metadata(&dump).map(|d| d.len()).unwrap_or(0) < 8192
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(b) = std::fs::read(&dump) {
                if b.len() == 8192 && &b[0x202..0x206] == b"HdrS" && b[0x210] == 0xB0 {
                    break b;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let model =
        measurements::tdx_boot::qemu_patched_kernel(&kernel, cmdline, 300_000, TDX_MEMORY_MIB_MIN)
            .expect("model");
    let differing: Vec<String> = (0x1f1..0x268)
        .filter(|&i| header[i] != model[i])
        .map(|i| format!("{i:#x}: qemu {:02x} model {:02x}", header[i], model[i]))
        .collect();
    assert!(differing.is_empty(), "{differing:?}");
    assert_ne!(
        &kernel[0x1f1..0x268],
        &header[0x1f1..0x268],
        "the patch changed nothing"
    );
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
    // RTMR2's last event is the initramfs's SHA-384; RTMR1's first the kernel's Authenticode; RTMR1 and RTMR2
    // are the folds of their events; RTMR0 and RTMR3 are not claimed.
    let last_rtmr2 = tdx
        .rtmr_events
        .iter()
        .rfind(|e| e.rtmr == 2)
        .expect("rtmr2 event");
    assert_eq!(last_rtmr2.digest, m.initramfs.sha384);
    assert_eq!(tdx.rtmr_events[0].rtmr, 1);
    assert_eq!(
        tdx.rtmr_events[0].event_type,
        "EV_EFI_BOOT_SERVICES_APPLICATION"
    );
    let fold = |i: u8| {
        let digests = tdx.rtmr_events.iter().filter(|e| e.rtmr == i).map(|e| {
            <[u8; 48]>::try_from(hex::decode(&e.digest).expect("hex").as_slice()).expect("48 bytes")
        });
        Some(hex::encode(measurements::tdx_boot::fold(digests)))
    };
    assert_eq!(tdx.rtmrs, [None, fold(1), fold(2), None]);
    let rtmr1_10_1 = tdx.rtmr1_qemu_10_1.clone().expect("QEMU 10.1's RTMR1");
    assert_ne!(Some(&rtmr1_10_1), tdx.rtmrs[1].as_ref());

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
        !String::from_utf8_lossy(&o.stderr).contains("pins MRTD only"),
        "{}",
        text(&o)
    );
    let set_text = std::fs::read_to_string(&set).expect("set");
    // Two TDX entries: RTMR1 of the kernel as is (QEMU 10.2+) and as QEMU 10.1 patches it; RTMR2 in both.
    for r in [tdx.rtmrs[1].clone(), tdx.rtmrs[2].clone(), Some(rtmr1_10_1)] {
        let r = r.expect("rtmr");
        assert!(set_text.contains(&r), "{r} not in {set_text}");
    }
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
