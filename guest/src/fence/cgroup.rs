//! Per-phase cgroups for the memory and pids limits, on cgroup v2 (unified) or v1 (separate `memory` and
//! `pids` hierarchies, as some hosts still mount). Each phase gets its own group nested under the runner's
//! own, reads back whether the OOM killer or the pids limit fired, and is removed afterwards.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a cgroup could not be created or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    /// No usable cgroup hierarchy with the needed controller was found.
    #[error("no cgroup hierarchy with the {0} controller is mounted")]
    NoController(&'static str),
    /// A file or directory of the cgroup file system could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The group still held processes when it should have been empty.
    #[error("cgroup {0} is not empty")]
    NotEmpty(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Which cgroup layout a group lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The unified hierarchy (`/sys/fs/cgroup/cgroup.controllers` exists).
    V2,
    /// Separate v1 hierarchies for `memory` and `pids`.
    V1,
}

/// What a phase's cgroup saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Events {
    /// Processes killed by the OOM killer of this group.
    pub oom_kills: u64,
    /// Times a fork failed because of the pids limit.
    pub pids_max: u64,
    /// Times the memory limit was hit (v1 `memory.failcnt`, v2 `max` events).
    pub memory_max: u64,
}

/// One phase's cgroup (one directory per hierarchy in v1, one in v2).
#[derive(Debug)]
pub struct PhaseCgroup {
    layout: Layout,
    memory: PathBuf,
    pids: PathBuf,
    removed: bool,
}

/// The root of the cgroup file system.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Detects which layout the machine mounts.
pub fn detect() -> Layout {
    if Path::new(CGROUP_ROOT).join("cgroup.controllers").exists() {
        Layout::V2
    } else {
        Layout::V1
    }
}

/// The path of the calling process's own group in the hierarchy whose `/proc/self/cgroup` entry matches.
fn own_path(matches: impl Fn(&str, &str) -> bool) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        matches(id, ctrls).then(|| path.trim_start_matches('/').to_owned())
    })
}

/// Whether `name` is `fenced-run-<pid>-...` for a pid that no longer exists in our PID namespace (a runner
/// that was killed before it could clean up).
pub fn stale_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("fenced-run-") else {
        return false;
    };
    let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
    !pid.is_empty() && rest[pid.len()..].starts_with('-') && !Path::new("/proc").join(&pid).exists()
}

/// Removes the empty groups of dead runners under `parent` (a non-empty group is left alone).
fn sweep(parent: &Path) {
    let Ok(rd) = fs::read_dir(parent) else { return };
    for e in rd.filter_map(Result::ok) {
        if e.file_name().to_str().is_some_and(stale_name) {
            let _ = fs::remove_dir(e.path());
        }
    }
}

impl PhaseCgroup {
    /// Creates the group `name` under the runner's own group and sets `memory_bytes` and `pids`.
    pub fn create(name: &str, memory_bytes: u64, pids: u64) -> Result<PhaseCgroup, CgroupError> {
        match detect() {
            Layout::V2 => {
                let own =
                    own_path(|id, _| id == "0").ok_or(CgroupError::NoController("unified"))?;
                let parent = Path::new(CGROUP_ROOT).join(own);
                let ctrl =
                    fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
                if !(ctrl.contains("memory") && ctrl.contains("pids")) {
                    // Best effort: enabling fails when the parent holds processes itself.
                    let _ = fs::write(parent.join("cgroup.subtree_control"), "+memory +pids");
                }
                sweep(&parent);
                let dir = parent.join(name);
                fs::create_dir(&dir).map_err(io(&dir))?;
                let mut g = PhaseCgroup {
                    layout: Layout::V2,
                    memory: dir.clone(),
                    pids: dir,
                    removed: false,
                };
                g.write("memory.max", &memory_bytes.to_string())?;
                let _ = fs::write(g.memory.join("memory.swap.max"), "0");
                g.write("pids.max", &pids.to_string())?;
                g.removed = false;
                Ok(g)
            }
            Layout::V1 => {
                let mem_own = own_path(|_, c| c.split(',').any(|x| x == "memory"))
                    .ok_or(CgroupError::NoController("memory"))?;
                let pids_own = own_path(|_, c| c.split(',').any(|x| x == "pids"))
                    .ok_or(CgroupError::NoController("pids"))?;
                let memory = Path::new(CGROUP_ROOT)
                    .join("memory")
                    .join(mem_own)
                    .join(name);
                let pids_dir = Path::new(CGROUP_ROOT)
                    .join("pids")
                    .join(pids_own)
                    .join(name);
                for dir in [&memory, &pids_dir] {
                    if let Some(parent) = dir.parent() {
                        sweep(parent);
                    }
                }
                fs::create_dir(&memory).map_err(io(&memory))?;
                if let Err(e) = fs::create_dir(&pids_dir) {
                    let _ = fs::remove_dir(&memory);
                    return Err(CgroupError::Io {
                        path: pids_dir,
                        source: e,
                    });
                }
                let g = PhaseCgroup {
                    layout: Layout::V1,
                    memory,
                    pids: pids_dir,
                    removed: false,
                };
                g.write_at(
                    &g.memory,
                    "memory.limit_in_bytes",
                    &memory_bytes.to_string(),
                )?;
                // Without swap accounting this file does not exist; the limit above still holds.
                let _ = fs::write(
                    g.memory.join("memory.memsw.limit_in_bytes"),
                    memory_bytes.to_string(),
                );
                g.write_at(&g.pids, "pids.max", &pids.to_string())?;
                Ok(g)
            }
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<(), CgroupError> {
        self.write_at(&self.memory, file, value)
    }

    fn write_at(&self, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
        let p = dir.join(file);
        fs::write(&p, value).map_err(io(&p))
    }

    /// The layout this group lives in.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The `cgroup.procs` files a process must be written into to join this group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        match self.layout {
            Layout::V2 => vec![self.memory.join("cgroup.procs")],
            Layout::V1 => vec![
                self.memory.join("cgroup.procs"),
                self.pids.join("cgroup.procs"),
            ],
        }
    }

    /// A one-line description for the verdict's sandbox lines.
    pub fn describe(&self) -> String {
        match self.layout {
            Layout::V2 => format!("cgroup v2 {}", self.memory.display()),
            Layout::V1 => format!(
                "cgroup v1 {} + {}",
                self.memory.display(),
                self.pids.display()
            ),
        }
    }

    /// The counters that tell whether the limits fired.
    pub fn events(&self) -> Events {
        let kv = |p: PathBuf, key: &str| -> u64 {
            fs::read_to_string(p)
                .ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        let mut it = l.split_whitespace();
                        (it.next() == Some(key))
                            .then(|| it.next().and_then(|v| v.parse().ok()))
                            .flatten()
                    })
                })
                .unwrap_or(0)
        };
        match self.layout {
            Layout::V2 => Events {
                oom_kills: kv(self.memory.join("memory.events"), "oom_kill"),
                pids_max: kv(self.pids.join("pids.events"), "max"),
                memory_max: kv(self.memory.join("memory.events"), "max"),
            },
            Layout::V1 => Events {
                oom_kills: kv(self.memory.join("memory.oom_control"), "oom_kill"),
                pids_max: kv(self.pids.join("pids.events"), "max"),
                memory_max: fs::read_to_string(self.memory.join("memory.failcnt"))
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(0),
            },
        }
    }

    /// Processes still in the group (in any of its hierarchies).
    pub fn processes(&self) -> u64 {
        self.procs_files()
            .iter()
            .map(|p| {
                fs::read_to_string(p)
                    .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0) as u64
    }

    /// Removes the group; waits up to a second for exiting tasks to leave it, then fails naming it.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        let dirs: Vec<PathBuf> = match self.layout {
            Layout::V2 => vec![self.memory.clone()],
            Layout::V1 => vec![self.memory.clone(), self.pids.clone()],
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut result = Ok(());
        for d in dirs {
            loop {
                match fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) => {
                        if Instant::now() >= deadline {
                            result = Err(CgroupError::Io {
                                path: d.clone(),
                                source: e,
                            });
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
        }
        result
    }
}

impl Drop for PhaseCgroup {
    fn drop(&mut self) {
        if !self.removed {
            let _ = fs::remove_dir(&self.memory);
            let _ = fs::remove_dir(&self.pids);
        }
    }
}
