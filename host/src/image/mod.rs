//! `fenced-run image build`: the `vm` tier's guest image. A kernel (Debian's 6.12 by default), a reproducible
//! initramfs holding the static `guest-agent` as `/init`, busybox for shell test suites, `git` for the fence
//! (only `git apply` of a patch and git-bundle unpacking need it; docs/vm.md says why it stays),
//! and the kernel modules the agent loads; a fixed command line; and a manifest (JSON) with the artifacts'
//! hashes and the expected measurements computed by the `measurements` crate.

pub mod agent;
pub mod cpio;
pub mod datadir;
pub mod git_http;
pub mod pvh;
pub mod rootfs;

use cpio::{Entry, Tree};
pub use measurements::manifest::{
    AgentBuild, Artifact, Cmdline, Included, Manifest, Measurements, RtmrEvent, SnpMeasurement,
    TdxMeasurement, MANIFEST_FILE, MANIFEST_FORMAT,
};
use sha2::{Digest, Sha256, Sha384};
use std::path::{Path, PathBuf};

/// The fixed kernel command line of the image.
pub const CMDLINE: &str = "console=ttyS0 panic=-1 quiet random.trust_cpu=on cryptomgr.notests initcall_blacklist=jent_mod_init,crypto_kdf108_init,init_encrypted ras=cec_disable 8250.nr_uarts=1";
/// File names inside an image directory.
pub const KERNEL_FILE: &str = "vmlinuz";
/// The `vm` tier's kernel: the bzImage's payload, decompressed (host::image::pvh), when it has a PVH entry.
pub const VM_KERNEL_FILE: &str = "vmlinux";
/// The initramfs file name.
pub const INITRAMFS_FILE: &str = "initramfs.cpio";
/// Kernel modules the agent loads, dependencies first, relative to `lib/modules/<version>/`: configfs and the
/// report interfaces (configfs-tsm, sev-guest, tdx-guest). virtio-serial is built into Debian's 6.12 kernel.
pub const MODULES: &[&str] = &[
    "kernel/fs/configfs/configfs.ko.xz",
    "kernel/drivers/virt/coco/tsm.ko.xz",
    "kernel/drivers/virt/coco/sev-guest/sev-guest.ko.xz",
    "kernel/drivers/virt/coco/tdx-guest/tdx-guest.ko.xz",
    // The install phase's network device (virtio_net needs net_failover, which needs failover).
    "kernel/net/core/failover.ko.xz",
    "kernel/drivers/net/net_failover.ko.xz",
    "kernel/drivers/net/virtio_net.ko.xz",
];

/// Kernel modules the agent loads, dependencies first, when the image has a toolchain root filesystem
/// (`--toolchains`): the virtio block driver, device-mapper and dm-verity, erofs (whose crc32c comes from
/// crc32c_generic: the guest has no modprobe to find it on request).
pub const TOOLCHAIN_MODULES: &[&str] = &[
    "kernel/drivers/block/virtio_blk.ko.xz",
    "kernel/drivers/md/dm-mod.ko.xz",
    "kernel/drivers/md/dm-bufio.ko.xz",
    "kernel/lib/reed_solomon/reed_solomon.ko.xz",
    "kernel/drivers/md/dm-verity.ko.xz",
    "kernel/crypto/crc32c_generic.ko.xz",
    "kernel/lib/libcrc32c.ko.xz",
    "kernel/fs/erofs/erofs.ko.xz",
];
/// Where the initramfs lists [`TOOLCHAIN_MODULES`] in load order.
pub const TOOLCHAIN_MODULE_LIST: &str = "lib/modules/fenced-run-toolchains.load";

/// vCPU counts the manifest lists SNP launch digests for.
pub const SNP_VCPUS: &[u32] = &[1, 2, 4];
/// The vCPU type of those digests.
pub const SNP_VCPU_TYPE: &str = "EPYC-v4";
/// SEV_FEATURES of those digests (SNPActive only).
pub const SNP_GUEST_FEATURES: u64 = 0x1;

/// The SEV-SNP launch digests of `kernel`, `initrd` and `cmdline` under the OVMF `ovmf`, per [`SNP_VCPUS`].
pub fn snp_measurements(
    ovmf: &[u8],
    kernel: &[u8],
    initrd: &[u8],
    cmdline: &str,
) -> Result<Vec<SnpMeasurement>, String> {
    use measurements::snp;
    let parsed = snp::Ovmf::parse(ovmf.to_vec()).map_err(|e| format!("--ovmf: {e}"))?;
    let hashes = snp::KernelHashes::new(kernel, Some(initrd), Some(cmdline));
    let sig = snp::vcpu_sig_for_type(SNP_VCPU_TYPE).ok_or("unknown vCPU type")?;
    let mut out = Vec::new();
    for &vcpus in SNP_VCPUS {
        let cfg = snp::SnpConfig {
            vcpus,
            vcpu_sig: sig,
            guest_features: SNP_GUEST_FEATURES,
            vmm: snp::VmmType::Qemu,
            ovmf_hash: None,
        };
        let ld =
            snp::launch_digest(&parsed, Some(&hashes), &cfg).map_err(|e| format!("--ovmf: {e}"))?;
        out.push(SnpMeasurement {
            ovmf_sha256: sha256_hex(ovmf),
            vcpus,
            vcpu_type: SNP_VCPU_TYPE.into(),
            guest_features: SNP_GUEST_FEATURES,
            measurement: hex::encode(ld),
        });
    }
    Ok(out)
}

/// What to build the image from.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The output directory (created if missing; its three files are replaced).
    pub out: PathBuf,
    /// The kernel (a bzImage).
    pub kernel: PathBuf,
    /// The kernel's module tree (`lib/modules/<version>`), when its modules are to be included.
    pub modules: Option<PathBuf>,
    /// The static guest agent.
    pub agent: PathBuf,
    /// How the agent was built, recorded in the manifest, where known.
    pub agent_build: Option<AgentBuild>,
    /// A static busybox (shell and tools for test suites), when present.
    pub busybox: Option<PathBuf>,
    /// `git` to include with its shared libraries (the fence computes tree hashes and applies patches with it).
    pub git: Option<PathBuf>,
    /// The AmdSev OVMF to compute SEV-SNP launch digests for, when given (copied into the image as
    /// [`crate::vm::confidential::SNP_FIRMWARE_FILE`], the file an `sev-snp` launch loads).
    pub ovmf: Option<PathBuf>,
    /// The TDX OVMF (TDVF) to compute the MRTD and RTMR event digests for, when given (copied into the image
    /// as [`crate::vm::confidential::TDX_FIRMWARE_FILE`]).
    pub tdx_ovmf: Option<PathBuf>,
    /// The toolchain root filesystem to build beside the initramfs (`--toolchains`), if any.
    pub toolchains: Option<rootfs::RootfsOptions>,
}

fn read(what: &str, p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("{what} {}: {e}", p.display()))
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// The module tree beside a kernel extracted from a Debian package (`boot/vmlinuz-V` -> `lib/modules/V`).
pub fn modules_beside(kernel: &Path) -> Option<PathBuf> {
    let name = kernel.file_name()?.to_str()?;
    let version = name.strip_prefix("vmlinuz-")?;
    let dir = kernel.parent()?.parent()?.join("lib/modules").join(version);
    dir.is_dir().then_some(dir)
}

/// The shared libraries `ldd` lists for `bin` (absolute paths).
fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>, String> {
    let out = std::process::Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| format!("ldd {}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// Assembles the initramfs tree and the list of included host files.
pub fn initramfs_tree(opts: &BuildOptions) -> Result<(Tree, Included, Vec<Included>), String> {
    let mut t = Tree::new();
    let mut included = Vec::new();
    for d in [
        "bin", "dev", "etc", "lib", "lib64", "proc", "root", "run", "sbin", "sys", "tmp",
        "usr/bin", "usr/lib", "usr/sbin",
    ] {
        t.add(d, Entry::Dir);
    }
    t.add("dev/console", Entry::CharDev(5, 1));
    let agent = read("agent", &opts.agent)?;
    // A dynamic agent would make the guest's kernel panic at boot, with no word of why.
    agent::check_static(&opts.agent, &agent).map_err(|e| e.to_string())?;
    let agent_info = Included {
        path: "/init".into(),
        sha256: sha256_hex(&agent),
    };
    t.add("init", Entry::File(agent, true));
    t.add(
        "etc/passwd",
        Entry::File(
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
                .to_vec(),
            false,
        ),
    );
    t.add(
        "etc/group",
        Entry::File(b"root:x:0:\nnogroup:x:65534:\n".to_vec(), false),
    );
    if let Some(bb) = &opts.busybox {
        let bytes = read("busybox", bb)?;
        included.push(Included {
            path: "/bin/busybox".into(),
            sha256: sha256_hex(&bytes),
        });
        t.add("bin/busybox", Entry::File(bytes, true));
        let list = std::process::Command::new(bb)
            .arg("--list")
            .output()
            .map_err(|e| format!("busybox {} --list: {e}", bb.display()))?;
        for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim) {
            if applet.is_empty()
                || applet.contains('/')
                || matches!(applet, "busybox" | "init" | "linuxrc")
            {
                continue;
            }
            t.add(&format!("bin/{applet}"), Entry::Symlink("busybox".into()));
        }
    }
    if let Some(git) = &opts.git {
        let mut files = vec![git.clone()];
        files.extend(shared_libraries(git)?);
        for f in files {
            let real = std::fs::canonicalize(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            let bytes = read("git", &real)?;
            let guest = if f == *git {
                PathBuf::from("/usr/bin/git")
            } else {
                f.clone()
            };
            let gp = guest.to_string_lossy().into_owned();
            included.push(Included {
                path: gp.clone(),
                sha256: sha256_hex(&bytes),
            });
            t.add(&gp, Entry::File(bytes, true));
        }
        git_http::add(&mut t, &mut included, git)?;
    }
    if let Some(mods) = &opts.modules {
        let mut list = String::new();
        for m in MODULES {
            let gp = add_module(&mut t, &mut included, mods, m)?;
            list.push_str(&gp);
            list.push('\n');
        }
        t.add(
            "lib/modules/fenced-run.load",
            Entry::File(list.into_bytes(), false),
        );
        if opts.toolchains.is_some() {
            let mut list = String::new();
            for m in TOOLCHAIN_MODULES {
                let gp = add_module(&mut t, &mut included, mods, m)?;
                list.push_str(&gp);
                list.push('\n');
            }
            t.add(TOOLCHAIN_MODULE_LIST, Entry::File(list.into_bytes(), false));
        }
    }
    Ok((t, agent_info, included))
}

/// Adds the module `m` of the tree `mods` to `t` under `/lib/modules/` (decompressed) and to `included`;
/// returns its path in the guest.
fn add_module(
    t: &mut Tree,
    included: &mut Vec<Included>,
    mods: &Path,
    m: &str,
) -> Result<String, String> {
    let src = mods.join(m);
    let packed = read("kernel module", &src)?;
    let name = Path::new(m)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Decompressed here, not by the guest's kernel: xz under TCG costs boot time, and the bytes the guest loads
    // are what the manifest lists either way.
    let (bytes, name) = match name.strip_suffix(".xz") {
        Some(plain) => (unxz(&packed, &src)?, plain.to_string()),
        None => (packed, name),
    };
    let gp = format!("/lib/modules/{name}");
    included.push(Included {
        path: gp.clone(),
        sha256: sha256_hex(&bytes),
    });
    t.add(&gp, Entry::File(bytes, false));
    Ok(gp)
}

/// The kernel file the `vm` tier boots from the image in `dir`: the PVH kernel where the manifest lists one,
/// else the bzImage.
pub fn vm_kernel_path(dir: &Path, manifest: &Manifest) -> PathBuf {
    match manifest.vm_kernel {
        Some(_) => dir.join(VM_KERNEL_FILE),
        None => dir.join(KERNEL_FILE),
    }
}

/// Decompresses one `.ko.xz` module file (`src` names it in errors).
fn unxz(packed: &[u8], src: &Path) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut std::io::Cursor::new(packed), &mut out)
        .map_err(|e| format!("kernel module {}: not a valid xz file: {e}", src.display()))?;
    Ok(out)
}

/// Builds the image into `opts.out` and returns its manifest.
pub fn build(opts: &BuildOptions) -> Result<Manifest, String> {
    // Each step on stderr as it starts, and a "still" line every few seconds while one lasts.
    let tick = crate::vm::progress::Ticker::start(
        "image",
        &format!("building the guest image into {}", opts.out.display()),
    );
    let kernel = read("kernel", &opts.kernel)?;
    if opts.toolchains.is_some() && opts.modules.is_none() {
        return Err(format!(
            "--toolchains: the kernel {} has no lib/modules tree beside it, and the guest needs its block, \
             device-mapper and erofs modules",
            opts.kernel.display()
        ));
    }
    // The toolchain image first: its root hash goes on the command line.
    let toolchains = match &opts.toolchains {
        Some(t) => {
            tick.step(&format!(
                "building the toolchain image ({})",
                t.toolchains.join(", ")
            ));
            Some(rootfs::build(t, &opts.out).map_err(|e| e.to_string())?)
        }
        None => {
            for stale in [rootfs::IMAGE_FILE, "toolchains.json"] {
                let p = opts.out.join(stale);
                if p.exists() {
                    std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                }
            }
            let tree = opts.out.join(rootfs::TREE_DIR);
            if tree.exists() {
                std::fs::remove_dir_all(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
            }
            None
        }
    };
    let cmdline = match &toolchains {
        Some(t) => format!("{CMDLINE} {}", rootfs::cmdline_params(t)),
        None => CMDLINE.to_string(),
    };
    tick.step("packing the initramfs (the agent, busybox, git, the kernel modules)");
    let (tree, agent, included) = initramfs_tree(opts)?;
    let mut initramfs = Vec::new();
    tree.write(&mut initramfs)
        .map_err(|e| format!("writing the initramfs: {e}"))?;
    let mut c256 = Sha256::new();
    c256.update(cmdline.as_bytes());
    c256.update([0u8]);
    let mut c384 = Sha384::new();
    c384.update(cmdline.as_bytes());
    c384.update([0u8]);
    tick.step("extracting the PVH kernel from the bzImage");
    let vm_kernel = match pvh::extract(&kernel) {
        Ok(k) => Some(k),
        Err(e) => {
            eprintln!(
                "fenced-run: {}: no PVH kernel for the vm tier ({e}); it boots the bzImage",
                opts.kernel.display()
            );
            None
        }
    };
    tick.step("computing the launch measurements");
    let vm = measurements::sim::vm_launch_measurement(
        vm_kernel.as_deref().unwrap_or(&kernel),
        &initramfs,
        &cmdline,
    );
    let snp_fw = opts.ovmf.as_ref().map(|p| read("--ovmf", p)).transpose()?;
    let sev_snp = match &snp_fw {
        Some(fw) => snp_measurements(fw, &kernel, &initramfs, &cmdline)?,
        None => Vec::new(),
    };
    let tdx_fw = opts
        .tdx_ovmf
        .as_ref()
        .map(|p| read("--tdx-ovmf", p))
        .transpose()?;
    let tdx = match (&tdx_fw, &opts.tdx_ovmf) {
        (Some(fw), Some(p)) => Some(
            measurements::manifest::tdx_measurement(fw, &kernel, &initramfs, &cmdline)
                .map_err(|e| format!("--tdx-ovmf {}: {e}", p.display()))?,
        ),
        _ => None,
    };
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        kernel: Artifact::of(KERNEL_FILE, &kernel),
        vm_kernel: vm_kernel
            .as_deref()
            .map(|k| Artifact::of(VM_KERNEL_FILE, k)),
        initramfs: Artifact::of(INITRAMFS_FILE, &initramfs),
        cmdline: Cmdline {
            value: cmdline.clone(),
            sha256: hex::encode(c256.finalize()),
            sha384: hex::encode(c384.finalize()),
        },
        agent,
        included,
        measurements: Measurements {
            vm: hex::encode(vm),
            sev_snp,
            tdx,
        },
        toolchains,
        agent_build: opts.agent_build.clone(),
    };
    tick.step("writing the image's files");
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let mut json = serde_json::to_string_pretty(&manifest).map_err(|e| format!("manifest: {e}"))?;
    json.push('\n');
    use crate::vm::confidential::{SNP_FIRMWARE_FILE, TDX_FIRMWARE_FILE};
    let mut files = vec![
        (KERNEL_FILE, kernel.as_slice()),
        (INITRAMFS_FILE, initramfs.as_slice()),
        (MANIFEST_FILE, json.as_bytes()),
    ];
    files.extend(vm_kernel.as_deref().map(|k| (VM_KERNEL_FILE, k)));
    files.extend(snp_fw.as_deref().map(|f| (SNP_FIRMWARE_FILE, f)));
    files.extend(tdx_fw.as_deref().map(|f| (TDX_FIRMWARE_FILE, f)));
    for (name, bytes) in files {
        let p = opts.out.join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    // A firmware of an earlier build that this one was not given would not match the manifest.
    for (name, given) in [
        (VM_KERNEL_FILE, vm_kernel.is_some()),
        (SNP_FIRMWARE_FILE, snp_fw.is_some()),
        (TDX_FIRMWARE_FILE, tdx_fw.is_some()),
    ] {
        let p = opts.out.join(name);
        if !given && p.exists() {
            std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    tick.step(&format!(
        "done: measurement {}",
        &manifest.measurements.vm[..manifest.measurements.vm.len().min(16)]
    ));
    Ok(manifest)
}
