//! The toolchain image in the guest: the agent reads the verity parameters from the measured kernel command line,
//! loads the block, device-mapper and erofs modules, sets up a dm-verity device over the image's disk with the
//! device-mapper ioctls (written here: `DM_DEV_CREATE`, `DM_TABLE_LOAD`, `DM_DEV_SUSPEND` to resume,
//! `DM_TABLE_STATUS`; no crate keeps these small and free of a second `nix`), and mounts the erofs read-only.
//! Every block read through the device is checked against the root hash; a changed block is an I/O error, and
//! the target's status turns from `V` to `C`, which the agent checks after the run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The kernel command-line parameter naming the toolchain sets (host::image::rootfs::PARAM_TOOLCHAINS).
pub const PARAM_TOOLCHAINS: &str = "fenced_run.toolchains";
/// The kernel command-line parameter `DATA_BLOCKS,ROOT_HASH,SALT` (host::image::rootfs::PARAM_VERITY).
pub const PARAM_VERITY: &str = "fenced_run.verity";
/// The kernel command-line parameter naming a task's environment image id (`sha256:<64 hex>`), set by the host
/// with the verity parameters when the disk is a task's environment (host::task::PARAM_TASK_IMAGE).
pub const PARAM_TASK_IMAGE: &str = "fenced_run.task_image";
/// Where the initramfs lists the modules to load, dependencies first.
pub const MODULE_LIST: &str = "/lib/modules/fenced-run-toolchains.load";
/// The disk the host attaches the image as (the only virtio block device).
pub const DISK: &str = "vda";
/// Where the agent mounts the file system.
pub const MOUNT_POINT: &str = "/toolchains";
/// The device-mapper name of the verity device.
pub const DM_NAME: &str = "fenced-run-toolchains";
/// How long the agent waits for the disk to appear once its driver is loaded.
const DISK_WAIT: Duration = Duration::from_secs(10);
/// The block size of the image and its hash tree.
const BLOCK: u64 = 4096;

/// The verity parameters of the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerityParams {
    /// The toolchain sets the image holds.
    pub toolchains: Vec<String>,
    /// Size of the file system in 4096-byte blocks (the hash tree follows it on the same disk).
    pub data_blocks: u64,
    /// Root hash, hex (64 digits).
    pub root_hash: String,
    /// Salt, hex.
    pub salt: String,
}

/// Reads the parameters from a kernel command line: `Ok(None)` without them, `Err` when they are malformed.
pub fn params(cmdline: &str) -> Result<Option<VerityParams>, String> {
    let get = |key: &str| {
        cmdline
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    let (names, verity) = match (get(PARAM_TOOLCHAINS), get(PARAM_VERITY)) {
        (None, None) => return Ok(None),
        (Some(n), Some(v)) => (n, v),
        _ => {
            return Err(format!(
                "the kernel command line has only one of {PARAM_TOOLCHAINS} and {PARAM_VERITY}"
            ))
        }
    };
    let hex = |s: &str, len: Option<usize>| {
        !s.is_empty()
            && s.len() % 2 == 0
            && s.len() <= 256
            && len.is_none_or(|l| s.len() == l)
            && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    let parts: Vec<&str> = verity.split(',').collect();
    let [blocks, root, salt] = parts[..] else {
        return Err(format!(
            "{PARAM_VERITY}={verity:?}: expected DATA_BLOCKS,ROOT_HASH,SALT"
        ));
    };
    let data_blocks: u64 = blocks.parse().ok().filter(|b| *b > 0).ok_or_else(|| {
        format!("{PARAM_VERITY}: data blocks {blocks:?} is not a positive number")
    })?;
    if !hex(root, Some(64)) || !hex(salt, None) {
        return Err(format!(
            "{PARAM_VERITY}: the root hash must be 64 hex digits and the salt hex: {verity:?}"
        ));
    }
    let toolchains: Vec<String> = names.split(',').map(str::to_owned).collect();
    if toolchains
        .iter()
        .any(|t| t.is_empty() || !t.bytes().all(|b| b.is_ascii_lowercase()))
    {
        return Err(format!("{PARAM_TOOLCHAINS}={names:?}: not a list of names"));
    }
    Ok(Some(VerityParams {
        toolchains,
        data_blocks,
        root_hash: root.to_ascii_lowercase(),
        salt: salt.to_ascii_lowercase(),
    }))
}

/// The task image id of a kernel command line: `Ok(None)` without [`PARAM_TASK_IMAGE`], `Err` when it is not
/// `sha256:` and 64 hex digits.
pub fn task_image(cmdline: &str) -> Result<Option<String>, String> {
    let Some(v) = cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(PARAM_TASK_IMAGE)?.strip_prefix('='))
    else {
        return Ok(None);
    };
    let hex = v.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{PARAM_TASK_IMAGE}={v:?}: not `sha256:` and 64 hex digits"
        ));
    }
    Ok(Some(format!("sha256:{}", hex.to_ascii_lowercase())))
}

/// The dm-verity table line for `p` over the disk `dev` (`MAJOR:MINOR`), data and hash tree on the same disk.
pub fn table_params(p: &VerityParams, dev: &str) -> String {
    format!(
        "1 {dev} {dev} {BLOCK} {BLOCK} {n} {n} sha256 {} {}",
        p.root_hash,
        p.salt,
        n = p.data_blocks
    )
}

/// Sets the image up: the modules of [`MODULE_LIST`], the disk, the verity device and the read-only mount at
/// [`MOUNT_POINT`]. Returns the mount point.
pub fn set_up(
    p: &VerityParams,
    load: &dyn Fn(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    let list = std::fs::read_to_string(MODULE_LIST)
        .map_err(|e| format!("{MODULE_LIST}: {e} (the image was built without --toolchains)"))?;
    for m in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
        load(Path::new(m))?;
    }
    let sys = Path::new("/sys/block").join(DISK).join("dev");
    let deadline = Instant::now() + DISK_WAIT;
    let dev = loop {
        if let Ok(d) = std::fs::read_to_string(&sys) {
            break d.trim().to_owned();
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no disk /dev/{DISK} within {} s (the host attached no toolchain image)",
                DISK_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let size_sectors: u64 =
        std::fs::read_to_string(Path::new("/sys/block").join(DISK).join("size"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
    // The size comes from the host's disk: saturating, so no value of it wraps past the check.
    let (have, need) = (
        size_sectors.saturating_mul(512),
        p.data_blocks.saturating_mul(BLOCK),
    );
    if have < need {
        return Err(format!(
            "/dev/{DISK} has {have} bytes, fewer than the {need} the command line's file system needs"
        ));
    }
    let dm = dm::create_verity(
        DM_NAME,
        p.data_blocks.saturating_mul(BLOCK / 512),
        &table_params(p, &dev),
    )?;
    std::fs::create_dir_all(MOUNT_POINT).map_err(|e| format!("mkdir {MOUNT_POINT}: {e}"))?;
    use nix::mount::MsFlags;
    nix::mount::mount(
        Some(dm.as_path()),
        MOUNT_POINT,
        Some("erofs"),
        MsFlags::MS_RDONLY | MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
        None::<&str>,
    )
    .map_err(|e| {
        format!(
            "mounting the toolchain image ({} over /dev/{DISK}, dm-verity root hash {}) read-only: {e}; \
             dm-verity status {}",
            dm.display(),
            p.root_hash,
            status().unwrap_or_else(|e| e)
        )
    })?;
    Ok(PathBuf::from(MOUNT_POINT))
}

/// The verity target's status: `V` (every block read so far verified) or `C` (a corrupted block was read).
pub fn status() -> Result<String, String> {
    dm::table_status(DM_NAME)
}

/// The device-mapper ioctls (linux/dm-ioctl.h, interface version 4).
mod dm {
    use std::os::fd::AsRawFd;
    use std::path::PathBuf;

    const CONTROL: &str = "/dev/mapper/control";
    /// `sizeof(struct dm_ioctl)`.
    const HEADER: usize = 312;
    /// `sizeof(struct dm_target_spec)`.
    const SPEC: usize = 40;
    const DEV_CREATE: u8 = 3;
    const DEV_SUSPEND: u8 = 6;
    const TABLE_LOAD: u8 = 9;
    const TABLE_STATUS: u8 = 12;
    const READONLY_FLAG: u32 = 1;

    /// A `struct dm_ioctl` for `name` followed by `extra` bytes of data (`data_size` covers both).
    fn request(
        name: &str,
        flags: u32,
        target_count: u32,
        extra: &[u8],
        room: usize,
    ) -> Result<Vec<u8>, String> {
        if name.len() >= 128 {
            return Err(format!("device-mapper name {name:?} is too long"));
        }
        let size = HEADER + extra.len().max(room);
        let mut b = vec![0u8; size];
        for (i, v) in [4u32, 0, 0].iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        let size32 =
            u32::try_from(size).map_err(|_| "device-mapper request too large".to_string())?;
        b[12..16].copy_from_slice(&size32.to_ne_bytes());
        b[16..20].copy_from_slice(&(HEADER as u32).to_ne_bytes());
        b[20..24].copy_from_slice(&target_count.to_ne_bytes());
        b[28..32].copy_from_slice(&flags.to_ne_bytes());
        b[48..48 + name.len()].copy_from_slice(name.as_bytes());
        b[HEADER..HEADER + extra.len()].copy_from_slice(extra);
        Ok(b)
    }

    #[allow(unsafe_code)]
    fn ioctl(nr: u8, what: &str, buf: &mut [u8]) -> Result<(), String> {
        let ctl = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(CONTROL)
            .map_err(|e| format!("{CONTROL}: {e} (is dm-mod loaded?)"))?;
        let code = nix::request_code_readwrite!(0xfd, nr, HEADER);
        // SAFETY: `buf` is a live, writable buffer of at least HEADER bytes whose data_size field (checked
        // by the kernel against what it copies) is buf.len(); the fd is open for the call's duration.
        let rc = unsafe { libc::ioctl(ctl.as_raw_fd(), code as _, buf.as_mut_ptr()) };
        if rc < 0 {
            return Err(format!(
                "device-mapper {what}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Creates the device `name`, loads one read-only `verity` target of `sectors` with `params`, resumes it;
    /// returns its device node.
    pub fn create_verity(name: &str, sectors: u64, params: &str) -> Result<PathBuf, String> {
        let mut create = request(name, 0, 0, &[], 0)?;
        ioctl(DEV_CREATE, "DM_DEV_CREATE", &mut create)?;
        let dev = u64::from_ne_bytes(create[40..48].try_into().unwrap_or_default());
        let major = (dev & 0xfff00) >> 8;
        let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);

        let mut spec = vec![0u8; SPEC];
        spec[8..16].copy_from_slice(&sectors.to_ne_bytes());
        spec[24..30].copy_from_slice(b"verity");
        spec.extend_from_slice(params.as_bytes());
        spec.push(0);
        while spec.len() % 8 != 0 {
            spec.push(0);
        }
        let next = u32::try_from(spec.len()).map_err(|_| "verity table too long".to_string())?;
        spec[20..24].copy_from_slice(&next.to_ne_bytes());
        let mut load = request(name, READONLY_FLAG, 1, &spec, 0)?;
        ioctl(TABLE_LOAD, "DM_TABLE_LOAD (verity)", &mut load)?;
        let mut resume = request(name, 0, 0, &[], 0)?;
        ioctl(DEV_SUSPEND, "DM_DEV_SUSPEND (resume)", &mut resume)?;

        let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
            .map_err(|e| format!("device-mapper device {major}:{minor}: {e}"))?;
        let node = uevent
            .lines()
            .find_map(|l| l.strip_prefix("DEVNAME="))
            .ok_or_else(|| format!("device-mapper device {major}:{minor} has no DEVNAME"))?;
        Ok(PathBuf::from("/dev").join(node))
    }

    /// The status line of the device's (single) target.
    pub fn table_status(name: &str) -> Result<String, String> {
        let mut st = request(name, 0, 0, &[], 4096)?;
        ioctl(TABLE_STATUS, "DM_TABLE_STATUS", &mut st)?;
        let count = u32::from_ne_bytes(st[20..24].try_into().unwrap_or_default());
        let start = u32::from_ne_bytes(st[16..20].try_into().unwrap_or_default()) as usize;
        if count == 0 {
            return Err(format!("device-mapper device {name} has no target"));
        }
        let text = st
            .get(start + SPEC..)
            .ok_or_else(|| "DM_TABLE_STATUS answered a short buffer".to_string())?;
        let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        Ok(String::from_utf8_lossy(&text[..end]).trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_image_id_is_read_from_the_command_line() {
        let id = "ab".repeat(32);
        assert_eq!(
            task_image(&format!(
                "console=ttyS0 {PARAM_TASK_IMAGE}=sha256:{id} quiet"
            )),
            Ok(Some(format!("sha256:{id}")))
        );
        assert_eq!(task_image("console=ttyS0"), Ok(None));
        for bad in [
            "sha256:abc",
            "md5:00",
            &format!("sha256:{}", "zz".repeat(32)),
        ] {
            assert!(
                task_image(&format!("{PARAM_TASK_IMAGE}={bad}")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_command_line_gives_the_verity_table() {
        let root = "ab".repeat(32);
        let line = format!(
            "console=ttyS0 quiet {PARAM_TOOLCHAINS}=python,rust {PARAM_VERITY}=100,{root},00ff"
        );
        let p = params(&line).expect("ok").expect("some");
        assert_eq!(p.toolchains, ["python", "rust"]);
        assert_eq!(
            table_params(&p, "254:0"),
            format!("1 254:0 254:0 4096 4096 100 100 sha256 {root} 00ff")
        );
        assert_eq!(params("console=ttyS0").expect("ok"), None);
    }

    #[test]
    fn malformed_verity_parameters_are_errors_naming_them() {
        let root = "ab".repeat(32);
        for line in [
            format!("{PARAM_VERITY}=100,{root},00"),
            format!("{PARAM_TOOLCHAINS}=rust {PARAM_VERITY}=0,{root},00"),
            format!("{PARAM_TOOLCHAINS}=rust {PARAM_VERITY}=100,{root}"),
            format!("{PARAM_TOOLCHAINS}=rust {PARAM_VERITY}=100,abc,00"),
            format!("{PARAM_TOOLCHAINS}=rust {PARAM_VERITY}=100,{root},0x"),
            format!("{PARAM_TOOLCHAINS}=Rust! {PARAM_VERITY}=100,{root},00"),
        ] {
            let e = params(&line).expect_err(&line);
            assert!(e.contains("fenced_run."), "{line}: {e}");
        }
    }
}
