//! What a run is given besides its job file: the runner's options (helper binary, tier, nonce, egress,
//! operator policy) and the toolchain root the sandbox may show as its system directories.

use super::egress::{EgressProvider, ProxyEgress};
use attestation::verdict::Isolation;
use intake::job::Job;
use std::path::PathBuf;
use std::sync::Arc;

/// The agent version recorded in verdicts.
pub const AGENT_VERSION: &str = concat!("fenced-run ", env!("CARGO_PKG_VERSION"));
/// The uid and gid untrusted commands run as when the runner is root (`nobody` on Debian).
pub const SANDBOX_ID: u32 = 65534;
/// The port of the egress relay inside the install phase's network namespace.
pub const RELAY_PORT: u16 = 3128;
/// The PATH of the sandbox (before any `[sandbox] read` directory named `bin`).
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// 32 random bytes, the nonce of a run when the founder gave none.
pub fn random_nonce() -> Vec<u8> {
    use rand::RngCore;
    let mut n = vec![0u8; 32];
    rand::thread_rng().fill_bytes(&mut n);
    n
}

/// Told the name of each phase of a run as it starts (`intake`, `fetch`, `prepare`, `install`, `cut`, `test`,
/// `classify`): the vm tier's agent reports them to the host (guest::agent::progress).
pub type PhaseHook = Arc<dyn Fn(&str) + Send + Sync>;

/// How to run a job (everything that is not in the job file).
#[derive(Clone)]
pub struct RunOptions {
    /// The binary re-executed as the fence helper (`/proc/self/exe` for `fenced-run`).
    pub helper: PathBuf,
    /// The isolation tier recorded in the verdict.
    pub isolation: Isolation,
    /// The founder's nonce recorded in the verdict.
    pub nonce: Vec<u8>,
    /// The egress proxy of the install phase; without one the install phase has loopback only.
    pub proxy: Option<Arc<dyn EgressProvider>>,
    /// The home directory `~` means in `[sandbox] read` (the runner's `HOME` when `None`).
    pub home: Option<PathBuf>,
    /// What the job may take from the runner's machine (passthrough names, read paths): the operator's
    /// configuration, checked by intake's stage 4 and again by the fence.
    pub operator: intake::operator::OperatorPolicy,
    /// The toolchain root filesystem this runner has (`[image] toolchains`): in the `vm` tier the verity-checked
    /// image the agent mounted, in the `process` tier the image's unpacked tree. `None`: a job that names
    /// toolchains is refused.
    pub toolchains: Option<ToolchainRoot>,
    /// The environment image a task bundle runs on, built by stage 6 (`host::task`); `None`: a task is refused.
    pub task_image: Option<TaskImage>,
    /// A task's pristine `tests/` (`run_input` sets it from intake's copy); the test phase shows it read-only
    /// at [`crate::fence::spec::SANDBOX_TESTS`]. `None` for a repository job.
    pub tests_dir: Option<PathBuf>,
    /// Told each phase as it starts ([`PhaseHook`]); `None`: nobody is told.
    pub on_phase: Option<PhaseHook>,
    /// The fence transcript the run writes its events into (docs/transcript.md): intake's result, install
    /// start, each egress connection, the cut, test start and end. `None`: no transcript is written.
    pub transcript: Option<attestation::transcript::Recorder>,
}

/// A task's environment, built from its Dockerfile and converted into a read-only root file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskImage {
    /// The built image's id (`sha256:<hex>`, the digest of its configuration), recorded in the verdict.
    pub digest: String,
    /// The dm-verity root hash (hex) of the image's erofs, recorded in the verdict.
    pub root_hash: String,
    /// The image's root directory (its `/usr`, `/bin`, `/lib`, `/etc`... become the sandbox's).
    pub dir: PathBuf,
}

/// A toolchain root filesystem the sandbox shows as its system directories when the job asks for toolchains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainRoot {
    /// The toolchain sets it holds (sorted).
    pub toolchains: Vec<String>,
    /// Its dm-verity root hash (hex), recorded in the verdict.
    pub root_hash: String,
    /// Its root directory.
    pub dir: PathBuf,
}

impl ToolchainRoot {
    /// The system root for `job`: `Ok(None)` when the job names no toolchain, this root when it holds every
    /// toolchain named, else why not (a refusal).
    pub fn for_job<'a>(
        root: Option<&'a ToolchainRoot>,
        job: &Job,
    ) -> Result<Option<&'a ToolchainRoot>, ToolchainError> {
        let wanted = &job.image.toolchains;
        if wanted.is_empty() {
            return Ok(None);
        }
        let Some(root) = root else {
            return Err(ToolchainError::NoImage {
                wanted: wanted.clone(),
            });
        };
        let missing: Vec<String> = wanted
            .iter()
            .filter(|t| !root.toolchains.contains(t))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(ToolchainError::Missing {
                held: root.toolchains.clone(),
                missing,
            });
        }
        Ok(Some(root))
    }
}

/// Why a job's `[image] toolchains` cannot run on this runner (a refusal of stage `normalise`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolchainError {
    /// The job names toolchains and this runner has no toolchain image.
    #[error(
        "image.toolchains = [{}]: this runner has no toolchain image (build one with `fenced-run image build \
         --toolchains {}`)",
        wanted.join(", "),
        wanted.join(",")
    )]
    NoImage {
        /// The toolchains the job names.
        wanted: Vec<String>,
    },
    /// The runner's image lacks some of them.
    #[error(
        "image.toolchains: this runner's toolchain image holds [{}], not {}",
        held.join(", "),
        missing.join(", ")
    )]
    Missing {
        /// What the image holds.
        held: Vec<String>,
        /// What the job names that it does not hold.
        missing: Vec<String>,
    },
}

impl RunOptions {
    /// Options for the process tier with `helper` as the re-executed binary.
    pub fn new(helper: PathBuf, nonce: Vec<u8>) -> RunOptions {
        RunOptions {
            helper,
            isolation: Isolation::Process,
            nonce,
            proxy: Some(Arc::new(ProxyEgress::system())),
            home: None,
            operator: intake::operator::OperatorPolicy::default(),
            toolchains: None,
            task_image: None,
            tests_dir: None,
            on_phase: None,
            transcript: None,
        }
    }

    /// Writes `event` into the run's transcript, if any (before the step it announces takes effect).
    pub fn record(&self, event: attestation::transcript::Event) {
        if let Some(t) = &self.transcript {
            t.record(event);
        }
    }

    /// Tells [`RunOptions::on_phase`], if any, that `phase` starts.
    pub fn phase_starts(&self, phase: &str) {
        if let Some(h) = &self.on_phase {
            h(phase);
        }
    }
}
