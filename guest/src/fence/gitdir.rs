//! A repository's `.git`, read as data by the trusted runner: HEAD, refs, the HEAD commit and its trees come
//! from the object store through `gix-odb` (no git process, no configuration, no hooks, no attributes, no
//! promisor fetch), every object read is hashed again against its id, and what would make history or objects
//! come from elsewhere (a gitfile, alternates, grafts, replace refs, a symbolic link) is refused; so is a
//! shallow clone's `.git/shallow`, except the one a shallow fetch of exactly the pinned commit writes
//! ([`open_pinned`]: history cut at that commit, whose own object and tree are read and checked in full).
//! Also the git tree hash of a directory and the check that a working tree is exactly a commit's tree.

use gix_hash::{Kind as HashKind, ObjectId};
use gix_object::tree::EntryKind;
use gix_object::{Find, Kind};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Deepest tree the runner walks (git's own `core.maxTreeDepth` is 4096; a test repository needs far less).
pub const MAX_TREE_DEPTH: usize = 256;
/// Most tree entries one walk (check or checkout) visits: bounds a tree that names one subtree many times.
pub const MAX_ENTRIES: u64 = 2_000_000;
/// Most bytes one checkout writes.
pub const MAX_CHECKOUT_BYTES: u64 = 8 << 30;
/// Largest single allocation the object store may make for a packed object.
const ALLOC_LIMIT: usize = 2 << 30;
/// Largest ref file, HEAD or `packed-refs` read.
const MAX_REF_FILE: u64 = 64 << 20;

/// Why a repository's git data was not accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// The `.git` holds something the runner refuses to follow (gitfile, alternates, grafts, ...).
    #[error("{0}")]
    Refused(String),
    /// HEAD, a ref or an object could not be read.
    #[error("{0}")]
    Unreadable(String),
    /// The working tree is not the commit's tree.
    #[error("`{path}`: {what}")]
    Differs {
        /// The first differing path, relative to the repository.
        path: String,
        /// How it differs.
        what: String,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GitError + '_ {
    move |source| GitError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What lies under a `.git` that makes objects, history or refs come from outside the copy, and why it is
/// refused.
const REFUSED_PATHS: &[(&str, &str)] = &[
    (
        "commondir",
        "a linked worktree's `commondir` (the repository lives elsewhere)",
    ),
    (
        "objects/info/alternates",
        "alternates (objects borrowed from another repository)",
    ),
    (
        "objects/info/http-alternates",
        "HTTP alternates (objects fetched from elsewhere)",
    ),
    (
        "shallow",
        "a shallow clone's grafts (`.git/shallow` rewrites history)",
    ),
    (
        "info/grafts",
        "grafts (`.git/info/grafts` rewrites history)",
    ),
];

/// A repository's git directory opened read-only, after the checks in [`open`].
pub struct GitDir {
    dir: PathBuf,
    odb: gix_odb::Handle,
}

impl std::fmt::Debug for GitDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitDir")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Opens `work_tree/.git` when there is one (`Ok(None)` when there is none). Refuses a `.git` that is a file
/// (gitfile) or symbolic link, a symbolic link anywhere inside it, `commondir`, alternates, shallow or graft
/// files, and replace refs (loose or packed).
pub fn open(work_tree: &Path) -> Result<Option<GitDir>, GitError> {
    open_pinned(work_tree, None)
}

/// [`open`], except that with a `pin` (the job's full commit id) a `.git/shallow` is accepted when it names
/// exactly that one commit: what `git fetch --depth 1 URL <pin>` writes for a commit with parents. Its
/// history is then absent beyond the pin, which changes nothing the runner reads (the pinned commit object
/// and its trees, each re-hashed); a shallow file naming any other commit, or more than one, is refused.
pub fn open_pinned(work_tree: &Path, pin: Option<&ObjectId>) -> Result<Option<GitDir>, GitError> {
    let dir = work_tree.join(".git");
    let meta = match fs::symlink_metadata(&dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&dir)(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(GitError::Refused(
            "`.git` is a symbolic link; the runner never follows it".into(),
        ));
    }
    if meta.is_file() {
        return Err(GitError::Refused(
            "`.git` is a file (a gitfile naming a git directory elsewhere); the runner never follows it".into(),
        ));
    }
    if !meta.is_dir() {
        return Err(GitError::Refused(
            "`.git` is neither a directory nor a file".into(),
        ));
    }
    if let Some(format) = object_format(&dir)? {
        return Err(GitError::Refused(format!(
            "the repository's object format is {format} (`extensions.objectFormat` in `.git/config`): the \
             runner reads only SHA-1 repositories (object format sha1)"
        )));
    }
    for (rel, what) in REFUSED_PATHS {
        if *rel == "shallow" && pin.is_some() && shallow_is_pin(&dir, pin)? {
            continue;
        }
        if fs::symlink_metadata(dir.join(rel)).is_ok() {
            return Err(GitError::Refused(format!(
                "`.git/{rel}`: {what} is refused"
            )));
        }
    }
    for entry in walkdir::WalkDir::new(&dir).follow_links(false) {
        let entry = entry.map_err(|e| GitError::Unreadable(format!(".git: {e}")))?;
        let rel = entry.path().strip_prefix(work_tree).unwrap_or(entry.path());
        if entry.file_type().is_symlink() {
            return Err(GitError::Refused(format!(
                "`{}` is a symbolic link; nothing inside `.git` may point elsewhere",
                rel.display()
            )));
        }
        if entry.file_type().is_file() && entry.path().starts_with(dir.join("refs/replace")) {
            return Err(GitError::Refused(format!(
                "`{}`: replace refs (which substitute one object for another) are refused",
                rel.display()
            )));
        }
    }
    if let Some(packed) = read_small(&dir.join("packed-refs"))? {
        if let Some(line) =
            packed_lines(&packed).find(|(_, name)| name.starts_with("refs/replace/"))
        {
            return Err(GitError::Refused(format!(
                "`.git/packed-refs` holds the replace ref `{}`: replace refs are refused",
                line.1
            )));
        }
    }
    let objects = dir.join("objects");
    let options = gix_odb::store::init::Options {
        alloc_limit_bytes: Some(ALLOC_LIMIT),
        current_dir: Some(dir.clone()),
        ..Default::default()
    };
    let odb = gix_odb::at_opts(&objects, HashKind::Sha1, None, options)
        .map_err(|e| GitError::Unreadable(format!("the object store `.git/objects`: {e}")))?;
    Ok(Some(GitDir { dir, odb }))
}

/// The object format `.git/config` names when it is not SHA-1 (`extensions.objectFormat = sha256`, what
/// `git init --object-format=sha256` writes), read as data ([`intake::scan::parse_git_config`]); `None` for a
/// SHA-1 repository or no config. A config larger than 1 MiB is unreadable.
fn object_format(dir: &Path) -> Result<Option<String>, GitError> {
    let path = dir.join("config");
    let f = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(io(&path))?;
    if bytes.len() as u64 > MAX_CONFIG {
        return Err(GitError::Unreadable(format!(
            "`.git/config`: larger than {MAX_CONFIG} bytes"
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    Ok(intake::scan::parse_git_config(&text)
        .into_iter()
        .filter(|e| e.section == "extensions" && e.subsection.is_none() && e.key == "objectformat")
        .filter_map(|e| e.value)
        .map(|v| v.trim().to_ascii_lowercase())
        .next_back()
        .filter(|v| v != "sha1")
        .map(|v| {
            v.chars()
                .take(32)
                .collect::<String>()
                .escape_debug()
                .to_string()
        }))
}

/// Largest `.git/config` read for its object format.
const MAX_CONFIG: u64 = 1 << 20;

/// Whether `.git/shallow` is a regular file naming exactly `pin` (one line); `false` when it is absent or
/// names anything else.
fn shallow_is_pin(dir: &Path, pin: Option<&ObjectId>) -> Result<bool, GitError> {
    let (Some(pin), path) = (pin, dir.join("shallow")) else {
        return Ok(false);
    };
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => {}
        _ => return Ok(false),
    }
    let text = read_small(&path)?.unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    Ok(lines.len() == 1
        && lines[0].len() == 40
        && ObjectId::from_hex(lines[0].as_bytes()).is_ok_and(|id| id == *pin))
}

/// A file of at most [`MAX_REF_FILE`] bytes as text, `None` when it does not exist.
fn read_small(path: &Path) -> Result<Option<String>, GitError> {
    let f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mut bytes = Vec::new();
    f.take(MAX_REF_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > MAX_REF_FILE {
        return Err(GitError::Unreadable(format!(
            "{}: larger than {MAX_REF_FILE} bytes",
            path.display()
        )));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| GitError::Unreadable(format!("{}: not UTF-8", path.display())))
}

/// `(object id, ref name)` of each ref line of a `packed-refs` text (comments and peeled `^` lines skipped).
fn packed_lines(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| l.split_once(' '))
}

/// Whether `name` is a ref name the runner reads: `refs/...` with git's component rules.
pub fn valid_ref_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("refs/") else {
        return false;
    };
    !rest.is_empty()
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("@{")
        && name
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.'))
        && name
            .bytes()
            .all(|b| b > b' ' && b != 0x7f && !b"~^:?*[\\".contains(&b))
}

fn parse_oid(text: &str, what: &str) -> Result<ObjectId, GitError> {
    let t = text.trim();
    if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(GitError::Unreadable(format!(
            "{what} is a SHA-256 object id: only SHA-1 repositories are read"
        )));
    }
    if t.len() != 40 {
        return Err(GitError::Unreadable(format!(
            "{what} is not an object id: `{}`",
            t.escape_debug()
        )));
    }
    ObjectId::from_hex(t.as_bytes()).map_err(|e| GitError::Unreadable(format!("{what}: {e}")))
}

/// One entry of a tree object, its name checked.
struct Entry {
    name: Vec<u8>,
    kind: EntryKind,
    id: ObjectId,
}

impl GitDir {
    /// The commit HEAD names: a detached id, or a symbolic ref followed (at most 5 deep) through loose refs
    /// and `packed-refs`.
    pub fn head(&self) -> Result<ObjectId, GitError> {
        let mut name = "HEAD".to_owned();
        for _ in 0..5 {
            let text = match read_small(&self.dir.join(&name))? {
                Some(t) => t,
                None => {
                    let packed = read_small(&self.dir.join("packed-refs"))?.unwrap_or_default();
                    let found = packed_lines(&packed)
                        .find(|(_, n)| *n == name)
                        .map(|(id, _)| id.to_owned());
                    return match found {
                        Some(id) => parse_oid(&id, &format!("packed ref {name}")),
                        None => Err(GitError::Unreadable(format!(
                            "HEAD names `{name}`, which is neither a loose nor a packed ref (an unborn branch?)"
                        ))),
                    };
                }
            };
            let line = text.lines().next().unwrap_or("");
            match line.strip_prefix("ref:") {
                Some(target) => {
                    let target = target.trim();
                    if !valid_ref_name(target) {
                        return Err(GitError::Unreadable(format!(
                            "`{name}` names `{}`, not a valid ref name",
                            target.escape_debug()
                        )));
                    }
                    name = target.to_owned();
                }
                None => return parse_oid(line, &format!("`{name}`")),
            }
        }
        Err(GitError::Unreadable(
            "HEAD: more than 5 symbolic refs deep".into(),
        ))
    }

    /// Reads object `id`, which must be of `kind`, and checks that its content hashes to `id` (a loose object
    /// file can hold anything under any name).
    fn read(&self, id: &ObjectId, kind: Kind, what: &str) -> Result<Vec<u8>, GitError> {
        let mut buf = Vec::new();
        // A malformed pack must be an error, never a panic of the runner.
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.odb
                .try_find(id, &mut buf)
                .map(|o| o.map(|d| (d.kind, d.data.to_vec())))
        }))
        .map_err(|_| GitError::Unreadable(format!("{what} {id}: the object store is malformed")))?
        .map_err(|e| GitError::Unreadable(format!("{what} {id}: {e}")))?;
        let Some((found_kind, data)) = found else {
            return Err(GitError::Unreadable(format!(
                "{what} {id} is missing from the object store (the runner never fetches a missing object: \
                 no promisor remote is contacted)"
            )));
        };
        if found_kind != kind {
            return Err(GitError::Unreadable(format!(
                "{what} {id} is a {found_kind}, not a {kind}"
            )));
        }
        let actual = gix_object::compute_hash(HashKind::Sha1, kind, &data).map_err(|e| {
            GitError::Unreadable(format!("{what} {id}: {e} (a SHA-1 collision attack?)"))
        })?;
        if actual != *id {
            return Err(GitError::Unreadable(format!(
                "{what} {id}: its content hashes to {actual} (a forged object)"
            )));
        }
        Ok(data)
    }

    /// The tree of commit `id`.
    pub fn commit_tree(&self, id: &ObjectId) -> Result<ObjectId, GitError> {
        let data = self.read(id, Kind::Commit, "commit")?;
        let commit = gix_object::CommitRef::from_bytes(&data, HashKind::Sha1)
            .map_err(|e| GitError::Unreadable(format!("commit {id}: {e}")))?;
        Ok(commit.tree())
    }

    /// The entries of tree `id`, each name checked as git's fsck does (no `/`, `.`, `..`, `.git`, no
    /// duplicates) and each mode one git writes.
    fn tree(&self, id: &ObjectId, at: &str) -> Result<Vec<Entry>, GitError> {
        let data = self.read(id, Kind::Tree, "tree")?;
        let tree = gix_object::TreeRef::from_bytes(&data, HashKind::Sha1)
            .map_err(|e| GitError::Unreadable(format!("tree {id} at `{at}`: {e}")))?;
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(tree.entries.len());
        for e in &tree.entries {
            let name: &[u8] = e.filename;
            let bad = name.is_empty()
                || name == b"."
                || name == b".."
                || name.eq_ignore_ascii_case(b".git")
                || name.contains(&b'/')
                || name.contains(&0);
            if bad || !seen.insert(name.to_vec()) {
                return Err(GitError::Unreadable(format!(
                    "tree {id} at `{at}` has an entry named `{}` (invalid or repeated)",
                    String::from_utf8_lossy(name).escape_debug()
                )));
            }
            let kind = e.mode.kind();
            if kind == EntryKind::Commit && e.mode.value() != 0o160000 {
                return Err(GitError::Unreadable(format!(
                    "tree {id} at `{at}`: entry `{}` has mode {:o}",
                    String::from_utf8_lossy(name).escape_debug(),
                    e.mode.value()
                )));
            }
            out.push(Entry {
                name: name.to_vec(),
                kind,
                id: e.oid.to_owned(),
            });
        }
        Ok(out)
    }

    /// Checks that the working tree `dir` (its top-level `.git` left out) is exactly tree `tree`: every file
    /// with the same content and executable bit, every symbolic link with the same target, nothing more
    /// (a directory holding no file counts as absent, as git cannot record it; a submodule entry matches an
    /// empty or absent directory). The first difference in name order is the error.
    pub fn check_worktree(&self, tree: &ObjectId, dir: &Path) -> Result<(), GitError> {
        let mut visited = 0;
        self.compare(tree, dir, "", 0, &mut visited)
    }

    fn compare(
        &self,
        tree: &ObjectId,
        dir: &Path,
        rel: &str,
        depth: usize,
        visited: &mut u64,
    ) -> Result<(), GitError> {
        if depth > MAX_TREE_DEPTH {
            return Err(GitError::Unreadable(format!(
                "`{rel}`: deeper than {MAX_TREE_DEPTH} directories"
            )));
        }
        let in_tree: HashMap<Vec<u8>, Entry> = self
            .tree(tree, rel)?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        let in_dir = dir_entries(dir, depth == 0)?;
        let names: BTreeSet<&Vec<u8>> = in_tree.keys().chain(in_dir.keys()).collect();
        for name in names {
            *visited += 1;
            if *visited > MAX_ENTRIES {
                return Err(GitError::Unreadable(format!(
                    "more than {MAX_ENTRIES} entries compared"
                )));
            }
            let path = dir.join(OsStr::from_bytes(name));
            let relp = join(rel, name);
            let differs = |what: &str| {
                Err(GitError::Differs {
                    path: relp.clone(),
                    what: what.to_owned(),
                })
            };
            match (in_tree.get(name), in_dir.get(name)) {
                (Some(e), None) if e.kind == EntryKind::Commit => {}
                (Some(_), None) => return differs("in the commit, missing from the working tree"),
                (None, Some(m)) if m.is_dir() && !holds_files(&path)? => {}
                (None, Some(_)) => {
                    return differs("not in the commit (an untracked or ignored file)")
                }
                (Some(e), Some(m)) => match e.kind {
                    EntryKind::Tree if m.is_dir() => {
                        self.compare(&e.id, &path, &relp, depth + 1, visited)?
                    }
                    EntryKind::Commit if m.is_dir() => {
                        if holds_files(&path)? {
                            return differs(
                                "a submodule with files in it: the commit records only the submodule's commit id",
                            );
                        }
                    }
                    EntryKind::Blob | EntryKind::BlobExecutable if m.is_file() => {
                        let exec = m.mode() & 0o100 != 0;
                        if exec != (e.kind == EntryKind::BlobExecutable) {
                            return differs(if exec {
                                "executable in the working tree, not in the commit"
                            } else {
                                "executable in the commit, not in the working tree"
                            });
                        }
                        if blob_of_file(&path, m.len())? != e.id {
                            return differs("its content is not the commit's");
                        }
                    }
                    EntryKind::Link if m.file_type().is_symlink() => {
                        if blob_of_link(&path)? != e.id {
                            return differs("the symbolic link's target is not the commit's");
                        }
                    }
                    _ => {
                        return differs(&format!(
                            "the commit has a {}, the working tree a {}",
                            kind_name(e.kind),
                            type_name(m)
                        ))
                    }
                },
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// Writes tree `tree` into the empty directory `dest` (a checkout with no attributes, filters or hooks:
    /// each blob's bytes as stored). Submodules become empty directories. Nothing is overwritten.
    pub fn checkout(&self, tree: &ObjectId, dest: &Path) -> Result<(), GitError> {
        let mut visited = 0;
        let mut bytes = 0;
        self.write_tree(tree, dest, "", 0, &mut visited, &mut bytes)
    }

    fn write_tree(
        &self,
        tree: &ObjectId,
        dir: &Path,
        rel: &str,
        depth: usize,
        visited: &mut u64,
        bytes: &mut u64,
    ) -> Result<(), GitError> {
        if depth > MAX_TREE_DEPTH {
            return Err(GitError::Unreadable(format!(
                "`{rel}`: deeper than {MAX_TREE_DEPTH} directories"
            )));
        }
        for e in self.tree(tree, rel)? {
            *visited += 1;
            if *visited > MAX_ENTRIES {
                return Err(GitError::Unreadable(format!(
                    "more than {MAX_ENTRIES} entries to check out"
                )));
            }
            let path = dir.join(OsStr::from_bytes(&e.name));
            let relp = join(rel, &e.name);
            match e.kind {
                EntryKind::Tree => {
                    fs::create_dir(&path).map_err(io(&path))?;
                    self.write_tree(&e.id, &path, &relp, depth + 1, visited, bytes)?;
                }
                EntryKind::Commit => fs::create_dir(&path).map_err(io(&path))?,
                EntryKind::Blob | EntryKind::BlobExecutable | EntryKind::Link => {
                    let data = self.read(&e.id, Kind::Blob, &format!("blob `{relp}`"))?;
                    *bytes += data.len() as u64;
                    if *bytes > MAX_CHECKOUT_BYTES {
                        return Err(GitError::Unreadable(format!(
                            "more than {MAX_CHECKOUT_BYTES} bytes to check out"
                        )));
                    }
                    if e.kind == EntryKind::Link {
                        std::os::unix::fs::symlink(OsStr::from_bytes(&data), &path)
                            .map_err(io(&path))?;
                    } else {
                        let mode = if e.kind == EntryKind::BlobExecutable {
                            0o755
                        } else {
                            0o644
                        };
                        let mut f = fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(mode)
                            .open(&path)
                            .map_err(io(&path))?;
                        f.write_all(&data).map_err(io(&path))?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn join(rel: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if rel.is_empty() {
        name.into_owned()
    } else {
        format!("{rel}/{name}")
    }
}

fn kind_name(k: EntryKind) -> &'static str {
    match k {
        EntryKind::Tree => "directory",
        EntryKind::Blob | EntryKind::BlobExecutable => "file",
        EntryKind::Link => "symbolic link",
        EntryKind::Commit => "submodule",
    }
}

fn type_name(m: &fs::Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_file() {
        "file"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "socket, FIFO or device"
    }
}

/// The entries of `dir` by name (lstat), the `.git` left out at the top.
fn dir_entries(dir: &Path, top: bool) -> Result<HashMap<Vec<u8>, fs::Metadata>, GitError> {
    let mut out = HashMap::new();
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        if top && name == ".git" {
            continue;
        }
        let meta = fs::symlink_metadata(entry.path()).map_err(io(&entry.path()))?;
        out.insert(name.as_bytes().to_vec(), meta);
    }
    Ok(out)
}

/// Whether anything but directories lies under `dir` (a tree git could record).
fn holds_files(dir: &Path) -> Result<bool, GitError> {
    for entry in walkdir::WalkDir::new(dir).follow_links(false) {
        let entry = entry.map_err(|e| GitError::Unreadable(format!("{}: {e}", dir.display())))?;
        if !entry.file_type().is_dir() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The blob id of a file's content, read in a stream (`len` from the same `lstat`; a file that changes size
/// meanwhile is an error).
fn blob_of_file(path: &Path, len: u64) -> Result<ObjectId, GitError> {
    let mut h = gix_hash::hasher(HashKind::Sha1);
    h.update(format!("blob {len}\0").as_bytes());
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io(path))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        h.update(&buf[..n]);
    }
    if total != len {
        return Err(GitError::Unreadable(format!(
            "{}: changed size while it was hashed",
            path.display()
        )));
    }
    h.try_finalize()
        .map_err(|e| GitError::Unreadable(format!("{}: {e}", path.display())))
}

fn blob_of_link(path: &Path) -> Result<ObjectId, GitError> {
    let target = fs::read_link(path).map_err(io(path))?;
    gix_object::compute_hash(HashKind::Sha1, Kind::Blob, target.as_os_str().as_bytes())
        .map_err(|e| GitError::Unreadable(format!("{}: {e}", path.display())))
}

/// The git tree object id of everything under `dir` with its top-level `.git` left out, computed here with
/// no git process and no attributes: each file's bytes as they are (ignored files included), `100755` for
/// an owner-executable file, symbolic links by target, directories holding no file left out (as git does).
/// For a clean checkout this is `HEAD^{tree}`. Sockets, FIFOs and devices are an error.
pub fn tree_hash(dir: &Path) -> Result<ObjectId, GitError> {
    let mut visited = 0;
    Ok(tree_of(dir, "", 0, &mut visited)?.unwrap_or_else(|| ObjectId::empty_tree(HashKind::Sha1)))
}

fn tree_of(
    dir: &Path,
    rel: &str,
    depth: usize,
    visited: &mut u64,
) -> Result<Option<ObjectId>, GitError> {
    if depth > MAX_TREE_DEPTH {
        return Err(GitError::Unreadable(format!(
            "`{rel}`: deeper than {MAX_TREE_DEPTH} directories"
        )));
    }
    let mut entries: Vec<(Vec<u8>, bool, &'static str, ObjectId)> = Vec::new();
    for (name, meta) in dir_entries(dir, depth == 0)? {
        *visited += 1;
        if *visited > MAX_ENTRIES {
            return Err(GitError::Unreadable(format!(
                "more than {MAX_ENTRIES} entries to hash"
            )));
        }
        let path = dir.join(OsStr::from_bytes(&name));
        let relp = join(rel, &name);
        let t = meta.file_type();
        if t.is_dir() {
            if let Some(id) = tree_of(&path, &relp, depth + 1, visited)? {
                entries.push((name, true, "40000", id));
            }
        } else if t.is_file() {
            let mode = if meta.mode() & 0o100 != 0 {
                "100755"
            } else {
                "100644"
            };
            let id = blob_of_file(&path, meta.len())?;
            entries.push((name, false, mode, id));
        } else if t.is_symlink() {
            let id = blob_of_link(&path)?;
            entries.push((name, false, "120000", id));
        } else {
            return Err(GitError::Unreadable(format!(
                "`{relp}` is a socket, FIFO or device: it has no git tree form"
            )));
        }
    }
    if entries.is_empty() {
        return Ok(None);
    }
    entries.sort_by(|a, b| gix_object::tree::name_order(&a.0, a.1, &b.0, b.1));
    let mut buf = Vec::new();
    for (name, _, mode, id) in &entries {
        buf.extend_from_slice(mode.as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(name);
        buf.push(0);
        buf.extend_from_slice(id.as_bytes());
    }
    gix_object::compute_hash(HashKind::Sha1, Kind::Tree, &buf)
        .map(Some)
        .map_err(|e| GitError::Unreadable(format!("tree `{rel}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn w(dir: &Path, name: &str, text: &str) {
        let p = dir.join(name);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["-c", "user.name=t", "-c", "user.email=t@t.example"])
            .args(["-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"])
            .args(args)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A committed repository with names that test git's tree order, an executable, a symbolic link, a
    /// nested directory and an empty one.
    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path();
        w(p, "a.b", "dot\n");
        w(p, "a-b", "dash\n");
        w(p, "a/x", "in a\n");
        w(p, "a0", "zero\n");
        w(p, "run.sh", "echo hi\n");
        fs::set_permissions(
            p.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        std::os::unix::fs::symlink("a/x", p.join("link")).expect("symlink");
        fs::create_dir_all(p.join("empty/deeper")).expect("empty");
        git(p, &["init", "-q"]);
        git(p, &["add", "-A"]);
        git(p, &["commit", "-qm", "one"]);
        d
    }

    type Change<'a> = &'a dyn Fn(&Path);

    fn head_and_tree(p: &Path) -> (ObjectId, ObjectId) {
        let g = open(p).expect("open").expect("git");
        let head = g.head().expect("head");
        let tree = g.commit_tree(&head).expect("tree");
        (head, tree)
    }

    #[test]
    fn a_sha256_repository_is_refused_naming_its_object_format() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path();
        w(p, "a", "one\n");
        git(p, &["init", "-q", "--object-format=sha256"]);
        git(p, &["add", "-A"]);
        git(p, &["commit", "-qm", "one"]);
        let e = open(p).map(|_| ()).expect_err("sha256 is refused");
        let text = e.to_string();
        assert!(
            text.contains("object format is sha256") && text.contains("SHA-1"),
            "{text}"
        );
        // A SHA-1 repository that says so is read.
        let d = repo();
        git(d.path(), &["config", "extensions.objectFormat", "sha1"]);
        assert!(open(d.path()).expect("sha1 is read").is_some());
    }

    #[test]
    fn head_tree_and_tree_hash_equal_git() {
        let d = repo();
        let p = d.path();
        let (head, tree) = head_and_tree(p);
        assert_eq!(head.to_string(), git(p, &["rev-parse", "HEAD"]));
        assert_eq!(tree.to_string(), git(p, &["rev-parse", "HEAD^{tree}"]));
        assert_eq!(tree_hash(p).expect("hash"), tree);
        let g = open(p).expect("open").expect("git");
        g.check_worktree(&tree, p).expect("clean checkout");
        // Packed objects (with deltas) and packed refs read the same.
        w(p, "a/x", "in a, changed a little\n");
        git(p, &["commit", "-qam", "two"]);
        git(p, &["gc", "-q", "--aggressive"]);
        assert!(!p.join(".git/refs/heads/main").exists(), "refs packed");
        let (head, tree) = head_and_tree(p);
        assert_eq!(head.to_string(), git(p, &["rev-parse", "HEAD"]));
        assert_eq!(tree.to_string(), git(p, &["rev-parse", "HEAD^{tree}"]));
        open(p)
            .expect("open")
            .expect("git")
            .check_worktree(&tree, p)
            .expect("clean checkout");
    }

    #[test]
    fn every_difference_is_named() {
        let cases: &[(&str, Change, &str)] = &[
            ("content", &|p| w(p, "a/x", "other\n"), "a/x"),
            ("untracked", &|p| w(p, "a/new", "n\n"), "a/new"),
            (
                "ignored",
                &|p| {
                    w(p, ".gitignore", "target/\n");
                    git(p, &["add", ".gitignore"]);
                    git(p, &["commit", "-qm", "ignore"]);
                    w(p, "target/out", "o\n");
                },
                "target",
            ),
            (
                "missing",
                &|p| fs::remove_file(p.join("a0")).expect("rm"),
                "a0",
            ),
            (
                "mode",
                &|p| {
                    fs::set_permissions(
                        p.join("a0"),
                        std::os::unix::fs::PermissionsExt::from_mode(0o755),
                    )
                    .expect("chmod")
                },
                "a0",
            ),
            (
                "link",
                &|p| {
                    fs::remove_file(p.join("link")).expect("rm");
                    std::os::unix::fs::symlink("/etc/passwd", p.join("link")).expect("ln");
                },
                "link",
            ),
            (
                "kind",
                &|p| {
                    fs::remove_file(p.join("a0")).expect("rm");
                    w(p, "a0/inner", "x\n");
                },
                "a0",
            ),
            ("nested .git", &|p| w(p, "a/.git/config", "x\n"), "a/.git"),
        ];
        for (what, change, path) in cases {
            let d = repo();
            let p = d.path();
            change(p);
            let (_, tree) = head_and_tree(p);
            let e = open(p)
                .expect("open")
                .expect("git")
                .check_worktree(&tree, p)
                .expect_err(what);
            match e {
                GitError::Differs { path: got, .. } => assert_eq!(&got, path, "{what}"),
                other => panic!("{what}: {other}"),
            }
        }
        // An empty directory is nothing to git, so it is no difference.
        let d = repo();
        fs::create_dir_all(d.path().join("a/newempty")).expect("mkdir");
        let (_, tree) = head_and_tree(d.path());
        open(d.path())
            .expect("open")
            .expect("git")
            .check_worktree(&tree, d.path())
            .expect("empty dirs are nothing");
    }

    #[test]
    fn a_shallow_file_is_accepted_only_when_it_names_exactly_the_pin() {
        let d = repo();
        let (head, tree) = head_and_tree(d.path());
        let other = ObjectId::from_hex("1".repeat(40).as_bytes()).expect("id");
        w(d.path(), ".git/shallow", &format!("{head}\n"));
        // Without a pin, or with another pin, a shallow clone is refused as before.
        assert!(matches!(open(d.path()), Err(GitError::Refused(_))));
        assert!(matches!(
            open_pinned(d.path(), Some(&other)),
            Err(GitError::Refused(_))
        ));
        // With the pin it names: HEAD's commit and tree are read and checked as always.
        let g = open_pinned(d.path(), Some(&head))
            .expect("open")
            .expect("git");
        assert_eq!(g.commit_tree(&head).expect("commit"), tree);
        g.check_worktree(&tree, d.path()).expect("worktree");
        // A shallow file naming the pin and another commit rewrites more than the pin's own history: refused.
        w(d.path(), ".git/shallow", &format!("{head}\n{other}\n"));
        assert!(matches!(
            open_pinned(d.path(), Some(&head)),
            Err(GitError::Refused(_))
        ));
    }

    #[test]
    fn what_redirects_git_is_refused() {
        let cases: &[(&str, Change)] = &[
            ("gitfile", &|p| {
                fs::remove_dir_all(p.join(".git")).expect("rm .git");
                w(p, ".git", "gitdir: /tmp/elsewhere\n");
            }),
            ("alternates", &|p| {
                w(p, ".git/objects/info/alternates", "/tmp/x\n")
            }),
            ("http-alternates", &|p| {
                w(
                    p,
                    ".git/objects/info/http-alternates",
                    "http://x.example/\n",
                )
            }),
            ("shallow", &|p| w(p, ".git/shallow", &"0".repeat(40))),
            ("grafts", &|p| w(p, ".git/info/grafts", &"0".repeat(40))),
            ("commondir", &|p| w(p, ".git/commondir", "/tmp/x\n")),
            ("loose replace ref", &|p| {
                w(
                    p,
                    &format!(".git/refs/replace/{}", "1".repeat(40)),
                    &"2".repeat(40),
                )
            }),
            ("packed replace ref", &|p| {
                w(
                    p,
                    ".git/packed-refs",
                    &format!("{} refs/replace/{}\n", "2".repeat(40), "1".repeat(40)),
                )
            }),
            ("symlink inside", &|p| {
                std::os::unix::fs::symlink("/etc", p.join(".git/refs/tags/t")).expect("ln")
            }),
            ("symlinked .git", &|p| {
                fs::rename(p.join(".git"), p.join("real.git")).expect("mv");
                std::os::unix::fs::symlink("real.git", p.join(".git")).expect("ln");
            }),
        ];
        for (what, change) in cases {
            let d = repo();
            change(d.path());
            match open(d.path()) {
                Err(GitError::Refused(why)) => assert!(!why.is_empty()),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn missing_and_forged_objects_are_unreadable() {
        // The HEAD commit's object removed (a partial clone would fetch it; the runner never does).
        let d = repo();
        let p = d.path();
        let head = git(p, &["rev-parse", "HEAD"]);
        fs::remove_file(p.join(".git/objects").join(&head[..2]).join(&head[2..])).expect("rm");
        let g = open(p).expect("open").expect("git");
        let id = g.head().expect("head");
        let e = g.commit_tree(&id).expect_err("missing");
        assert!(e.to_string().contains("missing"), "{e}");

        // A loose object file holding another commit under HEAD's name.
        let d = repo();
        let p = d.path();
        let first = git(p, &["rev-parse", "HEAD"]);
        w(p, "a0", "changed\n");
        git(p, &["commit", "-qam", "two"]);
        let second = git(p, &["rev-parse", "HEAD"]);
        let obj = |id: &str| p.join(".git/objects").join(&id[..2]).join(&id[2..]);
        fs::copy(obj(&first), obj(&second)).expect("forge");
        let g = open(p).expect("open").expect("git");
        let id = g.head().expect("head");
        let e = g.commit_tree(&id).expect_err("forged");
        assert!(e.to_string().contains("forged"), "{e}");
    }

    #[test]
    fn checkout_writes_the_tree_as_stored() {
        let d = repo();
        let p = d.path();
        // Attributes that would make git's own checkout rewrite bytes are not applied.
        w(p, ".gitattributes", "* text eol=crlf\n");
        git(p, &["add", "-A"]);
        git(p, &["commit", "-qm", "attrs"]);
        let (_, tree) = head_and_tree(p);
        let out = tempfile::tempdir().expect("tmp");
        let g = open(p).expect("open").expect("git");
        g.checkout(&tree, out.path()).expect("checkout");
        assert_eq!(fs::read(out.path().join("a0")).expect("read"), b"zero\n");
        assert_eq!(
            fs::read_link(out.path().join("link")).expect("link"),
            Path::new("a/x")
        );
        g.check_worktree(&tree, out.path()).expect("same tree");
        assert_eq!(tree_hash(out.path()).expect("hash"), tree);
    }

    #[test]
    fn ref_names() {
        for ok in ["refs/heads/main", "refs/tags/v1.0", "refs/heads/a/b-c_d"] {
            assert!(valid_ref_name(ok), "{ok}");
        }
        for bad in [
            "HEAD",
            "refs/",
            "refs/heads/../../config",
            "refs/heads/.x",
            "refs/heads/x.lock",
            "refs/heads/a b",
            "refs/heads/a\\b",
            "/etc/passwd",
            "refs//x",
        ] {
            assert!(!valid_ref_name(bad), "{bad}");
        }
    }
}
