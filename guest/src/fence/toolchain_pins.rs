//! The repository's toolchain pins, read as text before the install phase (nothing in the repository runs), and
//! whether the toolchain image's versions satisfy them (the verdict's `toolchain_pins`, docs/evidence-format.md):
//!
//! - `rust-toolchain.toml` / `rust-toolchain`: the channel. `stable` and a version no newer than the image's
//!   (`1.80`, `1.80.1`) are satisfied; `beta`, `nightly` and dated channels are not (the image has only a
//!   stable toolchain), nor is a version newer than the image's.
//! - `.nvmrc` / `.node-version` (a version or an npm range; `lts/*`, `node`, `system` are aliases nothing pins:
//!   unknown) and `package.json` `engines.node` (an npm range: `>=18`, `^20.1`, `18 || 20`, `16 - 20`).
//! - `.python-version` (a CPython version; `3.11` is any 3.11.x) and `pyproject.toml` `[project]
//!   requires-python` (PEP 440 specifiers: `>=3.9,<4`, `~=3.10`, `==3.12.*`, `!=3.12.1`).
//! - `go.mod` `go` (the least Go release the module needs).
//!
//! The image's versions come from [`VERSIONS_FILE`] in the image (written by `fenced-run image build` from the
//! pinned packages, covered by the image's root hash). Where the run used no toolchain image (the runner's own
//! system), `have` is `null` and the answer `unknown`: nothing is guessed. Only regular files at the
//! repository's root are read (a link is not followed), each bounded in size.

use attestation::verdict::{PinSatisfied, ToolchainPin};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// The image file that names each toolchain set's version (the same path as host::image::rootfs::VERSIONS_FILE).
pub const VERSIONS_FILE: &str = "usr/share/fenced-run/toolchains.json";
/// Largest file read for a pin (`package.json` and `pyproject.toml` can be large; the rest are one line).
pub const MAX_PIN_FILE: u64 = 1 << 20;
/// Largest `wants` recorded, in characters.
pub const MAX_WANTS: usize = 200;

/// The versions [`VERSIONS_FILE`] under the image root `root` names (`{"rust": "1.96.0", ...}`); empty when it
/// is missing or unreadable (an image built before the file existed): each pin is then `unknown`.
pub fn image_versions(root: &Path) -> BTreeMap<String, String> {
    match read_bounded(&root.join(VERSIONS_FILE), 64 * 1024) {
        Ok(Some(text)) => serde_json::from_str(&text).unwrap_or_default(),
        _ => BTreeMap::new(),
    }
}

/// Reads the pins at the root of `repo` and judges each against `image` (the image's versions by toolchain
/// set; `None` when the run used no toolchain image).
pub fn read_pins(repo: &Path, image: Option<&BTreeMap<String, String>>) -> Vec<ToolchainPin> {
    let mut out = Vec::new();
    for (file, toolchain) in [
        ("rust-toolchain.toml", "rust"),
        ("rust-toolchain", "rust"),
        (".python-version", "python"),
        ("pyproject.toml", "python"),
        (".nvmrc", "node"),
        (".node-version", "node"),
        ("package.json", "node"),
        ("go.mod", "go"),
    ] {
        let have = image.and_then(|m| m.get(toolchain)).cloned();
        let pin = |wants: &str, judged: Judged| {
            let (satisfied, reason) = match (&have, judged) {
                (_, Judged::Unreadable(why)) => (PinSatisfied::Unknown, why),
                (None, _) if image.is_none() => (
                    PinSatisfied::Unknown,
                    "the run used no toolchain image: the version of the runner's own system is not recorded"
                        .to_string(),
                ),
                (None, _) => (
                    PinSatisfied::Unknown,
                    format!("the toolchain image names no {toolchain} version"),
                ),
                (Some(h), Judged::By(check)) => match check(h) {
                    Ok(true) => (PinSatisfied::Yes, String::new()),
                    Ok(false) => (PinSatisfied::No, format!("the image has {toolchain} {h}")),
                    Err(why) => (PinSatisfied::Unknown, why),
                },
            };
            ToolchainPin {
                file: file.to_string(),
                toolchain: toolchain.to_string(),
                wants: shown(wants),
                have: have.clone(),
                satisfied,
                reason,
            }
        };
        let text = match read_bounded(&repo.join(file), MAX_PIN_FILE) {
            Ok(None) => continue,
            Ok(Some(t)) => t,
            Err(why) => {
                out.push(pin("", Judged::Unreadable(why)));
                continue;
            }
        };
        for (wants, judged) in pins_in(file, &text) {
            out.push(pin(&wants, judged));
        }
    }
    out
}

/// A check of the image's version: satisfied or not, or why it cannot say.
type Check = Box<dyn Fn(&str) -> Result<bool, String>>;

/// How a pin is judged: by a check of the image's version, or not at all (why).
enum Judged {
    By(Check),
    Unreadable(String),
}

/// The pins `text` (the file `file`) holds: what it wants and how to judge it. A file without a pin (a
/// `package.json` without `engines.node`) gives none.
fn pins_in(file: &str, text: &str) -> Vec<(String, Judged)> {
    let one = |wants: String, f: fn(&str, &str) -> Result<bool, String>| {
        let w = wants.clone();
        vec![(wants, Judged::By(Box::new(move |have| f(&w, have))))]
    };
    let unreadable = |why: String| vec![(String::new(), Judged::Unreadable(why))];
    match file {
        "rust-toolchain.toml" | "rust-toolchain" => {
            let channel = match toml::from_str::<toml::Table>(text) {
                Ok(t) => match t
                    .get("toolchain")
                    .and_then(|t| t.get("channel"))
                    .map(|c| c.as_str())
                {
                    Some(Some(c)) => c.trim().to_string(),
                    Some(None) => {
                        return unreadable(format!("{file}: toolchain.channel is not a string"))
                    }
                    None => return Vec::new(),
                },
                // The legacy `rust-toolchain` file may be the channel alone.
                Err(_) if file == "rust-toolchain" => first_line(text),
                Err(e) => {
                    return unreadable(format!("{file}: not TOML: {}", one_line(&e.to_string())))
                }
            };
            one(channel, rust_channel_satisfied)
        }
        ".python-version" => one(first_line(text), python_version_satisfied),
        "pyproject.toml" => match toml::from_str::<toml::Table>(text) {
            Ok(t) => match t.get("project").and_then(|p| p.get("requires-python")) {
                Some(toml::Value::String(s)) => one(s.trim().to_string(), pep440_satisfied),
                Some(_) => {
                    unreadable("pyproject.toml: project.requires-python is not a string".into())
                }
                None => Vec::new(),
            },
            Err(e) => unreadable(format!(
                "pyproject.toml: not TOML: {}",
                one_line(&e.to_string())
            )),
        },
        ".nvmrc" | ".node-version" => one(first_line(text), node_version_file_satisfied),
        "package.json" => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => match v.get("engines").and_then(|e| e.get("node")) {
                Some(serde_json::Value::String(s)) => {
                    one(s.trim().to_string(), npm_range_satisfied)
                }
                Some(_) => unreadable("package.json: engines.node is not a string".into()),
                None => Vec::new(),
            },
            Err(e) => unreadable(format!("package.json: not JSON: {e}")),
        },
        "go.mod" => {
            let directive = text.lines().find_map(|l| {
                let l = l.split("//").next().unwrap_or_default().trim();
                l.strip_prefix("go ").map(|v| v.trim().to_string())
            });
            match directive {
                Some(v) => one(v, go_satisfied),
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

/// `text` escaped and cut to [`MAX_WANTS`] characters.
fn shown(text: &str) -> String {
    let e = attestation::text::escape(text);
    if e.chars().count() > MAX_WANTS {
        let mut s: String = e.chars().take(MAX_WANTS).collect();
        s.push_str("...");
        s
    } else {
        e.to_string()
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first line that is neither empty nor a comment, trimmed (a trailing `# comment` removed).
fn first_line(text: &str) -> String {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string()
}

/// Reads the regular file `path` (never through a link) if it exists and is at most `max` bytes: `Ok(None)`
/// when there is no such file, `Err` (why) when it is there but cannot be read as a pin.
fn read_bounded(path: &Path, max: u64) -> Result<Option<String>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!("{name} is a link, which is not followed"))
        }
        Err(e) => return Err(format!("{name}: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("{name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{name}: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("{name} is larger than the {max} bytes read"));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| format!("{name} is not UTF-8"))
}

/// The numbers of a dotted version (`1.80.1` -> [1, 80, 1]); `None` unless every part is a number.
fn numbers(v: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = v.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|p| !p.is_empty() && p.len() <= 4)
}

/// Compares two dotted versions, missing parts counting as 0.
fn cmp_numbers(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .cmp(&b.get(i).copied().unwrap_or(0))
        })
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

fn have_numbers(have: &str) -> Result<Vec<u64>, String> {
    numbers(have).ok_or_else(|| format!("the image's version {have:?} is not a dotted number"))
}

/// A rustup channel: `stable`, or a version no newer than the image's; `beta`, `nightly` and their dated forms
/// are not satisfied by a stable toolchain.
fn rust_channel_satisfied(wants: &str, have: &str) -> Result<bool, String> {
    let have = have_numbers(have)?;
    // A host triple may follow the channel (`1.80.0-x86_64-unknown-linux-gnu`, `stable-x86_64-...`).
    let channel = wants
        .split_once('-')
        .filter(|(c, _)| *c == "stable" || numbers(c).is_some())
        .map_or(wants, |(c, _)| c);
    if channel == "stable" {
        return Ok(true);
    }
    if channel.starts_with("nightly") || channel.starts_with("beta") {
        return Ok(false);
    }
    match numbers(channel) {
        Some(w) if w.len() >= 2 => Ok(cmp_numbers(&w, &have).is_le()),
        _ => Err(format!(
            "the channel {:?} is neither stable, beta, nightly nor a version",
            shown(wants)
        )),
    }
}

/// `.python-version`: a CPython version, its given parts equal to the image's (`3.11` is any 3.11.x).
fn python_version_satisfied(wants: &str, have: &str) -> Result<bool, String> {
    let have = have_numbers(have)?;
    match numbers(wants) {
        Some(w) => Ok(w.iter().zip(&have).all(|(a, b)| a == b) && w.len() <= have.len()),
        None => Err(format!(
            "{:?} is not a CPython version (pyenv names such as pypy or system are not judged)",
            shown(wants)
        )),
    }
}

/// PEP 440 version specifiers (`>=3.9,<4`, `~=3.10`, `==3.12.*`, `!=3.12.1`), release numbers only.
fn pep440_satisfied(wants: &str, have: &str) -> Result<bool, String> {
    use std::cmp::Ordering::*;
    let h = have_numbers(have)?;
    let bad = |c: &str| format!("{:?} is not a PEP 440 specifier this reads", shown(c));
    for clause in wants.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (op, v) = ["===", "~=", "==", "!=", "<=", ">=", "<", ">"]
            .iter()
            .find_map(|op| clause.strip_prefix(op).map(|v| (*op, v.trim())))
            .ok_or_else(|| bad(clause))?;
        if op == "===" {
            if v != have {
                return Ok(false);
            }
            continue;
        }
        let (v, wildcard) = match v.strip_suffix(".*") {
            Some(p) if matches!(op, "==" | "!=") => (p, true),
            _ => (v, false),
        };
        let w = numbers(v).ok_or_else(|| bad(clause))?;
        let prefix = w.iter().zip(&h).all(|(a, b)| a == b) && w.len() <= h.len();
        let o = cmp_numbers(&h, &w);
        let ok = match op {
            "==" if wildcard => prefix,
            "!=" if wildcard => !prefix,
            "==" => o == Equal,
            "!=" => o != Equal,
            "<=" => o != Greater,
            ">=" => o != Less,
            "<" => o == Less,
            ">" => o == Greater,
            // `~=V.N`: at least V.N, and the same V.
            _ => {
                if w.len() < 2 {
                    return Err(bad(clause));
                }
                o != Less && w[..w.len() - 1].iter().zip(&h).all(|(a, b)| a == b)
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `.nvmrc` / `.node-version`: a version (`20`, `v20.11.1`) or an npm range; aliases (`lts/*`, `node`,
/// `stable`, `system`) name no version and are not judged.
fn node_version_file_satisfied(wants: &str, have: &str) -> Result<bool, String> {
    let w = wants.trim();
    if w.starts_with("lts")
        || ["node", "stable", "latest", "current", "system", "iojs"].contains(&w)
    {
        return Err(format!(
            "{:?} is an alias, not a version: which release it means depends on the day",
            shown(w)
        ));
    }
    npm_range_satisfied(w, have)
}

/// An npm semver range (`>=18`, `^20.1.0`, `20.x`, `>= 18 < 21`, `16 - 20`, `18 || >=20`): its comparator
/// sets are read with the `semver` crate (npm's bare version is exact, Cargo's is a caret: an `=` is added).
fn npm_range_satisfied(wants: &str, have: &str) -> Result<bool, String> {
    let hn = have_numbers(have)?;
    let hv = semver::Version::new(
        hn.first().copied().unwrap_or(0),
        hn.get(1).copied().unwrap_or(0),
        hn.get(2).copied().unwrap_or(0),
    );
    let bad = |why: &str| format!("{:?} is not an npm range this reads: {why}", shown(wants));
    for alt in wants.split("||").map(str::trim) {
        let mut comparators = Vec::new();
        if let Some((lo, hi)) = alt.split_once(" - ") {
            comparators.push(format!(">={}", lo.trim().trim_start_matches('v')));
            comparators.push(format!("<={}", hi.trim().trim_start_matches('v')));
        } else {
            let mut op = String::new();
            for tok in alt.split_whitespace() {
                if tok.chars().all(|c| "<>=~^".contains(c)) {
                    op.push_str(tok);
                    continue;
                }
                let split = tok.find(|c: char| !"<>=~^".contains(c)).unwrap_or(0);
                let (o, v) = tok.split_at(split);
                op.push_str(o);
                let v = v.trim_start_matches(['v', 'V']);
                if matches!(v, "*" | "x" | "X") {
                    comparators.push("*".to_string());
                } else if op.is_empty() {
                    comparators.push(format!("={v}"));
                } else {
                    comparators.push(format!("{op}{v}"));
                }
                op.clear();
            }
            if !op.is_empty() {
                return Err(bad("an operator without a version"));
            }
        }
        if comparators.is_empty() {
            // An empty range is any version.
            return Ok(true);
        }
        let req =
            semver::VersionReq::parse(&comparators.join(", ")).map_err(|e| bad(&e.to_string()))?;
        if req.matches(&hv) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `go.mod`'s `go` line: the least release the module needs, no newer than the image's.
fn go_satisfied(wants: &str, have: &str) -> Result<bool, String> {
    let have = have_numbers(have)?;
    match numbers(wants) {
        Some(w) => Ok(cmp_numbers(&w, &have).is_le()),
        None => Err(format!("go {:?} is not a release number", shown(wants))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> BTreeMap<String, String> {
        [
            ("go", "1.24.4"),
            ("node", "20.19.2"),
            ("python", "3.13.5"),
            ("rust", "1.96.0"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
    }

    #[test]
    fn rust_channels() {
        for (w, ok) in [
            ("stable", true),
            ("1.80", true),
            ("1.96", true),
            ("1.96.0", true),
            ("1.80.1-x86_64-unknown-linux-gnu", true),
            ("1.96.1", false),
            ("1.97", false),
            ("nightly", false),
            ("nightly-2024-05-01", false),
            ("beta", false),
        ] {
            assert_eq!(rust_channel_satisfied(w, "1.96.0"), Ok(ok), "{w}");
        }
        assert!(rust_channel_satisfied("my-toolchain", "1.96.0").is_err());
    }

    #[test]
    fn node_ranges_and_version_files() {
        for (w, ok) in [
            ("20", true),
            ("v20.19.2", true),
            ("20.19.1", false),
            ("22", false),
            (">=18", true),
            (">= 18 < 21", true),
            (">=18.0.0 <20", false),
            ("^20.1", true),
            ("^18 || ^20", true),
            ("^18 || ^22", false),
            ("20.x", true),
            ("16 - 20", true),
            ("21 - 22", false),
            ("~20.19.0", true),
            ("*", true),
            ("", true),
        ] {
            assert_eq!(npm_range_satisfied(w, "20.19.2"), Ok(ok), "{w}");
        }
        assert!(npm_range_satisfied(">=", "20.19.2").is_err());
        assert!(npm_range_satisfied("banana", "20.19.2").is_err());
        assert!(node_version_file_satisfied("lts/*", "20.19.2").is_err());
        assert!(node_version_file_satisfied("node", "20.19.2").is_err());
        assert_eq!(node_version_file_satisfied("v20", "20.19.2"), Ok(true));
    }

    #[test]
    fn python_versions_and_specifiers() {
        for (w, ok) in [
            ("3.13", true),
            ("3.13.5", true),
            ("3", true),
            ("3.11", false),
            ("3.13.4", false),
        ] {
            assert_eq!(python_version_satisfied(w, "3.13.5"), Ok(ok), "{w}");
        }
        assert!(python_version_satisfied("pypy3.10-7.3.12", "3.13.5").is_err());
        for (w, ok) in [
            (">=3.9", true),
            (">=3.9,<4", true),
            (">=3.9, <3.13", false),
            ("~=3.10", true),
            ("~=3.10.2", false),
            ("==3.13.*", true),
            ("==3.12.*", false),
            ("!=3.13.5", false),
            ("!=3.13.*,>=3.8", false),
            ("<=3.13", false),
            (">3.13", true),
            ("===3.13.5", true),
        ] {
            assert_eq!(pep440_satisfied(w, "3.13.5"), Ok(ok), "{w}");
        }
        assert!(pep440_satisfied(">=3.9b1", "3.13.5").is_err());
        assert!(pep440_satisfied("3.9", "3.13.5").is_err());
    }

    fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tmp");
        for (n, t) in files {
            std::fs::write(d.path().join(n), t).expect("write");
        }
        d
    }

    #[test]
    fn pins_at_the_repository_root_are_read_and_judged() {
        let d = repo(&[
            (
                "rust-toolchain.toml",
                "[toolchain]\nchannel = \"1.80\"\ncomponents = [\"clippy\"]\n",
            ),
            ("rust-toolchain", "nightly-2024-01-01\n"),
            (".python-version", "3.11\n"),
            (
                "pyproject.toml",
                "[project]\nname = \"x\"\nrequires-python = \">=3.9\"\n",
            ),
            (".nvmrc", "lts/iron\n"),
            (
                "package.json",
                r#"{"name": "x", "engines": {"node": ">=20"}}"#,
            ),
            ("go.mod", "module x\n\ngo 1.22.0 // comment\n"),
        ]);
        let img = image();
        let pins = read_pins(d.path(), Some(&img));
        let got: Vec<(&str, &str, PinSatisfied)> = pins
            .iter()
            .map(|p| (p.file.as_str(), p.wants.as_str(), p.satisfied))
            .collect();
        use PinSatisfied::*;
        assert_eq!(
            got,
            [
                ("rust-toolchain.toml", "1.80", Yes),
                ("rust-toolchain", "nightly-2024-01-01", No),
                (".python-version", "3.11", No),
                ("pyproject.toml", ">=3.9", Yes),
                (".nvmrc", "lts/iron", Unknown),
                ("package.json", ">=20", Yes),
                ("go.mod", "1.22.0", Yes),
            ]
        );
        assert_eq!(pins[0].have.as_deref(), Some("1.96.0"));
        assert!(
            pins[2].reason.contains("the image has python 3.13.5"),
            "{:?}",
            pins[2]
        );
        // No toolchain image: the same pins, each unknown with have null.
        for p in read_pins(d.path(), None) {
            assert_eq!(p.satisfied, Unknown, "{p:?}");
            assert!(
                p.have.is_none() && p.reason.contains("no toolchain image"),
                "{p:?}"
            );
        }
        // An image without the versions file, or without the toolchain: unknown, saying which.
        let py = BTreeMap::from([("python".to_string(), "3.13.5".to_string())]);
        let pins = read_pins(d.path(), Some(&py));
        assert_eq!(pins[0].satisfied, Unknown);
        assert!(
            pins[0].reason.contains("names no rust version"),
            "{:?}",
            pins[0]
        );
    }

    #[test]
    fn files_without_pins_give_none_and_bad_files_are_unknown() {
        let d = repo(&[
            ("package.json", r#"{"name": "x"}"#),
            ("pyproject.toml", "[project]\nname = \"x\"\n"),
            ("go.mod", "module x\n"),
            (
                "rust-toolchain.toml",
                "[toolchain]\nprofile = \"minimal\"\n",
            ),
        ]);
        assert!(read_pins(d.path(), Some(&image())).is_empty());
        let d = repo(&[("package.json", "{not json"), (".python-version", "3.13")]);
        std::os::unix::fs::symlink("/etc/hostname", d.path().join(".nvmrc")).expect("link");
        let pins = read_pins(d.path(), Some(&image()));
        let by = |f: &str| pins.iter().find(|p| p.file == f).expect(f);
        assert_eq!(by(".python-version").satisfied, PinSatisfied::Yes);
        assert_eq!(by(".nvmrc").satisfied, PinSatisfied::Unknown);
        assert!(by(".nvmrc").reason.contains("link"), "{pins:?}");
        assert!(by("package.json").reason.contains("not JSON"), "{pins:?}");
        // Too large: not read.
        let d = repo(&[]);
        std::fs::write(
            d.path().join("go.mod"),
            vec![b'a'; MAX_PIN_FILE as usize + 1],
        )
        .expect("w");
        let pins = read_pins(d.path(), Some(&image()));
        assert!(pins[0].reason.contains("larger than"), "{pins:?}");
        // What a file wants is escaped and bounded.
        let d = repo(&[(".nvmrc", &format!("\u{1b}[31m{}", "9".repeat(500)))]);
        let pins = read_pins(d.path(), Some(&image()));
        assert!(pins[0].wants.chars().count() <= MAX_WANTS + 3, "{pins:?}");
        assert!(!pins[0].wants.contains('\u{1b}'), "{pins:?}");
    }

    #[test]
    fn image_versions_are_read_from_the_image_file() {
        let d = tempfile::tempdir().expect("tmp");
        assert!(image_versions(d.path()).is_empty());
        let p = d.path().join(VERSIONS_FILE);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, r#"{"node": "20.19.2", "rust": "1.96.0"}"#).expect("write");
        assert_eq!(
            image_versions(d.path()).get("rust").map(String::as_str),
            Some("1.96.0")
        );
    }
}
