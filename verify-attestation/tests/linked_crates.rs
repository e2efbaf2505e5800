//! What the founder's binary links (issue 35): no crate that launches or runs anything. `cargo tree` over the
//! normal dependencies of verify-attestation holds no `sev` crate, no device-ioctl crate (nix, through
//! attestation's backends), no certificate builder of the sim CAs (x509-cert), and enables no feature of
//! `attestation` or `measurements` (their formats only: not `runner`, not `cli`). verifier-lib alone links no
//! CLI parser, no HTTP client and no cache (its `fetch` feature is off by default).

use std::process::Command;

/// `cargo tree` of `package`'s normal dependencies, one `name version|features` line per crate.
fn tree(package: &str) -> Option<Vec<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = match Command::new(cargo)
        .current_dir(&workspace)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .args(["-f", "{p}|{f}", "-p", package])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            // On stderr and counted in the suite's skip line; a failure where FENCED_RUN_REQUIRE_BUILD=1.
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::Build,
                &format!("cargo could not be started ({e})"),
            );
            return None;
        }
    };
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim_end_matches(" (*)").to_string())
            .collect(),
    )
}

fn crate_name(line: &str) -> &str {
    line.split(' ').next().unwrap_or("")
}

fn features<'a>(lines: &'a [String], name: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|l| crate_name(l) == name)
        .map(|l| l.split_once('|').map_or("", |(_, f)| f))
        .collect()
}

#[test]
fn the_founders_binary_links_no_runner_code() {
    let Some(lines) = tree("verify-attestation") else {
        return;
    };
    assert!(
        lines.iter().any(|l| crate_name(l) == "verifier-lib"),
        "{lines:?}"
    );
    for banned in ["sev", "nix", "x509-cert"] {
        let found: Vec<_> = lines.iter().filter(|l| crate_name(l) == banned).collect();
        assert!(
            found.is_empty(),
            "verify-attestation links {banned}: {found:?}"
        );
    }
    for formats_only in ["attestation", "measurements"] {
        let f = features(&lines, formats_only);
        assert!(!f.is_empty(), "{formats_only} is not linked: {lines:?}");
        assert!(
            f.iter().all(|f| f.is_empty()),
            "{formats_only} is linked with features {f:?} (the formats only have none)"
        );
    }
    assert_eq!(features(&lines, "verifier-lib"), ["fetch"]);
}

#[test]
fn the_check_library_links_no_cli_http_or_cache() {
    let Some(lines) = tree("verifier-lib") else {
        return;
    };
    for banned in [
        "clap",
        "ureq",
        "fd-lock",
        "dirs",
        "httpdate",
        "tempfile",
        "sev",
        "nix",
        "x509-cert",
    ] {
        let found: Vec<_> = lines.iter().filter(|l| crate_name(l) == banned).collect();
        assert!(found.is_empty(), "verifier-lib links {banned}: {found:?}");
    }
    assert_eq!(features(&lines, "verifier-lib"), [""]);
}

/// What, in a crate's source, launches or runs something: process spawning, device ioctls, device nodes.
const RUNNER_CODE: [&str; 8] = [
    "process::Command",
    "Command::new",
    "process::Stdio",
    "ioctl",
    "libc::",
    "nix::",
    "\"/dev/",
    "execv",
];

/// Every `.rs` file under `path` (a file or a directory).
fn rs_files(path: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_file() {
        out.push(path.to_owned());
        return;
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            rs_files(&p, out);
        }
    }
}

/// The source files a crate compiles without its features: each module its `src/lib.rs` declares, less those
/// behind a `#[cfg(...)]` that names a feature.
fn featureless_sources(krate: &str) -> Vec<std::path::PathBuf> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let mut files = Vec::new();
    let mut gated = false;
    for line in lib.lines().map(str::trim) {
        if line.starts_with("#[cfg(") {
            gated |= line.contains("feature") || line.contains("test");
            continue;
        }
        let Some(name) = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|m| m.strip_suffix(';'))
        else {
            continue;
        };
        if !std::mem::take(&mut gated) {
            let file = src.join(format!("{name}.rs"));
            let path = if file.is_file() { file } else { src.join(name) };
            rs_files(&path, &mut files);
        }
    }
    files
}

/// Whether `line` holds `word` where it starts a word (`nix::` in `use nix::...`, not in `unix::`).
fn holds_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(i, _)| {
        !line[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The lines of `file` (before its `#[cfg(test)]`, comments left out) that hold runner code.
fn runner_lines(file: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| RUNNER_CODE.iter().any(|c| holds_word(l, c)))
        .map(|(i, l)| format!("{}:{}: {}", file.display(), i + 1, l.trim()))
        .collect()
}

#[test]
fn the_formats_carry_no_code_that_launches_or_runs_anything() {
    let attestation = featureless_sources("attestation");
    let names: Vec<String> = attestation
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert!(
        names.iter().any(|n| n == "evidence.rs"),
        "attestation's formats not found: {names:?}"
    );
    for runner in ["sev_guest.rs", "configfs.rs", "session.rs"] {
        assert!(
            !names.iter().any(|n| n == runner),
            "{runner} is compiled without `runner`: {names:?}"
        );
    }
    assert!(
        holds_word("use nix::errno;", "nix::") && !holds_word("std::os::unix::process", "nix::")
    );
    // The scan finds what it looks for: the TEE backends (feature `runner`) open devices and issue ioctls.
    let mut backends = Vec::new();
    rs_files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../attestation/src/tee"),
        &mut backends,
    );
    assert!(
        backends.iter().any(|f| !runner_lines(f).is_empty()),
        "the scan finds no runner code in attestation's TEE backends"
    );
    let measurements = featureless_sources("measurements");
    assert!(
        measurements.iter().any(|p| p.ends_with("set.rs")),
        "measurements' sources not found: {measurements:?}"
    );
    let found: Vec<String> = attestation
        .iter()
        .chain(&measurements)
        .flat_map(|f| runner_lines(f))
        .collect();
    assert!(
        found.is_empty(),
        "the formats (attestation without `runner`, measurements without `cli`) hold runner code:\n{}",
        found.join("\n")
    );
}
