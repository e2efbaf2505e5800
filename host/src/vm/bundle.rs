//! Packs what `fenced-run run` was given into the bytes the job channel carries: a bundle file as it is, a
//! bundle directory as a tar (sorted, owner 0:0, mtime 0), a job file with the repository and patch it names
//! beside it. The guest runs intake on these bytes again; nothing here is trusted by the guest.

use guest::channel::{BundleKind, MAX_BUNDLE};
use std::path::{Component, Path};

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

fn add_tree(b: &mut tar::Builder<Vec<u8>>, root: &Path, prefix: &Path) -> Result<(), String> {
    let mut entries: Vec<_> = walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    entries.retain(|e| e.path() != root);
    for e in entries {
        let rel = e.path().strip_prefix(root).unwrap_or(e.path());
        let name = prefix.join(rel);
        let meta = e
            .path()
            .symlink_metadata()
            .map_err(|err| format!("{}: {err}", e.path().display()))?;
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        let ft = meta.file_type();
        let err = |x: std::io::Error| format!("{}: {x}", e.path().display());
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
            return Err(format!(
                "{}: neither a file, a directory nor a symlink; pass the bundle as an archive",
                e.path().display()
            ));
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
pub fn pack(input: &Path) -> Result<(BundleKind, Vec<u8>), String> {
    let meta = std::fs::metadata(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let bytes_and_kind = if meta.is_dir() {
        let mut b = tar::Builder::new(Vec::new());
        add_tree(&mut b, input, Path::new(""))?;
        (
            BundleKind::Tar,
            b.into_inner()
                .map_err(|e| format!("{}: {e}", input.display()))?,
        )
    } else if let Some(kind) = kind_of(input) {
        if meta.len() > u64::from(MAX_BUNDLE) {
            return Err(format!(
                "{}: {} bytes; the vm tier's channel carries at most {MAX_BUNDLE}",
                input.display(),
                meta.len()
            ));
        }
        (
            kind,
            std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?,
        )
    } else {
        // A job file: it and the repository and patch it names, which must lie beside it.
        let text =
            std::fs::read_to_string(input).map_err(|e| format!("{}: {e}", input.display()))?;
        let value: toml::Table = text
            .parse()
            .map_err(|e| format!("{}: not a job file: {e}", input.display()))?;
        let repo = value
            .get("repository")
            .and_then(|r| r.get("path"))
            .and_then(|p| p.as_str())
            .ok_or_else(|| format!("{}: [repository] path is missing", input.display()))?
            .to_owned();
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
            .map_err(|e| format!("{}: {e}", input.display()))?;
        for rel in std::iter::once(repo).chain(patch) {
            if !relative_inside(&rel) {
                return Err(format!(
                    "{}: {rel:?} is not a relative path beside the job file; in the vm tier pass a bundle",
                    input.display()
                ));
            }
            let p = base.join(&rel);
            let m = std::fs::symlink_metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            if m.is_dir() {
                add_tree(&mut b, &p, Path::new(&rel))?;
            } else {
                let data = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                let mut h = tar::Header::new_gnu();
                h.set_uid(0);
                h.set_gid(0);
                h.set_mtime(0);
                h.set_mode(0o644);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, &rel, data.as_slice())
                    .map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        (
            BundleKind::Tar,
            b.into_inner()
                .map_err(|e| format!("{}: {e}", input.display()))?,
        )
    };
    if bytes_and_kind.1.len() as u64 > u64::from(MAX_BUNDLE) {
        return Err(format!(
            "{}: the bundle is {} bytes; the vm tier's channel carries at most {MAX_BUNDLE}",
            input.display(),
            bytes_and_kind.1.len()
        ));
    }
    Ok(bytes_and_kind)
}
