//! The fenced run: prepare the repository, run the install phase behind the egress relay, make the cut, run
//! the test phase with no network, read the counts, classify the outcome and tear everything down. The
//! result is always a [`Verdict`]; nothing of the run is left on the host afterwards. This file holds the
//! sequence; each step is its own module.

mod egress;
mod options;
mod outcome;
mod output;
mod phase;
mod prepare;
mod read_paths;
mod record;

pub use egress::{EgressProvider, EgressSession, EgressStartError, ProxyEgress};
pub use options::{
    random_nonce, PhaseHook, RunOptions, TaskImage, ToolchainError, ToolchainRoot, AGENT_VERSION,
    RELAY_PORT, SANDBOX_ID, SANDBOX_PATH,
};
pub use output::Output;
pub use read_paths::READ_PATH_MAX_ENTRIES;

use crate::fence::rundir::RunDir;
use crate::fence::spec::{self, ForwardSpec};
use crate::fence::{classify, fetch, home, repo};
use attestation::transcript::{self, Event};
use attestation::verdict::{
    ImageInfo, Inputs, InstallPhase, Outcome, RepositorySource, TestNetwork, TestPhase, Verdict,
};
use intake::job::{AllowEntry, InstallSpec, Job};
use output::tail_with_header;
use phase::{absorb, PhaseCtx};
use read_paths::resolve_read_paths;
use record::{applied_limits, check_after_test, finding, restored, toolchain_pins};
use std::fs;
use std::path::{Path, PathBuf};

/// Runs `job`, handed over in code (not through intake), in the fence and returns its verdict (never panics
/// on outside input; refusals are verdicts). Its repository is read from the job's own `repository.path`, or
/// fetched in the install sandbox from its `repository.url` (intake's address check is not made here: a job
/// handed over in code is the caller's). A bundle intake accepted goes through
/// [`crate::fence::input::run_accepted`] instead.
pub fn run_job(job: &Job, opts: &RunOptions) -> Verdict {
    run_fenced(job, None, opts)
}

/// The verdict's inputs before the repository is prepared: the job file's hash and the nonce.
fn inputs_of(job: &Job, opts: &RunOptions) -> Inputs {
    Inputs {
        commit: None,
        tree: None,
        patch_sha256: None,
        job_sha256: Some(job.sha256.clone()),
        nonce: opts.nonce.clone(),
        protect: Vec::new(),
        test_tree: None,
    }
}

/// The fenced run of a loaded job; `repository` is where intake left the repository as a directory (`None`:
/// the job's own `repository.path`, resolved against its directory).
pub(crate) fn run_fenced(job: &Job, repository: Option<&Path>, opts: &RunOptions) -> Verdict {
    let inputs = inputs_of(job, opts);
    let refuse = |stage: &str, reason: &str, inputs: Inputs| {
        let mut v = Verdict::refused(stage, reason, opts.isolation, inputs, AGENT_VERSION);
        v.limits = applied_limits(job);
        v
    };
    let root = nix::unistd::geteuid().is_root();
    let home = opts
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .unwrap_or_default();
    let read_paths = match resolve_read_paths(job, &home, &opts.operator) {
        Ok(p) => p,
        Err(e) => return refuse("sandbox", &e, inputs),
    };
    if let Err(e) = ToolchainRoot::for_job(opts.toolchains.as_ref(), job) {
        return refuse("normalise", &e.to_string(), inputs);
    }
    if opts.tests_dir.is_some() && opts.task_image.is_none() {
        return refuse(
            "environment",
            "a task bundle runs on the image its Dockerfile builds (stage 6), and none was built for this run",
            inputs,
        );
    }
    let dir = match RunDir::create(job.limits.disk_mib, root) {
        Ok(d) => d,
        Err(e) => return refuse("fence", &e, inputs),
    };
    let mut verdict = run_in(job, repository, opts, &dir, read_paths, root, inputs);
    for left in dir.teardown() {
        verdict
            .findings
            .push(finding("teardown", "left-on-host", left));
    }
    verdict
}

fn run_in(
    job: &Job,
    repository: Option<&Path>,
    opts: &RunOptions,
    dir: &RunDir,
    read_paths: Vec<PathBuf>,
    root: bool,
    mut inputs: Inputs,
) -> Verdict {
    let refuse = |stage: &str, reason: &str, inputs: Inputs| {
        let mut v = Verdict::refused(stage, reason, opts.isolation, inputs, AGENT_VERSION);
        v.limits = applied_limits(job);
        v
    };
    let (uid, gid) = if root {
        (SANDBOX_ID, SANDBOX_ID)
    } else {
        (0, 0)
    };
    let socket = dir.path().join("egress.sock");
    // A repository named by URL is fetched first, in the install sandbox through the egress proxy; the
    // session it starts is the install phase's too (a run has one install network).
    let mut session = None;
    let mut source = None;
    let fetched = match (&job.repository.url, &job.repository.commit, &job.install) {
        (Some(url), Some(pin), Some(install)) => {
            let ctx = FetchCtx {
                job,
                opts,
                dir,
                read_paths: &read_paths,
                root,
                uid,
                gid,
                socket: &socket,
            };
            opts.phase_starts("fetch");
            match ctx.fetch(url, pin, install) {
                Ok(f) => {
                    session = f.session;
                    source = Some(f.source);
                    Some(f.dir)
                }
                Err(v) => return *v,
            }
        }
        (Some(url), _, _) => {
            return refuse(
                "repository",
                &format!(
                    "repository.url = `{url}` needs `commit` (the full commit id) and an [install] table whose \
                     allow names the URL's host:port (the job loader checks both)"
                ),
                inputs,
            )
        }
        _ => None,
    };
    let with_source = |mut v: Verdict, session: Option<Box<dyn EgressSession>>| {
        if let Some(mut s) = source.clone() {
            if let Some(sess) = session {
                s.egress = sess.finish();
            }
            v.repository = Some(s);
        }
        v
    };
    opts.phase_starts("prepare");
    let prep = match prepare::prepare(job, repository, fetched.as_deref(), dir, &mut inputs) {
        Ok(p) => p,
        Err(r) => return with_source(refuse(&r.stage, &r.reason, inputs), session),
    };
    if let Some(f) = &fetched {
        let _ = fs::remove_dir_all(f);
    }
    let prepare::Prepared {
        repo_dir,
        repo: prepared,
        protected,
        undone,
        test_command: (test_command, test_source),
    } = prep;
    let home_dir = dir.fs.join("home");
    let setup = (|| -> Result<(), String> {
        fs::create_dir(&home_dir).map_err(|e| format!("{}: {e}", home_dir.display()))?;
        if root {
            for d in [&repo_dir, &home_dir] {
                repo::chown_tree(d, uid, gid).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })();
    if let Err(e) = setup {
        return with_source(refuse("fence", &e, inputs), session);
    }

    let mut verdict = Verdict::new(
        attestation::verdict::Outcome::TestsPassed,
        opts.isolation,
        inputs,
        AGENT_VERSION,
    );
    verdict.limits = applied_limits(job);
    verdict.repository = source.clone();
    verdict.protected = undone;
    // A fetched repository's stage-5 findings, where a bundle's come from intake (the same kinds, first).
    verdict
        .findings
        .extend(crate::fence::input::verdict_findings(&prepared.scan));
    verdict.findings.extend(prepare::test_time_findings(
        job,
        &repo_dir,
        &test_command,
        &verdict.protected,
    ));
    verdict.image = ToolchainRoot::for_job(opts.toolchains.as_ref(), job)
        .ok()
        .flatten()
        .map(|t| ImageInfo {
            toolchains: t.toolchains.clone(),
            root_hash: t.root_hash.clone(),
            digest: None,
        });
    if let (Some(img), Some(_)) = (&opts.task_image, &opts.tests_dir) {
        verdict.image = Some(ImageInfo {
            toolchains: Vec::new(),
            root_hash: img.root_hash.clone(),
            digest: Some(img.digest.clone()),
        });
    }
    verdict.toolchain_pins = toolchain_pins(job, opts, &repo_dir);
    for note in &prepared.notes {
        verdict
            .findings
            .push(finding("commit", "commit-unverified", note.clone()));
    }
    let ctx = PhaseCtx {
        job,
        opts,
        dir,
        read_paths: &read_paths,
        root,
        uid,
        gid,
        repo_dir: &repo_dir,
        home_dir: &home_dir,
        protect: None,
    };

    if let Some(install) = &job.install {
        let session = match session.take() {
            Some(s) => Some(s),
            None => match start_egress(opts, &install.allow, &socket) {
                Ok(s) => Some(s),
                Err(e) => {
                    verdict.findings.push(finding("install", "egress-proxy", e));
                    None
                }
            },
        };
        let forward = session.as_ref().map(|_| ForwardSpec {
            port: RELAY_PORT,
            socket: socket.clone(),
        });
        opts.phase_starts("install");
        let allow: Vec<String> = install.allow.iter().map(|a| a.to_string()).collect();
        opts.record(Event::InstallStart {
            command: install.command.clone(),
            allowlist_sha256: transcript::allowlist_sha256(&allow),
            allow,
        });
        let run = ctx.phase(
            "install",
            &install.command,
            install.timeout_seconds,
            forward,
            None,
        );
        let egress = session.map(|s| s.finish()).unwrap_or_default();
        let _ = fs::remove_file(&socket);
        // Each connection the proxy judged, in its order, once the proxy stopped (its byte counts known).
        for e in &egress {
            opts.record(Event::egress(e));
        }
        verdict.install = Some(InstallPhase {
            command: install.command.clone(),
            source: "job".into(),
            exit_code: run.report.exit_code,
            signal: run.report.signal,
            duration_ms: run.report.duration_ms,
            egress,
            env_names: run.env_names.clone(),
            sandbox: run.sandbox.clone(),
            operator_egress: egress::operator_record(&opts.operator.egress),
        });
        verdict.output_tail.install = tail_with_header(&run.header, &run.output);
        absorb(&mut verdict, &run);
        opts.phase_starts("cut");
        // The cut: the install namespace must be gone and every process of it dead before tests start.
        let cut_held = run.left_after_teardown == 0 && run.report.namespace_dead;
        opts.record(Event::Cut {
            pid1_reaped: run.report.namespace_dead,
            processes_left: run.left_after_teardown,
            held: cut_held,
        });
        if !cut_held {
            verdict.findings.push(finding(
                "cut",
                "cut-not-verified",
                format!(
                    "after the install phase {} process(es) remained and PID 1 dead = {}; the test phase was not started",
                    run.left_after_teardown, run.report.namespace_dead
                ),
            ));
            verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
            return verdict;
        }
        let egress = verdict.install.as_ref().map_or(&[][..], |i| &i.egress[..]);
        if let Some((outcome, why)) = classify::install_stops(&run.facts, egress) {
            verdict
                .findings
                .push(finding("install", "install-phase", why));
            verdict.set_outcome(outcome);
            return verdict;
        }
        if let Some(p) = &protected {
            let owner = root.then_some((uid, gid));
            match p.restore(&repo_dir, owner) {
                Ok(c) => verdict
                    .protected
                    .extend(c.into_iter().map(|c| restored(c, "install"))),
                Err(e) => {
                    verdict
                        .findings
                        .push(finding("protect", "protect", e.to_string()));
                    verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
                    return verdict;
                }
            }
        }
    }
    // The test phase's HOME: a fresh one holding only the install phase's caches and installed dependencies.
    let test_home = if job.install.is_some() {
        let to = dir.fs.join("home-test");
        let owner = root.then_some((uid, gid));
        match home::carry_over(&home_dir, &to, owner, Path::new(spec::SANDBOX_HOME)) {
            Ok(c) => {
                if let Some(d) = c.describe() {
                    verdict.findings.push(finding("cut", "home-not-carried", d));
                }
                to
            }
            Err(e) => {
                verdict.findings.push(finding("cut", "home", e.to_string()));
                verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
                return verdict;
            }
        }
    } else {
        home_dir.clone()
    };
    // The protected paths go read-only for the whole test phase: no hard link elsewhere may reach their bytes.
    let plan = match &protected {
        Some(p) => match p
            .unshare_links(&repo_dir, root.then_some((uid, gid)))
            .and_then(|_| p.bind_plan(&repo_dir))
        {
            Ok(plan) => Some(plan),
            Err(e) => {
                verdict
                    .findings
                    .push(finding("protect", "protect", e.to_string()));
                verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
                return verdict;
            }
        },
        None => None,
    };
    let test_ctx = PhaseCtx {
        home_dir: &test_home,
        protect: plan.as_ref(),
        ..ctx
    };
    // What the test phase runs: a task's pristine tests/ (never written by the first phase), or the repository
    // with its protected paths restored.
    let test_tree = match (&opts.tests_dir, &protected) {
        (Some(tests), _) => Some(repo::tree_hash(tests).map_err(|e| e.to_string())),
        (None, Some(p)) => Some(p.tree().map_err(|e| e.to_string())),
        (None, None) => None,
    };
    match test_tree {
        Some(Ok(t)) => verdict.inputs.test_tree = Some(t),
        Some(Err(e)) => {
            verdict.findings.push(finding("protect", "protect", e));
            verdict.set_outcome(attestation::verdict::Outcome::EnvironmentExhausted);
            return verdict;
        }
        None => {}
    }

    let cut = job.install.as_ref().map(|_| {
        "cut: the install phase's PID 1 was reaped (so every process of its namespace was dead) and no \
         install process was left before this phase started; HOME is a fresh one into which only the install \
         phase's package caches and installed dependencies were moved (docs/fence.md, HOME across the cut)"
    });
    opts.phase_starts("test");
    opts.record(Event::TestStart {
        command: test_command.clone(),
    });
    let run = test_ctx.phase("test", &test_command, job.test.timeout_seconds, None, cut);
    verdict.test = Some(TestPhase {
        command: test_command.clone(),
        source: test_source,
        exit_code: run.report.exit_code,
        signal: run.report.signal,
        duration_ms: run.report.duration_ms,
        network: TestNetwork::None,
        env_names: run.env_names.clone(),
        sandbox: run.sandbox.clone(),
    });
    verdict.output_tail.test = tail_with_header(&run.header, &run.output);
    absorb(&mut verdict, &run);
    opts.phase_starts("classify");

    outcome::record_test_outcome(&mut verdict, job, &repo_dir, &run);
    opts.record(Event::TestEnd {
        exit_code: run.report.exit_code.map(i64::from),
        signal: run.report.signal.map(i64::from),
        passed: verdict.tests.as_ref().map(|c| c.passed),
        failed: verdict.tests.as_ref().map(|c| c.failed),
        skipped: verdict.tests.as_ref().map(|c| c.skipped),
    });
    // What the tests ran is what the verdict signs: the protected paths hashed again now the phase is over.
    if let Some(p) = &protected {
        check_after_test(&mut verdict, p, &repo_dir, &dir.fs.join("protected-after"));
    }
    verdict
}

/// Starts the install network's egress proxy session on `socket`, or says why there is none.
fn start_egress(
    opts: &RunOptions,
    allow: &[AllowEntry],
    socket: &Path,
) -> Result<Box<dyn EgressSession>, String> {
    match &opts.proxy {
        Some(p) => p
            .start_with(allow, socket, &opts.operator.egress)
            .map_err(|e| format!("the egress proxy did not start: {e}")),
        None => Err("no egress proxy configured: the install phase had loopback only".into()),
    }
}

/// What the fetch of `[repository] url` needs of the run.
struct FetchCtx<'a> {
    job: &'a Job,
    opts: &'a RunOptions,
    dir: &'a RunDir,
    read_paths: &'a [PathBuf],
    root: bool,
    uid: u32,
    gid: u32,
    socket: &'a Path,
}

/// A fetch that succeeded: the directory it wrote, the verdict's record, the egress session to reuse.
struct Fetched {
    dir: PathBuf,
    source: RepositorySource,
    session: Option<Box<dyn EgressSession>>,
}

impl FetchCtx<'_> {
    /// Runs the fetch phase ([`fetch::script`]) in the install sandbox with the job's install allowlist. A
    /// failure is the run's verdict ([`classify::fetch_stops`]), carrying the fetch's egress and output.
    fn fetch(&self, url: &str, pin: &str, install: &InstallSpec) -> Result<Fetched, Box<Verdict>> {
        let inputs = inputs_of(self.job, self.opts);
        let mut source = RepositorySource {
            url: url.to_owned(),
            fetch: "failed".into(),
            duration_ms: 0,
            egress: Vec::new(),
        };
        let ended = |outcome: Outcome, why: String, source: RepositorySource, tail: String| {
            let mut v = if outcome == Outcome::Refused {
                Verdict::refused(
                    "repository",
                    &format!("fetching {url} at {pin}: {why}"),
                    self.opts.isolation,
                    inputs.clone(),
                    AGENT_VERSION,
                )
            } else {
                let mut v =
                    Verdict::new(outcome, self.opts.isolation, inputs.clone(), AGENT_VERSION);
                v.findings.push(finding(
                    "repository",
                    "fetch",
                    format!("fetching {url} at {pin}: {why}; no test ran"),
                ));
                v
            };
            v.limits = applied_limits(self.job);
            v.repository = Some(source);
            v.output_tail.install = tail;
            Box::new(v)
        };
        if let Some(why) = fetch::object_format_refusal(pin) {
            let mut v = Verdict::refused(
                "commit",
                &format!("{url} at {pin}: {why}"),
                self.opts.isolation,
                inputs,
                AGENT_VERSION,
            );
            v.limits = applied_limits(self.job);
            v.repository = Some(source);
            return Err(Box::new(v));
        }
        let session = match start_egress(self.opts, &install.allow, self.socket) {
            Ok(s) => s,
            Err(e) => {
                return Err(ended(
                    Outcome::EnvironmentExhausted,
                    format!("the repository is fetched through the egress proxy, and {e}"),
                    source,
                    String::new(),
                ))
            }
        };
        let fetch_dir = self.dir.fs.join("fetch");
        let home = self.dir.fs.join("fetch-home");
        let made = (|| -> Result<(), String> {
            for d in [&fetch_dir, &home] {
                fs::create_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
                if self.root {
                    std::os::unix::fs::lchown(d, Some(self.uid), Some(self.gid))
                        .map_err(|e| format!("{}: {e}", d.display()))?;
                }
            }
            Ok(())
        })();
        if let Err(e) = made {
            source.egress = session.finish();
            return Err(ended(
                Outcome::EnvironmentExhausted,
                e,
                source,
                String::new(),
            ));
        }
        let ctx = PhaseCtx {
            job: self.job,
            opts: self.opts,
            dir: self.dir,
            read_paths: self.read_paths,
            root: self.root,
            uid: self.uid,
            gid: self.gid,
            repo_dir: &fetch_dir,
            home_dir: &home,
            protect: None,
        };
        let forward = ForwardSpec {
            port: RELAY_PORT,
            socket: self.socket.to_owned(),
        };
        let command = fetch::script(url, pin, RELAY_PORT);
        let run = ctx.phase(
            "fetch",
            &command,
            install.timeout_seconds,
            Some(forward),
            Some("fetch: [repository] url, the pinned commit only, read afterwards as data by the runner"),
        );
        let _ = fs::remove_dir_all(&home);
        source.duration_ms = run.report.duration_ms;
        let tail = tail_with_header(&run.header, &run.output);
        let processes_left = run.left_after_teardown > 0 || !run.report.namespace_dead;
        let mut facts = run.facts.clone();
        // git deletes a pack it could not finish, so the scratch is no longer full when the phase ends: its own
        // words say so (never a line the server sent, which git prefixes with `remote:`).
        facts.disk_full |=
            fetch::out_of_disk(&run.output.head) || fetch::out_of_disk(&run.output.tail);
        let stops = classify::fetch_stops(&facts, &[]);
        match (stops, processes_left) {
            (None, false) => {
                source.fetch = fetch::mode_of(run.report.exit_code)
                    .unwrap_or("failed")
                    .to_owned();
                Ok(Fetched {
                    dir: fetch_dir,
                    source,
                    session: Some(session),
                })
            }
            (None, true) => {
                source.egress = session.finish();
                let _ = fs::remove_dir_all(&fetch_dir);
                Err(ended(
                    Outcome::EnvironmentExhausted,
                    format!(
                        "after the fetch {} process(es) remained and PID 1 dead = {}",
                        run.left_after_teardown, run.report.namespace_dead
                    ),
                    source,
                    tail,
                ))
            }
            (Some(_), _) => {
                source.egress = session.finish();
                let _ = fs::remove_dir_all(&fetch_dir);
                let format = fetch::server_object_format(&run.output.head)
                    .or_else(|| fetch::server_object_format(&run.output.tail));
                let untrusted = fetch::untrusted_certificate(&run.output.head)
                    || fetch::untrusted_certificate(&run.output.tail);
                let fsck = fetch::fsck_error(&run.output.head)
                    .or_else(|| fetch::fsck_error(&run.output.tail));
                let (outcome, why) = match format {
                    // A SHA-256 repository served, a 40-hex pin asked: nothing this runner can read.
                    Some(f) => (
                        Outcome::Refused,
                        format!(
                            "the server's repository has the object format {f}: the runner reads only SHA-1 \
                             repositories (object format sha1)"
                        ),
                    ),
                    None => match (classify::fetch_stops(&facts, &source.egress), fsck) {
                        // Every connection served, and git refused the server's certificate: the trust anchor
                        // is what the environment did not provide.
                        (Some((Outcome::Refused, _)), _) if untrusted => (
                            Outcome::EnvironmentExhausted,
                            "fetch: git did not trust the server's TLS certificate (a private CA is given \
                             through the operator's [egress] ca_certificates)"
                                .into(),
                        ),
                        // Every connection served, and git's fsck refused what the server sent.
                        (Some((Outcome::Refused, _)), Some(e)) => (
                            Outcome::Refused,
                            format!("git's fsck refused an object the server sent ({e})"),
                        ),
                        (Some(stop), _) => stop,
                        (None, _) => (Outcome::EnvironmentExhausted, "the fetch failed".into()),
                    },
                };
                Err(ended(outcome, why, source, tail))
            }
        }
    }
}
