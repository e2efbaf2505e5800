//! `fenced-run image build --out DIR [--kernel FILE] [--modules DIR] [--agent FILE] [--ovmf FILE] [--tdx-ovmf FILE]`: builds the `vm` tier's guest image
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
    /// The kernel (default: Debian's 6.12 that scripts/vm-setup.sh extracts under vm-kernel/ of the data directory,
    /// docs/install.md); its modules are
    /// taken from the lib/modules tree beside it (`boot/vmlinuz-V` -> `lib/modules/V`), or from --modules.
    #[arg(long, value_name = "FILE")]
    pub kernel: Option<PathBuf>,
    /// The kernel's module tree (its package's `lib/modules/<version>`), where it is not beside the kernel.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// A static guest-agent to use instead of linking one from this build tree (or, installed, the data
    /// directory's).
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
    /// Where downloaded .deb files are kept between builds (default: toolchain-debs/ of the data directory).
    #[arg(long, value_name = "DIR", requires = "toolchains")]
    pub deb_cache: Option<PathBuf>,
}

/// The default kernel: the newest `vm-kernel/boot/vmlinuz-*` of the data directory (image::datadir: the checkout's
/// target/ in a build tree, else `~/.local/share/fenced-run`), where scripts/vm-setup.sh extracts it.
pub fn default_kernel() -> Option<PathBuf> {
    let data = image::datadir::resolve().ok()?;
    let boot = data.join(image::datadir::KERNEL_DIR).join("boot");
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

/// The static agent for an image: `--agent`; in a build tree, linked from that build (image::agent::build, with
/// its build record); else the one `scripts/install.sh` or the Debian package put in the data directory (with the
/// record beside it, if any). Refused, naming the ways to get one, when there is none.
pub fn agent(
    given: Option<&std::path::Path>,
    data: &image::datadir::DataDir,
) -> Result<(PathBuf, Option<image::AgentBuild>), String> {
    if let Some(a) = given {
        return Ok((a.to_path_buf(), None));
    }
    if let Some(tree) = &data.build_tree {
        let (bin, record) = image::agent::build(tree)?;
        return Ok((bin, Some(record)));
    }
    let Some(found) = data.installed_agent() else {
        return Err(format!(
            "no static guest agent: this fenced-run is installed (not in a build tree) and neither {} nor {} holds \
             one; install it from a checkout of the same commit with `scripts/install.sh` (docs/install.md), or \
             give --agent FILE",
            data.join(image::datadir::AGENT_FILE).display(),
            std::path::Path::new(image::datadir::SYSTEM_DIR)
                .join(image::datadir::AGENT_FILE)
                .display()
        ));
    };
    let record = found.with_file_name(image::datadir::AGENT_BUILD_FILE);
    let record = match std::fs::read(&record) {
        Ok(b) => Some(
            serde_json::from_slice(&b)
                .map_err(|e| format!("the agent's build record {}: {e}", record.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(format!(
                "the agent's build record {}: {e}",
                record.display()
            ))
        }
    };
    Ok((found, record))
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
            outln!("agent       sha256 {}", m.agent.sha256);
            if let Some(a) = &m.agent_build {
                outln!(
                    "agent build rustc {} ({}, {}), target {}, profile {}, Cargo.lock sha256 {}",
                    a.rustc_release,
                    a.rustc_commit_hash,
                    a.rustc_host,
                    a.target,
                    a.profile,
                    a.cargo_lock_sha256
                );
            }
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
    let data = image::datadir::resolve().map_err(|e| e.to_string())?;
    let kernel = match &b.kernel {
        Some(k) => k.clone(),
        None => default_kernel().ok_or_else(|| {
            format!(
                "--kernel: no kernel given and none under {}/boot (run `{}`, or pass --kernel FILE)",
                data.join(image::datadir::KERNEL_DIR).display(),
                super::vm::setup_command()
            )
        })?,
    };
    let (agent, agent_build) = agent(b.agent.as_deref(), &data)?;
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
                .unwrap_or_else(|| data.join(image::datadir::DEB_CACHE_DIR)),
            source_date_epoch: image::rootfs::source_date_epoch().map_err(|e| e.to_string())?,
        }),
        None => None,
    };
    let modules = module_tree(&kernel, b.modules.as_deref(), toolchains.is_some())?;
    image::build(&BuildOptions {
        toolchains,
        out: b.out.clone(),
        modules: Some(modules),
        kernel,
        agent,
        agent_build,
        busybox,
        git,
        ovmf: b.ovmf.clone(),
        tdx_ovmf: b.tdx_ovmf.clone(),
    })
}

/// The module tree of `kernel`: `modules` when given, else the `lib/modules/V` beside a `boot/vmlinuz-V`. Refused
/// when there is none or it lacks a module the image loads ([`image::MODULES`], and with `toolchains`
/// [`image::TOOLCHAIN_MODULES`]): an image without them boots with no network for the install phase and no TEE
/// report driver, and measures differently, so it is never built silently.
pub fn module_tree(
    kernel: &std::path::Path,
    modules: Option<&std::path::Path>,
    toolchains: bool,
) -> Result<PathBuf, String> {
    let wanted: Vec<&str> = image::MODULES
        .iter()
        .chain(if toolchains {
            image::TOOLCHAIN_MODULES
        } else {
            &[]
        })
        .copied()
        .collect();
    let names = |list: &[&str]| {
        list.iter()
            .map(|m| m.rsplit('/').next().unwrap_or(*m))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fix = "give --modules DIR (the lib/modules/<version> directory of the kernel's package), or keep the \
               layout scripts/vm-setup.sh makes under vm-kernel/ of the data directory (boot/vmlinuz-V beside \
               lib/modules/V)";
    let dir = match modules {
        Some(d) => d.to_path_buf(),
        None => image::modules_beside(kernel).ok_or_else(|| {
            let looked = match kernel.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("vmlinuz-")) {
                Some(v) => format!(
                    "no {} beside it",
                    kernel
                        .parent()
                        .and_then(|p| p.parent())
                        .unwrap_or(std::path::Path::new(""))
                        .join("lib/modules")
                        .join(v)
                        .display()
                ),
                None => "its name is not vmlinuz-<version>, so no module tree is known beside it".to_string(),
            };
            format!(
                "--kernel {}: {looked}; the image needs the kernel's modules {} (the install phase's network and \
                 the TEE report drivers): {fix}",
                kernel.display(),
                names(&wanted)
            )
        })?,
    };
    if !dir.is_dir() {
        return Err(format!(
            "--modules {}: not a directory; {fix}",
            dir.display()
        ));
    }
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|m| !dir.join(m).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "kernel modules {}: {} missing ({}); the image needs them for the kernel {}: {fix}",
            dir.display(),
            if missing.len() == 1 { "is" } else { "are" },
            missing.join(", "),
            kernel.display()
        ));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tree(root: &Path, version: &str, modules: &[&str]) -> PathBuf {
        let boot = root.join("boot");
        std::fs::create_dir_all(&boot).expect("boot");
        let kernel = boot.join(format!("vmlinuz-{version}"));
        std::fs::write(&kernel, b"kernel").expect("kernel");
        let dir = root.join("lib/modules").join(version);
        for m in modules {
            let p = dir.join(m);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
            std::fs::write(p, b"module").expect("module");
        }
        kernel
    }

    #[test]
    fn a_kernel_without_its_module_tree_is_refused_naming_the_modules_and_the_fix() {
        let t = tempfile::tempdir().expect("tmp");
        let kernel = t.path().join("bzImage");
        std::fs::write(&kernel, b"kernel").expect("kernel");
        let e = module_tree(&kernel, None, false).expect_err("no modules");
        assert!(
            e.starts_with(&format!(
                "--kernel {}: its name is not vmlinuz-<version>",
                kernel.display()
            )),
            "{e}"
        );
        for m in [
            "configfs.ko.xz",
            "sev-guest.ko.xz",
            "tdx-guest.ko.xz",
            "virtio_net.ko.xz",
            "--modules DIR",
            "scripts/vm-setup.sh",
        ] {
            assert!(e.contains(m), "{m}: {e}");
        }
        // A Debian-named kernel whose lib/modules/V is absent: the directory looked for is named.
        let k = tree(&t.path().join("deb"), "6.12.0-1-amd64", &[]);
        std::fs::remove_dir_all(t.path().join("deb/lib")).ok();
        let e = module_tree(&k, None, false).expect_err("no tree");
        assert!(
            e.contains(&format!(
                "no {} beside it",
                t.path().join("deb/lib/modules/6.12.0-1-amd64").display()
            )),
            "{e}"
        );
        // --modules not a directory.
        let e =
            module_tree(&kernel, Some(&t.path().join("nowhere")), false).expect_err("not a dir");
        assert!(
            e.starts_with("--modules ") && e.contains("not a directory"),
            "{e}"
        );
    }

    #[test]
    fn the_tree_beside_the_kernel_or_given_must_hold_every_module_the_image_loads() {
        let t = tempfile::tempdir().expect("tmp");
        let k = tree(t.path(), "6.12.0-1-amd64", image::MODULES);
        let dir = t.path().join("lib/modules/6.12.0-1-amd64");
        assert_eq!(module_tree(&k, None, false), Ok(dir.clone()));
        // The toolchain image's modules are wanted only with --toolchains.
        let e = module_tree(&k, None, true).expect_err("toolchain modules missing");
        assert!(
            e.contains("dm-verity.ko.xz") && e.contains("erofs.ko.xz") && e.contains("are missing"),
            "{e}"
        );
        // --modules given for a kernel elsewhere, with one module gone.
        let other = t.path().join("vmlinuz");
        std::fs::write(&other, b"kernel").expect("kernel");
        assert_eq!(module_tree(&other, Some(&dir), false), Ok(dir.clone()));
        std::fs::remove_file(dir.join(image::MODULES[6])).expect("rm");
        let e = module_tree(&other, Some(&dir), false).expect_err("virtio_net missing");
        assert!(
            e.contains("is missing (kernel/drivers/net/virtio_net.ko.xz)"),
            "{e}"
        );
    }
}
