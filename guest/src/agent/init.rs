//! PID 1's own set-up in the guest: mounts, the move off the initial rootfs onto a bind mount of it (`pivot_root`
//! refuses the initial rootfs, and the fence needs both `pivot_root` and user namespaces), cgroup2, kernel modules,
//! power-off.

use nix::mount::{mount, MsFlags};
use std::path::{Path, PathBuf};

/// Where the bind mount of the initramfs root is made before it is moved over `/`.
const NEW_ROOT: &str = "/newroot";
/// The list of modules to load, one path per line, dependencies first (written by `fenced-run image build`).
pub const MODULE_LIST: &str = "/lib/modules/fenced-run.load";

fn mnt(
    src: &str,
    target: &str,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    std::fs::create_dir_all(target).map_err(|e| format!("mkdir {target}: {e}"))?;
    mount(Some(src), target, Some(fstype), flags, data)
        .map_err(|e| format!("mount {fstype} on {target}: {e}"))
}

/// Seconds since the kernel booted (CLOCK_BOOTTIME), for the boot timeline on the console.
pub fn since_boot() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// One line of the boot timeline on the console: `guest-agent: boot +S.SSS s: WHAT`.
pub fn mark(what: &str) {
    eprintln!("guest-agent: boot +{:.3} s: {what}", since_boot());
}

/// Stage 1 (on the initramfs): mounts /proc, /sys and /dev, opens and unlinks `/init`, bind-mounts the initramfs
/// root onto `/newroot`, moves that bind mount over `/` and chroots into it. The root is then a mount with a parent
/// (the initial rootfs), which `pivot_root` accepts, without copying the initramfs (which cost 0.14-0.28 s under
/// TCG). The agent itself stays reachable only through the returned descriptor: the caller re-executes it through
/// that descriptor, and no `/init` exists any more for anything in the guest to read or replace by path.
pub fn stage1() -> Result<std::os::fd::OwnedFd, String> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV;
    mnt("proc", "/proc", "proc", nosuid, None)?;
    mnt("sysfs", "/sys", "sysfs", nosuid, None)?;
    mnt(
        "devtmpfs",
        "/dev",
        "devtmpfs",
        MsFlags::MS_NOSUID,
        Some("mode=0755"),
    )?;
    let agent: std::os::fd::OwnedFd = std::fs::File::open("/init")
        .map_err(|e| format!("open /init: {e}"))?
        .into();
    std::fs::remove_file("/init").map_err(|e| format!("unlink /init: {e}"))?;
    std::fs::create_dir_all(NEW_ROOT).map_err(|e| format!("mkdir {NEW_ROOT}: {e}"))?;
    // Not recursive: /proc, /sys and /dev are moved below instead.
    mount(
        Some("/"),
        NEW_ROOT,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("bind / on {NEW_ROOT}: {e}"))?;
    for m in ["proc", "sys", "dev"] {
        let target = format!("{NEW_ROOT}/{m}");
        mount(
            Some(format!("/{m}").as_str()),
            target.as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|e| format!("move /{m} to {target}: {e}"))?;
    }
    std::env::set_current_dir(NEW_ROOT).map_err(|e| format!("chdir {NEW_ROOT}: {e}"))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(|e| format!("move {NEW_ROOT} over /: {e}"))?;
    nix::unistd::chroot(".").map_err(|e| format!("chroot {NEW_ROOT}: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    // The bind mount's own view of the (now empty) mount point directory.
    let _ = std::fs::remove_dir(NEW_ROOT);
    mark("stage 1: the initramfs root bound and moved over /");
    Ok(agent)
}

/// Stage 2 (in the new root): cgroup2, /tmp, /run, the report modules where a TEE guest device exists
/// ([`tee_drivers_wanted`]), configfs (the install network's modules in a background thread, see
/// [`network_modules`]). Returns a note per module that did not load (ENODEV from a TEE driver means "not this
/// TEE" and is no note).
pub fn stage2() -> Result<Vec<String>, String> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mnt(
        "cgroup2",
        "/sys/fs/cgroup",
        "cgroup2",
        nosuid | MsFlags::MS_NOEXEC,
        None,
    )?;
    mnt("tmpfs", "/tmp", "tmpfs", nosuid, Some("mode=1777"))?;
    mnt("tmpfs", "/run", "tmpfs", nosuid, Some("mode=0755"))?;
    mark("stage 2: re-executed in the new root");
    let mut notes = Vec::new();
    let list = std::fs::read_to_string(MODULE_LIST).unwrap_or_default();
    let (network, early): (Vec<&str>, Vec<&str>) = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .partition(|l| is_network_module(l));
    // The report modules (configfs, tsm and the TEE guest drivers) load only where a TEE guest device exists:
    // in a plain VM every driver answers ENODEV, and loading them costs boot time under TCG.
    let wanted = tee_drivers_wanted(Path::new("/"));
    let early: Vec<&str> = if wanted.is_empty() {
        eprintln!(
            "guest-agent: no SEV-SNP or TDX guest device: the report modules are not loaded (a plain VM)"
        );
        Vec::new()
    } else {
        early
            .into_iter()
            .filter(|l| !is_tee_driver(l) || wanted.contains(&module_stem(l)))
            .collect()
    };
    // The TEE guest drivers need only what comes before them (tsm, configfs) and not each other: each loads on
    // its own thread, beside the next (a second vCPU does one while the first does the other).
    let mut beside = Vec::new();
    for line in early {
        if is_tee_driver(line) {
            let path = line.to_owned();
            beside.push(std::thread::spawn(move || load_module(Path::new(&path))));
            continue;
        }
        if let Err(e) = load_module(Path::new(line)) {
            notes.push(e);
        }
        if line.contains("/configfs.") {
            let _ = mnt(
                "configfs",
                "/sys/kernel/config",
                "configfs",
                nosuid | MsFlags::MS_NOEXEC,
                None,
            );
        }
    }
    for handle in beside {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => notes.push(e),
            Err(_) => notes.push("loading a TEE guest driver panicked".to_string()),
        }
    }
    mark("stage 2: attestation modules loaded");
    // Set while the agent is still single-threaded.
    std::env::set_var("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
    std::env::set_var("HOME", "/root");
    // The install network's modules are not needed before the install phase: they load beside the report
    // exchange and intake, and the install phase waits for them (network_modules).
    let network: Vec<String> = network.into_iter().map(str::to_owned).collect();
    let handle = std::thread::spawn(move || {
        let notes: Vec<String> = network
            .iter()
            .filter_map(|m| load_module(Path::new(m)).err())
            .collect();
        mark("the install network's modules loaded");
        notes
    });
    *NETWORK_MODULES.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    // The toolchain image, when the measured command line names one: set up beside the report exchange, and
    // waited for before the bundle is run (toolchain_image).
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let image = match super::verity::params(&cmdline) {
        Ok(None) => None,
        Ok(Some(p)) => Some(std::thread::spawn(move || {
            let r = super::verity::set_up(&p, &load_module).map(|dir| (p, dir));
            match &r {
                Ok(_) => mark("the toolchain image is verified and mounted"),
                Err(e) => eprintln!("guest-agent: toolchain image: {e}"),
            }
            r
        })),
        Err(e) => Some(std::thread::spawn(move || Err(e))),
    };
    *TOOLCHAIN_IMAGE.lock().unwrap_or_else(|p| p.into_inner()) = image;
    Ok(notes)
}

/// The toolchain image's set-up that stage 2 started, until [`toolchain_image`] takes it.
type ImageSetUp = std::thread::JoinHandle<Result<(super::verity::VerityParams, PathBuf), String>>;
static TOOLCHAIN_IMAGE: std::sync::Mutex<Option<ImageSetUp>> = std::sync::Mutex::new(None);

/// Waits for the toolchain image's set-up that stage 2 started: `None` when the command line names no image,
/// else its parameters and mount point, or why it could not be set up (a changed image fails here).
pub fn toolchain_image() -> Option<Result<(super::verity::VerityParams, PathBuf), String>> {
    let handle = TOOLCHAIN_IMAGE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()?;
    Some(match handle.join() {
        Ok(r) => r,
        Err(_) => Err("setting the toolchain image up panicked".to_string()),
    })
}

/// The modules of the install network (the virtio-net driver and what it needs), by file name.
const NETWORK_MODULE_NAMES: &[&str] = &["failover", "net_failover", "virtio_net"];

/// The loading of the install network's modules that stage 2 started, until [`network_modules`] takes it.
static NETWORK_MODULES: std::sync::Mutex<Option<std::thread::JoinHandle<Vec<String>>>> =
    std::sync::Mutex::new(None);

/// The TEE guest drivers (report interfaces), by file name: nothing in the list depends on them.
const TEE_DRIVER_NAMES: &[&str] = &["sev-guest", "tdx-guest"];

/// The TEE guest drivers this VM has a device for, read under `root` (`/` in the guest): `sev-guest` when the
/// kernel registered the SEV-SNP guest's platform device (it does so only when SNP is active, which the
/// hypervisor cannot fake to an SNP guest), `tdx-guest` when the CPU flags include `tdx_guest`.
pub fn tee_drivers_wanted(root: &Path) -> Vec<&'static str> {
    let mut wanted = Vec::new();
    if root.join("sys/bus/platform/devices/sev-guest").exists() {
        wanted.push("sev-guest");
    }
    let cpuinfo = std::fs::read_to_string(root.join("proc/cpuinfo")).unwrap_or_default();
    let tdx = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "tdx_guest"));
    if tdx {
        wanted.push("tdx-guest");
    }
    wanted
}

fn module_stem(path: &str) -> &str {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.split('.').next().unwrap_or(file)
}

fn is_network_module(path: &str) -> bool {
    NETWORK_MODULE_NAMES.contains(&module_stem(path))
}

fn is_tee_driver(path: &str) -> bool {
    TEE_DRIVER_NAMES.contains(&module_stem(path))
}

/// Waits until the install network's modules are loaded (stage 2 loads them in the background); returns a
/// note per module that did not load. Empty when they were already waited for, or stage 2 never ran.
pub fn network_modules() -> Vec<String> {
    let handle = NETWORK_MODULES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    match handle.map(std::thread::JoinHandle::join) {
        Some(Ok(notes)) => notes,
        Some(Err(_)) => vec!["loading the install network's modules panicked".to_string()],
        None => Vec::new(),
    }
}

/// Loads one module file (`.ko` or `.ko.xz`, which the kernel decompresses itself).
fn load_module(path: &Path) -> Result<(), String> {
    use nix::kmod::{finit_module, ModuleInitFlags};
    let f = std::fs::File::open(path).map_err(|e| format!("module {}: {e}", path.display()))?;
    let compressed = path
        .extension()
        .is_some_and(|e| e == "xz" || e == "zst" || e == "gz");
    // MODULE_INIT_COMPRESSED_FILE (4): the kernel decompresses the file.
    let flags = if compressed {
        ModuleInitFlags::from_bits_retain(4)
    } else {
        ModuleInitFlags::empty()
    };
    match finit_module(&f, c"", flags) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
        // sev-guest and tdx-guest in a VM that is not that TEE.
        Err(nix::errno::Errno::ENODEV) => {
            eprintln!(
                "guest-agent: {}: no such device here (not this TEE)",
                path.display()
            );
            Ok(())
        }
        Err(e) => Err(format!("module {}: {e}", path.display())),
    }
}

/// Flushes file systems and powers the VM off (never returns; QEMU exits).
pub fn power_off() -> ! {
    nix::unistd::sync();
    let _ = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_POWER_OFF);
    // Only reached when not PID 1 or without CAP_SYS_BOOT.
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_network_driver_and_its_dependencies_load_in_the_background() {
        for m in [
            "/lib/modules/failover.ko.xz",
            "/lib/modules/net_failover.ko.xz",
            "/lib/modules/virtio_net.ko",
        ] {
            assert!(is_network_module(m), "{m}");
        }
        for m in [
            "/lib/modules/configfs.ko.xz",
            "/lib/modules/tsm.ko.xz",
            "/lib/modules/sev-guest.ko.xz",
            "/lib/modules/tdx-guest.ko.xz",
            "/lib/modules/virtio_net_extra.ko.xz",
        ] {
            assert!(!is_network_module(m), "{m}");
        }
        // Without stage 2 there is nothing to wait for.
        assert!(network_modules().is_empty());
    }

    #[test]
    fn the_report_modules_load_only_for_a_tee_guest_device() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("proc")).expect("mkdir");
        let cpuinfo = root.path().join("proc/cpuinfo");
        std::fs::write(&cpuinfo, "processor\t: 0\nflags\t\t: fpu vme hypervisor\n").expect("write");
        assert!(tee_drivers_wanted(root.path()).is_empty());
        // A flag that only contains the name is not the flag.
        std::fs::write(
            &cpuinfo,
            "flags\t\t: fpu no_tdx_guest\nbugs\t\t: tdx_guest\n",
        )
        .expect("write");
        assert!(tee_drivers_wanted(root.path()).is_empty());
        std::fs::write(&cpuinfo, "flags\t\t: fpu tdx_guest hypervisor\n").expect("write");
        assert_eq!(tee_drivers_wanted(root.path()), ["tdx-guest"]);
        std::fs::write(&cpuinfo, "flags\t\t: fpu hypervisor\n").expect("write");
        std::fs::create_dir_all(root.path().join("sys/bus/platform/devices/sev-guest"))
            .expect("mkdir");
        assert_eq!(tee_drivers_wanted(root.path()), ["sev-guest"]);
    }

    #[test]
    fn only_the_tee_guest_drivers_load_beside_each_other() {
        for m in ["/lib/modules/sev-guest.ko", "/lib/modules/tdx-guest.ko.xz"] {
            assert!(is_tee_driver(m), "{m}");
        }
        for m in [
            "/lib/modules/configfs.ko",
            "/lib/modules/tsm.ko",
            "/lib/modules/virtio_net.ko",
            "/lib/modules/sev-guest-extra.ko",
        ] {
            assert!(!is_tee_driver(m), "{m}");
        }
    }
}
