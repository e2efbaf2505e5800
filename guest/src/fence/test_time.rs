//! Files that run at test time: which files a patch adds or changes that the test command (or the install
//! phase before it) executes or loads as code or configuration without being a test, so that the verdict can
//! point a reviewer at them (findings of kind `runs-at-test-time`). A patch may rewrite what runs around the
//! tests (a cargo `build.rs`, a root `conftest.py`, an npm `pretest` script); no sandbox can tell that from a
//! legitimate change, so the verdict names it.
//!
//! [`classify`] is a pure function from a path (and the file's content, when there is one) to the reason;
//! [`patch_paths`] reads the paths a unified diff adds or changes from its headers; [`findings`] joins the two
//! over a prepared repository. docs/fence.md ("Files that run at test time") lists every entry and why.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::Path;

/// The finding kind.
pub const KIND: &str = "runs-at-test-time";

/// The most bytes of one file read to classify it (a larger file is classified by its name only).
pub const MAX_CONTENT_BYTES: u64 = 1024 * 1024;

/// The npm scripts `npm test` (`npm run test`) or `npm install`/`npm ci` run: the test script and its pre/post
/// scripts, and the lifecycle scripts of installing the package itself.
pub const NPM_SCRIPTS: &[&str] = &[
    "pretest",
    "test",
    "posttest",
    "preinstall",
    "install",
    "postinstall",
    "prepare",
    "preprepare",
    "postprepare",
    "prepublish",
    "dependencies",
];

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn text(content: Option<&[u8]>) -> Option<&str> {
    content.and_then(|c| std::str::from_utf8(c).ok())
}

/// Whether the shell command `command` calls `make` (a word `make`, `gmake` or a path ending in `/make`).
fn calls_make(command: &str) -> bool {
    command
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '`'))
        .any(|w| w == "make" || w == "gmake" || w.ends_with("/make"))
}

/// The sections of an INI-like file (`[name]` lines) with the keys set in each, lower-cased.
fn ini_sections(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('#') || l.starts_with(';') || l.is_empty() {
            continue;
        }
        if let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            out.push((name.trim().to_ascii_lowercase(), Vec::new()));
        } else if let (Some((key, _)), Some(last)) = (l.split_once(['=', ':']), out.last_mut()) {
            // Continuation lines (indented in the file) carry no key of their own.
            if !line.starts_with([' ', '\t']) {
                last.1.push(key.trim().to_ascii_lowercase());
            }
        }
    }
    out
}

fn toml_table(content: Option<&[u8]>) -> Option<toml::Table> {
    text(content).and_then(|t| t.parse::<toml::Table>().ok())
}

fn toml_get<'a>(table: &'a toml::Table, keys: &[&str]) -> Option<&'a toml::Value> {
    let (first, rest) = keys.split_first()?;
    let mut v = table.get(*first)?;
    for k in rest {
        v = v.as_table()?.get(*k)?;
    }
    Some(v)
}

/// What a `Cargo.toml` makes cargo run: a build script named by `[package] build`, or a proc-macro crate.
fn cargo_manifest(content: Option<&[u8]>) -> Option<String> {
    let t = toml_table(content)?;
    let mut why = Vec::new();
    match toml_get(&t, &["package", "build"]) {
        Some(toml::Value::String(s)) => why.push(format!(
            "its [package] build = {s:?} names a build script cargo compiles and runs before any test"
        )),
        Some(toml::Value::Boolean(true)) => {
            why.push("its [package] build = true makes cargo run build.rs before any test".into())
        }
        _ => {}
    }
    let proc_macro = ["proc-macro", "proc_macro"]
        .iter()
        .any(|k| toml_get(&t, &["lib", k]).and_then(toml::Value::as_bool) == Some(true));
    if proc_macro {
        why.push(
            "[lib] proc-macro = true: rustc loads and runs this crate while compiling every crate that uses it"
                .into(),
        );
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// What a `pyproject.toml` makes the Python tools run.
fn pyproject(content: Option<&[u8]>) -> Option<String> {
    let t = toml_table(content)?;
    let mut why = Vec::new();
    if t.contains_key("build-system") {
        why.push(
            "[build-system]: pip runs its build backend (from backend-path inside the repository, or a package \
             it names) when the project is installed",
        );
    }
    if toml_get(&t, &["tool", "setuptools", "cmdclass"]).is_some() {
        why.push("[tool.setuptools] cmdclass: setuptools runs these commands of the repository");
    }
    let hatch_hooks = toml_get(&t, &["tool", "hatch", "build", "hooks"]).is_some()
        || toml_get(&t, &["tool", "hatch", "build", "targets"])
            .and_then(toml::Value::as_table)
            .is_some_and(|targets| {
                targets
                    .values()
                    .any(|v| v.as_table().is_some_and(|t| t.contains_key("hooks")))
            })
        || toml_get(&t, &["tool", "hatch", "metadata", "hooks"]).is_some();
    if hatch_hooks {
        why.push("hatch build or metadata hooks: hatchling runs them when the project is built");
    }
    if toml_get(&t, &["tool", "pytest", "ini_options"]).is_some() {
        why.push(
            "[tool.pytest.ini_options]: pytest's configuration (addopts with -p loads a plugin module, \
             pythonpath, testpaths choose what runs)",
        );
    }
    if toml_get(&t, &["project", "entry-points", "pytest11"]).is_some() {
        why.push("[project.entry-points.pytest11]: pytest loads this plugin on its own once the package is installed");
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// What a `package.json` makes npm run (its test and lifecycle scripts) or the test runner load.
fn package_json(content: Option<&[u8]>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(content?).ok()?;
    let scripts: Vec<&str> = match v.get("scripts").and_then(|s| s.as_object()) {
        Some(s) => NPM_SCRIPTS
            .iter()
            .copied()
            .filter(|n| s.get(*n).and_then(|c| c.as_str()).is_some())
            .collect(),
        None => Vec::new(),
    };
    let runners: Vec<&str> = ["jest", "mocha", "ava", "vitest"]
        .into_iter()
        .filter(|k| v.get(*k).is_some())
        .collect();
    let mut why = Vec::new();
    if !scripts.is_empty() {
        why.push(format!(
            "npm runs its scripts {} around `npm test` or when installing",
            scripts.join(", ")
        ));
    }
    if !runners.is_empty() {
        why.push(format!(
            "the test runner reads its \"{}\" configuration (setup files it loads)",
            runners.join("\", \"")
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Why the file at `path` (relative to the repository, `/`-separated) runs at test time, from its name and
/// `content` (`None`: not a regular file, unreadable or too large to read); `test_command` is the test
/// phase's command (a Makefile counts only when it calls make). `None`: nothing of it runs around the tests
/// (as far as this list knows; a test file itself is not flagged).
pub fn classify(path: &str, content: Option<&[u8]>, test_command: &str) -> Option<String> {
    let name = file_name(path);
    let in_dir = |dir: &str| {
        path.strip_suffix(name)
            .is_some_and(|d| d == format!("{dir}/") || d.ends_with(&format!("/{dir}/")))
    };
    let reason: String = match name {
        "build.rs" => "cargo compiles and runs it before any test (a package's build script)".into(),
        "Cargo.toml" => cargo_manifest(content)?,
        "config" | "config.toml" if in_dir(".cargo") => {
            "cargo reads it from the working directory and its parents: rustc-wrapper, rustflags, [target] \
             runner and [alias] name programs cargo runs"
                .into()
        }
        "rust-toolchain" | "rust-toolchain.toml" => {
            "rustup picks the toolchain (or a toolchain path inside the repository) that runs cargo and rustc"
                .into()
        }
        "conftest.py" => {
            "pytest imports every conftest.py of the root directory and the test paths before collecting tests"
                .into()
        }
        "setup.py" => {
            "setuptools runs it when the project is installed (pip install .) and for `setup.py test`".into()
        }
        "pyproject.toml" => pyproject(content)?,
        "setup.cfg" => {
            let sections = ini_sections(text(content)?);
            let mut why = Vec::new();
            if sections.iter().any(|(s, _)| s == "tool:pytest") {
                why.push("[tool:pytest]: pytest's configuration (addopts with -p loads a plugin module)");
            }
            if sections
                .iter()
                .any(|(s, keys)| s == "options.entry_points" && keys.iter().any(|k| k == "pytest11"))
            {
                why.push("pytest11 entry point: pytest loads this plugin on its own once the package is installed");
            }
            if sections
                .iter()
                .any(|(s, keys)| s == "options" && keys.iter().any(|k| k == "cmdclass" || k == "setup_requires"))
            {
                why.push("[options] cmdclass/setup_requires: setuptools runs them when the project is installed");
            }
            if why.is_empty() {
                return None;
            }
            why.join("; ")
        }
        "pytest.ini" | ".pytest.ini" => {
            "pytest's configuration: addopts (-p loads a plugin module), pythonpath and testpaths choose what runs"
                .into()
        }
        "tox.ini" => {
            let sections = ini_sections(text(content)?);
            let mut why = Vec::new();
            if sections.iter().any(|(s, _)| s == "pytest") {
                why.push("[pytest]: pytest's configuration (addopts with -p loads a plugin module)");
            }
            if sections
                .iter()
                .any(|(s, _)| s == "tox" || s == "testenv" || s.starts_with("testenv:"))
            {
                why.push("tox runs the commands of its [testenv] sections");
            }
            if why.is_empty() {
                return None;
            }
            why.join("; ")
        }
        "noxfile.py" => "nox imports it and runs its sessions".into(),
        "package.json" => package_json(content)?,
        ".npmrc" => {
            "npm's configuration: node-options (--require preloads a module), script-shell and the like choose \
             what npm runs"
                .into()
        }
        ".yarnrc.yml" | ".yarnrc" => "yarn's configuration (yarnPath runs a script of the repository as yarn)".into(),
        ".pnpmfile.cjs" | "pnpmfile.js" => "pnpm runs its hooks when it installs".into(),
        n if n.starts_with(".mocharc") => "mocha's configuration (require loads modules before the tests)".into(),
        n if n.starts_with("jest.config.")
            || n.starts_with("vitest.config.")
            || n.starts_with("vite.config.")
            || n.starts_with("babel.config.")
            || n == ".babelrc.js" =>
        {
            "the test runner loads it as code before the tests (setup files, transforms, global setup)".into()
        }
        "Makefile" | "makefile" | "GNUmakefile" if calls_make(test_command) => {
            "the test command calls make, which runs this file's recipes".into()
        }
        n if n.ends_with(".mk") && calls_make(test_command) => {
            "the test command calls make, and a Makefile may include this file".into()
        }
        "go.mod" | "go.work" => {
            let t = text(content)?;
            if !t.lines().any(|l| l.trim_start().starts_with("toolchain")) {
                return None;
            }
            "its toolchain line: with GOTOOLCHAIN=auto (the default) the go command runs the toolchain it names \
             instead of the installed one"
                .into()
        }
        "Rakefile" | "rakefile" | "Rakefile.rb" => "rake runs it (rake test)".into(),
        "build.gradle" | "build.gradle.kts" | "settings.gradle" | "settings.gradle.kts" => {
            "gradle runs it as a build script before the test task".into()
        }
        "gradle-wrapper.properties" => {
            "gradlew downloads and runs the gradle distribution it names".into()
        }
        "gradlew" => "the gradle wrapper script: the test command runs it".into(),
        "pom.xml" => "maven runs the plugins it binds to the phases before test".into(),
        _ => return None,
    };
    Some(reason)
}

/// Reads a C-style quoted name (`"a\tb"`) at the start of `s`: the bytes and what follows the closing quote.
fn unquote(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return Some((out, &s[i + 1..])),
            b'\\' => {
                let c = *s.get(i + 1)?;
                i += 2;
                match c {
                    b'0'..=b'7' => {
                        let digits = s[i - 1..]
                            .iter()
                            .take(3)
                            .take_while(|d| (b'0'..=b'7').contains(d));
                        let n = digits.clone().count();
                        let v = digits.fold(0u32, |a, d| a * 8 + u32::from(d - b'0'));
                        out.push(u8::try_from(v).ok()?);
                        i += n - 1;
                    }
                    b'a' => out.push(7),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'v' => out.push(11),
                    other => out.push(other),
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    None
}

/// `name` without its first component (`git apply -p1`); `None` when it has none to strip.
fn strip_one(name: &[u8]) -> Option<String> {
    let pos = name.iter().position(|&b| b == b'/')?;
    let rest = &name[pos + 1..];
    (!rest.is_empty()).then(|| String::from_utf8_lossy(rest).into_owned())
}

/// The name of a `--- `/`+++ ` line or of `rename to`/`copy to` (quoted, or up to a tab); `raw` keeps the
/// leading component (`a/`, `b/`) for the caller to strip.
fn header_name(s: &[u8]) -> Option<Vec<u8>> {
    if s.first() == Some(&b'"') {
        return unquote(s).map(|(n, _)| n);
    }
    let end = s.iter().position(|&b| b == b'\t').unwrap_or(s.len());
    let n = s[..end].trim_ascii_end();
    (!n.is_empty()).then(|| n.to_vec())
}

/// The new name of a `diff --git A B` line: quoted names, or two unquoted names equal after their first
/// component (a rename without content change is read from `rename to` instead).
fn git_line_name(rest: &[u8]) -> Option<String> {
    if rest.first() == Some(&b'"') {
        let (_, after) = unquote(rest)?;
        let b = after.trim_ascii_start();
        return strip_one(&header_name(b)?);
    }
    if let Some(q) = rest.windows(2).position(|w| w == b" \"") {
        return strip_one(&unquote(&rest[q + 1..])?.0);
    }
    // "a/NAME b/NAME": the split is in the middle.
    let mid = rest.len() / 2;
    if rest.len() % 2 == 1 && rest.get(mid) == Some(&b' ') {
        let (a, b) = (strip_one(&rest[..mid])?, strip_one(&rest[mid + 1..])?);
        return (a == b).then_some(b);
    }
    None
}

/// Skips the body of the hunk whose `@@` line is `line` starting at `lines[i]`; returns the next index.
fn skip_hunk(line: &[u8], lines: &[&[u8]], mut i: usize) -> usize {
    let text = String::from_utf8_lossy(line);
    let mut parts = text.split_whitespace().skip(1);
    let count = |p: Option<&str>, sign: char| -> u64 {
        p.and_then(|p| p.strip_prefix(sign))
            .map(|r| match r.split_once(',') {
                Some((_, n)) => n.parse().unwrap_or(0),
                None => 1,
            })
            .unwrap_or(0)
    };
    let (mut old, mut new) = (count(parts.next(), '-'), count(parts.next(), '+'));
    while (old > 0 || new > 0) && i < lines.len() {
        match lines[i].first() {
            None | Some(b' ') => {
                old = old.saturating_sub(1);
                new = new.saturating_sub(1);
            }
            Some(b'-') => old = old.saturating_sub(1),
            Some(b'+') => new = new.saturating_sub(1),
            Some(b'\\') => {}
            _ => break,
        }
        i += 1;
    }
    i
}

/// The paths (relative to the repository, `/`-separated, first component stripped as `git apply` does) that
/// the unified diff `patch` adds, changes or renames to; deleted files are left out. Read from the headers
/// (`diff --git`, `rename to`, `copy to`, `--- `/`+++ `), hunk bodies skipped by their line counts, so a
/// removed line that starts with `--` is never taken for a header. Sorted, each once.
pub fn patch_paths(patch: &[u8]) -> Vec<String> {
    let lines: Vec<&[u8]> = patch
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix(b"diff --git ") {
            let mut name = git_line_name(rest);
            let mut deleted = false;
            i += 1;
            while let Some(l) = lines.get(i) {
                if let Some(to) = l
                    .strip_prefix(b"rename to ")
                    .or_else(|| l.strip_prefix(b"copy to "))
                {
                    name = header_name(to).map(|n| String::from_utf8_lossy(&n).into_owned());
                } else if l.starts_with(b"deleted file mode") {
                    deleted = true;
                } else if l.starts_with(b"diff --git ")
                    || l.starts_with(b"--- ")
                    || l.starts_with(b"@@ ")
                {
                    break;
                }
                i += 1;
            }
            let plus = lines
                .get(i)
                .filter(|l| l.starts_with(b"--- "))
                .and(lines.get(i + 1))
                .and_then(|l| l.strip_prefix(b"+++ "));
            if let Some(p) = plus {
                match header_name(p) {
                    Some(n) if n == b"/dev/null" => deleted = true,
                    Some(n) => name = strip_one(&n).or(name),
                    None => {}
                }
                i += 2;
            }
            if let (Some(n), false) = (name, deleted) {
                out.insert(n);
            }
            continue;
        }
        if line.starts_with(b"--- ") {
            if let Some(p) = lines.get(i + 1).and_then(|l| l.strip_prefix(b"+++ ")) {
                if let Some(n) = header_name(p).filter(|n| n != b"/dev/null") {
                    if let Some(n) = strip_one(&n) {
                        out.insert(n);
                    }
                }
                i += 2;
                continue;
            }
        }
        if line.starts_with(b"@@ ") {
            i = skip_hunk(line, &lines, i + 1);
            continue;
        }
        i += 1;
    }
    out.into_iter().collect()
}

/// The content of the regular file `rel` under `repo`, when no component of the way is a symbolic link and
/// it is at most [`MAX_CONTENT_BYTES`] long (the runner never follows a link the patch may have made).
fn read_plain(repo: &Path, rel: &str) -> Option<Vec<u8>> {
    let mut p = repo.to_path_buf();
    for part in rel.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return None;
        }
        p.push(part);
        let m = fs::symlink_metadata(&p).ok()?;
        if m.file_type().is_symlink() {
            return None;
        }
    }
    let m = fs::symlink_metadata(&p).ok()?;
    if !m.is_file() || m.len() > MAX_CONTENT_BYTES {
        return None;
    }
    let mut buf = Vec::new();
    fs::File::open(&p)
        .ok()?
        .take(MAX_CONTENT_BYTES)
        .read_to_end(&mut buf)
        .ok()?;
    Some(buf)
}

/// For a Rust source file, the nearest `Cargo.toml` above it (inside `repo`) when that crate is a proc-macro
/// or names this file as its build script.
fn in_run_crate(repo: &Path, rel: &str) -> Option<String> {
    if !rel.ends_with(".rs") {
        return None;
    }
    // The nearest manifest is the crate's; its verdict ends the walk.
    let mut dir = rel;
    while let Some((parent, _)) = dir.rsplit_once('/') {
        dir = parent;
        if let Some(r) = crate_reason(repo, &format!("{dir}/Cargo.toml"), &rel[dir.len() + 1..]) {
            return r;
        }
    }
    crate_reason(repo, "Cargo.toml", rel).flatten()
}

/// `None`: no manifest at `manifest`; `Some(why)`: the crate's, with why `inner` (relative to the manifest's
/// directory) runs at test time, if it does.
fn crate_reason(repo: &Path, manifest: &str, inner: &str) -> Option<Option<String>> {
    let bytes = read_plain(repo, manifest)?;
    Some(crate_reason_of(&bytes, manifest, inner))
}

fn crate_reason_of(bytes: &[u8], manifest: &str, inner: &str) -> Option<String> {
    let t = toml_table(Some(bytes))?;
    let proc_macro = ["proc-macro", "proc_macro"]
        .iter()
        .any(|k| toml_get(&t, &["lib", k]).and_then(toml::Value::as_bool) == Some(true));
    if proc_macro {
        return Some(format!(
            "a source file of the proc-macro crate {manifest}: rustc runs that crate while compiling the crates \
             that use it"
        ));
    }
    let build = toml_get(&t, &["package", "build"]).and_then(toml::Value::as_str);
    (build.map(|b| b.trim_start_matches("./")) == Some(inner)).then(|| {
        format!("the build script {manifest} names: cargo compiles and runs it before any test")
    })
}

/// `(path, detail)` for each file `patch` adds or changes in the prepared repository `repo` that runs at test
/// time ([`classify`], and Rust sources of a proc-macro crate or named as a build script), leaving out `skip`
/// (paths whose change was undone). The detail reads `PATH: why`.
pub fn findings(
    repo: &Path,
    patch: &[u8],
    test_command: &str,
    skip: &[&str],
) -> Vec<(String, String)> {
    patch_paths(patch)
        .into_iter()
        .filter(|p| !skip.contains(&p.as_str()))
        .filter_map(|p| {
            let content = read_plain(repo, &p);
            let why = classify(&p, content.as_deref(), test_command)
                .or_else(|| in_run_crate(repo, &p))?;
            let detail = format!("{p}: {why}");
            Some((p, detail))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_table() {
        let cargo_build = b"[package]\nname = \"x\"\nbuild = \"gen.rs\"\n".as_slice();
        let cargo_pm = b"[package]\nname = \"m\"\n[lib]\nproc-macro = true\n".as_slice();
        let cargo_plain = b"[package]\nname = \"x\"\n".as_slice();
        let pj_pretest = br#"{"scripts":{"pretest":"node x.js","test":"node --test"}}"#.as_slice();
        let pj_none = br#"{"name":"x","version":"1.0.0"}"#.as_slice();
        let py_build = b"[build-system]\nrequires = [\"setuptools\"]\n".as_slice();
        let py_plain = b"[project]\nname = \"x\"\n".as_slice();
        let py_pytest = b"[tool.pytest.ini_options]\naddopts = \"-p evil\"\n".as_slice();
        let py_hatch =
            b"[tool.hatch.build.targets.wheel.hooks.custom]\npath = \"h.py\"\n".as_slice();
        let cfg_pytest = b"[metadata]\nname = x\n[tool:pytest]\naddopts = -p evil\n".as_slice();
        let cfg_plain = b"[metadata]\nname = x\n".as_slice();
        let cfg_plugin = b"[options.entry_points]\npytest11 =\n    evil = evil\n".as_slice();
        let tox_env = b"[testenv]\ncommands = pytest\n".as_slice();
        let tox_flake = b"[flake8]\nmax-line-length = 100\n".as_slice();
        let gomod_tc = b"module x\n\ngo 1.22\n\ntoolchain go1.22.1\n".as_slice();
        let gomod = b"module x\n\ngo 1.22\n".as_slice();
        let py_entry = b"[project.entry-points.pytest11]\nevil = \"evil\"\n".as_slice();
        let py_cmdclass = b"[tool.setuptools.cmdclass]\nbuild_py = \"x.B\"\n".as_slice();
        let cfg_cmdclass = b"[options]\ncmdclass =\n    build_py = x.B\n".as_slice();
        let pj_jest = br#"{"jest":{"setupFiles":["./s.js"]}}"#.as_slice();
        let pj_post = br#"{"scripts":{"postinstall":"node s.js","lint":"x"}}"#.as_slice();
        // (path, content, test command, flagged, a word the reason holds)
        type Row<'a> = (&'a str, Option<&'a [u8]>, &'a str, bool, &'a str);
        let table: &[Row] = &[
            (
                "build.rs",
                Some(b"fn main(){}"),
                "cargo test",
                true,
                "cargo",
            ),
            (
                "crates/a/build.rs",
                None,
                "cargo test",
                true,
                "build script",
            ),
            (
                "Cargo.toml",
                Some(cargo_build),
                "cargo test",
                true,
                "gen.rs",
            ),
            (
                "m/Cargo.toml",
                Some(cargo_pm),
                "cargo test",
                true,
                "proc-macro",
            ),
            ("Cargo.toml", Some(cargo_plain), "cargo test", false, ""),
            ("Cargo.toml", Some(b"not [toml"), "cargo test", false, ""),
            (
                ".cargo/config.toml",
                None,
                "cargo test",
                true,
                "rustc-wrapper",
            ),
            ("sub/.cargo/config", None, "cargo test", true, "runner"),
            ("config.toml", None, "cargo test", false, ""),
            ("rust-toolchain.toml", None, "cargo test", true, "rustup"),
            ("rust-toolchain", None, "cargo test", true, "rustup"),
            (
                "conftest.py",
                Some(b"import os"),
                "pytest",
                true,
                "conftest.py",
            ),
            ("tests/unit/conftest.py", None, "pytest", true, "pytest"),
            ("setup.py", None, "pytest", true, "setuptools"),
            (
                "pyproject.toml",
                Some(py_build),
                "pytest",
                true,
                "build backend",
            ),
            ("pyproject.toml", Some(py_plain), "pytest", false, ""),
            ("pyproject.toml", Some(py_pytest), "pytest", true, "addopts"),
            ("pyproject.toml", Some(py_hatch), "pytest", true, "hatch"),
            ("setup.cfg", Some(cfg_pytest), "pytest", true, "tool:pytest"),
            ("setup.cfg", Some(cfg_plugin), "pytest", true, "pytest11"),
            ("setup.cfg", Some(cfg_plain), "pytest", false, ""),
            ("pytest.ini", Some(b"[pytest]\n"), "pytest", true, "addopts"),
            ("tox.ini", Some(tox_env), "tox", true, "testenv"),
            ("tox.ini", Some(tox_flake), "pytest", false, ""),
            ("noxfile.py", None, "nox", true, "nox"),
            (
                "package.json",
                Some(pj_pretest),
                "npm test",
                true,
                "pretest, test",
            ),
            ("package.json", Some(pj_none), "npm test", false, ""),
            ("package.json", Some(b"{broken"), "npm test", false, ""),
            (".npmrc", None, "npm test", true, "node-options"),
            ("jest.config.js", None, "npm test", true, "loads it as code"),
            (
                "web/vitest.config.ts",
                None,
                "npm test",
                true,
                "loads it as code",
            ),
            (".mocharc.yml", None, "npm test", true, "mocha"),
            ("Makefile", None, "make test", true, "make"),
            ("GNUmakefile", None, "cd x && make -j2 check", true, "make"),
            ("makefile", None, "cargo test", false, ""),
            ("Makefile", None, "sh tests/test.sh", false, ""),
            (
                "go.mod",
                Some(gomod_tc),
                "go test ./...",
                true,
                "GOTOOLCHAIN",
            ),
            ("go.mod", Some(gomod), "go test ./...", false, ""),
            ("mk/rules.mk", None, "make check", true, "include"),
            ("mk/rules.mk", None, "pytest", false, ""),
            ("Rakefile", None, "rake test", true, "rake"),
            (
                "gradle/wrapper/gradle-wrapper.properties",
                None,
                "./gradlew test",
                true,
                "distribution",
            ),
            ("pom.xml", None, "mvn test", true, "maven"),
            (".yarnrc.yml", None, "yarn test", true, "yarnPath"),
            (".pnpmfile.cjs", None, "pnpm test", true, "hooks"),
            (
                "babel.config.js",
                None,
                "npm test",
                true,
                "loads it as code",
            ),
            ("pyproject.toml", Some(py_entry), "pytest", true, "pytest11"),
            (
                "pyproject.toml",
                Some(py_cmdclass),
                "pytest",
                true,
                "cmdclass",
            ),
            ("setup.cfg", Some(cfg_cmdclass), "pytest", true, "cmdclass"),
            ("package.json", Some(pj_jest), "npm test", true, "jest"),
            (
                "package.json",
                Some(pj_post),
                "npm test",
                true,
                "postinstall",
            ),
            ("build.gradle.kts", None, "gradle test", true, "gradle"),
            ("src/lib.rs", Some(b"fn f(){}"), "cargo test", false, ""),
            ("tests/test_x.py", None, "pytest", false, ""),
            ("README.md", None, "cargo test", false, ""),
        ];
        for (path, content, cmd, flagged, word) in table {
            let got = classify(path, *content, cmd);
            assert_eq!(got.is_some(), *flagged, "{path} ({cmd}): {got:?}");
            if let Some(r) = got {
                assert!(r.contains(word), "{path}: {r:?} lacks {word:?}");
            }
        }
    }

    #[test]
    fn patch_paths_reads_headers_renames_and_skips_hunks_and_deletions() {
        let patch = b"diff --git a/build.rs b/build.rs\n\
new file mode 100644\n\
index 0000000..1111111\n\
--- /dev/null\n\
+++ b/build.rs\n\
@@ -0,0 +1,2 @@\n\
+fn main() {}\n\
+// end\n\
diff --git a/old name.txt b/conftest.py\n\
similarity index 100%\n\
rename from old name.txt\n\
rename to conftest.py\n\
diff --git a/gone.rs b/gone.rs\n\
deleted file mode 100644\n\
--- a/gone.rs\n\
+++ /dev/null\n\
@@ -1,2 +0,0 @@\n\
--- a/fake.txt\n\
-+++ b/fake.txt\n\
diff --git a/empty.txt b/empty.txt\n\
new file mode 100644\n\
diff --git \"a/sp\\303\\251cial\\tname\" \"b/sp\\303\\251cial\\tname\"\n\
--- \"a/sp\\303\\251cial\\tname\"\n\
+++ \"b/sp\\303\\251cial\\tname\"\n\
@@ -1 +1 @@\n\
-a\n\
+b\n\
--- a/plain/package.json\t2024-01-01 00:00:00\n\
+++ b/plain/package.json\t2024-01-01 00:00:01\n\
@@ -1,3 +1,3 @@\n\
 {\n\
--- x\n\
+++ y\n\
 }\n";
        assert_eq!(
            patch_paths(patch),
            vec![
                "build.rs".to_owned(),
                "conftest.py".to_owned(),
                "empty.txt".to_owned(),
                "plain/package.json".to_owned(),
                "sp\u{e9}cial\tname".to_owned(),
            ]
        );
        assert!(patch_paths(b"").is_empty());
        assert!(patch_paths(b"not a patch at all\n--- \n+++ \n").is_empty());
    }

    #[test]
    fn findings_read_the_prepared_files_and_never_follow_links() {
        let d = tempfile::tempdir().expect("tmp");
        let w = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, text).expect("write");
        };
        w("package.json", r#"{"scripts":{"pretest":"node x.js"}}"#);
        w(
            "macros/Cargo.toml",
            "[package]\nname = \"m\"\n[lib]\nproc-macro = true\n",
        );
        w("macros/src/lib.rs", "");
        w("app/src/main.rs", "");
        let outside = tempfile::tempdir().expect("tmp");
        fs::write(outside.path().join("p.json"), r#"{"scripts":{"test":"x"}}"#).expect("write");
        fs::create_dir_all(d.path().join("linked")).expect("mkdir");
        std::os::unix::fs::symlink(
            outside.path().join("p.json"),
            d.path().join("linked/package.json"),
        )
        .expect("link");
        let patch = b"--- a/package.json\n+++ b/package.json\n@@ -1 +1 @@\n-{}\n+{}\n\
--- a/macros/src/lib.rs\n+++ b/macros/src/lib.rs\n@@ -1 +1 @@\n-a\n+b\n\
--- a/app/src/main.rs\n+++ b/app/src/main.rs\n@@ -1 +1 @@\n-a\n+b\n\
--- a/linked/package.json\n+++ b/linked/package.json\n@@ -1 +1 @@\n-a\n+b\n\
--- a/build.rs\n+++ b/build.rs\n@@ -1 +1 @@\n-a\n+b\n";
        let got = findings(d.path(), patch, "npm test", &["build.rs"]);
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, vec!["macros/src/lib.rs", "package.json"], "{got:?}");
        assert!(got[0].1.starts_with("macros/src/lib.rs: "), "{got:?}");
        assert!(got[1].1.contains("pretest"), "{got:?}");
    }
}
