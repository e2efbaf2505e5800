//! The `sev-snp` and `tdx` launch paths: the QEMU arguments of an SEV-SNP guest and of a TD, the checks of the
//! QEMU version and of the host that must pass before anything is launched, and the choice `--isolation auto`
//! makes (sev-snp, then tdx, then vm, then process). Every host path is read below a root directory given as a
//! parameter, so the checks are tested against fake sysfs trees.
//!
//! The arguments follow QEMU's documentation: docs/system/i386/amd-memory-encryption.rst ("To launch a SEV-SNP
//! guest": `-machine ...,confidential-guest-support=sev0 -object sev-snp-guest,id=sev0,cbitpos=..,
//! reduced-phys-bits=..`; `kernel-hashes=on` puts the SHA-256 of kernel, initrd and command line into the
//! OVMF's hashes table, which the launch digest then covers) and docs/system/i386/tdx.rst ("Launching a TD":
//! `-accel kvm -cpu host -object tdx-guest,id=tdx0 -machine ...,confidential-guest-support=tdx0 -bios OVMF.fd`;
//! "kernel-irqchip must be split"; TDVF is loaded with `-bios`, never as pflash, because TDX has no read-only
//! memslots). Both take guest RAM from a `memory-backend-memfd` named by `-machine memory-backend=` (the private
//! half of guest memory is KVM's guest_memfd; QEMU 9.1 added SNP on it, QEMU 10.1 TDX).

use std::fmt;
use std::path::{Path, PathBuf};

/// An isolation tier `fenced-run run` can be asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Linux namespaces on this host, the host's sim PSP.
    Process,
    /// A plain QEMU guest, the host's sim PSP.
    Vm,
    /// An AMD SEV-SNP guest, the PSP's report.
    SevSnp,
    /// An Intel TDX trust domain, a DCAP quote.
    Tdx,
}

impl Tier {
    /// The name used on the command line and in the verdict.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Process => "process",
            Tier::Vm => "vm",
            Tier::SevSnp => "sev-snp",
            Tier::Tdx => "tdx",
        }
    }

    /// Parses a `--isolation` value (`auto` is not a tier; see [`choose_auto`]).
    pub fn parse(s: &str) -> Option<Tier> {
        Some(match s {
            "process" => Tier::Process,
            "vm" => Tier::Vm,
            "sev-snp" => Tier::SevSnp,
            "tdx" => Tier::Tdx,
            _ => return None,
        })
    }

    /// Every tier, best first (the order `auto` tries).
    pub const BEST_FIRST: [Tier; 4] = [Tier::SevSnp, Tier::Tdx, Tier::Vm, Tier::Process];
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A QEMU version, as `qemu-system-x86_64 --version` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QemuVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Micro.
    pub micro: u32,
}

impl fmt::Display for QemuVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// The first QEMU version with the `sev-snp-guest` object (9.1.0).
pub const SNP_MIN_QEMU: QemuVersion = QemuVersion {
    major: 9,
    minor: 1,
    micro: 0,
};
/// The first QEMU version with the `tdx-guest` object (10.1.0).
pub const TDX_MIN_QEMU: QemuVersion = QemuVersion {
    major: 10,
    minor: 1,
    micro: 0,
};

/// Parses the first line of `qemu-system-x86_64 --version` ("QEMU emulator version 10.0.2 (Debian ...)").
pub fn parse_qemu_version(text: &str) -> Result<QemuVersion, String> {
    let first = text.lines().next().unwrap_or("").trim();
    let rest = first
        .strip_prefix("QEMU emulator version ")
        .ok_or_else(|| {
            format!(
                "`--version` printed {:?}, not \"QEMU emulator version X.Y.Z\"",
                attestation::text::escape(first)
            )
        })?;
    let word = rest.split_whitespace().next().unwrap_or("");
    let mut parts = word.split('.');
    let mut num = |what: &str| -> Result<u32, String> {
        let p = parts.next().unwrap_or("0");
        // "9.1.0-rc2" or "10.0.50" style suffixes: the leading digits count.
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().map_err(|_| {
            format!(
                "QEMU version {:?}: the {what} part is not a number",
                attestation::text::escape(word)
            )
        })
    };
    Ok(QemuVersion {
        major: num("major")?,
        minor: num("minor")?,
        micro: num("micro")?,
    })
}

/// Runs `qemu --version` and parses it; the error names the binary.
pub fn qemu_version(qemu: &Path) -> Result<QemuVersion, String> {
    let out = std::process::Command::new(qemu)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "{} not found or not runnable ({e}); install qemu-system-x86 (docs/vm.md)",
                qemu.display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} --version failed ({})",
            qemu.display(),
            out.status
        ));
    }
    parse_qemu_version(&String::from_utf8_lossy(&out.stdout))
}

/// One check of what a tier needs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// What is checked (`/dev/sev`, `kvm_amd sev_snp`, `QEMU >= 9.1`, ...).
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
}

impl Check {
    fn new(name: impl Into<String>, ok: bool, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok,
            detail: detail.into(),
        }
    }
}

/// Whether a kernel module parameter file reads as enabled (`Y`, `y` or `1`, as kvm prints booleans).
fn param_enabled(root: &Path, rel: &str) -> Result<bool, String> {
    let p = root.join(rel);
    match std::fs::read_to_string(&p) {
        Ok(t) => Ok(matches!(t.trim(), "Y" | "y" | "1")),
        Err(e) => Err(format!("/{rel}: {e}")),
    }
}

fn param_check(root: &Path, module: &str, param: &str) -> Check {
    let rel = format!("sys/module/{module}/parameters/{param}");
    let name = format!("{module} {param}=Y");
    match param_enabled(root, &rel) {
        Ok(true) => Check::new(name, true, format!("/{rel} is enabled")),
        Ok(false) => Check::new(
            name,
            false,
            format!("/{rel} is not Y or 1 (enable it: modprobe {module} {param}=1, on a host that supports it)"),
        ),
        Err(e) if !root.join(format!("sys/module/{module}")).exists() => Check::new(
            name,
            false,
            format!("the {module} module is not loaded ({e})"),
        ),
        Err(e) => Check::new(name, false, e),
    }
}

fn exists_check(root: &Path, rel: &str, why: &str) -> Check {
    let ok = root.join(rel).exists();
    Check::new(
        format!("/{rel}"),
        ok,
        if ok {
            format!("/{rel} exists")
        } else {
            format!("/{rel} does not exist ({why})")
        },
    )
}

/// The QEMU version check of a confidential tier.
pub fn qemu_check(tier: Tier, version: &Result<QemuVersion, String>) -> Check {
    let min = match tier {
        Tier::SevSnp => SNP_MIN_QEMU,
        Tier::Tdx => TDX_MIN_QEMU,
        Tier::Vm | Tier::Process => QemuVersion {
            major: 0,
            minor: 0,
            micro: 0,
        },
    };
    let name = format!("QEMU >= {}.{}", min.major, min.minor);
    match version {
        Ok(v) if *v >= min => Check::new(name, true, format!("QEMU {v}")),
        Ok(v) => Check::new(
            name,
            false,
            format!(
                "QEMU {v} is older than {}.{}, the first with the {} object",
                min.major,
                min.minor,
                if tier == Tier::Tdx {
                    "tdx-guest"
                } else {
                    "sev-snp-guest"
                }
            ),
        ),
        Err(e) => Check::new(name, false, e.clone()),
    }
}

/// The host checks of SEV-SNP below `root` (normally `/`): `/dev/kvm`, `/dev/sev` (the PSP driver) and
/// `kvm_amd`'s `sev_snp` parameter.
pub fn snp_host_checks(root: &Path) -> Vec<Check> {
    vec![
        exists_check(root, "dev/kvm", "no KVM on this host"),
        exists_check(root, "dev/sev", "no AMD PSP driver (ccp) on this host"),
        param_check(root, "kvm_amd", "sev_snp"),
    ]
}

/// The host checks of TDX below `root`: `/dev/kvm` and `kvm_intel`'s `tdx` parameter.
pub fn tdx_host_checks(root: &Path) -> Vec<Check> {
    vec![
        exists_check(root, "dev/kvm", "no KVM on this host"),
        param_check(root, "kvm_intel", "tdx"),
    ]
}

/// The firmware file names an image directory holds for the confidential tiers (copied there by
/// `fenced-run image build --ovmf / --tdx-ovmf`, so that what is launched is what the manifest measured).
pub const SNP_FIRMWARE_FILE: &str = "OVMF.amdsev.fd";
/// See [`SNP_FIRMWARE_FILE`].
pub const TDX_FIRMWARE_FILE: &str = "OVMF.tdx.fd";

/// The image checks of `tier`: the manifest, and for sev-snp/tdx the firmware the manifest measured.
pub fn image_checks(tier: Tier, image: &Path) -> Vec<Check> {
    let manifest = match crate::image::Manifest::load(image) {
        Ok(m) => m,
        Err(e) => {
            return vec![Check::new(
                "guest image",
                false,
                format!(
                    "{e} (build one with `fenced-run image build --out {}`)",
                    image.display()
                ),
            )]
        }
    };
    let mut out = vec![Check::new(
        "guest image",
        true,
        format!("{} ({})", image.display(), crate::image::MANIFEST_FILE),
    )];
    let (file, want, flag) = match tier {
        Tier::SevSnp => (
            SNP_FIRMWARE_FILE,
            manifest
                .measurements
                .sev_snp
                .first()
                .map(|s| s.ovmf_sha256.clone()),
            "--ovmf",
        ),
        Tier::Tdx => (
            TDX_FIRMWARE_FILE,
            manifest
                .measurements
                .tdx
                .as_ref()
                .map(|t| t.ovmf_sha256.clone()),
            "--tdx-ovmf",
        ),
        Tier::Vm | Tier::Process => return out,
    };
    let name = format!("{tier} firmware");
    let Some(want) = want else {
        out.push(Check::new(
            name,
            false,
            format!(
                "the manifest has no {tier} measurements (rebuild the image with `fenced-run image build {flag} FILE`)"
            ),
        ));
        return out;
    };
    let p = image.join(file);
    match std::fs::read(&p) {
        Ok(bytes) => {
            use sha2::{Digest, Sha256};
            let have = hex::encode(Sha256::digest(&bytes));
            if have == want {
                out.push(Check::new(
                    name,
                    true,
                    format!("{} (sha256 {have})", p.display()),
                ));
            } else {
                out.push(Check::new(
                    name,
                    false,
                    format!(
                        "{}: sha256 {have}, but the manifest measured {want}",
                        p.display()
                    ),
                ));
            }
        }
        Err(e) => out.push(Check::new(name, false, format!("{}: {e}", p.display()))),
    }
    out
}

/// What the host offers, read below a root (for tests) with a given QEMU.
#[derive(Clone, Debug)]
pub struct HostEnv {
    /// The root directory standing for `/` (its `dev/`, `sys/`, `proc/`).
    pub root: PathBuf,
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// Its version (or why it is unknown).
    pub qemu_version: Result<QemuVersion, String>,
    /// The guest image directory.
    pub image: PathBuf,
}

impl HostEnv {
    /// This machine: root `/`, `qemu` asked for its version.
    pub fn probe(qemu: &Path, image: &Path) -> HostEnv {
        HostEnv {
            root: PathBuf::from("/"),
            qemu: qemu.to_owned(),
            qemu_version: qemu_version(qemu),
            image: image.to_owned(),
        }
    }
}

/// Whether the process tier can run below `root`: user namespaces (needed) and cgroup v2 (for limits).
pub fn process_checks(root: &Path) -> Vec<Check> {
    let mut out = Vec::new();
    let max = std::fs::read_to_string(root.join("proc/sys/user/max_user_namespaces"));
    let userns = match &max {
        Ok(t) => match t.trim().parse::<u64>() {
            Ok(0) => Check::new(
                "user namespaces",
                false,
                "/proc/sys/user/max_user_namespaces is 0",
            ),
            Ok(n) => Check::new("user namespaces", true, format!("max_user_namespaces {n}")),
            Err(_) => Check::new(
                "user namespaces",
                false,
                format!(
                    "/proc/sys/user/max_user_namespaces reads {:?}",
                    attestation::text::escape(t.trim())
                ),
            ),
        },
        Err(e) => Check::new(
            "user namespaces",
            false,
            format!("/proc/sys/user/max_user_namespaces: {e}"),
        ),
    };
    out.push(userns);
    // Debian's switch for unprivileged user namespaces; root does not need it.
    if let Ok(t) = std::fs::read_to_string(root.join("proc/sys/kernel/unprivileged_userns_clone")) {
        let root_user = nix::unistd::geteuid().is_root();
        let on = t.trim() == "1";
        out.push(Check::new(
            "unprivileged user namespaces",
            on || root_user,
            if on {
                "kernel.unprivileged_userns_clone = 1".to_string()
            } else if root_user {
                "kernel.unprivileged_userns_clone = 0, not needed as root".to_string()
            } else {
                "kernel.unprivileged_userns_clone = 0: run as root or set it to 1".to_string()
            },
        ));
    }
    let v2 = root.join("sys/fs/cgroup/cgroup.controllers").exists();
    // Not fatal: without cgroup v2 the fence runs without memory/pids limits and says so in the verdict.
    out.push(Check::new(
        "cgroup v2",
        true,
        if v2 {
            "/sys/fs/cgroup is the unified hierarchy (memory and pids limits)".to_string()
        } else {
            "no /sys/fs/cgroup/cgroup.controllers: the fence runs without cgroup limits and says so"
                .to_string()
        },
    ));
    out
}

/// Whether the `vm` tier can run: QEMU found, the image (kernel and initramfs) present; the accelerator is a
/// note (TCG where `/dev/kvm` is `kvm_pvm`, KVM elsewhere).
pub fn vm_checks(env: &HostEnv) -> Vec<Check> {
    let mut out = vec![match &env.qemu_version {
        Ok(v) => Check::new("QEMU", true, format!("{} is QEMU {v}", env.qemu.display())),
        Err(e) => Check::new("QEMU", false, e.clone()),
    }];
    out.extend(image_checks(Tier::Vm, &env.image));
    for f in [crate::image::KERNEL_FILE, crate::image::INITRAMFS_FILE] {
        let p = env.image.join(f);
        if !p.is_file() && out.iter().all(|c| c.ok) {
            out.push(Check::new(f, false, format!("{} is missing", p.display())));
        }
    }
    let accel = super::qemu::choose_accel(&env.root.join("sys/module"), &env.root.join("dev/kvm"));
    out.push(Check::new(
        "accelerator",
        true,
        accel_reason(&env.root, accel),
    ));
    out
}

/// Why the accelerator is what it is.
pub fn accel_reason(root: &Path, accel: super::qemu::Accel) -> String {
    let has = |m: &str| root.join("sys/module").join(m).exists();
    match accel {
        super::qemu::Accel::Kvm => "kvm (/dev/kvm with kvm_intel or kvm_amd)".into(),
        super::qemu::Accel::Tcg if !root.join("dev/kvm").exists() => "tcg (no /dev/kvm)".into(),
        super::qemu::Accel::Tcg if has("kvm_pvm") => {
            "tcg (/dev/kvm is kvm_pvm, under which an ordinary kernel hangs; neither kvm_intel nor kvm_amd is loaded)"
                .into()
        }
        super::qemu::Accel::Tcg => "tcg".into(),
    }
}

/// Everything `tier` needs on this host, in order.
pub fn checks(tier: Tier, env: &HostEnv) -> Vec<Check> {
    match tier {
        Tier::Process => process_checks(&env.root),
        Tier::Vm => vm_checks(env),
        Tier::SevSnp => {
            let mut c = snp_host_checks(&env.root);
            c.push(qemu_check(tier, &env.qemu_version));
            c.extend(image_checks(tier, &env.image));
            c
        }
        Tier::Tdx => {
            let mut c = tdx_host_checks(&env.root);
            c.push(qemu_check(tier, &env.qemu_version));
            c.extend(image_checks(tier, &env.image));
            c
        }
    }
}

/// The failed checks as one sentence ("/dev/sev does not exist (...); kvm_amd ...").
pub fn missing(checks: &[Check]) -> Option<String> {
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.detail.clone())
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// The `--isolation` a run resolves to, and why (for `auto`, which tiers were passed over and what they lack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The tier.
    pub tier: Tier,
    /// One line: which and why.
    pub why: String,
}

/// `--isolation auto`: sev-snp, then tdx, then vm, then process; the first whose checks all pass.
pub fn choose_auto(env: &HostEnv) -> Choice {
    let mut passed_over = Vec::new();
    for tier in Tier::BEST_FIRST {
        let c = checks(tier, env);
        match missing(&c) {
            None => {
                let why = if passed_over.is_empty() {
                    format!("auto chose {tier}: everything it needs is present")
                } else {
                    format!("auto chose {tier}; passed over {}", passed_over.join("; "))
                };
                return Choice { tier, why };
            }
            Some(m) => passed_over.push(format!("{tier} ({m})")),
        }
    }
    Choice {
        tier: Tier::Process,
        why: format!(
            "auto chose process although its checks fail; passed over {}",
            passed_over.join("; ")
        ),
    }
}

/// Resolves `--isolation` for a run: a named tier is checked (sev-snp and tdx must pass every check, before
/// anything is launched); `auto` is [`choose_auto`]. `Err` is the message to print (exit 2).
pub fn resolve(isolation: &str, env: &HostEnv) -> Result<Choice, String> {
    if isolation == "auto" {
        return Ok(choose_auto(env));
    }
    let tier = Tier::parse(isolation).ok_or_else(|| {
        format!(
            "--isolation {}: expected process, vm, sev-snp, tdx or auto",
            attestation::text::escape(isolation)
        )
    })?;
    if matches!(tier, Tier::SevSnp | Tier::Tdx) {
        if let Some(m) = missing(&checks(tier, env)) {
            return Err(format!(
                "--isolation {tier}: this host cannot launch it, nothing was started: {m} (`fenced-run doctor` lists what this host can run)"
            ));
        }
    }
    Ok(Choice {
        tier,
        why: format!("--isolation {tier} as asked"),
    })
}

/// Resolves `fenced-run run --isolation` without probing anything for `process` and `vm` (their own paths
/// report what they lack); sev-snp, tdx and auto read this host and `qemu --version` first.
pub fn resolve_for_run(isolation: &str, image: &Path) -> Result<Choice, String> {
    match isolation {
        "process" | "vm" => resolve(
            isolation,
            &HostEnv {
                root: PathBuf::from("/"),
                qemu: PathBuf::new(),
                qemu_version: Err(String::new()),
                image: image.to_owned(),
            },
        ),
        _ => resolve(
            isolation,
            &HostEnv::probe(Path::new("qemu-system-x86_64"), image),
        ),
    }
}

/// The QEMU arguments of `l`, made confidential by `c` when given (the hook host::vm uses).
pub fn launch_args(l: &super::qemu::Launch, c: Option<&Confidential>) -> Vec<String> {
    match c {
        Some(c) => {
            let memory_mib = launch_memory_mib(c, l.memory_mib);
            let l = super::qemu::Launch {
                memory_mib,
                ..l.clone()
            };
            apply(&super::qemu::args(&l), c, memory_mib)
        }
        None => super::qemu::args(l),
    }
}

/// The memory a confidential launch gets for `asked` MiB: a TD gets at least
/// [`measurements::manifest::TDX_MEMORY_MIB_MIN`], from which up the RTMR1 the image's manifest lists for QEMU
/// 10.1 (which writes the initramfs address into the kernel header TDVF measures) does not depend on it.
pub fn launch_memory_mib(c: &Confidential, asked: u64) -> u64 {
    match c {
        Confidential::Tdx { .. } => asked.max(measurements::manifest::TDX_MEMORY_MIB_MIN),
        Confidential::SevSnp { .. } => asked,
    }
}

/// The confidential part of a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confidential {
    /// An SEV-SNP guest.
    SevSnp {
        /// The AmdSev OVMF (with the SEV hashes table), loaded with `-bios`.
        firmware: PathBuf,
        /// The C-bit position in page-table entries (CPUID 0x8000001F EBX[5:0]; 51 on Milan and Genoa).
        cbitpos: u32,
        /// Physical address bits lost to encryption (CPUID 0x8000001F EBX[11:6]; 1 on Milan and Genoa).
        reduced_phys_bits: u32,
        /// The guest policy (`policy=`), which the verifier checks in the report.
        policy: u64,
    },
    /// A TD.
    Tdx {
        /// The TDX OVMF (TDVF), loaded with `-bios`.
        firmware: PathBuf,
        /// The Quote Generation Service's Unix socket (`quote-generation-socket`), without which configfs-tsm
        /// in the TD cannot turn a TDREPORT into a quote.
        qgs_socket: Option<PathBuf>,
    },
}

/// The default SNP guest policy: SMT allowed (bit 16), the must-be-one bit 17; no debug, no migration agent.
pub const SNP_POLICY: u64 = 0x30000;
/// The vCPU model of SNP launches: the manifest's SNP digests are computed for it ([`crate::image::SNP_VCPU_TYPE`]).
pub const SNP_CPU: &str = crate::image::SNP_VCPU_TYPE;
/// Where Intel's QGS listens by default.
pub const DEFAULT_QGS_SOCKET: &str = "/var/run/tdx-qgs/qgs.socket";

/// cbitpos and reduced-phys-bits of this CPU (CPUID 0x8000001F), or Milan's and Genoa's (51, 1) elsewhere.
pub fn snp_cbit() -> (u32, u32) {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID exists on every x86_64 CPU; leaf 0x80000000 tells whether 0x8000001F does.
        let max = std::arch::x86_64::__cpuid(0x8000_0000).eax;
        let ebx = if max >= 0x8000_001F {
            std::arch::x86_64::__cpuid(0x8000_001F).ebx
        } else {
            0
        };
        if max >= 0x8000_001F && ebx & 0x3f != 0 {
            return (ebx & 0x3f, (ebx >> 6) & 0x3f);
        }
    }
    (51, 1)
}

/// The QEMU arguments of a confidential launch: `base` (the `vm` tier's arguments, host::vm::qemu::args) with
/// the accelerator forced to KVM, the CPU model, machine properties, memory backend, firmware and guest object
/// of `c`. Everything else (direct kernel boot, no network, the channel, the console) stays as it is.
pub fn apply(base: &[String], c: &Confidential, memory_mib: u64) -> Vec<String> {
    let (machine, cpu, object, firmware) = match c {
        Confidential::SevSnp {
            firmware,
            cbitpos,
            reduced_phys_bits,
            policy,
        } => (
            // SEV-ES and SNP need the in-kernel irqchip (amd-memory-encryption.rst): no kernel-irqchip=split.
            "q35,confidential-guest-support=sev0,memory-backend=ram1".to_string(),
            SNP_CPU.to_string(),
            format!(
                "sev-snp-guest,id=sev0,cbitpos={cbitpos},reduced-phys-bits={reduced_phys_bits},kernel-hashes=on,policy={policy:#x}"
            ),
            firmware,
        ),
        Confidential::Tdx {
            firmware,
            qgs_socket,
        } => (
            "q35,kernel-irqchip=split,confidential-guest-support=tdx0,memory-backend=ram1".to_string(),
            "host".to_string(),
            match qgs_socket {
                // The JSON form is the only one that can carry the socket address (tdx.rst, "TD attestation").
                Some(s) => serde_json::json!({
                    "qom-type": "tdx-guest",
                    "id": "tdx0",
                    "sept-ve-disable": true,
                    "quote-generation-socket": {"type": "unix", "path": s.display().to_string()},
                })
                .to_string(),
                // sept-ve-disable: the verifier's default policy requires SEPT_VE_DISABLE (docs/tdx.md).
                None => "tdx-guest,id=tdx0,sept-ve-disable=on".to_string(),
            },
            firmware,
        ),
    };
    let mut out = Vec::with_capacity(base.len() + 8);
    let mut i = 0;
    while i < base.len() {
        let a = &base[i];
        let next = base.get(i + 1);
        match (a.as_str(), next) {
            ("-machine", Some(_)) => {
                out.push("-machine".into());
                out.push(machine.clone());
                i += 2;
            }
            ("-accel", Some(_)) => {
                out.push("-accel".into());
                out.push("kvm".into());
                i += 2;
            }
            ("-cpu", Some(_)) => {
                out.push("-cpu".into());
                out.push(cpu.clone());
                i += 2;
            }
            // A plain VM's firmware: the OVMF below replaces it.
            ("-bios", Some(_)) => i += 2,
            _ => {
                out.push(a.clone());
                i += 1;
            }
        }
    }
    out.extend([
        "-object".into(),
        format!("memory-backend-memfd,id=ram1,size={memory_mib}M,share=true,prealloc=false"),
        "-object".into(),
        object,
        "-bios".into(),
        firmware.display().to_string(),
    ]);
    out
}

/// `args` (from [`launch_args`]) with the job's launch digest in the guest object: `host-data=` (base64 of the
/// 32 bytes, SEV-SNP `HOST_DATA`) on `sev-snp-guest`, `mrconfigid=` (base64 of the 48 bytes: the digest then 16
/// zero bytes, TDX `MRCONFIGID`) on `tdx-guest`, in its key=value or JSON form. The sim tiers' arguments are
/// returned as they are (the host's sim PSP puts the digest in its reports' `HOST_DATA`).
pub fn with_job_digest(
    mut args: Vec<String>,
    c: Option<&Confidential>,
    digest: &[u8; 32],
) -> Vec<String> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some(c) = c else {
        return args;
    };
    for a in args.iter_mut() {
        match c {
            Confidential::SevSnp { .. } if a.starts_with("sev-snp-guest,") => {
                a.push_str(&format!(",host-data={}", b64.encode(digest)));
            }
            Confidential::Tdx { .. }
                if a.starts_with("tdx-guest,") || a.contains("\"tdx-guest\"") =>
            {
                let mut id = [0u8; 48];
                id[..32].copy_from_slice(digest);
                let id = b64.encode(id);
                match serde_json::from_str::<serde_json::Value>(a) {
                    Ok(serde_json::Value::Object(mut o)) => {
                        o.insert("mrconfigid".into(), serde_json::Value::String(id));
                        *a = serde_json::Value::Object(o).to_string();
                    }
                    _ => a.push_str(&format!(",mrconfigid={id}")),
                }
            }
            _ => {}
        }
    }
    args
}

/// The [`Confidential`] launch of `tier` from the image directory (its firmware file), or `None` for the
/// sim tiers.
pub fn for_tier(tier: Tier, image: &Path) -> Option<Confidential> {
    match tier {
        Tier::SevSnp => {
            let (cbitpos, reduced_phys_bits) = snp_cbit();
            Some(Confidential::SevSnp {
                firmware: image.join(SNP_FIRMWARE_FILE),
                cbitpos,
                reduced_phys_bits,
                policy: SNP_POLICY,
            })
        }
        Tier::Tdx => Some(Confidential::Tdx {
            firmware: image.join(TDX_FIRMWARE_FILE),
            qgs_socket: Some(PathBuf::from(DEFAULT_QGS_SOCKET)).filter(|p| p.exists()),
        }),
        Tier::Vm | Tier::Process => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain VM's launch of `memory_mib`, with a firmware every confidential launch must replace with its OVMF.
    fn launch(memory_mib: u64) -> super::super::qemu::Launch {
        super::super::qemu::Launch {
            kernel: "/img/vmlinuz".into(),
            initrd: "/img/initramfs.cpio".into(),
            cmdline: "console=ttyS0".into(),
            channel: "/run/s".into(),
            console: "/run/c".into(),
            vcpus: 2,
            memory_mib,
            accel: super::super::qemu::Accel::Tcg,
            dialer: None,
            qmp: None,
            bios: Some("/usr/share/qemu/qboot.rom".into()),
            disk: None,
        }
    }

    fn base() -> Vec<String> {
        super::super::qemu::args(&launch(2048))
    }

    fn value<'a>(a: &'a [String], flag: &str) -> Vec<&'a str> {
        a.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    fn props(s: &str) -> Vec<&str> {
        s.split(',').collect()
    }

    #[test]
    fn qemu_versions_parse_and_compare() {
        let v = parse_qemu_version(
            "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\nCopyright (c) 2003-2025",
        )
        .expect("debian");
        assert_eq!((v.major, v.minor, v.micro), (10, 0, 2));
        assert!(v >= SNP_MIN_QEMU);
        assert!(v < TDX_MIN_QEMU);
        let rc = parse_qemu_version("QEMU emulator version 9.0.92 (v9.1.0-rc2)").expect("rc");
        assert!(rc < SNP_MIN_QEMU);
        assert_eq!(
            parse_qemu_version("QEMU emulator version 10.1.0").expect("plain"),
            TDX_MIN_QEMU
        );
        assert!(parse_qemu_version("qemu-kvm 1.2")
            .expect_err("other text")
            .contains("QEMU emulator version"));
        assert!(parse_qemu_version("QEMU emulator version x.1")
            .expect_err("not a number")
            .contains("major"));
        assert!(!qemu_check(Tier::Tdx, &Ok(v)).ok);
        assert!(qemu_check(Tier::Tdx, &Ok(v))
            .detail
            .contains("older than 10.1"));
        assert!(qemu_check(Tier::SevSnp, &Ok(v)).ok);
    }

    /// A fake root with the given files (path, contents).
    fn fake_root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tmp");
        for (p, text) in files {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
            std::fs::write(p, text).expect("write");
        }
        d
    }

    #[test]
    fn snp_host_checks_read_the_fake_root() {
        let good = fake_root(&[
            ("dev/kvm", ""),
            ("dev/sev", ""),
            ("sys/module/kvm_amd/parameters/sev_snp", "Y\n"),
        ]);
        assert!(snp_host_checks(good.path()).iter().all(|c| c.ok));
        let one = fake_root(&[
            ("dev/kvm", ""),
            ("dev/sev", ""),
            ("sys/module/kvm_amd/parameters/sev_snp", "1\n"),
        ]);
        assert!(snp_host_checks(one.path()).iter().all(|c| c.ok));
        let off = fake_root(&[
            ("dev/kvm", ""),
            ("sys/module/kvm_amd/parameters/sev_snp", "N\n"),
        ]);
        let m = missing(&snp_host_checks(off.path())).expect("fails");
        assert!(m.contains("/dev/sev does not exist"), "{m}");
        assert!(m.contains("sev_snp is not Y or 1"), "{m}");
        let none = fake_root(&[("sys/module/kvm_pvm/initstate", "live")]);
        let m = missing(&snp_host_checks(none.path())).expect("fails");
        assert!(m.contains("kvm_amd module is not loaded"), "{m}");
        assert!(m.contains("/dev/kvm does not exist"), "{m}");
    }

    #[test]
    fn tdx_host_checks_read_the_fake_root() {
        let good = fake_root(&[
            ("dev/kvm", ""),
            ("sys/module/kvm_intel/parameters/tdx", "Y\n"),
        ]);
        assert!(tdx_host_checks(good.path()).iter().all(|c| c.ok));
        let off = fake_root(&[
            ("dev/kvm", ""),
            ("sys/module/kvm_intel/parameters/tdx", "N\n"),
        ]);
        let m = missing(&tdx_host_checks(off.path())).expect("fails");
        assert!(m.contains("kvm_intel/parameters/tdx is not Y or 1"), "{m}");
        let amd = fake_root(&[
            ("dev/kvm", ""),
            ("sys/module/kvm_amd/parameters/sev_snp", "Y"),
        ]);
        assert!(missing(&tdx_host_checks(amd.path()))
            .expect("fails")
            .contains("kvm_intel module is not loaded"));
    }

    fn env(root: &Path, v: &str, image: &Path) -> HostEnv {
        HostEnv {
            root: root.to_owned(),
            qemu: "qemu-system-x86_64".into(),
            qemu_version: parse_qemu_version(v),
            image: image.to_owned(),
        }
    }

    #[test]
    fn named_confidential_tiers_fail_before_launch_naming_what_is_missing() {
        let root = fake_root(&[("dev/kvm", ""), ("sys/module/kvm_pvm/initstate", "live")]);
        let image = tempfile::tempdir().expect("img");
        let e = env(root.path(), "QEMU emulator version 10.0.2", image.path());
        let err = resolve("sev-snp", &e).expect_err("no snp here");
        assert!(err.contains("nothing was started"), "{err}");
        assert!(err.contains("/dev/sev does not exist"), "{err}");
        assert!(err.contains("kvm_amd module is not loaded"), "{err}");
        assert!(err.contains("manifest.json"), "{err}");
        let err = resolve("tdx", &e).expect_err("no tdx here");
        assert!(err.contains("QEMU 10.0.2 is older than 10.1"), "{err}");
        assert!(err.contains("kvm_intel module is not loaded"), "{err}");
        assert!(resolve("bogus", &e)
            .expect_err("bogus")
            .contains("expected process, vm"));
        assert_eq!(resolve("vm", &e).expect("vm").tier, Tier::Vm);
    }

    #[test]
    fn auto_prefers_snp_then_tdx_then_vm_then_process_and_says_why() {
        let image = tempfile::tempdir().expect("img");
        // No image, no user namespaces: nothing passes; process is the last resort.
        let bare = fake_root(&[("proc/sys/user/max_user_namespaces", "0\n")]);
        let c = choose_auto(&env(
            bare.path(),
            "QEMU emulator version 10.0.2",
            image.path(),
        ));
        assert_eq!(c.tier, Tier::Process);
        assert!(c.why.contains("sev-snp ("), "{}", c.why);
        // User namespaces: process, and the reasons for passing over the others.
        let ns = fake_root(&[("proc/sys/user/max_user_namespaces", "1000\n")]);
        let c = choose_auto(&env(
            ns.path(),
            "QEMU emulator version 10.0.2",
            image.path(),
        ));
        assert_eq!(c.tier, Tier::Process);
        assert!(
            c.why.contains("vm (") && c.why.contains("tdx ("),
            "{}",
            c.why
        );
        // An SNP host with QEMU 10.0 and an SNP image: sev-snp.
        let snp = fake_root(&[
            ("dev/kvm", ""),
            ("dev/sev", ""),
            ("sys/module/kvm_amd/parameters/sev_snp", "Y\n"),
            ("proc/sys/user/max_user_namespaces", "1000\n"),
        ]);
        let img = fake_image(image.path(), true);
        let c = choose_auto(&env(snp.path(), "QEMU emulator version 10.0.2", &img));
        assert_eq!(c.tier, Tier::SevSnp, "{}", c.why);
        // The same host with QEMU 9.0: SNP needs 9.1, so vm.
        let c = choose_auto(&env(snp.path(), "QEMU emulator version 9.0.2", &img));
        assert_eq!(c.tier, Tier::Vm, "{}", c.why);
        assert!(c.why.contains("QEMU 9.0.2 is older than 9.1"), "{}", c.why);
    }

    /// A minimal image directory whose manifest lists one SNP digest for the firmware written beside it.
    fn fake_image(parent: &Path, snp: bool) -> PathBuf {
        use sha2::{Digest, Sha256};
        let dir = parent.join("image");
        std::fs::create_dir_all(&dir).expect("dir");
        let fw = b"not really an OVMF";
        std::fs::write(dir.join(SNP_FIRMWARE_FILE), fw).expect("fw");
        std::fs::write(dir.join(crate::image::KERNEL_FILE), b"k").expect("k");
        std::fs::write(dir.join(crate::image::INITRAMFS_FILE), b"i").expect("i");
        let art =
            |f: &str| serde_json::json!({"file": f, "size": 1, "sha256": "00", "sha384": "00"});
        let m = serde_json::json!({
            "format": crate::image::MANIFEST_FORMAT,
            "kernel": art("vmlinuz"),
            "initramfs": art("initramfs.cpio"),
            "cmdline": {"value": "x", "sha256": "00", "sha384": "00"},
            "agent": {"path": "/init", "sha256": "00"},
            "included": [],
            "measurements": {
                "vm": "00",
                "sev_snp": if snp { serde_json::json!([{
                    "ovmf_sha256": hex::encode(Sha256::digest(fw)),
                    "vcpus": 2, "vcpu_type": "EPYC-v4", "guest_features": 1, "measurement": "00"
                }]) } else { serde_json::json!([]) },
            },
        });
        std::fs::write(dir.join(crate::image::MANIFEST_FILE), m.to_string()).expect("manifest");
        dir
    }

    #[test]
    fn image_checks_compare_the_firmware_with_the_manifest() {
        let parent = tempfile::tempdir().expect("tmp");
        let img = fake_image(parent.path(), true);
        assert!(image_checks(Tier::SevSnp, &img).iter().all(|c| c.ok));
        std::fs::write(img.join(SNP_FIRMWARE_FILE), b"another firmware").expect("fw");
        let m = missing(&image_checks(Tier::SevSnp, &img)).expect("differs");
        assert!(m.contains("but the manifest measured"), "{m}");
        let m = missing(&image_checks(Tier::Tdx, &img)).expect("no tdx");
        assert!(
            m.contains("no tdx measurements") && m.contains("--tdx-ovmf"),
            "{m}"
        );
    }

    #[test]
    fn snp_arguments_match_qemus_documentation() {
        let c = Confidential::SevSnp {
            firmware: "/img/OVMF.amdsev.fd".into(),
            cbitpos: 51,
            reduced_phys_bits: 1,
            policy: SNP_POLICY,
        };
        let a = apply(&base(), &c, 2048);
        // amd-memory-encryption.rst: -machine ...,confidential-guest-support=sev0 naming the sev-snp-guest object.
        let machine = value(&a, "-machine");
        assert_eq!(machine.len(), 1, "{a:?}");
        let mp = props(machine[0]);
        assert_eq!(mp[0], "q35");
        assert!(mp.contains(&"confidential-guest-support=sev0"));
        assert!(mp.contains(&"memory-backend=ram1"));
        assert!(
            !mp.iter().any(|p| p.starts_with("kernel-irqchip")),
            "SNP needs the in-kernel irqchip"
        );
        let objects = value(&a, "-object");
        let snp = objects
            .iter()
            .find(|o| o.starts_with("sev-snp-guest,"))
            .expect("sev-snp-guest object");
        let sp = props(snp);
        for want in [
            "id=sev0",
            "cbitpos=51",
            "reduced-phys-bits=1",
            "kernel-hashes=on",
            "policy=0x30000",
        ] {
            assert!(sp.contains(&want), "{want} in {snp}");
        }
        let mem = objects
            .iter()
            .find(|o| o.starts_with("memory-backend-memfd,"))
            .expect("memfd backend");
        assert!(
            props(mem).contains(&"id=ram1") && props(mem).contains(&"size=2048M"),
            "{mem}"
        );
        assert_eq!(value(&a, "-bios"), ["/img/OVMF.amdsev.fd"]);
        assert_eq!(value(&a, "-accel"), ["kvm"]);
        assert_eq!(
            value(&a, "-cpu"),
            ["EPYC-v4"],
            "the manifest's SNP digests are for EPYC-v4"
        );
        // No pflash drive (the AmdSev OVMF is stateless and loaded whole with -bios), no sev-guest object.
        assert!(!a
            .iter()
            .any(|x| x.contains("pflash") || x.starts_with("sev-guest")));
        // Direct kernel boot (what kernel-hashes measures), the channel and no network stay.
        assert_eq!(value(&a, "-kernel"), ["/img/vmlinuz"]);
        assert_eq!(value(&a, "-initrd"), ["/img/initramfs.cpio"]);
        assert_eq!(value(&a, "-nic"), ["none"]);
        assert!(a.iter().any(|x| x.ends_with("name=fenced-run.job")));
        assert!(
            a.contains(&"-no-reboot".to_string()),
            "SEV-ES/SNP guests cannot reboot"
        );
    }

    #[test]
    fn tdx_arguments_match_qemus_documentation() {
        let c = Confidential::Tdx {
            firmware: "/img/OVMF.tdx.fd".into(),
            qgs_socket: None,
        };
        let a = apply(&base(), &c, 1024);
        let machine = value(&a, "-machine");
        assert_eq!(machine.len(), 1);
        let mp = props(machine[0]);
        assert_eq!(mp[0], "q35");
        // tdx.rst: "kernel-irqchip must be split"; confidential-guest-support names the tdx-guest object.
        assert!(mp.contains(&"kernel-irqchip=split"));
        assert!(mp.contains(&"confidential-guest-support=tdx0"));
        assert!(mp.contains(&"memory-backend=ram1"));
        let objects = value(&a, "-object");
        let td = objects
            .iter()
            .find(|o| o.starts_with("tdx-guest,"))
            .expect("tdx-guest object");
        assert!(
            props(td).contains(&"id=tdx0") && props(td).contains(&"sept-ve-disable=on"),
            "{td}"
        );
        assert!(objects
            .iter()
            .any(|o| o.starts_with("memory-backend-memfd,id=ram1,size=1024M")));
        // tdx.rst: TDVF is loaded with -bios (no read-only memslots, so no pflash); -accel kvm -cpu host.
        assert_eq!(value(&a, "-bios"), ["/img/OVMF.tdx.fd"]);
        assert!(!a.iter().any(|x| x.contains("pflash")));
        assert_eq!(value(&a, "-accel"), ["kvm"]);
        assert_eq!(value(&a, "-cpu"), ["host"]);
        assert_eq!(value(&a, "-nic"), ["none"]);
        // With a QGS socket, the JSON form carries it.
        let q = Confidential::Tdx {
            firmware: "/img/OVMF.tdx.fd".into(),
            qgs_socket: Some("/run/qgs.sock".into()),
        };
        let a = apply(&base(), &q, 1024);
        let json = value(&a, "-object")
            .into_iter()
            .find(|o| o.starts_with('{'))
            .expect("json object");
        let v: serde_json::Value = serde_json::from_str(json).expect("json");
        assert_eq!(v["qom-type"], "tdx-guest");
        assert_eq!(v["id"], "tdx0");
        assert_eq!(v["quote-generation-socket"]["path"], "/run/qgs.sock");
    }

    #[test]
    fn a_td_gets_at_least_the_memory_its_manifest_rtmr1_was_computed_for() {
        let td = Confidential::Tdx {
            firmware: "/img/OVMF.tdx.fd".into(),
            qgs_socket: None,
        };
        let min = measurements::manifest::TDX_MEMORY_MIB_MIN;
        for (asked, got) in [(2048, min), (min, min), (8704, 8704)] {
            let a = launch_args(&launch(asked), Some(&td));
            // -m and the memfd backend agree, or QEMU refuses the machine.
            assert_eq!(
                value(&a, "-m"),
                [format!("{got}M").as_str()],
                "asked {asked}"
            );
            assert!(
                value(&a, "-object")
                    .iter()
                    .any(|o| o.starts_with(&format!("memory-backend-memfd,id=ram1,size={got}M,"))),
                "asked {asked}: {a:?}"
            );
        }
        let snp = Confidential::SevSnp {
            firmware: "/img/OVMF.amdsev.fd".into(),
            cbitpos: 51,
            reduced_phys_bits: 1,
            policy: SNP_POLICY,
        };
        assert_eq!(
            value(&launch_args(&launch(2048), Some(&snp)), "-m"),
            ["2048M"]
        );
    }

    /// The job's digest goes into the launch: SEV-SNP `host-data=` (32 bytes), TDX `mrconfigid=` (48 bytes, the
    /// digest then zeros) in both object forms; the sim tiers' arguments are unchanged.
    #[test]
    fn the_job_digest_is_in_the_guest_object() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let digest = [0xab; 32];
        let snp = Confidential::SevSnp {
            firmware: PathBuf::from("/fw"),
            cbitpos: 51,
            reduced_phys_bits: 1,
            policy: SNP_POLICY,
        };
        let args = with_job_digest(launch_args(&launch(2048), Some(&snp)), Some(&snp), &digest);
        let obj = args
            .iter()
            .find(|a| a.starts_with("sev-snp-guest,"))
            .expect("object");
        let hd = obj
            .split(',')
            .find_map(|kv| kv.strip_prefix("host-data="))
            .expect("host-data");
        assert_eq!(b64.decode(hd).expect("base64"), digest.to_vec());
        let mut id = vec![0xab; 32];
        id.extend([0; 16]);
        for qgs in [None, Some(PathBuf::from("/run/qgs.socket"))] {
            let tdx = Confidential::Tdx {
                firmware: PathBuf::from("/fw"),
                qgs_socket: qgs.clone(),
            };
            let args = with_job_digest(launch_args(&launch(2048), Some(&tdx)), Some(&tdx), &digest);
            let obj = args
                .iter()
                .find(|a| a.contains("tdx-guest"))
                .expect("object");
            let got = match qgs {
                None => obj
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("mrconfigid="))
                    .expect("mrconfigid")
                    .to_owned(),
                Some(_) => serde_json::from_str::<serde_json::Value>(obj).expect("json")
                    ["mrconfigid"]
                    .as_str()
                    .expect("mrconfigid")
                    .to_owned(),
            };
            assert_eq!(b64.decode(got).expect("base64"), id, "{obj}");
        }
        let plain = launch_args(&launch(2048), None);
        assert_eq!(with_job_digest(plain.clone(), None, &digest), plain);
    }
}
