//! Stage 5 on a task's Dockerfile: text, not execution. Base images only by digest (`FROM name@sha256:...`,
//! the registry is the operator's), no privileged or host-mounting instructions, `ADD` from URLs only inside
//! `[environment] allow`, and nothing from the bundle's `tests/` copied into the image.

use crate::job::{AllowEntry, HostName};
use crate::report::{Finding, Severity, Stage};

/// One instruction of a Dockerfile: its keyword (upper case), its text after the keyword, and its first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// `FROM`, `RUN`, `COPY`...
    pub keyword: String,
    /// Everything after the keyword, continuation lines joined.
    pub args: String,
    /// 1-based line where it starts.
    pub line: usize,
}

/// Instructions the scan knows; anything else is refused (an unknown instruction is not understood, so not
/// vouched for).
const KNOWN: &[&str] = &[
    "FROM",
    "RUN",
    "COPY",
    "ADD",
    "ENV",
    "ARG",
    "WORKDIR",
    "USER",
    "LABEL",
    "CMD",
    "ENTRYPOINT",
    "EXPOSE",
    "SHELL",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "MAINTAINER",
    "VOLUME",
    "ONBUILD",
];

/// Splits a Dockerfile into instructions: comments and blank lines dropped, backslash continuations joined
/// (comment lines inside a continuation are skipped, as Docker does). Parser directives are returned as
/// `#DIRECTIVE` instructions so the scan can refuse them.
pub fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut at_top = true;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if current.is_none() {
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                // Parser directives (`# syntax=...`, `# escape=...`) are only read before the first instruction.
                if at_top {
                    if let Some((k, v)) = comment.split_once('=') {
                        let k = k.trim();
                        if !k.is_empty() && !k.contains(char::is_whitespace) {
                            out.push(Instruction {
                                keyword: "#DIRECTIVE".into(),
                                args: format!("{}={}", k.to_ascii_lowercase(), v.trim()),
                                line: i + 1,
                            });
                        }
                    }
                }
                continue;
            }
        } else if line.starts_with('#') {
            continue;
        }
        at_top = false;
        let (body, continues) = match line.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (line, false),
        };
        let entry = current.get_or_insert_with(|| (i + 1, String::new()));
        if !entry.1.is_empty() {
            entry.1.push(' ');
        }
        entry.1.push_str(body.trim());
        if !continues {
            if let Some((n, full)) = current.take() {
                out.push(split(n, &full));
            }
        }
    }
    if let Some((n, full)) = current.take() {
        out.push(split(n, &full));
    }
    out
}

fn split(line: usize, full: &str) -> Instruction {
    let (k, rest) = full.split_once(char::is_whitespace).unwrap_or((full, ""));
    Instruction {
        keyword: k.to_ascii_uppercase(),
        args: rest.trim().to_owned(),
        line,
    }
}

/// What a `FROM` names: a base image (repository name and digest) or an earlier stage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BaseImage {
    /// The repository name as written (`debian`, `library/debian`, `tools/rust`), no registry host.
    pub name: String,
    /// `sha256:<64 hex>`.
    pub digest: String,
    /// 1-based line of the `FROM`.
    pub line: usize,
}

/// Whether `name` is a repository path without a registry host: lowercase components of `[a-z0-9._-]`,
/// separated by `/`, the first without `.` or `:` and not `localhost` (those would name a registry).
fn plain_repository(name: &str) -> bool {
    let comps: Vec<&str> = name.split('/').collect();
    let first = comps.first().copied().unwrap_or_default();
    !name.is_empty()
        && !first.contains('.')
        && first != "localhost"
        && comps.iter().all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
        })
}

/// Parses `name@sha256:<64 lowercase hex>`.
pub fn parse_pinned(reference: &str) -> Result<(String, String), String> {
    let Some((name, digest)) = reference.split_once('@') else {
        return Err(format!(
            "`{reference}` is not pinned by digest; write `FROM name@sha256:<64 hex digits>`"
        ));
    };
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!(
            "`{reference}`: the digest must be `sha256:` and 64 lowercase hex digits"
        ));
    }
    let first = name.split('/').next().unwrap_or_default();
    if name.contains('/') && (first.contains(['.', ':']) || first == "localhost") {
        return Err(format!(
            "`{reference}`: `{first}` names a registry host (base images come from the registry the operator \
             names)"
        ));
    }
    if name.contains(':') {
        return Err(format!(
            "`{reference}`: a tag beside the digest is ambiguous; name the image by digest only"
        ));
    }
    if !plain_repository(name) {
        return Err(format!(
            "`{reference}`: `{name}` must be a repository name without a registry host (base images come \
             from the registry the operator names)"
        ));
    }
    Ok((name.to_owned(), digest.to_owned()))
}

/// The flags (`--x=y`) at the front of an instruction's arguments, and the rest.
fn flags(args: &str) -> (Vec<&str>, Vec<&str>) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let n = words.iter().take_while(|w| w.starts_with("--")).count();
    (words[..n].to_vec(), words[n..].to_vec())
}

/// The sources of a `COPY`/`ADD` (every word but the destination; the JSON form too).
fn sources(rest: &[&str]) -> Vec<String> {
    let joined = rest.join(" ");
    let words: Vec<String> = if joined.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<String>>(&joined)
            .unwrap_or_else(|_| rest.iter().map(|s| s.to_string()).collect())
    } else {
        rest.iter().map(|s| s.to_string()).collect()
    };
    let n = words.len().saturating_sub(1);
    words.into_iter().take(n).collect()
}

/// Whether a `COPY`/`ADD` source reaches the bundle's `tests/` (or the whole context, which holds no tests
/// but says nothing of what it means to copy).
fn names_tests(src: &str) -> bool {
    let mut s = src.trim_matches('"');
    while let Some(r) = s.strip_prefix("./") {
        s = r;
    }
    let first = s.split('/').next().unwrap_or_default();
    if first == "tests" {
        return true;
    }
    // A glob whose first component could match `tests` (`t*`, `test?`, `[t]ests`).
    first.contains(['*', '?', '['])
        && globset::Glob::new(first).is_ok_and(|g| g.compile_matcher().is_match("tests"))
}

/// A URL source of `ADD`: its host and port, when the source is one.
fn url_host(src: &str) -> Option<Result<(HostName, u16), String>> {
    let (scheme, rest) = src.split_once("://")?;
    let port = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        other => return Some(Err(format!("`{src}`: scheme `{other}` is not fetched"))),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => match p.parse::<u16>() {
            Ok(p) if p > 0 => (h, p),
            _ => return Some(Err(format!("`{src}`: bad port"))),
        },
        _ => (hostport, port),
    };
    Some(
        HostName::parse(host)
            .map(|h| (h, port))
            .map_err(|e| e.to_string()),
    )
}

/// What stage 5 finds in a Dockerfile: the refusals (each naming the line) and the base images it pins.
#[derive(Debug, Clone, Default)]
pub struct DockerfileScan {
    /// Findings, refusals first in file order.
    pub findings: Vec<Finding>,
    /// The base images, in order.
    pub bases: Vec<BaseImage>,
}

/// Scans the Dockerfile `text` (shown as `shown` in locations) against the build's allowlist.
pub fn scan(text: &str, shown: &str, allow: &[AllowEntry]) -> DockerfileScan {
    let mut out = DockerfileScan::default();
    let mut stages: Vec<String> = Vec::new();
    let refuse = |out: &mut DockerfileScan, line: usize, what: String| {
        out.findings.push(Finding::new(
            Stage::Scan,
            Severity::Refusal,
            format!("{shown}:{line}"),
            what,
        ));
    };
    let all = instructions(text);
    if !all.iter().any(|i| i.keyword == "FROM") {
        refuse(
            &mut out,
            1,
            "no FROM: the Dockerfile names no base image".into(),
        );
    }
    for ins in &all {
        let lower = ins.args.to_ascii_lowercase();
        if ins.keyword == "#DIRECTIVE" {
            refuse(
                &mut out,
                ins.line,
                format!(
                    "parser directive `{}`: a `syntax` directive loads a frontend from a registry and `escape` \
                     changes how this scan reads the file; neither is accepted",
                    ins.args
                ),
            );
            continue;
        }
        if !KNOWN.contains(&ins.keyword.as_str()) {
            refuse(
                &mut out,
                ins.line,
                format!("unknown instruction `{}`", ins.keyword),
            );
            continue;
        }
        if lower.contains("--privileged") || lower.contains("--security") {
            refuse(
                &mut out,
                ins.line,
                format!(
                    "{}: `--privileged`/`--security=insecure` gives the build the host's privileges",
                    ins.keyword
                ),
            );
        }
        let (fl, rest) = flags(&ins.args);
        match ins.keyword.as_str() {
            "FROM" => {
                let reference = rest.first().copied().unwrap_or_default();
                let alias = match (rest.get(1), rest.get(2)) {
                    (Some(a), Some(n)) if a.eq_ignore_ascii_case("as") => {
                        Some(n.to_ascii_lowercase())
                    }
                    _ => None,
                };
                if stages.iter().any(|s| s == &reference.to_ascii_lowercase()) {
                    // An earlier stage of this file.
                } else if reference == "scratch" {
                    refuse(
                        &mut out,
                        ins.line,
                        "FROM scratch: the environment must start from a base image pinned by digest".into(),
                    );
                } else {
                    match parse_pinned(reference) {
                        Ok((name, digest)) => out.bases.push(BaseImage {
                            name,
                            digest,
                            line: ins.line,
                        }),
                        Err(e) => refuse(&mut out, ins.line, format!("FROM {e}")),
                    }
                }
                stages.extend(alias);
            }
            "RUN" => {
                for f in &fl {
                    let name = f.split('=').next().unwrap_or_default().to_ascii_lowercase();
                    if matches!(
                        name.as_str(),
                        "--mount" | "--network" | "--security" | "--device"
                    ) {
                        refuse(
                            &mut out,
                            ins.line,
                            format!(
                                "RUN {f}: mounts, devices and network modes are the runner's to choose (host \
                                 mounts and the host network are refused)"
                            ),
                        );
                    }
                }
            }
            "VOLUME" => refuse(
                &mut out,
                ins.line,
                "VOLUME: the environment gets no host or named volumes".into(),
            ),
            "COPY" | "ADD" => {
                for f in &fl {
                    if let Some(from) = f.strip_prefix("--from=") {
                        if !stages.iter().any(|s| s == &from.to_ascii_lowercase())
                            && from.parse::<usize>().is_err()
                        {
                            refuse(
                                &mut out,
                                ins.line,
                                format!(
                                    "{} {f}: copies from an image that is not an earlier stage (not pinned, not \
                                     from the operator's registry)",
                                    ins.keyword
                                ),
                            );
                        }
                    }
                }
                let from_stage = fl.iter().any(|f| f.starts_with("--from="));
                for src in sources(&rest) {
                    if let Some(url) = url_host(&src) {
                        if ins.keyword == "COPY" {
                            continue;
                        }
                        match url {
                            Ok((host, port)) => {
                                if !allow
                                    .iter()
                                    .any(|a| a.port == port && a.matches_normal(&host))
                                {
                                    refuse(
                                        &mut out,
                                        ins.line,
                                        format!(
                                            "ADD {src}: {host}:{port} is not in [environment] allow"
                                        ),
                                    );
                                }
                            }
                            Err(e) => refuse(&mut out, ins.line, format!("ADD {e}")),
                        }
                        continue;
                    }
                    if src.starts_with("git@") {
                        refuse(
                            &mut out,
                            ins.line,
                            format!("{} {src}: git sources are not fetched", ins.keyword),
                        );
                        continue;
                    }
                    if from_stage {
                        continue;
                    }
                    if src.starts_with('/') || src.split('/').any(|c| c == "..") {
                        refuse(
                            &mut out,
                            ins.line,
                            format!(
                                "{} {src}: sources stay inside the task's build context",
                                ins.keyword
                            ),
                        );
                    } else if names_tests(&src) {
                        refuse(
                            &mut out,
                            ins.line,
                            format!(
                                "{} {src}: copies the task's tests into the environment, where the solution \
                                 could read or change them",
                                ins.keyword
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
        if matches!(ins.keyword.as_str(), "RUN" | "ONBUILD") {
            for h in crate::scan::scan_text(&ins.args) {
                out.findings.push(Finding::new(
                    Stage::Scan,
                    Severity::Contained,
                    format!("{shown}:{}", ins.line),
                    format!(
                        "{}: `{}` (runs in the build, behind the egress allowlist)",
                        h.category, h.excerpt
                    ),
                ));
            }
        }
    }
    out.findings
        .sort_by_key(|f| f.severity != Severity::Refusal);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn refusals(text: &str) -> Vec<String> {
        let allow = vec![AllowEntry::parse("files.example:443").expect("allow")];
        scan(text, "Dockerfile", &allow)
            .findings
            .into_iter()
            .filter(|f| f.severity == Severity::Refusal)
            .map(|f| format!("{}: {}", f.location, f.what))
            .collect()
    }

    #[test]
    fn a_pinned_plain_dockerfile_passes() {
        let text = format!(
            "# a comment\nFROM base@{D} AS build\nRUN echo hi \\\n  && echo there\nCOPY src/ /src/\n\
             ADD https://files.example/x.tar.gz /x.tar.gz\nFROM build\nCOPY --from=build /src /src\nWORKDIR /app\n"
        );
        let s = scan(
            &text,
            "Dockerfile",
            &[AllowEntry::parse("files.example:443").expect("a")],
        );
        assert!(s.findings.is_empty(), "{:?}", s.findings);
        assert_eq!(s.bases.len(), 1);
        assert_eq!((s.bases[0].name.as_str(), s.bases[0].line), ("base", 2));
    }

    #[test]
    fn each_hostile_instruction_is_refused_naming_its_line() {
        let cases: Vec<(String, &str)> = vec![
            ("FROM debian:12\n".into(), "not pinned by digest"),
            ("FROM debian@sha256:abc\n".into(), "64 lowercase hex"),
            (
                format!("FROM registry.example/debian@{D}\n"),
                "registry host",
            ),
            (format!("FROM localhost:5000/debian@{D}\n"), "registry host"),
            (format!("FROM debian:12@{D}\n"), "tag beside the digest"),
            ("FROM scratch\n".into(), "FROM scratch"),
            ("FROM ${BASE}\n".into(), "not pinned"),
            (format!("FROM b@{D}\nRUN --privileged id\n"), "--privileged"),
            (
                format!("FROM b@{D}\nRUN --security=insecure id\n"),
                "--privileged",
            ),
            (
                format!("FROM b@{D}\nRUN --mount=type=bind,source=/,target=/h ls\n"),
                "host mounts",
            ),
            (
                format!("FROM b@{D}\nRUN --network=host curl x\n"),
                "host network",
            ),
            (
                format!("FROM b@{D}\nVOLUME /var/run/docker.sock\n"),
                "VOLUME",
            ),
            (
                format!("FROM b@{D}\nADD https://evil.example/x /x\n"),
                "evil.example:443 is not in",
            ),
            (
                format!("FROM b@{D}\nADD http://files.example/x /x\n"),
                "files.example:80 is not in",
            ),
            (
                format!("FROM b@{D}\nCOPY tests/ /tests/\n"),
                "tests into the environment",
            ),
            (
                format!("FROM b@{D}\nCOPY ./tests /t\n"),
                "tests into the environment",
            ),
            (
                format!("FROM b@{D}\nADD [\"tests/test.sh\", \"/t.sh\"]\n"),
                "tests into the environment",
            ),
            (format!("FROM b@{D}\nCOPY ../secret /s\n"), "build context"),
            (
                format!("FROM b@{D}\nCOPY --from=other@{D} / /\n"),
                "not an earlier stage",
            ),
            (
                format!("# syntax=docker/dockerfile:1\nFROM b@{D}\n"),
                "parser directive",
            ),
            (format!("FROM b@{D}\nFROBNICATE x\n"), "unknown instruction"),
            ("RUN id\n".into(), "no FROM"),
        ];
        for (text, want) in cases {
            let r = refusals(&text);
            assert!(
                r.iter()
                    .any(|m| m.contains(want) && m.starts_with("Dockerfile:")),
                "{text:?}: wanted {want:?}, got {r:?}"
            );
        }
    }

    #[test]
    fn a_line_number_survives_continuations_and_comments() {
        let text = format!("FROM b@{D}\nRUN echo a \\\n# inner comment\n  b\n\nVOLUME /x\n");
        let r = refusals(&text);
        assert_eq!(
            r,
            vec!["Dockerfile:6: VOLUME: the environment gets no host or named volumes".to_owned()]
        );
    }
}
