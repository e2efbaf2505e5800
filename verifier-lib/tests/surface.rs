//! The public surface stays curated (docs/verification.md, "The library's API"): the crate root, `sev_snp`,
//! `intel_tdx`, `collateral` and `output` are the only public modules; the interior (`evidence`, `snp`, `tdx`,
//! `pki`, `pool_ledger`, the parts of `collateral`) is `pub(crate)`, public only with the unstable feature
//! `internals`, which no crate's `[dependencies]` may enable (only dev-dependencies and the fuzz workspace).

use std::path::{Path, PathBuf};

/// The public modules of the crate root, the API.
const PUBLIC_MODULES: [&str; 4] = ["collateral", "intel_tdx", "output", "sev_snp"];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The module declarations of a source file outside `macro_rules!` bodies: (line number, visibility, name),
/// visibility `pub`, `pub(crate)`, `` (private) or `interior!` for the macro that declares an interior module.
fn module_declarations(src: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let mut in_macro = 0usize;
    let mut pending_interior = false;
    for (i, raw) in src.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with("macro_rules!") {
            in_macro = 1;
            continue;
        }
        if in_macro > 0 {
            in_macro += line.matches('{').count();
            in_macro = in_macro.saturating_sub(line.matches('}').count());
            continue;
        }
        if let Some(rest) = line.strip_prefix("interior!(") {
            let name = rest.trim_end_matches(");").trim();
            if name.is_empty() {
                pending_interior = true;
            } else {
                out.push((i + 1, "interior!".to_string(), name.to_string()));
            }
            continue;
        }
        if pending_interior {
            if line.starts_with("#[") {
                continue;
            }
            let name = line.trim_end_matches(')').trim();
            if !name.is_empty() {
                out.push((i + 1, "interior!".to_string(), name.to_string()));
                pending_interior = false;
            }
            continue;
        }
        for vis in ["pub(crate) ", "pub ", ""] {
            if let Some(rest) = line.strip_prefix(&format!("{vis}mod ")) {
                let name = rest.trim_end_matches(';').trim_end_matches(" {").trim();
                out.push((i + 1, vis.trim().to_string(), name.to_string()));
                break;
            }
        }
    }
    out
}

#[test]
fn only_the_api_modules_are_public_at_the_root() {
    let path = crate_dir().join("src/lib.rs");
    let src = std::fs::read_to_string(&path).expect("read src/lib.rs");
    let decls = module_declarations(&src);
    let public: Vec<&str> = decls
        .iter()
        .filter(|(_, vis, _)| vis == "pub")
        .map(|(_, _, n)| n.as_str())
        .collect();
    for (line, vis, name) in &decls {
        assert!(
            vis != "pub" || PUBLIC_MODULES.contains(&name.as_str()),
            "src/lib.rs:{line}: `pub mod {name}` makes an interior module public; declare it with \
             `interior!({name})` and export what callers need through the API (docs/verification.md)"
        );
    }
    let mut want = PUBLIC_MODULES.to_vec();
    want.sort_unstable();
    let mut got = public.clone();
    got.sort_unstable();
    assert_eq!(got, want, "the public modules of src/lib.rs");
    for interior in ["evidence", "snp", "tdx", "pki", "pool_ledger"] {
        assert!(
            decls
                .iter()
                .any(|(_, vis, n)| n == interior && vis == "interior!"),
            "src/lib.rs declares `{interior}` through `interior!` (pub(crate) without the feature `internals`)"
        );
    }
    // `#[doc(hidden)] pub` was how the interior used to be exposed: only the macro may say it.
    let outside_macro: String = {
        let start = src
            .find("macro_rules! interior")
            .expect("the interior! macro");
        let end = start + src[start..].find("\n}\n").expect("end of the macro");
        format!("{}{}", &src[..start], &src[end..])
    };
    assert!(
        !outside_macro.contains("#[doc(hidden)]"),
        "src/lib.rs hides a public item with #[doc(hidden)] outside the interior! macro"
    );
}

#[test]
fn the_parts_of_collateral_are_interior() {
    let path = crate_dir().join("src/collateral/mod.rs");
    let src = std::fs::read_to_string(&path).expect("read src/collateral/mod.rs");
    for (line, vis, name) in module_declarations(&src) {
        assert!(
            vis != "pub",
            "src/collateral/mod.rs:{line}: `pub mod {name}`: declare it with `interior!` and re-export the items \
             the CLI needs"
        );
    }
}

#[test]
fn the_parser_finds_a_public_interior_module() {
    // The scan above must be able to fail: a `pub mod` line is seen as one.
    let decls = module_declarations(
        "mod a;\npub mod snp;\ninterior!(tdx);\ninterior!(\n    #[cfg(x)]\n    kds\n);\n",
    );
    let got: Vec<(String, String)> = decls.into_iter().map(|(_, v, n)| (v, n)).collect();
    assert_eq!(
        got,
        vec![
            (String::new(), "a".to_string()),
            ("pub".to_string(), "snp".to_string()),
            ("interior!".to_string(), "tdx".to_string()),
            ("interior!".to_string(), "kds".to_string()),
        ]
    );
}

/// Whether a dependency table entry for verifier-lib turns on `internals`.
fn enables_internals(dep: &toml::Value) -> bool {
    dep.get("features")
        .and_then(|f| f.as_array())
        .is_some_and(|f| f.iter().any(|x| x.as_str() == Some("internals")))
}

/// Every `[dependencies]`-like table of a manifest that builds what users run: `[dependencies]`,
/// `[build-dependencies]` and the same under `[target.*]` (dev-dependencies are for tests and benches).
fn normal_dependency_tables(manifest: &toml::Value) -> Vec<(String, &toml::value::Table)> {
    let mut out = Vec::new();
    for key in ["dependencies", "build-dependencies"] {
        if let Some(t) = manifest.get(key).and_then(|t| t.as_table()) {
            out.push((key.to_string(), t));
        }
    }
    if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
        for (cfg, t) in targets {
            for key in ["dependencies", "build-dependencies"] {
                if let Some(t) = t.get(key).and_then(|t| t.as_table()) {
                    out.push((format!("target.{cfg}.{key}"), t));
                }
            }
        }
    }
    out
}

fn manifest(path: &Path) -> toml::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn no_crate_depends_on_the_interior() {
    let root = crate_dir().join("..");
    let workspace = manifest(&root.join("Cargo.toml"));
    let members: Vec<String> = workspace["workspace"]["members"]
        .as_array()
        .expect("workspace members")
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    assert!(
        members.iter().any(|m| m == "verify-attestation"),
        "{members:?}"
    );
    let mut checked = 0;
    for m in &members {
        let path = root.join(m).join("Cargo.toml");
        let man = manifest(&path);
        for (table, deps) in normal_dependency_tables(&man) {
            if let Some(dep) = deps.get("verifier-lib") {
                checked += 1;
                assert!(
                    !enables_internals(dep),
                    "{m}/Cargo.toml [{table}]: verifier-lib with the feature `internals` (unstable, for tests, \
                     benches and fuzz targets only)"
                );
            }
        }
    }
    assert!(
        checked >= 3,
        "found verifier-lib in only {checked} manifests"
    );
    let wanted: toml::Value =
        toml::from_str("features = [\"fetch\", \"internals\"]").expect("toml");
    assert!(enables_internals(&wanted), "the check must see the feature");
}
