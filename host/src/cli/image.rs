//! `fenced-run image build --out DIR [--kernel FILE] [--agent FILE] [--ovmf FILE] [--tdx-ovmf FILE]`: builds the `vm` tier's guest image
//! (host::image) and prints its manifest's measurements. Exit 0 built, 2 unusable input.

use crate::image::{self, BuildOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `fenced-run image`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Build the guest image: kernel, initramfs with the static guest-agent as /init, manifest.json.
    Build(BuildArgs),
}

/// Arguments of `fenced-run image build`.
#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// The output directory (vmlinuz, initramfs.cpio, manifest.json).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The kernel (default: Debian's 6.12 that scripts/vm-setup.sh extracts under target/vm-kernel); its modules are
    /// taken from the lib/modules tree beside it when there is one.
    #[arg(long, value_name = "FILE")]
    pub kernel: Option<PathBuf>,
    /// A static guest-agent to use instead of building one with cargo from this workspace.
    #[arg(long, value_name = "FILE")]
    pub agent: Option<PathBuf>,
    /// The static busybox for shell test suites (default /bin/busybox from busybox-static).
    #[arg(long, value_name = "FILE")]
    pub busybox: Option<PathBuf>,
    /// The AmdSev OVMF (for SEV-SNP with kernel-hashes): the manifest then lists the SNP launch digest for 1, 2
    /// and 4 vCPUs of type EPYC-v4.
    #[arg(long, value_name = "FILE")]
    pub ovmf: Option<PathBuf>,
    /// The TDX OVMF (TDVF): the manifest then lists its MRTD and the RTMR event digests of the kernel and
    /// initramfs (Debian's /usr/share/ovmf/OVMF.fd carries TDX metadata).
    #[arg(long, value_name = "FILE")]
    pub tdx_ovmf: Option<PathBuf>,
    /// Leave git out of the image (the fence's `git apply` of a job's patch and git-bundle repositories then
    /// fail in the guest; tree hashes and commits are read without git).
    #[arg(long)]
    pub no_git: bool,
    /// Also build the read-only toolchain root filesystem (erofs with a dm-verity hash tree) from Debian
    /// packages: any of rust, python, node, go, comma-separated. Its root hash goes on the command line.
    #[arg(long, value_name = "LIST")]
    pub toolchains: Option<String>,
    /// Where downloaded .deb files are kept between builds (default: target/toolchain-debs of this workspace).
    #[arg(long, value_name = "DIR", requires = "toolchains")]
    pub deb_cache: Option<PathBuf>,
}

/// The default kernel: `target/vm-kernel/boot/vmlinuz-*` of this workspace.
pub fn default_kernel() -> Option<PathBuf> {
    let boot = image::agent::workspace_root().join("target/vm-kernel/boot");
    let mut found: Vec<PathBuf> = std::fs::read_dir(boot)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let Command::Build(b) = args.command;
    match build(&b) {
        Ok(m) => {
            outln!("image       {}", b.out.display());
            outln!("kernel      sha256 {}", m.kernel.sha256);
            if let Some(k) = &m.vm_kernel {
                outln!(
                    "vm kernel   sha256 {} ({} bytes, the PVH kernel the vm tier boots)",
                    k.sha256,
                    k.size
                );
            }
            outln!(
                "initramfs   sha256 {} ({} bytes)",
                m.initramfs.sha256,
                m.initramfs.size
            );
            outln!("cmdline     {}", m.cmdline.value);
            if let Some(t) = &m.toolchains {
                outln!(
                    "toolchains  {}: {} ({} bytes, {} packages), dm-verity root hash {}",
                    t.toolchains.join(","),
                    t.image.file,
                    t.image.size,
                    t.packages.len(),
                    t.root_hash
                );
            }
            outln!("vm          measurement {}", m.measurements.vm);
            for s in &m.measurements.sev_snp {
                outln!(
                    "sev-snp     {} vCPU {}: {}",
                    s.vcpus,
                    s.vcpu_type,
                    s.measurement
                );
            }
            if let Some(t) = &m.measurements.tdx {
                outln!("tdx         MRTD {}", t.mrtd);
                for e in &t.rtmr_events {
                    outln!(
                        "tdx         RTMR{} event {}: {}",
                        e.rtmr,
                        e.event_type,
                        e.digest
                    );
                }
                for (i, r) in t.rtmrs.iter().enumerate() {
                    if let Some(r) = r {
                        outln!("tdx         RTMR{i} {r} (QEMU 10.2 and later)");
                    }
                }
                if let Some(r) = &t.rtmr1_qemu_10_1 {
                    outln!("tdx         RTMR1 {r} (QEMU 10.1, which patches the kernel header)");
                }
                outln!("tdx         note: {}", t.note);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fenced-run image build: {e}");
            ExitCode::from(2)
        }
    }
}

/// Builds the image `b` describes.
pub fn build(b: &BuildArgs) -> Result<image::Manifest, String> {
    let kernel = match &b.kernel {
        Some(k) => k.clone(),
        None => default_kernel().ok_or(
            "--kernel: no kernel given and none under target/vm-kernel/boot (run scripts/vm-setup.sh, or pass --kernel FILE)",
        )?,
    };
    let agent = match &b.agent {
        Some(a) => a.clone(),
        None => image::agent::build(&image::agent::workspace_root())?,
    };
    let busybox = match &b.busybox {
        Some(p) => Some(p.clone()),
        None => Some(PathBuf::from("/bin/busybox")).filter(|p| p.is_file()),
    };
    let git = if b.no_git {
        None
    } else {
        Some(PathBuf::from("/usr/bin/git")).filter(|p| p.is_file())
    };
    let toolchains = match &b.toolchains {
        Some(list) => Some(image::rootfs::RootfsOptions {
            toolchains: image::rootfs::parse_toolchains(list)?,
            deb_cache: b
                .deb_cache
                .clone()
                .unwrap_or_else(|| image::agent::workspace_root().join("target/toolchain-debs")),
            source_date_epoch: image::rootfs::source_date_epoch().map_err(|e| e.to_string())?,
        }),
        None => None,
    };
    image::build(&BuildOptions {
        toolchains,
        out: b.out.clone(),
        modules: image::modules_beside(&kernel),
        kernel,
        agent,
        busybox,
        git,
        ovmf: b.ovmf.clone(),
        tdx_ovmf: b.tdx_ovmf.clone(),
    })
}
