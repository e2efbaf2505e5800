//! The job file of DESIGN.md ("Contracts/Job file") as typed structs, and its one loader.
//! `fenced-run run`, intake stage 3 and the guest agent all load jobs here, so an unknown key, a wrong type, a
//! missing value, an injected environment name or a credential path is refused the same way everywhere.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use toml::Spanned;

pub use crate::allow::{AllowEntry, AllowHost, HostError, HostName, RepoUrl};

/// Default `[install] timeout_seconds`.
pub const DEFAULT_INSTALL_TIMEOUT_SECONDS: u64 = 600;
/// Default `[test] timeout_seconds`.
pub const DEFAULT_TEST_TIMEOUT_SECONDS: u64 = 900;
/// Default `[limits] memory_mib`.
pub const DEFAULT_MEMORY_MIB: u64 = 4096;
/// Default `[limits] pids`.
pub const DEFAULT_PIDS: u64 = 512;
/// Default `[limits] disk_mib`.
pub const DEFAULT_DISK_MIB: u64 = 4096;
/// Default `[limits] open_files`.
pub const DEFAULT_OPEN_FILES: u64 = 4096;
/// Largest job file the loader reads (bytes); a job file is a few hundred bytes.
pub const MAX_JOB_FILE_BYTES: u64 = 1024 * 1024;

/// A job file that could not be loaded: every variant names the file, the line and the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The file could not be read.
    #[error("{origin}: cannot read job file: {source}")]
    Read {
        /// The job file.
        origin: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_JOB_FILE_BYTES`].
    #[error("{origin}: job file is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// The job file.
        origin: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The TOML is malformed, or a key is unknown, of the wrong type or missing.
    #[error("{origin}:{line}:{column}: `{key}`: {message}")]
    Syntax {
        /// The job file.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// The dotted key the error is about (`limits.pids`), or `<document>`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A value parsed but is not acceptable (a denied environment name, a credential path, a bad allow entry...).
    #[error("{origin}:{line}:{column}: `{key}`: {message}")]
    Invalid {
        /// The job file.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// The dotted key the error is about.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl JobError {
    /// The dotted key this error is about, when it has one.
    pub fn key(&self) -> Option<&str> {
        match self {
            JobError::Syntax { key, .. } | JobError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The 1-based line this error is about, when it has one.
    pub fn line(&self) -> Option<usize> {
        match self {
            JobError::Syntax { line, .. } | JobError::Invalid { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// A loaded, validated job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Job {
    /// `[repository]`.
    pub repository: Repository,
    /// `[install]`, absent when the job has no install phase.
    pub install: Option<InstallSpec>,
    /// `[test]` (all of it optional).
    pub test: TestSpec,
    /// `[limits]` with defaults filled in.
    pub limits: Limits,
    /// `[env]`.
    pub env: EnvSpec,
    /// `[sandbox]`.
    pub sandbox: SandboxSpec,
    /// `[image]`.
    pub image: ImageSpec,
    /// SHA-256 of the job file's bytes, lowercase hex (the verdict's `inputs.job_sha256`).
    pub sha256: String,
    /// The directory relative paths of the job resolve against (the job file's directory).
    pub base_dir: PathBuf,
}

/// `[repository]`: what to test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Repository {
    /// A directory, `.tar`/`.tar.gz`/`.zip` or git bundle relative to the job file; empty when the job names
    /// the repository by [`Repository::url`] instead (the two are exclusive).
    pub path: String,
    /// `repository.url`: an `http://` or `https://` URL the fence fetches the pinned commit from, in the
    /// install sandbox through the egress proxy (docs/job-file.md); `None` for a repository in the bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The commit the patch claims to apply to (hex, 7 to 64 digits, lowercase; with `url`, exactly 40 or 64).
    pub commit: Option<String>,
    /// A unified diff applied before the install phase, relative to the job file.
    pub patch: Option<PathBuf>,
}

impl Repository {
    /// The repository URL's scheme, host and port, when the job names one (`repository.url`); `None` for a
    /// repository in the bundle. The loader accepted only URLs [`check_fetch_url`] passes.
    pub fn url(&self) -> Option<Result<RepoUrl, HostError>> {
        self.url.as_deref().map(check_fetch_url)
    }

    /// What names the repository in messages: `repository.url = ...` or `repository.path = ...`.
    pub fn describe(&self) -> String {
        match &self.url {
            Some(u) => format!("repository.url = `{u}`"),
            None => format!("repository.path = `{}`", self.path),
        }
    }
}

/// Whether `path` is written as a URL (`scheme://...`), which `repository.path` never is.
pub fn looks_like_url(path: &str) -> bool {
    path.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'.' || b == b'-')
    })
}

/// Checks a `repository.url` as the fence will fetch it: `http://` or `https://` only, no user information
/// (credentials), no query, no fragment, no whitespace or control characters, a host and a path; returns its
/// scheme, normalised host and port.
pub fn check_fetch_url(url: &str) -> Result<RepoUrl, HostError> {
    let bad = |why: &str| HostError::FetchUrl(format!("`{}`: {why}", url.escape_debug()));
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("not a URL (`https://host[:port]/path`)"));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return Err(bad(&format!(
            "the scheme `{}` is not fetched: only `https://` and `http://`",
            scheme.escape_debug()
        )));
    }
    if url.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(bad("contains whitespace or a control character"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(bad(
            "has user information (`user@` or `user:password@`): credentials are never put in a job",
        ));
    }
    if url.contains('?') {
        return Err(bad("has a query (`?...`)"));
    }
    if url.contains('#') {
        return Err(bad("has a fragment (`#...`)"));
    }
    if path.trim_matches('/').is_empty() {
        return Err(bad("has no repository path after the host"));
    }
    RepoUrl::parse_authority(&scheme, authority)
}

/// `[install]`: the optional install phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct InstallSpec {
    /// The shell command.
    pub command: String,
    /// Where the install phase may connect through the egress proxy.
    pub allow: Vec<AllowEntry>,
    /// Wall-clock budget of the phase (default [`DEFAULT_INSTALL_TIMEOUT_SECONDS`]).
    pub timeout_seconds: u64,
}

/// `[test]`: the test phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TestSpec {
    /// The shell command; `None` means "detect from the repository".
    pub command: Option<String>,
    /// Wall-clock budget of the phase (default [`DEFAULT_TEST_TIMEOUT_SECONDS`]).
    pub timeout_seconds: u64,
    /// A JUnit XML report file (relative to the repository) to read counts from.
    pub junit: Option<PathBuf>,
    /// Globs (relative to the repository, `/`-separated) of the paths the patch and the install phase may not
    /// change: the fence restores them from the repository as received before the test phase (docs/job-file.md).
    pub protect: Vec<String>,
    /// What a patch that changes a protected path gets.
    pub on_protected_change: OnProtectedChange,
}

/// `[test] on_protected_change`: what happens when the patch changes a protected path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnProtectedChange {
    /// The path is restored before the test phase and the change listed in the verdict (the default).
    #[default]
    Restore,
    /// The run is refused at stage `patch`, naming the paths.
    Refuse,
}

/// The most globs `[test] protect` may list.
pub const MAX_PROTECT_GLOBS: usize = 256;

/// `[limits]`: resources of each phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Limits {
    /// Memory limit in MiB (default [`DEFAULT_MEMORY_MIB`]).
    pub memory_mib: u64,
    /// Maximum number of processes/threads (default [`DEFAULT_PIDS`]).
    pub pids: u64,
    /// Scratch and written-file size limit in MiB (default [`DEFAULT_DISK_MIB`]).
    pub disk_mib: u64,
    /// RLIMIT_NOFILE (default [`DEFAULT_OPEN_FILES`]).
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mib: DEFAULT_MEMORY_MIB,
            pids: DEFAULT_PIDS,
            disk_mib: DEFAULT_DISK_MIB,
            open_files: DEFAULT_OPEN_FILES,
        }
    }
}

/// `[env]`: the environment of the untrusted commands besides PATH, HOME, TMPDIR and LANG.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EnvSpec {
    /// Names copied from the runner's environment (when set there).
    pub passthrough: Vec<String>,
    /// Names set to fixed values.
    pub set: BTreeMap<String, String>,
}

/// The toolchain sets a toolchain image can hold (`fenced-run image build --toolchains`).
pub const TOOLCHAINS: &[&str] = &["go", "node", "python", "rust"];

/// `[image]`: what the guest image must hold for this job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ImageSpec {
    /// The toolchain sets the job needs (names of [`TOOLCHAINS`], sorted, without duplicates); empty when the
    /// job needs no toolchain image (the sandbox then sees the runner's own system directories).
    pub toolchains: Vec<String>,
}

/// `[sandbox]`: extra read-only paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SandboxSpec {
    /// Absolute or `~/`-relative paths made visible read-only; credential paths are refused at load.
    pub read: Vec<String>,
}

impl SandboxSpec {
    /// Expands `~` against `home` and checks each path again against the credential list; the fence must
    /// check the canonical (symlink-resolved) path again with [`check_read_path`] before mounting it.
    pub fn resolve(&self, home: &Path) -> Result<Vec<PathBuf>, ReadPathError> {
        self.read
            .iter()
            .map(|r| {
                let p = expand_home(r, home)?;
                check_read_path(&p, Some(home))?;
                Ok(p)
            })
            .collect()
    }
}

fn expand_home(raw: &str, home: &Path) -> Result<PathBuf, ReadPathError> {
    if let Some(rest) = raw.strip_prefix("~/") {
        Ok(home.join(rest))
    } else if raw.starts_with('/') {
        Ok(PathBuf::from(raw))
    } else {
        Err(ReadPathError::NotAbsoluteOrHome(raw.to_owned()))
    }
}

/// Why a `[sandbox] read` path is refused; each names the path as written or resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadPathError {
    /// A resolved path that is relative.
    #[error("`{0}`: must be absolute")]
    NotAbsolute(String),
    /// An entry neither absolute nor `~/`-relative.
    #[error("`{0}`: must be absolute or start with `~/`")]
    NotAbsoluteOrHome(String),
    /// A component that is not UTF-8.
    #[error("`{0}`: not UTF-8")]
    NotUtf8(String),
    /// A `..` component.
    #[error("`{0}`: `..` is not allowed")]
    ParentDir(String),
    /// A path with a Windows prefix.
    #[error("`{0}`: not a Unix path")]
    NotUnix(String),
    /// `/` itself.
    #[error("`/`: the whole file system cannot be a read path")]
    WholeFileSystem,
    /// A component naming a socket or a private key.
    #[error("`{path}`: `{name}` is a socket or key and cannot be read")]
    SocketOrKey {
        /// The path.
        path: String,
        /// The component.
        name: String,
    },
    /// A path overlapping a system path of [`SYSTEM_DENIED_PATHS`].
    #[error("`{path}`: overlaps `{denied}` (sockets, secrets or other users' files)")]
    SystemPath {
        /// The path.
        path: String,
        /// The system path it overlaps.
        denied: String,
    },
    /// A path above the home directory.
    #[error("`{path}`: contains the home directory `{home}`")]
    ContainsHome {
        /// The path.
        path: String,
        /// The home directory.
        home: String,
    },
    /// The home directory itself.
    #[error("`{0}`: the whole home directory cannot be a read path")]
    WholeHome(String),
    /// A path overlapping a credential path of [`HOME_CREDENTIAL_PATHS`].
    #[error("`{path}`: overlaps the credential path `~/{credential}`")]
    Credential {
        /// The path.
        path: String,
        /// The credential path, relative to the home.
        credential: String,
    },
    /// A NUL byte in the entry.
    #[error("contains a NUL byte")]
    Nul,
    /// `~user/...`.
    #[error("`{0}`: `~user` is not supported; use `~/` or an absolute path")]
    OtherUsersHome(String),
}

/// Paths under a home directory that hold credentials; a read path equal to, inside, or containing one of
/// these is refused.
pub const HOME_CREDENTIAL_PATHS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".gnupg",
    ".npmrc",
    ".pypirc",
    ".gem/credentials",
    ".m2/settings.xml",
    ".password-store",
    ".local/share/keyrings",
    ".terraform.d/credentials.tfrc.json",
];

/// Absolute paths that hold sockets, secrets, other users' homes or the runner's own state; a read path
/// equal to, inside, or containing one of these is refused.
pub const SYSTEM_DENIED_PATHS: &[&str] = &[
    "/run",
    "/var/run",
    "/proc",
    "/sys",
    "/dev",
    "/root",
    "/home",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/tmp",
    "/var/tmp",
];

/// File names refused anywhere in a read path (sockets and private keys).
const DENIED_NAMES: &[&str] = &[
    "docker.sock",
    "containerd.sock",
    "podman.sock",
    "dbus",
    "bus",
    "id_rsa",
    "id_ecdsa",
    "id_ed25519",
    "id_dsa",
];

fn lexical_components(p: &Path) -> Result<Vec<String>, ReadPathError> {
    let mut out = Vec::new();
    for c in p.components() {
        match c {
            Component::RootDir => {}
            Component::CurDir => {}
            Component::Normal(s) => out.push(
                s.to_str()
                    .ok_or_else(|| ReadPathError::NotUtf8(p.display().to_string()))?
                    .to_string(),
            ),
            Component::ParentDir => {
                return Err(ReadPathError::ParentDir(p.display().to_string()));
            }
            Component::Prefix(_) => return Err(ReadPathError::NotUnix(p.display().to_string())),
        }
    }
    Ok(out)
}

fn overlaps(a: &[String], b: &[&str]) -> bool {
    let n = a.len().min(b.len());
    a[..n].iter().zip(&b[..n]).all(|(x, y)| x == y)
}

/// Checks one read path (absolute, lexically normal) against the credential and socket lists; `home` is the
/// home directory whose credential paths apply (`None`: only the `~/` spelling is known to be a home).
pub fn check_read_path(path: &Path, home: Option<&Path>) -> Result<(), ReadPathError> {
    if !path.is_absolute() {
        return Err(ReadPathError::NotAbsolute(path.display().to_string()));
    }
    let comps = lexical_components(path)?;
    if comps.is_empty() {
        return Err(ReadPathError::WholeFileSystem);
    }
    for name in &comps {
        let lower = name.to_ascii_lowercase();
        if DENIED_NAMES.contains(&lower.as_str())
            || lower.ends_with(".sock")
            || lower.ends_with(".socket")
            || (lower.starts_with("id_") && lower.ends_with(".pub"))
        {
            return Err(ReadPathError::SocketOrKey {
                path: path.display().to_string(),
                name: name.clone(),
            });
        }
    }
    for denied in SYSTEM_DENIED_PATHS {
        let d: Vec<&str> = denied.trim_start_matches('/').split('/').collect();
        if overlaps(&comps, &d) {
            // A home under /home is allowed when the caller says it is the home: its own entries are
            // checked against the credential list below, but nothing above or beside it.
            let under_home = home.is_some_and(|h| path.starts_with(h) && path != h);
            if !(under_home && (*denied == "/home" || *denied == "/root")) {
                return Err(ReadPathError::SystemPath {
                    path: path.display().to_string(),
                    denied: (*denied).to_owned(),
                });
            }
        }
    }
    if let Some(home) = home {
        if let Ok(rel) = path.strip_prefix(home) {
            let rel = lexical_components(rel)?;
            check_home_relative(&rel, &path.display().to_string())?;
        } else if home.starts_with(path) {
            return Err(ReadPathError::ContainsHome {
                path: path.display().to_string(),
                home: home.display().to_string(),
            });
        }
    }
    Ok(())
}

fn check_home_relative(rel: &[String], shown: &str) -> Result<(), ReadPathError> {
    if rel.is_empty() {
        return Err(ReadPathError::WholeHome(shown.to_owned()));
    }
    for cred in HOME_CREDENTIAL_PATHS {
        let c: Vec<&str> = cred.split('/').collect();
        if overlaps(rel, &c) {
            return Err(ReadPathError::Credential {
                path: shown.to_owned(),
                credential: (*cred).to_owned(),
            });
        }
    }
    Ok(())
}

/// Checks a `[sandbox] read` entry as written in the job file (before `~` is expanded).
pub fn check_read_entry(raw: &str) -> Result<(), ReadPathError> {
    if raw.contains('\0') {
        return Err(ReadPathError::Nul);
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        let comps = lexical_components(Path::new(rest))?;
        let shown = raw.to_string();
        check_home_relative(&comps, &shown)?;
        for name in &comps {
            if DENIED_NAMES.contains(&name.to_ascii_lowercase().as_str()) || name.ends_with(".sock")
            {
                return Err(ReadPathError::SocketOrKey {
                    path: raw.to_owned(),
                    name: name.clone(),
                });
            }
        }
        Ok(())
    } else if raw == "~" {
        Err(ReadPathError::WholeHome("~".into()))
    } else if raw.starts_with('~') {
        Err(ReadPathError::OtherUsersHome(raw.to_owned()))
    } else if raw.starts_with('/') {
        check_read_path(Path::new(raw), None)
    } else {
        Err(ReadPathError::NotAbsoluteOrHome(raw.to_owned()))
    }
}

/// Environment names refused exactly (compared in ASCII upper case).
pub const DENIED_ENV_NAMES: &[&str] = &[
    // the shell and what it sources or evaluates
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "ZDOTDIR",
    // set by the fence itself
    "PATH",
    "HOME",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    // glibc: loaded modules and configuration (its own "unsecure" list)
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
    // Python
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONEXECUTABLE",
    "PYTHONBREAKPOINT",
    "PYTHONPLATLIBDIR",
    "PYTHONINSPECT",
    // Node
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_REPL_EXTERNAL_MODULE",
    // Rust and Cargo
    "RUSTC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTDOC",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "CARGO_HOME",
    "RUSTUP_HOME",
    // Perl, Ruby, Java
    "PERL5LIB",
    "PERLLIB",
    "PERL5OPT",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "GEM_HOME",
    "GEM_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
];

/// Environment name prefixes refused (compared in ASCII upper case).
pub const DENIED_ENV_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "BASH_FUNC_",
    "CARGO_BUILD_",
    "NPM_CONFIG_",
];

/// Environment name suffixes refused for names starting with `CARGO_` (`CARGO_TARGET_<triple>_RUNNER`...).
pub const DENIED_CARGO_SUFFIXES: &[&str] = &["_RUNNER", "_LINKER", "_RUSTFLAGS", "_RUSTDOCFLAGS"];

/// Why an environment name may not be passed to or set for the untrusted commands, or `None` if it may.
pub fn env_name_denied(name: &str) -> Option<String> {
    if name.is_empty()
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        || name.as_bytes()[0].is_ascii_digit()
    {
        return Some(format!(
            "`{name}` is not a valid environment name ([A-Za-z_][A-Za-z0-9_]*)"
        ));
    }
    let upper = name.to_ascii_uppercase();
    if DENIED_ENV_NAMES.contains(&upper.as_str()) {
        return Some(format!(
            "`{name}` changes what runs or where code is loaded from (or is set by the fence)"
        ));
    }
    if let Some(p) = DENIED_ENV_PREFIXES.iter().find(|p| upper.starts_with(*p)) {
        return Some(format!(
            "`{name}`: names starting with `{p}` change what runs or where code is loaded from"
        ));
    }
    if upper.starts_with("CARGO_") {
        if let Some(s) = DENIED_CARGO_SUFFIXES.iter().find(|s| upper.ends_with(*s)) {
            return Some(format!("`{name}`: `CARGO_*{s}` changes what cargo runs"));
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------------------
// Raw form, exactly what the file says, with spans for messages.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    repository: Spanned<RawRepository>,
    install: Option<RawInstall>,
    test: Option<RawTest>,
    limits: Option<RawLimits>,
    env: Option<RawEnv>,
    sandbox: Option<RawSandbox>,
    image: Option<RawImage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImage {
    #[serde(default)]
    toolchains: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRepository {
    path: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    commit: Option<Spanned<String>>,
    patch: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstall {
    command: Spanned<String>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    timeout_seconds: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTest {
    command: Option<Spanned<String>>,
    timeout_seconds: Option<Spanned<u64>>,
    junit: Option<Spanned<String>>,
    #[serde(default)]
    protect: Vec<Spanned<String>>,
    on_protected_change: Option<Spanned<String>>,
}

/// `[limits]` as written (read by [`TomlCtx::limits`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    memory_mib: Option<Spanned<u64>>,
    pids: Option<Spanned<u64>>,
    disk_mib: Option<Spanned<u64>>,
    open_files: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    #[serde(default)]
    passthrough: Vec<Spanned<String>>,
    #[serde(default)]
    set: BTreeMap<Spanned<String>, Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    #[serde(default)]
    read: Vec<Spanned<String>>,
}

/// The required keys of the job file and the table each belongs to (`""` for the top level).
const REQUIRED_FIELDS: &[(&str, &str)] = &[("repository", ""), ("command", "install")];

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut off = offset.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The dotted key at a byte offset: the nearest `[table]` header above it and the key of its line.
pub fn key_at(text: &str, offset: usize) -> String {
    let (line_no, _) = line_col(text, offset);
    let lines: Vec<&str> = text.lines().collect();
    let mut table = String::new();
    let mut key = String::new();
    for (i, line) in lines.iter().enumerate().take(line_no) {
        let t = line.trim();
        if t.starts_with('[') {
            table = t
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            key.clear();
        } else if i + 1 == line_no {
            if let Some((k, _)) = t.split_once('=') {
                key = k.trim().trim_matches('"').trim_matches('\'').to_string();
            }
        }
    }
    match (table.is_empty(), key.is_empty()) {
        (true, true) => "<document>".into(),
        (true, false) => key,
        (false, true) => table,
        (false, false) => format!("{table}.{key}"),
    }
}

/// The strict reading shared by `job.toml` and `task.toml`: parse with the schema's unknown keys refused, and
/// turn every problem into a [`JobError`] naming the file, line, column and dotted key.
pub struct TomlCtx<'a> {
    origin: String,
    text: &'a str,
}

impl<'a> TomlCtx<'a> {
    /// A reader of `text`, whose problems name `origin`.
    pub fn new(origin: String, text: &'a str) -> TomlCtx<'a> {
        TomlCtx { origin, text }
    }

    /// `bytes` as UTF-8 text, or a syntax error at the first byte that is not (`what` names the file).
    pub fn utf8<'b>(bytes: &'b [u8], origin: &str, what: &str) -> Result<&'b str, JobError> {
        std::str::from_utf8(bytes).map_err(|e| {
            let (line, column) = line_col(
                &String::from_utf8_lossy(&bytes[..e.valid_up_to()]),
                e.valid_up_to(),
            );
            JobError::Syntax {
                origin: origin.to_owned(),
                line,
                column,
                key: "<document>".into(),
                message: format!("{what} is not UTF-8"),
            }
        })
    }

    /// Deserializes the whole text as `T`. `required` lists each required field with its parent table (`""`
    /// at the top), so that a missing field is named by its dotted key.
    pub fn parse<T: serde::de::DeserializeOwned>(
        &self,
        required: &[(&str, &str)],
    ) -> Result<T, JobError> {
        let text = self.text;
        toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let (line, column) = line_col(text, span.start);
            let message = e.message().trim().to_string();
            let mut key = key_at(text, span.start);
            if let Some(field) = message
                .strip_prefix("missing field `")
                .and_then(|m| m.split('`').next())
            {
                // The span of a missing field is its table, which at offset 0 cannot be told from the
                // document; the schema can: each required field has one parent.
                key = match required.iter().find(|(f, _)| *f == field) {
                    Some((f, "")) => f.to_string(),
                    Some((f, parent)) => format!("{parent}.{f}"),
                    None => format!("{key}.{field}"),
                };
            } else if let Some(field) = message
                .strip_prefix("unknown field `")
                .and_then(|m| m.split('`').next())
            {
                // The span is the unknown key itself; make sure the key shown is that key.
                if !key.ends_with(field) {
                    key = if key == "<document>" {
                        field.to_string()
                    } else {
                        format!("{key}.{field}")
                    };
                }
            }
            JobError::Syntax {
                origin: self.origin.clone(),
                line,
                column,
                key,
                message,
            }
        })
    }

    /// `[limits]` with the defaults filled in, each value at least 1.
    pub fn limits(&self, raw: &Option<RawLimits>) -> Result<Limits, JobError> {
        Ok(match raw {
            None => Limits::default(),
            Some(l) => Limits {
                memory_mib: self.positive(
                    &l.memory_mib,
                    "limits.memory_mib",
                    DEFAULT_MEMORY_MIB,
                )?,
                pids: self.positive(&l.pids, "limits.pids", DEFAULT_PIDS)?,
                disk_mib: self.positive(&l.disk_mib, "limits.disk_mib", DEFAULT_DISK_MIB)?,
                open_files: self.positive(
                    &l.open_files,
                    "limits.open_files",
                    DEFAULT_OPEN_FILES,
                )?,
            },
        })
    }

    /// An allowlist: each entry parsed by [`AllowEntry::parse`], an error naming `key` and the entry's line.
    pub fn allow(&self, list: &[Spanned<String>], key: &str) -> Result<Vec<AllowEntry>, JobError> {
        list.iter()
            .map(|a| {
                AllowEntry::parse(a.get_ref())
                    .map_err(|e| self.invalid(a.span(), key, e.to_string()))
            })
            .collect()
    }

    /// An error at `span` about `key`.
    pub fn invalid(&self, span: Range<usize>, key: &str, message: impl Into<String>) -> JobError {
        let (line, column) = line_col(self.text, span.start);
        JobError::Invalid {
            origin: self.origin.clone(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// `v`, or `default` when absent; 0 is refused.
    pub fn positive(
        &self,
        v: &Option<Spanned<u64>>,
        key: &str,
        default: u64,
    ) -> Result<u64, JobError> {
        match v {
            None => Ok(default),
            Some(s) if *s.get_ref() == 0 => Err(self.invalid(s.span(), key, "must be at least 1")),
            Some(s) => Ok(*s.get_ref()),
        }
    }

    fn rel_path(&self, v: &Spanned<String>, key: &str) -> Result<PathBuf, JobError> {
        let s = v.get_ref();
        if s.is_empty() {
            return Err(self.invalid(v.span(), key, "must not be empty"));
        }
        if s.contains('\0') {
            return Err(self.invalid(v.span(), key, "contains a NUL byte"));
        }
        Ok(PathBuf::from(s))
    }

    /// `[test] protect`: each glob relative to the repository, inside it, and valid for [`protect_matcher`].
    fn protect_globs(&self, globs: &[Spanned<String>]) -> Result<Vec<String>, JobError> {
        if globs.len() > MAX_PROTECT_GLOBS {
            return Err(self.invalid(
                globs[MAX_PROTECT_GLOBS].span(),
                "test.protect",
                format!("lists {} globs; at most {MAX_PROTECT_GLOBS}", globs.len()),
            ));
        }
        let mut out = Vec::with_capacity(globs.len());
        for g in globs {
            let s = g.get_ref();
            let why = if s.is_empty() {
                Some("must not be empty".to_owned())
            } else if s.contains('\0') {
                Some("contains a NUL byte".to_owned())
            } else if s.starts_with('/') {
                Some("is absolute; globs are relative to the repository".to_owned())
            } else if s.split('/').any(|c| c == "..") {
                Some("has a `..` component; globs stay inside the repository".to_owned())
            } else if s.split('/').next() == Some(".git") {
                Some(
                    "names the `.git` directory, which the fence never hands to the tests"
                        .to_owned(),
                )
            } else {
                protect_matcher(std::slice::from_ref(s))
                    .err()
                    .map(|e| e.to_string())
            };
            if let Some(why) = why {
                return Err(self.invalid(
                    g.span(),
                    "test.protect",
                    format!("`{}` {why}", s.escape_debug()),
                ));
            }
            out.push(s.clone());
        }
        Ok(out)
    }

    /// A command: not blank, no NUL byte.
    pub fn command(&self, v: &Spanned<String>, key: &str) -> Result<String, JobError> {
        let s = v.get_ref();
        if s.trim().is_empty() {
            return Err(self.invalid(v.span(), key, "must not be empty"));
        }
        if s.contains('\0') {
            return Err(self.invalid(v.span(), key, "contains a NUL byte"));
        }
        Ok(s.clone())
    }
}

/// The matcher of `[test] protect` globs: `*` and `?` stop at `/`, `**` crosses directories, `{a,b}` and
/// `[..]` as in git's pathspecs (the `globset` crate's syntax with `literal_separator`). A glob that names a
/// directory (`tests` or `tests/`) protects everything below it too.
pub fn protect_matcher(globs: &[String]) -> Result<globset::GlobSet, GlobError> {
    let mut b = globset::GlobSetBuilder::new();
    for g in globs {
        let trimmed = g.trim_end_matches('/');
        for pattern in [trimmed.to_owned(), format!("{trimmed}/**")] {
            let glob = globset::GlobBuilder::new(&pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| GlobError::Glob(e.kind().to_string()))?;
            b.add(glob);
        }
    }
    b.build().map_err(|e| GlobError::Set(e.kind().to_string()))
}

/// Why `[test] protect` globs do not compile (the message follows the key and the glob).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GlobError {
    /// One glob is malformed (what `globset` said).
    #[error("is not a valid glob: {0}")]
    Glob(String),
    /// The set as a whole did not build.
    #[error("is not a valid glob set: {0}")]
    Set(String),
}

impl Job {
    /// Reads and loads a job file; relative paths resolve against its directory.
    pub fn load(path: &Path) -> Result<Job, JobError> {
        let origin = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|source| JobError::Read {
            origin: origin.clone(),
            source,
        })?;
        if meta.len() > MAX_JOB_FILE_BYTES {
            return Err(JobError::TooLarge {
                origin,
                size: meta.len(),
                limit: MAX_JOB_FILE_BYTES,
            });
        }
        let bytes = std::fs::read(path).map_err(|source| JobError::Read {
            origin: origin.clone(),
            source,
        })?;
        Job::from_bytes(&bytes, path)
    }

    /// Loads a job from bytes (must be UTF-8); `origin` is the job file's path, used in messages and as the
    /// base of relative paths.
    pub fn from_bytes(bytes: &[u8], origin: &Path) -> Result<Job, JobError> {
        let text = TomlCtx::utf8(bytes, &origin.display().to_string(), "the job file")?;
        Job::from_toml_str(text, origin)
    }

    /// Loads a job from TOML text; `origin` is the job file's path, used in messages and as the base of
    /// relative paths.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Job, JobError> {
        let cx = TomlCtx::new(origin.display().to_string(), text);
        let raw: RawJob = cx.parse(REQUIRED_FIELDS)?;

        let r = raw.repository.get_ref();
        let table = raw.repository.span();
        let (path, url) = match (&r.path, &r.url) {
            (Some(_), Some(u)) => {
                return Err(cx.invalid(
                    u.span(),
                    "repository.url",
                    "`path` and `url` are exclusive: name the repository in the bundle by `path` or fetch it by `url`",
                ))
            }
            (None, None) => {
                return Err(cx.invalid(
                    table,
                    "repository.path",
                    "missing: name the repository by `path` (in the bundle) or `url` (fetched by the fence)",
                ))
            }
            (Some(p), None) => {
                let v = p.get_ref();
                if v.trim().is_empty() || v.contains('\0') {
                    return Err(cx.invalid(p.span(), "repository.path", "must be a non-empty path"));
                }
                if looks_like_url(v) {
                    return Err(cx.invalid(
                        p.span(),
                        "repository.path",
                        format!(
                            "`{v}` is a URL: name it as `repository.url` (http:// or https://) with `commit` = the \
                             full commit id, and the URL's host:port on `[install] allow`"
                        ),
                    ));
                }
                (v.clone(), None)
            }
            (None, Some(u)) => {
                let v = u.get_ref();
                if let Err(e) = check_fetch_url(v) {
                    return Err(cx.invalid(u.span(), "repository.url", e.to_string()));
                }
                (String::new(), Some(v.clone()))
            }
        };
        let repository = Repository {
            path,
            url,
            commit: match &r.commit {
                None => None,
                Some(c) => {
                    let v = c.get_ref();
                    if !(7..=64).contains(&v.len()) || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(cx.invalid(
                            c.span(),
                            "repository.commit",
                            format!("`{v}` is not a commit id (7 to 64 hex digits)"),
                        ));
                    }
                    Some(v.to_ascii_lowercase())
                }
            },
            patch: r
                .patch
                .as_ref()
                .map(|p| cx.rel_path(p, "repository.patch"))
                .transpose()?,
        };
        if repository.url.is_some() {
            match (&r.commit, &repository.commit) {
                (Some(c), Some(v)) if v.len() != 40 && v.len() != 64 => {
                    return Err(cx.invalid(
                        c.span(),
                        "repository.commit",
                        format!(
                            "`{v}`: a repository fetched by `url` is pinned by its full commit id (40 hex digits, \
                             or 64 for a SHA-256 repository), not an abbreviation"
                        ),
                    ))
                }
                (None, _) => {
                    return Err(cx.invalid(
                        table.clone(),
                        "repository.commit",
                        "missing: a repository fetched by `url` must be pinned by its full commit id",
                    ))
                }
                _ => {}
            }
        }

        let install = match &raw.install {
            None => None,
            Some(i) => {
                let allow = cx.allow(&i.allow, "install.allow")?;
                Some(InstallSpec {
                    command: cx.command(&i.command, "install.command")?,
                    allow,
                    timeout_seconds: cx.positive(
                        &i.timeout_seconds,
                        "install.timeout_seconds",
                        DEFAULT_INSTALL_TIMEOUT_SECONDS,
                    )?,
                })
            }
        };

        let test = match &raw.test {
            None => TestSpec {
                command: None,
                timeout_seconds: DEFAULT_TEST_TIMEOUT_SECONDS,
                junit: None,
                protect: Vec::new(),
                on_protected_change: OnProtectedChange::Restore,
            },
            Some(t) => TestSpec {
                command: t
                    .command
                    .as_ref()
                    .map(|c| cx.command(c, "test.command"))
                    .transpose()?,
                timeout_seconds: cx.positive(
                    &t.timeout_seconds,
                    "test.timeout_seconds",
                    DEFAULT_TEST_TIMEOUT_SECONDS,
                )?,
                junit: t
                    .junit
                    .as_ref()
                    .map(|j| cx.rel_path(j, "test.junit"))
                    .transpose()?,
                protect: cx.protect_globs(&t.protect)?,
                on_protected_change: match &t.on_protected_change {
                    None => OnProtectedChange::Restore,
                    Some(v) => match v.get_ref().as_str() {
                        "restore" => OnProtectedChange::Restore,
                        "refuse" => OnProtectedChange::Refuse,
                        other => {
                            return Err(cx.invalid(
                                v.span(),
                                "test.on_protected_change",
                                format!(
                                    "is `{}`; expected `restore` or `refuse`",
                                    other.escape_debug()
                                ),
                            ))
                        }
                    },
                },
            },
        };

        let limits = cx.limits(&raw.limits)?;

        let mut env = EnvSpec::default();
        if let Some(e) = &raw.env {
            for p in &e.passthrough {
                if let Some(why) = env_name_denied(p.get_ref()) {
                    return Err(cx.invalid(p.span(), "env.passthrough", why));
                }
                env.passthrough.push(p.get_ref().clone());
            }
            for (k, v) in &e.set {
                if let Some(why) = env_name_denied(k.get_ref()) {
                    return Err(cx.invalid(k.span(), &format!("env.set.{}", k.get_ref()), why));
                }
                if v.get_ref().contains('\0') {
                    return Err(cx.invalid(
                        v.span(),
                        &format!("env.set.{}", k.get_ref()),
                        "value contains a NUL byte",
                    ));
                }
                env.set.insert(k.get_ref().clone(), v.get_ref().clone());
            }
        }

        let mut sandbox = SandboxSpec::default();
        if let Some(s) = &raw.sandbox {
            for r in &s.read {
                check_read_entry(r.get_ref())
                    .map_err(|e| cx.invalid(r.span(), "sandbox.read", e.to_string()))?;
                sandbox.read.push(r.get_ref().clone());
            }
        }

        let mut image = ImageSpec::default();
        if let Some(i) = &raw.image {
            for t in &i.toolchains {
                if !TOOLCHAINS.contains(&t.get_ref().as_str()) {
                    return Err(cx.invalid(
                        t.span(),
                        "image.toolchains",
                        format!(
                            "unknown toolchain {:?}, expected one of {}",
                            t.get_ref(),
                            TOOLCHAINS.join(", ")
                        ),
                    ));
                }
                image.toolchains.push(t.get_ref().clone());
            }
            image.toolchains.sort();
            image.toolchains.dedup();
        }

        // A repository URL is fetched in the install sandbox through the egress proxy with the job's own
        // allowlist: its host:port must be on it (the proxy would refuse the fetch otherwise).
        if let (Some(Ok(u)), Some(text)) = (repository.url(), &r.url) {
            let allowed = install.as_ref().is_some_and(|i| {
                i.allow
                    .iter()
                    .any(|a| a.port == u.port && a.matches_normal(&u.host))
            });
            if !allowed {
                let hostport = format!("{}:{}", u.host, u.port);
                return Err(cx.invalid(
                    text.span(),
                    "repository.url",
                    format!(
                        "`{}`: its host and port `{hostport}` are not on `[install] allow`; the fence fetches the \
                         repository through the install phase's egress proxy, so add `{hostport}` there",
                        text.get_ref()
                    ),
                ));
            }
        }

        Ok(Job {
            repository,
            install,
            test,
            limits,
            env,
            sandbox,
            image,
            sha256: hex::encode(Sha256::digest(text.as_bytes())),
            base_dir: origin.parent().map(Path::to_path_buf).unwrap_or_default(),
        })
    }

    /// A path of the job (repository, patch) resolved against the job file's directory.
    pub fn resolve(&self, relative: &Path) -> PathBuf {
        self.base_dir.join(relative)
    }
}
