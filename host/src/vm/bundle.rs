//! Packs what `fenced-run run` was given into the bytes the job channel carries: a bundle file as it is, a
//! bundle directory as a tar (sorted, owner 0:0, mtime 0), a job file with the repository and patch it names
//! beside it. The guest runs intake on these bytes again; nothing here is trusted by the guest.

use guest::channel::{BundleKind, MAX_BUNDLE};
use std::path::{Component, Path, PathBuf};

/// Why [`pack`] could not make the bundle's bytes; each names the path it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// A file or directory could not be read, or not added to the tar.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path being read or added.
        path: PathBuf,
        /// What the system or the tar writer said.
        source: std::io::Error,
    },
    /// A directory walk failed.
    #[error("{}: {source}", path.display())]
    Walk {
        /// The directory walked.
        path: PathBuf,
        /// What the walk said.
        source: walkdir::Error,
    },
    /// A member of a bundle directory is neither a file, a directory nor a symlink.
    #[error("{}: neither a file, a directory nor a symlink; pass the bundle as an archive", path.display())]
    SpecialFile {
        /// The member.
        path: PathBuf,
    },
    /// The job file is not TOML.
    #[error("{}: not a job file: {reason}", path.display())]
    NotAJobFile {
        /// The job file.
        path: PathBuf,
        /// The TOML parser's message.
        reason: String,
    },
    /// The job file names no `[repository] path`.
    #[error("{}: [repository] path is missing", path.display())]
    RepositoryPathMissing {
        /// The job file.
        path: PathBuf,
    },
    /// The repository or patch the job file names is not a relative path beside it.
    #[error("{}: {rel:?} is not a relative path beside the job file; in the vm tier pass a bundle", path.display())]
    NotBeside {
        /// The job file.
        path: PathBuf,
        /// The path it names.
        rel: String,
    },
    /// A bundle file is larger than the job channel carries.
    #[error("{}: {size} bytes; the vm tier's channel carries at most {MAX_BUNDLE}", path.display())]
    FileTooLarge {
        /// The bundle file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The packed bundle is larger than the job channel carries.
    #[error("{}: the bundle is {size} bytes; the vm tier's channel carries at most {MAX_BUNDLE}", path.display())]
    BundleTooLarge {
        /// What was packed.
        path: PathBuf,
        /// The packed size.
        size: u64,
    },
}

/// A [`PackError::Io`] for `path`.
fn io(path: &Path) -> impl Fn(std::io::Error) -> PackError + Copy + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn kind_of(p: &Path) -> Option<BundleKind> {
    let name = p.file_name()?.to_str()?.to_ascii_lowercase();
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        Some(BundleKind::TarGz)
    } else if name.ends_with(".tar") {
        Some(BundleKind::Tar)
    } else if name.ends_with(".zip") {
        Some(BundleKind::Zip)
    } else {
        None
    }
}

fn add_tree(b: &mut tar::Builder<Vec<u8>>, root: &Path, prefix: &Path) -> Result<(), PackError> {
    let mut entries: Vec<_> = walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|source| PackError::Walk {
            path: root.to_path_buf(),
            source,
        })?;
    // The root's own entry is written under its prefix (`repo/`), so that the archive lists every directory
    // before what lies in it; a bundle directory's root has no name of its own and is the archive's root.
    if prefix.as_os_str().is_empty() {
        entries.retain(|e| e.path() != root);
    }
    for e in entries {
        let rel = e.path().strip_prefix(root).unwrap_or(e.path());
        let name = prefix.join(rel);
        let meta = e.path().symlink_metadata().map_err(io(e.path()))?;
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        let ft = meta.file_type();
        let err = io(e.path());
        if ft.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            b.append_data(&mut h, &name, std::io::empty())
                .map_err(err)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(e.path()).map_err(err)?;
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_size(0);
            b.append_link(&mut h, &name, &target).map_err(err)?;
        } else if ft.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let data = std::fs::read(e.path()).map_err(err)?;
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(if meta.permissions().mode() & 0o111 != 0 {
                0o755
            } else {
                0o644
            });
            h.set_size(data.len() as u64);
            b.append_data(&mut h, &name, data.as_slice()).map_err(err)?;
        } else {
            return Err(PackError::SpecialFile {
                path: e.path().to_path_buf(),
            });
        }
    }
    Ok(())
}

fn relative_inside(s: &str) -> bool {
    let p = Path::new(s);
    !s.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The bytes and kind of the bundle for `input` (a bundle file or directory, or a job file).
pub fn pack(input: &Path) -> Result<(BundleKind, Vec<u8>), PackError> {
    let meta = std::fs::metadata(input).map_err(io(input))?;
    let bytes_and_kind = if meta.is_dir() {
        let mut b = tar::Builder::new(Vec::new());
        add_tree(&mut b, input, Path::new(""))?;
        (BundleKind::Tar, b.into_inner().map_err(io(input))?)
    } else if let Some(kind) = kind_of(input) {
        if meta.len() > u64::from(MAX_BUNDLE) {
            return Err(PackError::FileTooLarge {
                path: input.to_path_buf(),
                size: meta.len(),
            });
        }
        (kind, std::fs::read(input).map_err(io(input))?)
    } else {
        // A job file: it and the repository and patch it names, which must lie beside it.
        let text = std::fs::read_to_string(input).map_err(io(input))?;
        let value: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| PackError::NotAJobFile {
                    path: input.to_path_buf(),
                    reason: e.to_string(),
                })?;
        // A `[repository] url` job carries no repository: the fence fetches it in the guest.
        let section = value.get("repository");
        let repo: Option<String> =
            match section.and_then(|r| r.get("path")).and_then(|p| p.as_str()) {
                Some(p) => Some(p.to_owned()),
                None if section.and_then(|r| r.get("url")).is_some() => None,
                None => {
                    return Err(PackError::RepositoryPathMissing {
                        path: input.to_path_buf(),
                    })
                }
            };
        let patch = value
            .get("repository")
            .and_then(|r| r.get("patch"))
            .and_then(|p| p.as_str())
            .map(str::to_owned);
        let base = input.parent().unwrap_or(Path::new("."));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_mode(0o644);
        h.set_size(text.len() as u64);
        b.append_data(&mut h, "job.toml", text.as_bytes())
            .map_err(io(input))?;
        for rel in repo.into_iter().chain(patch) {
            if !relative_inside(&rel) {
                return Err(PackError::NotBeside {
                    path: input.to_path_buf(),
                    rel,
                });
            }
            let p = base.join(&rel);
            let m = std::fs::symlink_metadata(&p).map_err(io(&p))?;
            if m.is_dir() {
                // add_tree writes the directory's own entry first (the guest's unpacking refuses a duplicate).
                add_tree(&mut b, &p, Path::new(&rel))?;
            } else {
                let data = std::fs::read(&p).map_err(io(&p))?;
                let mut h = tar::Header::new_gnu();
                h.set_uid(0);
                h.set_gid(0);
                h.set_mtime(0);
                h.set_mode(0o644);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, &rel, data.as_slice())
                    .map_err(io(&p))?;
            }
        }
        (BundleKind::Tar, b.into_inner().map_err(io(input))?)
    };
    if bytes_and_kind.1.len() as u64 > u64::from(MAX_BUNDLE) {
        return Err(PackError::BundleTooLarge {
            path: input.to_path_buf(),
            size: bytes_and_kind.1.len() as u64,
        });
    }
    Ok(bytes_and_kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(repo: &Path, args: &[&str]) -> bool {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@t.example"])
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// A git checkout lists `.git` first: the packed tar must still unpack, and intake accept it.
    #[test]
    fn a_git_checkout_whose_first_entry_is_dot_git_packs_and_intake_accepts_it() {
        let d = tempfile::tempdir().expect("tmp");
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join("tests")).expect("mkdir");
        std::fs::write(repo.join("tests/t.sh"), "echo '1 passed, 0 failed'\n").expect("write");
        assert!(
            git(&repo, &["init", "-q"])
                && git(&repo, &["add", "-A"])
                && git(&repo, &["commit", "-q", "-m", "base"]),
            "git (which .ci/run installs) could not make a repository here"
        );
        let head = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["rev-parse", "HEAD"])
            .output()
            .expect("git rev-parse");
        let commit = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        let job = d.path().join("job.toml");
        std::fs::write(
            &job,
            format!(
                "[repository]\npath = \"repo\"\ncommit = \"{commit}\"\n[test]\ncommand = \"sh tests/t.sh\"\n"
            ),
        )
        .expect("write");
        let (kind, bytes) = pack(&job).expect("pack");
        assert_eq!(kind, BundleKind::Tar);
        // The repository's own directory comes before `.git`, and nothing is listed before its directory.
        let mut archive = tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = archive
            .entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .to_string_lossy()
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
        let repo_at = names.iter().position(|n| n == "repo");
        let git_at = names.iter().position(|n| n == "repo/.git");
        assert!(
            repo_at.is_some() && git_at.is_some() && repo_at < git_at,
            "{names:?}"
        );
        for (i, n) in names.iter().enumerate() {
            if let Some((parent, _)) = n.rsplit_once('/') {
                assert!(
                    names[..i].iter().any(|p| p == parent),
                    "{n} comes before its directory: {names:?}"
                );
            }
        }
        // The guest's unpack, and the whole of intake, accept the bytes.
        let out = d.path().join("out");
        intake::unpack::unpack_archive(
            &bytes,
            intake::unpack::ArchiveFormat::Tar,
            &out,
            &intake::report::IntakeLimits::default(),
        )
        .expect("unpack");
        assert!(out.join("repo/.git/HEAD").is_file());
        assert!(out.join("repo/tests/t.sh").is_file());
        let tar_file = d.path().join("bundle.tar");
        std::fs::write(&tar_file, &bytes).expect("write");
        let work = d.path().join("work");
        std::fs::create_dir(&work).expect("mkdir");
        let opts = intake::IntakeOptions::for_tier(intake::normalise::Isolation::Vm)
            .with_work_parent(&work);
        let report = intake::run_stages(&tar_file, &opts);
        assert!(
            report.accepted,
            "refused: {:?} {:?}",
            report.refusal, report.unusable
        );
    }

    #[test]
    fn pack_errors_name_what_failed_and_the_path() {
        let d = tempfile::tempdir().expect("tmp");
        let missing = d.path().join("missing.tar");
        let e = pack(&missing).expect_err("missing");
        assert!(
            matches!(&e, PackError::Io { path, .. } if path == &missing),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}: ", missing.display())),
            "{e}"
        );

        let job = d.path().join("job.toml");
        std::fs::write(&job, "[repository]\npath = \"../elsewhere\"\n").expect("write");
        let e = pack(&job).expect_err("outside");
        assert!(
            matches!(&e, PackError::NotBeside { rel, .. } if rel == "../elsewhere"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: \"../elsewhere\" is not a relative path beside the job file; in the vm tier pass a bundle",
                job.display()
            )
        );

        std::fs::write(&job, "[test]\n").expect("write");
        let e = pack(&job).expect_err("no repository");
        assert!(
            matches!(e, PackError::RepositoryPathMissing { .. }),
            "{e:?}"
        );
    }

    #[test]
    fn a_job_file_packs_its_repository_directory_before_what_is_in_it() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(d.path().join("repo/src")).expect("mkdir");
        std::fs::write(d.path().join("repo/src/code.sh"), "echo\n").expect("write");
        let job = d.path().join("job.toml");
        std::fs::write(&job, "[repository]\npath = \"repo\"\n").expect("write");
        let (kind, bytes) = pack(&job).expect("pack");
        assert_eq!(kind, BundleKind::Tar);
        let mut a = tar::Archive::new(bytes.as_slice());
        let names: Vec<(String, tar::EntryType)> = a
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.path().expect("path").to_string_lossy().into_owned(),
                    e.header().entry_type(),
                )
            })
            .collect();
        let at = |n: &str| names.iter().position(|(p, _)| p.trim_end_matches('/') == n);
        let repo = at("repo").unwrap_or_else(|| panic!("no repo entry: {names:?}"));
        assert_eq!(names[repo].1, tar::EntryType::Directory, "{names:?}");
        assert!(repo < at("repo/src").expect("repo/src"), "{names:?}");
        assert!(at("repo/src") < at("repo/src/code.sh"), "{names:?}");
        // Every member once: the guest's unpacking refuses a duplicate (`repo/: duplicate member`).
        let mut seen: Vec<&str> = names.iter().map(|(p, _)| p.trim_end_matches('/')).collect();
        let all = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), all, "a member written twice: {names:?}");
        // And intake, which the guest runs on these bytes, accepts them.
        let out = d.path().join("unpacked");
        intake::unpack::unpack_archive(
            &bytes,
            intake::unpack::ArchiveFormat::Tar,
            &out,
            &intake::report::IntakeLimits::default(),
        )
        .expect("intake unpacks what the packer wrote");
    }
}
