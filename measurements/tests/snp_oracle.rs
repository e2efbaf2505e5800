//! Compares `measurements::snp` and the `measure-guest snp` binary with the independent PyPI tool
//! `sev-snp-measure` on a matrix of configurations, over the shared AmdSev OVMF, Debian's OVMF.fd, Debian's
//! kernel and an initrd made here. Skips with a reason when an input is absent, unless
//! FENCED_RUN_REQUIRE_VECTORS=1.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use measurements::snp;

fn skip(why: &str) {
    attestation::vectors::skip(why);
}

/// The venv that .ci/run prepares (or SEV_SNP_MEASURE_VENV).
fn venv() -> Option<PathBuf> {
    let v = attestation::vectors::oracle_venv();
    v.join("bin/sev-snp-measure").exists().then_some(v)
}

fn shared_ovmf() -> PathBuf {
    attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd")
}

const DEBIAN_OVMF: &str = "/usr/share/ovmf/OVMF.fd";

/// A real (uncompressed newc cpio) initrd holding one `/init` script.
fn make_initrd(path: &Path) {
    fn entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]) {
        let hdr = format!(
            "070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            1,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(hdr.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out.extend_from_slice(data);
        while out.len() % 4 != 0 {
            out.push(0);
        }
    }
    let mut out = Vec::new();
    entry(
        &mut out,
        "init",
        0o100755,
        b"#!/bin/sh\necho fenced-run test initrd\nexec /bin/sh\n",
    );
    entry(&mut out, "TRAILER!!!", 0, b"");
    std::fs::write(path, out).expect("write initrd");
}

#[derive(Clone, Debug)]
struct Case {
    ovmf: PathBuf,
    vcpus: u32,
    vcpu_type: &'static str,
    features: u64,
    vmm: &'static str,
    kernel: Option<PathBuf>,
    initrd: Option<PathBuf>,
    append: Option<&'static str>,
}

const ORACLE: &str = r#"
import json, sys
from sevsnpmeasure import guest, vcpu_types
from sevsnpmeasure.sev_mode import SevMode
from sevsnpmeasure.vmm_types import VMMType
for line in sys.stdin:
    c = json.loads(line)
    ld = guest.calc_launch_digest(SevMode.SEV_SNP, c["vcpus"], vcpu_types.CPU_SIGS[c["vcpu_type"]], c["ovmf"],
                                  c["kernel"], c["initrd"], c["append"], c["features"], "", VMMType[c["vmm"]])
    print(ld.hex())
"#;

/// Runs every case through sev-snp-measure's own `calc_launch_digest` in one Python process.
fn oracle(venv: &Path, cases: &[Case]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("oracle.py");
    std::fs::write(&script, ORACLE).expect("write script");
    let mut child = Command::new(venv.join("bin/python"))
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start python");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for c in cases {
            let v = serde_json::json!({
                "ovmf": c.ovmf, "vcpus": c.vcpus, "vcpu_type": c.vcpu_type, "features": c.features, "vmm": c.vmm,
                "kernel": c.kernel, "initrd": c.initrd, "append": c.append,
            });
            writeln!(stdin, "{v}").expect("write case");
        }
    }
    let out = child.wait_with_output().expect("python");
    assert!(out.status.success(), "sev-snp-measure oracle failed");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn ours(c: &Case) -> String {
    let cfg = snp::SnpConfig {
        vcpus: c.vcpus,
        vcpu_sig: snp::vcpu_sig_for_type(c.vcpu_type).expect("type"),
        guest_features: c.features,
        vmm: c.vmm.parse().expect("vmm"),
        ovmf_hash: None,
    };
    let inputs = snp::SnpInputs {
        ovmf: c.ovmf.clone(),
        kernel: c.kernel.clone(),
        initrd: c.initrd.clone(),
        append: c.append.map(str::to_owned),
    };
    hex::encode(snp::measure_files(&inputs, &cfg).expect("measure"))
}

struct Inputs {
    venv: PathBuf,
    kernel: PathBuf,
    _dir: tempfile::TempDir,
    initrd: PathBuf,
}

fn inputs() -> Option<Inputs> {
    let Some(venv) = venv() else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Oracles,
            "sev-snp-measure venv not found (target/sev-snp-venv; .ci/run creates it)",
        );
        return None;
    };
    let Some(kernel) = attestation::vectors::debian_kernel() else {
        skip("Debian kernel not found (target/debian-kernel/boot/vmlinuz-*; .ci/run extracts it)");
        return None;
    };
    if !shared_ovmf().exists() {
        skip("../shared/firmware OVMF not found");
        return None;
    }
    if !Path::new(DEBIAN_OVMF).exists() {
        skip("Debian's OVMF.fd not found (apt package ovmf)");
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let initrd = dir.path().join("initrd.cpio");
    make_initrd(&initrd);
    Some(Inputs {
        venv,
        kernel,
        _dir: dir,
        initrd,
    })
}

#[test]
fn library_matches_sev_snp_measure_on_matrix() {
    let Some(inp) = inputs() else { return };
    let mut cases = Vec::new();
    let kernels: [(Option<PathBuf>, Option<PathBuf>, Option<&'static str>); 4] = [
        (None, None, None),
        (Some(inp.kernel.clone()), None, None),
        (Some(inp.kernel.clone()), Some(inp.initrd.clone()), None),
        (
            Some(inp.kernel.clone()),
            Some(inp.initrd.clone()),
            Some("console=ttyS0 root=/dev/vda rw  "),
        ),
    ];
    for vcpus in [1, 2, 4] {
        for vcpu_type in ["EPYC-v4", "EPYC-Milan", "EPYC-Genoa"] {
            for features in [0x1, 0x21] {
                for vmm in ["QEMU", "ec2", "gce"] {
                    for (kernel, initrd, append) in &kernels {
                        cases.push(Case {
                            ovmf: shared_ovmf(),
                            vcpus,
                            vcpu_type,
                            features,
                            vmm,
                            kernel: kernel.clone(),
                            initrd: initrd.clone(),
                            append: *append,
                        });
                    }
                    // Debian's OVMF.fd measures firmware-only boots (its hashes table has base 0).
                    cases.push(Case {
                        ovmf: PathBuf::from(DEBIAN_OVMF),
                        vcpus,
                        vcpu_type,
                        features,
                        vmm,
                        kernel: None,
                        initrd: None,
                        append: None,
                    });
                }
            }
        }
    }
    let want = oracle(&inp.venv, &cases);
    assert_eq!(
        want.len(),
        cases.len(),
        "oracle answered {} of {} cases",
        want.len(),
        cases.len()
    );
    let mut distinct = std::collections::HashSet::new();
    for (c, w) in cases.iter().zip(&want) {
        let got = ours(c);
        assert_eq!(&got, w, "digest differs from sev-snp-measure for {c:?}");
        distinct.insert(got);
    }
    // GCE and EC2 ignore the vCPU type, so fewer digests than cases, but most must differ.
    assert!(
        distinct.len() > cases.len() / 2,
        "only {} distinct digests",
        distinct.len()
    );
    println!(
        "{} configurations identical to sev-snp-measure",
        cases.len()
    );
}

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_flags_match_sev_snp_measure() {
    let Some(inp) = inputs() else { return };
    let tool = inp.venv.join("bin/sev-snp-measure");
    let ovmf = shared_ovmf();
    let ovmf_hash = {
        let (ok, out, err) = run(Command::new(&tool)
            .args(["--mode", "snp:ovmf-hash", "--ovmf"])
            .arg(&ovmf));
        assert!(ok, "{err}");
        out
    };
    let k = inp.kernel.display().to_string();
    let i = inp.initrd.display().to_string();
    let o = ovmf.display().to_string();
    let flag_sets: Vec<Vec<String>> = vec![
        vec!["--mode", "snp:ovmf-hash", "--ovmf", &o],
        // sev-snp-measure prints the OVMF hash in hex whatever --output-format says; so do we.
        vec![
            "--mode",
            "snp:ovmf-hash",
            "--ovmf",
            &o,
            "--output-format",
            "base64",
        ],
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "2",
            "--vcpu-family",
            "25",
            "--vcpu-model",
            "17",
            "--vcpu-stepping",
            "0",
        ]
        .into_iter()
        .chain(["--ovmf", &o, "--kernel", &k])
        .collect(),
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "3",
            "--vcpu-sig",
            "0xa00f11",
            "--ovmf",
            &o,
            "--kernel",
            &k,
            "--initrd",
            &i,
        ],
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "1",
            "--vcpu-type",
            "EPYC-Milan",
            "--ovmf",
            &o,
            "--output-format",
            "base64",
        ],
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "4",
            "--vcpu-type",
            "EPYC-Genoa",
            "--ovmf",
            &o,
            "--kernel",
            &k,
        ]
        .into_iter()
        .chain([
            "--append",
            "quiet",
            "--guest-features",
            "0x21",
            "--snp-ovmf-hash",
            &ovmf_hash,
        ])
        .collect(),
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "2",
            "--vmm-type",
            "ec2",
            "--ovmf",
            &o,
            "--kernel",
            &k,
            "--initrd",
            &i,
        ],
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "2",
            "--vmm-type",
            "gce",
            "--ovmf",
            DEBIAN_OVMF,
        ],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(str::to_owned).collect())
    .collect();
    for flags in &flag_sets {
        let (ok_t, theirs, err_t) = run(Command::new(&tool).args(flags));
        let (ok_o, mine, err_o) = run(Command::new(env!("CARGO_BIN_EXE_measure-guest"))
            .arg("snp")
            .args(flags));
        assert!(ok_t, "sev-snp-measure failed on {flags:?}: {err_t}");
        assert!(ok_o, "measure-guest failed on {flags:?}: {err_o}");
        assert_eq!(mine, theirs, "output differs for {flags:?}");
    }
}

#[test]
fn kernel_with_debian_ovmf_is_refused_naming_file() {
    let Some(inp) = inputs() else { return };
    let out = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .args([
            "snp",
            "--vcpus",
            "1",
            "--vcpu-type",
            "EPYC-v4",
            "--ovmf",
            DEBIAN_OVMF,
            "--kernel",
        ])
        .arg(&inp.kernel)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "OVMF /usr/share/ovmf/OVMF.fd: SEV hashes table has base 0, it cannot measure a kernel"
        ),
        "{err}"
    );
    // sev-snp-measure refuses it too (for the missing SNP_KERNEL_HASHES section).
    let theirs = Command::new(inp.venv.join("bin/sev-snp-measure"))
        .args([
            "--mode",
            "snp",
            "--vcpus",
            "1",
            "--vcpu-type",
            "EPYC-v4",
            "--ovmf",
            DEBIAN_OVMF,
            "--kernel",
        ])
        .arg(&inp.kernel)
        .output()
        .expect("run");
    assert!(!theirs.status.success());
}

#[test]
fn json_output_carries_parameters() {
    let ovmf = shared_ovmf();
    if !ovmf.exists() {
        return skip("../shared/firmware OVMF not found");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .args([
            "snp",
            "--vcpus",
            "2",
            "--vcpu-type",
            "EPYC-Milan",
            "--json",
            "--ovmf",
        ])
        .arg(&ovmf)
        .output()
        .expect("run");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["vcpus"], 2);
    assert_eq!(v["vcpu_sig"], "0xa00f11");
    assert_eq!(v["vmm_type"], "QEMU");
    let cfg = snp::SnpConfig {
        vcpus: 2,
        vcpu_sig: 0xa00f11,
        guest_features: 1,
        vmm: snp::VmmType::Qemu,
        ovmf_hash: None,
    };
    let want = snp::measure_files(
        &snp::SnpInputs {
            ovmf,
            ..Default::default()
        },
        &cfg,
    )
    .expect("ld");
    assert_eq!(v["measurement"], hex::encode(want));
}
