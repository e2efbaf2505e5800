//! Where the real hardware vectors, the shared firmware and the oracles live, for the tests of every crate:
//! `$FENCED_RUN_VECTORS` (default `../shared/vectors` beside the workspace), `$FENCED_RUN_SHARED` (default the
//! vectors' parent), `$FENCED_RUN_ORACLE_VENV` (default `target/sev-snp-venv`). A missing vector is skipped
//! with a printed reason, recorded for the suite's summary, unless `FENCED_RUN_REQUIRE_VECTORS=1` (as in CI).
//!
//! Every test of the workspace that skips for a missing component calls [`skip_for`] with its [`SkipKind`]:
//! one `skipped: <kind>: <why>` line on stderr, one record in [`skip_log`], and a failure instead where
//! `FENCED_RUN_REQUIRE_<KIND>=1`.

use std::path::PathBuf;

/// The vectors root: `$FENCED_RUN_VECTORS`, else `../shared/vectors` beside the workspace.
pub fn root() -> PathBuf {
    match std::env::var_os("FENCED_RUN_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => workspace().join("../shared/vectors"),
    }
}

/// The workspace root (the directory of the top-level `Cargo.toml`), found when the program runs: the nearest
/// directory at or above `$CARGO_MANIFEST_DIR` (cargo sets it for the tests and programs it runs), else at or
/// above the current directory, whose `Cargo.toml` declares `[workspace]`; else the current directory.
///
/// Never compiled in (`env!("CARGO_MANIFEST_DIR")`): this crate is linked into the static guest agent, and a path of
/// the build machine in its code makes the agent, hence the vm measurement, differ between two builders (even where
/// the linker drops the function, its exception table stays; docs/vm.md, "Reproducing the agent").
pub fn workspace() -> PathBuf {
    let declares_workspace = |d: &std::path::Path| {
        std::fs::read_to_string(d.join("Cargo.toml"))
            .is_ok_and(|t| t.lines().any(|l| l.trim() == "[workspace]"))
    };
    let starts = [
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
        std::env::current_dir().ok(),
    ];
    starts
        .into_iter()
        .flatten()
        .find_map(|s| {
            s.ancestors()
                .find(|d| declares_workspace(d))
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("."))
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

/// Debian's kernel the oracles measure: `$FENCED_RUN_DEBIAN_KERNEL`, else the last `vmlinuz-*` by name under
/// `target/debian-kernel/boot` of the workspace (where `.ci/run` extracts it); `None` when there is none.
pub fn debian_kernel() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FENCED_RUN_DEBIAN_KERNEL") {
        return Some(PathBuf::from(p));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(workspace().join("target/debian-kernel/boot"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// What a test skipped for want of. The suite's closing line (`skip_summary`) counts skips by kind, and each
/// kind has a variable (`FENCED_RUN_REQUIRE_<KIND>=1`) that turns its skip into a failure: `.ci/run` sets it
/// where it installs the component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipKind {
    /// The real AMD and Intel vectors, the shared firmware, Debian's kernel and OVMF.
    Vectors,
    /// The Python oracles (`sev-snp-measure`, `cctrusted-base`) in their venv.
    Oracles,
    /// The vm tier: QEMU, the guest kernel and its modules, the shared firmware for its images.
    Vm,
    /// The hosted pool's servers: PostgreSQL and the Temporal CLI.
    Pool,
    /// Headless Chromium and chromedriver (the viewer's browser test).
    Chromium,
    /// Task bundles: buildah, docker-registry, erofs-utils, cryptsetup-bin, busybox-static.
    Tasks,
    /// The static `verify-attestation` (`scripts/build-verifier.sh`).
    StaticVerifier,
    /// Root (or unprivileged user namespaces): the fence, cgroup limits, mounts, files owned by others.
    Root,
    /// A language toolchain a test drives on the runner itself: a rustup-installed Rust (the job-file recipe's),
    /// Debian's python3-pytest (the conftest attack).
    Toolchain,
    /// A binary of this workspace built beside the tests (`cargo test --workspace` builds it).
    Build,
    /// What this machine is (its architecture, a TEE device, a writable state directory), which no package
    /// installs; `.ci/run` never requires it.
    Host,
}

impl SkipKind {
    /// Every kind, in the order the summary lists them.
    pub const ALL: [SkipKind; 11] = [
        SkipKind::Vectors,
        SkipKind::Oracles,
        SkipKind::Vm,
        SkipKind::Pool,
        SkipKind::Chromium,
        SkipKind::Tasks,
        SkipKind::StaticVerifier,
        SkipKind::Root,
        SkipKind::Toolchain,
        SkipKind::Build,
        SkipKind::Host,
    ];

    /// The kind's name in `skipped: <kind>: <why>` and in the summary.
    pub const fn name(self) -> &'static str {
        match self {
            SkipKind::Vectors => "vectors",
            SkipKind::Oracles => "oracles",
            SkipKind::Vm => "vm",
            SkipKind::Pool => "pool",
            SkipKind::Chromium => "chromium",
            SkipKind::Tasks => "tasks",
            SkipKind::StaticVerifier => "static verifier",
            SkipKind::Root => "root",
            SkipKind::Toolchain => "toolchain",
            SkipKind::Build => "build",
            SkipKind::Host => "host",
        }
    }

    /// The variable whose value `1` makes a skip of this kind fail.
    pub const fn require_var(self) -> &'static str {
        match self {
            SkipKind::Vectors => "FENCED_RUN_REQUIRE_VECTORS",
            SkipKind::Oracles => "FENCED_RUN_REQUIRE_ORACLES",
            SkipKind::Vm => "FENCED_RUN_REQUIRE_VM",
            SkipKind::Pool => "FENCED_RUN_REQUIRE_POOL",
            SkipKind::Chromium => "FENCED_RUN_REQUIRE_CHROMIUM",
            SkipKind::Tasks => "FENCED_RUN_REQUIRE_TASKS",
            SkipKind::StaticVerifier => "FENCED_RUN_REQUIRE_STATIC",
            SkipKind::Root => "FENCED_RUN_REQUIRE_ROOT",
            SkipKind::Toolchain => "FENCED_RUN_REQUIRE_TOOLCHAIN",
            SkipKind::Build => "FENCED_RUN_REQUIRE_BUILD",
            SkipKind::Host => "FENCED_RUN_REQUIRE_HOST",
        }
    }

    /// Whether a skip of this kind must fail the run ([`Self::require_var`] is `1`).
    pub fn required(self) -> bool {
        std::env::var(self.require_var()).as_deref() == Ok("1")
    }

    /// The kind named `name` (as [`Self::name`] spells it).
    pub fn from_name(name: &str) -> Option<SkipKind> {
        SkipKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for SkipKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One recorded skip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The test binary (without cargo's hash).
    pub binary: String,
    /// The test (the name of the thread the test harness ran it on), empty when unknown.
    pub test: String,
    /// What was missing.
    pub kind: SkipKind,
    /// Why, as the test printed it.
    pub why: String,
}

/// The file skip records are appended to: `fenced-run-skips.log` in the target directory
/// (`$CARGO_TARGET_DIR`, else the workspace's `target/`). `viewer/tests/zz_skip_summary.rs` prints its summary.
pub fn skip_log() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
        .join("fenced-run-skips.log")
}

/// This test binary's name, without the hash cargo appends (`NAME-HASH`; the hash says nothing to a reader).
fn this_binary() -> String {
    std::env::args()
        .next()
        .map(|a| {
            let name = std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or(a);
            match name.rsplit_once('-') {
                Some((base, hash))
                    if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    base.to_string()
                }
                _ => name,
            }
        })
        .unwrap_or_default()
}

/// The running test's name: the test harness runs each test on a thread named after it.
fn this_test() -> String {
    match std::thread::current().name() {
        Some("main") | None => String::new(),
        Some(n) => n.to_string(),
    }
}

/// One record line: `<parent pid>\t<test binary>\t<test>\t<kind>\t<why>\n` (tabs and newlines of the fields
/// replaced by spaces).
fn record_line(parent: u32, s: &Skip) -> String {
    let clean = |t: &str| t.replace(['\n', '\t', '\r'], " ");
    format!(
        "{parent}\t{}\t{}\t{}\t{}\n",
        clean(&s.binary),
        clean(&s.test),
        s.kind.name(),
        clean(&s.why)
    )
}

/// The skips of `log` recorded under the parent `parent`; lines of another run, of an older format or that do
/// not parse are passed over.
fn parse_records(log: &str, parent: u32) -> Vec<Skip> {
    let me = parent.to_string();
    log.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(5, '\t').collect();
            match f.as_slice() {
                [p, binary, test, kind, why] if *p == me => Some(Skip {
                    binary: binary.to_string(),
                    test: test.to_string(),
                    kind: SkipKind::from_name(kind)?,
                    why: why.to_string(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// Appends one skip record to [`skip_log`]; the parent pid is the `cargo test` that ran the binary, so one
/// run's records can be told from an earlier run's. A failure to write is ignored (the `skipped:` line on
/// stderr is the record of last resort).
pub fn record_skip(kind: SkipKind, why: &str) {
    use std::io::Write;
    let line = record_line(
        std::os::unix::process::parent_id(),
        &Skip {
            binary: this_binary(),
            test: this_test(),
            kind,
            why: why.to_string(),
        },
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skip_log())
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The skip records of the `cargo test` run this process belongs to (same parent).
pub fn skips_of_this_run() -> Vec<Skip> {
    parse_records(
        &std::fs::read_to_string(skip_log()).unwrap_or_default(),
        std::os::unix::process::parent_id(),
    )
}

/// The summary line of `skips`: how many tests skipped, by kind, and why (each reason once, with the test
/// binaries that gave it). A test that recorded several skips of one kind counts once for it.
pub fn summarize(skips: &[Skip]) -> String {
    if skips.is_empty() {
        return "skips in this run: none (no test skipped for a missing component)".to_string();
    }
    let mut counts: Vec<(SkipKind, usize)> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    for kind in SkipKind::ALL {
        let of_kind: Vec<&Skip> = skips.iter().filter(|s| s.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut tests: Vec<(&str, &str)> = Vec::new();
        let mut unnamed = 0usize;
        let mut whys: Vec<(&str, Vec<&str>)> = Vec::new();
        for s in &of_kind {
            if s.test.is_empty() {
                unnamed += 1;
            } else if !tests.contains(&(s.binary.as_str(), s.test.as_str())) {
                tests.push((&s.binary, &s.test));
            }
            match whys.iter_mut().find(|(w, _)| *w == s.why) {
                Some((_, bins)) if bins.contains(&s.binary.as_str()) => {}
                Some((_, bins)) => bins.push(&s.binary),
                None => whys.push((&s.why, vec![&s.binary])),
            }
        }
        counts.push((kind, tests.len() + unnamed));
        for (why, bins) in whys {
            reasons.push(format!("{kind}: {why} ({})", bins.join(", ")));
        }
    }
    format!(
        "skips in this run: {} test(s) skipped ({}): {}",
        counts.iter().map(|(_, n)| n).sum::<usize>(),
        counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        reasons.join("; ")
    )
}

/// One line saying how many tests this run skipped, by kind, and why; or that none did.
pub fn skip_summary() -> String {
    summarize(&skips_of_this_run())
}

/// The kinds among `skips` whose skip must fail the run (their [`SkipKind::required`] holds).
pub fn required_but_skipped(skips: &[Skip]) -> Vec<SkipKind> {
    let mut out: Vec<SkipKind> = skips
        .iter()
        .map(|s| s.kind)
        .filter(|k| k.required())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a missing vector must fail the run (`FENCED_RUN_REQUIRE_VECTORS=1`).
pub fn required() -> bool {
    SkipKind::Vectors.required()
}

/// The one way a test says it skipped for want of a component: panics when `kind` is required
/// ([`SkipKind::required`]), else records the skip for the suite's summary and prints
/// `skipped: <kind>: <why>` to stderr. For tests only.
///
/// The line is written to the stderr handle, not through `eprintln!`, so the test harness does not capture it
/// and a user sees why a test passed without checking anything.
pub fn skip_for(kind: SkipKind, why: &str) {
    use std::io::Write;
    assert!(
        !kind.required(),
        "{}=1 but a test skipped ({kind}): {why}",
        kind.require_var()
    );
    record_skip(kind, why);
    let _ = writeln!(std::io::stderr(), "skipped: {kind}: {why}");
}

/// [`skip_for`] a missing vector ([`SkipKind::Vectors`]).
pub fn skip(why: &str) {
    skip_for(SkipKind::Vectors, why);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn s(binary: &str, test: &str, kind: SkipKind, why: &str) -> Skip {
        Skip {
            binary: binary.into(),
            test: test.into(),
            kind,
            why: why.into(),
        }
    }

    #[test]
    fn records_of_this_run_only_are_read_back() {
        let a = s(
            "pool",
            "pool_end_to_end",
            SkipKind::Pool,
            "no\ttemporal\nCLI",
        );
        let b = s("fence_verdict", "t", SkipKind::StaticVerifier, "x");
        let log = format!(
            "{}{}{}41\tbin\tnot enough fields\n42\told-format\twhy only\n42\tb\tt\tno-such-kind\twhy\n",
            record_line(42, &a),
            record_line(7, &b),
            record_line(42, &b),
        );
        let got = parse_records(&log, 42);
        assert_eq!(
            got,
            vec![
                s("pool", "pool_end_to_end", SkipKind::Pool, "no temporal CLI"),
                b.clone()
            ]
        );
    }

    #[test]
    fn the_summary_counts_tests_by_kind_and_names_each_reason_once() {
        assert_eq!(
            summarize(&[]),
            "skips in this run: none (no test skipped for a missing component)"
        );
        let skips = [
            s("pool", "a", SkipKind::Pool, "no temporal"),
            s("pool", "b", SkipKind::Pool, "no temporal"),
            // The same test twice counts once.
            s("pool", "b", SkipKind::Pool, "no temporal"),
            s("snp_chain", "c", SkipKind::Vectors, "no vectors at X"),
            s("tdx_quote", "c", SkipKind::Vectors, "no vectors at X"),
            // A record without a test name counts on its own.
            s("snp_chain", "", SkipKind::Vectors, "no vectors at X"),
            s("fence_verdict", "d", SkipKind::Root, "not root"),
        ];
        assert_eq!(
            summarize(&skips),
            "skips in this run: 6 test(s) skipped (vectors 3, pool 2, root 1): \
             vectors: no vectors at X (snp_chain, tdx_quote); pool: no temporal (pool); \
             root: not root (fence_verdict)"
        );
    }

    #[test]
    fn every_kind_has_its_own_name_and_variable() {
        for k in SkipKind::ALL {
            assert_eq!(SkipKind::from_name(k.name()), Some(k));
            assert!(k.require_var().starts_with("FENCED_RUN_REQUIRE_"));
            let same = SkipKind::ALL
                .iter()
                .filter(|o| o.name() == k.name() || o.require_var() == k.require_var())
                .count();
            assert_eq!(same, 1, "{k}");
        }
        assert_eq!(SkipKind::from_name("nothing"), None);
    }

    #[test]
    fn a_test_s_skip_carries_its_test_name() {
        // The test harness names the thread after the test.
        assert!(this_test().ends_with("a_test_s_skip_carries_its_test_name"));
    }
}
