//! HOME across the cut. The install phase and the test phase never share a HOME: at the cut the test phase gets
//! a fresh, empty one into which only [`CARRIED`] subtrees of the install phase's HOME are moved (a rename on
//! the run's tmpfs, nothing copied): package caches and installed dependencies, never a file a tool reads on
//! its own at start-up (`~/.npmrc`, `~/.gitconfig`, `~/.cargo/config.toml`, `usercustomize.py`, ...). In the
//! carried trees Python's start-up hooks are removed and every symbolic link pointing outside its tree is
//! dropped. What stayed behind is reported, so that the verdict can name it.
//!
//! Nothing runs in either directory while this code does (the install phase's namespace is dead by the cut),
//! and every step is by `lstat`, never through a symbolic link.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The subtrees of the install phase's HOME the test phase gets, relative to HOME (a last character `*` in
/// a component matches any name with that prefix), each with its ecosystem and why it is safe to carry.
pub const CARRIED: &[(&str, &str, &str)] = &[
    (
        ".cargo/registry",
        "Rust",
        "crates downloaded by cargo fetch/build (sources and index, checked against Cargo.lock)",
    ),
    (
        ".cargo/git",
        "Rust",
        "git dependencies checked out by cargo",
    ),
    (".cache/pip", "Python", "pip's download and wheel cache"),
    (
        ".local/lib/python*/site-packages",
        "Python",
        "packages installed with pip install --user; usercustomize/sitecustomize and every .pth file no \
         *.dist-info/RECORD there lists are removed",
    ),
    (".npm", "JavaScript", "npm's download cache (_cacache)"),
    ("go/pkg/mod", "Go", "the module cache (go mod download)"),
    (".m2/repository", "Java", "Maven's local repository"),
    (".gradle/caches", "Java", "Gradle's dependency caches"),
];

/// Files and directories of HOME never carried (nothing outside [`CARRIED`] is), each with why: what a tool
/// reads from them on its own could run code or change what the test phase runs.
pub const NEVER: &[(&str, &str)] = &[
    (
        ".cargo/config.toml, .cargo/config",
        "build flags, runners, rustc wrappers, aliases for every cargo command",
    ),
    (".cargo/credentials*", "registry tokens"),
    (
        ".cargo/bin",
        "binaries installed by cargo install, run in place of the toolchain's",
    ),
    (
        ".cache/go-build",
        "Go's build cache: it can hold forged compiled test binaries",
    ),
    (
        ".npmrc, .yarnrc, .yarnrc.yml",
        "npm/yarn configuration: node options, script shells, registries",
    ),
    (
        ".gitconfig, .config/git",
        "git configuration: hooks paths, aliases, filters that run programs",
    ),
    (".bashrc, .profile, .bash_profile", "shell start-up files"),
    (".pytest.ini", "pytest options (addopts, plugins)"),
    (
        ".config/pip, .pip, .pydistutils.cfg",
        "pip and distutils configuration",
    ),
    (
        "usercustomize.py, sitecustomize.py, unlisted .pth files",
        "Python imports or executes them at every start-up",
    ),
];

/// The most entries one carried tree may hold; a larger one is not carried.
pub const MAX_CARRIED_ENTRIES: u64 = 2_000_000;

/// The most names the verdict's finding lists of what was left behind or dropped.
pub const MAX_NAMED: usize = 32;

/// Why HOME could not be carried over: the test phase cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HomeError {
    /// A filesystem call failed.
    #[error("HOME at the cut: {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> HomeError + '_ {
    move |source| HomeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What the cut did with the install phase's HOME.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CarryOver {
    /// The subtrees moved to the test phase's HOME, relative to HOME.
    pub carried: Vec<String>,
    /// Top-level entries of the install phase's HOME that held anything not carried.
    pub left_behind: Vec<String>,
    /// Paths (relative to HOME) removed from the carried trees: start-up hooks and links pointing outside.
    pub dropped: Vec<String>,
}

impl CarryOver {
    /// The verdict's finding text, when anything was left behind or dropped.
    pub fn describe(&self) -> Option<String> {
        if self.left_behind.is_empty() && self.dropped.is_empty() {
            return None;
        }
        let named = |v: &[String]| {
            let mut s: Vec<String> = v.iter().take(MAX_NAMED).cloned().collect();
            if v.len() > MAX_NAMED {
                s.push(format!("and {} more", v.len() - MAX_NAMED));
            }
            s.join(", ")
        };
        let mut parts = Vec::new();
        if !self.left_behind.is_empty() {
            parts.push(format!(
                "the test phase got a fresh HOME; left behind from the install phase's HOME: {}",
                named(&self.left_behind)
            ));
        }
        if !self.dropped.is_empty() {
            parts.push(format!(
                "removed from the carried trees: {}",
                named(&self.dropped)
            ));
        }
        Some(parts.join("; "))
    }
}

/// Moves the [`CARRIED`] subtrees of `from` (the install phase's HOME) into `to`, a directory this creates
/// (owned by `owner` when given, as are the directories it makes), cleans them, and removes what is left of
/// `from`. `sandbox_home` is where the sandbox shows HOME (links are judged as the sandbox would resolve them).
pub fn carry_over(
    from: &Path,
    to: &Path,
    owner: Option<(u32, u32)>,
    sandbox_home: &Path,
) -> Result<CarryOver, HomeError> {
    fs::create_dir(to).map_err(io_at(to))?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755)).map_err(io_at(to))?;
    chown(to, owner)?;
    let mut out = CarryOver::default();
    for (pattern, _, _) in CARRIED {
        for rel in expand(from, Path::new(pattern))? {
            let src = from.join(&rel);
            let dst = to.join(&rel);
            if let Some(parent) = rel.parent() {
                make_dirs(to, parent, owner)?;
            }
            fs::rename(&src, &dst).map_err(io_at(&src))?;
            let shown = sandbox_home.join(&rel);
            let mut dropped = Vec::new();
            if rel.ends_with("site-packages") {
                remove_python_hooks(&dst, &mut dropped)?;
            }
            match drop_links_outside(&dst, &shown, &mut dropped) {
                Ok(()) => out.carried.push(rel.to_string_lossy().into_owned()),
                Err(TooMany) => {
                    fs::remove_dir_all(&dst).map_err(io_at(&dst))?;
                    dropped.clear();
                    dropped.push(PathBuf::from(format!(
                        "(all of it: more than {MAX_CARRIED_ENTRIES} entries)"
                    )));
                }
            }
            out.dropped.extend(
                dropped
                    .into_iter()
                    .map(|d| rel.join(d).to_string_lossy().into_owned()),
            );
        }
    }
    out.left_behind = left_behind(from)?;
    // Nothing of it reaches the test phase; it goes now rather than with the run directory.
    let _ = fs::remove_dir_all(from);
    Ok(out)
}

fn chown(path: &Path, owner: Option<(u32, u32)>) -> Result<(), HomeError> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io_at(path))?;
    }
    Ok(())
}

/// Every path below `top` that `pattern` names through real directories only (a link anywhere on the way, or
/// as the last component, is not followed and names nothing).
fn expand(top: &Path, pattern: &Path) -> Result<Vec<PathBuf>, HomeError> {
    let mut found = vec![PathBuf::new()];
    for comp in pattern.components() {
        let Component::Normal(name) = comp else {
            continue;
        };
        let name = name.to_string_lossy();
        let mut next = Vec::new();
        for at in found {
            let dir = top.join(&at);
            match name.strip_suffix('*') {
                Some(prefix) => {
                    let rd = match fs::read_dir(&dir) {
                        Ok(rd) => rd,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => {
                            return Err(HomeError::Io {
                                path: dir,
                                source: e,
                            })
                        }
                    };
                    let mut names = Vec::new();
                    for e in rd {
                        let e = e.map_err(io_at(&dir))?;
                        if e.file_name().to_string_lossy().starts_with(prefix) {
                            names.push(e.file_name());
                        }
                    }
                    names.sort();
                    for n in names {
                        if is_real_dir(&dir.join(&n)) {
                            next.push(at.join(n));
                        }
                    }
                }
                None => {
                    if is_real_dir(&dir.join(name.as_ref())) {
                        next.push(at.join(name.as_ref()));
                    }
                }
            }
        }
        found = next;
    }
    Ok(found)
}

fn is_real_dir(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
}

/// Makes every directory of `rel` below `top` (all of them new or real directories: `top` is fresh).
fn make_dirs(top: &Path, rel: &Path, owner: Option<(u32, u32)>) -> Result<(), HomeError> {
    let mut at = top.to_owned();
    for c in rel.components() {
        let Component::Normal(name) = c else { continue };
        at.push(name);
        if is_real_dir(&at) {
            continue;
        }
        fs::create_dir(&at).map_err(io_at(&at))?;
        chown(&at, owner)?;
    }
    Ok(())
}

/// Removes from the site-packages directory `dir` what Python runs at start-up without being asked:
/// `usercustomize` and `sitecustomize` in any form (module, compiled module, package, extension), and every
/// `.pth` file that no `*.dist-info/RECORD` in `dir` lists (an installed package's own `.pth` stays).
fn remove_python_hooks(dir: &Path, dropped: &mut Vec<PathBuf>) -> Result<(), HomeError> {
    let mut entries = Vec::new();
    for e in fs::read_dir(dir).map_err(io_at(dir))? {
        entries.push(e.map_err(io_at(dir))?.file_name());
    }
    entries.sort();
    let mut listed = BTreeSet::new();
    for name in &entries {
        if name.to_string_lossy().ends_with(".dist-info") {
            let record = dir.join(name).join("RECORD");
            listed.extend(record_names(&record));
        }
    }
    for name in entries {
        let text = name.to_string_lossy();
        let stem = text.split('.').next().unwrap_or("");
        let hook = stem == "usercustomize" || stem == "sitecustomize";
        let pth = text.ends_with(".pth") && !listed.contains(text.as_ref());
        if hook || pth {
            let p = dir.join(&name);
            remove_any(&p)?;
            dropped.push(PathBuf::from(&name));
        }
    }
    Ok(())
}

/// The top-level names a `RECORD` file (CSV: path, hash, size) lists; nothing when it is not a regular file
/// or is larger than 16 MiB.
fn record_names(record: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(m) = fs::symlink_metadata(record) else {
        return out;
    };
    if !m.file_type().is_file() || m.len() > 16 * 1024 * 1024 {
        return out;
    }
    let mut text = String::new();
    let read = fs::File::open(record).and_then(|mut f| f.read_to_string(&mut text));
    if read.is_err() {
        return out;
    }
    for line in text.lines() {
        let path = match line.strip_prefix('"') {
            Some(rest) => rest.split('"').next().unwrap_or(""),
            None => line.split(',').next().unwrap_or(""),
        };
        if !path.is_empty() && !path.contains('/') {
            out.insert(path.to_owned());
        }
    }
    out
}

fn remove_any(p: &Path) -> Result<(), HomeError> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_dir() => fs::remove_dir_all(p).map_err(io_at(p)),
        Ok(_) => fs::remove_file(p).map_err(io_at(p)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(HomeError::Io {
            path: p.to_owned(),
            source: e,
        }),
    }
}

struct TooMany;

/// Removes every symbolic link below `dir` whose target, resolved as the sandbox would see it (`dir` shown at
/// `shown`), lies outside `shown`. Paths removed are recorded relative to `dir`.
fn drop_links_outside(dir: &Path, shown: &Path, dropped: &mut Vec<PathBuf>) -> Result<(), TooMany> {
    let mut visited = 0u64;
    let mut links = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(false).min_depth(1) {
        visited += 1;
        if visited > MAX_CARRIED_ENTRIES {
            return Err(TooMany);
        }
        let Ok(entry) = entry else { continue };
        if entry.path_is_symlink() {
            links.push(entry.into_path());
        }
    }
    for link in links {
        let Ok(rel) = link.strip_prefix(dir) else {
            continue;
        };
        let inside = fs::read_link(&link).is_ok_and(|target| {
            let at = shown.join(rel);
            let base = at.parent().unwrap_or(shown);
            lexical(&base.join(target)).starts_with(shown)
        });
        if !inside && fs::remove_file(&link).is_ok() {
            dropped.push(rel.to_owned());
        }
    }
    Ok(())
}

/// `p` with `.` and `..` resolved by the text alone (`..` above `/` stays at `/`).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The top-level names of `home` that still hold anything but empty directories, sorted.
fn left_behind(home: &Path) -> Result<Vec<String>, HomeError> {
    let mut out = Vec::new();
    for e in fs::read_dir(home).map_err(io_at(home))? {
        let e = e.map_err(io_at(home))?;
        let p = e.path();
        let holds = match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_dir() => walkdir::WalkDir::new(&p)
                .follow_links(false)
                .min_depth(1)
                .into_iter()
                .take(100_000)
                .any(|x| x.map_or(true, |x| !x.file_type().is_dir())),
            _ => true,
        };
        if holds {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, s).expect("write");
    }

    #[test]
    fn caches_are_carried_and_hooks_are_not() {
        let t = tempfile::tempdir().expect("tempdir");
        let from = t.path().join("home");
        let to = t.path().join("home-test");
        let sp = from.join(".local/lib/python3.11/site-packages");
        write(&sp.join("usercustomize.py"), "print('2 passed')\n");
        write(&sp.join("sitecustomize.py"), "x\n");
        write(&sp.join("__pycache__/keep.pyc"), "x\n");
        write(&sp.join("evil.pth"), "import os\n");
        write(&sp.join("good.pth"), "./good\n");
        write(&sp.join("good/__init__.py"), "\n");
        write(
            &sp.join("good-1.0.dist-info/RECORD"),
            "good/__init__.py,sha256=x,1\ngood.pth,sha256=y,7\n\"odd,name.pth\",,\n",
        );
        write(&sp.join("odd,name.pth"), "./good\n");
        write(&from.join(".cargo/registry/index/x"), "crate\n");
        write(&from.join(".cargo/config.toml"), "[build]\nrustflags=[]\n");
        write(&from.join(".cargo/bin/cargo-evil"), "#!/bin/sh\n");
        write(&from.join(".npmrc"), "node-options=--require /x\n");
        write(&from.join(".gitconfig"), "[core]\nhooksPath=/x\n");
        write(&from.join(".cache/go-build/aa/x"), "forged\n");
        write(&from.join("go/pkg/mod/m@v1/m.go"), "package m\n");
        fs::create_dir_all(from.join(".npm/_cacache")).expect("mkdir");
        // Links: inside the tree (kept), out of it (dropped), absolute into the sandbox's HOME (dropped).
        std::os::unix::fs::symlink("index/x", from.join(".cargo/registry/in")).expect("link");
        std::os::unix::fs::symlink("../../.bashrc", from.join(".cargo/registry/out"))
            .expect("link");
        std::os::unix::fs::symlink("/work/home/.gitconfig", from.join("go/pkg/mod/abs"))
            .expect("link");
        // A carried name that is a link is not followed: .m2/repository -> elsewhere is left behind.
        fs::create_dir_all(from.join(".m2")).expect("mkdir");
        std::os::unix::fs::symlink("/etc", from.join(".m2/repository")).expect("link");

        let c = carry_over(&from, &to, None, Path::new("/work/home")).expect("carry");
        let tsp = to.join(".local/lib/python3.11/site-packages");
        assert!(tsp.join("good.pth").exists());
        assert!(tsp.join("odd,name.pth").exists());
        assert!(tsp.join("good/__init__.py").exists());
        assert!(tsp.join("__pycache__/keep.pyc").exists());
        for gone in ["usercustomize.py", "sitecustomize.py", "evil.pth"] {
            assert!(!tsp.join(gone).exists(), "{gone}");
        }
        assert!(to.join(".cargo/registry/index/x").exists());
        assert!(fs::symlink_metadata(to.join(".cargo/registry/in")).is_ok());
        assert!(fs::symlink_metadata(to.join(".cargo/registry/out")).is_err());
        assert!(fs::symlink_metadata(to.join("go/pkg/mod/abs")).is_err());
        assert!(to.join("go/pkg/mod/m@v1/m.go").exists());
        assert!(to.join(".npm/_cacache").is_dir());
        for never in [
            ".cargo/config.toml",
            ".cargo/bin",
            ".npmrc",
            ".gitconfig",
            ".cache/go-build",
            ".m2/repository",
        ] {
            assert!(fs::symlink_metadata(to.join(never)).is_err(), "{never}");
        }
        assert_eq!(
            c.left_behind,
            vec![".cache", ".cargo", ".gitconfig", ".m2", ".npmrc"]
        );
        let mut dropped = c.dropped.clone();
        dropped.sort();
        assert_eq!(
            dropped,
            vec![
                ".cargo/registry/out",
                ".local/lib/python3.11/site-packages/evil.pth",
                ".local/lib/python3.11/site-packages/sitecustomize.py",
                ".local/lib/python3.11/site-packages/usercustomize.py",
                "go/pkg/mod/abs",
            ]
        );
        let text = c.describe().expect("something left behind");
        assert!(
            text.contains(".npmrc") && text.contains("usercustomize.py"),
            "{text}"
        );
        assert!(!from.exists(), "the install phase's HOME is removed");
    }

    #[test]
    fn nothing_to_report_for_an_empty_home() {
        let t = tempfile::tempdir().expect("tempdir");
        let from = t.path().join("home");
        fs::create_dir(&from).expect("mkdir");
        let c =
            carry_over(&from, &t.path().join("to"), None, Path::new("/work/home")).expect("carry");
        assert_eq!(c, CarryOver::default());
        assert!(c.describe().is_none());
    }

    #[test]
    fn lexical_resolution() {
        assert_eq!(lexical(Path::new("/a/b/../../../c")), PathBuf::from("/c"));
        assert_eq!(lexical(Path::new("/a/./b")), PathBuf::from("/a/b"));
    }
}
