//! One phase in the sandbox: its environment, cgroup, spec file and header lines, the helper started and
//! waited for, its output read and its report loaded, then the teardown checks.

use super::options::{RunOptions, ToolchainRoot, SANDBOX_PATH};
use super::output::Output;
use super::record::finding;
use crate::fence::cgroup::PhaseCgroup;
use crate::fence::classify::{self, PhaseFacts};
use crate::fence::helper::HELPER_ARG;
use crate::fence::protect::BindPlan;
use crate::fence::rundir::RunDir;
use crate::fence::spec::{self, ForwardSpec, PhaseReport, PhaseSpec};
use attestation::verdict::{Finding, Verdict};
use intake::job::Job;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What one phase gave.
pub(super) struct PhaseRun {
    pub(super) report: PhaseReport,
    pub(super) output: Output,
    pub(super) facts: PhaseFacts,
    pub(super) left_after_teardown: u64,
    pub(super) findings: Vec<Finding>,
    pub(super) env_names: Vec<String>,
    pub(super) sandbox: Vec<String>,
    pub(super) header: String,
}

pub(super) fn absorb(verdict: &mut Verdict, run: &PhaseRun) {
    verdict.processes.started += run.report.tasks_started;
    verdict.processes.running_at_end += run.report.running_at_end;
    verdict.processes.left_after_teardown += run.left_after_teardown;
    verdict.findings.extend(run.findings.iter().cloned());
}

pub(super) struct PhaseCtx<'a> {
    pub(super) job: &'a Job,
    pub(super) opts: &'a RunOptions,
    pub(super) dir: &'a RunDir,
    pub(super) read_paths: &'a [PathBuf],
    pub(super) root: bool,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) repo_dir: &'a Path,
    pub(super) home_dir: &'a Path,
    /// The test phase's read-only binds over the repository (`None`: nothing protected, or not the test phase).
    pub(super) protect: Option<&'a BindPlan>,
}

/// The most protected paths a sandbox line names (the rest are counted).
const MAX_NAMED_BINDS: usize = 20;

/// The sandbox line naming the protected paths bound read-only.
fn protected_line(plan: &BindPlan) -> String {
    let mut named: Vec<String> = plan
        .binds
        .iter()
        .take(MAX_NAMED_BINDS)
        .map(|p| {
            let shown = Path::new(spec::SANDBOX_REPO).join(p);
            let mut s = shown.to_string_lossy().into_owned();
            if p.as_os_str().is_empty() {
                s.push_str(" (all of it)");
            }
            s
        })
        .collect();
    if plan.binds.len() > MAX_NAMED_BINDS {
        named.push(format!("and {} more", plan.binds.len() - MAX_NAMED_BINDS));
    }
    let mut line = format!(
        "read-only ([test] protect): {} (bound over the repository, each resolved without following a link; \
         writes, renames, unlinks, chmods and new files there fail; unmounting is denied by the seccomp filter)",
        named.join(" ")
    );
    if !plan.links.is_empty() {
        line.push_str(&format!(
            "; {} protected symbolic link(s) no bind can cover, guarded by the check after the phase",
            plan.links.len()
        ));
    }
    line
}

/// Whether the system root `root` has a regular file (not a link) at [`spec::SYSTEM_CA_BUNDLE`], the file the
/// operator's CA certificates are bound over.
fn system_bundle_is_file(root: &Path) -> bool {
    fs::symlink_metadata(spec::under_root(root, spec::SYSTEM_CA_BUNDLE)).is_ok_and(|m| m.is_file())
}

impl PhaseCtx<'_> {
    /// Where the sandbox's system directories come from: the toolchain root when the job asks for toolchains.
    fn system_root(&self) -> Option<&Path> {
        if let (Some(img), Some(_)) = (&self.opts.task_image, &self.opts.tests_dir) {
            return Some(img.dir.as_path());
        }
        ToolchainRoot::for_job(self.opts.toolchains.as_ref(), self.job)
            .ok()
            .flatten()
            .map(|t| t.dir.as_path())
    }

    /// The operator's CA certificates when `phase` gets them (the install phase and the fetch before it, when
    /// they are set), or a
    /// finding when the system root has no regular file at [`spec::SYSTEM_CA_BUNDLE`] to bind them over.
    fn operator_ca(
        &self,
        phase: &str,
    ) -> Result<Option<&job_policy::egress::CaCertificates>, Finding> {
        let Some(ca) = self.opts.operator.egress.ca_certificates.as_ref() else {
            return Ok(None);
        };
        // The fetch of `[repository] url` is part of the install network (same allowlist, same proxy session).
        if phase != "install" && phase != "fetch" {
            return Ok(None);
        }
        if system_bundle_is_file(self.system_root().unwrap_or(Path::new("/"))) {
            Ok(Some(ca))
        } else {
            Err(finding(
                phase,
                "operator-ca-not-bound",
                format!(
                    "the operator's [egress] ca_certificates were not given to the install phase: {} is not a \
                     regular file in the sandbox's system directories",
                    spec::SYSTEM_CA_BUNDLE
                ),
            ))
        }
    }

    fn env(&self, forward: Option<&ForwardSpec>, ca: bool) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        let mut path = String::new();
        for p in self.read_paths {
            if p.file_name().is_some_and(|n| n == "bin") {
                path.push_str(&p.to_string_lossy());
                path.push(':');
            }
        }
        path.push_str(SANDBOX_PATH);
        env.insert("PATH".into(), path);
        env.insert("HOME".into(), spec::SANDBOX_HOME.into());
        env.insert("TMPDIR".into(), spec::SANDBOX_TMP.into());
        env.insert("LANG".into(), "C.UTF-8".into());
        for name in &self.job.env.passthrough {
            // Intake's stage 4 refused the job already if the operator does not allow a name; a job handed
            // to the fence directly gets the same rule here.
            if !self.opts.operator.allows_env(name) {
                continue;
            }
            if let Ok(v) = std::env::var(name) {
                env.insert(name.clone(), v);
            }
        }
        for (k, v) in &self.job.env.set {
            env.insert(k.clone(), v.clone());
        }
        if let Some(f) = forward {
            let url = format!("http://127.0.0.1:{}", f.port);
            for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                env.insert(k.into(), url.clone());
            }
        }
        if ca {
            for k in spec::CA_BUNDLE_VARS {
                env.insert((*k).into(), spec::SYSTEM_CA_BUNDLE.into());
            }
        }
        env.into_iter().collect()
    }

    fn sandbox_lines(
        &self,
        phase: &str,
        forward: Option<&ForwardSpec>,
        cgroup: Option<&PhaseCgroup>,
        timeout: u64,
    ) -> Vec<String> {
        let l = &self.job.limits;
        let mut lines = vec![if self.root {
            "namespaces: pid (own PID 1), mount, ipc, uts, net; user (the command's own, entered as its uid)"
                .to_owned()
        } else {
            "namespaces: user, pid (own PID 1), mount, ipc, uts, net".to_owned()
        }];
        lines.push(match forward {
            Some(f) => format!("network: loopback only; relay 127.0.0.1:{} -> egress proxy (HTTP_PROXY, HTTPS_PROXY)", f.port),
            None if phase == "install" => "network: loopback only (no egress proxy)".into(),
            None => "network: none (fresh namespace, loopback only)".into(),
        });
        let sys_root = self.system_root().unwrap_or(Path::new("/"));
        let sys: Vec<&str> = spec::SYSTEM_DIRS
            .iter()
            .copied()
            .filter(|d| spec::under_root(sys_root, d).exists())
            .collect();
        match self.system_root() {
            Some(r) => lines.push(format!(
                "read-only: {} (from the toolchain image at {})",
                sys.join(" "),
                r.display()
            )),
            None => lines.push(format!("read-only: {}", sys.join(" "))),
        }
        if !self.read_paths.is_empty() {
            let extra: Vec<String> = self
                .read_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            lines.push(format!("read-only ([sandbox] read): {}", extra.join(" ")));
        }
        if let Some(plan) = self
            .protect
            .filter(|p| phase == "test" && !p.binds.is_empty())
        {
            lines.push(protected_line(plan));
        }
        if phase == "test" && self.opts.tests_dir.is_some() {
            lines.push(format!(
                "read-only: {} (the task bundle's pristine tests/; not shown to the solution phase)",
                spec::SANDBOX_TESTS
            ));
        }
        lines.push(format!(
            "read-write: {} (repository), {} (HOME), {} (TMPDIR), {} (empty at the start of the phase){}",
            spec::SANDBOX_REPO,
            spec::SANDBOX_HOME,
            spec::SANDBOX_TMP,
            spec::SANDBOX_VAR_TMP,
            if self.root {
                format!(" on a {} MiB tmpfs", l.disk_mib)
            } else {
                " (no size limit: not root)".into()
            }
        ));
        lines.push(format!(
            "root: read-only tmpfs; /proc of the sandbox only; /dev: {} and a /dev/shm tmpfs",
            spec::DEVICES.join(" ")
        ));
        lines.push(
            "descriptors: 0 (/dev/null), 1 and 2 (the output pipe) only; the helper closes every inherited \
             descriptor and the command marks all from 3 close-on-exec (close_range)"
                .into(),
        );
        lines.push(
            "keyring: a fresh anonymous session keyring per phase (KEYCTL_JOIN_SESSION_KEYRING)"
                .into(),
        );
        lines.push(crate::fence::seccomp::describe());
        lines.push(if self.root {
            format!(
                "user: uid {} gid {}, no capabilities, no_new_privs",
                self.uid, self.gid
            )
        } else {
            "user: uid 0 of a user namespace mapped to the runner's uid, no_new_privs".into()
        });
        lines.push(format!(
            "limits: wall clock {timeout} s; memory {} MiB, pids {} ({}); RLIMIT_NOFILE {}, RLIMIT_FSIZE {} MiB, RLIMIT_CORE 0",
            l.memory_mib,
            l.pids,
            cgroup.map(|c| c.describe()).unwrap_or_else(|| "not enforced: no cgroup".into()),
            l.open_files,
            l.disk_mib
        ));
        lines
    }

    /// Writes the system bundle of the sandbox's system root followed by the operator's CA certificates to
    /// `to` (mode 0644: the sandbox's uid reads it through the bind).
    fn write_ca_bundle(
        &self,
        to: &Path,
        ca: &job_policy::egress::CaCertificates,
    ) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let sys = spec::under_root(
            self.system_root().unwrap_or(Path::new("/")),
            spec::SYSTEM_CA_BUNDLE,
        );
        let mut bundle = fs::read(&sys).map_err(|e| format!("{}: {e}", sys.display()))?;
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(ca.pem().as_bytes());
        fs::write(to, &bundle).map_err(|e| format!("{}: {e}", to.display()))?;
        fs::set_permissions(to, fs::Permissions::from_mode(0o644))
            .map_err(|e| format!("{}: {e}", to.display()))
    }

    pub(super) fn phase(
        &self,
        phase: &str,
        command: &str,
        timeout_seconds: u64,
        forward: Option<ForwardSpec>,
        note: Option<&str>,
    ) -> PhaseRun {
        let mut findings = Vec::new();
        let ca = self.operator_ca(phase).unwrap_or_else(|f| {
            findings.push(f);
            None
        });
        let env = self.env(forward.as_ref(), ca.is_some());
        let env_names: Vec<String> = env.iter().map(|(k, _)| k.clone()).collect();
        let l = &self.job.limits;
        let cgroup_name = format!(
            "fenced-run-{}-{}-{:08x}",
            std::process::id(),
            phase,
            rand::random::<u32>()
        );
        let cgroup = match PhaseCgroup::create(
            &cgroup_name,
            l.memory_mib.saturating_mul(1024 * 1024),
            l.pids,
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                findings.push(finding(
                    phase,
                    "no-cgroup",
                    format!("memory and pids limits not enforced: {e}"),
                ));
                None
            }
        };
        let mut sandbox =
            self.sandbox_lines(phase, forward.as_ref(), cgroup.as_ref(), timeout_seconds);
        if let Some(ca) = ca {
            sandbox.push(format!(
                "CA bundle: {} read-only, the system bundle plus the operator's [egress] ca_certificates ({} \
                 certificate(s), SHA-256 {}); {} point at it",
                spec::SYSTEM_CA_BUNDLE,
                ca.subjects().len(),
                ca.sha256_hex(),
                spec::CA_BUNDLE_VARS.join(" ")
            ));
        }
        sandbox.extend(note.map(str::to_owned));
        let mut header = format!(
            "# fenced-run {phase} phase: {command}\n# env: {}\n",
            env_names.join(" ")
        );
        for line in &sandbox {
            header.push_str("# sandbox: ");
            header.push_str(line);
            header.push('\n');
        }
        let base = self.dir.path();
        let root_dir = base.join(format!("root-{phase}"));
        let tmp_dir = self.dir.fs.join(format!("tmp-{phase}"));
        let var_tmp_dir = self.dir.fs.join(format!("var-tmp-{phase}"));
        let spec_path = base.join(format!("{phase}.spec.json"));
        let report_path = base.join(format!("{phase}.report.json"));
        let stderr_path = base.join(format!("{phase}.helper.log"));
        let ca_path = base.join(format!("{phase}.ca-certificates.crt"));
        let spec = PhaseSpec {
            phase: phase.into(),
            command: command.into(),
            env,
            root_dir: root_dir.clone(),
            repo_dir: self.repo_dir.to_owned(),
            home_dir: self.home_dir.to_owned(),
            tmp_dir: tmp_dir.clone(),
            var_tmp_dir: Some(var_tmp_dir.clone()),
            read_only_repo: self
                .protect
                .filter(|_| phase == "test")
                .map(|p| p.binds.clone())
                .unwrap_or_default(),
            read_paths: self.read_paths.to_vec(),
            system_root: self.system_root().map(Path::to_path_buf),
            tests_dir: self.opts.tests_dir.clone().filter(|_| phase == "test"),
            ca_bundle: ca.map(|_| ca_path.clone()),
            uid: self.uid,
            gid: self.gid,
            user_ns: !self.root,
            timeout_ms: timeout_seconds.saturating_mul(1000),
            open_files: l.open_files,
            file_size_bytes: l.disk_mib.saturating_mul(1024 * 1024),
            cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            forward,
            report_path: report_path.clone(),
        };
        let mut run = PhaseRun {
            report: PhaseReport::default(),
            output: Output::default(),
            facts: PhaseFacts::default(),
            left_after_teardown: 0,
            findings: Vec::new(),
            env_names,
            sandbox,
            header,
        };
        let prepared = (|| -> Result<(), String> {
            fs::create_dir(&root_dir).map_err(|e| format!("{}: {e}", root_dir.display()))?;
            for d in [&tmp_dir, &var_tmp_dir] {
                fs::create_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
                if self.root {
                    std::os::unix::fs::lchown(d, Some(self.uid), Some(self.gid))
                        .map_err(|e| format!("{}: {e}", d.display()))?;
                }
            }
            if let Some(ca) = ca {
                self.write_ca_bundle(&ca_path, ca)?;
            }
            let json = serde_json::to_vec(&spec).map_err(|e| e.to_string())?;
            fs::write(&spec_path, json).map_err(|e| format!("{}: {e}", spec_path.display()))
        })();
        match prepared {
            Ok(()) => self.spawn(&spec_path, &stderr_path, timeout_seconds, &mut run),
            Err(e) => run.report.setup_error = Some(e),
        }
        if let Some(e) = &run.report.setup_error {
            findings.push(finding(phase, "sandbox-setup", e.clone()));
            // The kernel's answer when a layer could not be applied (the command did not start then).
            run.sandbox
                .push(format!("not applied: {e}; the command was not started"));
        }
        // Teardown checks: the namespace's PID 1 reaped, the cgroup empty, then removed.
        let events = cgroup.as_ref().map(|c| c.events()).unwrap_or_default();
        if let Some(c) = cgroup {
            let left = c.processes();
            run.left_after_teardown += left;
            if left > 0 {
                findings.push(finding(
                    phase,
                    "left-after-teardown",
                    format!("{left} process(es) still in {}", c.describe()),
                ));
            }
            if let Err(e) = c.remove() {
                findings.push(finding("teardown", "left-on-host", format!("cgroup: {e}")));
            }
        }
        let _ = fs::remove_dir_all(&tmp_dir);
        let _ = fs::remove_dir_all(&var_tmp_dir);
        let _ = fs::remove_dir(&root_dir);
        let _ = fs::remove_file(&ca_path);
        let disk_full = self.root
            && run
                .report
                .scratch_free_bytes
                .is_some_and(|free| free < 64 * 1024);
        run.facts = PhaseFacts {
            setup_error: run.report.setup_error.clone(),
            exec_error: run.report.exec_error.clone(),
            exit_code: run.report.exit_code,
            signal: run.report.signal,
            timed_out: run.report.timed_out,
            oom_kills: events.oom_kills,
            pids_max: events.pids_max,
            disk_full,
            toolchain_error: classify::toolchain_error(&run.output.tail)
                .or_else(|| classify::toolchain_error(&run.output.head)),
        };
        run.findings = findings;
        run
    }

    /// Starts the helper, reads the phase's whole output, waits (with a backstop beyond the helper's own
    /// wall clock), and loads its report.
    fn spawn(
        &self,
        spec_path: &Path,
        stderr_path: &Path,
        timeout_seconds: u64,
        run: &mut PhaseRun,
    ) {
        let stderr = match fs::File::create(stderr_path) {
            Ok(f) => f,
            Err(e) => {
                run.report.setup_error = Some(format!("{}: {e}", stderr_path.display()));
                return;
            }
        };
        let child = Command::new(&self.opts.helper)
            .arg(HELPER_ARG)
            .arg(spec_path)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                run.report.setup_error = Some(format!(
                    "cannot start the fence helper {}: {e}",
                    self.opts.helper.display()
                ));
                return;
            }
        };
        let reader = child
            .stdout
            .take()
            .map(|out| std::thread::spawn(move || Output::read_all(out)));
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let backstop = Duration::from_secs(timeout_seconds.saturating_add(30));
        let status = match rx.recv_timeout(backstop) {
            Ok(s) => s.ok(),
            Err(_) => {
                // The helper did not end on its own: kill it; its PID 1 dies with it (PR_SET_PDEATHSIG).
                if let Ok(p) = i32::try_from(pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                rx.recv().ok().and_then(Result::ok)
            }
        };
        if let Some(r) = reader {
            run.output = r.join().unwrap_or_default();
        }
        let report_path = spec_path.with_file_name(
            spec_path
                .file_name()
                .map(|n| n.to_string_lossy().replace(".spec.json", ".report.json"))
                .unwrap_or_default(),
        );
        match fs::read(&report_path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<PhaseReport>(&b).map_err(|e| e.to_string()))
        {
            Ok(r) => run.report = r,
            Err(e) => {
                let log = fs::read_to_string(stderr_path).unwrap_or_default();
                run.report.setup_error = Some(format!(
                    "the fence helper gave no report ({e}); it ended with {}: {}",
                    status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "unknown status".into()),
                    log.trim()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_ca_is_bound_only_over_a_regular_system_bundle() {
        let root = tempfile::tempdir().expect("tmp");
        assert!(!system_bundle_is_file(root.path()), "no bundle at all");
        let certs = root.path().join("etc/ssl/certs");
        fs::create_dir_all(&certs).expect("mkdir");
        std::os::unix::fs::symlink(
            "/etc/ssl/certs/ca-certificates.crt",
            certs.join("ca-certificates.crt"),
        )
        .expect("link");
        assert!(
            !system_bundle_is_file(root.path()),
            "a link is not bound over"
        );
        fs::remove_file(certs.join("ca-certificates.crt")).expect("rm");
        fs::create_dir(certs.join("ca-certificates.crt")).expect("dir");
        assert!(
            !system_bundle_is_file(root.path()),
            "a directory is not bound over"
        );
        fs::remove_dir(certs.join("ca-certificates.crt")).expect("rmdir");
        fs::write(certs.join("ca-certificates.crt"), "pem").expect("bundle");
        assert!(system_bundle_is_file(root.path()));
    }
}
