//! git's HTTP transport in the `vm` tier's minimal image, so that `[repository] url` jobs run there as in the
//! toolchain image: `git-remote-http` from the exec path of the `git` the image already copies (the same build
//! of git), `git-remote-https` as a symbolic link to it (what Debian ships), each shared library `ldd` lists
//! for it that git's own list did not already bring, and the build host's CA bundle at
//! `/etc/ssl/certs/ca-certificates.crt` (the trust anchors of `https://`, and the file the fence binds the
//! operator's `[egress] ca_certificates` over). Each file is listed in the manifest's `included` with its
//! SHA-256. docs/vm.md ("git's HTTP transport in the minimal image") says why and what it costs.

use super::cpio::{Entry, Tree};
use super::{read, sha256_hex, shared_libraries, Included};
use std::path::{Path, PathBuf};

/// The CA bundle's path (Debian's), in the build host and in the guest.
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The exec path `git` was built with (`git --exec-path`), when it answers with an absolute path.
fn exec_path(git: &Path) -> Result<PathBuf, String> {
    let out = std::process::Command::new(git)
        .arg("--exec-path")
        .env_remove("GIT_EXEC_PATH")
        .output()
        .map_err(|e| format!("{} --exec-path: {e}", git.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || !text.starts_with('/') {
        return Err(format!(
            "{} --exec-path answered `{}`, not an absolute path",
            git.display(),
            text.escape_debug()
        ));
    }
    Ok(PathBuf::from(text))
}

/// Adds git's HTTP transport for the `git` at `git` to `t` and `included` (the files not in `included`
/// already). A git without `git-remote-http` is an error naming it (leave git out with `--no-git`).
pub fn add(t: &mut Tree, included: &mut Vec<Included>, git: &Path) -> Result<(), String> {
    let dir = exec_path(git)?;
    let helper = dir.join("git-remote-http");
    if !helper.is_file() {
        return Err(format!(
            "{}: git's HTTP transport is missing beside {} (Debian's git package has it)",
            helper.display(),
            git.display()
        ));
    }
    let mut files = vec![helper.clone()];
    files.extend(shared_libraries(&helper)?);
    if Path::new(CA_BUNDLE).is_file() {
        files.push(PathBuf::from(CA_BUNDLE));
    }
    for f in files {
        let gp = f.to_string_lossy().into_owned();
        if included.iter().any(|i| i.path == gp) {
            continue;
        }
        let real = std::fs::canonicalize(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let bytes = read("git's HTTP transport", &real)?;
        included.push(Included {
            path: gp.clone(),
            sha256: sha256_hex(&bytes),
        });
        let exec = gp != CA_BUNDLE;
        t.add(&gp, Entry::File(bytes, exec));
    }
    let https = dir.join("git-remote-https");
    t.add(
        &https.to_string_lossy(),
        Entry::Symlink("git-remote-http".into()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `git` answering `--exec-path` with `dir`.
    fn fake_git(at: &Path, dir: &Path) -> PathBuf {
        let git = at.join("git");
        std::fs::write(&git, format!("#!/bin/sh\necho '{}'\n", dir.display())).expect("write");
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        git
    }

    #[test]
    fn a_git_without_its_http_transport_fails_naming_it() {
        let d = tempfile::tempdir().expect("tmp");
        let exec = d.path().join("git-core");
        std::fs::create_dir(&exec).expect("mkdir");
        let git = fake_git(d.path(), &exec);
        let (mut t, mut included) = (Tree::new(), Vec::new());
        let e = add(&mut t, &mut included, &git).expect_err("no git-remote-http");
        assert!(
            e.contains("git-remote-http") && e.contains("missing"),
            "{e}"
        );
        assert!(included.is_empty());
    }

    #[test]
    fn the_transport_its_libraries_and_the_ca_bundle_are_included_once() {
        let git = Path::new("/usr/bin/git");
        let Ok(dir) = exec_path(git) else {
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::Host,
                "no /usr/bin/git answering --exec-path on this machine",
            );
            return;
        };
        if !dir.join("git-remote-http").is_file() {
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::Host,
                "this machine's git has no git-remote-http",
            );
            return;
        }
        let (mut t, mut included) = (Tree::new(), Vec::new());
        add(&mut t, &mut included, git).expect("added");
        let helper = dir.join("git-remote-http").to_string_lossy().into_owned();
        assert!(included.iter().any(|i| i.path == helper), "{included:?}");
        assert!(
            included.iter().any(|i| i.path.contains("libcurl")),
            "{included:?}"
        );
        let mut paths: Vec<&str> = included.iter().map(|i| i.path.as_str()).collect();
        let n = paths.len();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), n, "{included:?}");
        // A second call adds nothing already listed.
        add(&mut t, &mut included, git).expect("again");
        assert_eq!(included.len(), n);
    }
}
