//! The repository of a run: copied (directory), unpacked (`.tar`, `.tar.gz`) or unbundled (git bundle) into
//! the run's own tree by the trusted runner before any untrusted code; its commit checked (HEAD read as data,
//! the working tree compared with HEAD's tree), the patch applied with `git apply`'s semantics, the tree hash
//! recorded, and the test command detected when the job has none. Nothing of the repository is executed or
//! configures what is: see [`prepare`].

use super::gitdir;
use super::protect::{ProtectError, Protected};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why the repository could not be prepared; every variant is a refusal of the run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepoError {
    /// The repository input is missing or of a kind we do not read.
    #[error("repository {path}: {reason}")]
    Input {
        /// The input path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The commit the job claims is not the repository's.
    #[error("commit mismatch: the job claims {claimed}, the repository is at {actual}")]
    Commit {
        /// What the job claims.
        claimed: String,
        /// What HEAD is (or why it could not be read).
        actual: String,
    },
    /// The commit could not be verified (an unreadable or refused `.git`, a missing or forged object).
    #[error("{}", match claimed {
        Some(c) => format!("the claimed commit {c} cannot be verified: {reason}"),
        None => format!("the commit cannot be verified: {reason}"),
    })]
    CommitUnverified {
        /// What the job claims, if anything.
        claimed: Option<String>,
        /// Why.
        reason: String,
    },
    /// The working tree before the patch is not the tree of HEAD.
    #[error("the working tree is not the tree of commit {commit}: {path}: {what}")]
    TreeDiffers {
        /// HEAD.
        commit: String,
        /// The first differing path.
        path: String,
        /// How it differs.
        what: String,
    },
    /// The patch does not apply.
    #[error("patch {path} does not apply: {reason}")]
    Patch {
        /// The patch file.
        path: PathBuf,
        /// git apply's own message.
        reason: String,
    },
    /// A file operation of the copy failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Copying the protected paths failed.
    #[error(transparent)]
    Protect(#[from] ProtectError),
    /// A fetched repository's tree breaks a rule intake's stage 2 applies to a bundled one (a symbolic link
    /// leaving the tree, a name, a size or a count over the limits, two names differing only in case).
    #[error("the fetched repository's `{member}`: {reason}")]
    Unpack {
        /// The entry at fault, relative to the repository.
        member: String,
        /// The rule it breaks, in intake's words.
        reason: String,
    },
    /// git failed where it must not (not a refusal of the patch).
    #[error("git {what}: {reason}")]
    Git {
        /// The git operation.
        what: String,
        /// Its message.
        reason: String,
    },
}

impl RepoError {
    /// The verdict's refusal stage for this error (`repository`, `commit`, `patch`).
    pub fn stage(&self) -> &'static str {
        match self {
            RepoError::Commit { .. }
            | RepoError::CommitUnverified { .. }
            | RepoError::TreeDiffers { .. } => "commit",
            RepoError::Patch { .. } => "patch",
            RepoError::Protect(_) => "protect",
            RepoError::Unpack { .. } => "unpack",
            _ => "repository",
        }
    }
}

/// What the prepared repository is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// HEAD of the repository, set only when the working tree before the patch was exactly HEAD's tree.
    pub commit: Option<String>,
    /// Git tree object id of the working tree after the patch (every file, `.git` excluded).
    pub tree: String,
    /// SHA-256 of the patch, when there is one.
    pub patch_sha256: Option<String>,
    /// What the verdict should say about the preparation (why a git repository's commit is not recorded).
    pub notes: Vec<String>,
    /// A fetched repository's stage-5 findings ([`intake::scan::scan_repository`] on the checked-out tree, as
    /// intake records them for a bundled one); empty for a repository intake already scanned.
    pub scan: Vec<intake::Finding>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RepoError + '_ {
    move |source| RepoError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A git command for the trusted runner: no system or global configuration, no hooks, no fsmonitor, no
/// transport (`protocol.allow=never`), no lazy fetch of missing objects, no replace objects, no prompts, and
/// no discovery of repositories above `cwd`. Every use also names its `GIT_DIR`, one of ours: a scratch
/// directory or the one `git init` just made; never a repository's own.
fn git(cwd: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(cwd)
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "safe.directory=*",
            "-c",
            "protocol.allow=never",
            "-c",
            "transfer.fsckObjects=true",
        ])
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        )
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TEMPLATE_DIR", "")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("HOME", "/nonexistent")
        .env("LANG", "C")
        .stdin(Stdio::null());
    if let Some(parent) = cwd.parent() {
        cmd.env("GIT_CEILING_DIRECTORIES", parent);
    }
    cmd
}

fn run_git(mut cmd: Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run git ({what}): {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Err(if err.is_empty() {
            format!("git {what} failed ({})", out.status)
        } else {
            err
        })
    }
}

/// The kind of repository input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A directory.
    Directory,
    /// A tarball (`.tar`, or gzip-compressed).
    Tar {
        /// Whether it is gzip-compressed.
        gzip: bool,
    },
    /// A git bundle (`# v2 git bundle` or `# v3 git bundle` header).
    GitBundle,
}

/// Tells what `path` is from its metadata and first bytes.
pub fn input_kind(path: &Path) -> Result<InputKind, RepoError> {
    let meta = fs::metadata(path).map_err(|e| RepoError::Input {
        path: path.to_owned(),
        reason: format!("cannot be read: {e}"),
    })?;
    if meta.is_dir() {
        return Ok(InputKind::Directory);
    }
    let mut head = [0u8; 512];
    let mut f = fs::File::open(path).map_err(io(path))?;
    let n = f.read(&mut head).map_err(io(path))?;
    let head = &head[..n];
    if head.starts_with(b"# v2 git bundle") || head.starts_with(b"# v3 git bundle") {
        Ok(InputKind::GitBundle)
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Ok(InputKind::Tar { gzip: true })
    } else if head.len() >= 262 && &head[257..262] == b"ustar" {
        Ok(InputKind::Tar { gzip: false })
    } else {
        Err(RepoError::Input {
            path: path.to_owned(),
            reason: "neither a directory, a tarball (.tar, .tar.gz) nor a git bundle".into(),
        })
    }
}

/// Copies, unpacks or unbundles `source` into `dest` (which must not exist), checks the commit (HEAD, its tree
/// against the working tree, the job's `commit` claim), applies `patch`, and records the commit and tree.
///
/// No program runs with anything of the repository: HEAD, refs, the commit and its trees are read as data
/// ([`gitdir`]); git runs only to unpack a bundle and to apply the patch, with configuration of our own.
pub fn prepare(
    source: &Path,
    dest: &Path,
    commit: Option<&str>,
    patch: Option<&Path>,
) -> Result<Prepared, RepoError> {
    prepare_protected(source, dest, commit, patch, None).map(|(p, _)| p)
}

/// [`prepare`], and where `protect` names globs and a store, a copy of the protected paths of the repository as
/// received (after the commit check, before the patch) kept in the store ([`Protected::snapshot`]).
pub fn prepare_protected(
    source: &Path,
    dest: &Path,
    commit: Option<&str>,
    patch: Option<&Path>,
    protect: Option<(&[String], &Path)>,
) -> Result<(Prepared, Option<Protected>), RepoError> {
    match input_kind(source)? {
        InputKind::Directory => copy_tree(source, dest)?,
        InputKind::Tar { gzip } => {
            fs::create_dir_all(dest).map_err(io(dest))?;
            let f = fs::File::open(source).map_err(io(source))?;
            let reader: Box<dyn Read> = if gzip {
                Box::new(flate2::read::GzDecoder::new(f))
            } else {
                Box::new(f)
            };
            let mut ar = tar::Archive::new(reader);
            ar.set_preserve_permissions(false);
            ar.set_preserve_ownerships(false);
            ar.set_unpack_xattrs(false);
            ar.set_overwrite(false);
            ar.unpack(dest).map_err(|e| RepoError::Input {
                path: source.to_owned(),
                reason: format!("unpacking: {e}"),
            })?;
        }
        InputKind::GitBundle => unbundle(source, dest)?,
    }
    finish(dest, commit, patch, protect)
}

/// A repository the fence fetched by `repository.url` ([`super::fetch`]): `fetched` is the directory the
/// sandboxed `git fetch` wrote (its `.git` only), `pin` the job's full commit id. Its object store is moved into
/// a `.git` the runner made itself ([`materialise_fetched`]), the pinned commit's tree checked out as data, then
/// the same steps as [`prepare_protected`] (the commit checked against the pin, the patch, the tree hash).
pub fn prepare_fetched(
    fetched: &Path,
    dest: &Path,
    pin: &str,
    patch: Option<&Path>,
    protect: Option<(&[String], &Path)>,
) -> Result<(Prepared, Option<Protected>), RepoError> {
    materialise_fetched(fetched, dest, pin)?;
    let scan = judge_fetched(dest, &intake::IntakeLimits::default())?;
    let (mut prepared, protected) = finish(dest, Some(pin), patch, protect)?;
    prepared.scan = scan;
    Ok((prepared, protected))
}

/// What intake does to a bundled repository, done to a fetched one's checked-out tree before the patch: stage
/// 2's rules on every entry ([`intake::unpack::check_dir`]: names, symbolic links resolving inside the tree,
/// letter case, sizes and counts; a breach refuses the run at stage `unpack`), then stage 5's scan
/// ([`intake::scan::scan_repository`]: install hooks, `.gitmodules`, cargo configuration...), whose findings are
/// returned. The `.git` is the runner's own ([`materialise_fetched`]), so its rules and findings are not the
/// repository's: it is left out of both.
pub fn judge_fetched(
    dest: &Path,
    limits: &intake::IntakeLimits,
) -> Result<Vec<intake::Finding>, RepoError> {
    intake::unpack::check_dir(dest, limits, &[".git"]).map_err(|e| RepoError::Unpack {
        member: e.member,
        reason: e.reason,
    })?;
    Ok(intake::scan::scan_repository(dest, limits)
        .into_iter()
        .filter(|f| f.location != ".git" && !f.location.starts_with(".git/"))
        .collect())
}

/// The steps after the repository is in `dest`: the commit checked, the protected paths kept, the patch
/// applied, the tree hashed.
fn finish(
    dest: &Path,
    commit: Option<&str>,
    patch: Option<&Path>,
    protect: Option<(&[String], &Path)>,
) -> Result<(Prepared, Option<Protected>), RepoError> {
    let mut notes = Vec::new();
    let commit = match verify_commit(dest, commit) {
        Ok(c) => c,
        Err(e) if commit.is_some() => return Err(e),
        Err(e) => {
            notes.push(format!(
                "the repository's HEAD commit is not recorded in inputs.commit: {e}"
            ));
            None
        }
    };
    let protected = match protect {
        Some((globs, store)) if !globs.is_empty() => Some(Protected::snapshot(dest, globs, store)?),
        _ => None,
    };
    let patch_sha256 = match patch {
        Some(p) => {
            let bytes = fs::read(p).map_err(|e| RepoError::Patch {
                path: p.to_owned(),
                reason: format!("cannot be read: {e}"),
            })?;
            let abs = fs::canonicalize(p).map_err(io(p))?;
            // Applied with a scratch GIT_DIR: the repository's own .git (config, info/attributes) is never
            // read, so a filter driver it defines cannot run here, outside the fence.
            let scratch = ScratchGit::new(dest)?;
            let check = scratch.cmd([
                std::ffi::OsStr::new("apply"),
                "--check".as_ref(),
                abs.as_os_str(),
            ]);
            run_git(check, "apply --check").map_err(|reason| RepoError::Patch {
                path: p.to_owned(),
                reason,
            })?;
            let apply = scratch.cmd([std::ffi::OsStr::new("apply"), abs.as_os_str()]);
            run_git(apply, "apply").map_err(|reason| RepoError::Patch {
                path: p.to_owned(),
                reason,
            })?;
            Some(hex::encode(Sha256::digest(&bytes)))
        }
        None => None,
    };
    let tree = tree_hash(dest)?;
    Ok((
        Prepared {
            commit,
            tree,
            patch_sha256,
            notes,
            scan: Vec::new(),
        },
        protected,
    ))
}

/// HEAD of the repository copy at `dest` when its working tree is exactly HEAD's tree (`Ok(None)`: not a git
/// repository, and no claim). Refused (stage `commit`): a claim for a repository that is not git, a claim
/// that HEAD does not match, a `.git` the runner does not follow ([`gitdir::open`]), an unreadable or
/// forged HEAD commit or tree, and a working tree that is not HEAD's tree (naming the first differing path).
fn verify_commit(dest: &Path, claimed: Option<&str>) -> Result<Option<String>, RepoError> {
    let unverified = |reason: String| RepoError::CommitUnverified {
        claimed: claimed.map(str::to_owned),
        reason,
    };
    // A full pin lets a shallow `.git` whose history is cut at exactly that commit through
    // ([`gitdir::open_pinned`]); nothing else about the checks changes.
    let pin = claimed
        .filter(|c| c.len() == 40)
        .and_then(|c| gix_hash::ObjectId::from_hex(c.as_bytes()).ok());
    let git = match gitdir::open_pinned(dest, pin.as_ref()) {
        Ok(Some(g)) => g,
        Ok(None) => {
            return match claimed {
                Some(c) => Err(RepoError::Commit {
                    claimed: c.into(),
                    actual: "none (the repository is not a git repository)".into(),
                }),
                None => Ok(None),
            }
        }
        Err(e) => return Err(unverified(e.to_string())),
    };
    let head = git.head().map_err(|e| unverified(e.to_string()))?;
    let head_hex = head.to_string();
    if let Some(claimed) = claimed {
        let c = claimed.trim().to_ascii_lowercase();
        if c.len() < 7 || !c.bytes().all(|b| b.is_ascii_hexdigit()) || !head_hex.starts_with(&c) {
            return Err(RepoError::Commit {
                claimed: claimed.into(),
                actual: head_hex,
            });
        }
    }
    let tree = git
        .commit_tree(&head)
        .map_err(|e| unverified(e.to_string()))?;
    git.check_worktree(&tree, dest).map_err(|e| match e {
        gitdir::GitError::Differs { path, what } => RepoError::TreeDiffers {
            commit: head_hex.clone(),
            path,
            what,
        },
        other => unverified(other.to_string()),
    })?;
    Ok(Some(head_hex))
}

/// Unpacks a git bundle into `dest` with no transport and no configuration of the bundle's: `git init` (no
/// template) and `git bundle unbundle` (objects into the new store, fsck on), the bundle's refs and HEAD
/// written by us, the HEAD tree checked out by [`gitdir::GitDir::checkout`] (each blob's bytes, no filters,
/// no attributes), and the index built by `git read-tree` so that `git status` inside the sandbox is clean.
fn unbundle(source: &Path, dest: &Path) -> Result<(), RepoError> {
    let refuse = |reason: String| RepoError::Input {
        path: source.to_owned(),
        reason,
    };
    let abs = fs::canonicalize(source).map_err(io(source))?;
    let parent = dest.parent().unwrap_or(Path::new("/"));
    let mut init = git(parent);
    init.args(["init", "-q", "--template="]).arg(dest);
    run_git(init, "init").map_err(|r| refuse(format!("git init: {r}")))?;
    let git_dir = dest.join(".git");
    let in_repo = |args: &[&std::ffi::OsStr]| {
        let mut cmd = git(dest);
        cmd.env("GIT_DIR", &git_dir)
            .env("GIT_WORK_TREE", dest)
            .args(args);
        cmd
    };
    let listed = run_git(
        in_repo(&["bundle".as_ref(), "unbundle".as_ref(), abs.as_os_str()]),
        "bundle unbundle",
    )
    .map_err(|r| refuse(format!("git bundle unbundle: {r}")))?;
    let mut head = None;
    let mut refs = Vec::new();
    for line in listed.lines() {
        let Some((id, name)) = line.split_once(' ') else {
            continue;
        };
        if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refuse(format!(
                "the bundle lists `{}`",
                line.escape_debug()
            )));
        }
        if name == "HEAD" {
            head = Some(id.to_owned());
        } else if gitdir::valid_ref_name(name) {
            refs.push((id.to_owned(), name.to_owned()));
        } else {
            return Err(refuse(format!(
                "the bundle lists the ref `{}`, not a valid ref name",
                name.escape_debug()
            )));
        }
    }
    let head = head.ok_or_else(|| {
        refuse(
            "the bundle has no HEAD (create it with `git bundle create FILE HEAD BRANCH`)".into(),
        )
    })?;
    for (id, name) in &refs {
        let p = git_dir.join(name);
        if let Some(d) = p.parent() {
            fs::create_dir_all(d).map_err(io(d))?;
        }
        fs::write(&p, format!("{id}\n")).map_err(io(&p))?;
    }
    let branch = refs
        .iter()
        .find(|(id, name)| *id == head && name.starts_with("refs/heads/"));
    let head_text = match branch {
        Some((_, name)) => format!("ref: {name}\n"),
        None => format!("{head}\n"),
    };
    let head_file = git_dir.join("HEAD");
    fs::write(&head_file, head_text).map_err(io(&head_file))?;
    let store = gitdir::open(dest)
        .and_then(|g| g.ok_or_else(|| gitdir::GitError::Unreadable("no .git".into())))
        .map_err(|e| refuse(e.to_string()))?;
    let id = store.head().map_err(|e| refuse(e.to_string()))?;
    let tree = store.commit_tree(&id).map_err(|e| refuse(e.to_string()))?;
    store
        .checkout(&tree, dest)
        .map_err(|e| refuse(format!("checkout of HEAD: {e}")))?;
    run_git(
        in_repo(&["read-tree".as_ref(), "HEAD".as_ref()]),
        "read-tree",
    )
    .map_err(|r| refuse(format!("git read-tree HEAD: {r}")))?;
    Ok(())
}

/// Makes `dest` the pinned commit of a fetched repository, reading the fetch's result as data: a `.git` made
/// by the runner's own `git init` (no template, its configuration ours), the fetched object store moved into
/// it (after [`gitdir::open_pinned`] accepted the fetched `.git`: no symbolic link, alternates, grafts or
/// replace refs, a shallow file only when it names exactly the pin), HEAD written by us as the pin (detached),
/// the pinned commit's tree checked out by [`gitdir::GitDir::checkout`] (each object re-hashed; no filters,
/// attributes, hooks, submodules or LFS), and the index built by `git read-tree` so that `git status` inside
/// the sandbox is clean. Nothing else of the fetched `.git` (its config, refs, FETCH_HEAD) is kept.
pub fn materialise_fetched(fetched: &Path, dest: &Path, pin: &str) -> Result<(), RepoError> {
    let unverified = |reason: String| RepoError::CommitUnverified {
        claimed: Some(pin.to_owned()),
        reason,
    };
    if pin.len() == 64 {
        return Err(unverified(
            "a SHA-256 repository: the runner reads only SHA-1 object stores".into(),
        ));
    }
    let id = gix_hash::ObjectId::from_hex(pin.as_bytes())
        .map_err(|e| unverified(format!("not a full commit id: {e}")))?;
    let fetched_store = gitdir::open_pinned(fetched, Some(&id))
        .and_then(|g| {
            g.ok_or_else(|| gitdir::GitError::Unreadable("the fetch wrote no .git".into()))
        })
        .map_err(|e| unverified(format!("the fetched repository: {e}")))?;
    // The pinned commit must be in what the server sent (a server that serves another commit fails here).
    fetched_store
        .commit_tree(&id)
        .map_err(|e| unverified(format!("the server did not provide it: {e}")))?;
    drop(fetched_store);
    let parent = dest.parent().unwrap_or(Path::new("/"));
    let mut init = git(parent);
    init.args(["init", "-q", "--template="]).arg(dest);
    run_git(init, "init").map_err(|r| RepoError::Git {
        what: "init".into(),
        reason: r,
    })?;
    let git_dir = dest.join(".git");
    let objects = git_dir.join("objects");
    fs::remove_dir_all(&objects).map_err(io(&objects))?;
    let from = fetched.join(".git/objects");
    fs::rename(&from, &objects).map_err(io(&from))?;
    let shallow = fetched.join(".git/shallow");
    if fs::symlink_metadata(&shallow).is_ok_and(|m| m.is_file()) {
        // open_pinned accepted it only as exactly the pin; written again by us, not moved.
        let to = git_dir.join("shallow");
        fs::write(&to, format!("{pin}\n")).map_err(io(&to))?;
    }
    let head = git_dir.join("HEAD");
    fs::write(&head, format!("{pin}\n")).map_err(io(&head))?;
    let store = gitdir::open_pinned(dest, Some(&id))
        .and_then(|g| g.ok_or_else(|| gitdir::GitError::Unreadable("no .git".into())))
        .map_err(|e| unverified(e.to_string()))?;
    let tree = store
        .commit_tree(&id)
        .map_err(|e| unverified(e.to_string()))?;
    store.checkout(&tree, dest).map_err(|e| RepoError::Input {
        path: dest.to_owned(),
        reason: format!("checkout of the pinned commit {pin}: {e}"),
    })?;
    let mut read_tree = git(dest);
    read_tree
        .env("GIT_DIR", &git_dir)
        .env("GIT_WORK_TREE", dest)
        .args(["read-tree", "HEAD"]);
    run_git(read_tree, "read-tree").map_err(|r| RepoError::Git {
        what: "read-tree HEAD".into(),
        reason: r,
    })?;
    Ok(())
}

/// A throwaway git directory (an empty object store and index, no configuration) for running git over a work
/// tree without ever reading the repository's own `.git`: its config may define filter drivers,
/// `diff.external` and the like, which git would otherwise run as the trusted runner.
struct ScratchGit {
    store: tempfile::TempDir,
    work_tree: PathBuf,
}

impl ScratchGit {
    fn new(work_tree: &Path) -> Result<ScratchGit, RepoError> {
        let store = tempfile::Builder::new()
            .prefix("fenced-run-git-")
            .tempdir()
            .map_err(|e| RepoError::Io {
                path: std::env::temp_dir(),
                source: e,
            })?;
        // A minimal object store (what `git init --bare` would make, without templates or a process).
        let git_dir = store.path().join("store.git");
        for d in ["objects", "refs"] {
            let p = git_dir.join(d);
            fs::create_dir_all(&p).map_err(io(&p))?;
        }
        let head = git_dir.join("HEAD");
        fs::write(&head, "ref: refs/heads/main\n").map_err(io(&head))?;
        Ok(ScratchGit {
            store,
            work_tree: work_tree.to_owned(),
        })
    }

    /// `git ARGS` over the work tree with the scratch directory as `GIT_DIR`.
    fn cmd<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        let mut cmd = git(&self.work_tree);
        cmd.env("GIT_DIR", self.store.path().join("store.git"))
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_INDEX_FILE", self.store.path().join("index"))
            .args(args);
        cmd
    }
}

/// The git tree object id of everything under `dir` (ignored files included, `.git` left out), computed
/// without git ([`gitdir::tree_hash`]): for a clean checkout it is `HEAD^{tree}`.
pub fn tree_hash(dir: &Path) -> Result<String, RepoError> {
    gitdir::tree_hash(dir)
        .map(|id| id.to_string())
        .map_err(|e| RepoError::Input {
            path: dir.to_owned(),
            reason: format!("tree hash: {e}"),
        })
}

/// Copies a directory tree: directories, regular files (with their mode) and symbolic links (recreated, never
/// followed); sockets, FIFOs and devices are skipped.
pub fn copy_tree(src: &Path, dest: &Path) -> Result<(), RepoError> {
    for entry in walkdir::WalkDir::new(src).follow_links(false) {
        let entry = entry.map_err(|e| RepoError::Input {
            path: src.to_owned(),
            reason: e.to_string(),
        })?;
        let rel = entry.path().strip_prefix(src).unwrap_or(Path::new(""));
        let target = dest.join(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            fs::create_dir_all(&target).map_err(io(&target))?;
        } else if ft.is_file() {
            fs::copy(entry.path(), &target).map_err(io(entry.path()))?;
        } else if ft.is_symlink() {
            let to = fs::read_link(entry.path()).map_err(io(entry.path()))?;
            std::os::unix::fs::symlink(&to, &target).map_err(io(&target))?;
        }
    }
    Ok(())
}

/// Gives every entry under `dir` (symbolic links themselves, never their targets) to `uid`:`gid`.
pub fn chown_tree(dir: &Path, uid: u32, gid: u32) -> Result<(), RepoError> {
    for entry in walkdir::WalkDir::new(dir).follow_links(false) {
        let entry = entry.map_err(|e| RepoError::Input {
            path: dir.to_owned(),
            reason: e.to_string(),
        })?;
        std::os::unix::fs::lchown(entry.path(), Some(uid), Some(gid)).map_err(io(entry.path()))?;
    }
    Ok(())
}

/// Detects the test command of a repository: `(command, source)` where source is `detected:<file>`.
pub fn detect_test_command(repo: &Path) -> Option<(String, String)> {
    let read = |name: &str| fs::read_to_string(repo.join(name)).ok();
    let found = |cmd: &str, file: &str| Some((cmd.to_owned(), format!("detected:{file}")));
    if repo.join("Cargo.toml").is_file() {
        return found("cargo test", "Cargo.toml");
    }
    if let Some(text) = read("package.json") {
        let has_test = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v.get("scripts")?
                    .get("test")?
                    .as_str()
                    .map(|s| !s.trim().is_empty())
            })
            .unwrap_or(false);
        if has_test {
            return found("npm test", "package.json");
        }
    }
    if repo.join("go.mod").is_file() {
        return found("go test ./...", "go.mod");
    }
    for file in ["pyproject.toml", "pytest.ini"] {
        if repo.join(file).is_file() {
            return found("pytest", file);
        }
    }
    if read("setup.cfg").is_some_and(|t| t.contains("[tool:pytest]")) {
        return found("pytest", "setup.cfg");
    }
    for file in ["Makefile", "makefile", "GNUmakefile"] {
        if read(file).is_some_and(|t| {
            t.lines()
                .any(|l| l.starts_with("test:") || l.starts_with("test :"))
        }) {
            return found("make test", file);
        }
    }
    if repo.join("tests/test.sh").is_file() {
        return found("sh tests/test.sh", "tests/test.sh");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(dir: &Path, name: &str, text: &str) {
        let p = dir.join(name);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    #[test]
    fn detection_order_and_sources() {
        let d = tempfile::tempdir().expect("tmp");
        assert_eq!(detect_test_command(d.path()), None);
        w(d.path(), "tests/test.sh", "true");
        assert_eq!(
            detect_test_command(d.path()).expect("found").1,
            "detected:tests/test.sh"
        );
        w(d.path(), "Makefile", "all:\n\ttrue\ntest:\n\ttrue\n");
        assert_eq!(detect_test_command(d.path()).expect("found").0, "make test");
        w(d.path(), "package.json", r#"{"scripts":{"build":"x"}}"#);
        assert_eq!(detect_test_command(d.path()).expect("found").0, "make test");
        w(
            d.path(),
            "package.json",
            r#"{"scripts":{"test":"node --test"}}"#,
        );
        assert_eq!(
            detect_test_command(d.path()).expect("found"),
            ("npm test".into(), "detected:package.json".into())
        );
        w(d.path(), "Cargo.toml", "[package]");
        assert_eq!(
            detect_test_command(d.path()).expect("found").1,
            "detected:Cargo.toml"
        );
    }

    #[test]
    fn tree_hash_matches_git_and_changes_with_content() {
        let d = tempfile::tempdir().expect("tmp");
        w(d.path(), "a.txt", "hello\n");
        // `git hash-object` of a tree with one blob "a.txt" -> known id computed by git itself.
        let t1 = tree_hash(d.path()).expect("hash");
        assert_eq!(t1.len(), 40);
        w(d.path(), "a.txt", "hello!\n");
        assert_ne!(tree_hash(d.path()).expect("hash"), t1);
    }

    #[test]
    fn tree_hash_is_the_git_tree_of_a_clean_checkout() {
        let d = tempfile::tempdir().expect("tmp");
        w(d.path(), "a.txt", "hello\n");
        w(d.path(), "sub/b.sh", "echo b\n");
        let g = |args: &[&str]| {
            let out = Command::new("git")
                .current_dir(d.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@t.example"])
                .args(args)
                .output()
                .expect("git");
            assert!(out.status.success(), "{args:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        g(&["init", "-q"]);
        g(&["add", "."]);
        g(&["commit", "-q", "-m", "x"]);
        assert_eq!(
            tree_hash(d.path()).expect("hash"),
            g(&["rev-parse", "HEAD^{tree}"])
        );
    }

    #[test]
    fn patch_refused_and_applied() {
        let src = tempfile::tempdir().expect("tmp");
        w(src.path(), "a.txt", "one\n");
        let run = tempfile::tempdir().expect("tmp");
        let good = run.path().join("good.patch");
        fs::write(&good, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n").expect("write");
        let bad = run.path().join("bad.patch");
        fs::write(&bad, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-zero\n+two\n").expect("write");
        let e =
            prepare(src.path(), &run.path().join("r1"), None, Some(&bad)).expect_err("must refuse");
        assert_eq!(e.stage(), "patch");
        let p = prepare(src.path(), &run.path().join("r2"), None, Some(&good)).expect("applies");
        assert_eq!(
            fs::read_to_string(run.path().join("r2/a.txt")).expect("read"),
            "two\n"
        );
        assert!(p.patch_sha256.is_some());
        let e = prepare(src.path(), &run.path().join("r3"), Some("abcdef0"), None)
            .expect_err("not git");
        assert_eq!(e.stage(), "commit");
    }
}
