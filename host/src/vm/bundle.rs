//! Packs what `fenced-run run` was given into the bytes the job channel carries: a bundle file as it is, a
//! bundle directory as a tar (sorted, owner 0:0, mtime 0), a job file with the repository and patch it names
//! beside it. The guest runs intake on these bytes again; nothing here is trusted by the guest.

use guest::channel::{BundleKind, MAX_BUNDLE};
use sha2::Digest;
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
    /// [`pack_judged`] was given a report of a bundle intake did not accept (or whose tree is gone).
    #[error("{}: intake did not accept this input, so there is no tree of its to pack", path.display())]
    NotAccepted {
        /// The input.
        path: PathBuf,
    },
    /// The job file's bytes are not the ones intake judged (it changed after intake read it).
    #[error("{}: the job file changed after intake judged it (SHA-256 {now}, intake read {judged})", path.display())]
    JobFileChanged {
        /// The job file.
        path: PathBuf,
        /// SHA-256 of the bytes intake read.
        judged: String,
        /// SHA-256 of the bytes there now.
        now: String,
    },
    /// The packed tree is larger than intake in the guest accepts even gzip-compressed.
    #[error(
        "{}: the tree intake judged packs to {size} bytes (gzip-compressed), more than the {limit} bytes intake \
         in the guest accepts",
        path.display()
    )]
    TreeTooLarge {
        /// The input.
        path: PathBuf,
        /// The compressed size.
        size: u64,
        /// Intake's `max_bundle_bytes`.
        limit: u64,
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

/// The bytes and kind of the bundle for an input intake accepted, packed from **intake's own copy** (the tree
/// intake judged), never from the path the user gave, which may have changed since:
///
/// - a bundle (directory or archive): the unpacked root in intake's work directory, as a tar;
/// - a lone job file: the job file (its bytes checked against the hash intake recorded, else
///   [`PackError::JobFileChanged`]), the repository from intake's copy (`repository/` in its work directory:
///   the directory copied, or the archive unpacked) under the name the job gives it, and the patch. Intake keeps
///   no copy of a patch file or of a git bundle (the process tier's fence reads both from beside the job file
///   too), so those two are read from there.
///
/// The tar is sent as it is when intake in the guest accepts its size (`max_bundle_bytes`), else gzip-compressed
/// (a compressed bundle can unpack to more than that limit); larger still is [`PackError::TreeTooLarge`]. Every
/// directory is written once, before what lies in it.
pub fn pack_judged(report: &intake::IntakeReport) -> Result<(BundleKind, Vec<u8>), PackError> {
    let limit = intake::report::IntakeLimits::default().max_bundle_bytes;
    pack_judged_within(report, limit.min(u64::from(MAX_BUNDLE)))
}

/// [`pack_judged`] with the size above which the tar is compressed, and beyond which it is refused.
fn pack_judged_within(
    report: &intake::IntakeReport,
    limit: u64,
) -> Result<(BundleKind, Vec<u8>), PackError> {
    let input = report.input.as_path();
    let not_accepted = || PackError::NotAccepted {
        path: input.to_path_buf(),
    };
    let (Some(job), Some(root), Some(work)) = (
        report.job.as_ref().filter(|_| report.accepted),
        report.root.as_deref(),
        report.work_dir.as_deref(),
    ) else {
        return Err(not_accepted());
    };
    if !root.is_dir() {
        return Err(not_accepted());
    }
    let mut b = tar::Builder::new(Vec::new());
    if root.starts_with(work) {
        // A bundle: intake's unpacked copy is the bundle.
        add_tree(&mut b, root, Path::new(""))?;
    } else {
        // A lone job file: the file intake hashed, then what it names, from intake's copy where it made one.
        let text = std::fs::read(input).map_err(io(input))?;
        let now = hex::encode(sha2::Sha256::digest(&text));
        if now != job.sha256 {
            return Err(PackError::JobFileChanged {
                path: input.to_path_buf(),
                judged: job.sha256.clone(),
                now,
            });
        }
        append_file(&mut b, "job.toml", &text, false).map_err(io(input))?;
        let rel = job.repository.path.clone();
        let copied = report
            .repository_dir
            .as_deref()
            .filter(|d| d.starts_with(work) && d.is_dir());
        let patch = job
            .repository
            .patch
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        // A patch inside the repository's directory is in its tree already (a member written twice is refused).
        let patch = patch.filter(|p| copied.is_none() || !Path::new(p).starts_with(&rel));
        // A `[repository] url` job carries no repository: the fence fetches it in the guest.
        let repo = job.repository.url.is_none().then_some((rel, true));
        for (rel, is_repo) in repo.into_iter().chain(patch.map(|p| (p, false))) {
            if !relative_inside(&rel) {
                return Err(PackError::NotBeside {
                    path: input.to_path_buf(),
                    rel,
                });
            }
            match copied.filter(|_| is_repo) {
                Some(dir) => add_tree(&mut b, dir, Path::new(&rel))?,
                None => {
                    let p = root.join(&rel);
                    let data = std::fs::read(&p).map_err(io(&p))?;
                    append_file(&mut b, &rel, &data, false).map_err(io(&p))?;
                }
            }
        }
    }
    let tar = b.into_inner().map_err(io(input))?;
    if tar.len() as u64 <= limit {
        return Ok((BundleKind::Tar, tar));
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).map_err(io(input))?;
    let gz = gz.finish().map_err(io(input))?;
    if gz.len() as u64 > limit {
        return Err(PackError::TreeTooLarge {
            path: input.to_path_buf(),
            size: gz.len() as u64,
            limit,
        });
    }
    Ok((BundleKind::TarGz, gz))
}

/// Appends one regular file (owner 0:0, mtime 0).
fn append_file(
    b: &mut tar::Builder<Vec<u8>>,
    name: &str,
    data: &[u8],
    exec: bool,
) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(if exec { 0o755 } else { 0o644 });
    h.set_size(data.len() as u64);
    b.append_data(&mut h, name, data)
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
        let names = members_once_in_order(&bytes);
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

    /// The names of a tar's members, each checked to be there once and after its directory.
    fn members_once_in_order(bytes: &[u8]) -> Vec<String> {
        let mut a = tar::Archive::new(bytes);
        let names: Vec<String> = a
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
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} written twice: {names:?}");
            if let Some((parent, _)) = n.rsplit_once('/') {
                assert!(
                    names[..i].iter().any(|p| p == parent),
                    "{n} comes before its directory: {names:?}"
                );
            }
        }
        names
    }

    /// The file `name` of the tar `bytes`, if it is there.
    fn member(bytes: &[u8], name: &str) -> Option<Vec<u8>> {
        use std::io::Read;
        let mut a = tar::Archive::new(bytes);
        for e in a.entries().expect("entries") {
            let mut e = e.expect("entry");
            if e.path().expect("path").to_string_lossy() == name {
                let mut v = Vec::new();
                e.read_to_end(&mut v).expect("read");
                return Some(v);
            }
        }
        None
    }

    /// Intake as the guest runs it, on `bytes`: accepted, and its copy of the repository holds `expect` and
    /// not `absent`.
    fn guest_intake_sees(d: &Path, bytes: &[u8], kind: BundleKind, expect: &str, absent: &str) {
        let file = d.join(format!("sent.{}", kind.extension()));
        std::fs::write(&file, bytes).expect("write");
        let work = d.join("guest-work");
        std::fs::create_dir_all(&work).expect("mkdir");
        let opts = intake::IntakeOptions::for_tier(intake::normalise::Isolation::Vm)
            .with_work_parent(&work);
        let mut report = intake::run_stages(&file, &opts);
        assert!(
            report.accepted,
            "refused: {:?} {:?}",
            report.refusal, report.unusable
        );
        let repo = report.repository_dir.clone().expect("repository");
        assert!(repo.join(expect).is_file(), "{}", repo.display());
        assert!(!repo.join(absent).exists(), "{absent} reached the guest");
        assert_eq!(
            std::fs::read_to_string(repo.join(expect)).expect("read"),
            "echo '1 passed, 0 failed'\n",
            "the guest got the file as intake judged it, not as changed after"
        );
        report.cleanup().expect("cleanup");
    }

    /// Between intake and packing the original changes (a file added, one rewritten): the host packs intake's
    /// copy, so the guest's intake sees exactly what the host's judged. For a bundle directory and for a job file.
    #[test]
    fn the_host_packs_the_tree_intake_judged_not_the_original_changed_after() {
        for as_job_file in [false, true] {
            let d = tempfile::tempdir().expect("tmp");
            let b = d.path().join("bundle");
            std::fs::create_dir_all(b.join("repo/tests")).expect("mkdir");
            std::fs::write(b.join("repo/tests/t.sh"), "echo '1 passed, 0 failed'\n")
                .expect("write");
            std::fs::write(b.join("fix.patch"), "").expect("write");
            std::fs::write(
                b.join("job.toml"),
                "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh tests/t.sh\"\n",
            )
            .expect("write");
            let input = if as_job_file {
                b.join("job.toml")
            } else {
                b.clone()
            };
            let judged = crate::cli::vm::judge_and_pack(&input, &Default::default(), || {
                std::fs::write(b.join("repo/added.sh"), "echo pwned\n").expect("add");
                std::fs::write(b.join("repo/tests/t.sh"), "echo '9 passed'\n").expect("rewrite");
            })
            .expect("judge and pack");
            let crate::cli::vm::Judged::Packed { kind, bytes, .. } = judged else {
                panic!("intake refused the bundle");
            };
            assert_eq!(kind, BundleKind::Tar);
            let names = members_once_in_order(&bytes);
            assert!(names.iter().any(|n| n == "repo"), "{names:?}");
            assert!(!names.iter().any(|n| n == "repo/added.sh"), "{names:?}");
            assert_eq!(
                member(&bytes, "repo/tests/t.sh").as_deref(),
                Some(&b"echo '1 passed, 0 failed'\n"[..])
            );
            guest_intake_sees(d.path(), &bytes, kind, "tests/t.sh", "added.sh");
            // The hook did change the original.
            assert!(b.join("repo/added.sh").is_file());
        }
    }

    /// A job file changed after intake judged it is not packed: the error names both hashes.
    #[test]
    fn a_job_file_changed_after_intake_is_not_packed() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(d.path().join("repo")).expect("mkdir");
        std::fs::write(d.path().join("repo/a"), "a\n").expect("write");
        let job = d.path().join("job.toml");
        std::fs::write(&job, "[repository]\npath = \"repo\"\n").expect("write");
        let e = crate::cli::vm::judge_and_pack(&job, &Default::default(), || {
            std::fs::write(
                &job,
                "[repository]\npath = \"repo\"\n[test]\ncommand = \"true\"\n",
            )
            .expect("rewrite");
        })
        .err()
        .expect("a changed job file");
        assert!(
            e.contains("the job file changed after intake judged it"),
            "{e}"
        );
        // And a report intake did not accept packs nothing.
        let refused = intake::run_stages(
            &d.path().join("missing"),
            &intake::IntakeOptions::for_tier(intake::normalise::Isolation::Vm),
        );
        assert!(matches!(
            pack_judged(&refused),
            Err(PackError::NotAccepted { .. })
        ));
    }

    /// A tree whose tar is over the limit goes gzip-compressed (and intake, as the guest runs it, accepts it);
    /// one that does not fit even then is an error naming the sizes.
    #[test]
    fn a_tree_over_the_size_limit_goes_compressed_or_is_refused_by_size() {
        let d = tempfile::tempdir().expect("tmp");
        let b = d.path().join("bundle");
        std::fs::create_dir_all(b.join("repo/tests")).expect("mkdir");
        std::fs::write(b.join("repo/tests/t.sh"), "echo '1 passed, 0 failed'\n").expect("write");
        std::fs::write(b.join("repo/big.txt"), "all the same line\n".repeat(20_000))
            .expect("write");
        std::fs::write(
            b.join("job.toml"),
            "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh tests/t.sh\"\n",
        )
        .expect("write");
        let work = d.path().join("work");
        std::fs::create_dir_all(&work).expect("mkdir");
        let mut report = intake::run_stages(
            &b,
            &intake::IntakeOptions::for_tier(intake::normalise::Isolation::Vm)
                .with_work_parent(&work),
        );
        assert!(report.accepted, "{:?}", report.refusal);
        let (kind, bytes) = pack_judged_within(&report, 64 << 10).expect("compressed");
        assert_eq!(kind, BundleKind::TarGz);
        assert!(bytes.len() < 64 << 10, "{}", bytes.len());
        guest_intake_sees(d.path(), &bytes, kind, "tests/t.sh", "added.sh");
        let e = pack_judged_within(&report, 512).expect_err("too large");
        assert!(
            matches!(e, PackError::TreeTooLarge { limit: 512, size, .. } if size > 512),
            "{e:?}"
        );
        assert!(e.to_string().contains("more than the 512 bytes"), "{e}");
        report.cleanup().expect("cleanup");
    }
}
