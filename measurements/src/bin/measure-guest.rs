//! `measure-guest`: computes expected launch measurements from guest artifacts.
//! Subcommands: `snp` (SEV-SNP launch digest, flags as in sev-snp-measure), `tdx` (MRTD and RTMR replay),
//! `process` (the sim launch measurement of a process-tier binary), and the measurement-set tools.
//! Exit codes: 0 success, 1 a check said no, 2 unusable input or usage error.

use std::path::PathBuf;
use std::process::ExitCode;

use attestation::text::{escape, json_safe, shown};
use base64::Engine;
use clap::{Parser, Subcommand, ValueEnum};
use measurements::set::{self, Hex, HexU64, MeasurementSet};
use measurements::{sim, snp, tdx};
use sha2::{Digest, Sha256};

// Every subcommand prints through these (they shadow std's): a closed stdout is a quiet error exit, not a panic.
macro_rules! println {
    ($($t:tt)*) => {
        attestation::cli_println!($($t)*)
    };
}
macro_rules! print {
    ($($t:tt)*) => {
        attestation::cli_print!($($t)*)
    };
}

#[path = "../explain_cli.rs"]
mod explain_cli;

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
    /// The `process`-tier sim launch measurement of the exact guest-agent/fenced-run binary that runs the fence.
    Process(ProcessArgs),
    /// Compute a measurement set from the artifacts of a guest image release and write it as TOML.
    Pin(PinArgs),
    /// Sign a measurement set with an auditor key (writes a detached signature file).
    Sign(SignArgs),
    /// Generate an auditor key pair (PREFIX.key, PKCS#8 PEM, mode 0600; PREFIX.pub, public key PEM).
    Keygen(KeygenArgs),
    /// Check that at least K trusted auditors signed a set, and optionally that a measurement is in it.
    VerifySet(VerifySetArgs),
    /// Which launch configuration produces the measurement of an evidence file, SNP report or TDX quote.
    Explain(explain_cli::ExplainArgs),
    /// Write an identity entry (an image and the launch profiles it admits) into a new or an existing set.
    Identity(IdentityArgs),
    /// Give a set a new not_after (an old-format set gets the current format); its signatures must be made again.
    Renew(RenewArgs),
}

/// When a new set expires: `--not-after DATE` or `--valid-days N` from now.
#[derive(clap::Args, Debug, Clone)]
struct ExpiryArgs {
    /// The set's not_after (RFC 3339 date-time, e.g. 2027-01-31T00:00:00Z).
    #[arg(long, value_name = "DATE", conflicts_with = "valid_days")]
    not_after: Option<String>,
    /// Days from now until the set expires (default 180).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=3660))]
    valid_days: Option<u32>,
}

impl ExpiryArgs {
    fn not_after(&self) -> Result<String, Fail> {
        match &self.not_after {
            Some(t) => {
                set::parse_time(t).map_err(|e| usage(format!("--not-after {t:?}: {e}")))?;
                Ok(t.trim().to_owned())
            }
            None => Ok(set::not_after_in_days(
                now_unix(),
                self.valid_days.unwrap_or(set::DEFAULT_VALID_DAYS),
            )),
        }
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[derive(clap::Args, Debug)]
struct IdentityArgs {
    /// The guest image directory (`fenced-run image build --out DIR`); its files are checked against its manifest.
    #[arg(long, value_name = "DIR")]
    image: PathBuf,
    /// An SEV-SNP OVMF build to admit (repeatable): the entry records its OVMF hash and SEV metadata.
    #[arg(long, value_name = "FILE")]
    ovmf: Vec<PathBuf>,
    /// A TDX OVMF (TDVF) build to admit (repeatable): the entry records its MRTD and the image's RTMR1/RTMR2.
    #[arg(long, value_name = "FILE")]
    tdvf: Vec<PathBuf>,
    /// vCPU counts to admit (comma-separated counts or ranges, e.g. 1-16,32).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    vcpus: Vec<String>,
    /// vCPU types to admit (QEMU).
    #[arg(long, value_delimiter = ',', default_value = "EPYC-Milan,EPYC-Genoa")]
    vcpu_types: Vec<String>,
    /// VMM types to admit.
    #[arg(long, value_delimiter = ',', default_value = "QEMU")]
    vmm: Vec<snp::VmmType>,
    /// Guest features to admit.
    #[arg(long, value_delimiter = ',', value_parser = parse_int::<u64>, default_value = "0x1")]
    guest_features: Vec<u64>,
    /// The guest policy an SNP report must carry.
    #[arg(long, value_parser = parse_int::<u64>, default_value = "0x30000")]
    policy: u64,
    /// Also admit QEMU 10.1's RTMR1 (it patches the kernel's setup header before TDVF measures it).
    #[arg(long)]
    tdx_qemu_10_1: bool,
    /// Add the entry to this set (rewritten in place; its signatures must be made again).
    #[arg(long, value_name = "SET", conflicts_with_all = ["out", "release_version", "not_after", "valid_days"])]
    add_to: Option<PathBuf>,
    /// Write a new set holding the entry here (stdout when neither this nor --add-to is given).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Release name of a new set.
    #[arg(long, default_value = "fenced-run-guest")]
    name: String,
    /// Release version of a new set (default: `sha256-` and 16 hex digits of the initramfs's SHA-256).
    #[arg(long = "release-version", value_name = "VERSION")]
    release_version: Option<String>,
    #[command(flatten)]
    expiry: ExpiryArgs,
}

#[derive(clap::Args, Debug)]
struct RenewArgs {
    /// The set to renew (rewritten in place unless --out is given).
    #[arg(long, value_name = "PATH")]
    set: PathBuf,
    /// Where to write the renewed set.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    #[command(flatten)]
    expiry: ExpiryArgs,
}

#[derive(clap::Args, Debug)]
struct ProcessArgs {
    /// The binary (the `fenced-run` or `guest-agent` executable exactly as it runs).
    #[arg(long, value_name = "FILE")]
    binary: PathBuf,
    /// Print a JSON object instead of the hex measurement.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct PinArgs {
    /// A guest image directory (`fenced-run image build --out DIR`): its manifest's kernel, initramfs,
    /// command line and firmware are checked against the files, every measurement is computed again from them,
    /// and the set gets the vm entry, the SNP digests per vCPU count and the TDX MRTD the manifest lists.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["kernel", "initrd", "append", "ovmf", "tdvf"]
    )]
    image: Option<PathBuf>,
    /// Release name of the guest image.
    #[arg(long, default_value = "fenced-run-guest")]
    name: String,
    /// Release version (with --image, default: `sha256-` and the first 16 hex digits of the initramfs's
    /// SHA-256).
    #[arg(
        long = "release-version",
        value_name = "VERSION",
        required_unless_present = "image"
    )]
    release_version: Option<String>,
    /// The kernel (with --initrd; omit both for a set of process-tier entries only).
    #[arg(
        long,
        value_name = "PATH",
        requires = "initrd",
        required_unless_present_any = ["process_binary", "image"]
    )]
    kernel: Option<PathBuf>,
    /// The initramfs.
    #[arg(long, value_name = "PATH", requires = "kernel")]
    initrd: Option<PathBuf>,
    /// The kernel command line.
    #[arg(long, value_name = "CMDLINE", default_value = "")]
    append: String,
    /// OVMF image for the SNP entries (omit for a set without SNP entries).
    #[arg(long, value_name = "PATH", requires = "kernel")]
    ovmf: Option<PathBuf>,
    /// A process-tier binary (fenced-run or guest-agent, exactly as it runs): adds a `process` sim entry with
    /// its measurement (as `measure-guest process --binary` prints it); repeatable.
    #[arg(long = "process-binary", value_name = "FILE")]
    process_binary: Vec<PathBuf>,
    /// vCPU counts of the SNP entries (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    snp_vcpus: Vec<u32>,
    /// vCPU types of the SNP entries (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "EPYC-Milan,EPYC-Genoa")]
    snp_vcpu_types: Vec<String>,
    /// Guest features of the SNP entries (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = parse_int::<u64>, default_value = "0x1")]
    snp_guest_features: Vec<u64>,
    /// VMM types of the SNP entries (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "QEMU")]
    snp_vmm: Vec<snp::VmmType>,
    /// The guest policy every SNP entry requires.
    #[arg(long, value_parser = parse_int::<u64>, default_value = "0x30000")]
    snp_policy: u64,
    /// TDVF image for a TDX entry (its MRTD).
    #[arg(long, value_name = "PATH", requires = "kernel")]
    tdvf: Option<PathBuf>,
    /// CCEL event log of a reference boot, to pin RTMR0-3 in the TDX entry (with --tdvf or --image).
    #[arg(long, value_name = "FILE")]
    tdx_event_log: Option<PathBuf>,
    /// Where to write the set (stdout when absent).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    #[command(flatten)]
    expiry: ExpiryArgs,
}

#[derive(clap::Args, Debug)]
struct SignArgs {
    /// The auditor's private key (PKCS#8 PEM, from `measure-guest keygen`).
    #[arg(long, value_name = "PATH")]
    key: PathBuf,
    /// The measurement set to sign.
    #[arg(long, value_name = "PATH")]
    set: PathBuf,
    /// The auditor's name, recorded in the signature file.
    #[arg(long)]
    auditor: String,
    /// Signature file to write (default: SET.AUDITOR.sig).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Replace an existing signature file (default: refuse to overwrite it).
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args, Debug)]
struct KeygenArgs {
    /// Writes PREFIX.key and PREFIX.pub; refuses to overwrite.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
struct VerifySetArgs {
    /// The measurement set.
    #[arg(long, value_name = "PATH")]
    set: PathBuf,
    /// Detached signature files; repeat for each. Default: every `SET.*.sig` beside the set (the names
    /// `sign` writes), as `verify-attestation evidence --measurements` does.
    #[arg(long = "signature", value_name = "PATH")]
    signatures: Vec<PathBuf>,
    /// Public keys of the auditors you trust.
    #[arg(long = "auditor-key", value_name = "PATH", required = true)]
    auditor_keys: Vec<PathBuf>,
    /// How many distinct trusted auditors must have signed.
    #[arg(long, value_name = "K", default_value = "1")]
    auditors_required: usize,
    /// An SNP launch digest (hex) that must be in the set.
    #[arg(long, value_name = "HEX")]
    snp_measurement: Option<String>,
    /// The guest policy the SNP report carries (checked against the entry's required policy).
    #[arg(long, value_parser = parse_int::<u64>, requires = "snp_measurement")]
    snp_policy: Option<u64>,
    /// The time to check the set's not_after against (RFC 3339; default now).
    #[arg(long, value_name = "DATE")]
    at: Option<String>,
}

#[derive(clap::Args, Debug)]
struct TdxArgs {
    /// The TDVF/OVMF image whose MRTD to compute (also accepted as --tdvf).
    #[arg(
        long,
        alias = "tdvf",
        value_name = "PATH",
        required_unless_present = "event_log"
    )]
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
    /// SEV: SHA-256 of OVMF (and the SEV hashes table with --kernel).
    #[value(name = "sev")]
    Sev,
    /// SEV-ES: SEV's digest continued over the VMSAs.
    #[value(name = "seves")]
    SevEs,
    /// The full SEV-SNP launch digest.
    #[value(name = "snp")]
    Snp,
    /// Only the digest of the OVMF image (to pass later as --snp-ovmf-hash).
    #[value(name = "snp:ovmf-hash")]
    OvmfHash,
    /// SEV-SNP with a Coconut SVSM below OVMF (needs --svsm and --vars-file or --vars-size).
    #[value(name = "snp:svsm")]
    Svsm,
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
    /// What to compute: sev, seves, snp, snp:ovmf-hash or snp:svsm.
    #[arg(long, value_enum, default_value = "snp")]
    mode: Mode,
    /// Print "Calculated <MODE> guest measurement: <value>" as sev-snp-measure -v does.
    #[arg(short, long)]
    verbose: bool,
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
    /// SEV_FEATURES of the VMSAs, 0x-hex or decimal (default 0x1; modes seves and snp:svsm use 0 and 1).
    #[arg(long, value_name = "VALUE", value_parser = parse_int::<u64>)]
    guest_features: Option<u64>,
    /// Precomputed OVMF hash (hex, from --mode snp:ovmf-hash) to start from.
    #[arg(long, value_name = "HASH")]
    snp_ovmf_hash: Option<String>,
    /// Output encoding of the measurement.
    #[arg(long, value_enum, default_value = "hex")]
    output_format: OutputFormat,
    /// Write the measured VMSA pages as vmsa0.bin, vmsa1.bin, ... into DIR (default: the current directory, as
    /// sev-snp-measure's --dump-vmsa does); modes seves, snp and snp:svsm.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
    dump_vmsa: Option<PathBuf>,
    /// The Coconut SVSM image (mode snp:svsm).
    #[arg(long, value_name = "PATH")]
    svsm: Option<PathBuf>,
    /// Size in bytes of the OVMF variable store placed between the SVSM and OVMF (mode snp:svsm).
    #[arg(long, value_name = "SIZE", value_parser = parse_int::<u64>, conflicts_with = "vars_file")]
    vars_size: Option<u64>,
    /// The OVMF_VARS file whose size places the SVSM (mode snp:svsm).
    #[arg(long, value_name = "PATH")]
    vars_file: Option<PathBuf>,
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
    .map_err(|e| format!("`{s}` is not a number: {e}"))?;
    T::try_from(v).map_err(|_| format!("`{s}` is out of range"))
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

fn note(msg: &str) {
    eprintln!("measure-guest: note: {}", escape(msg));
}

/// The vCPU signature and where it came from, with sev-snp-measure's precedence (family/model/stepping, then
/// --vcpu-sig, then --vcpu-type); QEMU needs one, EC2 and GCE put 0x600 in RDX whatever it is.
fn snp_vcpu_sig(a: &SnpArgs, mode: &str) -> Result<(u32, String), Fail> {
    Ok(match (a.vcpu_family, a.vcpu_sig, &a.vcpu_type) {
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
            return Err(usage(format!(
                "missing --vcpu-type or --vcpu-sig or --vcpu-family in mode {mode} with QEMU"
            )))
        }
        (None, None, None) => (0, "none (not used by this VMM)".to_owned()),
    })
}

fn run_snp(a: SnpArgs) -> Result<(), Fail> {
    use measurements::snp_modes::{self, SevMode};
    // The OVMF is read on this thread while another hashes the kernel and initrd (the two largest inputs).
    let inputs = snp::SnpInputs {
        ovmf: a.ovmf.clone(),
        kernel: a.kernel.clone(),
        initrd: a.initrd.clone(),
        append: a.append.clone(),
    };
    let wants_hashes = !matches!(a.mode, Mode::OvmfHash | Mode::Svsm);
    let (ovmf, hashes) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            if wants_hashes {
                snp::load_kernel_hashes(&inputs)
            } else {
                Ok(None)
            }
        });
        let o = snp::load_ovmf(&a.ovmf);
        let h = h
            .join()
            .unwrap_or_else(|_| snp::load_kernel_hashes(&inputs));
        (o, h)
    });
    let ovmf = ovmf.map_err(|e| usage(e.to_string()))?;
    if a.mode == Mode::OvmfHash {
        let h = snp::ovmf_hash(&ovmf);
        if a.json {
            let v = serde_json::json!({
                "mode": "snp:ovmf-hash",
                "ovmf": a.ovmf.display().to_string(),
                "ovmf_hash": hex::encode(h),
            });
            println!("{}", json_safe(&format!("{v:#}")));
        } else {
            // Always hex, as sev-snp-measure prints it: it is the input format of --snp-ovmf-hash.
            println!("{}", hex::encode(h));
        }
        return Ok(());
    }
    let hashes = hashes.map_err(|e| usage(e.to_string()))?;
    let (mode, mode_flag) = match a.mode {
        Mode::Sev => (SevMode::Sev, "sev"),
        Mode::SevEs => (SevMode::SevEs, "seves"),
        Mode::Svsm => (SevMode::SnpSvsm, "snp:svsm"),
        Mode::Snp | Mode::OvmfHash => (SevMode::Snp, "snp"),
    };
    if mode == SevMode::Sev && a.dump_vmsa.is_some() {
        return Err(usage(
            "--dump-vmsa: mode sev measures no VMSAs (modes seves, snp and snp:svsm do)",
        ));
    }
    if a.snp_ovmf_hash.is_some() && mode != SevMode::Snp {
        return Err(usage(format!(
            "--snp-ovmf-hash works only with --mode snp, not {mode_flag}"
        )));
    }
    if mode != SevMode::SnpSvsm
        && (a.svsm.is_some() || a.vars_size.is_some() || a.vars_file.is_some())
    {
        note(&format!(
            "--svsm, --vars-size and --vars-file are not used in mode {mode_flag}"
        ));
    }
    if a.guest_features.is_some() && mode != SevMode::Snp {
        note(&format!(
            "--guest-features is not used in mode {mode_flag} (sev-snp-measure ignores it too)"
        ));
    }
    let (vcpus, vcpu_sig, vcpu_source) = if mode == SevMode::Sev {
        (0, 0, "none (mode sev)".to_owned())
    } else {
        let vcpus = a
            .vcpus
            .ok_or_else(|| usage(format!("--vcpus N is required in mode {mode_flag}")))?;
        if vcpus == 0 {
            return Err(usage("--vcpus must be at least 1"));
        }
        let (sig, src) = snp_vcpu_sig(&a, mode_flag)?;
        (vcpus, sig, src)
    };
    let guest_features = a.guest_features.unwrap_or(1);
    let ovmf_err = |source: snp::OvmfError| {
        usage(
            snp::SnpError::Ovmf {
                path: a.ovmf.clone(),
                source,
            }
            .to_string(),
        )
    };
    let cfg = snp::SnpConfig {
        vcpus,
        vcpu_sig,
        guest_features,
        vmm: a.vmm_type,
        ovmf_hash: None,
    };
    let mut vars_size = None;
    let (digest, vmsas): (Vec<u8>, Option<snp_modes::Vmsas>) = match mode {
        SevMode::Sev => (
            snp_modes::sev_digest(&ovmf, hashes.as_ref())
                .map_err(ovmf_err)?
                .to_vec(),
            None,
        ),
        SevMode::SevEs => {
            let (d, v) = snp_modes::seves_digest(&ovmf, hashes.as_ref(), &cfg).map_err(ovmf_err)?;
            (d.to_vec(), Some(v))
        }
        SevMode::SnpSvsm => {
            if a.vmm_type != snp::VmmType::Qemu {
                return Err(usage(format!(
                    "--vmm-type {}: mode snp:svsm is defined for QEMU only",
                    a.vmm_type
                )));
            }
            if a.kernel.is_some() {
                note("--kernel, --initrd and --append are not measured in mode snp:svsm (sev-snp-measure ignores them too)");
            }
            let size =
                match (&a.vars_file, a.vars_size) {
                    (Some(f), _) => std::fs::metadata(f)
                        .map_err(|e| usage(format!("--vars-file {}: {e}", f.display())))?
                        .len(),
                    (None, Some(n)) if n > 0 => n,
                    (None, Some(_)) => return Err(usage(
                        "--vars-size 0: mode snp:svsm needs the size of the OVMF variable store",
                    )),
                    (None, None) => {
                        return Err(usage("mode snp:svsm requires --vars-size or --vars-file"))
                    }
                };
            vars_size = Some(size);
            let svsm_path = a
                .svsm
                .as_ref()
                .ok_or_else(|| usage("mode snp:svsm requires --svsm PATH"))?;
            let svsm = snp::Ovmf::parse(read_file("--svsm", svsm_path)?)
                .map_err(|e| usage(format!("--svsm {}: {e}", svsm_path.display())))?;
            let (d, v) = snp_modes::svsm_digest(&ovmf, &svsm, size, vcpus, vcpu_sig)
                .map_err(|e| usage(format!("--svsm {}: {e}", svsm_path.display())))?;
            (d.to_vec(), Some(v))
        }
        _ => {
            let ovmf_hash = match &a.snp_ovmf_hash {
                Some(h) => {
                    let v = hex::decode(h.trim())
                        .map_err(|e| usage(format!("--snp-ovmf-hash: not hex: {e}")))?;
                    <[u8; 48]>::try_from(v.as_slice()).map_err(|_| {
                        usage(format!("--snp-ovmf-hash: {} bytes, expected 48", v.len()))
                    })?
                }
                None => snp::ovmf_hash(&ovmf),
            };
            let cfg = snp::SnpConfig {
                ovmf_hash: Some(ovmf_hash),
                ..cfg
            };
            let ld = snp::launch_digest(&ovmf, hashes.as_ref(), &cfg).map_err(ovmf_err)?;
            let vmsas = match &a.dump_vmsa {
                Some(_) => Some(snp_modes::snp_vmsas(&ovmf, &cfg).map_err(ovmf_err)?),
                None => None,
            };
            (ld.to_vec(), vmsas)
        }
    };
    if let (Some(dir), Some(v)) = (&a.dump_vmsa, &vmsas) {
        v.write_to(dir)
            .map_err(|e| usage(format!("--dump-vmsa {}: {e}", dir.display())))?;
    }
    let measurement = encode(&digest, a.output_format);
    if a.json {
        let v = serde_json::json!({
            "mode": mode_flag,
            "measurement": measurement,
            "output_format": format!("{:?}", a.output_format).to_lowercase(),
            "vcpus": vcpus,
            "vcpu_sig": format!("{vcpu_sig:#x}"),
            "vcpu_from": vcpu_source,
            "vmm_type": a.vmm_type.to_string(),
            "guest_features": format!("{:#x}", match mode {
                SevMode::Snp => guest_features,
                SevMode::SnpSvsm => 1,
                _ => 0,
            }),
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
            "svsm": a.svsm.as_ref().filter(|_| mode == SevMode::SnpSvsm).map(|p| p.display().to_string()),
            "vars_size": vars_size,
            "vmsa_dump_dir": a.dump_vmsa.as_ref().map(|p| p.display().to_string()),
        });
        println!("{}", json_safe(&format!("{v:#}")));
    } else if a.verbose {
        println!(
            "Calculated {} guest measurement: {measurement}",
            mode.name()
        );
    } else {
        println!("{measurement}");
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
        // A CCEL is 64 KiB; the size is checked before anything is read.
        let bytes = attestation::cli_io::read_capped(path, attestation::cli_io::MAX_INPUT)
            .map_err(|e| usage(format!("event log: {e}")))?;
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
                println!("{}", shown(e));
            }
            for (i, r) in replay.rtmrs.iter().enumerate() {
                println!("RTMR{i}: {}", hex::encode(r));
            }
        }
    }
    if a.json {
        println!(
            "{}",
            json_safe(&format!("{:#}", serde_json::Value::Object(out)))
        );
    }
    Ok(())
}

fn run_process(a: ProcessArgs) -> Result<(), Fail> {
    let bytes = read_file("--binary", &a.binary)?;
    let m = attestation::sim::process_launch_measurement(&bytes);
    if a.json {
        let v = serde_json::json!({
            "tier": "process",
            "binary": a.binary.display().to_string(),
            "binary_sha256": hex::encode(Sha256::digest(&bytes)),
            "measurement": hex::encode(m),
        });
        println!("{v:#}");
    } else {
        println!("{}", hex::encode(m));
    }
    Ok(())
}

/// The process-tier sim entry of a binary.
fn process_entry(path: &std::path::Path) -> Result<set::SimEntry, Fail> {
    let bytes = read_file("--process-binary", path)?;
    Ok(set::SimEntry {
        tier: "process".to_owned(),
        measurement: Hex(attestation::sim::process_launch_measurement(&bytes)),
        binary_sha256: Some(Hex(Sha256::digest(&bytes).into())),
    })
}

fn read_file(what: &str, path: &std::path::Path) -> Result<Vec<u8>, Fail> {
    // Kernels and initrds of a guest image are tens of MiB; 4 GiB is checked before anything is read.
    attestation::cli_io::read_capped(path, 4 << 30).map_err(|e| usage(format!("{what}: {e}")))
}

/// A set's TDX entry of `mrtd` and RTMR0-3 (`None`: not pinned).
fn tdx_entry(mrtd: [u8; 48], rtmrs: [Option<Hex<48>>; 4]) -> set::TdxEntry {
    let [rtmr0, rtmr1, rtmr2, rtmr3] = rtmrs;
    set::TdxEntry {
        mrtd: Hex(mrtd),
        rtmr0,
        rtmr1,
        rtmr2,
        rtmr3,
    }
}

fn hex48(what: &str, s: &str) -> Result<[u8; 48], Fail> {
    let v = hex::decode(s.trim()).map_err(|e| usage(format!("{what}: not hex: {e}")))?;
    <[u8; 48]>::try_from(v.as_slice())
        .map_err(|_| usage(format!("{what}: {} bytes, expected 48", v.len())))
}

/// `pin --image DIR`: the image's files checked against its manifest, every measurement computed again.
fn pin_image(a: &PinArgs, dir: &std::path::Path) -> Result<MeasurementSet, Fail> {
    use measurements::manifest::{Manifest, TdxMeasurement};
    let m = Manifest::load(dir).map_err(|e| usage(e.to_string()))?;
    let file = |name: &str, want256: &str, what: &str| -> Result<Vec<u8>, Fail> {
        let p = dir.join(name);
        let bytes = read_file(what, &p)?;
        let have = hex::encode(Sha256::digest(&bytes));
        if have != want256 {
            return Err(Fail(
                1,
                format!(
                    "{}: sha256 {have}, but the manifest lists {}",
                    p.display(),
                    escape(want256)
                ),
            ));
        }
        Ok(bytes)
    };
    let kernel = file(&m.kernel.file, &m.kernel.sha256, "kernel")?;
    let initrd = file(&m.initramfs.file, &m.initramfs.sha256, "initramfs")?;
    let cmdline = m.cmdline.value.clone();
    if hex::encode(sim::cmdline_sha256(&cmdline)) != m.cmdline.sha256 {
        return Err(Fail(
            1,
            format!(
                "{}: the command line's sha256 is not the one listed",
                dir.display()
            ),
        ));
    }
    let mut artifacts = set::Artifacts {
        kernel_sha256: Some(Hex(Sha256::digest(&kernel).into())),
        initramfs_sha256: Some(Hex(Sha256::digest(&initrd).into())),
        cmdline: Some(cmdline.clone()),
        cmdline_sha256: Some(Hex(sim::cmdline_sha256(&cmdline))),
        ovmf_sha256: None,
        tdvf_sha256: None,
    };
    // The vm tier boots the PVH kernel where the image has one (the bzImage's payload, decompressed at build;
    // docs/vm.md), and the vm measurement covers that file.
    let vm_kernel = match &m.vm_kernel {
        Some(k) => Some(file(&k.file, &k.sha256, "vm kernel")?),
        None => None,
    };
    let vm = sim::vm_launch_measurement(vm_kernel.as_deref().unwrap_or(&kernel), &initrd, &cmdline);
    if hex::encode(vm) != m.measurements.vm {
        return Err(Fail(
            1,
            format!(
                "{}: the vm measurement of these files is {}, the manifest lists {}",
                dir.display(),
                hex::encode(vm),
                escape(&m.measurements.vm)
            ),
        ));
    }
    let mut snp_entries = Vec::new();
    if let Some(first) = m.measurements.sev_snp.first() {
        let fw = file(SNP_FIRMWARE_FILE, &first.ovmf_sha256, "OVMF")?;
        artifacts.ovmf_sha256 = Some(Hex(Sha256::digest(&fw).into()));
        let ovmf =
            snp::Ovmf::parse(fw).map_err(|e| usage(format!("OVMF in {}: {e}", dir.display())))?;
        let hashes = snp::KernelHashes::new(&kernel, Some(&initrd), Some(&cmdline));
        for e in &m.measurements.sev_snp {
            if e.ovmf_sha256 != first.ovmf_sha256 {
                return Err(usage(format!(
                    "{}: SNP entries for two OVMF images; an image holds one",
                    dir.display()
                )));
            }
            let sig = snp::vcpu_sig_for_type(&e.vcpu_type).ok_or_else(|| {
                usage(format!(
                    "manifest: unknown vCPU type {}",
                    escape(&e.vcpu_type)
                ))
            })?;
            let cfg = snp::SnpConfig {
                vcpus: e.vcpus,
                vcpu_sig: sig,
                guest_features: e.guest_features,
                vmm: snp::VmmType::Qemu,
                ovmf_hash: None,
            };
            let ld = snp::launch_digest(&ovmf, Some(&hashes), &cfg)
                .map_err(|e| usage(format!("OVMF in {}: {e}", dir.display())))?;
            if hex::encode(ld) != e.measurement {
                return Err(Fail(
                    1,
                    format!(
                        "{}: SNP digest for {} vCPU {} is {}, the manifest lists {}",
                        dir.display(),
                        e.vcpus,
                        escape(&e.vcpu_type),
                        hex::encode(ld),
                        escape(&e.measurement)
                    ),
                ));
            }
            snp_entries.push(set::SnpEntry {
                vcpus: e.vcpus,
                vcpu_type: Some(e.vcpu_type.clone()),
                vcpu_sig: HexU64(u64::from(sig)),
                vmm: snp::VmmType::Qemu.to_string(),
                guest_features: HexU64(e.guest_features),
                policy: HexU64(a.snp_policy),
                measurement: Hex(ld),
            });
        }
    }
    let mut tdx_entries = Vec::new();
    if let Some(TdxMeasurement { ovmf_sha256, .. }) = &m.measurements.tdx {
        let fw = file(TDX_FIRMWARE_FILE, ovmf_sha256, "TDX OVMF")?;
        artifacts.tdvf_sha256 = Some(Hex(Sha256::digest(&fw).into()));
        let again = measurements::manifest::tdx_measurement(&fw, &kernel, &initrd, &cmdline)
            .map_err(|e| usage(format!("TDX OVMF in {}: {e}", dir.display())))?;
        if Some(&again) != m.measurements.tdx.as_ref() {
            return Err(Fail(
                1,
                format!(
                    "{}: the TDX measurements of these files (MRTD {}) differ from the manifest's",
                    dir.display(),
                    again.mrtd
                ),
            ));
        }
        let mrtd = hex48("manifest MRTD", &again.mrtd)?;
        match &a.tdx_event_log {
            Some(p) => {
                let r = tdx::replay_rtmrs(&read_file("event log", p)?)
                    .map_err(|e| usage(format!("event log {}: {e}", p.display())))?;
                tdx_entries.push(tdx_entry(mrtd, r.rtmrs.map(|m| Some(Hex(m)))));
            }
            None => {
                // The direct-boot RTMR1/RTMR2 of the manifest: one entry for QEMU 10.2 and later (the kernel
                // as is), one for QEMU 10.1 (its setup-header patch); RTMR0 and RTMR3 stay unpinned.
                let rtmr2 = again.rtmrs[2]
                    .as_deref()
                    .map(|h| hex48("manifest RTMR2", h))
                    .transpose()?;
                let rtmr1s = [again.rtmrs[1].as_deref(), again.rtmr1_qemu_10_1.as_deref()];
                for rtmr1 in rtmr1s.into_iter().flatten() {
                    let rtmr1 = Some(Hex(hex48("manifest RTMR1", rtmr1)?));
                    tdx_entries.push(tdx_entry(mrtd, [None, rtmr1, rtmr2.map(Hex), None]));
                }
                if tdx_entries.is_empty() {
                    eprintln!(
                        "measure-guest pin: warning: the image's TDX entry pins MRTD only (the manifest has no \
                         RTMR values; give --tdx-event-log of a reference boot to pin them); verify-attestation \
                         accepts it only with --leave-rtmrs-unpinned"
                    );
                    tdx_entries.push(tdx_entry(mrtd, [None, None, None, None]));
                }
            }
        }
    }
    let mut sim_entries = vec![set::SimEntry {
        tier: "vm".to_owned(),
        measurement: Hex(vm),
        binary_sha256: None,
    }];
    for p in &a.process_binary {
        let e = process_entry(p)?;
        if !sim_entries.contains(&e) {
            sim_entries.push(e);
        }
    }
    let version = a.release_version.clone().unwrap_or_else(|| {
        format!(
            "sha256-{}",
            &m.initramfs.sha256[..16.min(m.initramfs.sha256.len())]
        )
    });
    Ok(MeasurementSet {
        format: set::SET_FORMAT.to_owned(),
        not_after: Some(a.expiry.not_after()?),
        release: set::Release {
            name: a.name.clone(),
            version,
        },
        artifacts,
        snp: snp_entries,
        tdx: tdx_entries,
        sim: sim_entries,
        identity: Vec::new(),
    })
}

/// The firmware file names inside an image directory (host::vm::confidential writes the same names).
const SNP_FIRMWARE_FILE: &str = "OVMF.amdsev.fd";
/// See [`SNP_FIRMWARE_FILE`].
const TDX_FIRMWARE_FILE: &str = "OVMF.tdx.fd";

fn write_set(a: &PinArgs, s: &MeasurementSet) -> Result<(), Fail> {
    let text = s.to_toml();
    match &a.out {
        Some(p) => std::fs::write(p, &text).map_err(|e| usage(format!("{}: {e}", p.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn run_pin(a: PinArgs) -> Result<(), Fail> {
    if let Some(dir) = a.image.clone() {
        let s = pin_image(&a, &dir)?;
        return write_set(&a, &s);
    }
    if a.tdx_event_log.is_some() && a.tdvf.is_none() {
        return Err(usage(
            "--tdx-event-log needs --tdvf (or --image with a TDX OVMF)",
        ));
    }
    let image = match (&a.kernel, &a.initrd) {
        (Some(k), Some(i)) => Some((read_file("kernel", k)?, read_file("initrd", i)?)),
        _ => None,
    };
    let mut artifacts = set::Artifacts {
        kernel_sha256: None,
        initramfs_sha256: None,
        cmdline: None,
        cmdline_sha256: None,
        ovmf_sha256: None,
        tdvf_sha256: None,
    };
    if let Some((kernel, initrd)) = &image {
        artifacts.kernel_sha256 = Some(Hex(Sha256::digest(kernel).into()));
        artifacts.initramfs_sha256 = Some(Hex(Sha256::digest(initrd).into()));
        artifacts.cmdline = Some(a.append.clone());
        artifacts.cmdline_sha256 = Some(Hex(sim::cmdline_sha256(&a.append)));
    }
    let mut snp_entries: Vec<set::SnpEntry> = Vec::new();
    if let (Some(path), Some((kernel, initrd))) = (&a.ovmf, &image) {
        let bytes = read_file("OVMF", path)?;
        artifacts.ovmf_sha256 = Some(Hex(Sha256::digest(&bytes).into()));
        let ovmf =
            snp::Ovmf::parse(bytes).map_err(|e| usage(format!("OVMF {}: {e}", path.display())))?;
        let hashes = snp::KernelHashes::new(kernel, Some(initrd), Some(&a.append));
        let base = snp::ovmf_hash(&ovmf);
        for &vcpus in &a.snp_vcpus {
            for t in &a.snp_vcpu_types {
                let sig = snp::vcpu_sig_for_type(t)
                    .ok_or_else(|| usage(format!("--snp-vcpu-types: unknown {t:?}")))?;
                for &features in &a.snp_guest_features {
                    for &vmm in &a.snp_vmm {
                        let cfg = snp::SnpConfig {
                            vcpus,
                            vcpu_sig: sig,
                            guest_features: features,
                            vmm,
                            ovmf_hash: Some(base),
                        };
                        let ld = snp::launch_digest(&ovmf, Some(&hashes), &cfg)
                            .map_err(|e| usage(format!("OVMF {}: {e}", path.display())))?;
                        // Only QEMU puts the vCPU signature in the VMSAs; EC2 and GCE put 0x600 whatever the
                        // CPU type, so their entries name no type and would otherwise repeat per type.
                        let (vcpu_type, vcpu_sig) = if vmm == snp::VmmType::Qemu {
                            (Some(t.clone()), u64::from(sig))
                        } else {
                            (None, 0x600)
                        };
                        let entry = set::SnpEntry {
                            vcpus,
                            vcpu_type,
                            vcpu_sig: HexU64(vcpu_sig),
                            vmm: vmm.to_string(),
                            guest_features: HexU64(features),
                            policy: HexU64(a.snp_policy),
                            measurement: Hex(ld),
                        };
                        if !snp_entries.contains(&entry) {
                            snp_entries.push(entry);
                        }
                    }
                }
            }
        }
    }
    let mut tdx_entries = Vec::new();
    if let Some(path) = &a.tdvf {
        let bytes = read_file("TDVF", path)?;
        artifacts.tdvf_sha256 = Some(Hex(Sha256::digest(&bytes).into()));
        let ovmf =
            snp::Ovmf::parse(bytes).map_err(|e| usage(format!("TDVF {}: {e}", path.display())))?;
        let mrtd = tdx::mrtd(&ovmf).map_err(|e| usage(format!("TDVF {}: {e}", path.display())))?;
        let rtmrs = match &a.tdx_event_log {
            Some(p) => {
                let r = tdx::replay_rtmrs(&read_file("event log", p)?)
                    .map_err(|e| usage(format!("event log {}: {e}", p.display())))?;
                r.rtmrs.map(|m| Some(Hex(m)))
            }
            None => {
                eprintln!(
                    "measure-guest pin: warning: --tdvf without --tdx-event-log pins MRTD only; the kernel, \
                     initramfs and command line (RTMR1, RTMR2) stay unpinned and verify-attestation accepts \
                     this entry only with --leave-rtmrs-unpinned"
                );
                [None, None, None, None]
            }
        };
        tdx_entries.push(tdx_entry(mrtd, rtmrs));
    }
    let mut sim_entries = Vec::new();
    if let Some((kernel, initrd)) = &image {
        sim_entries.push(set::SimEntry {
            tier: "vm".to_owned(),
            measurement: Hex(sim::vm_launch_measurement(kernel, initrd, &a.append)),
            binary_sha256: None,
        });
    }
    for p in &a.process_binary {
        let e = process_entry(p)?;
        if !sim_entries.contains(&e) {
            sim_entries.push(e);
        }
    }
    if snp_entries.is_empty() && tdx_entries.is_empty() {
        eprintln!(
            "measure-guest pin: warning: no --ovmf or --tdvf: the set pins only simulated launches ({}); \
             evidence from SEV-SNP or TDX hardware matches none of its entries",
            sim_entries
                .iter()
                .map(|e| e.tier.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let measurement_set = MeasurementSet {
        format: set::SET_FORMAT.to_owned(),
        not_after: Some(a.expiry.not_after()?),
        release: set::Release {
            name: a.name.clone(),
            version: a.release_version.clone().unwrap_or_default(),
        },
        artifacts,
        snp: snp_entries,
        tdx: tdx_entries,
        sim: sim_entries,
        identity: Vec::new(),
    };
    write_set(&a, &measurement_set)
}

fn run_sign(a: SignArgs) -> Result<(), Fail> {
    use std::io::Write;
    let key = set::load_private_key(&a.key).map_err(|e| usage(e.to_string()))?;
    let s = MeasurementSet::load(&a.set).map_err(|e| usage(e.to_string()))?;
    let sig = set::SignatureFile::sign(&s, &key, &a.auditor);
    let out = a.out.unwrap_or_else(|| {
        let mut p = a.set.clone().into_os_string();
        p.push(format!(".{}.sig", a.auditor));
        PathBuf::from(p)
    });
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if a.force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    open.open(&out)
        .and_then(|mut f| f.write_all(sig.to_toml().as_bytes()))
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                usage(format!(
                    "{}: a signature file exists already; give --force to replace it",
                    out.display()
                ))
            } else {
                usage(format!("{}: {e}", out.display()))
            }
        })?;
    println!(
        "signed {} (set_sha256 {}) -> {}",
        escape(&s.label()),
        hex::encode(s.digest()),
        shown(out.display())
    );
    Ok(())
}

fn run_keygen(a: KeygenArgs) -> Result<(), Fail> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let key = set::generate_key();
    let with_ext = |ext: &str| {
        let mut p = a.out.clone().into_os_string();
        p.push(ext);
        PathBuf::from(p)
    };
    let (kp, pp) = (with_ext(".key"), with_ext(".pub"));
    let private = set::private_key_pem(&key).map_err(|e| Fail(2, e.to_string()))?;
    let public = set::public_key_pem(&key.verifying_key()).map_err(|e| Fail(2, e.to_string()))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&kp)
        .map_err(|e| usage(format!("{}: {e}", kp.display())))?;
    f.write_all(private.as_bytes())
        .map_err(|e| usage(format!("{}: {e}", kp.display())))?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&pp)
        .and_then(|mut f| f.write_all(public.as_bytes()))
        .map_err(|e| usage(format!("{}: {e}", pp.display())))?;
    println!(
        "{} (private, 0600)\n{} (public key {})",
        shown(kp.display()),
        shown(pp.display()),
        hex::encode(key.verifying_key().to_bytes())
    );
    Ok(())
}

fn run_verify_set(a: VerifySetArgs) -> Result<(), Fail> {
    let signatures = if a.signatures.is_empty() {
        set::default_signature_paths(&a.set).map_err(|e| usage(e.to_string()))?
    } else {
        a.signatures.clone()
    };
    let t = match set::TrustedSet::load(&a.set, &signatures, &a.auditor_keys, a.auditors_required) {
        Ok(t) => t,
        Err(e @ set::SetError::NotEnoughAuditors { .. }) => return Err(Fail(1, e.to_string())),
        Err(e) => return Err(usage(e.to_string())),
    };
    println!(
        "measurement set {}: signed by {} trusted auditor(s): {}",
        shown(t.name()),
        t.signers.len(),
        escape(
            &t.signers
                .iter()
                .map(|(n, k)| format!("{n} ({})", k.get(..16).unwrap_or(k)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    );
    for p in &t.problems {
        println!("note: {}", shown(p));
    }
    let at = match &a.at {
        Some(s) => set::parse_time(s)
            .map_err(|e| usage(format!("--at {s:?}: {e}")))?
            .unix_timestamp(),
        None => now_unix(),
    };
    t.check_current(at).map_err(|e| Fail(1, e.to_string()))?;
    if let Some(n) = &t.set.not_after {
        println!("valid until {}", escape(n));
    }
    if let Some(m) = &a.snp_measurement {
        let m = hex48("--snp-measurement", m)?;
        let r = match a.snp_policy {
            Some(p) => t.match_snp_policy(&m, p),
            None => t.match_snp(&m),
        };
        let e = r.map_err(|e| Fail(1, e.to_string()))?;
        println!("in set: {}", shown(e));
    }
    Ok(())
}

fn write_text(out: Option<&std::path::Path>, text: &str) -> Result<(), Fail> {
    match out {
        Some(p) => std::fs::write(p, text).map_err(|e| usage(format!("{}: {e}", p.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn run_identity(a: IdentityArgs) -> Result<(), Fail> {
    use measurements::identity::{entry_for_image, ProfileSpec, VcpuRange};
    if a.ovmf.is_empty() && a.tdvf.is_empty() {
        return Err(usage(
            "give at least one --ovmf (SEV-SNP) or --tdvf (TDX) build to admit",
        ));
    }
    let vcpus = a
        .vcpus
        .iter()
        .map(|r| VcpuRange::parse(r).map_err(|e| usage(format!("--vcpus: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = ProfileSpec {
        vcpus,
        vcpu_types: a.vcpu_types.clone(),
        vmm: a.vmm.clone(),
        guest_features: a.guest_features.clone(),
        policy: a.policy,
        tdx_qemu_10_1: a.tdx_qemu_10_1,
    };
    let entry =
        entry_for_image(&a.image, &a.ovmf, &a.tdvf, &spec).map_err(|e| usage(e.to_string()))?;
    let (s, out) = match &a.add_to {
        Some(p) => {
            let mut s = MeasurementSet::load(p).map_err(|e| usage(e.to_string()))?;
            if s.format != set::SET_FORMAT {
                return Err(usage(format!(
                    "{}: format {}; give it a not_after first with `measure-guest renew --set {}`",
                    p.display(),
                    escape(&s.format),
                    p.display()
                )));
            }
            s.identity.push(entry);
            (s, Some(p.clone()))
        }
        None => {
            let version = a
                .release_version
                .clone()
                .unwrap_or_else(|| format!("sha256-{}", &entry.initramfs_sha256.to_string()[..16]));
            let s = MeasurementSet {
                format: set::SET_FORMAT.to_owned(),
                not_after: Some(a.expiry.not_after()?),
                release: set::Release {
                    name: a.name.clone(),
                    version,
                },
                artifacts: set::Artifacts {
                    kernel_sha256: Some(entry.kernel_sha256),
                    initramfs_sha256: Some(entry.initramfs_sha256),
                    cmdline: entry.cmdline.clone(),
                    cmdline_sha256: Some(entry.cmdline_sha256),
                    ovmf_sha256: None,
                    tdvf_sha256: None,
                },
                snp: Vec::new(),
                tdx: Vec::new(),
                sim: Vec::new(),
                identity: vec![entry],
            };
            (s, a.out.clone())
        }
    };
    // What is written must parse back to the same set (the checks of a loaded set apply).
    let text = s.to_toml();
    MeasurementSet::from_toml(&text, std::path::Path::new("<new set>"))
        .map_err(|e| usage(e.to_string()))?;
    write_text(out.as_deref(), &text)?;
    if a.add_to.is_some() {
        eprintln!("measure-guest identity: the set changed: its auditors must sign it again");
    }
    Ok(())
}

fn run_renew(a: RenewArgs) -> Result<(), Fail> {
    let mut s = MeasurementSet::load(&a.set).map_err(|e| usage(e.to_string()))?;
    s.format = set::SET_FORMAT.to_owned();
    s.not_after = Some(a.expiry.not_after()?);
    let out = a.out.clone().unwrap_or_else(|| a.set.clone());
    write_text(Some(&out), &s.to_toml())?;
    println!(
        "{}: {} valid until {} (set_sha256 {}); its auditors must sign it again",
        shown(out.display()),
        escape(&s.label()),
        escape(s.not_after.as_deref().unwrap_or("-")),
        hex::encode(s.digest())
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own message names the argument as given; with `--json` anywhere before `--` it becomes
            // the tool's one JSON error object on stdout.
            let code =
                attestation::cli_io::parse_failure("ok", e.use_stderr(), &e.render().to_string());
            return ExitCode::from(code);
        }
    };
    let r = match cli.cmd {
        Cmd::Snp(a) => run_snp(a),
        Cmd::Tdx(a) => run_tdx(a),
        Cmd::Process(a) => run_process(a),
        Cmd::Pin(a) => run_pin(a),
        Cmd::Sign(a) => run_sign(a),
        Cmd::Keygen(a) => run_keygen(a),
        Cmd::VerifySet(a) => run_verify_set(a),
        Cmd::Explain(a) => explain_cli::run(a),
        Cmd::Identity(a) => run_identity(a),
        Cmd::Renew(a) => run_renew(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // The subcommand already said why (explain's answer with --json is its one JSON object).
        Err(Fail(code, msg)) if msg.is_empty() => ExitCode::from(code),
        Err(Fail(code, msg)) => {
            if attestation::cli_io::json_requested(std::env::args_os().skip(1)) {
                let check = if code == 1 { "check" } else { "input" };
                let v = attestation::cli_io::error_json("ok", check, &msg);
                println!("{}", json_safe(&v.to_string()));
            } else {
                eprintln!("measure-guest: {}", escape(&msg));
            }
            ExitCode::from(code)
        }
    }
}
