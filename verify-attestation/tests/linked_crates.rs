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
