//! `task.toml`, the task bundle's declaration, loaded as strictly as `job.toml`: unknown keys, wrong types and
//! bad values are refused with the file, line, column and dotted key, through the job loader's own machinery
//! ([`crate::job::JobError`], [`crate::job::line_col`]).

use crate::job::{self, AllowEntry, JobError, Limits};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use toml::Spanned;

/// Default `[environment] build_timeout_seconds`.
pub const DEFAULT_BUILD_TIMEOUT_SECONDS: u64 = 1800;
/// Default `[solution] timeout_seconds`.
pub const DEFAULT_SOLUTION_TIMEOUT_SECONDS: u64 = job::DEFAULT_INSTALL_TIMEOUT_SECONDS;
/// Longest `[task] name`.
pub const MAX_NAME_CHARS: usize = 200;

/// A loaded, validated `task.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TaskFile {
    /// `[task] name` (free text, for people).
    pub name: Option<String>,
    /// `[environment]`.
    pub environment: EnvironmentSpec,
    /// `[solution]`.
    pub solution: SolutionSpec,
    /// `[test] timeout_seconds`.
    pub test_timeout_seconds: u64,
    /// `[limits]` with defaults filled in.
    pub limits: Limits,
    /// SHA-256 of the file's bytes (the verdict's `inputs.job_sha256` for a task).
    pub sha256: String,
}

/// `[environment]`: how the image is built (stage 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EnvironmentSpec {
    /// The Dockerfile named explicitly (relative to the bundle root); `None`: `Dockerfile`, else
    /// `environment/Dockerfile`.
    pub dockerfile: Option<PathBuf>,
    /// Where the build may connect through the egress proxy (also the hosts `ADD URL` may name).
    pub allow: Vec<AllowEntry>,
    /// Wall-clock budget of the build.
    pub build_timeout_seconds: u64,
}

/// `[solution]`: what works in the first phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SolutionSpec {
    /// The shell command run in the work tree (`sh solution/solve.sh`).
    pub command: Option<String>,
    /// A unified diff applied to the work tree before the command (relative to the bundle root).
    pub patch: Option<PathBuf>,
    /// Where the solution phase may connect through the egress proxy.
    pub allow: Vec<AllowEntry>,
    /// Wall-clock budget of the solution phase.
    pub timeout_seconds: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    task: Option<RawMeta>,
    environment: Option<RawEnvironment>,
    solution: Option<RawSolution>,
    test: Option<RawTest>,
    limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeta {
    name: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvironment {
    dockerfile: Option<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    build_timeout_seconds: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSolution {
    command: Option<Spanned<String>>,
    patch: Option<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    timeout_seconds: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTest {
    timeout_seconds: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory_mib: Option<Spanned<u64>>,
    pids: Option<Spanned<u64>>,
    disk_mib: Option<Spanned<u64>>,
    open_files: Option<Spanned<u64>>,
}

struct Ctx<'a> {
    origin: String,
    text: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, span: Range<usize>, key: &str, message: impl Into<String>) -> JobError {
        let (line, column) = job::line_col(self.text, span.start);
        JobError::Invalid {
            origin: self.origin.clone(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn positive(&self, v: &Option<Spanned<u64>>, key: &str, default: u64) -> Result<u64, JobError> {
        match v {
            None => Ok(default),
            Some(s) if *s.get_ref() == 0 => Err(self.invalid(s.span(), key, "must be at least 1")),
            Some(s) => Ok(*s.get_ref()),
        }
    }

    fn allow(&self, list: &[Spanned<String>], key: &str) -> Result<Vec<AllowEntry>, JobError> {
        list.iter()
            .map(|a| {
                AllowEntry::parse(a.get_ref())
                    .map_err(|e| self.invalid(a.span(), key, e.to_string()))
            })
            .collect()
    }

    /// A path relative to the bundle root, without `..`, NUL or an absolute start.
    fn bundle_path(&self, v: &Spanned<String>, key: &str) -> Result<PathBuf, JobError> {
        let s = v.get_ref();
        let p = Path::new(s);
        if s.is_empty() || s.contains('\0') {
            return Err(self.invalid(v.span(), key, "must be a non-empty path"));
        }
        if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(self.invalid(
                v.span(),
                key,
                format!(
                    "`{}` must be relative to the bundle root, without `..`",
                    s.escape_debug()
                ),
            ));
        }
        Ok(p.to_path_buf())
    }

    fn command(&self, v: &Spanned<String>, key: &str) -> Result<String, JobError> {
        let s = v.get_ref();
        if s.trim().is_empty() {
            return Err(self.invalid(v.span(), key, "must not be empty"));
        }
        if s.contains('\0') {
            return Err(self.invalid(v.span(), key, "contains a NUL byte"));
        }
        Ok(s.clone())
    }
}

impl TaskFile {
    /// Loads `task.toml` from bytes (must be UTF-8, at most [`job::MAX_JOB_FILE_BYTES`]); `origin` names the
    /// file in messages.
    pub fn from_bytes(bytes: &[u8], origin: &Path) -> Result<TaskFile, JobError> {
        let shown = origin.display().to_string();
        if bytes.len() as u64 > job::MAX_JOB_FILE_BYTES {
            return Err(JobError::TooLarge {
                origin: shown,
                size: bytes.len() as u64,
                limit: job::MAX_JOB_FILE_BYTES,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let valid = String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned();
            let (line, column) = job::line_col(&valid, valid.len());
            JobError::Syntax {
                origin: shown.clone(),
                line,
                column,
                key: "<document>".into(),
                message: "task.toml is not UTF-8".into(),
            }
        })?;
        let cx = Ctx {
            origin: shown,
            text,
        };
        let raw: RawTask = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let (line, column) = job::line_col(text, span.start);
            let message = e.message().trim().to_string();
            let mut key = job::key_at(text, span.start);
            if let Some(field) = message
                .strip_prefix("unknown field `")
                .and_then(|m| m.split('`').next())
            {
                if !key.ends_with(field) {
                    key = if key == "<document>" {
                        field.to_string()
                    } else {
                        format!("{key}.{field}")
                    };
                }
            }
            JobError::Syntax {
                origin: cx.origin.clone(),
                line,
                column,
                key,
                message,
            }
        })?;

        let name = match raw.task.as_ref().and_then(|t| t.name.as_ref()) {
            None => None,
            Some(n) => {
                let s = n.get_ref();
                if s.chars().count() > MAX_NAME_CHARS || s.chars().any(char::is_control) {
                    return Err(cx.invalid(
                        n.span(),
                        "task.name",
                        format!(
                            "must be at most {MAX_NAME_CHARS} characters, none of them a control"
                        ),
                    ));
                }
                Some(s.clone())
            }
        };
        let environment = match &raw.environment {
            None => EnvironmentSpec {
                dockerfile: None,
                allow: Vec::new(),
                build_timeout_seconds: DEFAULT_BUILD_TIMEOUT_SECONDS,
            },
            Some(e) => EnvironmentSpec {
                dockerfile: e
                    .dockerfile
                    .as_ref()
                    .map(|d| cx.bundle_path(d, "environment.dockerfile"))
                    .transpose()?,
                allow: cx.allow(&e.allow, "environment.allow")?,
                build_timeout_seconds: cx.positive(
                    &e.build_timeout_seconds,
                    "environment.build_timeout_seconds",
                    DEFAULT_BUILD_TIMEOUT_SECONDS,
                )?,
            },
        };
        let solution = match &raw.solution {
            None => SolutionSpec {
                command: None,
                patch: None,
                allow: Vec::new(),
                timeout_seconds: DEFAULT_SOLUTION_TIMEOUT_SECONDS,
            },
            Some(s) => SolutionSpec {
                command: s
                    .command
                    .as_ref()
                    .map(|c| cx.command(c, "solution.command"))
                    .transpose()?,
                patch: s
                    .patch
                    .as_ref()
                    .map(|p| cx.bundle_path(p, "solution.patch"))
                    .transpose()?,
                allow: cx.allow(&s.allow, "solution.allow")?,
                timeout_seconds: cx.positive(
                    &s.timeout_seconds,
                    "solution.timeout_seconds",
                    DEFAULT_SOLUTION_TIMEOUT_SECONDS,
                )?,
            },
        };
        if let Some(s) = &raw.solution {
            if s.command.is_none() && !s.allow.is_empty() {
                return Err(cx.invalid(
                    s.allow[0].span(),
                    "solution.allow",
                    "names egress for a solution phase, but [solution] has no command",
                ));
            }
        }
        let test_timeout_seconds = cx.positive(
            &raw.test.as_ref().and_then(|t| t.timeout_seconds.clone()),
            "test.timeout_seconds",
            job::DEFAULT_TEST_TIMEOUT_SECONDS,
        )?;
        let limits = match &raw.limits {
            None => Limits::default(),
            Some(l) => {
                let mut out = Limits::default();
                out.memory_mib =
                    cx.positive(&l.memory_mib, "limits.memory_mib", job::DEFAULT_MEMORY_MIB)?;
                out.pids = cx.positive(&l.pids, "limits.pids", job::DEFAULT_PIDS)?;
                out.disk_mib =
                    cx.positive(&l.disk_mib, "limits.disk_mib", job::DEFAULT_DISK_MIB)?;
                out.open_files =
                    cx.positive(&l.open_files, "limits.open_files", job::DEFAULT_OPEN_FILES)?;
                out
            }
        };
        Ok(TaskFile {
            name,
            environment,
            solution,
            test_timeout_seconds,
            limits,
            sha256: hex::encode(Sha256::digest(text.as_bytes())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<TaskFile, JobError> {
        TaskFile::from_bytes(text.as_bytes(), Path::new("task.toml"))
    }

    #[test]
    fn an_empty_file_takes_every_default() {
        let t = load("").expect("empty task.toml");
        assert_eq!(t.test_timeout_seconds, job::DEFAULT_TEST_TIMEOUT_SECONDS);
        assert_eq!(
            t.environment.build_timeout_seconds,
            DEFAULT_BUILD_TIMEOUT_SECONDS
        );
        assert_eq!(t.solution.command, None);
        assert_eq!(t.limits, Limits::default());
    }

    #[test]
    fn every_key_loads() {
        let t = load(
            "[task]\nname = \"fix the adder\"\n[environment]\ndockerfile = \"environment/Dockerfile\"\n\
             allow = [\"deb.example:443\"]\nbuild_timeout_seconds = 60\n[solution]\ncommand = \"sh solution/solve.sh\"\n\
             patch = \"solution/fix.patch\"\nallow = [\"*.pkg.example:443\"]\ntimeout_seconds = 30\n[test]\n\
             timeout_seconds = 40\n[limits]\nmemory_mib = 512\npids = 64\ndisk_mib = 128\nopen_files = 256\n",
        )
        .expect("full task.toml");
        assert_eq!(t.name.as_deref(), Some("fix the adder"));
        assert_eq!(t.environment.allow[0].to_string(), "deb.example:443");
        assert_eq!(t.solution.allow[0].to_string(), "*.pkg.example:443");
        assert_eq!(t.solution.timeout_seconds, 30);
        assert_eq!((t.limits.memory_mib, t.limits.open_files), (512, 256));
        assert_eq!(t.test_timeout_seconds, 40);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_line_and_key() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "[solution]\ncommand = \"x\"\nrunner = \"y\"\n",
                3,
                "solution.runner",
            ),
            (
                "[environment]\nprivileged = true\n",
                2,
                "environment.privileged",
            ),
            ("[agent]\n", 1, "agent"),
            ("[limits]\n\npids = 0\n", 3, "limits.pids"),
            ("[limits]\npids = \"many\"\n", 2, "limits.pids"),
            (
                "[environment]\nallow = [\"nope\"]\n",
                2,
                "environment.allow",
            ),
            (
                "[environment]\ndockerfile = \"../Dockerfile\"\n",
                2,
                "environment.dockerfile",
            ),
            ("[solution]\npatch = \"/etc/passwd\"\n", 2, "solution.patch"),
            ("[solution]\ncommand = \"  \"\n", 2, "solution.command"),
            (
                "[solution]\nallow = [\"a.example:443\"]\n",
                2,
                "solution.allow",
            ),
            ("[test]\ncommand = \"sh x\"\n", 2, "test.command"),
        ];
        for (text, line, key) in cases {
            let e = load(text).expect_err(text);
            assert_eq!(e.line(), Some(*line), "{text}: {e}");
            assert_eq!(e.key(), Some(*key), "{text}: {e}");
            assert!(e.to_string().starts_with("task.toml:"), "{e}");
        }
    }

    #[test]
    fn non_utf8_is_refused_with_its_line() {
        let e = TaskFile::from_bytes(b"[task]\nname = \"\xff\"\n", Path::new("task.toml"))
            .expect_err("not UTF-8");
        assert_eq!(e.line(), Some(2));
    }
}
