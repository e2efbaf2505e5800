//! Stage 6 of a task bundle, the first execution: its Dockerfile built into an image with Debian's `buildah`
//! ([`buildah`]), rootless and behind the egress allowlist, base images by digest from the registry the
//! operator names; the result addressed by its image id and converted into a read-only erofs under dm-verity
//! (the toolchain image's format, [`crate::image::rootfs`]), whose root hash the verdict records.

pub mod buildah;
pub mod harden;

use attestation::verdict::EgressRecord;
use guest::fence::run::{EgressProvider, TaskImage};
use intake::task::Task;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The kernel command-line parameter naming a task's image id (guest::agent::verity::PARAM_TASK_IMAGE).
pub const PARAM_TASK_IMAGE: &str = "fenced_run.task_image";

/// The first host uid (and gid) of the 65536 a build's user namespace maps by default: its root is this
/// unprivileged id, never the host's root.
pub const DEFAULT_UID_BASE: u32 = 1_400_000_000;

/// Where the operator's registry is and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// `host[:port]` of the registry every `FROM name@sha256:...` is pulled from.
    pub host: String,
    /// Speak plain HTTP to it (a registry on loopback; never for anything else).
    pub plain_http: bool,
}

impl Registry {
    /// Parses the operator's `--registry HOST[:PORT]`: a host name or IP (IPv6 in brackets) and an optional
    /// port, nothing else (no scheme, no path).
    pub fn parse(text: &str, plain_http: bool) -> Result<Registry, String> {
        let t = text.trim();
        if t.is_empty() || t.contains("://") || t.contains('/') || t.contains('@') {
            return Err(format!(
                "--registry {t:?}: give HOST or HOST:PORT (no scheme, no path)"
            ));
        }
        let (host, port) = match t.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !p.contains(']') => {
                let n: u16 = p.parse().map_err(|_| {
                    format!("--registry {t:?}: port {p:?} is not a number from 1 to 65535")
                })?;
                if n == 0 {
                    return Err(format!("--registry {t:?}: port 0 is not a port"));
                }
                (h, Some(n))
            }
            _ => (t, None),
        };
        intake::job::HostName::parse(host).map_err(|e| format!("--registry: {e}"))?;
        if plain_http {
            let ip = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .ok();
            if !(host == "localhost" || ip.is_some_and(|i| i.is_loopback())) {
                return Err(format!(
                    "--registry-plain-http: {host} is not a loopback address; plain HTTP is for a registry on this \
                     machine only"
                ));
            }
        }
        Ok(Registry {
            host: match port {
                Some(p) => format!("{host}:{p}"),
                None => host.to_owned(),
            },
            plain_http,
        })
    }
}

/// How stage 6 runs on this host.
#[derive(Clone)]
pub struct BuildOptions {
    /// The operator's registry.
    pub registry: Registry,
    /// The egress proxy the build's network goes through (the install phase's).
    pub proxy: Arc<dyn EgressProvider>,
    /// The first host uid of the 65536 the build's user namespace maps (its root is this uid, not the host's).
    pub uid_base: u32,
    /// Where the build's work directory is made.
    pub work_parent: PathBuf,
}

/// Why stage 6 did not produce an image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A tool this stage needs is missing (the package is named).
    #[error("{0}")]
    Missing(String),
    /// The runner could not set the build up (a file, a namespace, the proxy).
    #[error("setting up the build: {0}")]
    Setup(String),
    /// A base image could not be pulled from the operator's registry by its digest.
    #[error("pulling {reference}: {detail}")]
    Pull {
        /// `registry/name@sha256:...`.
        reference: String,
        /// What buildah said (its last lines).
        detail: String,
    },
    /// The build itself failed (a `RUN` step, a denied download, the budget).
    #[error("building the environment failed: {detail}{}", denied_text(.egress))]
    Failed {
        /// What buildah said (its last lines) or why it was stopped.
        detail: String,
        /// Every connection the build tried through the egress proxy.
        egress: Vec<EgressRecord>,
    },
    /// Converting the built tree into the erofs image failed.
    #[error("converting the image: {0}")]
    Convert(String),
    /// The runner was interrupted (SIGINT, SIGTERM) during the build; every process of it was killed.
    #[error("interrupted: every process of the build was killed")]
    Interrupted,
}

fn denied_text(egress: &[EgressRecord]) -> String {
    let denied: Vec<String> = egress
        .iter()
        .filter(|e| !e.allowed)
        .map(|e| format!("{}:{} ({})", e.host, e.port, e.reason))
        .collect();
    if denied.is_empty() {
        String::new()
    } else {
        format!(
            "; the egress proxy denied: {} (not in [environment] allow)",
            denied.join(", ")
        )
    }
}

impl BuildError {
    /// The egress log of a failed build (empty for other errors).
    pub fn egress(&self) -> &[EgressRecord] {
        match self {
            BuildError::Failed { egress, .. } => egress,
            _ => &[],
        }
    }
}

/// A built environment: the image id, its tree, its erofs with the dm-verity root hash, and the build's
/// egress log. The files live in a temporary directory removed when this is dropped.
#[derive(Debug)]
pub struct BuiltImage {
    /// `sha256:<hex>`: the image id buildah gave (the digest of the image's configuration).
    pub digest: String,
    /// The image's root file system as a directory (the process tier's system root).
    pub rootfs: PathBuf,
    /// The erofs image with its dm-verity hash tree appended (the vm tier's disk).
    pub erofs: PathBuf,
    /// The dm-verity root hash (hex).
    pub root_hash: String,
    /// The erofs's size in 4096-byte blocks (its hash tree follows).
    pub data_blocks: u64,
    /// Every connection the build tried through the egress proxy.
    pub egress: Vec<EgressRecord>,
    /// What of stage 6's hardening could not be had on this host (no cgroup).
    pub notes: Vec<String>,
    _dir: tempfile::TempDir,
}

impl BuiltImage {
    /// The kernel command-line parameters that name this image to the guest agent (measured with the
    /// launch): the toolchain image's two, with `task` as its only toolchain, and the image id.
    pub fn cmdline_params(&self) -> String {
        format!(
            "{}=task {}={},{},{} {PARAM_TASK_IMAGE}={}",
            crate::image::rootfs::PARAM_TOOLCHAINS,
            crate::image::rootfs::PARAM_VERITY,
            self.data_blocks,
            self.root_hash,
            crate::image::rootfs::salt(),
            self.digest
        )
    }

    /// The VM's view of this image.
    pub fn vm_environment(&self) -> crate::vm::VmEnvironment {
        crate::vm::VmEnvironment {
            disk: self.erofs.clone(),
            params: self.cmdline_params(),
        }
    }

    /// What the verdict records of the build: every connection it tried ([`egress_finding`]) and, where the
    /// hardening fell short, a `build-no-cgroup` finding saying how.
    pub fn findings(&self) -> Vec<attestation::verdict::Finding> {
        let mut out: Vec<_> = self.egress.iter().map(egress_finding).collect();
        out.extend(self.notes.iter().map(|n| attestation::verdict::Finding {
            stage: "environment".into(),
            path: String::new(),
            kind: "build-no-cgroup".into(),
            detail: n.clone(),
        }));
        out
    }

    /// The fence's view of this image.
    pub fn task_image(&self) -> TaskImage {
        TaskImage {
            digest: self.digest.clone(),
            root_hash: self.root_hash.clone(),
            dir: self.rootfs.clone(),
        }
    }
}

/// Stage 6: builds `task`'s environment (see [`buildah::build`]) with the tier's memory and pids limits
/// (`limits`) and converts it into an erofs image under dm-verity. A SIGINT or SIGTERM noticed meanwhile
/// (with [`harden::InterruptGuard`] installed, as [`prepare`] does) kills every process of the build and
/// ends it with [`BuildError::Interrupted`].
pub fn build(
    task: &Task,
    opts: &BuildOptions,
    limits: &intake::normalise::TierLimits,
) -> Result<BuiltImage, BuildError> {
    let dir = tempfile::Builder::new()
        .prefix("fenced-run-task-build-")
        .tempdir_in(&opts.work_parent)
        .map_err(|e| BuildError::Setup(format!("work directory: {e}")))?;
    let out = buildah::build(
        task,
        opts,
        dir.path(),
        limits.memory_mib.saturating_mul(1024 * 1024),
        limits.pids,
    )?;
    let erofs = dir.path().join("environment.erofs");
    let epoch = crate::image::rootfs::source_date_epoch()
        .map_err(|e| BuildError::Convert(e.to_string()))?;
    let blocks = crate::image::rootfs::make_erofs(&out.rootfs, &erofs, epoch)
        .map_err(|e| BuildError::Convert(e.to_string()))?;
    let root_hash = crate::image::rootfs::append_hash_tree(&erofs, blocks)
        .map_err(|e| BuildError::Convert(e.to_string()))?;
    Ok(BuiltImage {
        digest: out.digest,
        rootfs: out.rootfs,
        erofs,
        root_hash,
        data_blocks: blocks,
        egress: out.egress,
        notes: out.notes,
        _dir: dir,
    })
}

/// Whether `path` (a directory or an archive) is a task bundle, judged cheaply: a directory with `task.toml`
/// and no `job.toml` at its root. Archives are judged by intake.
pub fn looks_like_task(path: &Path) -> bool {
    path.is_dir() && intake::task::is_task_bundle(path)
}

/// What [`prepare`] gives the fence for one input.
pub enum Prepared {
    /// Not a task bundle, or one intake refuses (the fence's own intake says why): run it as it is.
    NotATask,
    /// The environment is built: run with this image (keep it alive until the run ends).
    Built(Box<BuiltImage>),
    /// Stage 6 refused: the verdict says why, with the build's egress log in its findings.
    Refused(Box<attestation::verdict::Verdict>),
}

/// Intake stages 1-5 on `input` (executing nothing), and, when it is an accepted task bundle, stage 6: its
/// environment built ([`build`]). A build that fails is a `refused` verdict at stage `environment`.
pub fn prepare(
    input: &Path,
    intake_opts: &intake::IntakeOptions,
    build_opts: Option<&BuildOptions>,
    isolation: attestation::verdict::Isolation,
    nonce: &[u8],
) -> Prepared {
    let mut report = intake::run_stages(input, intake_opts);
    let task = match (report.accepted, report.task.take()) {
        (true, Some(t)) => t,
        _ => {
            let _ = report.cleanup();
            return Prepared::NotATask;
        }
    };
    let refuse = |reason: String, egress: &[EgressRecord]| {
        let inputs = attestation::verdict::Inputs {
            commit: None,
            tree: None,
            patch_sha256: None,
            job_sha256: Some(task.file.sha256.clone()),
            nonce: nonce.to_vec(),
            protect: Vec::new(),
            test_tree: None,
        };
        let mut v = attestation::verdict::Verdict::refused(
            "environment",
            &reason,
            isolation,
            inputs,
            guest::fence::run::AGENT_VERSION,
        );
        v.findings.extend(egress.iter().map(egress_finding));
        Prepared::Refused(Box::new(v))
    };
    // SIGINT and SIGTERM first kill every process of the build and remove its files and intake's, then end
    // the runner as they would have (the guard, dropped last, raises the signal again).
    let interrupts = harden::InterruptGuard::install();
    let result = match build_opts {
        None => refuse(
            "a task bundle's base images come from the registry the operator names, and none was named \
             (--registry HOST:PORT)"
                .into(),
            &[],
        ),
        Some(o) => match build(&task, o, &intake_opts.tier_limits) {
            Ok(b) => Prepared::Built(Box::new(b)),
            Err(e) => refuse(e.to_string(), e.egress()),
        },
    };
    let _ = report.cleanup();
    drop(interrupts);
    result
}

/// One connection of the build as a verdict finding (stage `environment`).
pub fn egress_finding(e: &EgressRecord) -> attestation::verdict::Finding {
    attestation::verdict::Finding {
        stage: "environment".into(),
        path: String::new(),
        kind: if e.allowed {
            "build-egress-allowed".into()
        } else {
            "build-egress-denied".into()
        },
        detail: format!(
            "{}:{} {} ({}); {} bytes up, {} down",
            e.host,
            e.port,
            if e.allowed { "allowed" } else { "denied" },
            e.reason,
            e.bytes_up,
            e.bytes_down
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_a_host_and_a_port_only() {
        assert_eq!(
            Registry::parse("registry.example:5000", false)
                .expect("ok")
                .host,
            "registry.example:5000"
        );
        assert!(Registry::parse("127.0.0.1:5000", true).is_ok());
        assert!(Registry::parse("[::1]:5000", true).is_ok());
        for bad in [
            "https://registry.example",
            "registry.example/path",
            "",
            "registry.example:0",
            "registry.example:http",
            "user@registry.example",
        ] {
            assert!(Registry::parse(bad, false).is_err(), "{bad}");
        }
        let e =
            Registry::parse("registry.example:5000", true).expect_err("plain http off loopback");
        assert!(e.contains("loopback"), "{e}");
    }
}
