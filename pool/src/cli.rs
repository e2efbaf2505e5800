//! The `fenced-run pool` commands (run as `fenced-run-pool`, which `fenced-run pool ...` executes): `init`,
//! `founder add`, `coordinator`, `worker`, `submit`, `status`, `fetch` and `cancel`. Exit 0 when the command did what it was
//! asked (for `submit --wait`: the run judged), 1 when a run ended without a judged verdict or was refused, 2 on
//! unusable input or an unreachable server.

use crate::store::Store;
use crate::worker::{AttemptActivities, WorkerConfig};
use crate::workflow::{PoolRun, RunInput, RunResult};
use attestation::text::escape;
use clap::{Parser, Subcommand};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The hosted pool: fenced runs across many hosts on Temporal, bundles and evidence in PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "fenced-run pool", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The Temporal server and namespace, taken by every command that talks to Temporal.
#[derive(clap::Args, Debug, Clone)]
pub struct TemporalArgs {
    /// The Temporal frontend, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub temporal: String,
    /// The Temporal namespace.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
}

/// The store, taken by every command.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// The store: a PostgreSQL connection URL, e.g. `postgresql://user@/db?host=/run/socketdir`.
    #[arg(long, value_name = "URL")]
    pub store: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// How a founder's command reaches the pool: through the gateway (`--gateway URL` and a token: what founders
/// use), or, for the operator only, straight to Temporal and the store (`--temporal` and `--store`).
#[derive(clap::Args, Debug, Clone)]
pub struct AccessArgs {
    /// The founder gateway: `http://HOST:PORT`, `https://HOST:PORT` or `unix:PATH` (docs/pool.md). The token
    /// comes from --token-file or FENCED_RUN_POOL_TOKEN.
    #[arg(long, value_name = "URL", conflicts_with_all = ["temporal", "store"])]
    pub gateway: Option<String>,
    /// With --gateway: the file holding the founder's token (default: the FENCED_RUN_POOL_TOKEN variable).
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub token_file: Option<PathBuf>,
    /// With an `https://` gateway: the PEM certificate(s) to trust for it (default: the system's roots).
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub gateway_ca: Option<PathBuf>,
    /// Operator only: the Temporal frontend, HOST:PORT (founders use --gateway and never get this address).
    #[arg(long, value_name = "HOST:PORT")]
    pub temporal: Option<String>,
    /// Operator only: the Temporal namespace.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// Operator only: the store, a PostgreSQL connection URL.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Where a command goes, from [`AccessArgs`].
pub enum Access {
    /// Through the founder gateway.
    Gateway(crate::gateway::client::GatewayClient),
    /// Straight to Temporal and the store (the operator).
    Direct {
        /// Temporal.
        temporal: TemporalArgs,
        /// The store URL.
        store: String,
    },
}

/// The environment variable holding a founder's gateway token when --token-file is not given.
pub const TOKEN_ENV: &str = "FENCED_RUN_POOL_TOKEN";

impl AccessArgs {
    /// The gateway client, or Temporal and the store; an error naming what is missing or unusable.
    pub fn access(&self) -> Result<Access, String> {
        if let Some(url) = &self.gateway {
            let token = match &self.token_file {
                Some(f) => std::fs::read_to_string(f)
                    .map_err(|e| format!("--token-file {}: {e}", f.display()))?,
                None => std::env::var(TOKEN_ENV).map_err(|_| {
                    format!("--gateway: no token: give --token-file FILE or set {TOKEN_ENV}")
                })?,
            };
            let client = crate::gateway::client::GatewayClient::new(
                url,
                token.trim(),
                self.gateway_ca.as_deref(),
            )?;
            return Ok(Access::Gateway(client));
        }
        match (&self.temporal, &self.store) {
            (Some(t), Some(s)) => Ok(Access::Direct {
                temporal: TemporalArgs {
                    temporal: t.clone(),
                    namespace: self.namespace.clone(),
                },
                store: s.clone(),
            }),
            _ => Err(
                "give --gateway URL (founders), or --temporal HOST:PORT and --store URL (the operator)"
                    .to_owned(),
            ),
        }
    }
}

/// The pool's commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create or upgrade the store's schema (workers also do this when they start).
    Init {
        /// The Temporal server (unused by `init`; accepted like every pool command).
        #[arg(long, value_name = "HOST:PORT")]
        temporal: Option<String>,
        /// The store.
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Founders' store roles.
    Founder {
        /// What to do.
        #[command(subcommand)]
        action: FounderCommand,
    },
    /// The operator's coordinator of a task queue: runs the run workflows, verifies what execution hosts
    /// deliver, and alone records outcomes (connects to the store as its owner).
    Coordinator(CoordinatorArgs),
    /// An execution host: take attempts from a task queue and run them here, at most --max-runs at once
    /// (connects to the store as a role in `fenced_run_worker`, which can write no table).
    Worker(WorkerArgs),
    /// Intake a job or bundle, store it by its SHA-256 and start its run.
    Submit(SubmitArgs),
    /// A run and every attempt at it.
    Status {
        /// The run ID.
        run_id: String,
        /// The gateway, or (the operator) Temporal and the store.
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Write the evidence of the run's accepted execution and, with --ledger-out, the run's signed execution
    /// ledger (for `verify-attestation evidence --pool-ledger FILE --pool-key PUB`).
    Fetch {
        /// The run ID.
        run_id: String,
        /// Where to write the evidence.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Where to write the run's execution ledger, signed by the pool: through the gateway, with the key the
        /// gateway holds; on the operator's direct path, with --pool-key.
        #[arg(long, value_name = "FILE")]
        ledger_out: Option<PathBuf>,
        /// The pool's private signing key (from `pool key`), to sign the ledger export (the operator's direct
        /// path only).
        #[arg(long, value_name = "FILE", requires = "ledger_out")]
        pool_key: Option<PathBuf>,
        /// The gateway, or (the operator) Temporal and the store.
        #[command(flatten)]
        access: AccessArgs,
    },
    /// Create the pool's Ed25519 signing key (for the ledger exports founders verify) and print its public key
    /// for founders to pin; an existing key file is not overwritten (its public key is printed).
    Key {
        /// The private key file (PKCS#8 PEM, mode 0600); the public key goes beside it as FILE.pub.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run: its processes or VM are killed and its files removed.
    Cancel {
        /// The run ID.
        run_id: String,
        /// How long to wait for the workflow to confirm, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
        wait_seconds: u64,
        /// The gateway, or (the operator) Temporal and the store.
        #[command(flatten)]
        access: AccessArgs,
    },
    /// The founder gateway: the only service founders talk to (docs/pool.md, "The founder gateway").
    Gateway(crate::gateway::GatewayArgs),
}

/// `founder` subcommands.
#[derive(Subcommand, Debug)]
pub enum FounderCommand {
    /// Register a founder and print their gateway token (once; the store keeps only its SHA-256). Founders get
    /// no database role.
    Add {
        /// The founder's name (a-z, 0-9, _).
        name: String,
        /// Issue a new token for an existing founder; the old one stops working.
        #[arg(long)]
        replace: bool,
        /// How long the token is accepted: a whole number and a unit, s, m, h or d (default 90d, at most
        /// 1830d); the gateway then refuses it, saying it expired.
        #[arg(long, value_name = "DURATION", default_value = "90d", value_parser = crate::founders::parse_lifetime)]
        expires_in: Duration,
        /// The Temporal server (unused; accepted like every pool command).
        #[arg(long, value_name = "HOST:PORT")]
        temporal: Option<String>,
        /// The store.
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Arguments of `pool coordinator`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("launch").required(true).args(["measurements", "any_measurement"])))]
pub struct CoordinatorArgs {
    /// Temporal.
    #[command(flatten)]
    pub temporal: TemporalArgs,
    /// The task queue whose runs this coordinator decides (its workflows are on QUEUE:coordinator; the
    /// execution hosts take attempts from QUEUE).
    #[arg(long, value_name = "QUEUE")]
    pub queue: String,
    /// The store, as its owner (the coordinator migrates the schema and writes outcomes).
    #[command(flatten)]
    pub store: StoreArgs,
    /// The queue's measurement set (TOML, from `measure-guest pin`, as `verify-attestation --measurements`
    /// reads it): a delivered execution verifies only when its launch measurement is one of the set's entries
    /// (of the run's tier) and at least --auditors-required of the --auditor-key keys signed the set.
    #[arg(long, value_name = "SET", requires = "auditor_key")]
    pub measurements: Option<PathBuf>,
    /// A trusted auditor's public key (Ed25519 PEM); repeat for each auditor.
    #[arg(long = "auditor-key", value_name = "KEY", requires = "measurements")]
    pub auditor_key: Vec<PathBuf>,
    /// How many distinct trusted auditors must have signed the set (default 1).
    #[arg(long, value_name = "K", requires = "measurements", value_parser = clap::value_parser!(u32).range(1..))]
    pub auditors_required: Option<u32>,
    /// An auditor's detached signature over the set; repeat for each (default: every `SET.*.sig` beside it).
    #[arg(long = "set-signature", value_name = "FILE", requires = "measurements")]
    pub set_signature: Vec<PathBuf>,
    /// Verify without pinning the launch measurement, on purpose: any guest code could then have produced a
    /// verdict the pool records, and every result says "launch measurement not pinned".
    #[arg(long)]
    pub any_measurement: bool,
    /// This coordinator's name in the run history (default: pool-coordinator-PID@HOSTNAME).
    #[arg(long, value_name = "NAME")]
    pub identity: Option<String>,
}

/// Arguments of `pool worker`.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Temporal.
    #[command(flatten)]
    pub temporal: TemporalArgs,
    /// The task queue to take runs from (one per TEE class and CPU generation, docs/pool.md).
    #[arg(long, value_name = "QUEUE")]
    pub queue: String,
    /// The store, as a login role in `fenced_run_worker` (never the owner: a worker whose role can write or
    /// owns a record table refuses to start).
    #[command(flatten)]
    pub store: StoreArgs,
    /// The isolation tier this host gives: `process` or `vm`.
    #[arg(long, value_name = "TIER")]
    pub isolation: String,
    /// Most runs at once (free SEV ASIDs, TDX keys, memory).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_runs: u32,
    /// The vm tier's guest image (passed to `fenced-run run --image`).
    #[arg(long, value_name = "DIR")]
    pub image: Option<PathBuf>,
    /// The operator's configuration (passed to `fenced-run run --operator-config`).
    #[arg(long, value_name = "FILE")]
    pub operator_config: Option<PathBuf>,
    /// Where attempts get their work directories (default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// This worker's name in the run history (default: pool-worker-PID@HOSTNAME).
    #[arg(long, value_name = "NAME")]
    pub identity: Option<String>,
    /// The `fenced-run` binary that runs each attempt (default: the one beside this program).
    #[arg(long, value_name = "PATH")]
    pub fenced_run: Option<PathBuf>,
    /// Tests of the execution ledger only: run every attempt N more times, each with its own nonce, and
    /// deliver a passing run where there is one (a cherry-picking host).
    #[arg(long, value_name = "N", default_value_t = 0, hide = true)]
    pub test_rerun: u32,
    /// Tests of the execution ledger only: for attempts up to N, kill the run once its nonce is issued and
    /// report a host failure.
    #[arg(long, value_name = "N", default_value_t = 0, hide = true)]
    pub test_host_failure_attempts: u32,
}

/// Arguments of `pool submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// The job: a job file or a bundle, as for `fenced-run run`.
    pub job: PathBuf,
    /// The gateway, or (the operator) Temporal and the store.
    #[command(flatten)]
    pub access: AccessArgs,
    /// The founder's nonce, hex, 16 to 64 bytes; attempt N runs with a nonce derived from it (docs/pool.md).
    #[arg(long, value_name = "HEX")]
    pub nonce: String,
    /// The task queue.
    #[arg(long, value_name = "QUEUE", default_value = "process")]
    pub queue: String,
    /// The isolation tier the run must get (intake checks the bundle for it).
    #[arg(long, value_name = "TIER", default_value = "process")]
    pub isolation: String,
    /// The run ID (the workflow ID; used once). Default: a random one.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Operator only: the founder the run belongs to (default: the store role connecting). Through the gateway
    /// the founder is the token's.
    #[arg(long, value_name = "ROLE", conflicts_with = "gateway")]
    pub founder: Option<String>,
    /// Most attempts (host failures are retried on another worker up to this bound).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_attempts: u32,
    /// The lease: seconds without a heartbeat after which an attempt is lost.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub heartbeat_seconds: u64,
    /// Wait for the run, print its verdict and (with --evidence) write the evidence.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: write the accepted attempt's evidence here.
    #[arg(long, value_name = "OUT", requires = "wait")]
    pub evidence: Option<PathBuf>,
    /// With --wait: give up waiting after this many seconds (exit 2 naming the run, which goes on in the
    /// pool). Default: one hour in the queue plus the run's own longest time (attempts x the attempt deadline).
    #[arg(long, value_name = "SECONDS", requires = "wait", value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub wait_timeout: Option<u64>,
}

/// The default `--wait-timeout`: an hour's wait in the queue on top of the longest the run itself may take.
pub const QUEUE_WAIT_SECONDS: u64 = 3600;

/// Runs the command line `args` (without the program name handled by clap).
pub fn main_with(cli: Cli) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fenced-run pool: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async move {
        match cli.command {
            Command::Init { store, .. } => init(store).await,
            Command::Founder {
                action:
                    FounderCommand::Add {
                        name,
                        replace,
                        expires_in,
                        store,
                        ..
                    },
            } => founder_add(&name, replace, expires_in, store).await,
            Command::Coordinator(a) => coordinator(a).await,
            Command::Worker(a) => worker(a).await,
            Command::Submit(a) => submit(a).await,
            Command::Status { run_id, access } => status(&run_id, access).await,
            Command::Fetch {
                run_id,
                out,
                ledger_out,
                pool_key,
                access,
            } => {
                fetch(
                    &run_id,
                    &out,
                    ledger_out.as_deref(),
                    pool_key.as_deref(),
                    access,
                )
                .await
            }
            Command::Key { out, json } => pool_key(&out, json),
            Command::Cancel {
                run_id,
                wait_seconds,
                access,
            } => cancel(&run_id, wait_seconds, access).await,
            Command::Gateway(a) => crate::gateway::main(a).await,
        }
    })
}

fn fail(cmd: &str, json: bool, code: u8, msg: &str) -> ExitCode {
    if json {
        println!("{}", json!({ "error": msg }));
    } else {
        eprintln!("fenced-run pool {cmd}: {msg}");
    }
    ExitCode::from(code)
}

async fn init(store: StoreArgs) -> ExitCode {
    let mut s = match Store::connect(&store.store).await {
        Ok(s) => s,
        Err(e) => return fail("init", store.json, 2, &e),
    };
    let migrated = match s.migrate().await {
        Ok(before) => match crate::founders::Founders::connect(&store.store).await {
            Ok(mut f) => f.migrate().await.map(|_| before).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e),
    };
    match migrated {
        Ok(before) => {
            if store.json {
                println!(
                    "{}",
                    json!({ "schema_before": before, "schema": crate::store::SCHEMA_VERSION })
                );
            } else {
                println!(
                    "store schema: version {} (was {before})",
                    crate::store::SCHEMA_VERSION
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail("init", store.json, 2, &e),
    }
}

async fn founder_add(name: &str, replace: bool, lifetime: Duration, store: StoreArgs) -> ExitCode {
    let mut s = match Store::connect(&store.store).await {
        Ok(s) => s,
        Err(e) => return fail("founder add", store.json, 2, &e),
    };
    if let Err(e) = s.migrate().await {
        return fail("founder add", store.json, 2, &e);
    }
    drop(s);
    let mut f = match crate::founders::Founders::connect(&store.store).await {
        Ok(f) => f,
        Err(e) => return fail("founder add", store.json, 2, &e.to_string()),
    };
    if let Err(e) = f.migrate().await {
        return fail("founder add", store.json, 2, &e.to_string());
    }
    match f.issue(name, replace, lifetime).await {
        Ok((token, expires_at)) => {
            if store.json {
                println!(
                    "{}",
                    json!({ "founder": name, "token": token, "expires_at": expires_at })
                );
            } else {
                println!(
                    "founder {name}: gateway token, accepted until {expires_at} (shown once; give it to the founder only):"
                );
                println!("{token}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail("founder add", store.json, 2, &e.to_string()),
    }
}

fn default_identity(role: &str) -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    format!("pool-{role}-{}@{host}", std::process::id())
}

fn beside_me(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

async fn worker(a: WorkerArgs) -> ExitCode {
    let json = a.store.json;
    if a.isolation != "process" && a.isolation != "vm" {
        return fail(
            "worker",
            json,
            2,
            &format!(
                "--isolation {}: only `process` and `vm` run today (sev-snp and tdx hosts run the vm path once built)",
                escape(&a.isolation)
            ),
        );
    }
    if let Err(e) = crate::temporal::target(&a.temporal.temporal) {
        return fail("worker", json, 2, &e);
    }
    let fenced_run = a
        .fenced_run
        .clone()
        .unwrap_or_else(|| beside_me("fenced-run"));
    if !fenced_run.is_file() {
        return fail(
            "worker",
            json,
            2,
            &format!(
                "--fenced-run {}: no such program (build `fenced-run` or name it)",
                fenced_run.display()
            ),
        );
    }
    let work_dir = a.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    if !work_dir.is_dir() {
        return fail(
            "worker",
            json,
            2,
            &format!("--work-dir {}: not a directory", work_dir.display()),
        );
    }
    if let Err(e) = crate::temporal::check_queue(&a.queue) {
        return fail("worker", json, 2, &format!("--{e}"));
    }
    crate::worker::sweep_stale(&work_dir);
    let store = match Store::connect(&a.store.store).await {
        Ok(s) => s,
        Err(e) => return fail("worker", json, 2, &e),
    };
    // An execution host is untrusted: its role must not be able to write the pool's record.
    match store.worker_role_problem().await {
        Ok(None) => {}
        Ok(Some(why)) => {
            return fail(
                "worker",
                json,
                2,
                &format!(
                    "--store: {why}: a worker's role could rewrite outcomes and the execution ledger; connect \
                     as a login role that is only a member of fenced_run_worker (CREATE ROLE host1 LOGIN IN \
                     ROLE fenced_run_worker), never as the store's owner"
                ),
            )
        }
        Err(e) => return fail("worker", json, 2, &e),
    }
    match store.has_worker_functions().await {
        Ok(true) => {}
        Ok(false) => {
            return fail(
                "worker",
                json,
                2,
                "--store: the store's schema has no worker functions yet: start the coordinator (or run \
                 `pool init` as the store's owner) first",
            )
        }
        Err(e) => return fail("worker", json, 2, &e),
    }
    drop(store);
    let identity = a
        .identity
        .clone()
        .unwrap_or_else(|| default_identity("worker"));
    let config = WorkerConfig {
        store_url: a.store.store.clone(),
        fenced_run,
        isolation: a.isolation.clone(),
        image: a.image.clone(),
        operator_config: a.operator_config.clone(),
        work_dir,
        identity: identity.clone(),
        test: crate::worker::TestMisbehaviour {
            reruns: a.test_rerun,
            host_failure_attempts: a.test_host_failure_attempts,
        },
    };
    let max_runs = a.max_runs as usize;
    let options = temporalio_sdk::WorkerOptions::new(a.queue.clone())
        .register_activities(AttemptActivities { config })
        .tuner(tuner(16, max_runs, 16))
        // Attempts are taken from the queue by polling only, within this worker's slots.
        .max_eager_activity_reservations_per_workflow_task(0)
        .client_identity_override(identity.clone())
        .build();
    let said = format!(
        "queue {}, isolation {}, at most {max_runs} run(s) at once",
        a.queue, a.isolation
    );
    match run_sdk_worker("worker", &a.temporal, &a.queue, options, &identity, &said).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("worker", json, 2, &e),
    }
}

/// Loads `--measurements` with its auditors' signatures (as `verify-attestation --measurements` does), or
/// takes `--any-measurement`.
fn measurement_pin(a: &CoordinatorArgs) -> Result<crate::ledger::MeasurementPin, String> {
    use crate::ledger::MeasurementPin;
    let Some(set) = &a.measurements else {
        return Ok(MeasurementPin::Any);
    };
    let signatures = if a.set_signature.is_empty() {
        measurements::set::default_signature_paths(set)
            .map_err(|e| format!("--measurements {}: {e}", set.display()))?
    } else {
        a.set_signature.clone()
    };
    let trusted = measurements::set::TrustedSet::load(
        set,
        &signatures,
        &a.auditor_key,
        a.auditors_required.unwrap_or(1) as usize,
    )
    .and_then(|t| {
        t.check_current(time::OffsetDateTime::now_utc().unix_timestamp())
            .map(|()| t)
    })
    .map_err(|e| format!("--measurements {}: {e}", set.display()))?;
    Ok(MeasurementPin::Set(std::sync::Arc::new(trusted)))
}

async fn coordinator(a: CoordinatorArgs) -> ExitCode {
    let json = a.store.json;
    if let Err(e) = crate::temporal::target(&a.temporal.temporal) {
        return fail("coordinator", json, 2, &e);
    }
    if let Err(e) = crate::temporal::check_queue(&a.queue) {
        return fail("coordinator", json, 2, &format!("--{e}"));
    }
    let pin = match measurement_pin(&a) {
        Ok(p) => p,
        Err(e) => return fail("coordinator", json, 2, &e),
    };
    let mut store = match Store::connect(&a.store.store).await {
        Ok(s) => s,
        Err(e) => return fail("coordinator", json, 2, &e),
    };
    if let Err(e) = store.migrate().await {
        return fail("coordinator", json, 2, &e);
    }
    drop(store);
    let identity = a
        .identity
        .clone()
        .unwrap_or_else(|| default_identity("coordinator"));
    let queue = crate::temporal::coordinator_queue(&a.queue);
    let said = format!(
        "runs of queue {} (workflows on {queue}); {}",
        a.queue,
        pin.describe()
    );
    let options =
        match temporalio_sdk::WorkerOptions::new(queue.clone()).register_workflow::<PoolRun>() {
            Ok(o) => o,
            Err(e) => {
                return fail(
                    "coordinator",
                    json,
                    2,
                    &format!("registering the run workflow: {e}"),
                )
            }
        };
    let options = options
        .register_activities(crate::coordinator::CoordinatorActivities {
            store_url: a.store.store.clone(),
            pin,
        })
        // No attempt is ever scheduled on the coordinator queue: one activity slot for the SDK's idle poll.
        .tuner(tuner(16, 1, 16))
        // A workflow cache with room for every open run (issue 15, docs/pool.md): with no cache the SDK keeps
        // one run, evicts it for the next run's workflow task even while its bookkeeping local activity is in
        // flight, and that eviction trips an internal assertion that kills the workflow-processing thread.
        .max_cached_workflows(WORKFLOW_CACHE)
        // A killed coordinator's sticky queue: its workflow tasks go back to the normal queue after this long.
        .sticky_queue_schedule_to_start_timeout(STICKY_TO_NORMAL)
        // Attempts are taken from the queue by polling only, within each worker's slots.
        .max_eager_activity_reservations_per_workflow_task(0)
        .client_identity_override(identity.clone())
        .build();
    match run_sdk_worker(
        "coordinator",
        &a.temporal,
        &queue,
        options,
        &identity,
        &said,
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("coordinator", json, 2, &e),
    }
}

/// The SDK's slots: workflow tasks, (remote) activities, local activities.
fn tuner(
    workflows: usize,
    activities: usize,
    local: usize,
) -> temporalio_sdk::runtime::worker_tuner::TunerHolder {
    use temporalio_sdk::runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder};
    TunerHolder::builder()
        .workflow_task_slot_supplier(FixedSizeSlotSupplier::new(workflows))
        .activity_task_slot_supplier(FixedSizeSlotSupplier::new(activities))
        .local_activity_task_slot_supplier(FixedSizeSlotSupplier::new(local))
        .nexus_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .build()
}

/// The environment variable naming which of the Temporal SDK's own log lines a worker prints on stderr (an
/// `EnvFilter` directive such as `warn`, `temporalio_sdk_core=debug`); default `warn`.
pub const LOG_ENV: &str = "FENCED_RUN_POOL_LOG";

/// The SDK's log lines (its warnings and errors: a workflow task failed, an eviction, a fatal stream error) on
/// stderr, for every thread (the SDK's own telemetry would set its subscriber on the calling thread only when
/// it runs on our Tokio runtime); without a subscriber the SDK drops them and a worker that stops says nothing.
fn install_sdk_log(identity: &str) {
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = std::env::var(LOG_ENV).unwrap_or_else(|_| "warn".to_owned());
    let installed = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .finish()
        .try_init();
    if let Err(e) = installed {
        eprintln!("fenced-run pool {identity}: the SDK's log lines will not be shown: {e}");
    }
}

/// Every cause of `e`, outermost first, joined with ": " (the SDK's fatal errors keep their reason in `source`).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        msg = format!("{msg}: {c}");
        cause = c.source();
    }
    msg
}

/// A panic in the SDK core's `workflow-processing` thread ends all workflow processing of this worker while
/// its activity side goes on polling: a worker that can no longer decide anything. Say so and exit 2 (so a
/// supervisor restarts it) instead of living on half dead or stopping as if asked to. Other panics keep Rust's
/// behaviour (the SDK catches a panicking workflow function and fails its workflow task).
fn exit_on_workflow_thread_panic(identity: &str) {
    let identity = identity.to_owned();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        if std::thread::current().name() == Some("workflow-processing") {
            eprintln!(
                "fenced-run pool {identity}: the Temporal SDK's workflow-processing thread panicked \
                 (above); this process can no longer run workflows and exits"
            );
            std::process::exit(2);
        }
    }));
}

/// Runs a worker keeps in its workflow cache (the SDK's default): open runs, queued or running, not slots. A
/// cached run costs a small state machine; the cache must not fill while runs wait for slots, because a run
/// evicted with a local activity in flight is what took the worker down (docs/pool.md).
pub const WORKFLOW_CACHE: usize = 1000;

/// How long a workflow task waits on a worker's sticky queue before it goes to the queue every worker polls: a
/// worker killed with SIGKILL delays the runs it had cached by this much.
pub const STICKY_TO_NORMAL: Duration = Duration::from_secs(5);

/// Runs a Temporal SDK worker (`role`: `worker` or `coordinator`) with `options` on `queue` until SIGTERM or
/// SIGINT; every other end is an error naming why.
async fn run_sdk_worker(
    role: &str,
    temporal: &TemporalArgs,
    queue: &str,
    options: temporalio_sdk::WorkerOptions,
    identity: &str,
    said: &str,
) -> Result<(), String> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use temporalio_sdk::{Runtime, Worker};
    exit_on_workflow_thread_panic(identity);
    install_sdk_log(identity);
    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|e| format!("Temporal runtime: {}", error_chain(&e)))?;
    let client =
        crate::temporal::connect(&temporal.temporal, &temporal.namespace, identity).await?;
    let mut worker = Worker::new(&runtime, client, options)
        .map_err(|e| format!("starting the {role} on queue {queue}: {}", error_chain(&e)))?;
    let shutdown = worker.shutdown_handle();
    let asked = Arc::new(AtomicBool::new(false));
    let asked_by_signal = asked.clone();
    let who = identity.to_owned();
    let role_s = role.to_owned();
    tokio::spawn(async move {
        let role = role_s;
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                eprintln!("fenced-run pool {role} {who}: {name}: shutting down");
                asked_by_signal.store(true, Ordering::SeqCst);
                shutdown();
            }
            (Err(e), _) | (_, Err(e)) => eprintln!(
                "fenced-run pool {role} {who}: cannot watch for SIGTERM/SIGINT ({e}); stop it with SIGKILL"
            ),
        }
    });
    eprintln!("fenced-run pool {role} {identity}: {said}");
    let ran = worker.run().await;
    match ran {
        Err(e) => Err(format!("{role} stopped: {}", error_chain(&e))),
        Ok(()) if asked.load(Ordering::SeqCst) => {
            eprintln!("fenced-run pool {role} {identity}: stopped");
            Ok(())
        }
        // The SDK ends `run` without an error when its workflow stream ends (its poller or processing
        // thread gone): not a shutdown anybody asked for.
        Ok(()) => Err(format!(
            "{role} stopped without being asked to (no SIGTERM or SIGINT): the Temporal SDK's task \
             processing ended; its log lines above say why"
        )),
    }
}

fn random_run_id() -> String {
    let mut b = [0u8; 12];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut b)
    });
    format!("run-{}", hex::encode(b))
}

fn check_run_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > 200
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        return Err(format!(
            "--run-id {}: use 1 to 200 of A-Z a-z 0-9 - _ . :",
            escape(id)
        ));
    }
    Ok(())
}

/// What `submit` sends: the job's own time budget (seconds), and the bundle packed from intake's copy.
struct Judged {
    budget: u64,
    kind: guest::channel::BundleKind,
    bytes: Vec<u8>,
}

/// Intake stages 1-5 on `job` for `tier`, then the bundle packed from the tree intake judged
/// (`host::vm::bundle::pack_judged`, never from `job` again) when accepted; the refusal or the unusable input
/// otherwise (`Err((exit code, message))`).
fn intake_first(job: &Path, tier: &str) -> Result<Judged, (u8, String)> {
    let isolation = match tier {
        "process" => intake::normalise::Isolation::Process,
        "vm" => intake::normalise::Isolation::Vm,
        other => {
            return Err((
                2,
                format!(
                    "--isolation {}: only `process` and `vm` run today",
                    escape(other)
                ),
            ))
        }
    };
    let work = tempfile::Builder::new()
        .prefix("fenced-run-pool-intake-")
        .tempdir()
        .map_err(|e| (2, format!("cannot create intake's work directory: {e}")))?;
    let mut report = intake::run_stages(
        job,
        &intake::IntakeOptions::for_tier(isolation).with_work_parent(work.path()),
    );
    let result = if let Some(why) = report.unusable.clone() {
        Err((2, format!("{}: {why}", job.display())))
    } else {
        match (report.accepted, report.job.as_ref()) {
            (true, Some(j)) => {
                let budget =
                    j.test.timeout_seconds + j.install.as_ref().map_or(0, |i| i.timeout_seconds);
                host::vm::bundle::pack_judged(&report)
                    .map(|(kind, bytes)| Judged {
                        budget,
                        kind,
                        bytes,
                    })
                    .map_err(|e| (2, escape(&e.to_string()).into_owned()))
            }
            _ => Err((
                1,
                format!(
                    "{}: refused by intake, so it never enters the pool: {}",
                    job.display(),
                    report
                        .refusal
                        .as_ref()
                        .map(|r| format!("{}: {}", r.stage.name(), r.reason))
                        .unwrap_or_else(|| "intake did not accept the job".into())
                ),
            )),
        }
    };
    let _ = report.cleanup();
    result
}

/// What starting a run needs: the direct (operator) path and the gateway both start runs through [`start_run`].
pub(crate) struct NewRun<'a> {
    /// The founder the run belongs to.
    pub founder: &'a str,
    /// The run ID (the workflow ID).
    pub run_id: &'a str,
    /// The bundle's kind (`tar`, `tar.gz`, `zip`).
    pub kind: &'a str,
    /// The bundle intake judged.
    pub bytes: &'a [u8],
    /// The founder's nonce.
    pub nonce: &'a [u8],
    /// The task queue.
    pub queue: &'a str,
    /// The isolation tier.
    pub isolation: &'a str,
    /// Most attempts.
    pub max_attempts: u32,
    /// The lease, seconds.
    pub heartbeat_seconds: u64,
    /// The longest one attempt may take, seconds.
    pub attempt_seconds: u64,
}

/// Stores the bundle and registers the run (one transaction), then starts the run's workflow with workflow ID =
/// run ID; the bundle's digest, or the exit code (1: the ID is taken; 2: a server failed) and why. A run whose
/// workflow could not be started is withdrawn from the store.
pub(crate) async fn start_run(
    store: &mut Store,
    client: &temporalio_client::Client,
    r: &NewRun<'_>,
) -> Result<String, (u8, String)> {
    crate::temporal::check_queue(r.queue).map_err(|e| (2, format!("--{e}")))?;
    // The bundle and the run are in the store (one transaction) before the workflow refers to them.
    let digest = store
        .submit(
            r.founder,
            r.run_id,
            r.kind,
            r.bytes,
            r.nonce,
            r.queue,
            r.isolation,
        )
        .await
        .map_err(|e| (1, e))?;
    let input = RunInput {
        run_id: r.run_id.to_owned(),
        founder: r.founder.to_owned(),
        bundle_digest: digest.clone(),
        nonce: hex::encode(r.nonce),
        isolation: r.isolation.to_owned(),
        queue: r.queue.to_owned(),
        max_attempts: r.max_attempts,
        heartbeat_seconds: r.heartbeat_seconds,
        attempt_seconds: r.attempt_seconds,
    };
    let options =
        // The workflow runs on the queue's coordinator; its attempts go to the queue's execution hosts.
        temporalio_client::WorkflowStartOptions::new(
            crate::temporal::coordinator_queue(r.queue),
            r.run_id.to_owned(),
        )
            .id_reuse_policy(temporalio_client::WorkflowIdReusePolicy::RejectDuplicate)
            .build();
    match client.start_workflow(PoolRun::run, input, options).await {
        Ok(_) => Ok(digest),
        Err(temporalio_client::errors::WorkflowStartError::AlreadyStarted { .. }) => Err((
            1,
            format!(
                "run ID {}: a workflow with this ID already exists; a run ID is used once",
                escape(r.run_id)
            ),
        )),
        Err(e) => {
            let _ = store.withdraw(r.run_id).await;
            Err((
                2,
                format!("starting the workflow: {}", escape(&e.to_string())),
            ))
        }
    }
}

async fn submit(a: SubmitArgs) -> ExitCode {
    let json = a.access.json;
    let nonce = match host::cli::parse_nonce(&a.nonce) {
        Ok(n) => n,
        Err(e) => {
            return fail(
                "submit",
                json,
                2,
                &format!("--nonce: {}", escape(&e.to_string())),
            )
        }
    };
    let run_id = a.run_id.clone().unwrap_or_else(random_run_id);
    if let Err(e) = check_run_id(&run_id) {
        return fail("submit", json, 2, &e);
    }
    let access = match a.access.access() {
        Ok(x) => x,
        Err(e) => return fail("submit", json, 2, &e),
    };
    if let Access::Direct { temporal, .. } = &access {
        if let Err(e) = crate::temporal::target(&temporal.temporal) {
            return fail("submit", json, 2, &e);
        }
    }
    // Intake first, on this machine: a refused bundle never enters the pool; what is sent is the tree intake
    // judged.
    let Judged {
        budget,
        kind,
        bytes,
    } = match intake_first(&a.job, &a.isolation) {
        Ok(j) => j,
        Err((code, e)) => return fail("submit", json, code, &e),
    };
    let kind = kind.extension();
    // The job's own phase budgets plus room for intake, the fence and (in the vm tier) boot under TCG.
    let attempt_seconds = budget + 180;
    let wait = a.wait_timeout.unwrap_or_else(|| {
        QUEUE_WAIT_SECONDS
            .saturating_add(u64::from(a.max_attempts.max(1)).saturating_mul(attempt_seconds))
    });
    match access {
        Access::Gateway(g) => {
            let q = crate::gateway::SubmitQuery {
                run_id: run_id.clone(),
                nonce: hex::encode(&nonce),
                queue: a.queue.clone(),
                isolation: a.isolation.clone(),
                kind: kind.to_owned(),
                max_attempts: a.max_attempts,
                heartbeat_seconds: a.heartbeat_seconds,
                budget_seconds: budget,
            };
            let started = match g.submit(&q, bytes).await {
                Ok(v) => v,
                Err(e) => return fail("submit", json, e.code, &e.msg),
            };
            // The gateway names the run as the pool knows it (scoped to the founder).
            let run_id = started.run_id.clone();
            if !a.wait {
                print_submitted(&started, json);
                return ExitCode::SUCCESS;
            }
            let result = match g.wait_result(&run_id, Duration::from_secs(wait)).await {
                Ok(Some(r)) => r,
                Ok(None) => return fail("submit", json, 2, &gave_up(&run_id, wait)),
                Err(e) => return fail("submit", json, e.code, &e.msg),
            };
            report_result(
                "submit",
                &result,
                json,
                a.evidence.as_deref(),
                Evidence::Gateway(&g),
            )
            .await
        }
        Access::Direct { temporal, store } => {
            let mut store = match Store::connect(&store).await {
                Ok(s) => s,
                Err(e) => return fail("submit", json, 2, &e),
            };
            let founder = match &a.founder {
                Some(f) => f.clone(),
                None => match store.current_user().await {
                    Ok(u) => u,
                    Err(e) => return fail("submit", json, 2, &e),
                },
            };
            let client = match crate::temporal::connect(
                &temporal.temporal,
                &temporal.namespace,
                "fenced-run-pool-submit",
            )
            .await
            {
                Ok(c) => c,
                Err(e) => return fail("submit", json, 2, &e),
            };
            let new = NewRun {
                founder: &founder,
                run_id: &run_id,
                kind,
                bytes: &bytes,
                nonce: &nonce,
                queue: &a.queue,
                isolation: &a.isolation,
                max_attempts: a.max_attempts,
                heartbeat_seconds: a.heartbeat_seconds,
                attempt_seconds,
            };
            let digest = match start_run(&mut store, &client, &new).await {
                Ok(d) => d,
                Err((code, e)) => return fail("submit", json, code, &e),
            };
            if !a.wait {
                print_submitted(
                    &Submitted {
                        run_id,
                        bundle_digest: digest,
                        founder,
                        queue: a.queue.clone(),
                    },
                    json,
                );
                return ExitCode::SUCCESS;
            }
            let handle = client.get_workflow_handle::<PoolRun>(run_id.clone());
            let result: RunResult = match tokio::time::timeout(
                Duration::from_secs(wait),
                handle.get_result(Default::default()),
            )
            .await
            {
                // The workflow has ended; what it ended with is the store's record (the coordinator's), never
                // the workflow's result, which anyone who reaches Temporal could have written.
                Ok(Ok(_)) => match store.run_result(&run_id).await {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        return fail(
                            "submit",
                            json,
                            2,
                            &format!(
                            "run {}: its workflow ended but the store records no end for it (the \
                                 coordinator records every end first): not reported",
                            escape(&run_id)
                        ),
                        )
                    }
                    Err(e) => return fail("submit", json, 2, &e),
                },
                Ok(Err(e)) => {
                    return fail(
                        "submit",
                        json,
                        2,
                        &format!("run {run_id}: {}", escape(&e.to_string())),
                    )
                }
                Err(_) => return fail("submit", json, 2, &gave_up(&run_id, wait)),
            };
            report_result(
                "submit",
                &result,
                json,
                a.evidence.as_deref(),
                Evidence::Store(&store),
            )
            .await
        }
    }
}

/// What a started run is (the output of `submit` without `--wait`, and the gateway's answer to a submit).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Submitted {
    /// The run ID as the pool knows it (through the gateway: `FOUNDER:ID`).
    pub run_id: String,
    /// SHA-256 of the stored bundle.
    pub bundle_digest: String,
    /// The founder the run belongs to.
    pub founder: String,
    /// The task queue.
    pub queue: String,
}

fn print_submitted(s: &Submitted, json: bool) {
    if json {
        println!(
            "{}",
            attestation::text::json_safe(
                &json!({ "run_id": s.run_id, "bundle_digest": s.bundle_digest, "founder": s.founder, "queue": s.queue })
                    .to_string()
            )
        );
    } else {
        println!(
            "submitted run {} (bundle {}) to queue {}",
            escape(&s.run_id),
            escape(&s.bundle_digest),
            escape(&s.queue)
        );
    }
}

fn gave_up(run_id: &str, wait: u64) -> String {
    let run_id = escape(run_id);
    format!(
        "run {run_id}: no result within {wait} s (--wait-timeout); the run is still in the pool, \
         queued or running: see `fenced-run pool status {run_id}`, or stop it with `fenced-run pool \
         cancel {run_id}`"
    )
}

/// Where `submit --wait --evidence` reads the accepted evidence from.
enum Evidence<'a> {
    /// The store (the operator's direct path).
    Store(&'a Store),
    /// The gateway.
    Gateway(&'a crate::gateway::client::GatewayClient),
}

impl Evidence<'_> {
    async fn accepted(&self, run_id: &str) -> Result<(i32, Vec<u8>), (u8, String)> {
        match self {
            Evidence::Store(s) => s.accepted_evidence(run_id).await.map_err(|e| (2, e)),
            Evidence::Gateway(g) => g.evidence(run_id).await.map_err(|e| (e.code, e.msg)),
        }
    }
}

async fn report_result(
    cmd: &str,
    r: &RunResult,
    json: bool,
    evidence: Option<&Path>,
    source: Evidence<'_>,
) -> ExitCode {
    let Some(accepted) = &r.accepted else {
        return fail(
            cmd,
            json,
            1,
            &format!("run {}: no verdict: {}", escape(&r.run_id), escape(&r.why)),
        );
    };
    if let Some(out) = evidence {
        match source.accepted(&r.run_id).await {
            Ok((_, bytes)) => {
                if let Err(e) = std::fs::write(out, bytes) {
                    return fail(cmd, json, 2, &format!("--evidence {}: {e}", out.display()));
                }
            }
            Err((_, e)) => return fail(cmd, json, 2, &e),
        }
    }
    let verdict = attestation::verdict::Verdict::from_json(accepted.verdict.to_string().as_bytes());
    match verdict {
        Ok(v) => {
            if json {
                println!("{}", attestation::text::json_safe(&v.to_json_pretty()));
            } else {
                println!(
                    "run {}: attempt {} of {} accepted (execution {}, worker {}){}",
                    escape(&r.run_id),
                    accepted.attempt,
                    r.attempts,
                    accepted.execution,
                    escape(&accepted.worker),
                    if accepted.simulated { " SIMULATED" } else { "" }
                );
                println!("verified by the pool: {}", escape(&accepted.checked));
                print!("{}", host::cli::run::summary(&v));
            }
            if v.judged {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => fail(
            cmd,
            json,
            2,
            &format!("run {}: verdict: {e}", escape(&r.run_id)),
        ),
    }
}

/// A run ID given to `status`, `fetch` or `cancel`: the same characters `submit --run-id` takes.
fn check_given_run_id(id: &str) -> Result<(), String> {
    check_run_id(id).map_err(|e| e.replacen("--run-id ", "run ID ", 1))
}

async fn status(run_id: &str, access: AccessArgs) -> ExitCode {
    let json = access.json;
    if let Err(e) = check_given_run_id(run_id) {
        return fail("status", json, 2, &e);
    }
    let (temporal, store) = match access.access() {
        Err(e) => return fail("status", json, 2, &e),
        Ok(Access::Gateway(g)) => {
            return match g.status(run_id, json).await {
                Ok(out) => {
                    print!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail("status", json, e.code, &e.msg),
            }
        }
        Ok(Access::Direct { temporal, store }) => (temporal, store),
    };
    // Temporal first, then the store (crate::store::read_status says why).
    let workflow = async {
        match crate::temporal::connect(
            &temporal.temporal,
            &temporal.namespace,
            "fenced-run-pool-status",
        )
        .await
        {
            Ok(client) => crate::temporal::workflow_state(&client, run_id).await,
            Err(e) => format!("unknown ({e})"),
        }
    };
    let v = match crate::store::read_status(workflow, &store, run_id).await {
        Ok(v) => v,
        Err(crate::store::StatusReadError::Run(e)) => return fail("status", json, 1, &e),
        Err(
            crate::store::StatusReadError::Connect(e)
            | crate::store::StatusReadError::Executions(e),
        ) => return fail("status", json, 2, &e),
    };
    let (run, attempts, executions, workflow) = (v.run, v.attempts, v.executions, v.workflow);
    print!(
        "{}",
        render_status(&run, &attempts, &executions, &workflow, json)
    );
    ExitCode::SUCCESS
}

/// What `pool status` prints for a run (text, or with `json` the JSON object), newline-terminated: the same
/// output on the direct path and through the gateway (which renders it and sends it as is).
pub fn render_status(
    run: &crate::store::RunRow,
    attempts: &[crate::store::AttemptRow],
    executions: &[crate::store::ExecutionRow],
    workflow: &str,
    json: bool,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if json {
        let v = serde_json::to_string_pretty(&json!({
            "run_id": run.run_id,
            "outcome": run.outcome,
            "accepted_attempt": run.accepted_attempt,
            "evidence_digest": run.evidence_digest,
            "bundle_digest": run.bundle_digest,
            "queue": run.queue,
            "isolation": run.isolation,
            "submitted_at": run.submitted_at,
            "ended_at": run.ended_at,
            "ended_why": run.ended_why,
            "workflow": workflow,
            "attempts": attempts,
            "executions": executions,
        }))
        .unwrap_or_default();
        let _ = writeln!(out, "{}", attestation::text::json_safe(&v));
    } else {
        let _ = writeln!(
            out,
            "run {}: queue {}, isolation {}",
            escape(&run.run_id),
            escape(&run.queue),
            escape(&run.isolation)
        );
        let _ = writeln!(out, "workflow: {}", escape(workflow));
        let _ = writeln!(
            out,
            "outcome: {}",
            escape(run.outcome.as_deref().unwrap_or("(not final)"))
        );
        if let Some(a) = run.accepted_attempt {
            let _ = writeln!(out, "accepted attempt: {a}");
        }
        if let Some(w) = &run.ended_why {
            let _ = writeln!(out, "ended: {}", escape(w));
        }
        for a in attempts {
            let _ = writeln!(
                out,
                "attempt {}: worker {}, start {}, end {}, outcome {}, why {}",
                a.attempt,
                escape(&a.worker),
                a.start,
                a.end.as_deref().unwrap_or("-"),
                escape(a.outcome.as_deref().unwrap_or("-")),
                escape(a.why.as_deref().unwrap_or("(still running)"))
            );
            for e in executions.iter().filter(|e| e.attempt == a.attempt) {
                let _ = writeln!(out, "{}", execution_line(e));
            }
        }
        // Executions of attempts without an attempt row (a worker that asked for a nonce and died at once).
        for e in executions
            .iter()
            .filter(|e| !attempts.iter().any(|a| a.attempt == e.attempt))
        {
            let _ = writeln!(out, "{}", execution_line(e));
        }
        let _ = writeln!(
            out,
            "executions: {} in the ledger, {} verified, {} rejected, {} without a result",
            executions.len(),
            executions
                .iter()
                .filter(|e| e.result == attestation::pool_ledger::RESULT_VERIFIED)
                .count(),
            executions
                .iter()
                .filter(|e| e.result == attestation::pool_ledger::RESULT_REJECTED)
                .count(),
            executions
                .iter()
                .filter(|e| e.result == attestation::pool_ledger::RESULT_NONE)
                .count()
        );
    }
    out
}

/// One line of `pool status` per execution: its number, worker, key hash, when its nonce was issued, and its
/// result (`verified` with the outcome, `rejected` with why, or `no result delivered`).
fn execution_line(e: &crate::store::ExecutionRow) -> String {
    let result = match (&e.outcome, &e.detail) {
        (Some(o), Some(d)) => format!("{}: {o} ({})", e.result, escape(d)),
        (None, Some(d)) => format!("{}: {}", e.result, escape(d)),
        _ => e.result.clone(),
    };
    format!(
        "  attempt {} execution {}: worker {}, key sha256 {}, nonce issued {}, {}",
        e.attempt,
        e.execution,
        escape(&e.worker),
        e.key_sha256,
        e.issued_at,
        result
    )
}

/// `pool key --out FILE`: the pool's ledger-signing key, created once, its public key printed.
fn pool_key(out: &Path, json: bool) -> ExitCode {
    use attestation::pool_ledger as pl;
    let pub_path = PathBuf::from(format!("{}.pub", out.display()));
    let (key, created) = if out.exists() {
        match pl::load_signing_key(out) {
            Ok(k) => (k, false),
            Err(e) => return fail("key", json, 2, &format!("--out: {e}")),
        }
    } else {
        let key = pl::generate_key();
        let pem = match pl::private_key_pem(&key) {
            Ok(p) => p,
            Err(e) => return fail("key", json, 2, &e.to_string()),
        };
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(out)
            .and_then(|mut f| f.write_all(pem.as_bytes()));
        if let Err(e) = written {
            return fail("key", json, 2, &format!("--out {}: {e}", out.display()));
        }
        (key, true)
    };
    let public = match pl::public_key_pem(&key.verifying_key()) {
        Ok(p) => p,
        Err(e) => return fail("key", json, 2, &e.to_string()),
    };
    if let Err(e) = std::fs::write(&pub_path, &public) {
        return fail("key", json, 2, &format!("{}: {e}", pub_path.display()));
    }
    if json {
        println!(
            "{}",
            json!({ "key": out.display().to_string(), "created": created, "public_key_file": pub_path.display().to_string(), "public_key_pem": public })
        );
    } else {
        println!(
            "pool ledger key: {} ({}); founders pin the public key {} with `verify-attestation evidence --pool-key`:",
            out.display(),
            if created { "created" } else { "already there" },
            pub_path.display()
        );
        print!("{public}");
    }
    ExitCode::SUCCESS
}

async fn fetch(
    run_id: &str,
    out: &Path,
    ledger_out: Option<&Path>,
    pool_key: Option<&Path>,
    access: AccessArgs,
) -> ExitCode {
    let json = access.json;
    if let Err(e) = check_given_run_id(run_id) {
        return fail("fetch", json, 2, &e);
    }
    // The ledger is read (and, on the direct path, signed) before anything is written, so a fetch never leaves
    // evidence without it.
    let (got, signed) = match access.access() {
        Err(e) => return fail("fetch", json, 2, &e),
        Ok(Access::Gateway(g)) => {
            if pool_key.is_some() {
                return fail(
                    "fetch",
                    json,
                    2,
                    "--pool-key: through the gateway the ledger is signed with the gateway's key; --pool-key is for the operator's direct path",
                );
            }
            let got = g.evidence(run_id).await.map_err(|e| (e.code, e.msg));
            let signed = match (&got, ledger_out) {
                (Ok(_), Some(_)) => match g.ledger(run_id).await {
                    Ok(b) => Some(b),
                    Err(e) => return fail("fetch", json, e.code, &e.msg),
                },
                _ => None,
            };
            (got, signed)
        }
        Ok(Access::Direct { store, .. }) => {
            let s = match Store::connect(&store).await {
                Ok(s) => s,
                Err(e) => return fail("fetch", json, 2, &e),
            };
            let got = s.accepted_evidence(run_id).await.map_err(|e| (1, e));
            let signed = match (&got, ledger_out, pool_key) {
                (Ok(_), Some(_), None) => {
                    return fail(
                        "fetch",
                        json,
                        2,
                        "--ledger-out: on the direct path the ledger is signed here: give --pool-key KEY",
                    )
                }
                (Ok(_), Some(_), Some(key)) => {
                    let key = match attestation::pool_ledger::load_signing_key(key) {
                        Ok(k) => k,
                        Err(e) => return fail("fetch", json, 2, &format!("--pool-key: {e}")),
                    };
                    let l = match s.ledger(run_id).await {
                        Ok(l) => l,
                        Err(e) => return fail("fetch", json, 1, &e),
                    };
                    match l.sign(&key) {
                        Ok(b) => Some(b),
                        Err(e) => return fail("fetch", json, 2, &e.to_string()),
                    }
                }
                _ => None,
            };
            (got, signed)
        }
    };
    let (attempt, bytes) = match got {
        Ok(x) => x,
        Err((code, e)) => return fail("fetch", json, code, &e),
    };
    let digest = crate::digest(&bytes);
    // What the ledger lists, for the message only: the founder's verify-attestation checks its signature.
    let executions = signed.as_deref().and_then(ledger_executions);
    let execution = executions.as_ref().and_then(|x| {
        x.iter()
            .find(|e| {
                e.evidence_sha256.as_deref() == Some(digest.as_str())
                    && e.result == attestation::pool_ledger::RESULT_VERIFIED
            })
            .map(|e| e.execution)
    });
    if let Err(e) = std::fs::write(out, &bytes) {
        return fail("fetch", json, 2, &format!("--out {}: {e}", out.display()));
    }
    if let (Some(path), Some(b)) = (ledger_out, &signed) {
        if let Err(e) = std::fs::write(path, b) {
            return fail(
                "fetch",
                json,
                2,
                &format!("--ledger-out {}: {e}", path.display()),
            );
        }
    }
    if json {
        println!(
            "{}",
            json!({
                "run_id": run_id,
                "attempt": attempt,
                "execution": execution,
                "executions": executions.as_ref().map(Vec::len),
                "evidence_digest": digest,
                "out": out.display().to_string(),
                "ledger_out": ledger_out.map(|p| p.display().to_string()),
            })
        );
    } else {
        match (ledger_out, &executions) {
            (Some(path), Some(x)) => println!(
                "run {}: evidence of attempt {attempt}{} written to {}; the signed ledger of its {} execution(s) to {}; verify with `verify-attestation evidence {} --nonce NONCE --pool-ledger {} --pool-key POOL.pub ...`",
                escape(run_id),
                execution.map(|n| format!(" execution {n}")).unwrap_or_default(),
                out.display(),
                x.len(),
                path.display(),
                out.display(),
                path.display()
            ),
            _ => println!(
                "run {}: evidence of attempt {attempt} written to {}; with --ledger-out FILE the signed execution ledger is written too, for `verify-attestation evidence {} --nonce NONCE --pool-ledger FILE --pool-key POOL.pub ...`",
                escape(run_id),
                out.display(),
                out.display()
            ),
        }
    }
    ExitCode::SUCCESS
}

/// The executions a signed ledger file lists, read without checking its signature (for `pool fetch`'s message;
/// the founder's `verify-attestation --pool-ledger --pool-key` is the check).
fn ledger_executions(signed: &[u8]) -> Option<Vec<attestation::pool_ledger::Execution>> {
    let file: serde_json::Value = serde_json::from_slice(signed).ok()?;
    let ledger: attestation::pool_ledger::Ledger =
        serde_json::from_str(file.get("ledger")?.as_str()?).ok()?;
    Some(ledger.executions)
}

/// Cancels the workflow of `run_id` and waits up to `wait_seconds` for it to confirm; why it ended (or that it
/// had not yet), or the exit code and why the cancel itself failed.
pub(crate) async fn cancel_run(
    client: &temporalio_client::Client,
    run_id: &str,
    wait_seconds: u64,
) -> Result<String, (u8, String)> {
    let handle = client.get_workflow_handle::<PoolRun>(run_id.to_owned());
    if let Err(e) = handle.cancel(Default::default()).await {
        return Err((
            2,
            format!("run {}: {}", escape(run_id), escape(&e.to_string())),
        ));
    }
    let waited = tokio::time::timeout(
        Duration::from_secs(wait_seconds),
        handle.get_result(Default::default()),
    )
    .await;
    Ok(match waited {
        Ok(Ok(r)) => r.why,
        Ok(Err(e)) => escape(&e.to_string()).into_owned(),
        Err(_) => {
            format!("cancellation requested; the workflow had not finished after {wait_seconds} s")
        }
    })
}

async fn cancel(run_id: &str, wait_seconds: u64, access: AccessArgs) -> ExitCode {
    let json = access.json;
    if let Err(e) = check_given_run_id(run_id) {
        return fail("cancel", json, 2, &e);
    }
    let (temporal, store) = match access.access() {
        Err(e) => return fail("cancel", json, 2, &e),
        Ok(Access::Gateway(g)) => {
            return match g.cancel(run_id, wait_seconds).await {
                Ok(why) => {
                    print_cancelled(run_id, &why, json);
                    ExitCode::SUCCESS
                }
                Err(e) => fail("cancel", json, e.code, &e.msg),
            }
        }
        Ok(Access::Direct { temporal, store }) => (temporal, store),
    };
    let s = match Store::connect(&store).await {
        Ok(s) => s,
        Err(e) => return fail("cancel", json, 2, &e),
    };
    // The caller must be able to see the run (a founder cancels only their own).
    if let Err(e) = s.status(run_id).await {
        return fail("cancel", json, 1, &e);
    }
    let client = match crate::temporal::connect(
        &temporal.temporal,
        &temporal.namespace,
        "fenced-run-pool-cancel",
    )
    .await
    {
        Ok(c) => c,
        Err(e) => return fail("cancel", json, 2, &e),
    };
    match cancel_run(&client, run_id, wait_seconds).await {
        Ok(why) => {
            print_cancelled(run_id, &why, json);
            ExitCode::SUCCESS
        }
        Err((code, e)) => fail("cancel", json, code, &e),
    }
}

/// What `pool cancel` prints once the workflow confirmed (or the wait ran out).
fn print_cancelled(run_id: &str, why: &str, json: bool) {
    if json {
        println!(
            "{}",
            attestation::text::json_safe(
                &json!({ "run_id": run_id, "cancelled": true, "why": why }).to_string()
            )
        );
    } else {
        println!("run {run_id}: {}", escape(why));
    }
}
