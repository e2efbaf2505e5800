//! Stage 3: structure. The bundle's `job.toml` (loaded once, with the same loader as `fenced-run run`, by
//! [`crate::run_stages`]) names what is present inside the bundle: the repository (a directory, an archive unpacked by stage 2, a git
//! bundle, or a `repository.url` whose host passes the address policy, fetched later by the fence) and the
//! patch.

use crate::job::Job;
use crate::receive::{check_repository_url, Resolver};
use crate::report::{Finding, Severity, Stage};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// What stage 3 establishes about a bundle.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Structure {
    /// The loaded job.
    pub job: Job,
    /// Where the repository is as a directory, when it is one (or was unpacked from an archive).
    pub repository_dir: Option<PathBuf>,
    /// Notes (a git bundle intake cannot look into, a URL repository's addresses).
    pub notes: Vec<Finding>,
}

/// Why stage 3 refuses a job; each names the key and the value as written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StructureError {
    /// A path that is absolute.
    #[error("{key} = `{}`: must be relative to the bundle root", path.display())]
    Absolute {
        /// The job's key.
        key: String,
        /// The path.
        path: PathBuf,
    },
    /// A path with a `..` component.
    #[error("{key} = `{}`: must not contain `..`", path.display())]
    ParentDir {
        /// The job's key.
        key: String,
        /// The path.
        path: PathBuf,
    },
    /// A path that resolves (through links) outside the bundle.
    #[error("{key} = `{}`: resolves outside the bundle", path.display())]
    Outside {
        /// The job's key.
        key: String,
        /// The path.
        path: PathBuf,
    },
    /// `repository.url` is not one the fence fetches (the loader refuses these first).
    #[error("repository.url: {0}")]
    BadUrl(#[from] job_policy::allow::HostError),
    /// The URL's host is refused by the address policy (with the operator's `allow_networks`).
    #[error("repository.url: {0}")]
    UrlAddress(#[from] crate::receive::RepoUrlError),
    /// `repository.path` names nothing in the bundle.
    #[error("repository.path = `{}` is not in the bundle", .0.display())]
    RepositoryMissing(PathBuf),
    /// `repository.path` names something intake cannot use.
    #[error(
        "repository.path = `{}` is neither a directory, a .tar/.tar.gz/.zip archive nor a git bundle",
        .0.display()
    )]
    RepositoryKind(PathBuf),
    /// `repository.patch` is not a regular file.
    #[error("repository.patch = `{}` is not a regular file", .0.display())]
    PatchNotFile(PathBuf),
    /// `repository.patch` names nothing in the bundle.
    #[error("repository.patch = `{}` is claimed but not in the bundle", .0.display())]
    PatchMissing(PathBuf),
    /// `test.junit` leaves the repository.
    #[error("test.junit = `{}`: must be relative to the repository, without `..`", .0.display())]
    Junit(PathBuf),
}

/// A path named by the job, which must stay inside the bundle root: relative, no `..`, and (after
/// resolving links) still under the root.
pub fn inside(root: &Path, rel: &Path, key: &str) -> Result<PathBuf, StructureError> {
    if rel.is_absolute() {
        return Err(StructureError::Absolute {
            key: key.to_owned(),
            path: rel.to_path_buf(),
        });
    }
    if rel.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(StructureError::ParentDir {
            key: key.to_owned(),
            path: rel.to_path_buf(),
        });
    }
    let full = root.join(rel);
    if let (Ok(c), Ok(r)) = (fs::canonicalize(&full), fs::canonicalize(root)) {
        if !c.starts_with(&r) {
            return Err(StructureError::Outside {
                key: key.to_owned(),
                path: rel.to_path_buf(),
            });
        }
    }
    Ok(full)
}

/// Whether a file starts like a git bundle (`# v2 git bundle` / `# v3 git bundle`).
pub fn is_git_bundle(path: &Path) -> bool {
    let mut head = [0u8; 16];
    match fs::File::open(path) {
        Ok(mut f) => {
            use std::io::Read;
            f.read(&mut head).is_ok()
                && (head.starts_with(b"# v2 git bundle") || head.starts_with(b"# v3 git bundle"))
        }
        Err(_) => false,
    }
}

/// Stage 3 on a job intake loaded once (stage 1 or 2 read and parsed its file): what it names must lie
/// inside `root` (the bundle root, or a lone job file's directory). `unpacked_repository` is where stage 2
/// unpacked a repository archive, if it did. The job comes back in [`Structure::job`].
pub fn structure_of(
    job: Job,
    root: &Path,
    unpacked_repository: Option<&Path>,
    resolver: &dyn Resolver,
    networks: &job_policy::addr::AllowNetworks,
) -> Result<Structure, StructureError> {
    let mut notes = Vec::new();
    let repository_dir = match job.repository.url() {
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(url)) => {
            // The address is checked here (a private or metadata address is named as such); the fence fetches
            // the pinned commit in the install sandbox through the egress proxy, which checks it again when it
            // connects. Nothing is fetched by intake or by the host.
            let addrs = check_repository_url(&url, resolver, networks)?;
            let shown: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            let resolved = if shown.is_empty() {
                "its addresses are checked when the fetch connects".to_owned()
            } else {
                format!(
                    "{}:{} resolves here to {}",
                    url.host,
                    url.port,
                    shown.join(", ")
                )
            };
            notes.push(Finding::new(
                Stage::Structure,
                Severity::Note,
                "repository.url",
                format!(
                    "the repository is fetched by the fence in the install sandbox through the egress proxy \
                     ({resolved}); intake did not fetch it"
                ),
            ));
            None
        }
        None => {
            let rel = Path::new(&job.repository.path);
            let full = inside(root, rel, "repository.path")?;
            let m = fs::symlink_metadata(&full)
                .map_err(|_| StructureError::RepositoryMissing(rel.to_path_buf()))?;
            if let Some(u) = unpacked_repository {
                Some(u.to_path_buf())
            } else if m.is_dir() {
                Some(full)
            } else if m.is_file() && is_git_bundle(&full) {
                notes.push(Finding::new(
                    Stage::Structure,
                    Severity::Note,
                    "repository.path",
                    "repository is a git bundle; reading it needs git, so intake did not look inside (the fence contains its hooks)",
                ));
                None
            } else {
                return Err(StructureError::RepositoryKind(rel.to_path_buf()));
            }
        }
    };
    if let Some(patch) = &job.repository.patch {
        let full = inside(root, patch, "repository.patch")?;
        match fs::symlink_metadata(&full) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(StructureError::PatchNotFile(patch.clone())),
            Err(_) => return Err(StructureError::PatchMissing(patch.clone())),
        }
    }
    if let Some(j) = &job.test.junit {
        if j.is_absolute() || j.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(StructureError::Junit(j.clone()));
        }
    }
    Ok(Structure {
        job,
        repository_dir,
        notes,
    })
}
