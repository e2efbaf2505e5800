//! Where `fenced-run` keeps the vm tier's files: the static guest agent and its build record, Debian's kernel that
//! the set-up script extracts, the built guest image, the toolchain image's downloaded packages (docs/install.md).
//!
//! The data directory is, first found:
//! 1. `--data-dir DIR` (the global flag, [`set_flag`]);
//! 2. `$FENCED_RUN_DATA_DIR` ([`ENV`]);
//! 3. in a build tree (this executable lies in a cargo target directory, marked by cargo's `CACHEDIR.TAG` or
//!    `.rustc_info.json`, of a fenced-run workspace): that target directory, where the README's commands have
//!    always kept these files;
//! 4. `$XDG_DATA_HOME/fenced-run`, else `$HOME/.local/share/fenced-run`.
//!
//! An installed binary (`cargo install`, the Debian package) lies in no target directory, so it never looks into
//! the tree it was built from. Files a package installs (the static agent) are also looked for, read-only, in
//! [`SYSTEM_DIR`].

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the data directory.
pub const ENV: &str = "FENCED_RUN_DATA_DIR";
/// The read-only data directory of a system package (the Debian package's static agent).
pub const SYSTEM_DIR: &str = "/usr/share/fenced-run";
/// The static guest agent's file name in a data directory.
pub const AGENT_FILE: &str = "guest-agent";
/// Its build record (host::image::agent::AgentBuild as JSON), beside it.
pub const AGENT_BUILD_FILE: &str = "guest-agent.build.json";
/// The kernel tree scripts/vm-setup.sh extracts (`boot/vmlinuz-V`, `lib/modules/V`).
pub const KERNEL_DIR: &str = "vm-kernel";
/// The guest image `demo` and `run --isolation vm` use by default.
pub const IMAGE_DIR: &str = "vm-image";
/// The toolchain image's downloaded .deb files.
pub const DEB_CACHE_DIR: &str = "toolchain-debs";

static FLAG: OnceLock<PathBuf> = OnceLock::new();

/// Records `--data-dir` (first call wins; the CLI calls it once, before any subcommand runs).
pub fn set_flag(dir: PathBuf) {
    let _ = FLAG.set(dir);
}

/// How the data directory was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--data-dir`.
    Flag,
    /// `$FENCED_RUN_DATA_DIR`.
    Env,
    /// The target directory of the build tree this executable is in.
    BuildTree,
    /// `$XDG_DATA_HOME/fenced-run`.
    Xdg,
    /// `$HOME/.local/share/fenced-run`.
    Home,
}

impl Source {
    /// How it is named in messages (`doctor`).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "--data-dir",
            Source::Env => ENV,
            Source::BuildTree => "the target directory of this build tree",
            Source::Xdg => "$XDG_DATA_HOME/fenced-run",
            Source::Home => "~/.local/share/fenced-run",
        }
    }
}

/// The build tree an executable lies in: the workspace and its cargo target directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildTree {
    /// The workspace (holds Cargo.lock and host/Cargo.toml).
    pub workspace: PathBuf,
    /// The cargo target directory the executable is in.
    pub target: PathBuf,
    /// The cargo profile it was built with (`dev` for `target/debug`, else the directory's name).
    pub profile: String,
}

/// The data directory and how it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    /// The directory (it may not exist yet).
    pub dir: PathBuf,
    /// How it was chosen.
    pub source: Source,
    /// The build tree this executable lies in, if any (whatever chose `dir`).
    pub build_tree: Option<BuildTree>,
}

/// Why no data directory can be named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataDirError {
    /// Neither the flag, the variable, a build tree, `XDG_DATA_HOME` nor `HOME` names one.
    #[error(
        "no data directory: this fenced-run is not in a build tree and neither --data-dir, {ENV}, XDG_DATA_HOME \
         nor HOME is set; give --data-dir DIR (docs/install.md)"
    )]
    Unset,
    /// A relative path where an absolute one is required.
    #[error("{what} {path}: the data directory must be an absolute path (docs/install.md)")]
    Relative {
        /// What named it.
        what: &'static str,
        /// The path as given.
        path: String,
    },
}

impl DataDir {
    /// The directory's `name` ([`KERNEL_DIR`], [`IMAGE_DIR`], ...).
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The static agent a package or `scripts/install.sh` put here or in [`SYSTEM_DIR`], first found.
    pub fn installed_agent(&self) -> Option<PathBuf> {
        [self.dir.as_path(), Path::new(SYSTEM_DIR)]
            .into_iter()
            .map(|d| d.join(AGENT_FILE))
            .find(|p| p.is_file())
    }
}

/// The data directory of this process (the flag, the environment, this executable's place).
pub fn resolve() -> Result<DataDir, DataDirError> {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| std::fs::canonicalize(&e).ok().or(Some(e)));
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    resolve_from(&Inputs {
        flag: FLAG.get().cloned(),
        env: env(ENV),
        exe,
        xdg_data_home: env("XDG_DATA_HOME"),
        home: env("HOME"),
        cargo_workspace: std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .and_then(|m| m.ancestors().find(|d| is_workspace(d)).map(PathBuf::from)),
    })
}

/// What [`resolve`] decides from (a seam for the tests).
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// `--data-dir`.
    pub flag: Option<PathBuf>,
    /// `$FENCED_RUN_DATA_DIR`.
    pub env: Option<PathBuf>,
    /// This executable.
    pub exe: Option<PathBuf>,
    /// `$XDG_DATA_HOME`.
    pub xdg_data_home: Option<PathBuf>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// The workspace cargo names when it runs this program (`cargo run`, `cargo test`: the nearest fenced-run
    /// workspace at or above `$CARGO_MANIFEST_DIR`): used only when the executable lies in a cargo target directory
    /// that is not inside its workspace (CARGO_TARGET_DIR elsewhere). Read when the program runs, never compiled in:
    /// a path of the build machine in the code makes two builders' binaries differ (docs/vm.md).
    pub cargo_workspace: Option<PathBuf>,
}

/// [`resolve`] over explicit inputs.
pub fn resolve_from(i: &Inputs) -> Result<DataDir, DataDirError> {
    let build_tree = i
        .exe
        .as_deref()
        .and_then(|e| build_tree_of(e, i.cargo_workspace.as_deref()));
    let absolute = |what: &'static str, p: &PathBuf| {
        if p.is_absolute() {
            Ok(p.clone())
        } else {
            Err(DataDirError::Relative {
                what,
                path: p.display().to_string(),
            })
        }
    };
    let (dir, source) = if let Some(p) = &i.flag {
        (absolute("--data-dir", p)?, Source::Flag)
    } else if let Some(p) = &i.env {
        (absolute(ENV, p)?, Source::Env)
    } else if let Some(t) = &build_tree {
        (t.target.clone(), Source::BuildTree)
    } else if let Some(x) = i.xdg_data_home.as_ref().filter(|x| x.is_absolute()) {
        (x.join("fenced-run"), Source::Xdg)
    } else if let Some(h) = &i.home {
        (
            absolute("HOME", h)?.join(".local/share/fenced-run"),
            Source::Home,
        )
    } else {
        return Err(DataDirError::Unset);
    };
    Ok(DataDir {
        dir,
        source,
        build_tree,
    })
}

/// Whether `dir` is a cargo target directory: cargo writes `CACHEDIR.TAG` at its top when it creates the directory,
/// and its cache of rustc's version, `.rustc_info.json`, on every build. A target directory that existed before
/// cargo's first build (`mkdir target`, as .ci/run does to lend the clone its kernels) has only the second.
fn is_target_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("CACHEDIR.TAG"))
        .map(|t| t.contains("created by cargo"))
        .unwrap_or(false)
        || dir.join(".rustc_info.json").is_file()
}

/// Whether `dir` is a fenced-run workspace.
fn is_workspace(dir: &Path) -> bool {
    dir.join("Cargo.lock").is_file()
        && dir.join("host/Cargo.toml").is_file()
        && dir.join("guest/src/bin/guest-agent.rs").is_file()
}

/// The build tree `exe` lies in: a cargo target directory at most three levels above it (`target/debug/X`,
/// `target/debug/deps/X`, `target/TRIPLE/debug/X`) whose parent, or else `cargo_workspace`, is a fenced-run workspace.
pub fn build_tree_of(exe: &Path, cargo_workspace: Option<&Path>) -> Option<BuildTree> {
    let mut dir = exe.parent()?;
    for _ in 0..3 {
        if is_target_dir(dir) {
            let rel = exe.strip_prefix(dir).ok()?;
            let first = rel.components().next()?.as_os_str().to_str()?.to_string();
            let profile = match first.as_str() {
                "debug" => "dev".to_string(),
                other => other.to_string(),
            };
            let workspace = dir
                .parent()
                .filter(|p| is_workspace(p))
                .map(Path::to_path_buf)
                .or_else(|| {
                    cargo_workspace
                        .filter(|c| is_workspace(c))
                        .map(|c| std::fs::canonicalize(c).unwrap_or_else(|_| c.to_path_buf()))
                })?;
            return Some(BuildTree {
                workspace,
                target: dir.to_path_buf(),
                profile,
            });
        }
        dir = dir.parent()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str =
        "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by cargo.\n";

    fn workspace(root: &Path) {
        for (p, t) in [
            ("Cargo.lock", ""),
            ("host/Cargo.toml", ""),
            ("guest/src/bin/guest-agent.rs", ""),
            ("target/CACHEDIR.TAG", TAG),
        ] {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
            std::fs::write(p, t).expect("write");
        }
    }

    #[test]
    fn a_binary_in_a_checkouts_target_uses_that_target_and_knows_its_profile() {
        let t = tempfile::tempdir().expect("tmp");
        workspace(t.path());
        let target = t.path().join("target");
        for (exe, profile) in [
            ("debug/fenced-run", "dev"),
            ("debug/deps/vm_tier-0123", "dev"),
            ("release/fenced-run", "release"),
        ] {
            let d = resolve_from(&Inputs {
                exe: Some(target.join(exe)),
                home: Some("/home/u".into()),
                ..Inputs::default()
            })
            .expect("resolves");
            assert_eq!(d.source, Source::BuildTree, "{exe}");
            assert_eq!(d.dir, target, "{exe}");
            let b = d.build_tree.expect("build tree");
            assert_eq!(
                (b.workspace.as_path(), b.profile.as_str()),
                (t.path(), profile)
            );
        }
        // The flag, then the variable, win over the build tree (which is still known, for building the agent).
        let d = resolve_from(&Inputs {
            flag: Some("/srv/fr".into()),
            env: Some("/env/fr".into()),
            exe: Some(target.join("debug/fenced-run")),
            ..Inputs::default()
        })
        .expect("flag");
        assert_eq!(
            (d.dir.as_path(), d.source),
            (Path::new("/srv/fr"), Source::Flag)
        );
        assert!(d.build_tree.is_some());
        let d = resolve_from(&Inputs {
            env: Some("/env/fr".into()),
            ..Inputs::default()
        })
        .expect("env");
        assert_eq!(
            (d.dir.as_path(), d.source),
            (Path::new("/env/fr"), Source::Env)
        );
    }

    #[test]
    fn an_installed_binary_never_looks_into_the_tree_it_was_built_from() {
        let t = tempfile::tempdir().expect("tmp");
        workspace(&t.path().join("src"));
        let bin = t.path().join("home/u/.cargo/bin/fenced-run");
        std::fs::create_dir_all(bin.parent().expect("parent")).expect("dirs");
        std::fs::write(&bin, b"").expect("bin");
        let inputs = Inputs {
            exe: Some(bin.clone()),
            home: Some("/home/u".into()),
            // Cargo names a workspace (the binary was started from `cargo test`): it must not matter.
            cargo_workspace: Some(t.path().join("src")),
            ..Inputs::default()
        };
        let d = resolve_from(&inputs).expect("home");
        assert_eq!(
            (d.dir.as_path(), d.source, d.build_tree),
            (
                Path::new("/home/u/.local/share/fenced-run"),
                Source::Home,
                None
            )
        );
        let d = resolve_from(&Inputs {
            xdg_data_home: Some("/xdg".into()),
            ..inputs.clone()
        })
        .expect("xdg");
        assert_eq!(
            (d.dir.as_path(), d.source),
            (Path::new("/xdg/fenced-run"), Source::Xdg)
        );
        // A relative XDG_DATA_HOME is ignored (the XDG spec), a relative flag or variable refused by name.
        let d = resolve_from(&Inputs {
            xdg_data_home: Some("rel".into()),
            ..inputs.clone()
        })
        .expect("home");
        assert_eq!(d.source, Source::Home);
        let e = resolve_from(&Inputs {
            env: Some("rel/dir".into()),
            ..inputs.clone()
        })
        .expect_err("relative");
        assert_eq!(
            e.to_string(),
            "FENCED_RUN_DATA_DIR rel/dir: the data directory must be an absolute path (docs/install.md)"
        );
        let e = resolve_from(&Inputs {
            exe: Some(bin),
            ..Inputs::default()
        })
        .expect_err("nothing");
        assert_eq!(e, DataDirError::Unset);
        assert!(e.to_string().contains("--data-dir DIR"), "{e}");
    }

    #[test]
    fn a_target_directory_outside_the_workspace_uses_cargos_workspace_only_if_it_is_one() {
        let t = tempfile::tempdir().expect("tmp");
        workspace(&t.path().join("ws"));
        let target = t.path().join("elsewhere");
        std::fs::create_dir_all(target.join("debug")).expect("dirs");
        std::fs::write(target.join("CACHEDIR.TAG"), TAG).expect("tag");
        let exe = target.join("debug/fenced-run");
        let b = build_tree_of(&exe, Some(&t.path().join("ws"))).expect("tree");
        assert_eq!(
            (b.target.as_path(), b.profile.as_str()),
            (target.as_path(), "dev")
        );
        assert!(b.workspace.ends_with("ws"), "{}", b.workspace.display());
        assert_eq!(build_tree_of(&exe, Some(&t.path().join("gone"))), None);
        assert_eq!(build_tree_of(&exe, None), None);
    }

    #[test]
    fn a_target_directory_made_before_cargos_first_build_is_known_by_its_rustc_cache() {
        // `mkdir target` before `cargo build` (.ci/run's clone): cargo writes no CACHEDIR.TAG into a directory it
        // did not create, only .rustc_info.json.
        let t = tempfile::tempdir().expect("tmp");
        workspace(t.path());
        let target = t.path().join("target");
        std::fs::remove_file(target.join("CACHEDIR.TAG")).expect("untag");
        std::fs::create_dir_all(target.join("debug")).expect("dirs");
        let exe = target.join("debug/fenced-run");
        assert_eq!(build_tree_of(&exe, None), None, "a plain directory");
        std::fs::write(target.join(".rustc_info.json"), "{}").expect("rustc cache");
        let b = build_tree_of(&exe, None).expect("tree");
        assert_eq!(
            (b.target.as_path(), b.workspace.as_path()),
            (target.as_path(), t.path())
        );
    }
}
