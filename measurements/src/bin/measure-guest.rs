//! `measure-guest`: computes expected launch measurements from guest artifacts.
//! Subcommands: `snp` (SEV-SNP launch digest, flags as in sev-snp-measure), `tdx` (MRTD and RTMR replay).
//! Exit codes: 0 success, 1 a check said no, 2 unusable input or usage error.

use std::path::PathBuf;
use std::process::ExitCode;

use base64::Engine;
use clap::{Parser, Subcommand, ValueEnum};
use measurements::{snp, tdx};

/// Expected SEV-SNP and TDX launch measurements, and the measurement sets auditors sign.
#[derive(Parser, Debug)]
#[command(name = "measure-guest", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// SEV-SNP launch digest of a QEMU/KVM, EC2 or GCE guest booted from OVMF (flags as in sev-snp-measure).
    Snp(SnpArgs),
    /// TDX: MRTD of a TDVF/OVMF image and/or RTMR0-3 replayed from a CCEL event log.
    Tdx(TdxArgs),
}

#[derive(clap::Args, Debug)]
struct TdxArgs {
    /// The TDVF/OVMF image whose MRTD to compute.
    #[arg(long, value_name = "PATH", required_unless_present = "event_log")]
    ovmf: Option<PathBuf>,
    /// A CCEL / TCG2 crypto-agile event log to replay into RTMR0-3 (e.g. /sys/firmware/acpi/tables/data/CCEL).
    #[arg(long, value_name = "FILE")]
    event_log: Option<PathBuf>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Mode {
    /// The full launch digest.
    #[value(name = "snp")]
    Snp,
    /// Only the digest of the OVMF image (to pass later as --snp-ovmf-hash).
    #[value(name = "snp:ovmf-hash")]
    OvmfHash,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum OutputFormat {
    /// Lower-case hexadecimal.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

#[derive(clap::Args, Debug)]
struct SnpArgs {
    /// What to compute.
    #[arg(long, value_enum, default_value = "snp")]
    mode: Mode,
    /// Number of guest vCPUs.
    #[arg(long, value_name = "N")]
    vcpus: Option<u32>,
    /// QEMU CPU model of the vCPUs (EPYC, EPYC-v4, EPYC-Rome, EPYC-Milan, EPYC-Genoa, EPYC-Turin, ...).
    #[arg(long, value_name = "CPUTYPE")]
    vcpu_type: Option<String>,
    /// vCPU signature (CPUID Fn0000_0001_EAX), decimal or 0x-hex.
    #[arg(long, value_name = "VALUE", value_parser = parse_int::<u32>)]
    vcpu_sig: Option<u32>,
    /// vCPU family (with --vcpu-model and --vcpu-stepping).
    #[arg(long, value_name = "FAMILY", requires_all = ["vcpu_model", "vcpu_stepping"])]
    vcpu_family: Option<u32>,
    /// vCPU model.
    #[arg(long, value_name = "MODEL")]
    vcpu_model: Option<u32>,
    /// vCPU stepping.
    #[arg(long, value_name = "STEPPING")]
    vcpu_stepping: Option<u32>,
    /// The VMM: QEMU, ec2 or gce.
    #[arg(long, value_name = "VMMTYPE", default_value = "QEMU")]
    vmm_type: snp::VmmType,
    /// The OVMF image.
    #[arg(long, value_name = "PATH")]
    ovmf: PathBuf,
    /// Kernel for a direct kernel boot (measured through the SEV hashes table).
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// Initrd (with --kernel).
    #[arg(long, value_name = "PATH", requires = "kernel")]
    initrd: Option<PathBuf>,
    /// Kernel command line (with --kernel), measured exactly as given plus a NUL.
    #[arg(long, value_name = "CMDLINE", requires = "kernel")]
    append: Option<String>,
    /// SEV_FEATURES of the VMSAs, 0x-hex or decimal (default 0x1).
    #[arg(long, value_name = "VALUE", value_parser = parse_int::<u64>, default_value = "0x1")]
    guest_features: u64,
    /// Precomputed OVMF hash (hex, from --mode snp:ovmf-hash) to start from.
    #[arg(long, value_name = "HASH")]
    snp_ovmf_hash: Option<String>,
    /// Output encoding of the measurement.
    #[arg(long, value_enum, default_value = "hex")]
    output_format: OutputFormat,
    /// Print a JSON object with the measurement and every parameter.
    #[arg(long)]
    json: bool,
}

fn parse_int<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let t = s.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    }
    .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    T::try_from(v).map_err(|_| format!("{s:?} is out of range"))
}

/// A failure with its exit code (1 check failed, 2 unusable input).
struct Fail(u8, String);

fn usage(msg: impl Into<String>) -> Fail {
    Fail(2, msg.into())
}

fn encode(bytes: &[u8], f: OutputFormat) -> String {
    match f {
        OutputFormat::Hex => hex::encode(bytes),
        OutputFormat::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}

fn run_snp(a: SnpArgs) -> Result<(), Fail> {
    let ovmf = snp::load_ovmf(&a.ovmf).map_err(|e| usage(e.to_string()))?;
    if a.mode == Mode::OvmfHash {
        let h = snp::ovmf_hash(&ovmf);
        if a.json {
            let v = serde_json::json!({
                "mode": "snp:ovmf-hash",
                "ovmf": a.ovmf.display().to_string(),
                "ovmf_hash": hex::encode(h),
            });
            println!("{v:#}");
        } else {
            println!("{}", encode(&h, a.output_format));
        }
        return Ok(());
    }
    let vcpus = a
        .vcpus
        .ok_or_else(|| usage("--vcpus N is required in mode snp"))?;
    if vcpus == 0 {
        return Err(usage("--vcpus must be at least 1"));
    }
    let (vcpu_sig, vcpu_source) = match (a.vcpu_family, a.vcpu_sig, &a.vcpu_type) {
        (Some(f), _, _) => {
            let (m, s) = (a.vcpu_model.unwrap_or(0), a.vcpu_stepping.unwrap_or(0));
            (
                snp::vcpu_sig(f, m, s),
                format!("family {f} model {m} stepping {s}"),
            )
        }
        (None, Some(sig), _) => (sig, "--vcpu-sig".to_owned()),
        (None, None, Some(t)) => {
            let sig = snp::vcpu_sig_for_type(t)
                .ok_or_else(|| usage(format!("--vcpu-type {t:?}: unknown CPU type")))?;
            (sig, t.clone())
        }
        (None, None, None) if a.vmm_type == snp::VmmType::Qemu => {
            return Err(usage(
                "missing --vcpu-type or --vcpu-sig or --vcpu-family in mode snp with QEMU",
            ))
        }
        (None, None, None) => (0, "none (not used by this VMM)".to_owned()),
    };
    let ovmf_hash =
        match &a.snp_ovmf_hash {
            Some(h) => {
                let v = hex::decode(h.trim())
                    .map_err(|e| usage(format!("--snp-ovmf-hash: not hex: {e}")))?;
                Some(<[u8; 48]>::try_from(v.as_slice()).map_err(|_| {
                    usage(format!("--snp-ovmf-hash: {} bytes, expected 48", v.len()))
                })?)
            }
            None => None,
        };
    let cfg = snp::SnpConfig {
        vcpus,
        vcpu_sig,
        guest_features: a.guest_features,
        vmm: a.vmm_type,
        ovmf_hash,
    };
    let inputs = snp::SnpInputs {
        ovmf: a.ovmf.clone(),
        kernel: a.kernel.clone(),
        initrd: a.initrd.clone(),
        append: a.append.clone(),
    };
    let hashes = snp::load_kernel_hashes(&inputs).map_err(|e| usage(e.to_string()))?;
    let ld = snp::launch_digest(&ovmf, hashes.as_ref(), &cfg).map_err(|source| {
        usage(
            snp::SnpError::Ovmf {
                path: a.ovmf.clone(),
                source,
            }
            .to_string(),
        )
    })?;
    if a.json {
        let v = serde_json::json!({
            "mode": "snp",
            "measurement": encode(&ld, a.output_format),
            "output_format": format!("{:?}", a.output_format).to_lowercase(),
            "vcpus": vcpus,
            "vcpu_sig": format!("{vcpu_sig:#x}"),
            "vcpu_from": vcpu_source,
            "vmm_type": a.vmm_type.to_string(),
            "guest_features": format!("{:#x}", a.guest_features),
            "ovmf": a.ovmf.display().to_string(),
            "ovmf_hash_given": a.snp_ovmf_hash.is_some(),
            "kernel": a.kernel.as_ref().map(|p| p.display().to_string()),
            "initrd": a.initrd.as_ref().map(|p| p.display().to_string()),
            "append": a.append,
            "kernel_hashes": hashes.map(|h| serde_json::json!({
                "kernel_sha256": hex::encode(h.kernel),
                "initrd_sha256": hex::encode(h.initrd),
                "cmdline_sha256": hex::encode(h.cmdline),
            })),
        });
        println!("{v:#}");
    } else {
        println!("{}", encode(&ld, a.output_format));
    }
    Ok(())
}

fn run_tdx(a: TdxArgs) -> Result<(), Fail> {
    let mut out = serde_json::Map::new();
    if let Some(path) = &a.ovmf {
        let ovmf = snp::load_ovmf(path).map_err(|e| usage(e.to_string()))?;
        let mrtd = tdx::mrtd(&ovmf).map_err(|e| usage(format!("TDVF {}: {e}", path.display())))?;
        if a.json {
            out.insert("mrtd".into(), hex::encode(mrtd).into());
        } else {
            println!("MRTD: {}", hex::encode(mrtd));
        }
    }
    if let Some(path) = &a.event_log {
        let bytes =
            std::fs::read(path).map_err(|e| usage(format!("event log {}: {e}", path.display())))?;
        let replay = tdx::replay_rtmrs(&bytes)
            .map_err(|e| usage(format!("event log {}: {e}", path.display())))?;
        if a.json {
            let events: Vec<_> = replay
                .events
                .iter()
                .map(|e| {
                    serde_json::json!({
                        "offset": e.offset,
                        "mr_index": e.mr_index,
                        "rtmr": e.rtmr,
                        "type": e.event_type,
                        "type_name": e.type_name(),
                        "sha384": e.sha384.map(hex::encode),
                        "data_len": e.data.len(),
                    })
                })
                .collect();
            out.insert("events".into(), events.into());
            let rtmrs: Vec<String> = replay.rtmrs.iter().map(hex::encode).collect();
            out.insert("rtmrs".into(), rtmrs.into());
        } else {
            for e in &replay.events {
                println!("{e}");
            }
            for (i, r) in replay.rtmrs.iter().enumerate() {
                println!("RTMR{i}: {}", hex::encode(r));
            }
        }
    }
    if a.json {
        println!("{:#}", serde_json::Value::Object(out));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Snp(a) => run_snp(a),
        Cmd::Tdx(a) => run_tdx(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("measure-guest: {msg}");
            ExitCode::from(code)
        }
    }
}
