//! The operator's configuration: what of the runner's machine a job may ask for. The job is a stranger's
//! file; the environment names passed through from the runner and the host paths shown read-only come from
//! this host-side file (or its built-in defaults), and the job may only choose among them. Stage 4
//! ([`crate::normalise`]) refuses a job that asks for more, naming what it asked for.

use crate::job::{check_read_path, env_name_denied};
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

/// The names a job may pass through when the operator configured none: terminal, locale, time zone, `CI`.
pub const DEFAULT_PASSTHROUGH: &[&str] = &["TERM", "LANG", "LC_*", "TZ", "CI"];

/// Largest operator configuration file read (bytes).
pub const MAX_OPERATOR_FILE_BYTES: u64 = 64 * 1024;

/// Why an operator configuration could not be used; every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorConfigError {
    /// The file could not be read.
    #[error("{path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// The file is not the TOML this module expects.
    #[error("{path}: {why}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message (line and key).
        why: String,
    },
    /// An entry is not acceptable even from the operator.
    #[error("{path}: {key}: {why}")]
    Entry {
        /// The file.
        path: String,
        /// `env.passthrough`, `sandbox.read`, `egress.allow_networks`, `egress.upstream_proxy` or
        /// `egress.ca_certificates`.
        key: &'static str,
        /// What is wrong with the entry.
        why: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    env: Option<RawEnv>,
    sandbox: Option<RawSandbox>,
    egress: Option<RawEgress>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    allow_networks: Option<Vec<String>>,
    upstream_proxy: Option<String>,
    ca_certificates: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    passthrough: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    read: Option<Vec<String>>,
}

/// What the operator allows a job to take from the runner's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct OperatorPolicy {
    /// Environment names a job may list in `[env] passthrough`; an entry ending in `*` allows every name
    /// with that prefix (`LC_*`).
    pub passthrough: Vec<String>,
    /// Host paths (absolute, or `~/` for the runner's home) a job may list in `[sandbox] read`, or any path
    /// under one of them.
    pub read: Vec<String>,
    /// The `[egress]` table: networks the address policy accepts for allowlisted names, the HTTP CONNECT
    /// proxy allowed connections go through, and CA certificates the install phase trusts besides the system's
    /// (none by default).
    #[serde(skip)]
    pub egress: job_policy::egress::OperatorEgress,
    /// Where the policy came from (a file, or the built-in defaults), for messages.
    pub source: String,
}

impl Default for OperatorPolicy {
    fn default() -> Self {
        OperatorPolicy {
            passthrough: DEFAULT_PASSTHROUGH
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            read: Vec::new(),
            egress: job_policy::egress::OperatorEgress::default(),
            source: "the built-in operator defaults".to_owned(),
        }
    }
}

impl OperatorPolicy {
    /// Reads an operator configuration file (TOML: `[env] passthrough`, `[sandbox] read`, `[egress]
    /// allow_networks`, `upstream_proxy` and `ca_certificates`); a table or key left out keeps its default (the
    /// default read list and the egress settings are empty).
    pub fn load(path: &Path) -> Result<OperatorPolicy, OperatorConfigError> {
        use std::io::Read;
        let name = path.display().to_string();
        let read_err = |why: String| OperatorConfigError::Read {
            path: name.clone(),
            why,
        };
        let f = std::fs::File::open(path).map_err(|e| read_err(e.to_string()))?;
        let mut text = String::new();
        f.take(MAX_OPERATOR_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| read_err(e.to_string()))?;
        if text.len() as u64 > MAX_OPERATOR_FILE_BYTES {
            return Err(read_err(format!(
                "larger than {MAX_OPERATOR_FILE_BYTES} bytes"
            )));
        }
        OperatorPolicy::from_toml(&text, &name)
    }

    /// Parses the text of an operator configuration; `source` names it in messages and is the file a relative
    /// `[egress] ca_certificates` path is resolved against (its directory; the working directory when it has
    /// none). The CA file is read and checked here ([`job_policy::egress::CaCertificates::parse`]).
    pub fn from_toml(text: &str, source: &str) -> Result<OperatorPolicy, OperatorConfigError> {
        let raw: RawOperator = toml::from_str(text).map_err(|e| OperatorConfigError::Parse {
            path: source.to_owned(),
            why: e.to_string(),
        })?;
        let mut p = OperatorPolicy {
            source: source.to_owned(),
            ..OperatorPolicy::default()
        };
        if let Some(names) = raw.env.and_then(|e| e.passthrough) {
            p.passthrough = names;
        }
        if let Some(read) = raw.sandbox.and_then(|s| s.read) {
            p.read = read;
        }
        if let Some(e) = raw.egress {
            let entry = |key: &'static str, why: String| OperatorConfigError::Entry {
                path: source.to_owned(),
                key,
                why,
            };
            p.egress.allow_networks = job_policy::addr::AllowNetworks::parse(
                e.allow_networks.as_deref().unwrap_or_default(),
            )
            .map_err(|e| entry("egress.allow_networks", e.to_string()))?;
            p.egress.upstream_proxy = e
                .upstream_proxy
                .as_deref()
                .map(job_policy::egress::UpstreamProxy::parse)
                .transpose()
                .map_err(|e| entry("egress.upstream_proxy", e.to_string()))?;
            if let Some(file) = &e.ca_certificates {
                p.egress.ca_certificates = Some(
                    read_ca_certificates(file, source)
                        .map_err(|why| entry("egress.ca_certificates", why))?,
                );
            }
        }
        p.check().map_err(|(key, why)| OperatorConfigError::Entry {
            path: source.to_owned(),
            key,
            why,
        })?;
        Ok(p)
    }

    /// The same policy with `names` added to the passthrough list and `read` to the read list (the CLI's
    /// flags), checked again.
    pub fn with_extra(
        mut self,
        names: &[String],
        read: &[String],
    ) -> Result<OperatorPolicy, OperatorConfigError> {
        self.passthrough.extend(names.iter().cloned());
        self.read.extend(read.iter().cloned());
        if !names.is_empty() || !read.is_empty() {
            self.source = format!("{} and the command line", self.source);
        }
        let source = self.source.clone();
        self.check()
            .map_err(|(key, why)| OperatorConfigError::Entry {
                path: source,
                key,
                why,
            })?;
        Ok(self)
    }

    /// Even the operator cannot pass through a name that changes what runs, nor show a credential path.
    fn check(&self) -> Result<(), (&'static str, String)> {
        for n in &self.passthrough {
            let name = n.strip_suffix('*').unwrap_or(n);
            if name.is_empty() {
                return Err(("env.passthrough", "`*` alone would allow every name".into()));
            }
            if let Some(why) = env_name_denied(name) {
                return Err(("env.passthrough", why));
            }
        }
        for r in &self.read {
            let p = expand(r, None).map_err(|why| ("sandbox.read", why))?;
            if r.starts_with('/') {
                check_read_path(&p, None).map_err(|why| ("sandbox.read", why.to_string()))?;
            }
        }
        Ok(())
    }

    /// Whether the job may pass `name` through.
    pub fn allows_env(&self, name: &str) -> bool {
        self.passthrough.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => a == name,
        })
    }

    /// The passthrough list as one line, for messages.
    pub fn passthrough_line(&self) -> String {
        if self.passthrough.is_empty() {
            "none".to_owned()
        } else {
            self.passthrough.join(" ")
        }
    }

    /// The read roots with `~/` expanded against `home` (left as a literal `~` component without one).
    pub fn read_roots(&self, home: Option<&Path>) -> Vec<PathBuf> {
        self.read
            .iter()
            .filter_map(|r| expand(r, home).ok())
            .collect()
    }

    /// Whether `path` (absolute, lexically normal, `~/` already expanded against the same `home`) is one of
    /// the operator's read roots or lies under one, compared component by component.
    pub fn allows_read(&self, path: &Path, home: Option<&Path>) -> bool {
        self.read_roots(home)
            .iter()
            .any(|root| is_at_or_under(path, root))
    }

    /// Whether the policy asks nothing of the runner's machine beyond the built-in defaults (the `vm` tier's
    /// guest has neither this host's environment nor its files; only `[egress]` applies there).
    pub fn only_egress(&self) -> bool {
        let d = OperatorPolicy::default();
        self.passthrough == d.passthrough && self.read.is_empty()
    }

    /// The read list as one line, for messages.
    pub fn read_line(&self) -> String {
        if self.read.is_empty() {
            "none".to_owned()
        } else {
            self.read.join(" ")
        }
    }
}

/// Reads and checks the operator's `ca_certificates` file, `file` relative to the directory of `source` (the
/// operator file) unless absolute.
fn read_ca_certificates(
    file: &str,
    source: &str,
) -> Result<job_policy::egress::CaCertificates, String> {
    use job_policy::egress::{CaCertificates, MAX_CA_BYTES};
    use std::io::Read;
    if file.is_empty() {
        return Err("an empty path".into());
    }
    let path = match Path::new(source).parent() {
        Some(dir) if Path::new(file).is_relative() => dir.join(file),
        _ => PathBuf::from(file),
    };
    let shown = path.display().to_string();
    let f = std::fs::File::open(&path).map_err(|e| format!("{shown}: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_CA_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: {e}"))?;
    CaCertificates::parse(&bytes, &shown).map_err(|e| e.to_string())
}

/// `raw` (absolute or `~/...`) as a path, `~` expanded against `home` when given.
pub fn expand(raw: &str, home: Option<&Path>) -> Result<PathBuf, String> {
    let p = if let Some(rest) = raw.strip_prefix("~/") {
        match home {
            Some(h) => h.join(rest),
            None => Path::new("/~").join(rest),
        }
    } else if raw.starts_with('/') {
        PathBuf::from(raw)
    } else {
        return Err(format!("`{raw}`: must be absolute or start with `~/`"));
    };
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("`{raw}`: `..` is not allowed"));
    }
    Ok(p)
}

/// Whether `path` equals `root` or lies under it, by whole components (`/opt/ab` is not under `/opt/a`).
pub fn is_at_or_under(path: &Path, root: &Path) -> bool {
    let norm = |p: &Path| -> Vec<std::ffi::OsString> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_owned()),
                _ => None,
            })
            .collect()
    };
    let (p, r) = (norm(path), norm(root));
    !r.is_empty() && p.len() >= r.len() && p[..r.len()] == r[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_allow_the_short_list_and_prefixes() {
        let p = OperatorPolicy::default();
        for n in ["TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CI"] {
            assert!(p.allows_env(n), "{n}");
        }
        for n in [
            "HOME_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "TERMINFO",
            "GITHUB_TOKEN",
            "LC",
        ] {
            assert!(!p.allows_env(n), "{n}");
        }
        assert!(!p.allows_read(Path::new("/usr/share"), None));
    }

    #[test]
    fn a_file_replaces_the_lists_and_refuses_what_no_operator_may_allow() {
        let p = OperatorPolicy::from_toml(
            "[env]\npassthrough = [\"TERM\", \"RUST_*\"]\n[sandbox]\nread = [\"~/.cargo\", \"/opt/tools\"]\n",
            "op.toml",
        )
        .expect("load");
        assert!(p.allows_env("RUST_BACKTRACE") && !p.allows_env("LANG"));
        let home = Path::new("/home/op");
        assert!(p.allows_read(Path::new("/home/op/.cargo/bin"), Some(home)));
        assert!(p.allows_read(Path::new("/opt/tools"), Some(home)));
        assert!(!p.allows_read(Path::new("/opt/toolsx"), Some(home)));
        assert!(!p.allows_read(Path::new("/opt"), Some(home)));
        for bad in [
            "[env]\npassthrough = [\"LD_PRELOAD\"]\n",
            "[env]\npassthrough = [\"*\"]\n",
            "[env]\npassthrough = [\"GIT_*\"]\n",
            "[sandbox]\nread = [\"relative\"]\n",
            "[sandbox]\nread = [\"/run/docker.sock\"]\n",
            "[sandbox]\nread = [\"/opt/../etc\"]\n",
            "[other]\nx = 1\n",
            "[egress]\nallow_networks = [\"127.0.0.0/8\"]\n",
            "[egress]\nallow_networks = [\"registry.example\"]\n",
            "[egress]\nupstream_proxy = \"https://proxy.example:3128\"\n",
            "[egress]\nother = 1\n",
        ] {
            let e = OperatorPolicy::from_toml(bad, "op.toml").expect_err(bad);
            assert!(e.to_string().starts_with("op.toml"), "{e}");
        }
    }

    #[test]
    fn the_egress_table_is_read_and_its_bad_entries_are_named() {
        let p = OperatorPolicy::from_toml(
            "[egress]\nallow_networks = [\"10.20.0.0/16\", \"127.0.0.1/32\"]\nupstream_proxy = \"http://10.0.0.5:3128\"\n",
            "op.toml",
        )
        .expect("load");
        assert_eq!(
            p.egress.allow_networks.entries(),
            vec!["10.20.0.0/16".to_string(), "127.0.0.1/32".to_string()]
        );
        assert_eq!(
            p.egress.upstream_proxy.as_ref().map(|u| u.url()),
            Some("http://10.0.0.5:3128".to_string())
        );
        assert!(p.only_egress());
        assert!(OperatorPolicy::default().egress.is_empty());
        let e = OperatorPolicy::from_toml(
            "[egress]\nallow_networks = [\"10.0.0.0/8\", \"169.254.0.0/16\"]\n",
            "/etc/fenced-run/operator.toml",
        )
        .expect_err("link-local range");
        let e = e.to_string();
        assert!(
            e.starts_with("/etc/fenced-run/operator.toml: egress.allow_networks: `169.254.0.0/16`"),
            "{e}"
        );
        let e =
            OperatorPolicy::from_toml("[egress]\nupstream_proxy = \"proxy.example\"\n", "op.toml")
                .expect_err("no scheme")
                .to_string();
        assert!(
            e.starts_with("op.toml: egress.upstream_proxy: `proxy.example`"),
            "{e}"
        );
        let with_env =
            OperatorPolicy::from_toml("[env]\npassthrough = [\"TERM\"]\n", "op.toml").expect("env");
        assert!(!with_env.only_egress());
    }

    #[test]
    fn the_ca_certificates_file_is_read_beside_the_operator_file_and_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let ca = concat!(
            "-----BEGIN CERTIFICATE-----\n",
            "MIIBqzCCAVGgAwIBAgIUTVViumSfOSjTpQ2ubY2o/aVmUGkwCgYIKoZIzj0EAwIw\n",
            "IjEgMB4GA1UEAwwXZmVuY2VkLXJ1biB1bml0LXRlc3QgQ0EwIBcNMjYxMjA1MDkz\n",
            "ODI2WhgPMjEyNjExMTEwOTM4MjZaMCIxIDAeBgNVBAMMF2ZlbmNlZC1ydW4gdW5p\n",
            "dC10ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEe6p/nLW3fRXCg8Se\n",
            "Q7VNfMlA+ICS86yylCoVRh61X09XZVZ/enJNCwWnj52l2W6z+l42ePJ2GM3T0a9D\n",
            "hEesKKNjMGEwHQYDVR0OBBYEFAW9+cJ2wX12MkcIGc6QvhxRjrEOMB8GA1UdIwQY\n",
            "MBaAFAW9+cJ2wX12MkcIGc6QvhxRjrEOMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P\n",
            "AQH/BAQDAgIEMAoGCCqGSM49BAMCA0gAMEUCIEJ3+KJvSBa3Eg0glfJRmIc08OFT\n",
            "M5NvIj6/zlfW/v1RAiEAvLx2fbDhskhwoT1VH4t8rS2Q0CzMad2LQMewRT/Rh4w=\n",
            "-----END CERTIFICATE-----\n"
        );
        std::fs::write(dir.path().join("ca.pem"), ca).expect("ca");
        std::fs::write(dir.path().join("bad.pem"), "no certificate\n").expect("bad");
        let op = dir.path().join("operator.toml");
        std::fs::write(&op, "[egress]\nca_certificates = \"ca.pem\"\n").expect("op");
        let p = OperatorPolicy::load(&op).expect("load");
        let got = p.egress.ca_certificates.as_ref().expect("ca");
        assert_eq!(got.subjects(), ["CN=fenced-run unit-test CA"]);
        assert_eq!(got.pem(), ca);
        assert!(!p.egress.is_empty() && p.only_egress());
        let abs = dir.path().join("ca.pem");
        let p = OperatorPolicy::from_toml(
            &format!(
                "[egress]\nca_certificates = {:?}\n",
                abs.display().to_string()
            ),
            "elsewhere/op.toml",
        )
        .expect("absolute path");
        assert!(p.egress.ca_certificates.is_some());
        std::fs::write(&op, "[egress]\nca_certificates = \"bad.pem\"\n").expect("op");
        let e = OperatorPolicy::load(&op).expect_err("bad").to_string();
        let bad = dir.path().join("bad.pem");
        assert_eq!(
            e,
            format!(
                "{}: egress.ca_certificates: {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE----- blocks)",
                op.display(),
                bad.display()
            )
        );
        std::fs::write(&op, "[egress]\nca_certificates = \"missing.pem\"\n").expect("op");
        let e = OperatorPolicy::load(&op).expect_err("missing").to_string();
        assert!(
            e.contains("egress.ca_certificates: ") && e.contains("missing.pem: "),
            "{e}"
        );
    }
}
