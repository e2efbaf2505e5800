//! Where runs keep their files on the host, and the sweep of what dead runners left there. Every run
//! directory (and intake's work directory) lives under one parent, `$TMPDIR/fenced-run-runs`, that the runner
//! creates itself, owned by its own uid with mode 0700 and never a symbolic link; the sweep works only there,
//! never follows a link (`O_NOFOLLOW`, `UMOUNT_NOFOLLOW`), and unmounts only a mount whose type and source
//! are the ones a run gives its scratch (`tmpfs`, `fenced-run`).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The name of the parent of all run directories under the temporary directory.
pub const RUNS_DIR: &str = "fenced-run-runs";
/// The source name of a run's scratch tmpfs (how the sweep knows the mount is one of ours).
pub const SCRATCH_SOURCE: &str = "fenced-run";

/// Why the runs' parent directory cannot be used; each names the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunsDirError {
    /// The temporary directory, or the parent in it, could not be made or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The parent could not be opened as a directory without following a link.
    #[error("{}: {source} (it must be a directory, not a link)", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The parent is someone else's, or open to others.
    #[error(
        "{}: owned by uid {uid} with mode {mode:o}; the runner uses it only when it is its own (uid {euid}) \
         with mode 700",
        path.display()
    )]
    NotOwn {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
        /// This process's effective uid.
        euid: u32,
    },
}

/// Creates (or opens, when another runner made it) `tmp/fenced-run-runs` and checks it: a directory, not a
/// link, owned by this process's effective uid, mode exactly 0700. Returns its canonical path.
pub fn runs_parent(tmp: &Path) -> Result<PathBuf, RunsDirError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunsDirError::Io { path, source }
    };
    let base = fs::canonicalize(tmp).map_err(io(tmp))?;
    let parent = base.join(RUNS_DIR);
    match fs::DirBuilder::new().mode(0o700).create(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(&parent)(e)),
    }
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&parent)
        .map_err(|source| RunsDirError::NotADirectory {
            path: parent.clone(),
            source,
        })?;
    let meta = dir.metadata().map_err(io(&parent))?;
    let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
    let euid = nix::unistd::geteuid().as_raw();
    if uid != euid || mode != 0o700 {
        return Err(RunsDirError::NotOwn {
            path: parent,
            uid,
            mode,
            euid,
        });
    }
    Ok(parent)
}

/// Removes the parent when no run is left in it (another runner's run keeps it).
pub fn remove_parent_if_empty(parent: &Path) {
    let _ = fs::remove_dir(parent);
}

/// One line of `/proc/self/mountinfo`: mount point, file system type and source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted (unescaped).
    pub point: PathBuf,
    /// The file system type.
    pub fstype: String,
    /// The mount source.
    pub source: String,
}

/// Undoes the octal escapes (`\040` for a space) of a mountinfo field.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source = r.next()?;
            Some(MountEntry {
                point: PathBuf::from(unescape(point)),
                fstype: unescape(fstype),
                source: unescape(source),
            })
        })
        .collect()
}

fn mounts() -> Vec<MountEntry> {
    fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// Removes the run directories of dead runners (`fenced-run-<pid>-*` whose pid no longer exists) under
/// `parent` (from [`runs_parent`]): first its scratch, when `DIR/fs` itself is a mount point of type
/// `tmpfs` and source `fenced-run` (unmounted without following a link), then the directory, unless a
/// mount (anyone's) is still at or below it. Returns what was left and why.
pub fn sweep(parent: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let Ok(rd) = fs::read_dir(parent) else {
        return left;
    };
    for e in rd.filter_map(Result::ok) {
        if !e
            .file_name()
            .to_str()
            .is_some_and(super::cgroup::stale_name)
        {
            continue;
        }
        // The entry's own type (a link is not followed).
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = e.path();
        let scratch = dir.join("fs");
        let ours = mounts()
            .iter()
            .any(|m| m.point == scratch && m.fstype == "tmpfs" && m.source == SCRATCH_SOURCE);
        if ours {
            if let Err(err) = nix::mount::umount2(
                &scratch,
                nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW,
            ) {
                left.push(format!("{}: {}", scratch.display(), err.desc()));
                continue;
            }
        }
        if let Some(m) = mounts().iter().find(|m| m.point.starts_with(&dir)) {
            left.push(format!(
                "{}: {} ({}, {}) is mounted below it and not ours: left alone",
                dir.display(),
                m.point.display(),
                m.fstype,
                m.source
            ));
            continue;
        }
        // remove_dir_all never follows a link (it unlinks the link itself).
        if let Err(err) = fs::remove_dir_all(&dir) {
            left.push(format!("{}: {err}", dir.display()));
        }
    }
    left
}

/// The run's own directory: spec and report files, the sandbox root mount points, and `fs` (a size-limited
/// tmpfs when the runner is root) holding the repository copy, the scratch home and the temporary dirs.
pub(crate) struct RunDir {
    dir: Option<tempfile::TempDir>,
    pub(crate) fs: PathBuf,
    mounted: bool,
}

impl RunDir {
    pub(crate) fn create(disk_mib: u64, root: bool) -> Result<RunDir, String> {
        let parent = runs_parent(&std::env::temp_dir()).map_err(|e| e.to_string())?;
        sweep(&parent);
        let dir = tempfile::Builder::new()
            .prefix(&format!("fenced-run-{}-", std::process::id()))
            .tempdir_in(&parent)
            .map_err(|e| format!("cannot create the run directory: {e}"))?;
        let fs_dir = dir.path().join("fs");
        fs::create_dir(&fs_dir).map_err(|e| format!("{}: {e}", fs_dir.display()))?;
        let mut rd = RunDir {
            dir: Some(dir),
            fs: fs_dir,
            mounted: false,
        };
        if root {
            nix::mount::mount(
                Some(SCRATCH_SOURCE),
                &rd.fs,
                Some("tmpfs"),
                nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                Some(format!("size={}m,mode=0755", disk_mib.max(1)).as_str()),
            )
            .map_err(|e| {
                format!(
                    "tmpfs of {disk_mib} MiB on {}: {}",
                    rd.fs.display(),
                    e.desc()
                )
            })?;
            rd.mounted = true;
        }
        Ok(rd)
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .map(|d| d.path())
            .unwrap_or(Path::new("/nonexistent"))
    }

    /// Unmounts and removes everything; returns what could not be removed.
    pub(crate) fn teardown(mut self) -> Vec<String> {
        let mut left = Vec::new();
        if self.mounted {
            if let Err(e) = nix::mount::umount2(&self.fs, nix::mount::MntFlags::MNT_DETACH) {
                left.push(format!("mount {}: {}", self.fs.display(), e.desc()));
            }
            self.mounted = false;
        }
        if let Some(dir) = self.dir.take() {
            let p = dir.path().to_owned();
            if let Err(e) = dir.close() {
                left.push(format!("directory {}: {e}", p.display()));
            }
            if let Some(parent) = p.parent() {
                remove_parent_if_empty(parent);
            }
        }
        left
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.mounted {
            let _ = nix::mount::umount2(&self.fs, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read_with_their_escapes() {
        let t = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - tmpfs fenced-run rw,size=1024k\n\
                 37 35 98:0 / /proc rw - proc proc rw\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].point, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, "tmpfs");
        assert_eq!(m[0].source, "fenced-run");
        assert_eq!(m[1].point, PathBuf::from("/proc"));
    }

    #[test]
    fn the_parent_must_be_ours_and_private() {
        let d = tempfile::tempdir().expect("tmp");
        let p = runs_parent(d.path()).expect("create");
        assert!(p.ends_with(RUNS_DIR));
        // Opening it again is fine; a wider mode is refused.
        runs_parent(d.path()).expect("reopen");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(runs_parent(d.path())
            .expect_err("0755")
            .to_string()
            .contains("mode 755"));
        fs::remove_dir(&p).expect("rm");
        // A link in its place is refused, whatever it points to.
        let elsewhere = d.path().join("elsewhere");
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&elsewhere)
            .expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, &p).expect("link");
        assert!(runs_parent(d.path())
            .expect_err("link")
            .to_string()
            .contains("not a link"));
    }
}
