//! The repository of a run: copied (directory), unpacked (`.tar`, `.tar.gz`) or cloned (git bundle) into the
//! run's own tree by the trusted runner before any untrusted code; its commit checked, the patch applied with
//! `git apply`'s semantics, the tree hash recorded, and the test command detected when the job has none.

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
            RepoError::Commit { .. } => "commit",
            RepoError::Patch { .. } => "patch",
            _ => "repository",
        }
    }
}

/// What the prepared repository is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// HEAD of the repository, when it is a git repository.
    pub commit: Option<String>,
    /// Git tree object id of the working tree after the patch (every file, `.git` excluded).
    pub tree: String,
    /// SHA-256 of the patch, when there is one.
    pub patch_sha256: Option<String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RepoError + '_ {
    move |source| RepoError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A git command for the trusted runner: no system or global configuration, no hooks, no fsmonitor, no
/// prompts, and no discovery of repositories above `cwd`.
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
        ])
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        )
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
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

/// Copies, unpacks or clones `source` into `dest` (which must not exist), checks `commit`, applies `patch`,
/// and records the commit and tree.
pub fn prepare(
    source: &Path,
    dest: &Path,
    commit: Option<&str>,
    patch: Option<&Path>,
) -> Result<Prepared, RepoError> {
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
        InputKind::GitBundle => {
            let parent = dest.parent().unwrap_or(Path::new("/"));
            let mut cmd = git(parent);
            cmd.arg("clone").arg("-q").arg(source).arg(dest);
            run_git(cmd, "clone of the bundle").map_err(|reason| RepoError::Input {
                path: source.to_owned(),
                reason,
            })?;
        }
    }
    let is_git = dest.join(".git").exists();
    let head = if is_git {
        let mut cmd = git(dest);
        cmd.args(["rev-parse", "--verify", "HEAD^{commit}"]);
        Some(
            run_git(cmd, "rev-parse HEAD").map_err(|reason| RepoError::Git {
                what: "rev-parse HEAD".into(),
                reason,
            }),
        )
    } else {
        None
    };
    if let Some(claimed) = commit {
        let claimed_l = claimed.trim().to_ascii_lowercase();
        match &head {
            Some(Ok(h))
                if claimed_l.len() >= 7
                    && claimed_l.bytes().all(|b| b.is_ascii_hexdigit())
                    && h.starts_with(&claimed_l) => {}
            Some(Ok(h)) => {
                return Err(RepoError::Commit {
                    claimed: claimed.into(),
                    actual: h.clone(),
                })
            }
            Some(Err(e)) => {
                return Err(RepoError::Commit {
                    claimed: claimed.into(),
                    actual: format!("unreadable ({e})"),
                })
            }
            None => {
                return Err(RepoError::Commit {
                    claimed: claimed.into(),
                    actual: "none (the repository is not a git repository)".into(),
                })
            }
        }
    }
    let commit = match head {
        Some(r) => Some(r?),
        None => None,
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
    Ok(Prepared {
        commit,
        tree,
        patch_sha256,
    })
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

/// The git tree object id of everything under `dir` (ignored files included, `.git` excluded), computed in
/// a throwaway object store so that the repository's own configuration is never read.
pub fn tree_hash(dir: &Path) -> Result<String, RepoError> {
    let scratch = ScratchGit::new(dir)?;
    run_git(scratch.cmd(["add", "-A", "-f", "."]), "add").map_err(|reason| RepoError::Git {
        what: "add (tree hash)".into(),
        reason,
    })?;
    run_git(scratch.cmd(["write-tree"]), "write-tree").map_err(|reason| RepoError::Git {
        what: "write-tree".into(),
        reason,
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
