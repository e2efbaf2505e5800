//! `measure-guest snp` against the PyPI tool `sev-snp-measure` 0.0.13 (the oracle: its own output is the expected
//! value) on the flags beyond plain SNP: `--mode sev|seves|snp:svsm`, `--svsm`, `--vars-file`, `--vars-size`,
//! `--dump-vmsa` (the VMSA files compared byte for byte) and `-v`. No Coconut SVSM build is installed here, so the
//! SVSM is a synthetic image with the layout the tool reads (GUIDed table with SVSM_INFO and SEV metadata with
//! every section type); both tools read the same file.

use std::path::{Path, PathBuf};
use std::process::Command;

use attestation::vectors::{skip_for, SkipKind};

fn venv() -> Option<PathBuf> {
    let v = attestation::vectors::oracle_venv();
    v.join("bin/sev-snp-measure").exists().then_some(v)
}

const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

struct Inputs {
    tool: PathBuf,
    ovmf: PathBuf,
    kernel: PathBuf,
    dir: tempfile::TempDir,
}

fn inputs() -> Option<Inputs> {
    let Some(venv) = venv() else {
        skip_for(
            SkipKind::Oracles,
            "sev-snp-measure venv not found (target/sev-snp-venv; .ci/run creates it)",
        );
        return None;
    };
    let Some(kernel) = attestation::vectors::debian_kernel() else {
        skip_for(
            SkipKind::Vectors,
            "Debian kernel not found (target/debian-kernel/boot/vmlinuz-*; .ci/run extracts it)",
        );
        return None;
    };
    let ovmf = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
    if !ovmf.exists() {
        skip_for(SkipKind::Vectors, "../shared/firmware OVMF not found");
        return None;
    }
    Some(Inputs {
        tool: venv.join("bin/sev-snp-measure"),
        ovmf,
        kernel,
        dir: tempfile::tempdir().expect("tempdir"),
    })
}

fn guid_le(s: &str) -> [u8; 16] {
    let h: Vec<u8> = hex::decode(s.replace('-', "")).expect("guid hex");
    let mut g = [0u8; 16];
    g.copy_from_slice(&h);
    g[0..4].reverse();
    g[4..6].reverse();
    g[6..8].reverse();
    g
}

/// A synthetic SVSM image of `pages` pages: SEV metadata with SNP_SEC_MEM, SNP_SECRETS, CPUID and SVSM_CAA
/// sections (GPAs inside where the image will sit), and an SVSM_INFO entry with entry point offset `entry`.
fn synthetic_svsm(pages: usize, entry: u32) -> Vec<u8> {
    let mut img: Vec<u8> = (0..pages * 4096).map(|i| (i * 7 % 251) as u8).collect();
    let sections: [(u32, u32, u32); 4] = [
        (0x80_0000, 0x3000, 1),
        (0x80_3000, 0x1000, 2),
        (0x80_4000, 0x1000, 3),
        (0x80_5000, 0x2000, 4),
    ];
    let entries = [(
        guid_le("a789a612-0597-4c4b-a49f-cbb1fe9d1ddd"),
        entry.to_le_bytes().to_vec(),
    )];
    measurements::snp::write_ovmf_tables(&mut img, 0x200, &sections, &entries).expect("fits");
    img
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Out {
    let o = cmd.output().expect("run");
    Out {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn ours() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_measure-guest"));
    c.arg("snp");
    c
}

/// Every file of `dir`, sorted by name, with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let p = e.expect("entry").path();
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                std::fs::read(&p).expect("read"),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_mode_and_flag_matches_sev_snp_measure() {
    let Some(inp) = inputs() else { return };
    let d = inp.dir.path();
    let svsm = d.join("svsm.bin");
    std::fs::write(&svsm, synthetic_svsm(16, 0x1230)).expect("write svsm");
    let svsm2 = d.join("svsm2.bin");
    std::fs::write(&svsm2, synthetic_svsm(8, 0x40)).expect("write svsm");
    let initrd = d.join("initrd.img");
    std::fs::write(&initrd, b"070701 a small initrd that is not a cpio").expect("write initrd");
    let (o, k, i) = (
        inp.ovmf.display().to_string(),
        inp.kernel.display().to_string(),
        initrd.display().to_string(),
    );
    let (s1, s2) = (svsm.display().to_string(), svsm2.display().to_string());
    let mut sets: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| sets.push(v.iter().map(|s| (*s).to_owned()).collect());
    // SEV: firmware only, with kernel, initrd and command line; base64 and -v.
    add(&["--mode", "sev", "--ovmf", &o]);
    add(&["--mode", "sev", "--ovmf", &o, "--kernel", &k]);
    add(&[
        "--mode",
        "sev",
        "--ovmf",
        &o,
        "--kernel",
        &k,
        "--initrd",
        &i,
        "--append",
        "console=ttyS0 ",
    ]);
    add(&[
        "-v",
        "--mode",
        "sev",
        "--ovmf",
        &o,
        "--output-format",
        "base64",
    ]);
    // SEV-ES: vCPU counts, types, VMMs, kernel.
    for vcpus in ["1", "2", "5"] {
        for (t, vmm) in [
            ("EPYC-v4", "QEMU"),
            ("EPYC-Milan", "QEMU"),
            ("EPYC-Genoa", "ec2"),
            ("EPYC-Rome", "gce"),
        ] {
            add(&[
                "--mode",
                "seves",
                "--vcpus",
                vcpus,
                "--vcpu-type",
                t,
                "--vmm-type",
                vmm,
                "--ovmf",
                &o,
            ]);
        }
    }
    add(&[
        "--mode",
        "seves",
        "--vcpus",
        "2",
        "--vcpu-sig",
        "0xa10f10",
        "--ovmf",
        &o,
        "--kernel",
        &k,
        "--initrd",
        &i,
        "--append",
        "quiet",
    ]);
    add(&[
        "--verbose",
        "--mode",
        "seves",
        "--vcpus",
        "3",
        "--vcpu-family",
        "25",
        "--vcpu-model",
        "1",
        "--vcpu-stepping",
        "1",
        "--ovmf",
        &o,
        "--output-format",
        "base64",
    ]);
    // SEV-ES ignores --guest-features (SEV_FEATURES 0): the oracle shows it.
    add(&[
        "--mode",
        "seves",
        "--vcpus",
        "2",
        "--vcpu-type",
        "EPYC-Milan",
        "--guest-features",
        "0x21",
        "--ovmf",
        &o,
    ]);
    // SNP with -v.
    add(&[
        "-v",
        "--mode",
        "snp",
        "--vcpus",
        "2",
        "--vcpu-type",
        "EPYC-Genoa",
        "--guest-features",
        "0x21",
        "--ovmf",
        &o,
        "--kernel",
        &k,
    ]);
    // SNP with an SVSM: vars file and sizes, vCPU counts and types, -v and base64.
    for vcpus in ["1", "2", "4"] {
        add(&[
            "--mode",
            "snp:svsm",
            "--vcpus",
            vcpus,
            "--vcpu-type",
            "EPYC-Milan",
            "--ovmf",
            &o,
            "--svsm",
            &s1,
            "--vars-file",
            OVMF_VARS,
        ]);
        add(&[
            "--mode",
            "snp:svsm",
            "--vcpus",
            vcpus,
            "--vcpu-type",
            "EPYC-Genoa",
            "--ovmf",
            &o,
            "--svsm",
            &s2,
            "--vars-size",
            "540672",
        ]);
    }
    add(&[
        "--mode",
        "snp:svsm",
        "--vcpus",
        "2",
        "--vcpu-sig",
        "0x800f12",
        "--ovmf",
        &o,
        "--svsm",
        &s1,
        "--vars-size",
        "131072",
    ]);
    add(&[
        "-v",
        "--mode",
        "snp:svsm",
        "--vcpus",
        "2",
        "--vcpu-type",
        "EPYC-v4",
        "--ovmf",
        &o,
        "--svsm",
        &s2,
        "--vars-file",
        OVMF_VARS,
        "--output-format",
        "base64",
    ]);
    // snp:svsm measures no kernel and no guest features (both tools ignore them).
    add(&[
        "--mode",
        "snp:svsm",
        "--vcpus",
        "1",
        "--vcpu-type",
        "EPYC-Milan",
        "--ovmf",
        &o,
        "--svsm",
        &s1,
        "--vars-size",
        "4096",
        "--kernel",
        &k,
        "--guest-features",
        "0x21",
    ]);
    if !Path::new(OVMF_VARS).exists() {
        sets.retain(|s| !s.iter().any(|a| a == OVMF_VARS));
        skip_for(SkipKind::Vectors, "/usr/share/OVMF/OVMF_VARS_4M.fd not found (apt package ovmf); --vars-file cases left out");
    }
    let mut modes = std::collections::HashSet::new();
    for flags in &sets {
        let theirs = run(Command::new(&inp.tool).args(flags));
        let mine = run(ours().args(flags));
        assert_eq!(
            theirs.code,
            Some(0),
            "sev-snp-measure failed on {flags:?}: {}",
            theirs.stderr
        );
        assert_eq!(
            mine.code,
            Some(0),
            "measure-guest failed on {flags:?}: {}",
            mine.stderr
        );
        assert_eq!(mine.stdout, theirs.stdout, "output differs for {flags:?}");
        // A flag the mode does not measure is ignored, as sev-snp-measure ignores it, and said on stderr.
        let ignored = (flags.contains(&"snp:svsm".to_owned())
            && flags.iter().any(|f| f == "--kernel"))
            || (flags.contains(&"seves".to_owned())
                && flags.iter().any(|f| f == "--guest-features"));
        assert_eq!(
            mine.stderr.contains("measure-guest: note:"),
            ignored,
            "{flags:?}: {}",
            mine.stderr
        );
        modes.insert(flags[flags.iter().position(|f| f == "--mode").expect("mode") + 1].clone());
    }
    assert_eq!(modes.len(), 4, "modes covered: {modes:?}");
    eprintln!("{} flag sets identical to sev-snp-measure", sets.len());
}

#[test]
fn dump_vmsa_writes_the_same_files() {
    let Some(inp) = inputs() else { return };
    let d = inp.dir.path();
    let svsm = d.join("svsm.bin");
    std::fs::write(&svsm, synthetic_svsm(16, 0x1230)).expect("write svsm");
    let (o, s) = (inp.ovmf.display().to_string(), svsm.display().to_string());
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "3",
            "--vcpu-type",
            "EPYC-Milan",
            "--guest-features",
            "0x21",
            "--ovmf",
            &o,
        ],
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "2",
            "--vmm-type",
            "ec2",
            "--ovmf",
            &o,
        ],
        vec![
            "--mode",
            "snp",
            "--vcpus",
            "2",
            "--vmm-type",
            "gce",
            "--ovmf",
            &o,
        ],
        vec![
            "--mode",
            "seves",
            "--vcpus",
            "4",
            "--vcpu-type",
            "EPYC-Genoa",
            "--ovmf",
            &o,
        ],
        vec![
            "--mode",
            "snp:svsm",
            "--vcpus",
            "2",
            "--vcpu-type",
            "EPYC-Milan",
            "--ovmf",
            &o,
            "--svsm",
            &s,
            "--vars-size",
            "540672",
        ],
    ];
    for (n, flags) in cases.iter().enumerate() {
        let theirs_dir = d.join(format!("theirs{n}"));
        let ours_dir = d.join(format!("ours{n}"));
        let cwd_dir = d.join(format!("cwd{n}"));
        for p in [&theirs_dir, &ours_dir, &cwd_dir] {
            std::fs::create_dir(p).expect("mkdir");
        }
        // sev-snp-measure writes vmsa<N>.bin into its working directory.
        let t = run(Command::new(&inp.tool)
            .args(flags)
            .arg("--dump-vmsa")
            .current_dir(&theirs_dir));
        assert_eq!(t.code, Some(0), "{flags:?}: {}", t.stderr);
        let m = run(ours().args(flags).arg("--dump-vmsa").arg(&ours_dir));
        assert_eq!(m.code, Some(0), "{flags:?}: {}", m.stderr);
        assert_eq!(m.stdout, t.stdout, "{flags:?}");
        // Without DIR, as sev-snp-measure: the working directory.
        let c = run(ours().args(flags).arg("--dump-vmsa").current_dir(&cwd_dir));
        assert_eq!(c.code, Some(0), "{flags:?}: {}", c.stderr);
        let want = files(&theirs_dir);
        let vcpus: usize = flags[flags.iter().position(|f| *f == "--vcpus").expect("vcpus") + 1]
            .parse()
            .expect("n");
        assert_eq!(
            want.len(),
            vcpus,
            "{flags:?}: oracle wrote {:?}",
            want.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        for (got, name) in [(files(&ours_dir), "DIR"), (files(&cwd_dir), "cwd")] {
            assert_eq!(got.len(), want.len(), "{flags:?} ({name})");
            for ((gn, gb), (wn, wb)) in got.iter().zip(&want) {
                assert_eq!(gn, wn, "{flags:?} ({name})");
                assert!(
                    gb == wb,
                    "{flags:?} ({name}): {gn} differs from sev-snp-measure's"
                );
            }
        }
    }
}

#[test]
fn bad_input_names_the_flag() {
    let Some(inp) = inputs() else { return };
    let o = inp.ovmf.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--mode", "sev", "--ovmf", &o, "--dump-vmsa"],
            "--dump-vmsa",
        ),
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--svsm",
                &o,
            ],
            "--vars-size or --vars-file",
        ),
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--vars-size",
                "0",
                "--svsm",
                &o,
            ],
            "--vars-size 0",
        ),
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--vars-size",
                "4096",
            ],
            "--svsm",
        ),
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vmm-type",
                "ec2",
                "--ovmf",
                &o,
                "--vars-size",
                "4096",
                "--svsm",
                &o,
            ],
            "--vmm-type",
        ),
        // The AmdSev OVMF has no SVSM_INFO entry: not an SVSM.
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--vars-size",
                "4096",
                "--svsm",
                &o,
            ],
            "SVSM_INFO",
        ),
        (
            vec![
                "--mode",
                "seves",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--snp-ovmf-hash",
                "00",
            ],
            "--snp-ovmf-hash",
        ),
        (vec!["--mode", "seves", "--ovmf", &o], "--vcpus"),
        (
            vec!["--mode", "seves", "--vcpus", "1", "--ovmf", &o],
            "--vcpu-type",
        ),
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--vars-file",
                "/nonexistent/vars.fd",
                "--svsm",
                &o,
            ],
            "--vars-file /nonexistent/vars.fd",
        ),
        (
            vec![
                "--mode",
                "snp:svsm",
                "--vcpus",
                "1",
                "--vcpu-type",
                "EPYC-Milan",
                "--ovmf",
                &o,
                "--vars-file",
                &o,
                "--vars-size",
                "4096",
            ],
            "--vars-size",
        ),
    ];
    for (flags, want) in cases {
        let m = run(ours().args(&flags));
        assert_eq!(m.code, Some(2), "{flags:?}: {}{}", m.stdout, m.stderr);
        assert!(
            m.stderr.contains(want),
            "{flags:?}: stderr {:?} does not name {want:?}",
            m.stderr
        );
        assert!(m.stdout.is_empty(), "{flags:?}");
    }
}
