//! The QEMU command line of the `vm` tier and the accelerator choice.
//!
//! q35 (microvm does not boot Debian's kernel reliably), direct kernel boot, no default devices, one
//! virtio-serial port for the job channel and the serial console into a file; for a job with an install phase
//! also one virtio-net device on QEMU user networking with `restrict=on` (no way out but the one `guestfwd`,
//! which starts the host dialer per connection) and a QMP socket, through which the host removes that network
//! at the cut. [`args`] is a function of the plain [`Launch`] struct only. TCG where `/dev/kvm` is the
//! `kvm_pvm` module (an ordinary kernel hangs under it, and a probe would only burn its timeout), KVM elsewhere.

use std::path::{Path, PathBuf};

/// The accelerator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// QEMU's emulator (multi-threaded).
    Tcg,
}

impl Accel {
    /// The QEMU name.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// Chooses the accelerator from `sys_module` (normally `/sys/module`) and whether `dev_kvm` exists, without
/// probing: TCG when `kvm_pvm` is loaded and neither `kvm_intel` nor `kvm_amd` is, or when there is no KVM.
pub fn choose_accel(sys_module: &Path, dev_kvm: &Path) -> Accel {
    let has = |m: &str| sys_module.join(m).exists();
    if !dev_kvm.exists() || (has("kvm_pvm") && !has("kvm_intel") && !has("kvm_amd")) {
        Accel::Tcg
    } else {
        Accel::Kvm
    }
}

/// What one VM is launched with.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// The command line.
    pub cmdline: String,
    /// The Unix socket the host listens on for the job channel.
    pub channel: PathBuf,
    /// Where the serial console goes.
    pub console: PathBuf,
    /// vCPUs.
    pub vcpus: u32,
    /// Guest memory in MiB.
    pub memory_mib: u64,
    /// The accelerator.
    pub accel: Accel,
    /// The install phase's network: the host dialer's command line (`None`: no network device at all).
    pub dialer: Option<String>,
    /// With a network: the QMP socket QEMU listens on, through which the host removes the netdev at the cut
    /// (host::vm::qmp). No monitor of any kind without it.
    pub qmp: Option<PathBuf>,
    /// The firmware of a plain VM (`-bios`; `None`: QEMU's default, SeaBIOS). [`fast_firmware`] picks qboot
    /// where QEMU ships it. The confidential tiers replace it with their OVMF.
    pub bios: Option<PathBuf>,
    /// The toolchain image (host::image::rootfs), attached read-only as the guest's only virtio disk; `None`:
    /// no disk at all.
    pub disk: Option<PathBuf>,
}

/// The qboot firmware where QEMU's data directory holds it (`/usr/share/qemu/qboot.rom`, or
/// `../share/qemu/qboot.rom` beside the QEMU binary `qemu`), else `None`. qboot loads the kernel and QEMU's
/// ACPI tables through fw_cfg and does nothing else; under TCG it reaches the kernel about 0.3 s before SeaBIOS
/// does (docs/benchmarks.md). The `vm` tier's firmware is the host's, as everything in that tier is: the
/// sim measurement covers kernel, initramfs and command line only.
pub fn fast_firmware(qemu: &Path) -> Option<PathBuf> {
    let beside = std::fs::canonicalize(qemu)
        .ok()
        .or_else(|| which(qemu))
        .and_then(|q| q.parent()?.parent().map(|p| p.join("share/qemu/qboot.rom")));
    beside
        .into_iter()
        .chain([PathBuf::from("/usr/share/qemu/qboot.rom")])
        .find(|p| p.is_file())
}

/// `program` looked up on PATH when it has no directory part.
pub fn which(program: &Path) -> Option<PathBuf> {
    if program.components().count() != 1 {
        return None;
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
            .and_then(|p| std::fs::canonicalize(p).ok())
    })
}

/// Where the guest reaches the host dialer (QEMU user networking's guestfwd).
pub const GUESTFWD: &str = "tcp:10.0.2.100:3128";

/// Quotes `s` for the shell-like parsing QEMU's `guestfwd=...-cmd:` applies (single quotes), with commas doubled
/// for QEMU's option parser.
pub fn quote_cmd_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''")).replace(',', ",,")
}

/// The CPU model under TCG: everything QEMU emulates except ERMS and FSRM. With those two the guest's kernel
/// copies to and from user space (and glibc's large `memcpy`) with `rep movsb`, which TCG executes one byte per
/// iteration; without them it uses `rep movsq` and vector moves. Under TCG here that cut the guest's CPU time for a
/// 52 MB bundle's transfer by about 30 % and roughly halved intake in the guest (docs/benchmarks.md, issue 32).
/// Only a speed hint to the guest: nothing in it depends on either feature, and the CPU model is not part of the
/// `vm` tier's measurement (kernel, initramfs, command line).
pub const TCG_CPU: &str = "max,-erms,-fsrm";

/// The QEMU arguments for `l` (after the program name).
pub fn args(l: &Launch) -> Vec<String> {
    let cpu = match l.accel {
        Accel::Kvm => "host",
        Accel::Tcg => TCG_CPU,
    };
    let mut a: Vec<String> = [
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-machine",
        "q35",
        "-accel",
        l.accel.as_str(),
        "-cpu",
        cpu,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(bios) = &l.bios {
        a.extend(["-bios".into(), bios.display().to_string()]);
    }
    a.extend([
        "-smp".into(),
        l.vcpus.to_string(),
        "-m".into(),
        format!("{}M", l.memory_mib),
        "-kernel".into(),
        l.kernel.display().to_string(),
        "-initrd".into(),
        l.initrd.display().to_string(),
        "-append".into(),
        l.cmdline.clone(),
        "-nic".into(),
        "none".into(),
        "-monitor".into(),
        "none".into(),
        "-serial".into(),
        format!("file:{}", l.console.display()),
        "-chardev".into(),
        format!("socket,id=job,path={}", l.channel.display()),
        "-device".into(),
        "virtio-serial-pci,id=vser".into(),
        "-device".into(),
        format!(
            "virtserialport,bus=vser.0,chardev=job,name={}",
            guest::channel::PORT_NAME
        ),
    ]);
    if let Some(disk) = &l.disk {
        a.extend([
            "-drive".into(),
            format!(
                "file={},if=none,id=toolchains,format=raw,readonly=on",
                disk.display().to_string().replace(',', ",,")
            ),
            "-device".into(),
            "virtio-blk-pci,drive=toolchains".into(),
        ]);
    }
    if let Some(cmd) = &l.dialer {
        a.extend([
            "-netdev".into(),
            format!(
                "user,id={},restrict=on,guestfwd={GUESTFWD}-cmd:{cmd}",
                super::qmp::NETDEV_ID
            ),
            "-device".into(),
            "virtio-net-pci,netdev=net0,romfile=".into(),
        ]);
        if let Some(q) = &l.qmp {
            a.extend([
                "-qmp".into(),
                format!("unix:{},server=on,wait=off", q.display()),
            ]);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accel_follows_the_modules_present() {
        let d = tempfile::tempdir().expect("tmp");
        let kvm = d.path().join("kvm");
        std::fs::write(&kvm, "").expect("kvm");
        let m = d.path().join("module");
        std::fs::create_dir_all(m.join("kvm_pvm")).expect("pvm");
        assert_eq!(choose_accel(&m, &kvm), Accel::Tcg);
        std::fs::create_dir_all(m.join("kvm_amd")).expect("amd");
        assert_eq!(choose_accel(&m, &kvm), Accel::Kvm);
        assert_eq!(choose_accel(&m, &d.path().join("none")), Accel::Tcg);
    }

    #[test]
    fn qboot_is_taken_from_the_data_directory_beside_the_qemu_binary() {
        let root = tempfile::tempdir().expect("tempdir");
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        let qemu = bin.join("qemu-system-x86_64");
        std::fs::write(&qemu, b"").expect("write");
        let system = Path::new("/usr/share/qemu/qboot.rom");
        let found = fast_firmware(&qemu);
        if system.is_file() {
            assert_eq!(found.as_deref(), Some(system));
        } else {
            assert_eq!(found, None);
        }
        let data = root.path().join("share/qemu");
        std::fs::create_dir_all(&data).expect("mkdir");
        std::fs::write(data.join("qboot.rom"), b"rom").expect("write");
        assert_eq!(
            fast_firmware(&qemu).as_deref(),
            Some(
                data.join("qboot.rom")
                    .canonicalize()
                    .expect("canonical")
                    .as_path()
            )
        );
    }

    #[test]
    fn arguments_have_a_network_only_with_a_dialer_and_one_named_port() {
        let l = Launch {
            kernel: "/k".into(),
            initrd: "/i".into(),
            cmdline: "console=ttyS0".into(),
            channel: "/s".into(),
            console: "/c".into(),
            vcpus: 2,
            memory_mib: 1024,
            accel: Accel::Tcg,
            dialer: None,
            qmp: Some("/q".into()),
            bios: None,
            disk: None,
        };
        let a = args(&l);
        assert!(!a.iter().any(|x| x == "-bios"), "QEMU's default firmware");
        let pos = |s: &str| a.iter().position(|x| x == s).expect(s);
        assert_eq!(a[pos("-nic") + 1], "none");
        assert_eq!(a[pos("-machine") + 1], "q35");
        assert_eq!(a[pos("-accel") + 1], "tcg");
        assert_eq!(a[pos("-cpu") + 1], "max,-erms,-fsrm");
        assert!(a.contains(&"-nodefaults".to_string()));
        assert!(a.iter().any(|x| x.ends_with("name=fenced-run.job")));
        assert!(!a.iter().any(|x| x.contains("netdev")));
        assert!(
            !a.iter().any(|x| x == "-qmp"),
            "no monitor without a network"
        );

        // With an install phase: one restricted user network whose only way out is the dialer.
        let mut l = l;
        l.bios = Some("/usr/share/qemu/qboot.rom".into());
        l.dialer = Some(format!(
            "{} vm-dialer --state {}",
            quote_cmd_word("/opt/a,b/fenced-run"),
            quote_cmd_word("/tmp/it's")
        ));
        let b = args(&l);
        let at = b.iter().position(|x| x == "-netdev").expect("-netdev");
        let netdev = &b[at + 1];
        assert_eq!(
            netdev,
            "user,id=net0,restrict=on,guestfwd=tcp:10.0.2.100:3128-cmd:'/opt/a,,b/fenced-run' vm-dialer --state '/tmp/it'\\''s'"
        );
        assert!(b.iter().any(|x| x == "virtio-net-pci,netdev=net0,romfile="));
        assert_eq!(
            b[b.iter().position(|x| x == "-bios").expect("-bios") + 1],
            "/usr/share/qemu/qboot.rom"
        );
        assert_eq!(b.iter().filter(|x| x.as_str() == "-netdev").count(), 1);
        // The netdev's id is the one the cut removes over QMP.
        assert!(netdev.starts_with(&format!("user,id={},", super::super::qmp::NETDEV_ID)));
        assert_eq!(
            b[b.iter().position(|x| x == "-qmp").expect("-qmp") + 1],
            "unix:/q,server=on,wait=off"
        );
        assert!(!b.iter().any(|x| x == "-drive"), "no disk without an image");
        // With a toolchain image: one read-only raw virtio disk, commas in its path doubled.
        l.disk = Some("/img/a,b/toolchains.img".into());
        let c = args(&l);
        assert_eq!(
            c[c.iter().position(|x| x == "-drive").expect("-drive") + 1],
            "file=/img/a,,b/toolchains.img,if=none,id=toolchains,format=raw,readonly=on"
        );
        assert!(c.iter().any(|x| x == "virtio-blk-pci,drive=toolchains"));
        assert_eq!(c.iter().filter(|x| x.as_str() == "-drive").count(), 1);
    }
}
