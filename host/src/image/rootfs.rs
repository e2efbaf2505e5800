//! The toolchain root filesystem of `fenced-run image build --toolchains`: Debian packages of [`RELEASE`] at
//! exact versions (resolved and fetched through a private apt state whose source is derived from the machine's
//! own Debian source, [`AptRoot`]), unpacked with `dpkg-deb` into a tree without running any maintainer script, made into an erofs image with
//! fixed times, owner and UUID, and followed in the same file by a dm-verity hash tree with a fixed salt. The
//! root hash goes on the image's kernel command line ([`cmdline_params`]), which every launch measurement covers;
//! the guest agent sets the verity device up and the fence shows the file system as the sandbox's system
//! directories (docs/vm.md, "The toolchain image").

use measurements::manifest::{Artifact, DebPackage, ToolchainImage};
use sha2::{Digest, Sha256, Sha384};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The image file inside the image directory: erofs, then the hash tree.
pub const IMAGE_FILE: &str = "toolchains.img";
/// The unpacked tree inside the image directory (the process tier shows it as the sandbox's system
/// directories, so that both tiers run the same toolchains).
pub const TREE_DIR: &str = "toolchains.tree";
/// Block size of the file system's device and of the hash tree.
pub const BLOCK: u64 = 4096;
/// The `SOURCE_DATE_EPOCH` used when the environment has none (2025-01-01T00:00:00Z).
pub const DEFAULT_SOURCE_DATE_EPOCH: u64 = 1_735_689_600;
/// The erofs UUID of every toolchain image (a random one would differ between builds).
pub const FS_UUID: &str = "66656e63-6564-2d72-756e-2d746f6f6c73";
/// The kernel command-line parameter naming the toolchain sets (`go,node,python,rust`, sorted).
pub const PARAM_TOOLCHAINS: &str = "fenced_run.toolchains";
/// The kernel command-line parameter with the verity table's values: `DATA_BLOCKS,ROOT_HASH,SALT`.
pub const PARAM_VERITY: &str = "fenced_run.verity";

/// The dm-verity salt of every toolchain image: SHA-256 of a fixed label (veritysetup's default is random).
pub fn salt() -> String {
    hex::encode(Sha256::digest(b"fenced-run/v1/toolchain-verity-salt"))
}

/// The Debian release every toolchain image is built from, whatever the machine runs: its stable toolchains
/// (Rust >= 1.85 with the sparse index, Python >= 3.11, Node >= 20, Go >= 1.22) are what current projects need,
/// and one release gives one coherent C library for all of them (docs/vm.md, "The toolchain image").
pub const RELEASE: &str = "trixie";

/// The Debian packages each toolchain set asks for (their dependencies come with them). `rustc-web` and
/// `cargo-web` are Debian's current stable Rust (they install `/usr/bin/rustc` and `/usr/bin/cargo`).
pub fn toolchain_packages(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "rust" => &["rustc-web", "cargo-web"],
        "python" => &["python3", "python3-pip", "python3-pytest", "python3-venv"],
        "node" => &["nodejs", "npm"],
        "go" => &["golang-go"],
        _ => return None,
    })
}

/// The file in the image that names each toolchain set's version (JSON: `{"rust": "1.96.0", ...}`), derived
/// from the pinned packages by [`toolchain_versions`]; the fence reads it to say whether a repository's
/// toolchain pins are satisfied (guest::fence::toolchain_pins reads the same path).
pub const VERSIONS_FILE: &str = "usr/share/fenced-run/toolchains.json";

/// The upstream part of a Debian version: no epoch, nothing from the first `+`, `-` or `~` on
/// (`1.96.0+dfsg1-1~deb13u1+b1` -> `1.96.0`, `2:1.24~2` -> `1.24`).
pub fn upstream_version(debian: &str) -> &str {
    let v = debian.split_once(':').map_or(debian, |(_, v)| v);
    v.split(['+', '-', '~']).next().unwrap_or(v)
}

/// Each toolchain set's version, from the package that carries it: `rustc-web` (or `rustc`), `python3`,
/// `nodejs`, and Go's versioned compiler package `golang-1.NN-go` (whose version is the full release, where the
/// `golang-go` metapackage's is only `1.NN`).
pub fn toolchain_versions(
    toolchains: &[String],
    packages: &[DebPackage],
) -> std::collections::BTreeMap<String, String> {
    let find = |pred: &dyn Fn(&str) -> bool| {
        packages
            .iter()
            .find(|p| pred(&p.name))
            .map(|p| upstream_version(&p.version).to_string())
    };
    let mut out = std::collections::BTreeMap::new();
    for t in toolchains {
        let v = match t.as_str() {
            "rust" => find(&|n| n == "rustc-web").or_else(|| find(&|n| n == "rustc")),
            "python" => find(&|n| n == "python3"),
            "node" => find(&|n| n == "nodejs"),
            "go" => find(&|n| {
                n.strip_prefix("golang-1.")
                    .and_then(|r| r.strip_suffix("-go"))
                    .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
            })
            .or_else(|| find(&|n| n == "golang-go")),
            _ => None,
        };
        if let Some(v) = v {
            out.insert(t.clone(), v);
        }
    }
    out
}

/// Packages every toolchain image holds: what builds and fetches need beside the toolchains.
pub const COMMON_PACKAGES: &[&str] = &["git", "build-essential", "ca-certificates"];
/// The essential userland a Debian system has without asking (named here because apt, resolving against an
/// empty package database, adds only what is depended on).
pub const BASE_PACKAGES: &[&str] = &[
    "base-files",
    "bash",
    "coreutils",
    "dash",
    "debianutils",
    "diffutils",
    "findutils",
    "grep",
    "gzip",
    "libc-bin",
    "mawk",
    "sed",
    "tar",
];

/// Links that maintainer scripts make with `update-alternatives` and that builds expect; made here, each
/// only when its target was unpacked.
const ALTERNATIVES: &[(&str, &str)] = &[
    ("usr/bin/awk", "mawk"),
    ("usr/bin/cc", "gcc"),
    ("usr/bin/c++", "g++"),
    ("usr/bin/c89", "c89-gcc"),
    ("usr/bin/c99", "c99-gcc"),
    ("usr/bin/which", "which.debianutils"),
];

/// Directories left out of the tree (manual pages, info, translations): nothing runs them.
const EXCLUDED: &[&str] = &["./usr/share/man", "./usr/share/info", "./usr/share/locale"];

/// Parses `--toolchains` (`rust,python`): known names, sorted, without duplicates.
pub fn parse_toolchains(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim) {
        if toolchain_packages(name).is_none() {
            return Err(format!(
                "--toolchains: unknown toolchain {:?} (known: go, node, python, rust)",
                attestation::text::escape(name)
            ));
        }
        out.push(name.to_string());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A package at the exact version apt chose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// Package name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Architecture.
    pub architecture: String,
}

impl Pin {
    /// The file name `apt-get download` gives the package (`:` of an epoch written `%3a`).
    pub fn deb_file(&self) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            self.architecture
        )
    }
}

/// The packages to unpack for `toolchains`, names only (before apt resolves dependencies).
pub fn requested_packages(toolchains: &[String]) -> Vec<&'static str> {
    let mut pkgs: Vec<&str> = BASE_PACKAGES
        .iter()
        .chain(COMMON_PACKAGES)
        .copied()
        .collect();
    for t in toolchains {
        pkgs.extend(toolchain_packages(t).unwrap_or_default());
    }
    pkgs
}

/// The machine's apt sources, read to derive [`RELEASE`]'s source from.
pub const MACHINE_SOURCES: &[&str] = &["/etc/apt/sources.list", "/etc/apt/sources.list.d"];

/// One apt source: where, which suites and components, and the keyring options it had.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Source {
    uris: String,
    suites: Vec<String>,
    components: String,
    signed_by: Option<String>,
}

/// The suite of [`RELEASE`] that stands for the machine's `suite` of release `codename`: the release itself,
/// its `-updates` and its `-security` suites (`bookworm-security` -> `trixie-security`); `None` for any other
/// suite (backports, another release, another distribution).
fn release_suite(suite: &str, codename: &str) -> Option<String> {
    let rest = suite.strip_prefix(codename)?;
    matches!(rest, "" | "-updates" | "-security").then(|| format!("{RELEASE}{rest}"))
}

/// The deb822 text of an apt source for [`RELEASE`] derived from the machine's sources: every `deb` source
/// (deb822 `.sources` stanzas and one-line `.list` entries) with a suite of the machine's release `codename`
/// (itself, `-updates`, `-security`) becomes one stanza with the same URIs, components and `Signed-By`, and its
/// suites renamed to [`RELEASE`]'s. So the image comes from the mirror and keyring the machine already uses, and
/// no mirror name is written anywhere. `files` are (name, text) pairs.
pub fn derive_sources(files: &[(String, String)], codename: &str) -> Result<String, RootfsError> {
    let mut sources = Vec::new();
    for (name, text) in files {
        if name.ends_with(".sources") {
            // Stanzas end at a line that is empty or only white space.
            let mut stanzas: Vec<Vec<&str>> = vec![Vec::new()];
            for line in text.lines() {
                match stanzas.last_mut() {
                    Some(s) if !line.trim().is_empty() => s.push(line),
                    _ => stanzas.push(Vec::new()),
                }
            }
            for stanza in stanzas {
                let mut fields = std::collections::BTreeMap::new();
                let mut last: Option<String> = None;
                for line in stanza {
                    if line.starts_with('#') {
                        continue;
                    }
                    if line.starts_with([' ', '\t']) {
                        if let Some(k) = &last {
                            let v: &mut String = fields.entry(k.clone()).or_default();
                            v.push('\n');
                            v.push_str(line);
                        }
                        continue;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        let k = k.trim().to_ascii_lowercase();
                        fields.insert(k.clone(), v.trim().to_string());
                        last = Some(k);
                    }
                }
                let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or_default();
                if !get("types").split_whitespace().any(|t| t == "deb")
                    || get("enabled").eq_ignore_ascii_case("no")
                {
                    continue;
                }
                sources.push(Source {
                    uris: get("uris").to_string(),
                    suites: get("suites").split_whitespace().map(String::from).collect(),
                    components: get("components").to_string(),
                    signed_by: fields.get("signed-by").cloned(),
                });
            }
        } else {
            for line in text.lines() {
                let line = line.split('#').next().unwrap_or_default().trim();
                let Some(rest) = line.strip_prefix("deb ") else {
                    continue;
                };
                let rest = rest.trim_start();
                let (options, rest) = match rest.strip_prefix('[') {
                    Some(r) => match r.split_once(']') {
                        Some((o, r)) => (o, r),
                        None => continue,
                    },
                    None => ("", rest),
                };
                let mut words = rest.split_whitespace();
                let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
                    continue;
                };
                let signed_by = options
                    .split_whitespace()
                    .find_map(|o| o.strip_prefix("signed-by="))
                    .map(String::from);
                sources.push(Source {
                    uris: uri.to_string(),
                    suites: vec![suite.to_string()],
                    components: words.collect::<Vec<_>>().join(" "),
                    signed_by,
                });
            }
        }
    }
    let mut out = String::new();
    for s in sources {
        let suites: Vec<String> = s
            .suites
            .iter()
            .filter_map(|x| release_suite(x, codename))
            .collect();
        if suites.is_empty() || s.uris.is_empty() || s.components.is_empty() {
            continue;
        }
        let stanza = format!(
            "Types: deb\nURIs: {}\nSuites: {}\nComponents: {}\n{}",
            s.uris,
            suites.join(" "),
            s.components,
            s.signed_by
                .map(|k| format!("Signed-By: {k}\n"))
                .unwrap_or_default()
        );
        if !out.contains(&stanza) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&stanza);
        }
    }
    if out.is_empty() {
        return Err(RootfsError::Resolve(format!(
            "no apt source of the machine's Debian release {codename:?} (its own suite, -updates or -security) \
             in {} to derive a {RELEASE} source from",
            MACHINE_SOURCES.join(", ")
        )));
    }
    Ok(out)
}

/// The machine's release codename (`VERSION_CODENAME` of `/etc/os-release`).
fn machine_codename() -> Result<String, RootfsError> {
    let p = Path::new("/etc/os-release");
    let text = std::fs::read_to_string(p).map_err(io_at(p))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            RootfsError::Resolve(
                "/etc/os-release names no VERSION_CODENAME (is this a Debian machine?)".into(),
            )
        })
}

/// The machine's apt source files ([`MACHINE_SOURCES`]), as (name, text), in name order.
fn machine_source_files() -> Result<Vec<(String, String)>, RootfsError> {
    let mut files = Vec::new();
    for p in MACHINE_SOURCES.iter().map(Path::new) {
        if p.is_file() {
            let text = std::fs::read_to_string(p).map_err(io_at(p))?;
            files.push((p.display().to_string(), text));
        } else if p.is_dir() {
            let mut names: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(io_at(p))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|e| e.extension().is_some_and(|x| x == "list" || x == "sources"))
                .collect();
            names.sort();
            for n in names {
                let text = std::fs::read_to_string(&n).map_err(io_at(&n))?;
                files.push((n.display().to_string(), text));
            }
        }
    }
    Ok(files)
}

/// A private apt state for [`RELEASE`] (`DIR/sources.list.d/toolchains.sources`, `DIR/state`, `DIR/cache`, an
/// empty dpkg status): the machine's own apt configuration, lists and preferences are neither read nor changed.
#[derive(Clone, Debug)]
pub struct AptRoot {
    dir: PathBuf,
}

impl AptRoot {
    /// Makes the state under `dir`, writes the derived source ([`derive_sources`]) and runs `apt-get update`.
    /// When the update fails (no network) and an earlier update left lists for the same source, those are
    /// used, and the failure is printed.
    pub fn prepare(dir: &Path) -> Result<AptRoot, RootfsError> {
        let root = AptRoot {
            dir: dir.to_path_buf(),
        };
        for d in [
            "sources.list.d",
            "preferences.d",
            "state/lists/partial",
            "cache/archives/partial",
        ] {
            let p = dir.join(d);
            std::fs::create_dir_all(&p).map_err(io_at(&p))?;
        }
        let sources = derive_sources(&machine_source_files()?, &machine_codename()?)?;
        let file = dir.join("sources.list.d/toolchains.sources");
        if std::fs::read_to_string(&file).ok().as_deref() != Some(sources.as_str()) {
            // Lists of another source would be stale.
            let lists = dir.join("state/lists");
            std::fs::remove_dir_all(&lists).map_err(io_at(&lists))?;
            std::fs::create_dir_all(lists.join("partial")).map_err(io_at(&lists))?;
            std::fs::write(&file, &sources).map_err(io_at(&file))?;
        }
        for f in ["sources.list", "state/status"] {
            let p = dir.join(f);
            std::fs::write(&p, b"").map_err(io_at(&p))?;
        }
        let out = root
            .apt("apt-get")
            .args(["-q", "update"])
            .output()
            .map_err(spawn(
                "apt-get update (the toolchain image's private apt state)",
            ))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if !root.has_lists() {
                return Err(RootfsError::Resolve(format!(
                    "apt-get update of the {RELEASE} source in {} failed: {why}",
                    dir.display()
                )));
            }
            eprintln!(
                "fenced-run: apt-get update of the {RELEASE} source failed ({why}); using the lists of an \
                 earlier update in {}",
                dir.display()
            );
        }
        Ok(root)
    }

    fn has_lists(&self) -> bool {
        std::fs::read_dir(self.dir.join("state/lists"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().ends_with("_Packages"))
            })
            .unwrap_or(false)
    }

    /// `tool` (`apt-get`) with the options that point it at this state only.
    fn apt(&self, tool: &str) -> Command {
        let d = &self.dir;
        let mut c = Command::new(tool);
        c.arg(format!("-oDir::State={}", d.join("state").display()))
            .arg(format!(
                "-oDir::State::status={}",
                d.join("state/status").display()
            ))
            .arg(format!("-oDir::Cache={}", d.join("cache").display()))
            .arg(format!(
                "-oDir::Etc::SourceList={}",
                d.join("sources.list").display()
            ))
            .arg(format!(
                "-oDir::Etc::SourceParts={}",
                d.join("sources.list.d").display()
            ))
            .arg(format!(
                "-oDir::Etc::Preferences={}",
                d.join("preferences").display()
            ))
            .arg(format!(
                "-oDir::Etc::PreferencesParts={}",
                d.join("preferences.d").display()
            ))
            .args(["-oDebug::NoLocking=1", "-oAPT::Default-Release="])
            .env("LC_ALL", "C");
        c
    }
}

/// Resolves `packages` and everything they depend on (no recommends) with apt in `apt`'s state, as if nothing
/// were installed: a simulated install against an empty dpkg status file. Returns the chosen versions, by name.
pub fn resolve(packages: &[&str], apt: &AptRoot) -> Result<Vec<Pin>, RootfsError> {
    let out = apt
        .apt("apt-get")
        .args(["-s", "-q"])
        .args([
            "-oAPT::Install-Recommends=false",
            "-oAPT::Install-Suggests=false",
            "install",
        ])
        .args(packages)
        .output()
        .map_err(spawn("apt-get (resolving the toolchain packages)"))?;
    if !out.status.success() {
        return Err(RootfsError::Resolve(format!(
            "apt-get could not resolve the toolchain packages {}: {}",
            packages.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let pins = parse_simulation(&String::from_utf8_lossy(&out.stdout))?;
    for p in packages {
        if !pins.iter().any(|pin| pin.name == *p) {
            return Err(RootfsError::Resolve(format!(
                "apt-get's plan does not install {p} (is it a virtual package or missing from apt's sources?)"
            )));
        }
    }
    Ok(pins)
}

/// The `Inst NAME (VERSION SUITE [ARCH])` lines of `apt-get -s install`, sorted by name.
pub fn parse_simulation(text: &str) -> Result<Vec<Pin>, RootfsError> {
    let mut pins = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("Inst ") else {
            continue;
        };
        let bad = || RootfsError::Resolve(format!("apt-get -s: cannot read the line {line:?}"));
        let (name, rest) = rest.split_once(' ').ok_or_else(bad)?;
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.split_once(')'))
            .map(|(i, _)| i)
            .ok_or_else(bad)?;
        let version = inner.split_whitespace().next().ok_or_else(bad)?;
        let architecture = inner
            .rsplit_once('[')
            .and_then(|(_, a)| a.strip_suffix(']'))
            .ok_or_else(bad)?;
        let name = name.split(':').next().unwrap_or(name);
        let ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.:~_".contains(&b))
        };
        if !ok(name) || !ok(version) || !ok(architecture) {
            return Err(bad());
        }
        pins.push(Pin {
            name: name.into(),
            version: version.into(),
            architecture: architecture.into(),
        });
    }
    if pins.is_empty() {
        return Err(RootfsError::Resolve(
            "apt-get -s planned to install nothing".into(),
        ));
    }
    pins.sort_by(|a, b| a.name.cmp(&b.name));
    pins.dedup_by(|a, b| a.name == b.name);
    Ok(pins)
}

/// Downloads every pinned package missing from `cache` with `apt-get download NAME=VERSION` (apt checks each
/// against its index's hash) and returns each with its SHA-256 and path.
pub fn download(
    pins: &[Pin],
    apt: &AptRoot,
    cache: &Path,
) -> Result<Vec<(DebPackage, PathBuf)>, RootfsError> {
    std::fs::create_dir_all(cache).map_err(io_at(cache))?;
    let missing: Vec<String> = pins
        .iter()
        .filter(|p| !cache.join(p.deb_file()).is_file())
        .map(|p| format!("{}={}", p.name, p.version))
        .collect();
    if !missing.is_empty() {
        let out = apt
            .apt("apt-get")
            .args(["download", "-q"])
            .args(&missing)
            .current_dir(cache)
            .output()
            .map_err(spawn("apt-get download"))?;
        if !out.status.success() {
            return Err(RootfsError::Download(format!(
                "apt-get download of {} package(s) into {} failed: {}",
                missing.len(),
                cache.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    let mut out = Vec::new();
    for p in pins {
        let path = cache.join(p.deb_file());
        let bytes = std::fs::read(&path).map_err(|source| RootfsError::NotDownloaded {
            path: path.clone(),
            source,
        })?;
        out.push((
            DebPackage {
                name: p.name.clone(),
                version: p.version.clone(),
                architecture: p.architecture.clone(),
                sha256: hex::encode(Sha256::digest(&bytes)),
            },
            path,
        ));
    }
    Ok(out)
}

/// Unpacks the `.deb` files into a new tree at `tree` (removed first) without maintainer scripts: the merged-/usr
/// links first, then each package's data in name order with `dpkg-deb --fsys-tarfile | tar -x`, then what the
/// maintainer scripts would have made that the toolchains need ([`fix_up`]).
pub fn unpack(debs: &[PathBuf], tree: &Path) -> Result<(), RootfsError> {
    if tree.exists() {
        std::fs::remove_dir_all(tree).map_err(io_at(tree))?;
    }
    for d in ["usr/bin", "usr/lib", "usr/lib64", "usr/sbin"] {
        std::fs::create_dir_all(tree.join(d)).map_err(io_at(tree))?;
    }
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("sbin", "usr/sbin"),
    ] {
        std::os::unix::fs::symlink(to, tree.join(link)).map_err(io_at(&tree.join(link)))?;
    }
    for deb in debs {
        let mut dpkg = Command::new("dpkg-deb")
            .arg("--fsys-tarfile")
            .arg(deb)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_on("dpkg-deb", deb))?;
        let Some(data) = dpkg.stdout.take() else {
            return Err(RootfsError::Unpack(format!(
                "dpkg-deb {}: no output pipe",
                deb.display()
            )));
        };
        let mut tar = Command::new("tar");
        tar.args(["-x", "--keep-directory-symlink", "--same-permissions", "-C"])
            .arg(tree);
        for e in EXCLUDED {
            tar.arg(format!("--exclude={e}"));
        }
        let tar_out = tar
            .stdin(Stdio::from(data))
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| RootfsError::Spawn {
                tool: format!("tar (unpacking {})", deb.display()),
                source,
            })?;
        let mut dpkg_err = String::new();
        if let Some(mut e) = dpkg.stderr.take() {
            let _ = e.read_to_string(&mut dpkg_err);
        }
        let dpkg_status = dpkg.wait().map_err(spawn_on("dpkg-deb", deb))?;
        if !dpkg_status.success() || !tar_out.status.success() {
            return Err(RootfsError::Unpack(format!(
                "unpacking {} failed: {} {}",
                deb.display(),
                dpkg_err.trim(),
                String::from_utf8_lossy(&tar_out.stderr).trim()
            )));
        }
    }
    fix_up(tree)
}

/// What maintainer scripts would have made and the toolchains need: the alternatives' links
/// ([`ALTERNATIVES`]), a minimal `/etc/passwd` and `/etc/group`, and the CA bundle `update-ca-certificates`
/// writes (every certificate under `/usr/share/ca-certificates`, in path order).
fn fix_up(tree: &Path) -> Result<(), RootfsError> {
    for (link, to) in ALTERNATIVES {
        let l = tree.join(link);
        let target = l.parent().map(|d| d.join(to)).unwrap_or_default();
        if target.exists() && std::fs::symlink_metadata(&l).is_err() {
            std::os::unix::fs::symlink(to, &l).map_err(io_at(&l))?;
        }
    }
    let etc = tree.join("etc");
    std::fs::create_dir_all(&etc).map_err(io_at(&etc))?;
    for (name, text) in [
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        ),
        ("group", "root:x:0:\nnogroup:x:65534:\n"),
    ] {
        let p = etc.join(name);
        std::fs::write(&p, text).map_err(io_at(&p))?;
    }
    let certs_dir = tree.join("usr/share/ca-certificates");
    if certs_dir.is_dir() {
        let mut certs = Vec::new();
        collect_files(&certs_dir, &mut certs)?;
        certs.retain(|p| p.extension().is_some_and(|e| e == "crt"));
        certs.sort();
        let mut bundle = Vec::new();
        for c in certs {
            let mut b = std::fs::read(&c).map_err(io_at(&c))?;
            if !b.ends_with(b"\n") {
                b.push(b'\n');
            }
            bundle.extend(b);
        }
        let ssl = etc.join("ssl/certs");
        std::fs::create_dir_all(&ssl).map_err(io_at(&ssl))?;
        let p = ssl.join("ca-certificates.crt");
        std::fs::write(&p, bundle).map_err(io_at(&p))?;
    }
    Ok(())
}

/// Writes [`VERSIONS_FILE`] into the tree: each toolchain set's version ([`toolchain_versions`]), sorted
/// JSON, so that its bytes follow from the packages alone.
fn write_versions(
    tree: &Path,
    toolchains: &[String],
    packages: &[DebPackage],
) -> Result<(), RootfsError> {
    let p = tree.join(VERSIONS_FILE);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(io_at(d))?;
    }
    let mut json = serde_json::to_vec_pretty(&toolchain_versions(toolchains, packages))
        .map_err(RootfsError::Record)?;
    json.push(b'\n');
    std::fs::write(&p, json).map_err(io_at(&p))
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), RootfsError> {
    for e in std::fs::read_dir(dir).map_err(io_at(dir))? {
        let e = e.map_err(io_at(dir))?;
        let t = e.file_type().map_err(io_at(&e.path()))?;
        if t.is_dir() {
            collect_files(&e.path(), out)?;
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

/// Makes the erofs image of `tree` at `image` (lz4hc; every time later than `epoch` clamped to it, every owner
/// root, the fixed UUID, no extended attributes), padded to whole [`BLOCK`]s. Returns its size in blocks.
pub fn make_erofs(tree: &Path, image: &Path, epoch: u64) -> Result<u64, RootfsError> {
    let _ = std::fs::remove_file(image);
    let out = Command::new("mkfs.erofs")
        .arg("-zlz4hc")
        .arg(format!("-T{epoch}"))
        .arg(format!("-U{FS_UUID}"))
        .args(["-x-1", "--all-root", "--quiet"])
        .arg(image)
        .arg(tree)
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .output()
        .map_err(spawn("mkfs.erofs (package erofs-utils)"))?;
    if !out.status.success() {
        return Err(RootfsError::Erofs(format!(
            "mkfs.erofs {}: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let len = std::fs::metadata(image).map_err(io_at(image))?.len();
    let blocks = len.div_ceil(BLOCK);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .map_err(io_at(image))?;
    f.set_len(blocks * BLOCK).map_err(io_at(image))?;
    Ok(blocks)
}

/// Appends the dm-verity hash tree (SHA-256, 4096-byte blocks, salt [`salt`], no superblock) of the first
/// `data_blocks` blocks of `image` to it with `veritysetup format`; returns the root hash (hex).
pub fn append_hash_tree(image: &Path, data_blocks: u64) -> Result<String, RootfsError> {
    let out = Command::new("veritysetup")
        .arg("format")
        .arg(image)
        .arg(image)
        .arg(format!("--hash-offset={}", data_blocks * BLOCK))
        .arg(format!("--data-blocks={data_blocks}"))
        .args([
            "--no-superblock",
            "--hash=sha256",
            "--data-block-size=4096",
            "--hash-block-size=4096",
        ])
        .arg(format!("--salt={}", salt()))
        .env("LC_ALL", "C")
        .output()
        .map_err(spawn("veritysetup (package cryptsetup-bin)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(RootfsError::Verity(format!(
            "veritysetup format {}: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let root = text
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .map(str::trim)
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            RootfsError::Verity(format!("veritysetup format printed no root hash: {text}"))
        })?;
    Ok(root.to_ascii_lowercase())
}

/// What to build the toolchain image from.
#[derive(Clone, Debug)]
pub struct RootfsOptions {
    /// The toolchain sets ([`parse_toolchains`]).
    pub toolchains: Vec<String>,
    /// Where downloaded `.deb` files are kept between builds.
    pub deb_cache: PathBuf,
    /// Every file's time in the image.
    pub source_date_epoch: u64,
}

/// The `SOURCE_DATE_EPOCH` of the environment, else [`DEFAULT_SOURCE_DATE_EPOCH`]. It must lie in the past:
/// `mkfs.erofs -T` clamps every time later than it (the directories and links the build itself makes, whose
/// times are the build's) and keeps earlier ones (the files' times from the `.deb`s), so a time in the future
/// would let the build's own clock into the image.
pub fn source_date_epoch() -> Result<u64, RootfsError> {
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse().map_err(|_| {
            RootfsError::SourceDateEpoch(format!(
                "SOURCE_DATE_EPOCH={:?} is not a number of seconds",
                attestation::text::escape(&v)
            ))
        })?,
        Err(_) => DEFAULT_SOURCE_DATE_EPOCH,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if epoch > now {
        return Err(RootfsError::SourceDateEpoch(format!(
            "SOURCE_DATE_EPOCH={epoch} is in the future: the toolchain image would take the build's own times"
        )));
    }
    Ok(epoch)
}

/// SHA-256 and SHA-384 of a file, read in pieces.
fn artifact_of(file: &str, path: &Path) -> Result<Artifact, RootfsError> {
    let mut f = std::fs::File::open(path).map_err(io_at(path))?;
    let (mut a, mut b) = (Sha256::new(), Sha384::new());
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io_at(path))?;
        if n == 0 {
            break;
        }
        a.update(&buf[..n]);
        b.update(&buf[..n]);
        size += n as u64;
    }
    Ok(Artifact {
        file: file.into(),
        size,
        sha256: hex::encode(a.finalize()),
        sha384: hex::encode(b.finalize()),
    })
}

/// Builds the toolchain image into `out` ([`IMAGE_FILE`], [`TREE_DIR`]). When `out` already holds an image
/// whose record (`toolchains.json`) names the same packages (by SHA-256) and epoch and whose file still has the
/// recorded SHA-256, it is kept as it is (the build is reproducible, so a rebuild would give the same bytes).
pub fn build(opts: &RootfsOptions, out: &Path) -> Result<ToolchainImage, RootfsError> {
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let apt = AptRoot::prepare(&opts.deb_cache.join(format!("apt-{RELEASE}")))?;
    let pins = resolve(&requested_packages(&opts.toolchains), &apt)?;
    let debs = download(&pins, &apt, &opts.deb_cache)?;
    let packages: Vec<DebPackage> = debs.iter().map(|(p, _)| p.clone()).collect();
    let record = out.join("toolchains.json");
    let image = out.join(IMAGE_FILE);
    let tree = out.join(TREE_DIR);
    if let Some(prev) = std::fs::read(&record)
        .ok()
        .and_then(|b| serde_json::from_slice::<ToolchainImage>(&b).ok())
    {
        if prev.packages == packages
            && prev.toolchains == opts.toolchains
            && prev.source_date_epoch == opts.source_date_epoch
            && tree.join(VERSIONS_FILE).is_file()
            && artifact_of(IMAGE_FILE, &image).is_ok_and(|a| a == prev.image)
        {
            return Ok(prev);
        }
    }
    let _ = std::fs::remove_file(&record);
    let paths: Vec<PathBuf> = debs.into_iter().map(|(_, p)| p).collect();
    unpack(&paths, &tree)?;
    write_versions(&tree, &opts.toolchains, &packages)?;
    let data_blocks = make_erofs(&tree, &image, opts.source_date_epoch)?;
    let root_hash = append_hash_tree(&image, data_blocks)?;
    let img = ToolchainImage {
        toolchains: opts.toolchains.clone(),
        image: artifact_of(IMAGE_FILE, &image)?,
        filesystem: "erofs".into(),
        data_blocks,
        root_hash,
        salt: salt(),
        source_date_epoch: opts.source_date_epoch,
        packages,
    };
    let json = serde_json::to_vec_pretty(&img).map_err(RootfsError::Record)?;
    std::fs::write(&record, json).map_err(io_at(&record))?;
    Ok(img)
}

/// The kernel command-line parameters that tell the guest agent about the image: the toolchain sets, and the
/// verity table's values (data blocks, root hash, salt). They are part of the measured command line.
pub fn cmdline_params(img: &ToolchainImage) -> String {
    format!(
        "{PARAM_TOOLCHAINS}={} {PARAM_VERITY}={},{},{}",
        img.toolchains.join(","),
        img.data_blocks,
        img.root_hash,
        img.salt
    )
}

/// Why the toolchain image could not be built (each variant names the step; the message is what it said).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootfsError {
    /// `SOURCE_DATE_EPOCH` is not a time in the past.
    #[error("{0}")]
    SourceDateEpoch(String),
    /// A file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A tool could not be started.
    #[error("{tool}: {source}")]
    Spawn {
        /// The tool, as the message names it.
        tool: String,
        /// The error.
        source: std::io::Error,
    },
    /// apt could not resolve the packages, or its plan could not be read.
    #[error("{0}")]
    Resolve(String),
    /// `apt-get download` failed.
    #[error("{0}")]
    Download(String),
    /// A downloaded package is not where `apt-get download` should have written it.
    #[error("{}: {source} (apt-get download did not write it)", path.display())]
    NotDownloaded {
        /// The `.deb` file expected.
        path: PathBuf,
        /// The error reading it.
        source: std::io::Error,
    },
    /// A package could not be unpacked into the tree.
    #[error("{0}")]
    Unpack(String),
    /// `mkfs.erofs` failed.
    #[error("{0}")]
    Erofs(String),
    /// `veritysetup format` failed or printed no root hash.
    #[error("{0}")]
    Verity(String),
    /// The image's record could not be written as JSON.
    #[error("toolchains.json: {0}")]
    Record(serde_json::Error),
}

/// The error for an I/O failure at `path`.
fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> RootfsError + '_ {
    move |source| RootfsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The error for `tool` that could not be started.
fn spawn(tool: &'static str) -> impl FnOnce(std::io::Error) -> RootfsError {
    move |source| RootfsError::Spawn {
        tool: tool.into(),
        source,
    }
}

/// The error for `tool` that could not be started on `file`.
fn spawn_on<'a>(
    tool: &'static str,
    file: &'a Path,
) -> impl FnOnce(std::io::Error) -> RootfsError + 'a {
    move |source| RootfsError::Spawn {
        tool: format!("{tool} {}", file.display()),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchain_lists_are_checked_sorted_and_deduplicated() {
        assert_eq!(
            parse_toolchains("rust, python,rust").expect("ok"),
            ["python", "rust"]
        );
        let e = parse_toolchains("rust,java").expect_err("java");
        assert!(e.contains("unknown toolchain \"java\""), "{e}");
        assert!(parse_toolchains("").is_err());
    }

    #[test]
    fn the_release_source_is_derived_from_the_machines_debian_sources() {
        let deb822 = "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                      Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\
                      Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n";
        let files = vec![
            ("/etc/apt/sources.list.d/debian.sources".to_string(), deb822.to_string()),
            (
                "/etc/apt/sources.list.d/bpo.sources".to_string(),
                "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm-backports\nComponents: main\n"
                    .to_string(),
            ),
            (
                "/etc/apt/sources.list.d/other.list".to_string(),
                "deb [arch=amd64 signed-by=/k.gpg] http://other.example/apt bookworm main contrib # x\n\
                 deb http://third.example/apt stable main\n# deb http://off.example/ bookworm main\n"
                    .to_string(),
            ),
        ];
        let text = derive_sources(&files, "bookworm").expect("derived");
        assert_eq!(
            text,
            "Types: deb\nURIs: http://mirror.example/debian\nSuites: trixie trixie-updates\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
             Types: deb\nURIs: http://mirror.example/debian-security\nSuites: trixie-security\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
             Types: deb\nURIs: http://other.example/apt\nSuites: trixie\nComponents: main contrib\n\
             Signed-By: /k.gpg\n"
        );
        // A machine of another release, or with only backports: nothing to derive from, and the error says so.
        let e = derive_sources(&files[1..2], "bookworm").expect_err("backports only");
        assert!(e.to_string().contains("\"bookworm\""), "{e}");
        assert!(derive_sources(&files, "bullseye").is_err());
    }

    #[test]
    fn toolchain_versions_come_from_the_pinned_packages() {
        assert_eq!(upstream_version("1.96.0+dfsg1-1~deb13u1+b1"), "1.96.0");
        assert_eq!(upstream_version("2:1.24~2"), "1.24");
        assert_eq!(upstream_version("20.19.2+dfsg-1+deb13u3"), "20.19.2");
        assert_eq!(upstream_version("3.13.5-1"), "3.13.5");
        let deb = |name: &str, version: &str| DebPackage {
            name: name.into(),
            version: version.into(),
            architecture: "amd64".into(),
            sha256: "0".repeat(64),
        };
        let pkgs = [
            deb("cargo-web", "1.96.0+dfsg1-1~deb13u1+b1"),
            deb("golang-1.24-go", "1.24.4-1"),
            deb("golang-1.24-src", "1.24.4-1"),
            deb("golang-go", "2:1.24~2"),
            deb("nodejs", "20.19.2+dfsg-1+deb13u3"),
            deb("python3", "3.13.5-1"),
            deb("python3-pytest", "8.3.5-2"),
            deb("rustc-web", "1.96.0+dfsg1-1~deb13u1+b1"),
        ];
        let all: Vec<String> = ["go", "node", "python", "rust"].map(String::from).into();
        let v = toolchain_versions(&all, &pkgs);
        assert_eq!(
            serde_json::to_string(&v).expect("json"),
            r#"{"go":"1.24.4","node":"20.19.2","python":"3.13.5","rust":"1.96.0"}"#
        );
        // Only the sets asked for; a set whose package is missing is left out rather than guessed.
        let v = toolchain_versions(&["rust".to_string()], &pkgs[2..4]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn apt_simulation_lines_become_pins() {
        let text = "Reading package lists...\nInst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []\n\
                    Inst git (1:2.39.5-0+deb12u2 Debian:12.15/oldstable [amd64])\nConf git (1:2.39.5)\n\
                    Inst ca-certificates (20230311+deb12u1 Debian:12.15/oldstable [all])\n";
        let pins = parse_simulation(text).expect("parse");
        assert_eq!(pins.len(), 3);
        assert_eq!(pins[1].name, "git");
        assert_eq!(pins[1].deb_file(), "git_1%3a2.39.5-0+deb12u2_amd64.deb");
        assert_eq!(pins[0].architecture, "all");
        assert!(parse_simulation("Inst x (1.0 [amd64").is_err());
        assert!(parse_simulation("Inst ../x (1.0 D [amd64])").is_err());
        assert!(parse_simulation("nothing").is_err());
    }
}
