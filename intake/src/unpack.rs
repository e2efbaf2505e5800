//! Stage 2: unpack a bundle (tar, tar.gz, zip, or a directory copied) into a fresh directory.
//! Two passes: the first reads only metadata and refuses traversal, links that escape, special files,
//! setuid/setgid bits, duplicates, bombs and over-long names before a byte is written; the second writes
//! with `O_CREAT|O_EXCL|O_NOFOLLOW`, files first and links last, so no write ever goes through a link.

use crate::report::IntakeLimits;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Cursor, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// An archive format intake reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ArchiveFormat {
    /// POSIX/GNU tar.
    Tar,
    /// gzip-compressed tar (multi-member gzip accepted).
    TarGz,
    /// zip (stored or deflate).
    Zip,
}

impl ArchiveFormat {
    /// Recognises a format from the first bytes of a file (at least 262 for tar).
    pub fn detect(head: &[u8]) -> Option<ArchiveFormat> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(ArchiveFormat::TarGz)
        } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(ArchiveFormat::Zip)
        } else if head.len() >= 262 && &head[257..262] == b"ustar" {
            Some(ArchiveFormat::Tar)
        } else {
            None
        }
    }

    /// Whether the format compresses (and so is subject to the ratio limit).
    pub fn compressed(self) -> bool {
        !matches!(self, ArchiveFormat::Tar)
    }
}

/// An unpack refusal, naming the member.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{member}: {reason}")]
#[non_exhaustive]
pub struct UnpackError {
    /// The archive member (or source file) refused, or `<archive>` for the archive as a whole.
    pub member: String,
    /// Why.
    pub reason: String,
}

fn refuse(member: impl Into<String>, reason: impl Into<String>) -> UnpackError {
    UnpackError {
        member: member.into(),
        reason: reason.into(),
    }
}

/// What an unpack produced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct UnpackSummary {
    /// Members read (directories, files, links).
    pub entries: u64,
    /// Regular files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Symbolic links created (each resolving inside the tree).
    pub symlinks: u64,
    /// Hard links created (each to a file of the tree).
    pub hardlinks: u64,
}

#[derive(Debug, Clone)]
enum RawKind {
    Dir,
    File,
    Symlink(Vec<u8>),
    Hardlink(Vec<u8>),
    /// Ignored metadata (pax global headers).
    Skip,
    /// Refused special entry, with a description.
    Special(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink(String),
    Hardlink(Vec<String>),
}

#[derive(Debug, Clone)]
struct Planned {
    comps: Vec<String>,
    kind: Kind,
    size: u64,
    exec: bool,
    /// For directory sources: (dev, ino) seen in pass 1.
    ident: Option<(u64, u64)>,
}

/// Pass 1: every check that needs only metadata.
struct Planner<'a> {
    limits: &'a IntakeLimits,
    compressed_len: Option<u64>,
    count: u64,
    total: u64,
    entries: Vec<Planned>,
    exact: HashMap<Vec<String>, usize>,
    folded: HashMap<String, String>,
    implicit_dirs: HashSet<Vec<String>>,
    links: HashMap<Vec<String>, String>,
}

fn shown(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    let mut out = String::new();
    for c in s.chars().take(200) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if s.chars().count() > 200 {
        out.push_str("...");
    }
    out
}

/// Splits a member name into normal components, refusing traversal, absolute names, drive letters,
/// backslashes, control characters and over-long names.
fn components(name: &[u8], limits: &IntakeLimits) -> Result<Vec<String>, UnpackError> {
    let who = shown(name);
    if name.len() > limits.max_path_bytes {
        return Err(refuse(
            who,
            format!(
                "name is {} bytes, more than max_path_bytes = {}",
                name.len(),
                limits.max_path_bytes
            ),
        ));
    }
    let s = std::str::from_utf8(name).map_err(|_| refuse(who.clone(), "name is not UTF-8"))?;
    if s.chars().any(|c| c.is_control()) {
        return Err(refuse(who, "name contains a control character"));
    }
    if s.contains('\\') {
        return Err(refuse(
            who,
            "name contains a backslash (a path separator elsewhere)",
        ));
    }
    if s.starts_with('/') {
        return Err(refuse(who, "absolute path"));
    }
    let b = s.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return Err(refuse(who, "drive-letter path"));
    }
    let mut out = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(refuse(who, "path traversal (`..`)")),
            c => {
                if c.len() > limits.max_name_bytes {
                    return Err(refuse(
                        who,
                        format!(
                            "a component is {} bytes, more than max_name_bytes = {}",
                            c.len(),
                            limits.max_name_bytes
                        ),
                    ));
                }
                out.push(c.to_string());
            }
        }
    }
    if out.len() > limits.max_depth {
        return Err(refuse(
            who,
            format!(
                "{} levels deep, more than max_depth = {}",
                out.len(),
                limits.max_depth
            ),
        ));
    }
    Ok(out)
}

/// Resolves `target` (a symlink's text) from directory `dir` through the tree's own links, as the kernel
/// would; `None` when it leaves the tree (or loops).
fn resolve_in_tree(
    links: &HashMap<Vec<String>, String>,
    dir: &[String],
    target: &str,
) -> Option<Vec<String>> {
    if target.starts_with('/') {
        return None;
    }
    let mut stack: Vec<String> = dir.to_vec();
    let mut queue: VecDeque<String> = target.split('/').map(str::to_string).collect();
    let mut hops = 0;
    while let Some(c) = queue.pop_front() {
        match c.as_str() {
            "" | "." => {}
            ".." => {
                stack.pop()?;
            }
            _ => {
                stack.push(c);
                if let Some(t) = links.get(&stack) {
                    hops += 1;
                    if hops > 40 || t.starts_with('/') {
                        return None;
                    }
                    stack.pop();
                    for (i, part) in t.split('/').enumerate() {
                        queue.insert(i, part.to_string());
                    }
                }
            }
        }
    }
    Some(stack)
}

impl<'a> Planner<'a> {
    fn new(limits: &'a IntakeLimits, compressed_len: Option<u64>) -> Self {
        Planner {
            limits,
            compressed_len,
            count: 0,
            total: 0,
            entries: Vec::new(),
            exact: HashMap::new(),
            folded: HashMap::new(),
            implicit_dirs: HashSet::new(),
            links: HashMap::new(),
        }
    }

    fn add(
        &mut self,
        name: &[u8],
        kind: RawKind,
        size: u64,
        mode: u32,
        ident: Option<(u64, u64)>,
    ) -> Result<(), UnpackError> {
        let who = shown(name);
        self.count += 1;
        if self.count > self.limits.max_entries {
            return Err(refuse(
                who,
                format!(
                    "archive has more than max_entries = {} members",
                    self.limits.max_entries
                ),
            ));
        }
        let comps = components(name, self.limits)?;
        let kind = match kind {
            RawKind::Skip => return Ok(()),
            RawKind::Special(what) => {
                return Err(refuse(who, format!("{what} entries are not allowed")))
            }
            RawKind::Dir => Kind::Dir,
            RawKind::File => Kind::File,
            RawKind::Symlink(t) => {
                let t = String::from_utf8(t)
                    .map_err(|_| refuse(who.clone(), "symlink target is not UTF-8"))?;
                if t.is_empty() || t.contains('\0') {
                    return Err(refuse(who, "empty symlink target"));
                }
                if t.starts_with('/') {
                    return Err(refuse(who, format!("absolute symlink (-> {t})")));
                }
                if t.len() > self.limits.max_path_bytes {
                    return Err(refuse(who, "symlink target longer than max_path_bytes"));
                }
                Kind::Symlink(t)
            }
            RawKind::Hardlink(t) => {
                let tc = components(&t, self.limits).map_err(|e| {
                    refuse(
                        who.clone(),
                        format!("hard link target {}: {}", e.member, e.reason),
                    )
                })?;
                match self.exact.get(&tc).map(|i| &self.entries[*i].kind) {
                    Some(Kind::File) => Kind::Hardlink(tc),
                    _ => {
                        return Err(refuse(
                            who,
                            format!(
                                "hard link to `{}`, which is not an earlier regular file of the archive",
                                shown(&t)
                            ),
                        ))
                    }
                }
            }
        };
        if comps.is_empty() {
            return if kind == Kind::Dir {
                Ok(())
            } else {
                Err(refuse(who, "a non-directory entry names the root"))
            };
        }
        if mode & 0o6000 != 0 {
            return Err(refuse(
                who,
                format!("setuid/setgid bit set (mode {:o})", mode & 0o7777),
            ));
        }
        if kind == Kind::File {
            self.total = self.total.saturating_add(size);
            if self.total > self.limits.max_unpacked_bytes {
                return Err(refuse(
                    who,
                    format!(
                        "unpacked size would reach {} bytes, more than max_unpacked_bytes = {}",
                        self.total, self.limits.max_unpacked_bytes
                    ),
                ));
            }
            if let Some(clen) = self.compressed_len {
                let allowed = self
                    .limits
                    .max_ratio
                    .saturating_mul(clen)
                    .saturating_add(self.limits.ratio_slack_bytes);
                if self.total > allowed {
                    return Err(refuse(
                        who,
                        format!(
                            "unpacked size would reach {} bytes from {clen} archive bytes, more than max_ratio = {} \
                             (plus ratio_slack_bytes = {})",
                            self.total, self.limits.max_ratio, self.limits.ratio_slack_bytes
                        ),
                    ));
                }
            }
        }
        // Duplicates, exact and case-folded.
        if self.exact.contains_key(&comps) {
            return Err(refuse(who, "duplicate member"));
        }
        // Every prefix too: `Repo/x` and `repo/y` put two directories where a case-insensitive file
        // system has one.
        for i in 1..=comps.len() {
            let original = comps[..i].join("/");
            let fold = original.to_lowercase();
            if let Some(prev) = self.folded.get(&fold) {
                if *prev != original {
                    return Err(refuse(
                        who,
                        format!("`{original}` differs from `{prev}` only in letter case"),
                    ));
                }
            }
        }
        // Nothing may lie beneath a symlink or a file, and a non-directory may not replace a directory.
        for i in 1..comps.len() {
            if let Some(j) = self.exact.get(&comps[..i]) {
                if self.entries[*j].kind != Kind::Dir {
                    return Err(refuse(
                        who,
                        format!(
                            "lies beneath `{}`, which is not a directory (a link or a file)",
                            comps[..i].join("/")
                        ),
                    ));
                }
            }
        }
        if kind != Kind::Dir && self.implicit_dirs.contains(&comps) {
            return Err(refuse(who, "replaces a directory of earlier members"));
        }
        for i in 1..comps.len() {
            self.implicit_dirs.insert(comps[..i].to_vec());
        }
        if let Kind::Symlink(t) = &kind {
            self.links.insert(comps.clone(), t.clone());
        }
        self.exact.insert(comps.clone(), self.entries.len());
        for i in 1..=comps.len() {
            let original = comps[..i].join("/");
            self.folded
                .entry(original.to_lowercase())
                .or_insert(original);
        }
        self.entries.push(Planned {
            comps,
            kind,
            size,
            exec: mode & 0o111 != 0,
            ident,
        });
        Ok(())
    }

    /// Checks every symlink against the whole tree (links through links included).
    fn finish(&self) -> Result<(), UnpackError> {
        for (path, target) in &self.links {
            let dir = &path[..path.len() - 1];
            if resolve_in_tree(&self.links, dir, target).is_none() {
                return Err(refuse(
                    path.join("/"),
                    format!("symlink -> {target} leaves the unpacked tree (or loops)"),
                ));
            }
        }
        Ok(())
    }
}

fn tar_kind(t: tar::EntryType, link: Option<Vec<u8>>) -> RawKind {
    use tar::EntryType as E;
    match t {
        E::Regular | E::Continuous => RawKind::File,
        E::Directory => RawKind::Dir,
        E::Symlink => RawKind::Symlink(link.unwrap_or_default()),
        E::Link => RawKind::Hardlink(link.unwrap_or_default()),
        E::XGlobalHeader => RawKind::Skip,
        E::Char => RawKind::Special("character device"),
        E::Block => RawKind::Special("block device"),
        E::Fifo => RawKind::Special("FIFO"),
        E::GNUSparse => RawKind::Special("GNU sparse file"),
        _ => RawKind::Special("unknown tar entry type"),
    }
}

fn zip_kind(name: &str, mode: Option<u32>) -> RawKind {
    match mode.map(|m| m & 0o170000) {
        Some(0o040000) => RawKind::Dir,
        Some(0o100000) => RawKind::File,
        Some(0o120000) => RawKind::Symlink(Vec::new()),
        Some(0o010000) => RawKind::Special("FIFO"),
        Some(0o020000) => RawKind::Special("character device"),
        Some(0o060000) => RawKind::Special("block device"),
        Some(0o140000) => RawKind::Special("socket"),
        Some(0) | None if name.ends_with('/') => RawKind::Dir,
        Some(0) | None => RawKind::File,
        Some(_) => RawKind::Special("unknown file type"),
    }
}

fn io_refuse(member: &str, what: &str, e: io::Error) -> UnpackError {
    refuse(member, format!("{what}: {e}"))
}

/// Pass 2: writes into `root`, which this module created and nobody else writes to.
struct Writer<'a> {
    root: &'a Path,
    summary: UnpackSummary,
}

impl<'a> Writer<'a> {
    /// Checks the finished plan, then creates the fresh destination the plan's entries are written into.
    fn start(planner: &Planner, dest: &'a Path) -> Result<Writer<'a>, UnpackError> {
        planner.finish()?;
        make_fresh(dest)?;
        Ok(Writer {
            root: dest,
            summary: UnpackSummary {
                entries: planner.count,
                files: 0,
                bytes: 0,
                symlinks: 0,
                hardlinks: 0,
            },
        })
    }

    fn path(&self, comps: &[String]) -> PathBuf {
        let mut p = self.root.to_path_buf();
        p.extend(comps);
        p
    }

    /// Creates every missing parent directory of `comps`, refusing anything that is not a real directory.
    fn parents(&self, comps: &[String]) -> Result<(), UnpackError> {
        for i in 1..comps.len() {
            self.dir(&comps[..i])?;
        }
        Ok(())
    }

    fn dir(&self, comps: &[String]) -> Result<(), UnpackError> {
        let p = self.path(comps);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_dir() => Ok(()),
            Ok(_) => Err(refuse(
                comps.join("/"),
                "a parent exists and is not a directory",
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::DirBuilder::new()
                .mode(0o755)
                .create(&p)
                .map_err(|e| io_refuse(&comps.join("/"), "cannot create directory", e)),
            Err(e) => Err(io_refuse(&comps.join("/"), "cannot inspect", e)),
        }
    }

    /// A directory entry: its missing parents first (an archive may list `a/b/` before `a/`, or never list
    /// `a/`), each checked by [`Writer::dir`] like a file's parents, so no symlink is followed.
    fn dir_entry(&self, comps: &[String]) -> Result<(), UnpackError> {
        self.parents(comps)?;
        self.dir(comps)
    }

    fn file(&mut self, e: &Planned, data: &mut dyn Read) -> Result<(), UnpackError> {
        let who = e.comps.join("/");
        self.parents(&e.comps)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(if e.exec { 0o755 } else { 0o644 })
            .open(self.path(&e.comps))
            .map_err(|err| io_refuse(&who, "cannot create file", err))?;
        // Read at most one byte more than declared: a member producing more than it claimed is refused.
        let n = io::copy(&mut data.take(e.size.saturating_add(1)), &mut f)
            .map_err(|err| io_refuse(&who, "cannot unpack", err))?;
        if n != e.size {
            return Err(refuse(
                who,
                format!("produced {n} bytes where the archive declared {}", e.size),
            ));
        }
        f.flush()
            .map_err(|err| io_refuse(&who, "cannot write", err))?;
        self.summary.files += 1;
        self.summary.bytes += n;
        Ok(())
    }

    fn links(&mut self, plan: &[Planned]) -> Result<(), UnpackError> {
        for e in plan {
            if let Kind::Hardlink(t) = &e.kind {
                self.parents(&e.comps)?;
                let target = self.path(t);
                let m = fs::symlink_metadata(&target)
                    .map_err(|err| io_refuse(&e.comps.join("/"), "hard link target", err))?;
                if !m.file_type().is_file() {
                    return Err(refuse(
                        e.comps.join("/"),
                        "hard link target is not a regular file",
                    ));
                }
                fs::hard_link(&target, self.path(&e.comps))
                    .map_err(|err| io_refuse(&e.comps.join("/"), "cannot create hard link", err))?;
                self.summary.hardlinks += 1;
            }
        }
        for e in plan {
            if let Kind::Symlink(t) = &e.kind {
                self.parents(&e.comps)?;
                std::os::unix::fs::symlink(t, self.path(&e.comps))
                    .map_err(|err| io_refuse(&e.comps.join("/"), "cannot create symlink", err))?;
                self.summary.symlinks += 1;
            }
        }
        Ok(())
    }
}

fn make_fresh(dest: &Path) -> Result<(), UnpackError> {
    fs::DirBuilder::new().mode(0o700).create(dest).map_err(|e| {
        io_refuse(
            "<target>",
            &format!("cannot create fresh directory {}", dest.display()),
            e,
        )
    })
}

/// Unpacks an archive held in memory into `dest`, which must not exist yet (it is created here); a .tar.gz is
/// inflated once, into a spool file beside `dest` that is removed afterwards ([`OpenedArchive`]).
pub fn unpack_archive(
    bytes: &[u8],
    format: ArchiveFormat,
    dest: &Path,
    limits: &IntakeLimits,
) -> Result<UnpackSummary, UnpackError> {
    let spool_dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    OpenedArchive::open(bytes, format, spool_dir, limits).unpack(dest)
}

/// Where a tar stream is read from: the archive's own bytes (a plain tar), or the spool file a .tar.gz was
/// inflated into once.
enum TarSource<'a> {
    Bytes(&'a [u8]),
    Spool(PathBuf),
}

/// A reader that can also seek (the metadata pass skips members' data by seeking).
trait ReadSeek: Read + io::Seek {}
impl<T: Read + io::Seek> ReadSeek for T {}

impl TarSource<'_> {
    fn seekable(&self) -> Result<Box<dyn ReadSeek + '_>, UnpackError> {
        match self {
            TarSource::Bytes(b) => Ok(Box::new(Cursor::new(*b))),
            TarSource::Spool(p) => File::open(p)
                .map(|f| Box::new(io::BufReader::with_capacity(64 * 1024, f)) as Box<dyn ReadSeek>)
                .map_err(|e| io_refuse("<archive>", "cannot reopen the inflated archive", e)),
        }
    }

    fn reader(&self) -> Result<Box<dyn Read + '_>, UnpackError> {
        match self {
            TarSource::Bytes(b) => Ok(Box::new(*b)),
            TarSource::Spool(p) => File::open(p)
                .map(|f| Box::new(io::BufReader::with_capacity(64 * 1024, f)) as Box<dyn Read>)
                .map_err(|e| io_refuse("<archive>", "cannot reopen the inflated archive", e)),
        }
    }
}

/// What was read of an archive once, for every later pass: a zip's bytes, or a tar stream whose raw headers
/// passed the bounded check (a .tar.gz inflated exactly once, into a spool file, while that check ran). The
/// job-file peek of stage 1, the metadata pass and the write pass of stage 2 all read this, so no archive is
/// decompressed twice (a zip member the peek inflated is written from the peek's bytes). The spool file is
/// removed when this is dropped.
pub struct OpenedArchive<'a> {
    format: ArchiveFormat,
    limits: IntakeLimits,
    compressed_len: Option<u64>,
    zip: Option<&'a [u8]>,
    tar: Option<TarSource<'a>>,
    /// The raw header check's refusal (reported by stage 2, which would have run it).
    checked: Result<(), UnpackError>,
    /// The zip member the peek inflated, kept so that the write pass uses these bytes instead of inflating the
    /// member a second time.
    peeked: std::cell::RefCell<Option<PeekedMember>>,
    /// The index of every zip member a decompressing reader was opened for, in order (each member once).
    inflated: std::cell::RefCell<Vec<usize>>,
}

/// One zip member inflated by [`OpenedArchive::peek_file`]: its index and raw name in the central directory
/// (both must match in the write pass) and its bytes.
#[derive(Clone, Debug)]
struct PeekedMember {
    index: usize,
    name_raw: Vec<u8>,
    data: Vec<u8>,
}

impl std::fmt::Debug for OpenedArchive<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedArchive")
            .field("format", &self.format)
            .field("checked", &self.checked)
            .finish_non_exhaustive()
    }
}

/// Copies what is read through it into a writer: the inflated tar stream into its spool file.
struct Tee<R, W> {
    inner: R,
    copy: W,
}

impl<R: Read, W: Write> Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.copy.write_all(&buf[..n])?;
        Ok(n)
    }
}

/// Bytes of the inflated stream kept after the raw check's end-of-archive block (the tar reader stops at the
/// first zero block, so it never needs more; the rest of a stream is not inflated).
const SPOOL_TAIL_BYTES: u64 = 1024;

impl<'a> OpenedArchive<'a> {
    /// Opens an archive held in memory. A .tar.gz is inflated once into a fresh spool file in `spool_dir`
    /// while its raw headers are checked; a failure of that check (or of the spool) is kept and returned by
    /// [`OpenedArchive::unpack`], as stage 2 reports it.
    pub fn open(
        bytes: &'a [u8],
        format: ArchiveFormat,
        spool_dir: &Path,
        limits: &IntakeLimits,
    ) -> OpenedArchive<'a> {
        let compressed_len = format.compressed().then_some(bytes.len() as u64);
        let mut opened = OpenedArchive {
            format,
            limits: *limits,
            compressed_len,
            zip: None,
            tar: None,
            checked: Ok(()),
            peeked: Default::default(),
            inflated: Default::default(),
        };
        let planner = Planner::new(limits, compressed_len);
        match format {
            ArchiveFormat::Zip => opened.zip = Some(bytes),
            ArchiveFormat::Tar => {
                opened.checked = raw_tar_check(&mut &bytes[..], &planner);
                opened.tar = Some(TarSource::Bytes(bytes));
            }
            ArchiveFormat::TarGz => match inflate_checked(bytes, spool_dir, &planner) {
                Ok((spool, checked)) => {
                    opened.checked = checked;
                    opened.tar = Some(TarSource::Spool(spool));
                }
                Err(e) => opened.checked = Err(e),
            },
        }
        opened
    }

    /// The archive's format.
    pub fn format(&self) -> ArchiveFormat {
        self.format
    }

    /// The bytes of one top-level regular file (`name` or `./name`) of at most
    /// [`crate::job::MAX_JOB_FILE_BYTES`], when it can be found cheaply: a zip's central directory, or a tar
    /// whose raw headers passed the check. `None` otherwise (stage 3 reads it from the unpacked tree).
    pub fn peek_file(&self, name: &str) -> Option<Vec<u8>> {
        use crate::job::MAX_JOB_FILE_BYTES;
        if let Some(bytes) = self.zip {
            let mut z = zip::ZipArchive::new(Cursor::new(bytes)).ok()?;
            let index = [name.to_owned(), format!("./{name}")]
                .into_iter()
                .find_map(|n| z.index_for_name(&n))?;
            if let Some(p) = self.peeked.borrow().as_ref().filter(|p| p.index == index) {
                return Some(p.data.clone());
            }
            let name_raw = z.by_index_raw(index).ok()?.name_raw().to_vec();
            self.inflated.borrow_mut().push(index);
            let f = z.by_index(index).ok()?;
            if f.size() > MAX_JOB_FILE_BYTES {
                return None;
            }
            let mut out = Vec::new();
            // Read to the end: the zip reader checks the member's CRC there, so only whole, intact bytes are
            // kept for the write pass.
            f.take(MAX_JOB_FILE_BYTES).read_to_end(&mut out).ok()?;
            *self.peeked.borrow_mut() = Some(PeekedMember {
                index,
                name_raw,
                data: out.clone(),
            });
            return Some(out);
        }
        self.checked.as_ref().ok()?;
        let source = self.tar.as_ref()?;
        let mut ar = tar::Archive::new(source.reader().ok()?);
        for entry in ar.entries().ok()? {
            let mut entry = entry.ok()?;
            let comps = components(&entry.path_bytes(), &self.limits).ok()?;
            if comps.len() == 1 && comps[0] == name {
                if entry.header().entry_type() != tar::EntryType::Regular
                    || entry.size() > MAX_JOB_FILE_BYTES
                {
                    return None;
                }
                let mut out = Vec::new();
                entry.read_to_end(&mut out).ok()?;
                return Some(out);
            }
        }
        None
    }

    /// Unpacks into `dest`, which must not exist yet (it is created here): the metadata pass, then the write
    /// pass, both over what [`OpenedArchive::open`] read.
    pub fn unpack(&self, dest: &Path) -> Result<UnpackSummary, UnpackError> {
        self.checked.clone()?;
        let mut planner = Planner::new(&self.limits, self.compressed_len);
        if let Some(bytes) = self.zip {
            let peeked = self.peeked.borrow();
            return unpack_zip(
                bytes,
                &mut planner,
                dest,
                peeked.as_ref(),
                &mut self.inflated.borrow_mut(),
            );
        }
        let source = self
            .tar
            .as_ref()
            .ok_or_else(|| refuse("<archive>", "archive bytes missing"))?;
        plan_tar(source, &mut planner)?;
        let mut w = Writer::start(&planner, dest)?;
        write_tar(source, &planner, &mut w)?;
        w.links(&planner.entries)?;
        Ok(w.summary)
    }
}

impl Drop for OpenedArchive<'_> {
    fn drop(&mut self) {
        if let Some(TarSource::Spool(p)) = &self.tar {
            let _ = fs::remove_file(p);
        }
    }
}

/// Inflates a .tar.gz once into a fresh spool file in `dir` while the raw header check reads it. `Err` when
/// the spool cannot be made; the check's own result is the second member.
fn inflate_checked(
    bytes: &[u8],
    dir: &Path,
    planner: &Planner,
) -> Result<(PathBuf, Result<(), UnpackError>), UnpackError> {
    static SPOOLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SPOOLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".inflated-{}-{n}.tar", std::process::id()));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| io_refuse("<archive>", "cannot create the inflated archive's spool", e))?;
    let mut tee = Tee {
        inner: flate2::read::MultiGzDecoder::new(bytes),
        copy: io::BufWriter::with_capacity(64 * 1024, file),
    };
    let mut checked = raw_tar_check(&mut tee, planner);
    if checked.is_ok() {
        // The second zero block (and a little slack) after the end, never the rest of a long stream.
        let mut rest = (&mut tee).take(SPOOL_TAIL_BYTES);
        if let Err(e) = io::copy(&mut rest, &mut io::sink()) {
            if e.kind() != io::ErrorKind::UnexpectedEof {
                checked = Err(refuse("<archive>", format!("unreadable: {e}")));
            }
        }
    }
    if let Err(e) = tee.copy.flush() {
        let _ = fs::remove_file(&path);
        return Err(io_refuse(
            "<archive>",
            "writing the inflated archive's spool",
            e,
        ));
    }
    Ok((path, checked))
}

/// Both passes of a zip: the central directory checked member by member, then the members written.
/// Plans and writes a zip. Each member is inflated once: a member the peek already inflated (same index, same
/// raw name) is written from `peeked`; every index a decompressing reader is opened for is pushed to `inflated`.
fn unpack_zip(
    bytes: &[u8],
    planner: &mut Planner,
    dest: &Path,
    peeked: Option<&PeekedMember>,
    inflated: &mut Vec<usize>,
) -> Result<UnpackSummary, UnpackError> {
    let limits = planner.limits;
    // Bound the zip reader's own memory first: it holds every central-directory record, and each
    // record starts with this signature, so the count bounds the records (data that happens to
    // contain the signature only makes the bound looser).
    let records = bytes.windows(4).filter(|w| *w == b"PK\x01\x02").count() as u64;
    if records > limits.max_entries {
        return Err(refuse(
            "<archive>",
            format!(
                "archive has up to {records} central-directory records, more than max_entries = {}",
                limits.max_entries
            ),
        ));
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| refuse("<archive>", format!("not a readable zip: {e}")))?;
    if zip.len() as u64 > limits.max_entries {
        return Err(refuse(
            "<archive>",
            format!(
                "archive has {} members, more than max_entries = {}",
                zip.len(),
                limits.max_entries
            ),
        ));
    }
    for i in 0..zip.len() {
        let f = zip
            .by_index_raw(i)
            .map_err(|e| refuse(format!("<member {i}>"), format!("unreadable: {e}")))?;
        let name = f.name_raw().to_vec();
        let mode = f.unix_mode();
        let mut kind = zip_kind(f.name(), mode);
        if let Some(c) = f.compressed_size().checked_mul(limits.max_ratio) {
            if f.size() > c.saturating_add(limits.ratio_slack_bytes) {
                return Err(refuse(
                    shown(&name),
                    format!(
                        "declares {} bytes from {} compressed, more than max_ratio = {}",
                        f.size(),
                        f.compressed_size(),
                        limits.max_ratio
                    ),
                ));
            }
        }
        if let RawKind::Symlink(_) = kind {
            // A zip symlink's target is its (stored) content; small by definition.
            if f.size() > limits.max_path_bytes as u64 || f.compressed_size() > 4096 {
                return Err(refuse(
                    shown(&name),
                    "symlink target longer than max_path_bytes",
                ));
            }
            drop(f);
            inflated.push(i);
            let mut g = zip
                .by_index(i)
                .map_err(|e| refuse(shown(&name), format!("unreadable: {e}")))?;
            let mut t = Vec::new();
            (&mut g)
                .take(limits.max_path_bytes as u64 + 1)
                .read_to_end(&mut t)
                .map_err(|e| refuse(shown(&name), format!("unreadable: {e}")))?;
            kind = RawKind::Symlink(t);
            planner.add(&name, kind, 0, mode.unwrap_or(0), None)?;
        } else {
            let size = if matches!(kind, RawKind::File) {
                f.size()
            } else {
                0
            };
            planner.add(&name, kind, size, mode.unwrap_or(0) & 0o7777, None)?;
        }
    }
    let mut w = Writer::start(planner, dest)?;
    // Match planned entries back to zip indices by name.
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (i, e) in planner.entries.iter().enumerate() {
        by_name.insert(e.comps.join("/"), i);
    }
    for i in 0..zip.len() {
        let name_raw = zip
            .by_index_raw(i)
            .map_err(|e| refuse(format!("<member {i}>"), format!("unreadable: {e}")))?
            .name_raw()
            .to_vec();
        let comps = components(&name_raw, limits)?;
        let Some(&pi) = by_name.get(&comps.join("/")) else {
            continue;
        };
        let e = &planner.entries[pi];
        match e.kind {
            Kind::Dir => w.dir_entry(&e.comps)?,
            Kind::File => match peeked.filter(|p| p.index == i && p.name_raw == name_raw) {
                // Written from the peek's bytes; `file` still refuses a length other than the declared size.
                Some(p) => w.file(e, &mut &p.data[..])?,
                None => {
                    inflated.push(i);
                    let mut f = zip.by_index(i).map_err(|err| {
                        refuse(format!("<member {i}>"), format!("unreadable: {err}"))
                    })?;
                    w.file(e, &mut f)?
                }
            },
            _ => {}
        }
    }
    w.links(&planner.entries)?;
    Ok(w.summary)
}

/// Largest GNU long-name/long-link or pax extension record accepted (the tar crate holds these in memory).
const MAX_TAR_META_BYTES: u64 = 64 * 1024;

fn tar_octal(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // GNU base-256: big-endian binary in the remaining bytes.
        let mut v: u64 = 0;
        for (i, b) in field.iter().enumerate() {
            let b = if i == 0 { b & 0x7f } else { *b };
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let s = std::str::from_utf8(field).ok()?;
    let s = s.trim_matches(|c: char| c == '\0' || c == ' ');
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

fn pax_size(records: &[u8]) -> Option<u64> {
    // Records are "LEN key=value\n"; only `size` matters for framing.
    let text = String::from_utf8_lossy(records);
    text.lines()
        .filter_map(|l| l.split_once(' ').map(|(_, kv)| kv))
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "size")
        .filter_map(|(_, v)| v.trim().parse().ok())
        .next_back()
}

/// A reader [`raw_tar_check`] skips members' data in: a tar held in memory by moving past the bytes (no copy of
/// them), an inflating stream by reading them (it must inflate them into its spool).
trait SkipRead: Read {
    /// Skips exactly `n` bytes (`UnexpectedEof` when fewer are left), reading through `sink` if need be.
    fn skip(&mut self, n: u64, sink: &mut [u8]) -> io::Result<()> {
        let mut left = n;
        while left > 0 {
            let k = usize::try_from(left).unwrap_or(usize::MAX).min(sink.len());
            self.read_exact(&mut sink[..k])?;
            left -= k as u64;
        }
        Ok(())
    }
}

impl SkipRead for &[u8] {
    fn skip(&mut self, n: u64, _sink: &mut [u8]) -> io::Result<()> {
        match usize::try_from(n).ok().filter(|n| *n <= self.len()) {
            Some(n) => {
                *self = &self[n..];
                Ok(())
            }
            None => {
                // What reading would have done: consume the rest, then fail.
                *self = &self[self.len()..];
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                ))
            }
        }
    }
}

impl<R: Read, W: Write> SkipRead for Tee<R, W> {}

/// Pass 0 over raw tar headers: bounds metadata records (held in memory by the tar reader), the declared
/// total and the entry count before the tar crate reads anything; all in constant memory.
fn raw_tar_check(r: &mut dyn SkipRead, planner: &Planner) -> Result<(), UnpackError> {
    let limits = planner.limits;
    let mut block = [0u8; 512];
    let mut total: u64 = 0;
    let mut count: u64 = 0;
    let mut next_size: Option<u64> = None;
    let mut sink = [0u8; 8192];
    loop {
        match r.read_exact(&mut block) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(refuse("<archive>", format!("unreadable: {e}"))),
        }
        if block.iter().all(|b| *b == 0) {
            return Ok(());
        }
        count += 1;
        let name = shown(block[..100].split(|b| *b == 0).next().unwrap_or_default());
        if count > limits.max_entries.saturating_mul(4).saturating_add(16) {
            return Err(refuse(
                name,
                format!(
                    "archive has more than max_entries = {} members",
                    limits.max_entries
                ),
            ));
        }
        let header_size = tar_octal(&block[124..136])
            .ok_or_else(|| refuse(name.clone(), "size field is not a number"))?;
        let kind = block[156];
        let size = match kind {
            b'x' | b'g' | b'L' | b'K' => header_size,
            _ => next_size.take().unwrap_or(header_size),
        };
        // Every entry type is framed by its size, as the tar reader frames it (links and directories
        // normally say 0); all of it counts against the limits.
        let data_size = size;
        match kind {
            b'x' | b'g' | b'L' | b'K' => {
                if size > MAX_TAR_META_BYTES {
                    return Err(refuse(
                        name,
                        format!(
                            "tar metadata record of {size} bytes (more than {MAX_TAR_META_BYTES})"
                        ),
                    ));
                }
                let mut rec = vec![0u8; size as usize];
                r.read_exact(&mut rec)
                    .map_err(|e| refuse(name.clone(), format!("truncated: {e}")))?;
                if kind == b'x' {
                    next_size = pax_size(&rec);
                }
                let pad = (512 - size % 512) % 512;
                io::copy(&mut r.take(pad), &mut io::sink())
                    .map_err(|e| refuse(name.clone(), format!("truncated: {e}")))?;
                continue;
            }
            b'0' | 0 | b'7' | b'1' | b'2' | b'5' | b'3' | b'4' | b'6' => {}
            b'S' => return Err(refuse(name, "GNU sparse file entries are not allowed")),
            other => {
                return Err(refuse(
                    name,
                    format!(
                        "tar entry type `{}` is not allowed",
                        char::from(other).escape_default()
                    ),
                ))
            }
        }
        total = total.saturating_add(data_size);
        if total > limits.max_unpacked_bytes {
            return Err(refuse(
                name,
                format!(
                    "unpacked size would reach {total} bytes, more than max_unpacked_bytes = {}",
                    limits.max_unpacked_bytes
                ),
            ));
        }
        if let Some(clen) = planner.compressed_len {
            let allowed = limits
                .max_ratio
                .saturating_mul(clen)
                .saturating_add(limits.ratio_slack_bytes);
            if total > allowed {
                return Err(refuse(
                    name,
                    format!(
                        "unpacked size would reach {total} bytes from {clen} archive bytes, more than \
                         max_ratio = {} (plus ratio_slack_bytes = {})",
                        limits.max_ratio, limits.ratio_slack_bytes
                    ),
                ));
            }
        }
        r.skip(data_size.div_ceil(512) * 512, &mut sink)
            .map_err(|e| refuse(name.clone(), format!("truncated: {e}")))?;
    }
}

/// The metadata pass over a tar stream whose raw headers were checked ([`OpenedArchive::open`]).
fn plan_tar(source: &TarSource, planner: &mut Planner) -> Result<(), UnpackError> {
    // Headers only: the members' data is seeked over, never read (the write pass reads it once).
    let mut ar = tar::Archive::new(source.seekable()?);
    let entries = ar
        .entries_with_seek()
        .map_err(|e| refuse("<archive>", format!("not a readable tar: {e}")))?;
    for (index, entry) in entries.enumerate() {
        let index = index + 1;
        let entry = entry
            .map_err(|e| refuse(format!("<member {index}>"), format!("unreadable tar: {e}")))?;
        let name = entry.path_bytes().into_owned();
        let link = entry.link_name_bytes().map(|c| c.into_owned());
        let kind = tar_kind(entry.header().entry_type(), link);
        let mode = entry
            .header()
            .mode()
            .map_err(|e| refuse(shown(&name), format!("bad mode field: {e}")))?;
        let size = if matches!(kind, RawKind::File) {
            entry.size()
        } else {
            0
        };
        planner.add(&name, kind, size, mode, None)?;
        // Dropping `entry` here means the next iteration skips its data; the size limit above has already
        // refused any member too large to skip within the budget.
    }
    Ok(())
}

/// The write pass over the same tar stream.
fn write_tar(source: &TarSource, planner: &Planner, w: &mut Writer) -> Result<(), UnpackError> {
    let mut ar = tar::Archive::new(source.reader()?);
    let entries = ar
        .entries()
        .map_err(|e| refuse("<archive>", format!("not a readable tar: {e}")))?;
    let mut by_name: HashMap<&[String], usize> = HashMap::new();
    for (i, e) in planner.entries.iter().enumerate() {
        by_name.insert(&e.comps, i);
    }
    for entry in entries {
        let mut entry = entry.map_err(|e| refuse("<archive>", format!("unreadable tar: {e}")))?;
        let comps = components(&entry.path_bytes(), planner.limits)?;
        let Some(&i) = by_name.get(comps.as_slice()) else {
            continue;
        };
        let e = &planner.entries[i];
        match e.kind {
            Kind::Dir => w.dir_entry(&e.comps)?,
            Kind::File => w.file(e, &mut entry)?,
            _ => {}
        }
    }
    Ok(())
}

/// Copies a directory bundle into `dest` (created here) under the same rules as an archive; a file that
/// changes between the two passes is refused.
pub fn copy_dir(
    src: &Path,
    dest: &Path,
    limits: &IntakeLimits,
) -> Result<UnpackSummary, UnpackError> {
    let planner = plan_dir(src, limits, &[])?;
    copy_planned(src, dest, &planner)
}

/// The rules [`copy_dir`] applies (names, links resolving inside the tree, special files, setuid bits, letter
/// case, sizes and counts), checked on the directory tree `src` in place, writing nothing; the top-level
/// entries named in `skip_top` (a `.git` the caller made itself) are left out. Returns what a copy would
/// hold.
pub fn check_dir(
    src: &Path,
    limits: &IntakeLimits,
    skip_top: &[&str],
) -> Result<UnpackSummary, UnpackError> {
    let planner = plan_dir(src, limits, skip_top)?;
    planner.finish()?;
    let mut s = UnpackSummary {
        entries: planner.count,
        files: 0,
        bytes: planner.total,
        symlinks: 0,
        hardlinks: 0,
    };
    for e in &planner.entries {
        match e.kind {
            Kind::File => s.files += 1,
            Kind::Symlink(_) => s.symlinks += 1,
            Kind::Hardlink(_) => s.hardlinks += 1,
            Kind::Dir => {}
        }
    }
    Ok(s)
}

/// Pass 1 of [`copy_dir`] and [`check_dir`] over a directory tree.
fn plan_dir<'a>(
    src: &Path,
    limits: &'a IntakeLimits,
    skip_top: &[&str],
) -> Result<Planner<'a>, UnpackError> {
    let mut planner = Planner::new(limits, None);
    let mut stack: Vec<(PathBuf, Vec<String>)> = vec![(src.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        let mut names: Vec<_> = fs::read_dir(&dir)
            .map_err(|e| io_refuse(&rel.join("/"), "cannot list directory", e))?
            .map(|d| d.map(|d| d.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| io_refuse(&rel.join("/"), "cannot list directory", e))?;
        names.sort();
        for name in names {
            let Some(name) = name.to_str().map(str::to_string) else {
                return Err(refuse(rel.join("/"), "a file name is not UTF-8"));
            };
            if rel.is_empty() && skip_top.contains(&name.as_str()) {
                continue;
            }
            let mut r = rel.clone();
            r.push(name.clone());
            let full = dir.join(&name);
            let who = r.join("/");
            let m =
                fs::symlink_metadata(&full).map_err(|e| io_refuse(&who, "cannot inspect", e))?;
            let ft = m.file_type();
            use std::os::unix::fs::FileTypeExt;
            let kind = if ft.is_dir() {
                RawKind::Dir
            } else if ft.is_file() {
                RawKind::File
            } else if ft.is_symlink() {
                let t = fs::read_link(&full).map_err(|e| io_refuse(&who, "cannot read link", e))?;
                RawKind::Symlink(t.into_os_string().into_encoded_bytes())
            } else if ft.is_fifo() {
                RawKind::Special("FIFO")
            } else if ft.is_socket() {
                RawKind::Special("socket")
            } else if ft.is_char_device() {
                RawKind::Special("character device")
            } else if ft.is_block_device() {
                RawKind::Special("block device")
            } else {
                RawKind::Special("unknown file type")
            };
            let is_dir = matches!(kind, RawKind::Dir);
            let size = if matches!(kind, RawKind::File) {
                m.len()
            } else {
                0
            };
            planner.add(
                who.as_bytes(),
                kind,
                size,
                m.permissions().mode(),
                Some((m.dev(), m.ino())),
            )?;
            if is_dir {
                stack.push((full, r));
            }
        }
    }
    Ok(planner)
}

/// Pass 2 of [`copy_dir`]: the planned tree written into `dest`.
fn copy_planned(src: &Path, dest: &Path, planner: &Planner) -> Result<UnpackSummary, UnpackError> {
    let mut w = Writer::start(planner, dest)?;
    for e in &planner.entries {
        match e.kind {
            Kind::Dir => w.dir_entry(&e.comps)?,
            Kind::File => {
                let mut p = src.to_path_buf();
                p.extend(&e.comps);
                let who = e.comps.join("/");
                let f = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&p)
                    .map_err(|err| io_refuse(&who, "cannot open", err))?;
                let m = f
                    .metadata()
                    .map_err(|err| io_refuse(&who, "cannot inspect", err))?;
                if Some((m.dev(), m.ino())) != e.ident || !m.file_type().is_file() {
                    return Err(refuse(who, "changed while intake was reading the bundle"));
                }
                w.file(e, &mut &f)?;
            }
            _ => {}
        }
    }
    w.links(&planner.entries)?;
    Ok(w.summary)
}

/// Checks an unpacked tree after the fact: no symlink resolves outside it, no setuid/setgid file, no
/// special file. Returns the number of entries seen.
pub fn verify_tree(root: &Path) -> Result<u64, UnpackError> {
    let canon_root =
        fs::canonicalize(root).map_err(|e| io_refuse("<target>", "cannot resolve", e))?;
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for d in fs::read_dir(&dir).map_err(|e| io_refuse("<target>", "cannot list", e))? {
            let d = d.map_err(|e| io_refuse("<target>", "cannot list", e))?;
            let p = d.path();
            let who = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            let m = fs::symlink_metadata(&p).map_err(|e| io_refuse(&who, "cannot inspect", e))?;
            n += 1;
            if m.permissions().mode() & 0o6000 != 0 {
                return Err(refuse(who, "setuid/setgid bit present after unpacking"));
            }
            if m.file_type().is_symlink() {
                if let Ok(c) = fs::canonicalize(&p) {
                    if !c.starts_with(&canon_root) {
                        return Err(refuse(who, "symlink resolves outside the tree"));
                    }
                }
            } else if m.file_type().is_dir() {
                stack.push(p);
            } else if !m.file_type().is_file() {
                return Err(refuse(who, "special file present after unpacking"));
            }
        }
    }
    Ok(n)
}

/// Reads at most `limit` bytes of a file, refusing a larger one (used by stage 1 to hold an archive in
/// memory so that both passes see the same bytes).
pub fn read_limited(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let f = File::open(path)?;
    let mut buf = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Ok(None);
    }
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(v: &[(&str, &str)]) -> HashMap<Vec<String>, String> {
        v.iter()
            .map(|(p, t)| (p.split('/').map(str::to_string).collect(), t.to_string()))
            .collect()
    }

    #[test]
    fn check_dir_applies_copy_dir_s_rules_in_place_leaving_out_what_it_is_told() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path();
        fs::write(p.join("a"), "12345").expect("write");
        fs::create_dir(p.join(".git")).expect("mkdir");
        std::os::unix::fs::symlink("/etc/passwd", p.join(".git/outside")).expect("symlink");
        let limits = IntakeLimits::default();
        let s = check_dir(p, &limits, &[".git"]).expect("accepted without .git");
        assert_eq!((s.entries, s.files, s.bytes), (1, 1, 5));
        let e = check_dir(p, &limits, &[]).expect_err("the absolute link");
        assert!(e.reason.contains("absolute symlink"), "{e:?}");
        fs::remove_file(p.join(".git/outside")).expect("rm");
        std::os::unix::fs::symlink("../../x", p.join("up")).expect("symlink");
        let e = check_dir(p, &limits, &[".git"]).expect_err("a link leaving the tree");
        assert_eq!(e.member, "up");
        assert!(e.reason.contains("leaves the unpacked tree"), "{e:?}");
        fs::remove_file(p.join("up")).expect("rm");
        fs::write(p.join("A"), "").expect("write");
        let e = check_dir(p, &limits, &[".git"]).expect_err("letter case");
        assert!(e.reason.contains("letter case"), "{e:?}");
    }

    #[test]
    fn resolver_follows_links_like_the_kernel() {
        // p/q -> .. is the root; l -> p/q/.. would be the root's parent: outside, although lexically inside.
        let l = links(&[("p/q", ".."), ("l", "p/q/..")]);
        assert_eq!(resolve_in_tree(&l, &["p".into()], ".."), Some(vec![]));
        assert_eq!(resolve_in_tree(&l, &[], "p/q/.."), None);
        let l = links(&[("a", "b"), ("b", "a")]);
        assert_eq!(resolve_in_tree(&l, &[], "a"), None, "loop");
        let l = links(&[("d", "x/y")]);
        assert_eq!(
            resolve_in_tree(&l, &[], "d/../z"),
            Some(vec!["x".to_string(), "z".to_string()])
        );
        assert_eq!(resolve_in_tree(&l, &[], "../etc"), None);
        assert_eq!(resolve_in_tree(&l, &[], "/etc"), None);
    }

    fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::default(),
        ));
        for (name, data) in files {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, name, *data).expect("append");
        }
        b.into_inner().expect("tar").finish().expect("gz")
    }

    #[test]
    fn a_tar_gz_is_inflated_once_into_a_spool_that_every_pass_reads() {
        let d = tempfile::tempdir().expect("tmp");
        let bytes = tar_gz(&[("job.toml", b"[test]\n"), ("repo/a.txt", b"hello")]);
        let lim = IntakeLimits::default();
        let spools = |d: &Path| {
            fs::read_dir(d)
                .expect("dir")
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".inflated-"))
                })
                .count()
        };
        let opened = OpenedArchive::open(&bytes, ArchiveFormat::TarGz, d.path(), &lim);
        assert!(opened.checked.is_ok());
        assert!(matches!(opened.tar, Some(TarSource::Spool(_))));
        assert_eq!(spools(d.path()), 1);
        // The peek and both unpack passes read the spool: the gzip bytes are not looked at again.
        assert_eq!(
            opened.peek_file("job.toml").as_deref(),
            Some(&b"[test]\n"[..])
        );
        let dest = d.path().join("out");
        let s = opened.unpack(&dest).expect("unpack");
        assert_eq!(s.files, 2);
        assert_eq!(fs::read(dest.join("repo/a.txt")).expect("read"), b"hello");
        drop(opened);
        assert_eq!(spools(d.path()), 0, "the spool is removed with the archive");
        // A stream whose raw headers fail the check is refused by `unpack`, and the peek finds nothing.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&[b'a'; 1024]).expect("gz");
        let bad = gz.finish().expect("gz");
        let opened = OpenedArchive::open(&bad, ArchiveFormat::TarGz, d.path(), &lim);
        let err = opened.checked.clone().expect_err("junk headers");
        assert!(err.reason.contains("size field"), "{err}");
        assert!(opened.peek_file("job.toml").is_none());
        assert_eq!(opened.unpack(&d.path().join("bad")), Err(err));
    }

    fn zip_of(files: &[(&str, &[u8])], link: (&str, &str)) -> Vec<u8> {
        let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in files {
            z.start_file(*name, opts).expect("start");
            z.write_all(data).expect("write");
        }
        z.add_symlink(link.0, link.1, opts).expect("link");
        z.finish().expect("zip").into_inner()
    }

    #[test]
    fn a_zip_member_is_inflated_once_even_when_the_job_file_was_peeked() {
        let d = tempfile::tempdir().expect("tmp");
        let lim = IntakeLimits::default();
        let bytes = zip_of(
            &[("job.toml", b"[test]\n"), ("repo/a.txt", b"hello")],
            ("repo/l", "a.txt"),
        );
        let opened = OpenedArchive::open(&bytes, ArchiveFormat::Zip, d.path(), &lim);
        assert_eq!(
            opened.peek_file("job.toml").as_deref(),
            Some(&b"[test]\n"[..])
        );
        // A second peek answers from what the first one inflated.
        assert_eq!(
            opened.peek_file("job.toml").as_deref(),
            Some(&b"[test]\n"[..])
        );
        let dest = d.path().join("out");
        let s = opened.unpack(&dest).expect("unpack");
        assert_eq!(s.files, 2);
        assert_eq!(fs::read(dest.join("job.toml")).expect("read"), b"[test]\n");
        assert_eq!(fs::read(dest.join("repo/a.txt")).expect("read"), b"hello");
        let mut inflated = opened.inflated.borrow().clone();
        inflated.sort_unstable();
        assert_eq!(inflated, vec![0, 1, 2], "each member inflated exactly once");

        // Without a peek every member is inflated by the unpack, once.
        let opened = OpenedArchive::open(&bytes, ArchiveFormat::Zip, d.path(), &lim);
        opened.unpack(&d.path().join("out2")).expect("unpack");
        let mut inflated = opened.inflated.borrow().clone();
        inflated.sort_unstable();
        assert_eq!(inflated, vec![0, 1, 2]);

        // A peeked member whose stored bytes are not the declared size is still refused by the write pass.
        let opened = OpenedArchive::open(&bytes, ArchiveFormat::Zip, d.path(), &lim);
        opened.peek_file("job.toml").expect("peek");
        opened
            .peeked
            .borrow_mut()
            .as_mut()
            .expect("peeked")
            .data
            .push(b'x');
        let err = opened.unpack(&d.path().join("out3")).expect_err("size");
        assert!(err.reason.contains("declared"), "{err}");
    }

    /// A tar of (name, Some(data)) files and (name, None) directories, in the order given.
    fn tar_of(members: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut h = tar::Header::new_gnu();
            match data {
                Some(d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(0o644);
                    h.set_size(d.len() as u64);
                    b.append_data(&mut h, name, *d).expect("append");
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(0o755);
                    h.set_size(0);
                    b.append_data(&mut h, name, io::empty()).expect("append");
                }
            }
        }
        b.into_inner().expect("tar")
    }

    /// The header passes move past members' data (a plain tar in memory) or seek over it (the metadata pass)
    /// instead of reading it; every byte still arrives in the write pass, and a tar cut inside a member's data
    /// is still refused as truncated, plain or compressed.
    #[test]
    fn members_data_is_skipped_by_the_header_passes_and_a_cut_tar_is_still_truncated() {
        let d = tempfile::tempdir().expect("tmp");
        let lim = IntakeLimits::default();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let bytes = tar_of(&[
            ("job.toml", Some(b"[test]\n")),
            ("repo/", None),
            ("repo/big.bin", Some(&big)),
            ("repo/odd.txt", Some(b"seven b")),
        ]);
        let dest = d.path().join("whole");
        let s = unpack_archive(&bytes, ArchiveFormat::Tar, &dest, &lim).expect("unpack");
        assert_eq!(s.files, 3);
        assert!(fs::read(dest.join("repo/big.bin")).expect("read") == big);
        assert_eq!(
            fs::read(dest.join("repo/odd.txt")).expect("read"),
            b"seven b"
        );

        // Cut inside big.bin's data: the raw check refuses it before anything is written.
        let cut = &bytes[..512 * 4 + 100_000];
        let e = unpack_archive(cut, ArchiveFormat::Tar, &d.path().join("cut"), &lim)
            .expect_err("truncated");
        assert!(e.reason.contains("truncated"), "{e}");
        assert!(!d.path().join("cut/repo/big.bin").exists());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(cut).expect("gzip");
        let gz = gz.finish().expect("gzip");
        let e = unpack_archive(&gz, ArchiveFormat::TarGz, &d.path().join("cutgz"), &lim)
            .expect_err("truncated");
        assert!(e.reason.contains("truncated"), "{e}");

        // The slice skip itself: exact, and past the end an EOF that consumes the rest.
        let mut r: &[u8] = b"0123456789";
        r.skip(4, &mut [0u8; 2]).expect("skip");
        assert_eq!(r, b"456789");
        let e = r.skip(7, &mut [0u8; 2]).expect_err("past the end");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(r.is_empty());
    }

    #[test]
    fn a_directory_entry_before_its_parent_creates_the_parent() {
        let d = tempfile::tempdir().expect("tmp");
        let lim = IntakeLimits::default();
        // `repo/.git/` before `repo/`, and `x/y/z/` whose parents are never listed.
        let bytes = tar_of(&[
            ("job.toml", Some(b"[test]\n")),
            ("repo/.git/", None),
            ("repo/.git/HEAD", Some(b"ref: refs/heads/main\n")),
            ("repo/", None),
            ("repo/a.txt", Some(b"hello")),
            ("x/y/z/", None),
        ]);
        let dest = d.path().join("out");
        let s = unpack_archive(&bytes, ArchiveFormat::Tar, &dest, &lim).expect("unpack");
        assert_eq!(s.files, 3);
        assert!(dest.join("repo/.git").is_dir());
        assert_eq!(
            fs::read(dest.join("repo/.git/HEAD")).expect("read"),
            b"ref: refs/heads/main\n"
        );
        assert!(dest.join("x/y/z").is_dir());
        // A directory entry beneath a symlink is still refused, wherever the link comes in the archive.
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        b.append_link(&mut h, "l", "repo").expect("link");
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, "l/sub/", io::empty()).expect("dir");
        let bytes = b.into_inner().expect("tar");
        let err = unpack_archive(&bytes, ArchiveFormat::Tar, &d.path().join("out2"), &lim)
            .expect_err("beneath a link");
        assert!(err.reason.contains("not a directory"), "{err}");
        assert!(!d.path().join("repo/sub").exists());
    }

    #[test]
    fn names() {
        let lim = IntakeLimits::default();
        for bad in [
            &b"../x"[..],
            b"a/../../x",
            b"/etc/passwd",
            b"C:/x",
            b"c:x",
            b"a\\..\\b",
            b"a\nb",
            b"\xff",
        ] {
            assert!(components(bad, &lim).is_err(), "{}", shown(bad));
        }
        assert_eq!(
            components(b"./a//b/./c", &lim).expect("ok"),
            ["a", "b", "c"]
        );
        let long = vec![b'a'; 256];
        assert!(components(&long, &lim).is_err());
        assert!(components(&[b'a'; 2000], &lim).is_err());
    }
}
