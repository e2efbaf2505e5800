//! `[test] protect`: the paths the patch and the install phase may not change. Before the patch the fence copies
//! every protected path of the repository as received into a store the sandbox never sees; after the patch and
//! again after the install phase it puts each one back byte for byte and lists what it undid.
//!
//! Nothing runs in the repository while this code does (the patch is applied by the runner; the install
//! phase's namespace is dead by the cut), and every walk is by `lstat` from the repository's top, never through a
//! symbolic link: a link swapped in for a protected directory is removed, not followed.

use globset::GlobSet;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The most entries a walk of the repository visits before it gives up.
pub const MAX_WALK_ENTRIES: u64 = 5_000_000;

/// Why protecting failed: the run cannot say which tests it ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtectError {
    /// A filesystem call failed.
    #[error("protected paths: {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The globs did not compile (intake checks them first).
    #[error("protected paths: {0}")]
    Globs(#[from] job_policy::job::GlobError),
    /// The repository holds something that cannot be protected.
    #[error("protected paths: {0}")]
    Unsupported(String),
    /// After restoring, the repository still differs from what was received.
    #[error("protected paths: still changed after restoring: {0}")]
    NotRestored(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ProtectError + '_ {
    move |source| ProtectError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What happened to one protected path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    /// The file's bytes or the link's target changed.
    Modified,
    /// A path the globs match appeared.
    Added,
    /// The path is gone.
    Deleted,
    /// A file became a link or a directory (or a directory above it became a file or a link), or the reverse.
    TypeChanged,
    /// Only the executable bit changed.
    ModeChanged,
}

impl ChangeKind {
    /// The name recorded in the verdict.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Modified => "modified",
            ChangeKind::Added => "added",
            ChangeKind::Deleted => "deleted",
            ChangeKind::TypeChanged => "type_changed",
            ChangeKind::ModeChanged => "mode_changed",
        }
    }
}

/// One change to a protected path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    /// The path relative to the repository.
    pub path: PathBuf,
    /// What happened.
    pub kind: ChangeKind,
}

impl Change {
    /// The path as the verdict records it (`/`-separated; bytes that are not UTF-8 replaced).
    pub fn path_text(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File { exec: bool, len: u64 },
    Link(PathBuf),
    Dir,
    Other,
}

/// The most read-only binds the test phase may get: a job protecting more single files than this protects
/// their directories instead (`tests/**` is one bind, however many files it holds).
pub const MAX_BINDS: usize = 4096;

/// Where the test phase's read-only binds go ([`Protected::bind_plan`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindPlan {
    /// Paths relative to the repository, each bound read-only onto itself: a directory a glob covers whole,
    /// or a file a glob matches on its own. The empty path is the repository itself (a glob such as `**`).
    pub binds: Vec<PathBuf>,
    /// Protected symbolic links, which no bind can cover (a mount follows a link): only the check after the
    /// phase ([`Protected::after_test`]) guards them.
    pub links: Vec<PathBuf>,
}

/// What the protected paths were when the test phase ended ([`Protected::after_test`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterTest {
    /// The git tree (hex) of the protected paths as they were at the end of the phase.
    pub tree: String,
    /// Every difference from the protected paths as received (which were in place when the phase started).
    pub changes: Vec<Change>,
}

/// The protected paths of a repository as received, kept in a store outside the sandbox.
#[derive(Debug)]
pub struct Protected {
    matcher: GlobSet,
    /// Directories every path below which the globs match (`tests` for `tests/**`, `tests/`, `tests/**/*`).
    whole: GlobSet,
    /// Whether a glob covers the whole repository (`**`, `*`).
    whole_repo: bool,
    store: PathBuf,
    /// Every protected file and link as received, by path relative to the repository.
    kept: BTreeMap<PathBuf, Entry>,
}

impl Protected {
    /// Copies every path of `repo` that `globs` match (files and symbolic links; directories by what they hold)
    /// into `store`, a directory this creates and the sandbox never sees.
    pub fn snapshot(
        repo: &Path,
        globs: &[String],
        store: &Path,
    ) -> Result<Protected, ProtectError> {
        let matcher = job_policy::job::protect_matcher(globs)?;
        let (whole, whole_repo) = whole_matcher(globs)?;
        Protected::snapshot_with(repo, matcher, whole, whole_repo, store)
    }

    fn snapshot_with(
        repo: &Path,
        matcher: GlobSet,
        whole: GlobSet,
        whole_repo: bool,
        store: &Path,
    ) -> Result<Protected, ProtectError> {
        fs::create_dir(store).map_err(io_at(store))?;
        fs::set_permissions(store, fs::Permissions::from_mode(0o700)).map_err(io_at(store))?;
        let mut kept = BTreeMap::new();
        for (rel, entry) in walk(repo)? {
            if !matcher.is_match(&rel) {
                continue;
            }
            let from = repo.join(&rel);
            let to = store.join(&rel);
            match &entry {
                Entry::Dir => continue,
                Entry::Other => {
                    return Err(ProtectError::Unsupported(format!(
                        "`{}` is a socket, FIFO or device",
                        rel.display()
                    )))
                }
                Entry::File { exec, .. } => {
                    make_dirs(store, rel.parent().unwrap_or(Path::new("")), None)?;
                    copy_file(&from, &to, *exec)?;
                }
                Entry::Link(target) => {
                    make_dirs(store, rel.parent().unwrap_or(Path::new("")), None)?;
                    std::os::unix::fs::symlink(target, &to).map_err(io_at(&to))?;
                }
            }
            kept.insert(rel, entry);
        }
        Ok(Protected {
            matcher,
            whole,
            whole_repo,
            store: store.to_owned(),
            kept,
        })
    }

    /// Where the test phase's read-only binds go in `repo` as it is now (after [`Protected::restore`]): each
    /// directory (a real one, reached through real directories) that a glob covers whole, bound once with
    /// everything below it, so that a new file under it fails too; every other protected regular file on its
    /// own. Protected links are listed apart: no bind can cover them.
    pub fn bind_plan(&self, repo: &Path) -> Result<BindPlan, ProtectError> {
        if self.whole_repo {
            return Ok(BindPlan {
                binds: vec![PathBuf::new()],
                links: Vec::new(),
            });
        }
        let mut plan = BindPlan::default();
        let mut bound_dirs = std::collections::BTreeSet::new();
        for (rel, entry) in walk(repo)? {
            if rel.ancestors().skip(1).any(|a| bound_dirs.contains(a)) {
                continue;
            }
            match entry {
                Entry::Dir if self.whole.is_match(&rel) => {
                    bound_dirs.insert(rel.clone());
                    plan.binds.push(rel);
                }
                Entry::File { .. } if self.matcher.is_match(&rel) => plan.binds.push(rel),
                Entry::Link(_) if self.matcher.is_match(&rel) => plan.links.push(rel),
                _ => {}
            }
            if plan.binds.len() > MAX_BINDS {
                return Err(ProtectError::Unsupported(format!(
                    "more than {MAX_BINDS} protected paths would each need a read-only bind; protect their \
                     directories instead (`dir/**` is one bind)"
                )));
            }
        }
        Ok(plan)
    }

    /// Gives every protected regular file of `repo` that has other hard links a fresh inode of its own (a copy
    /// of the file as received), so that no writable name elsewhere in the repository reaches the bytes a
    /// read-only bind shows. `owner` (uid, gid) owns the copies. Returns how many it replaced.
    pub fn unshare_links(
        &self,
        repo: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<usize, ProtectError> {
        let mut n = 0;
        for (rel, entry) in &self.kept {
            let Entry::File { exec, .. } = entry else {
                continue;
            };
            let path = repo.join(rel);
            let meta = fs::symlink_metadata(&path).map_err(io_at(&path))?;
            if !meta.file_type().is_file() || meta.nlink() <= 1 {
                continue;
            }
            fs::remove_file(&path).map_err(io_at(&path))?;
            copy_file(&self.store.join(rel), &path, *exec)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).map_err(io_at(&path))?;
            }
            n += 1;
        }
        Ok(n)
    }

    /// The protected paths of `repo` when the test phase has ended: their git tree (what the verdict records
    /// as `inputs.test_tree`) and every difference from the paths as received. `scratch` is a directory this
    /// creates (and leaves for the caller to remove) to hold a copy of what changed, to hash it.
    pub fn after_test(&self, repo: &Path, scratch: &Path) -> Result<AfterTest, ProtectError> {
        let changes = self.changes(repo)?;
        let tree = if changes.is_empty() {
            // Same bytes, modes and link targets as received: the same tree.
            self.tree()?
        } else {
            Protected::snapshot_with(
                repo,
                self.matcher.clone(),
                self.whole.clone(),
                self.whole_repo,
                scratch,
            )?
            .tree()?
        };
        Ok(AfterTest { tree, changes })
    }

    /// How many files and links are protected.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether the globs matched nothing in the repository as received.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Every difference between `repo` now and the protected paths as received, sorted by path.
    pub fn changes(&self, repo: &Path) -> Result<Vec<Change>, ProtectError> {
        let now = walk(repo)?;
        let mut out = Vec::new();
        for (rel, entry) in &now {
            if matches!(entry, Entry::Dir) || !self.matcher.is_match(rel) {
                continue;
            }
            let kind = match self.kept.get(rel) {
                None => Some(ChangeKind::Added),
                Some(kept) => self.compare(kept, entry, repo, rel)?,
            };
            if let Some(kind) = kind {
                out.push(Change {
                    path: rel.clone(),
                    kind,
                });
            }
        }
        for rel in self.kept.keys() {
            match now.get(rel) {
                Some(Entry::Dir) => out.push(Change {
                    path: rel.clone(),
                    kind: ChangeKind::TypeChanged,
                }),
                Some(_) => {}
                None => {
                    let blocked = rel
                        .ancestors()
                        .skip(1)
                        .any(|a| matches!(now.get(a), Some(e) if *e != Entry::Dir));
                    out.push(Change {
                        path: rel.clone(),
                        kind: if blocked {
                            ChangeKind::TypeChanged
                        } else {
                            ChangeKind::Deleted
                        },
                    });
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn compare(
        &self,
        kept: &Entry,
        now: &Entry,
        repo: &Path,
        rel: &Path,
    ) -> Result<Option<ChangeKind>, ProtectError> {
        Ok(match (kept, now) {
            (Entry::Link(a), Entry::Link(b)) => (a != b).then_some(ChangeKind::Modified),
            (Entry::File { exec: e1, len: l1 }, Entry::File { exec: e2, len: l2 }) => {
                if l1 != l2 || !same_bytes(&self.store.join(rel), &repo.join(rel))? {
                    Some(ChangeKind::Modified)
                } else if e1 != e2 {
                    Some(ChangeKind::ModeChanged)
                } else {
                    None
                }
            }
            _ => Some(ChangeKind::TypeChanged),
        })
    }

    /// Undoes every change to a protected path in `repo` and returns what it undid; `owner` (uid, gid) owns
    /// what it writes. Checks afterwards that nothing protected differs any more.
    pub fn restore(
        &self,
        repo: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<Vec<Change>, ProtectError> {
        let changes = self.changes(repo)?;
        for c in &changes {
            let path = repo.join(&c.path);
            match self.kept.get(&c.path) {
                None => {
                    // Added: the walk reached it through real directories, and nothing runs meanwhile.
                    remove_any(&path)?;
                }
                Some(entry) => {
                    make_dirs(repo, c.path.parent().unwrap_or(Path::new("")), owner)?;
                    remove_any(&path)?;
                    match entry {
                        Entry::File { exec, .. } => {
                            copy_file(&self.store.join(&c.path), &path, *exec)?
                        }
                        Entry::Link(target) => {
                            std::os::unix::fs::symlink(target, &path).map_err(io_at(&path))?
                        }
                        Entry::Dir | Entry::Other => {}
                    }
                    if let Some((uid, gid)) = owner {
                        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
                            .map_err(io_at(&path))?;
                    }
                }
            }
        }
        let left = self.changes(repo)?;
        if let Some(c) = left.first() {
            return Err(ProtectError::NotRestored(format!(
                "`{}` ({}), {} path(s) in all",
                c.path.display(),
                c.kind.name(),
                left.len()
            )));
        }
        Ok(changes)
    }

    /// The git tree object id (hex) of the protected paths as received: what the test phase runs after
    /// [`Protected::restore`].
    pub fn tree(&self) -> Result<String, ProtectError> {
        super::gitdir::tree_hash(&self.store)
            .map(|id| id.to_string())
            .map_err(|e| ProtectError::Unsupported(format!("tree of the protected paths: {e}")))
    }
}

/// The directories below which the globs match every path: for each glob (trailing `/` dropped) the glob
/// itself (the matcher adds `GLOB/**`) and the glob without its trailing `*` and `**` components (`tests` for
/// `tests/**`, `tests/**/*` or `tests/*`). The flag says a glob covers the whole repository.
fn whole_matcher(globs: &[String]) -> Result<(GlobSet, bool), ProtectError> {
    let mut b = globset::GlobSetBuilder::new();
    let mut whole_repo = false;
    for g in globs {
        let trimmed = g.trim_end_matches('/');
        let mut prefix = trimmed;
        while let Some(p) = prefix
            .strip_suffix("/**")
            .or_else(|| prefix.strip_suffix("/*"))
        {
            prefix = p;
        }
        if matches!(prefix, "*" | "**") {
            whole_repo = true;
            continue;
        }
        for pattern in [trimmed, prefix] {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| ProtectError::Unsupported(format!("`{g}`: {e}")))?;
            b.add(glob);
        }
    }
    let set = b
        .build()
        .map_err(|e| ProtectError::Unsupported(format!("the protect globs: {e}")))?;
    Ok((set, whole_repo))
}

/// Every entry below `repo` by relative path, by `lstat`, never following a link, the top-level `.git` left
/// out (the fence never hands it to the tests as the repository's own).
fn walk(repo: &Path) -> Result<BTreeMap<PathBuf, Entry>, ProtectError> {
    let mut out = BTreeMap::new();
    let mut it = walkdir::WalkDir::new(repo)
        .follow_links(false)
        .min_depth(1)
        .into_iter();
    let mut visited = 0u64;
    while let Some(entry) = it.next() {
        let entry = entry
            .map_err(|e| ProtectError::Unsupported(format!("walking {}: {e}", repo.display())))?;
        visited += 1;
        if visited > MAX_WALK_ENTRIES {
            return Err(ProtectError::Unsupported(format!(
                "the repository holds more than {MAX_WALK_ENTRIES} entries"
            )));
        }
        let rel = entry
            .path()
            .strip_prefix(repo)
            .map_err(|_| {
                ProtectError::Unsupported(format!("{} left the repository", entry.path().display()))
            })?
            .to_owned();
        if entry.depth() == 1 && rel == Path::new(".git") {
            if entry.file_type().is_dir() {
                it.skip_current_dir();
            }
            continue;
        }
        let meta = fs::symlink_metadata(entry.path()).map_err(io_at(entry.path()))?;
        let ft = meta.file_type();
        let e = if ft.is_symlink() {
            Entry::Link(fs::read_link(entry.path()).map_err(io_at(entry.path()))?)
        } else if ft.is_dir() {
            Entry::Dir
        } else if ft.is_file() {
            Entry::File {
                exec: meta.mode() & 0o100 != 0,
                len: meta.len(),
            }
        } else {
            Entry::Other
        };
        out.insert(rel, e);
    }
    Ok(out)
}

/// Makes every directory of `rel` below `top` a real directory, replacing a file or link found on the way
/// (never following one).
fn make_dirs(top: &Path, rel: &Path, owner: Option<(u32, u32)>) -> Result<(), ProtectError> {
    let mut at = top.to_owned();
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(ProtectError::Unsupported(format!(
                "`{}` is not a plain relative path",
                rel.display()
            )));
        };
        at.push(name);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => continue,
            Ok(_) => fs::remove_file(&at).map_err(io_at(&at))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ProtectError::Io {
                    path: at,
                    source: e,
                })
            }
        }
        fs::create_dir(&at).map_err(io_at(&at))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::lchown(&at, Some(uid), Some(gid)).map_err(io_at(&at))?;
        }
    }
    Ok(())
}

/// Removes whatever is at `path` (a directory with everything below it, links not followed); nothing there is
/// fine.
fn remove_any(path: &Path) -> Result<(), ProtectError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => fs::remove_dir_all(path).map_err(io_at(path)),
        Ok(_) => fs::remove_file(path).map_err(io_at(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ProtectError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// Copies the regular file `from` (opened without following a link) to the new file `to`.
fn copy_file(from: &Path, to: &Path, exec: bool) -> Result<(), ProtectError> {
    let mut src = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(from)
        .map_err(io_at(from))?;
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if exec { 0o755 } else { 0o644 })
        .open(to)
        .map_err(io_at(to))?;
    io::copy(&mut src, &mut dst).map_err(io_at(to))?;
    dst.flush().map_err(io_at(to))?;
    // The mode is the one asked for whatever the umask.
    fs::set_permissions(
        to,
        fs::Permissions::from_mode(if exec { 0o755 } else { 0o644 }),
    )
    .map_err(io_at(to))
}

/// Whether two regular files hold the same bytes (read in a stream, links not followed).
fn same_bytes(a: &Path, b: &Path) -> Result<bool, ProtectError> {
    let open = |p: &Path| {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
            .map_err(io_at(p))
    };
    let (mut fa, mut fb) = (open(a)?, open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let na = read_full(&mut fa, &mut ba).map_err(io_at(a))?;
        let nb = read_full(&mut fb, &mut bb).map_err(io_at(b))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, s).expect("write");
    }

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().expect("tempdir");
        let r = t.path().join("repo");
        write(&r.join("tests/a.sh"), "echo a\n");
        write(&r.join("tests/deep/b.sh"), "echo b\n");
        write(&r.join("src/lib.sh"), "lib\n");
        write(&r.join("Cargo.toml"), "[package]\n");
        (t, r)
    }

    fn kinds(c: &[Change]) -> Vec<(String, &'static str)> {
        c.iter().map(|c| (c.path_text(), c.kind.name())).collect()
    }

    #[test]
    fn every_kind_of_change_is_found_and_undone() {
        let (t, r) = repo();
        let p = Protected::snapshot(
            &r,
            &["tests/**".into(), "Cargo.toml".into()],
            &t.path().join("store"),
        )
        .expect("snapshot");
        assert_eq!(p.len(), 3);
        let before = p.tree().expect("tree");
        write(&r.join("tests/a.sh"), "exit 0\n");
        write(&r.join("tests/new.sh"), "new\n");
        fs::remove_file(r.join("Cargo.toml")).expect("rm");
        fs::remove_dir_all(r.join("tests/deep")).expect("rm");
        std::os::unix::fs::symlink("/etc", r.join("tests/deep")).expect("link");
        write(&r.join("src/lib.sh"), "changed, not protected\n");
        let undone = p.restore(&r, None).expect("restore");
        assert_eq!(
            kinds(&undone),
            vec![
                ("Cargo.toml".into(), "deleted"),
                ("tests/a.sh".into(), "modified"),
                ("tests/deep".into(), "added"),
                ("tests/deep/b.sh".into(), "type_changed"),
                ("tests/new.sh".into(), "added"),
            ]
        );
        assert_eq!(
            fs::read_to_string(r.join("tests/a.sh")).expect("read"),
            "echo a\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("tests/deep/b.sh")).expect("read"),
            "echo b\n"
        );
        assert!(!r.join("tests/new.sh").exists());
        assert_eq!(
            fs::read_to_string(r.join("src/lib.sh")).expect("read"),
            "changed, not protected\n"
        );
        assert!(p.changes(&r).expect("changes").is_empty());
        assert_eq!(p.tree().expect("tree"), before);
    }

    #[test]
    fn a_directory_replaced_by_a_file_and_a_mode_change_are_undone() {
        let (t, r) = repo();
        let p =
            Protected::snapshot(&r, &["tests".into()], &t.path().join("store")).expect("snapshot");
        fs::remove_dir_all(r.join("tests")).expect("rm");
        write(&r.join("tests"), "now a file\n");
        let undone = p.restore(&r, None).expect("restore");
        assert_eq!(
            kinds(&undone),
            vec![
                ("tests".into(), "added"),
                ("tests/a.sh".into(), "type_changed"),
                ("tests/deep/b.sh".into(), "type_changed"),
            ]
        );
        fs::set_permissions(r.join("tests/a.sh"), fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let undone = p.restore(&r, None).expect("restore");
        assert_eq!(kinds(&undone), vec![("tests/a.sh".into(), "mode_changed")]);
        let mode = fs::metadata(r.join("tests/a.sh")).expect("meta").mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn a_link_out_of_the_repository_is_never_written_through() {
        let (t, r) = repo();
        let outside = t.path().join("outside");
        fs::create_dir(&outside).expect("mkdir");
        let p = Protected::snapshot(&r, &["tests/**".into()], &t.path().join("store"))
            .expect("snapshot");
        fs::remove_dir_all(r.join("tests")).expect("rm");
        std::os::unix::fs::symlink(&outside, r.join("tests")).expect("link");
        p.restore(&r, None).expect("restore");
        assert!(
            fs::read_dir(&outside).expect("read").next().is_none(),
            "nothing written outside"
        );
        assert!(fs::symlink_metadata(r.join("tests"))
            .expect("meta")
            .is_dir());
        assert_eq!(
            fs::read_to_string(r.join("tests/a.sh")).expect("read"),
            "echo a\n"
        );
    }

    #[test]
    fn the_tree_is_the_git_tree_of_the_protected_subset() {
        // The same protected files in a repository holding nothing else give the same tree, whatever else the
        // full repository holds.
        let (t, r) = repo();
        let p = Protected::snapshot(&r, &["tests/**".into()], &t.path().join("store"))
            .expect("snapshot");
        let only = t.path().join("only");
        write(&only.join("tests/a.sh"), "echo a\n");
        write(&only.join("tests/deep/b.sh"), "echo b\n");
        let direct = super::super::gitdir::tree_hash(&only)
            .expect("tree")
            .to_string();
        assert_eq!(p.tree().expect("tree"), direct);
        write(&only.join("tests/deep/b.sh"), "echo B\n");
        let other = super::super::gitdir::tree_hash(&only)
            .expect("tree")
            .to_string();
        assert_ne!(p.tree().expect("tree"), other);
    }

    fn plan(r: &Path, t: &Path, globs: &[&str]) -> BindPlan {
        let globs: Vec<String> = globs.iter().map(|g| (*g).to_owned()).collect();
        let store = t.join(format!("store-{}", rand::random::<u32>()));
        Protected::snapshot(r, &globs, &store)
            .expect("snapshot")
            .bind_plan(r)
            .expect("plan")
    }

    #[test]
    fn directories_a_glob_covers_whole_are_bound_whole_and_files_one_by_one() {
        let (t, r) = repo();
        write(&r.join("src/a_test.py"), "x\n");
        write(&r.join("src/deep/b_test.py"), "x\n");
        fs::create_dir_all(r.join("tests/empty")).expect("mkdir");
        std::os::unix::fs::symlink("a_test.py", r.join("src/link_test.py")).expect("link");
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        for g in ["tests/**", "tests/", "tests", "tests/**/*", "tests/*"] {
            assert_eq!(plan(&r, t.path(), &[g]).binds, p(&["tests"]), "{g}");
        }
        let got = plan(&r, t.path(), &["Cargo.toml", "**/*_test.py", "tests/**"]);
        assert_eq!(
            got.binds,
            p(&["Cargo.toml", "src/a_test.py", "src/deep/b_test.py", "tests"])
        );
        assert_eq!(got.links, p(&["src/link_test.py"]));
        // Only some files of a directory: bound one by one.
        assert_eq!(
            plan(&r, t.path(), &["tests/*.sh"]).binds,
            p(&["tests/a.sh"])
        );
        assert_eq!(plan(&r, t.path(), &["**"]).binds, vec![PathBuf::new()]);
    }

    #[test]
    fn a_hard_link_to_a_protected_file_is_broken_before_the_phase() {
        let (t, r) = repo();
        let p = Protected::snapshot(&r, &["tests/**".into()], &t.path().join("store"))
            .expect("snapshot");
        fs::hard_link(r.join("tests/a.sh"), r.join("src/alias.sh")).expect("link");
        assert_eq!(p.unshare_links(&r, None).expect("unshare"), 1);
        fs::write(r.join("src/alias.sh"), "exit 0\n").expect("write");
        assert_eq!(
            fs::read_to_string(r.join("tests/a.sh")).expect("read"),
            "echo a\n"
        );
        assert_eq!(p.unshare_links(&r, None).expect("unshare"), 0);
        assert!(p.changes(&r).expect("changes").is_empty());
    }

    #[test]
    fn more_single_files_than_binds_allowed_is_an_error_naming_the_remedy() {
        let (t, r) = repo();
        for i in 0..=MAX_BINDS {
            write(&r.join(format!("many/{i}_test.py")), "x\n");
        }
        let p = Protected::snapshot(&r, &["**/*_test.py".into()], &t.path().join("store"))
            .expect("snapshot");
        let e = p.bind_plan(&r).expect_err("too many binds");
        assert!(e.to_string().contains("dir/**"), "{e}");
        // The same files protected as their directory: one bind.
        let p = Protected::snapshot(&r, &["many/**".into()], &t.path().join("store2"))
            .expect("snapshot");
        assert_eq!(
            p.bind_plan(&r).expect("plan").binds,
            vec![PathBuf::from("many")]
        );
    }
}
