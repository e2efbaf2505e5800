//! Two builders, one agent (docs/vm.md, "Reproducing the agent"). The repository's HEAD is cloned into two
//! directories at different paths and depths; in each, the static guest agent is linked exactly as
//! `fenced-run image build` links it (`cargo rustc -p host --bin fenced-run-agent --profile dev -- <flags>`,
//! host::image::agent), each builder with its own HOME, CARGO_HOME (the registry cache lent through a symbolic link,
//! `--offline`) and CARGO_TARGET_DIR, both from an empty target directory. The two binaries must be the same bytes:
//! otherwise the image, and the vm measurement an auditor recomputes from their own clone, would differ.
//!
//! Kind `build`: it skips (stderr, counted) where git or cargo cannot run or the registry cache lacks a crate of
//! Cargo.lock (it never goes to the network); `.ci/run` sets FENCED_RUN_REQUIRE_BUILD, so there a skip fails. It
//! compiles host's dependencies twice (about two `cargo build -p host` from nothing; docs/benchmarks.md).

use attestation::vectors::{skip_for, SkipKind};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace this test was built from.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where cargo keeps its registry for this user.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// One builder: its clone, HOME, CARGO_HOME and target directory, all under `root`.
struct Builder {
    clone: PathBuf,
    home: PathBuf,
    cargo_home: PathBuf,
    target: PathBuf,
}

impl Builder {
    fn new(root: &Path, clone_at: &str, registry: &Path) -> Builder {
        let b = Builder {
            clone: root.join(clone_at),
            home: root.join("home"),
            cargo_home: root.join("cargo-home"),
            target: root.join("target-dir"),
        };
        std::fs::create_dir_all(&b.home).expect("home");
        std::fs::create_dir_all(&b.cargo_home).expect("cargo home");
        std::os::unix::fs::symlink(registry, b.cargo_home.join("registry")).expect("registry link");
        b
    }

    /// `cargo ARGS` in the clone with this builder's environment.
    fn cargo(&self, cargo: &Path, rustc: &Path) -> Command {
        let mut c = Command::new(cargo);
        c.current_dir(&self.clone)
            .env("HOME", &self.home)
            .env("CARGO_HOME", &self.cargo_home)
            .env("CARGO_TARGET_DIR", &self.target)
            .env("RUSTC", rustc)
            .env("CARGO_INCREMENTAL", "0")
            .env("CARGO_TERM_COLOR", "never")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .stdin(std::process::Stdio::null());
        c
    }
}

/// The macros that compile a path of the build machine into a crate's code (`file!()` is remapped by
/// scripts/rustc-remap; these are not: their values are taken verbatim).
const BUILD_PATH_MACROS: &[&str] = &[
    "env!(\"CARGO_MANIFEST_DIR\")",
    "env!(\"OUT_DIR\")",
    "env!(\"CARGO_TARGET_TMPDIR\")",
    "option_env!(\"CARGO_MANIFEST_DIR\")",
    "option_env!(\"OUT_DIR\")",
];

/// Every `FILE:LINE: MACRO` under `dir` (Rust files, recursively) that uses one of [`BUILD_PATH_MACROS`].
fn build_paths_compiled_in(dir: &Path, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            build_paths_compiled_in(&p, found);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for m in BUILD_PATH_MACROS {
                    if code.replace(' ', "").contains(m) {
                        found.push(format!("{}:{}: {m}", p.display(), n + 1));
                    }
                }
            }
        }
    }
}

/// The cheap half of the check below, run everywhere in milliseconds: no crate's library or binary code (`src/` of
/// every workspace member; tests, benches and examples are never linked into the agent) compiles in a path of the
/// build machine. Two builders at different paths got agents differing in 11 bytes of `.gcc_except_table` from one
/// such function (`attestation::vectors::root`), kept by the linker although the function itself was dropped.
#[test]
fn no_crate_compiles_a_path_of_the_build_machine_into_its_code() {
    // The scan finds what it looks for.
    let t = tempfile::tempdir().expect("tmp");
    std::fs::write(
        t.path().join("lib.rs"),
        "fn root() -> &'static str { env!( \"CARGO_MANIFEST_DIR\") } // env!(\"OUT_DIR\") in a comment\n",
    )
    .expect("write");
    let mut planted = Vec::new();
    build_paths_compiled_in(t.path(), &mut planted);
    assert_eq!(planted.len(), 1, "{planted:?}");

    let ws = workspace();
    let manifest: toml::Table = std::fs::read_to_string(ws.join("Cargo.toml"))
        .expect("the workspace's Cargo.toml")
        .parse()
        .expect("the workspace's Cargo.toml is TOML");
    let members: Vec<String> = manifest["workspace"]["members"]
        .as_array()
        .expect("[workspace] members")
        .iter()
        .filter_map(|m| m.as_str().map(str::to_owned))
        .collect();
    assert!(members.iter().any(|m| m == "host"), "{members:?}");
    let mut found = Vec::new();
    for m in &members {
        build_paths_compiled_in(&ws.join(m).join("src"), &mut found);
    }
    assert!(
        found.is_empty(),
        "code that is linked into binaries compiles in a path of the build machine (read it at run time \
         instead, e.g. std::env::var_os(\"CARGO_MANIFEST_DIR\")):\n{}",
        found.join("\n")
    );
}

#[test]
fn two_clones_at_different_paths_with_different_cargo_homes_link_the_same_agent_bytes() {
    let ws = workspace();
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let git_ok = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !git_ok {
        skip_for(
            SkipKind::Build,
            "git is not installed (the test clones the repository)",
        );
        return;
    }
    if !ws.join(".git").exists() {
        skip_for(
            SkipKind::Build,
            &format!("{} is not a git checkout to clone", ws.display()),
        );
        return;
    }
    let Some(registry) = cargo_home()
        .map(|h| h.join("registry"))
        .filter(|r| r.is_dir())
    else {
        skip_for(
            SkipKind::Build,
            "no cargo registry cache (CARGO_HOME/registry) to build offline from",
        );
        return;
    };
    // The toolchain of this workspace, run directly: the builders' HOMEs differ, so rustup's proxy could not find it.
    let sysroot = Command::new("rustc")
        .current_dir(&ws)
        .args(["--print", "sysroot"])
        .output();
    let Some(rustc) = sysroot
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("bin/rustc"))
        .filter(|r| r.is_file())
    else {
        skip_for(SkipKind::Build, "rustc --print sysroot names no rustc");
        return;
    };

    let tmp = tempfile::Builder::new()
        .prefix("agent-repro-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tmp");
    let one = Builder::new(&tmp.path().join("one"), "fenced-run", &registry);
    let two = Builder::new(
        &tmp.path().join("two"),
        "a/much/deeper/checkout-elsewhere",
        &registry,
    );
    for b in [&one, &two] {
        let o = Command::new("git")
            .args(["clone", "-q", "--no-hardlinks"])
            .arg(&ws)
            .arg(&b.clone)
            .output()
            .expect("git clone");
        assert!(
            o.status.success(),
            "git clone {} {}: {}",
            ws.display(),
            b.clone.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // Every crate of Cargo.lock must be in the cache: the test never goes to the network.
    let fetch = one
        .cargo(&cargo, &rustc)
        .args(["fetch", "--offline", "--locked"])
        .output()
        .expect("cargo fetch");
    if !fetch.status.success() {
        skip_for(
            SkipKind::Build,
            &format!(
                "the registry cache {} lacks crates of Cargo.lock (`cargo fetch` online first): {}",
                registry.display(),
                String::from_utf8_lossy(&fetch.stderr).trim()
            ),
        );
        return;
    }

    // Both builders at once (each compiles host's dependencies from nothing).
    let link = |b: &Builder| {
        b.cargo(&cargo, &rustc)
            .args(["rustc", "--offline", "--locked", "-p", "host", "--bin"])
            .arg(host::image::agent::BIN)
            .args(["--profile", "dev", "--"])
            .args(host::image::agent::RUSTC_FLAGS)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cargo rustc")
    };
    let started = std::time::Instant::now();
    let children = [link(&one), link(&two)];
    let mut agents = Vec::new();
    for (b, child) in [&one, &two].into_iter().zip(children) {
        let o = child.wait_with_output().expect("wait for cargo");
        let err = String::from_utf8_lossy(&o.stderr);
        let tail: Vec<&str> = err.lines().rev().take(30).collect();
        assert!(
            o.status.success(),
            "linking the agent in {} failed: {}",
            b.clone.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        let bin = b.target.join("debug").join(host::image::agent::BIN);
        let bytes = std::fs::read(&bin).expect("the agent");
        host::image::agent::check_static(&bin, &bytes).expect("a static agent");
        agents.push(bytes);
    }
    eprintln!(
        "two builders linked the agent from nothing in {:.0} s ({} bytes each)",
        started.elapsed().as_secs_f64(),
        agents[0].len()
    );
    let (a, b) = (&agents[0], &agents[1]);
    let differ: Vec<usize> = a
        .iter()
        .zip(b.iter())
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, _)| i)
        .collect();
    assert!(
        a.len() == b.len() && differ.is_empty(),
        "the two agents differ: {} and {} bytes, {} bytes differ (first at offsets {:?})",
        a.len(),
        b.len(),
        differ.len(),
        &differ[..differ.len().min(8)]
    );
    // Neither embeds a path of its builder.
    for (bytes, builder) in [(a, &one), (b, &two)] {
        for p in [
            &builder.clone,
            &builder.cargo_home,
            &builder.target,
            &builder.home,
        ] {
            let needle = p.to_string_lossy();
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "the agent embeds {needle}"
            );
        }
    }
}
