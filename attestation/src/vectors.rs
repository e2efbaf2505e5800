//! Where the real hardware vectors, the shared firmware and the oracles live, for the tests of every crate:
//! `$FENCED_RUN_VECTORS` (default `../shared/vectors` beside the workspace), `$FENCED_RUN_SHARED` (default the
//! vectors' parent), `$FENCED_RUN_ORACLE_VENV` (default `target/sev-snp-venv`). A missing vector is skipped
//! with a printed reason, recorded for the suite's summary, unless `FENCED_RUN_REQUIRE_VECTORS=1` (as in CI).

use std::path::PathBuf;

/// The vectors root: `$FENCED_RUN_VECTORS`, else `../shared/vectors` beside the workspace.
pub fn root() -> PathBuf {
    match std::env::var_os("FENCED_RUN_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"),
    }
}

/// The workspace root (the directory of the top-level `Cargo.toml`).
pub fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The shared read-only directory (`firmware/`, `vectors/`, `notes/`): `$FENCED_RUN_SHARED`, else the parent of
/// `$FENCED_RUN_VECTORS`, else `../shared` beside the workspace. A clone anywhere (under `/tmp` too) finds it
/// through the variables, never through its own location.
pub fn shared() -> PathBuf {
    if let Some(d) = std::env::var_os("FENCED_RUN_SHARED") {
        return PathBuf::from(d);
    }
    if let Some(v) = std::env::var_os("FENCED_RUN_VECTORS") {
        if let Some(parent) = PathBuf::from(v).parent() {
            return parent.to_path_buf();
        }
    }
    workspace().join("../shared")
}

/// A file of the shared firmware directory (`shared()/firmware/NAME`).
pub fn firmware(name: &str) -> PathBuf {
    shared().join("firmware").join(name)
}

/// The Python venv of the oracles (`sev-snp-measure`, `cctrusted-base`): `$FENCED_RUN_ORACLE_VENV`, else
/// `$SEV_SNP_MEASURE_VENV`, else `target/sev-snp-venv` of the workspace (where `.ci/run` creates it).
pub fn oracle_venv() -> PathBuf {
    std::env::var_os("FENCED_RUN_ORACLE_VENV")
        .or_else(|| std::env::var_os("SEV_SNP_MEASURE_VENV"))
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/sev-snp-venv"))
}

/// The file skip records are appended to: `fenced-run-skips.log` in the target directory
/// (`$CARGO_TARGET_DIR`, else the workspace's `target/`). The `tests` crate's `skip_summary` test prints it.
pub fn skip_log() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
        .join("fenced-run-skips.log")
}

/// Appends one skip record (`<parent pid>\t<test binary>\t<why>`) to [`skip_log`]; the parent is the `cargo
/// test` that ran the binary, so one run's records can be told from an earlier run's. A failure to write is
/// ignored (the `skipped:` line on stderr is the record of last resort).
pub fn record_skip(why: &str) {
    use std::io::Write;
    let exe = std::env::args()
        .next()
        .map(|a| {
            let name = std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or(a);
            // Test binaries are named NAME-HASH; the hash says nothing to a reader.
            match name.rsplit_once('-') {
                Some((base, hash))
                    if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    base.to_string()
                }
                _ => name,
            }
        })
        .unwrap_or_default();
    let line = format!(
        "{}\t{exe}\t{}\n",
        std::os::unix::process::parent_id(),
        why.replace(['\n', '\t'], " ")
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skip_log())
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The skip records of the `cargo test` run this process belongs to (same parent), as (test binary, why).
pub fn skips_of_this_run() -> Vec<(String, String)> {
    let me = std::os::unix::process::parent_id().to_string();
    std::fs::read_to_string(skip_log())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            match (f.next(), f.next(), f.next()) {
                (Some(p), Some(bin), Some(why)) if p == me => {
                    Some((bin.to_string(), why.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

/// One line saying how many vector and oracle checks this run skipped and why (each reason once, with the
/// test binaries that gave it), or that none was.
pub fn skip_summary() -> String {
    let skips = skips_of_this_run();
    if skips.is_empty() {
        return "vector/oracle skips in this run: none (every real vector and oracle was found)"
            .to_string();
    }
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    for (bin, why) in skips.iter() {
        match reasons.iter_mut().find(|(w, _)| w == why) {
            Some((_, bins)) if bins.contains(bin) => {}
            Some((_, bins)) => bins.push(bin.clone()),
            None => reasons.push((why.clone(), vec![bin.clone()])),
        }
    }
    format!(
        "vector/oracle skips in this run: {} check(s) skipped: {}",
        skips.len(),
        reasons
            .iter()
            .map(|(why, bins)| format!("{why} ({})", bins.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// Whether a missing vector or oracle must fail the run (`FENCED_RUN_REQUIRE_VECTORS=1`).
pub fn required() -> bool {
    std::env::var("FENCED_RUN_REQUIRE_VECTORS").as_deref() == Ok("1")
}

/// Prints `skipped: <why>` to stderr, or panics with `why` when vectors are [`required`]. For tests only.
///
/// The line is written to the stderr handle, not through `eprintln!`, so the test harness does not capture it
/// and a user sees why a test passed without checking anything.
pub fn skip(why: &str) {
    use std::io::Write;
    assert!(!required(), "FENCED_RUN_REQUIRE_VECTORS=1 but {why}");
    record_skip(why);
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

/// The directory `sub` under the [`root`] (`"snp"`, `"tdx/<vector>"`), or `None` after [`skip`] when absent.
pub fn dir(sub: &str) -> Option<PathBuf> {
    let d = root().join(sub);
    if d.is_dir() {
        Some(d)
    } else {
        skip(&format!("no vectors at {}", d.display()));
        None
    }
}

/// The folders directly under `sub` of the [`root`] that hold a file named `file` (`"quote.bin"`), sorted by path;
/// `None` after [`skip`] when `sub` is absent.
pub fn cases(sub: &str, file: &str) -> Option<Vec<PathBuf>> {
    let d = dir(sub)?;
    let entries =
        std::fs::read_dir(&d).unwrap_or_else(|e| panic!("vectors at {}: {e}", d.display()));
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(file).is_file())
        .collect();
    out.sort();
    Some(out)
}
