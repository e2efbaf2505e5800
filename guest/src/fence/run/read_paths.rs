//! The job's `[sandbox] read` paths made canonical and checked again at run time: under a root the operator
//! allows, not a credential, and holding no socket or FIFO the sandbox could connect through.

use intake::job::Job;
use std::fs;
use std::path::{Path, PathBuf};

/// The job's `[sandbox] read` paths, canonical: each must resolve (links followed) to a place the operator
/// allows (the allowed roots are resolved too), pass the credential list again, and hold no Unix socket or
/// FIFO anywhere below it (a socket the sandbox could connect to is a door out of it).
pub(super) fn resolve_read_paths(
    job: &Job,
    home: &Path,
    operator: &intake::operator::OperatorPolicy,
) -> Result<Vec<PathBuf>, String> {
    let roots: Vec<PathBuf> = operator
        .read_roots(Some(home))
        .into_iter()
        .filter_map(|r| fs::canonicalize(r).ok())
        .collect();
    let mut out = Vec::new();
    for p in job.sandbox.resolve(home).map_err(|e| e.to_string())? {
        let canon =
            fs::canonicalize(&p).map_err(|e| format!("[sandbox] read {}: {e}", p.display()))?;
        intake::job::check_read_path(&canon, Some(home)).map_err(|e| {
            format!(
                "[sandbox] read {} (resolves to {}): {e}",
                p.display(),
                canon.display()
            )
        })?;
        if !roots
            .iter()
            .any(|r| intake::operator::is_at_or_under(&canon, r))
        {
            return Err(format!(
                "[sandbox] read {} (resolves to {}): not at or under a path the operator allows (allowed: {}; from {})",
                p.display(),
                canon.display(),
                operator.read_line(),
                operator.source
            ));
        }
        refuse_sockets_below(&canon).map_err(|e| format!("[sandbox] read {}: {e}", p.display()))?;
        out.push(canon);
    }
    Ok(out)
}

/// Most entries walked below one read path looking for sockets and FIFOs; a larger tree is refused rather
/// than shown unchecked.
pub const READ_PATH_MAX_ENTRIES: u64 = 2_000_000;

/// Walks `dir` (links not followed, mount points crossed: a bind shows what is mounted below too) and
/// refuses the first Unix socket or FIFO, naming it.
fn refuse_sockets_below(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let mut seen = 0u64;
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let e = e.map_err(|e| format!("walking for sockets: {e}"))?;
        seen += 1;
        if seen > READ_PATH_MAX_ENTRIES {
            return Err(format!(
                "more than {READ_PATH_MAX_ENTRIES} entries: too large to check for sockets and FIFOs"
            ));
        }
        let t = e.file_type();
        if t.is_socket() || t.is_fifo() {
            return Err(format!(
                "{} is a {}: a read path must hold none (the sandbox could connect through it)",
                e.path().display(),
                if t.is_socket() { "Unix socket" } else { "FIFO" }
            ));
        }
    }
    Ok(())
}
