//! `measure-guest explain`: the command-line side of [`measurements::explain`] (a module of the measure-guest
//! binary, kept in its own file; the library does not compile it).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use attestation::text::{escape, json_safe};
use measurements::explain::{self, ExpectedSnp, Measured, OvmfCandidate, SnpLaunch, SnpSpace};
use measurements::manifest::Manifest;
use measurements::{snp, tdx};
use sha2::{Digest, Sha256};

use super::{read_file, usage, Fail};

/// Which launch configuration produces a measurement: searches SNP launch parameters, or compares TDX
/// MRTD/RTMRs, against a guest image.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// A fenced-run evidence file, a raw SEV-SNP report (1184 bytes) or a TDX quote.
    #[arg(value_name = "EVIDENCE|REPORT|QUOTE")]
    input: PathBuf,
    /// The guest image directory (`fenced-run image build --out DIR`): kernel, initramfs, command line and the
    /// expected launches from its manifest.
    #[arg(long, value_name = "DIR")]
    image: PathBuf,
    /// OVMF builds to try: files, or directories whose `*.fd` files are tried; repeatable. The image
    /// directory's own `OVMF*.fd` files are always tried.
    #[arg(long, value_name = "DIR_OR_FILE")]
    ovmf: Vec<PathBuf>,
    /// Further command lines to try besides the image's and its variants; repeatable.
    #[arg(long, value_name = "CMDLINE")]
    cmdline: Vec<String>,
    /// TDX: a CCEL event log of the launch, to compare RTMR1/RTMR2 event by event with the image's.
    #[arg(long, value_name = "FILE")]
    event_log: Option<PathBuf>,
    /// Highest vCPU count to try.
    #[arg(long, value_name = "N", default_value = "128", value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_vcpus: u32,
    /// Stop the search after this many seconds (what was searched is then reported).
    #[arg(long, value_name = "SECONDS", default_value = "60")]
    max_seconds: u64,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn ovmf_files(a: &ExplainArgs) -> Result<Vec<PathBuf>, Fail> {
    let mut out = Vec::new();
    let fd_files = |dir: &Path, only_ovmf: bool| -> Result<Vec<PathBuf>, Fail> {
        let rd =
            std::fs::read_dir(dir).map_err(|e| usage(format!("--ovmf {}: {e}", dir.display())))?;
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .filter(|p| {
                let n = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                n.ends_with(".fd") && (!only_ovmf || n.starts_with("OVMF"))
            })
            .collect();
        v.sort();
        Ok(v)
    };
    out.extend(fd_files(&a.image, true).unwrap_or_default());
    for p in &a.ovmf {
        if p.is_dir() {
            out.extend(fd_files(p, false)?);
        } else {
            out.push(p.clone());
        }
    }
    out.dedup();
    Ok(out)
}

struct Image {
    manifest: Manifest,
    kernel_sha256: [u8; 32],
    initrd_sha256: [u8; 32],
    /// Files whose hash is not the manifest's (named in the answer: they are a differing input themselves).
    problems: Vec<String>,
}

fn load_image(dir: &Path) -> Result<Image, Fail> {
    let manifest = Manifest::load(dir).map_err(|e| usage(e.to_string()))?;
    let mut problems = Vec::new();
    let mut hash = |what: &str, file: &str, want: &str| -> Result<[u8; 32], Fail> {
        let p = dir.join(file);
        let h: [u8; 32] = Sha256::digest(read_file(what, &p)?).into();
        if !hex::encode(h).eq_ignore_ascii_case(want) {
            problems.push(format!(
                "{}: sha256 {}, but the manifest lists {}",
                p.display(),
                hex::encode(h),
                escape(want)
            ));
        }
        Ok(h)
    };
    let kernel_sha256 = hash("kernel", &manifest.kernel.file, &manifest.kernel.sha256)?;
    let initrd_sha256 = hash(
        "initramfs",
        &manifest.initramfs.file,
        &manifest.initramfs.sha256,
    )?;
    Ok(Image {
        manifest,
        kernel_sha256,
        initrd_sha256,
        problems,
    })
}

/// The manifest's expected launch nearest to a match, and how the match differs from it.
type Nearest = Option<(ExpectedSnp, Vec<String>)>;

fn launch_text(l: &SnpLaunch) -> String {
    let kernel = match &l.cmdline {
        None => "kernel hashes off".to_owned(),
        Some((label, value)) => format!(
            "kernel hashes on, command line {label} ({:?})",
            escape(value).to_string()
        ),
    };
    let cpu = match &l.vcpu_type {
        Some(t) => format!("vCPU type {} (signature {:#x})", t.name, t.sig),
        None => "vCPU type not measured by this VMM".to_owned(),
    };
    format!(
        "OVMF {} (sha256 {}), VMM {}, {} vCPUs, {cpu}, guest features {:#x}, {kernel}",
        l.ovmf, l.ovmf_sha256, l.vmm, l.vcpus, l.guest_features
    )
}

fn launch_json(l: &SnpLaunch) -> serde_json::Value {
    serde_json::json!({
        "ovmf": l.ovmf,
        "ovmf_sha256": l.ovmf_sha256,
        "vmm_type": l.vmm.to_string(),
        "vcpus": l.vcpus,
        "vcpu_type": l.vcpu_type.as_ref().map(|t| t.name.clone()),
        "vcpu_sig": l.vcpu_type.as_ref().map(|t| format!("{:#x}", t.sig)),
        "guest_features": format!("{:#x}", l.guest_features),
        "kernel_hashes": l.cmdline.is_some(),
        "cmdline_variant": l.cmdline.as_ref().map(|c| c.0.clone()),
        "cmdline": l.cmdline.as_ref().map(|c| c.1.clone()),
    })
}

/// Runs the subcommand: exit 0 when a configuration matches, 1 when none does.
pub fn run(a: ExplainArgs) -> Result<(), Fail> {
    let bytes = read_file("input", &a.input)?;
    let (kind, measured) =
        explain::read_measured(&bytes).map_err(|e| usage(format!("{}: {e}", a.input.display())))?;
    let image = load_image(&a.image)?;
    match measured {
        Measured::Snp {
            measurement,
            report,
        } => explain_snp(&a, kind, &measurement, report.as_deref(), &image),
        Measured::Tdx { mrtd, rtmr } => explain_tdx(&a, kind, &mrtd, &rtmr, &image),
    }
}

fn explain_snp(
    a: &ExplainArgs,
    kind: explain::InputKind,
    target: &snp::LaunchDigest,
    report: Option<&attestation::snp::AttestationReport>,
    image: &Image,
) -> Result<(), Fail> {
    let started = Instant::now();
    let mut ovmfs = Vec::new();
    let mut unreadable = Vec::new();
    for p in ovmf_files(a)? {
        match snp::load_ovmf(&p) {
            Ok(o) => ovmfs.push(OvmfCandidate::new(p.display().to_string(), o)),
            Err(e) => unreadable.push(e.to_string()),
        }
    }
    if ovmfs.is_empty() {
        return Err(usage(format!(
            "no usable OVMF: give --ovmf FILE or DIR (the image directory {} has no OVMF*.fd){}",
            a.image.display(),
            unreadable
                .iter()
                .map(|e| format!("; {e}"))
                .collect::<String>()
        )));
    }
    let mut vcpu_types = explain::default_vcpu_types();
    let mut host_note = None;
    // Version 2 reports (and masked ones) carry zeros: no CPUID to go by.
    if let Some(c) = report.and_then(|r| r.cpuid).filter(|c| c.family != 0) {
        let sig = snp::vcpu_sig(
            u32::from(c.family),
            u32::from(c.model),
            u32::from(c.stepping),
        );
        host_note = Some(format!(
            "the report's CPUID is family {:#x} model {:#x} stepping {:#x} (signature {sig:#x})",
            c.family, c.model, c.stepping
        ));
        if !vcpu_types.iter().any(|t| t.sig == sig) {
            vcpu_types.push(explain::VcpuType {
                name: "host (the report's CPUID)".into(),
                sig,
            });
        }
    }
    let mut cmdlines = explain::cmdline_variants(&image.manifest.cmdline.value);
    for c in &a.cmdline {
        if !cmdlines.iter().any(|(_, v)| v == c) {
            cmdlines.push(("given with --cmdline".into(), c.clone()));
        }
    }
    let space = SnpSpace {
        ovmfs,
        kernel_sha256: image.kernel_sha256,
        initrd_sha256: image.initrd_sha256,
        cmdlines,
        without_kernel_hashes: true,
        vmms: vec![snp::VmmType::Qemu, snp::VmmType::Ec2, snp::VmmType::Gce],
        vcpu_types,
        guest_features: explain::DEFAULT_GUEST_FEATURES.to_vec(),
        max_vcpus: a.max_vcpus,
    };
    let tty = std::io::stderr().is_terminal();
    let mut progress = |done: u64, total: u64| {
        if tty {
            eprint!("\rmeasure-guest explain: {done} of {total} configurations");
        }
    };
    // A bound too far to represent is no bound.
    let deadline = started.checked_add(Duration::from_secs(a.max_seconds));
    let out = explain::search_snp(target, &space, deadline, &mut progress);
    if tty {
        eprintln!();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let expected: Vec<ExpectedSnp> = image
        .manifest
        .measurements
        .sev_snp
        .iter()
        .map(|e| ExpectedSnp {
            ovmf_sha256: e.ovmf_sha256.to_ascii_lowercase(),
            vcpus: e.vcpus,
            vcpu_type: e.vcpu_type.clone(),
            guest_features: e.guest_features,
        })
        .collect();
    let searched = format!(
        "{} OVMF build(s), kernel hashes off and on with {} command line(s), VMMs QEMU/ec2/gce, {} vCPU type(s) ({}) on QEMU, guest features {}, vCPUs 1-{}",
        space.ovmfs.len(),
        space.cmdlines.len(),
        space.vcpu_types.len(),
        space.vcpu_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
        space.guest_features.iter().map(|f| format!("{f:#x}")).collect::<Vec<_>>().join("/"),
        space.max_vcpus
    );
    // Inputs outside the search that can be named from what we have.
    let mut not_searched: Vec<String> = image.problems.clone();
    let given: Vec<&str> = space.ovmfs.iter().map(|o| o.sha256.as_str()).collect();
    for e in &expected {
        if !given.contains(&e.ovmf_sha256.as_str()) {
            let m = format!(
                "the manifest's OVMF (sha256 {}) is not among the OVMF builds given",
                e.ovmf_sha256
            );
            if !not_searched.contains(&m) {
                not_searched.push(m);
            }
        }
    }
    not_searched.extend(unreadable.iter().cloned());
    not_searched.extend(out.unusable.iter().cloned());
    let matches: Vec<(SnpLaunch, Nearest)> = out
        .matches
        .iter()
        .map(|m| {
            (
                m.clone(),
                explain::nearest_expected(m, &expected).map(|(e, d)| (e.clone(), d)),
            )
        })
        .collect();
    if a.json {
        let v = serde_json::json!({
            "input": kind.name(),
            "tee": "sev-snp",
            "measurement": hex::encode(target),
            "matched": !matches.is_empty(),
            "matches": matches.iter().map(|(m, near)| {
                let mut j = launch_json(m);
                j["differs_from_manifest"] = serde_json::json!(near.as_ref().map(|(_, d)| d.clone()));
                j
            }).collect::<Vec<_>>(),
            "compared": out.compared,
            "space": space.size(),
            "timed_out": out.timed_out,
            "seconds": elapsed,
            "searched": searched,
            "report_cpuid": host_note,
            "expected": expected.iter().map(|e| serde_json::json!({
                "ovmf_sha256": e.ovmf_sha256, "vcpus": e.vcpus, "vcpu_type": e.vcpu_type,
                "guest_features": format!("{:#x}", e.guest_features),
            })).collect::<Vec<_>>(),
            "not_searched": not_searched,
        });
        println!("{}", json_safe(&format!("{v:#}")));
    } else {
        println!("input: {} {}", kind.name(), a.input.display());
        println!("measurement: {}", hex::encode(target));
        if let Some(h) = &host_note {
            println!("note: {h}");
        }
        println!(
            "searched: {searched}: {} of {} configurations in {elapsed:.2} s{}",
            out.compared,
            space.size(),
            if out.timed_out {
                " (stopped by --max-seconds)"
            } else {
                ""
            }
        );
        for (m, near) in &matches {
            println!("MATCH: {}", launch_text(m));
            match near {
                Some((_, d)) if d.is_empty() => {
                    println!("  this is a launch the image's manifest expects")
                }
                Some((e, d)) => {
                    println!(
                        "  differs from the manifest's nearest expected launch ({} vCPUs, {}, guest features {:#x}) in:",
                        e.vcpus, e.vcpu_type, e.guest_features
                    );
                    for x in d {
                        println!("    - {x}");
                    }
                }
                None => println!("  (the manifest lists no SEV-SNP launch to compare with)"),
            }
        }
        if matches.is_empty() {
            println!("no configuration in the search matches.");
            if expected.is_empty() {
                println!("nearest: the manifest lists no expected SEV-SNP launch");
            } else {
                println!("nearest: the launches the manifest expects (same kernel, initramfs and command line); each was tried with every value above of the parameters that were searched:");
                for e in &expected {
                    println!(
                        "  - OVMF sha256 {}, {} vCPUs, {}, guest features {:#x}",
                        e.ovmf_sha256, e.vcpus, e.vcpu_type, e.guest_features
                    );
                }
            }
            println!("so the launch differs in an input outside the search: the kernel or initramfs bytes, an OVMF build not given, another command line, more vCPUs, other guest features, an SVSM or another VMM.");
        }
        for n in &not_searched {
            println!("note: {}", escape(n));
        }
    }
    if matches.is_empty() {
        Err(Fail(1, String::new()))
    } else {
        Ok(())
    }
}

fn explain_tdx(
    a: &ExplainArgs,
    kind: explain::InputKind,
    mrtd: &[u8; 48],
    rtmr: &[[u8; 48]; 4],
    image: &Image,
) -> Result<(), Fail> {
    let mut lines = Vec::new();
    let mut mrtd_rows = Vec::new();
    let mut mrtd_match = false;
    for p in ovmf_files(a)? {
        let row = match snp::load_ovmf(&p)
            .map_err(|e| e.to_string())
            .and_then(|o| tdx::mrtd(&o).map_err(|e| e.to_string()))
        {
            Ok(m) => {
                let same = &m == mrtd;
                mrtd_match |= same;
                lines.push(format!(
                    "MRTD of {}: {} ({})",
                    p.display(),
                    hex::encode(m),
                    if same { "matches" } else { "differs" }
                ));
                serde_json::json!({"ovmf": p.display().to_string(), "mrtd": hex::encode(m), "matches": same})
            }
            Err(e) => {
                lines.push(format!("MRTD of {}: {}", p.display(), escape(&e)));
                serde_json::json!({"ovmf": p.display().to_string(), "error": e})
            }
        };
        mrtd_rows.push(row);
    }
    let tdxm = image.manifest.measurements.tdx.as_ref();
    let hexeq = |a: &[u8; 48], b: Option<&String>| {
        b.is_some_and(|b| b.eq_ignore_ascii_case(&hex::encode(a)))
    };
    let mut rtmr_ok = false;
    if let Some(t) = tdxm {
        let r1_102 = hexeq(&rtmr[1], t.rtmrs[1].as_ref());
        let r1_101 = hexeq(&rtmr[1], t.rtmr1_qemu_10_1.as_ref());
        let r2 = hexeq(&rtmr[2], t.rtmrs[2].as_ref());
        rtmr_ok = (r1_102 || r1_101) && r2;
        lines.push(format!(
            "RTMR1: {}",
            if r1_102 {
                "the image's direct boot (QEMU 10.2 or later)"
            } else if r1_101 {
                "the image's direct boot under QEMU 10.1 (QEMU before 10.2 patches the kernel's setup header before TDVF measures it)"
            } else {
                "not the image's direct boot"
            }
        ));
        lines.push(format!(
            "RTMR2: {}",
            if r2 {
                "the image's command line and initramfs"
            } else {
                "not the image's command line and initramfs"
            }
        ));
    } else {
        lines.push("the manifest lists no TDX measurements to compare RTMR1/RTMR2 with".into());
    }
    let mut events = Vec::new();
    if let Some(log) = &a.event_log {
        let bytes = read_file("--event-log", log)?;
        let replay = tdx::replay_rtmrs(&bytes)
            .map_err(|e| usage(format!("--event-log {}: {e}", log.display())))?;
        let differ = replay.mismatches(rtmr);
        lines.push(if differ.is_empty() {
            "event log: replays to the quote's RTMR0-3".to_owned()
        } else {
            format!(
                "event log: does not replay to the quote's RTMR{}",
                differ
                    .iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", RTMR")
            )
        });
        if let Some(t) = tdxm {
            for d in
                explain::compare_rtmr_events(&replay, &t.rtmr_events, t.rtmr1_qemu_10_1.as_deref())
            {
                let logged = d
                    .logged
                    .as_ref()
                    .map_or("none".to_owned(), |(off, ty, dg)| {
                        format!("{ty} at offset {off:#x}, digest {dg}")
                    });
                let want = d.expected.as_ref().map_or("none".to_owned(), |(what, dg)| {
                    format!("{} ({dg})", escape(what))
                });
                lines.push(format!(
                    "RTMR{} event {}: logged {logged}; expected {want}: {}",
                    d.rtmr, d.index, d.why
                ));
                events.push(serde_json::json!({
                    "rtmr": d.rtmr, "index": d.index, "logged": logged, "expected": want, "why": d.why,
                }));
            }
        }
    }
    let ok = mrtd_match && (rtmr_ok || tdxm.is_none());
    if a.json {
        let v = serde_json::json!({
            "input": kind.name(),
            "tee": "tdx",
            "mrtd": hex::encode(mrtd),
            "rtmr": rtmr.iter().map(hex::encode).collect::<Vec<_>>(),
            "mrtd_per_ovmf": mrtd_rows,
            "rtmr1_rtmr2_match_image": rtmr_ok,
            "first_differing_events": events,
            "matched": ok,
        });
        println!("{}", json_safe(&format!("{v:#}")));
    } else {
        println!("input: {} {}", kind.name(), a.input.display());
        println!("MRTD: {}", hex::encode(mrtd));
        for l in &lines {
            println!("{l}");
        }
    }
    if ok {
        Ok(())
    } else {
        Err(Fail(1, String::new()))
    }
}
