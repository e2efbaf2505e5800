//! The pool's PostgreSQL store: bundles and evidence by SHA-256, runs and their attempts, the migration that
//! creates the schema, and the per-founder isolation (one role per founder, row-level security on every table).

use std::str::FromStr;
use tokio_postgres::{Client, NoTls};

/// The schema version the migration brings a store to.
pub const SCHEMA_VERSION: i32 = 3;

/// The group role every founder's role is a member of (granted read access; rows are filtered per founder).
pub const FOUNDER_GROUP: &str = "fenced_run_founder";

/// The migration to [`SCHEMA_VERSION`] 1, run in one transaction under an advisory lock.
const MIGRATION_1: &str = r#"
CREATE TABLE pool_bundles (
    founder text NOT NULL,
    digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    kind text NOT NULL CHECK (kind IN ('tar', 'tar.gz', 'zip')),
    bytes bytea NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (founder, digest)
);
CREATE TABLE pool_runs (
    run_id text PRIMARY KEY,
    founder text NOT NULL,
    bundle_digest text NOT NULL,
    nonce bytea NOT NULL,
    queue text NOT NULL,
    isolation text NOT NULL,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    outcome text,
    accepted_attempt integer,
    evidence_digest text,
    verdict jsonb,
    ended_why text,
    FOREIGN KEY (founder, bundle_digest) REFERENCES pool_bundles (founder, digest)
);
CREATE TABLE pool_evidence (
    founder text NOT NULL,
    digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    bytes bytea NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (founder, digest)
);
CREATE TABLE pool_attempts (
    run_id text NOT NULL REFERENCES pool_runs (run_id),
    attempt integer NOT NULL CHECK (attempt >= 1),
    founder text NOT NULL,
    worker text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    outcome text,
    why text,
    evidence_digest text,
    PRIMARY KEY (run_id, attempt)
);
ALTER TABLE pool_bundles ENABLE ROW LEVEL SECURITY;
ALTER TABLE pool_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE pool_evidence ENABLE ROW LEVEL SECURITY;
ALTER TABLE pool_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_bundles ON pool_bundles USING (founder = current_user) WITH CHECK (founder = current_user);
CREATE POLICY own_runs ON pool_runs USING (founder = current_user) WITH CHECK (founder = current_user);
CREATE POLICY own_evidence ON pool_evidence USING (founder = current_user);
CREATE POLICY own_attempts ON pool_attempts USING (founder = current_user);
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenced_run_founder') THEN
        CREATE ROLE fenced_run_founder NOLOGIN;
    END IF;
END $$;
GRANT SELECT, INSERT ON pool_bundles, pool_runs TO fenced_run_founder;
GRANT SELECT ON pool_evidence, pool_attempts TO fenced_run_founder;
"#;

/// The group role a worker's own store role may be a member of: it may only ask for nonces
/// (`pool_issue_nonce`), never write the execution ledger itself.
pub const WORKER_GROUP: &str = "fenced_run_worker";

/// The migration to schema version 2: the execution ledger (docs/pool.md, "The execution ledger"). Every
/// guest that asks for a nonce for an attempt is an execution, a row inserted by `pool_issue_nonce` (SECURITY
/// DEFINER, the only way in for a worker's role) before the nonce exists anywhere else. Rows are append-only:
/// a trigger refuses every DELETE and TRUNCATE, and every UPDATE except filling an execution's result once.
const MIGRATION_2: &str = r#"
CREATE TABLE pool_executions (
    run_id text NOT NULL REFERENCES pool_runs (run_id),
    attempt integer NOT NULL CHECK (attempt >= 1),
    execution integer NOT NULL CHECK (execution >= 1),
    founder text NOT NULL,
    key_sha256 bytea NOT NULL CHECK (length(key_sha256) = 32),
    nonce bytea NOT NULL UNIQUE,
    issued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    worker text NOT NULL,
    result text CHECK (result IN ('verified', 'rejected')),
    outcome text,
    evidence_digest text,
    detail text,
    result_at timestamptz,
    PRIMARY KEY (run_id, attempt, execution)
);
ALTER TABLE pool_executions ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_executions ON pool_executions USING (founder = current_user);
REVOKE ALL ON pool_executions FROM PUBLIC;
GRANT SELECT ON pool_executions TO fenced_run_founder;
CREATE FUNCTION pool_executions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'pool_executions is append-only: it cannot be truncated';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'pool_executions is append-only: execution % of attempt % of run % cannot be deleted',
            OLD.execution, OLD.attempt, OLD.run_id;
    END IF;
    IF OLD.result IS NOT NULL OR NEW.result IS NULL
        OR NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.attempt IS DISTINCT FROM OLD.attempt
        OR NEW.execution IS DISTINCT FROM OLD.execution OR NEW.founder IS DISTINCT FROM OLD.founder
        OR NEW.key_sha256 IS DISTINCT FROM OLD.key_sha256 OR NEW.nonce IS DISTINCT FROM OLD.nonce
        OR NEW.issued_at IS DISTINCT FROM OLD.issued_at OR NEW.worker IS DISTINCT FROM OLD.worker THEN
        RAISE EXCEPTION 'pool_executions is append-only: only the result of execution % of attempt % of run % may be filled, once',
            OLD.execution, OLD.attempt, OLD.run_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER pool_executions_no_update_delete BEFORE UPDATE OR DELETE ON pool_executions
    FOR EACH ROW EXECUTE FUNCTION pool_executions_append_only();
CREATE TRIGGER pool_executions_no_truncate BEFORE TRUNCATE ON pool_executions
    FOR EACH STATEMENT EXECUTE FUNCTION pool_executions_append_only();
CREATE FUNCTION pool_issue_nonce(p_run text, p_attempt integer, p_key bytea, p_worker text)
RETURNS TABLE (issued_execution integer, issued_nonce bytea)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
    n integer;
    fresh bytea;
    mixed bytea;
BEGIN
    SELECT pr.nonce AS founder_nonce, pr.founder AS founder, pr.ended_at AS ended_at INTO r
        FROM public.pool_runs pr WHERE pr.run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % is not in the store', p_run;
    END IF;
    IF r.ended_at IS NOT NULL THEN
        RAISE EXCEPTION 'run % has ended; no nonce is issued for it any more', p_run;
    END IF;
    IF p_attempt IS NULL OR p_attempt < 1 THEN
        RAISE EXCEPTION 'attempt % is not an attempt number', p_attempt;
    END IF;
    IF p_key IS NULL OR length(p_key) <> 32 THEN
        RAISE EXCEPTION 'the key hash must be 32 bytes (SHA-256)';
    END IF;
    SELECT coalesce(max(e.execution), 0) + 1 INTO n
        FROM public.pool_executions e WHERE e.run_id = p_run AND e.attempt = p_attempt;
    -- 32 bytes from the server's strong random source (two version-4 UUIDs: 244 random bits).
    fresh := decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex');
    mixed := sha512('fenced-run pool execution'::bytea
        || int4send(length(r.founder_nonce)) || r.founder_nonce
        || int4send(octet_length(convert_to(p_run, 'UTF8'))) || convert_to(p_run, 'UTF8')
        || int4send(p_attempt) || int4send(n) || p_key || fresh);
    mixed := substring(mixed FROM 1 FOR length(r.founder_nonce));
    INSERT INTO public.pool_executions (run_id, attempt, execution, founder, key_sha256, nonce, worker)
        VALUES (p_run, p_attempt, n, r.founder, p_key, mixed, p_worker);
    RETURN QUERY SELECT n, mixed;
END $$;
REVOKE ALL ON FUNCTION pool_issue_nonce(text, integer, bytea, text) FROM PUBLIC;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenced_run_worker') THEN
        CREATE ROLE fenced_run_worker NOLOGIN;
    END IF;
END $$;
GRANT EXECUTE ON FUNCTION pool_issue_nonce(text, integer, bytea, text) TO fenced_run_worker;
"#;

/// The most bytes of evidence a worker may store for one execution (`pool_put_evidence`).
pub const MAX_EVIDENCE_BYTES: i64 = 64 << 20;

/// The migration to schema version 3: an execution host's only ways into the store (docs/pool.md, "Roles").
/// A worker connects as a login role in [`WORKER_GROUP`], which holds no privilege on any table: it records an
/// attempt's start, reads the bundle of a run that has not ended, and stores evidence, each through a
/// SECURITY DEFINER function that checks the run, and asks for nonces (`pool_issue_nonce`). Outcomes (the
/// runs', the attempts' ends, the ledger's results) are written only by the coordinator, the store's owner.
const MIGRATION_3: &str = r#"
CREATE FUNCTION pool_attempt_started(p_run text, p_attempt integer, p_worker text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    SELECT pr.founder AS founder, pr.ended_at AS ended_at INTO r
        FROM public.pool_runs pr WHERE pr.run_id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % is not in the store', p_run;
    END IF;
    IF r.ended_at IS NOT NULL THEN
        RAISE EXCEPTION 'run % has ended; no attempt of it starts any more', p_run;
    END IF;
    IF p_attempt IS NULL OR p_attempt < 1 THEN
        RAISE EXCEPTION 'attempt % is not an attempt number', p_attempt;
    END IF;
    INSERT INTO public.pool_attempts (run_id, attempt, founder, worker)
        VALUES (p_run, p_attempt, r.founder, p_worker) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'attempt % of run % was already started', p_attempt, p_run;
    END IF;
END $$;
CREATE FUNCTION pool_run_bundle(p_run text)
RETURNS TABLE (bundle_kind text, bundle_digest text, bundle_bytes bytea)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT b.kind, b.digest, b.bytes FROM public.pool_runs pr
        JOIN public.pool_bundles b ON b.founder = pr.founder AND b.digest = pr.bundle_digest
        WHERE pr.run_id = p_run AND pr.ended_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % is not in the store or has ended', p_run;
    END IF;
END $$;
CREATE FUNCTION pool_put_evidence(p_run text, p_bytes bytea) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
    d text;
BEGIN
    SELECT pr.founder AS founder, pr.ended_at AS ended_at INTO r
        FROM public.pool_runs pr WHERE pr.run_id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % is not in the store', p_run;
    END IF;
    IF r.ended_at IS NOT NULL THEN
        RAISE EXCEPTION 'run % has ended; its evidence is no longer taken', p_run;
    END IF;
    IF p_bytes IS NULL OR octet_length(p_bytes) > MAX_EVIDENCE THEN
        RAISE EXCEPTION 'evidence of run % is missing or over MAX_EVIDENCE bytes', p_run;
    END IF;
    d := encode(sha256(p_bytes), 'hex');
    INSERT INTO public.pool_evidence (founder, digest, bytes) VALUES (r.founder, d, p_bytes)
        ON CONFLICT DO NOTHING;
    RETURN d;
END $$;
REVOKE ALL ON FUNCTION pool_attempt_started(text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pool_run_bundle(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pool_put_evidence(text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pool_attempt_started(text, integer, text) TO fenced_run_worker;
GRANT EXECUTE ON FUNCTION pool_run_bundle(text) TO fenced_run_worker;
GRANT EXECUTE ON FUNCTION pool_put_evidence(text, bytea) TO fenced_run_worker;
"#;

/// The tables whose rows are the pool's record: a worker's role must not be able to write any of them.
pub const RECORD_TABLES: [&str; 7] = [
    "pool_runs",
    "pool_attempts",
    "pool_executions",
    "pool_evidence",
    "pool_bundles",
    "pool_schema",
    "pool_founders",
];

/// One execution of an attempt, as the ledger holds it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExecutionRow {
    /// The attempt.
    pub attempt: i32,
    /// The execution of that attempt (1, 2, ...).
    pub execution: i32,
    /// SHA-256 of the guest key that asked, hex.
    pub key_sha256: String,
    /// The nonce issued, hex.
    pub nonce: String,
    /// When it was issued (RFC 3339).
    pub issued_at: String,
    /// The worker that asked.
    pub worker: String,
    /// `verified`, `rejected`, or `no result delivered`.
    pub result: String,
    /// The verified verdict's outcome.
    pub outcome: Option<String>,
    /// SHA-256 of the delivered evidence.
    pub evidence_digest: Option<String>,
    /// What the pool's verification said (why rejected; SIMULATED where it is).
    pub detail: Option<String>,
}

impl ExecutionRow {
    /// The row as the signed ledger carries it.
    pub fn to_ledger(&self) -> attestation::pool_ledger::Execution {
        attestation::pool_ledger::Execution {
            attempt: u32::try_from(self.attempt).unwrap_or(0),
            execution: u32::try_from(self.execution).unwrap_or(0),
            key_sha256: self.key_sha256.clone(),
            nonce: self.nonce.clone(),
            issued_at: self.issued_at.clone(),
            worker: self.worker.clone(),
            result: self.result.clone(),
            outcome: self.outcome.clone(),
            evidence_sha256: self.evidence_digest.clone(),
            detail: self.detail.clone(),
        }
    }
}

/// A connection to the store.
pub struct Store {
    client: Client,
    conn: tokio::task::JoinHandle<()>,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

/// A run as the store holds it (what `pool status` shows).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRow {
    /// The run ID (also the workflow ID).
    pub run_id: String,
    /// The founder's role.
    pub founder: String,
    /// SHA-256 of the bundle.
    pub bundle_digest: String,
    /// The founder's nonce, hex.
    pub nonce: String,
    /// The task queue the run was submitted to.
    pub queue: String,
    /// The isolation tier the run asked for.
    pub isolation: String,
    /// When the run was submitted (RFC 3339).
    pub submitted_at: String,
    /// When the workflow finished (RFC 3339), if it has.
    pub ended_at: Option<String>,
    /// The accepted attempt's outcome; `None` until the run is final (and for a run that ended without one).
    pub outcome: Option<String>,
    /// The attempt whose verdict and evidence the workflow accepted.
    pub accepted_attempt: Option<i32>,
    /// SHA-256 of the accepted evidence.
    pub evidence_digest: Option<String>,
    /// Why the run ended (a final outcome, cancellation, attempts exhausted).
    pub ended_why: Option<String>,
}

/// One attempt at a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttemptRow {
    /// The attempt number (1, 2, ...); its nonce is derived from it (docs/pool.md).
    pub attempt: i32,
    /// The worker that took it (its Temporal identity).
    pub worker: String,
    /// When the worker started it (RFC 3339).
    pub start: String,
    /// When the workflow recorded its end (RFC 3339), if it has.
    pub end: Option<String>,
    /// Its outcome, when it produced an accepted verdict.
    pub outcome: Option<String>,
    /// Why it ended (a test outcome, lease lost, host failure, cancelled).
    pub why: Option<String>,
    /// SHA-256 of its evidence, when the workflow accepted it.
    pub evidence_digest: Option<String>,
}

fn db_err(what: &str, e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{what}: {}", d.message()),
        None => format!("{what}: {e}"),
    }
}

fn ts(t: std::time::SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

impl Store {
    /// Connects to the store at `url` (a PostgreSQL connection URL, e.g.
    /// `postgresql://user@/db?host=/run/socketdir` for a Unix socket).
    pub async fn connect(url: &str) -> Result<Store, String> {
        let config = tokio_postgres::Config::from_str(url)
            .map_err(|e| format!("--store: not a PostgreSQL connection URL: {e}"))?;
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| db_err("--store: cannot connect", e))?;
        let conn = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Store { client, conn })
    }

    /// The role this connection acts as (`current_user`).
    pub async fn current_user(&self) -> Result<String, String> {
        let row = self
            .client
            .query_one("SELECT current_user::text", &[])
            .await
            .map_err(|e| db_err("store", e))?;
        Ok(row.get(0))
    }

    /// Creates or upgrades the schema to [`SCHEMA_VERSION`] in one transaction; concurrent callers (several
    /// workers starting at once) are serialised by an advisory lock. Returns the version found before.
    pub async fn migrate(&mut self) -> Result<i32, String> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| db_err("migration", e))?;
        tx.execute("SELECT pg_advisory_xact_lock(7316104531)", &[])
            .await
            .map_err(|e| db_err("migration: lock", e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS pool_schema (version integer NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(|e| db_err("migration: pool_schema", e))?;
        let before: i32 = tx
            .query_one("SELECT coalesce(max(version), 0) FROM pool_schema", &[])
            .await
            .map_err(|e| db_err("migration: version", e))?
            .get(0);
        if before > SCHEMA_VERSION {
            return Err(format!(
                "store schema is version {before}; this build knows up to {SCHEMA_VERSION}"
            ));
        }
        if before < 1 {
            tx.batch_execute(MIGRATION_1)
                .await
                .map_err(|e| db_err("migration 1", e))?;
            tx.execute("INSERT INTO pool_schema (version) VALUES (1)", &[])
                .await
                .map_err(|e| db_err("migration 1", e))?;
        }
        if before < 2 {
            tx.batch_execute(MIGRATION_2)
                .await
                .map_err(|e| db_err("migration 2", e))?;
            tx.execute("INSERT INTO pool_schema (version) VALUES (2)", &[])
                .await
                .map_err(|e| db_err("migration 2", e))?;
        }
        if before < 3 {
            let m3 = MIGRATION_3.replace("MAX_EVIDENCE", &MAX_EVIDENCE_BYTES.to_string());
            tx.batch_execute(&m3)
                .await
                .map_err(|e| db_err("migration 3", e))?;
            tx.execute("INSERT INTO pool_schema (version) VALUES (3)", &[])
                .await
                .map_err(|e| db_err("migration 3", e))?;
        }
        tx.commit().await.map_err(|e| db_err("migration", e))?;
        Ok(before)
    }

    /// Creates a login role for a founder, a member of [`FOUNDER_GROUP`]: it sees only rows whose `founder` is
    /// its own name. `name` must be a plain lower-case identifier.
    pub async fn add_founder(&self, name: &str) -> Result<(), String> {
        if name.is_empty()
            || name.len() > 63
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            || name.as_bytes()[0].is_ascii_digit()
        {
            return Err(format!(
                "founder name {}: use 1 to 63 of a-z, 0-9 and _, not starting with a digit",
                attestation::text::escape(name)
            ));
        }
        // The name is checked above, so it can be written as an identifier.
        self.client
            .batch_execute(&format!(
                "CREATE ROLE \"{name}\" LOGIN IN ROLE {FOUNDER_GROUP}"
            ))
            .await
            .map_err(|e| db_err(&format!("founder {name}"), e))
    }

    /// Stores a bundle and registers the run in one transaction, before any workflow refers to them. A run ID
    /// already registered is refused and named.
    #[allow(clippy::too_many_arguments)]
    pub async fn submit(
        &mut self,
        founder: &str,
        run_id: &str,
        kind: &str,
        bundle: &[u8],
        nonce: &[u8],
        queue: &str,
        isolation: &str,
    ) -> Result<String, String> {
        let digest = crate::digest(bundle);
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| db_err("store", e))?;
        tx.execute(
            "INSERT INTO pool_bundles (founder, digest, kind, bytes) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (founder, digest) DO NOTHING",
            &[&founder, &digest, &kind, &bundle],
        )
        .await
        .map_err(|e| db_err("store: bundle", e))?;
        let inserted = tx
            .execute(
                "INSERT INTO pool_runs (run_id, founder, bundle_digest, nonce, queue, isolation) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id) DO NOTHING",
                &[&run_id, &founder, &digest, &nonce, &queue, &isolation],
            )
            .await
            .map_err(|e| db_err("store: run", e))?;
        if inserted == 0 {
            return Err(format!(
                "run ID {}: already submitted; a run ID is used once",
                attestation::text::escape(run_id)
            ));
        }
        tx.commit().await.map_err(|e| db_err("store", e))?;
        Ok(digest)
    }

    /// Removes a run registered by [`Store::submit`] whose workflow could not be started (the bundle stays: it
    /// is content-addressed and may be shared by other runs).
    pub async fn withdraw(&self, run_id: &str) -> Result<(), String> {
        self.client
            .execute(
                "DELETE FROM pool_runs WHERE run_id = $1 AND ended_at IS NULL \
                 AND NOT EXISTS (SELECT 1 FROM pool_attempts a WHERE a.run_id = $1)",
                &[&run_id],
            )
            .await
            .map(|_| ())
            .map_err(|e| db_err("store: withdraw", e))
    }

    /// Records that `worker` started `attempt` of `run_id` (`pool_attempt_started`, which a worker's role may
    /// execute). A second start of the same attempt, and a start of a run that ended, are refused (an attempt
    /// runs once; a retry is a new attempt).
    pub async fn attempt_started(
        &self,
        run_id: &str,
        attempt: i32,
        worker: &str,
    ) -> Result<(), String> {
        self.client
            .execute(
                "SELECT pool_attempt_started($1, $2, $3)",
                &[&run_id, &attempt, &worker],
            )
            .await
            .map(|_| ())
            .map_err(|e| db_err("store: attempt", e))
    }

    /// The bundle of `run_id`, a run that has not ended (`pool_run_bundle`, which a worker's role may execute):
    /// its kind and bytes, checked against `digest` (what the workflow names) and against their address.
    pub async fn run_bundle(
        &self,
        run_id: &str,
        digest: &str,
    ) -> Result<(String, Vec<u8>), String> {
        let row = self
            .client
            .query_one(
                "SELECT bundle_kind, bundle_digest, bundle_bytes FROM pool_run_bundle($1)",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: bundle", e))?;
        let stored: String = row.get(1);
        let bytes: Vec<u8> = row.get(2);
        if stored != digest {
            return Err(format!(
                "store: run {} has bundle {stored}, the attempt names {}",
                attestation::text::escape(run_id),
                attestation::text::escape(digest)
            ));
        }
        if crate::digest(&bytes) != digest {
            return Err(format!(
                "store: bundle {digest}: stored bytes do not hash to their address"
            ));
        }
        Ok((row.get(0), bytes))
    }

    /// Stores the evidence of an execution of `run_id` (a run that has not ended) by its SHA-256
    /// (`pool_put_evidence`, which a worker's role may execute; storing the same bytes twice is a no-op) and
    /// returns the digest.
    pub async fn put_run_evidence(&self, run_id: &str, bytes: &[u8]) -> Result<String, String> {
        let row = self
            .client
            .query_one("SELECT pool_put_evidence($1, $2)", &[&run_id, &bytes])
            .await
            .map_err(|e| db_err("store: evidence", e))?;
        Ok(row.get(0))
    }

    /// Why this connection's role must not serve as an execution host's (a worker's) role, or `None` when it
    /// may: it is a superuser or bypasses row-level security, it owns (or may act as the owner of) a record
    /// table or can write one (INSERT, UPDATE, DELETE, TRUNCATE), or it is not a member of [`WORKER_GROUP`]. A
    /// host holding such a role could rewrite outcomes and the ledger (`ALTER TABLE ... DISABLE TRIGGER`).
    pub async fn worker_role_problem(&self) -> Result<Option<String>, String> {
        let row = self
            .client
            .query_one(
                "SELECT current_user::text, r.rolsuper, r.rolbypassrls, \
                 coalesce(pg_has_role(current_user, 'fenced_run_worker', 'USAGE'), false) \
                 FROM pg_roles r WHERE r.rolname = current_user",
                &[],
            )
            .await
            .map_err(|e| db_err("store: role", e))?;
        let (user, sup, bypass, member): (String, bool, bool, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        if sup || bypass {
            return Ok(Some(format!(
                "role {user} is a superuser or bypasses row-level security"
            )));
        }
        let tables: Vec<&str> = RECORD_TABLES.to_vec();
        let rows = self
            .client
            .query(
                "SELECT t FROM unnest($1::text[]) t WHERE to_regclass(t) IS NOT NULL AND ( \
                 pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = to_regclass(t)), 'MEMBER') \
                 OR has_table_privilege(current_user, t, 'INSERT') OR has_table_privilege(current_user, t, 'UPDATE') \
                 OR has_table_privilege(current_user, t, 'DELETE') OR has_table_privilege(current_user, t, 'TRUNCATE'))",
                &[&tables],
            )
            .await
            .map_err(|e| db_err("store: role", e))?;
        let writable: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        if !writable.is_empty() {
            return Ok(Some(format!(
                "role {user} owns or can write {}",
                writable.join(", ")
            )));
        }
        if !member {
            return Ok(Some(format!(
                "role {user} is not a member of {WORKER_GROUP}"
            )));
        }
        Ok(None)
    }

    /// Whether the store's schema has the worker's functions (schema version 3), asked in a way a worker's
    /// role can (it cannot read `pool_schema`).
    pub async fn has_worker_functions(&self) -> Result<bool, String> {
        let row = self
            .client
            .query_one(
                "SELECT to_regprocedure('pool_put_evidence(text,bytea)') IS NOT NULL \
                 AND to_regprocedure('pool_run_bundle(text)') IS NOT NULL \
                 AND to_regprocedure('pool_attempt_started(text,integer,text)') IS NOT NULL",
                &[],
            )
            .await
            .map_err(|e| db_err("store: schema", e))?;
        Ok(row.get(0))
    }

    /// Records how an attempt ended, as the workflow decided. Only the workflow calls this (from a local
    /// activity), so an attempt's end is the one in the workflow's history and no worker can rewrite it.
    pub async fn attempt_ended(
        &mut self,
        run_id: &str,
        attempt: i32,
        outcome: Option<&str>,
        why: &str,
        evidence_digest: Option<&str>,
    ) -> Result<(), String> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| db_err("store", e))?;
        // An attempt whose worker died before recording its start still gets a row.
        tx.execute(
            "INSERT INTO pool_attempts (run_id, attempt, founder, worker) \
             SELECT run_id, $2::integer, founder, '(unknown: no start recorded)' FROM pool_runs WHERE run_id = $1 \
             ON CONFLICT DO NOTHING",
            &[&run_id, &attempt],
        )
        .await
        .map_err(|e| db_err("store: attempt", e))?;
        tx.execute(
            "UPDATE pool_attempts SET ended_at = now(), outcome = $3, why = $4, evidence_digest = $5 \
             WHERE run_id = $1 AND attempt = $2 AND ended_at IS NULL",
            &[&run_id, &attempt, &outcome, &why, &evidence_digest],
        )
        .await
        .map_err(|e| db_err("store: attempt", e))?;
        tx.commit().await.map_err(|e| db_err("store", e))
    }

    /// Records the run's end as the workflow decided: the accepted attempt, its outcome, verdict and evidence.
    pub async fn run_ended(
        &self,
        run_id: &str,
        accepted: Option<(i32, &str, &str, &serde_json::Value)>,
        why: &str,
    ) -> Result<(), String> {
        let (attempt, outcome, evidence, verdict) = match accepted {
            Some((a, o, e, v)) => (Some(a), Some(o), Some(e), Some(v)),
            None => (None, None, None, None),
        };
        self.client
            .execute(
                "UPDATE pool_runs SET ended_at = now(), accepted_attempt = $2, outcome = $3, \
                 evidence_digest = $4, verdict = $5, ended_why = $6 WHERE run_id = $1 AND ended_at IS NULL",
                &[&run_id, &attempt, &outcome, &evidence, &verdict, &why],
            )
            .await
            .map(|_| ())
            .map_err(|e| db_err("store: run", e))
    }

    /// The run `run_id` and its attempts, as far as this connection's role may see: a founder's role sees only
    /// its own runs, so another founder's run is reported as not found.
    pub async fn status(&self, run_id: &str) -> Result<(RunRow, Vec<AttemptRow>), String> {
        let row = self
            .client
            .query_opt(
                "SELECT run_id, founder, bundle_digest, nonce, queue, isolation, submitted_at, ended_at, \
                 outcome, accepted_attempt, evidence_digest, ended_why FROM pool_runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: run", e))?
            .ok_or_else(|| not_found(run_id))?;
        let nonce: Vec<u8> = row.get(3);
        let run = RunRow {
            run_id: row.get(0),
            founder: row.get(1),
            bundle_digest: row.get(2),
            nonce: hex::encode(nonce),
            queue: row.get(4),
            isolation: row.get(5),
            submitted_at: ts(row.get(6)),
            ended_at: row.get::<_, Option<std::time::SystemTime>>(7).map(ts),
            outcome: row.get(8),
            accepted_attempt: row.get(9),
            evidence_digest: row.get(10),
            ended_why: row.get(11),
        };
        let attempts = self
            .client
            .query(
                "SELECT attempt, worker, started_at, ended_at, outcome, why, evidence_digest \
                 FROM pool_attempts WHERE run_id = $1 ORDER BY attempt",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: attempts", e))?
            .into_iter()
            .map(|r| AttemptRow {
                attempt: r.get(0),
                worker: r.get(1),
                start: ts(r.get(2)),
                end: r.get::<_, Option<std::time::SystemTime>>(3).map(ts),
                outcome: r.get(4),
                why: r.get(5),
                evidence_digest: r.get(6),
            })
            .collect();
        Ok((run, attempts))
    }

    /// The run's result as the store records it (what `submit --wait` prints), or `None` while the store has no
    /// end for the run. The accepted attempt is the one whose execution the coordinator verified (its ledger
    /// row, `verified`, with the run's evidence): never what a workflow's result on Temporal says.
    pub async fn run_result(
        &self,
        run_id: &str,
    ) -> Result<Option<crate::workflow::RunResult>, String> {
        let (run, attempts) = self.status(run_id).await?;
        if run.ended_at.is_none() {
            return Ok(None);
        }
        let why = run.ended_why.clone().unwrap_or_default();
        let accepted = match (run.accepted_attempt, &run.evidence_digest, &run.outcome) {
            (Some(attempt), Some(digest), Some(outcome)) => {
                let rows = self.executions(run_id).await?;
                let row = rows
                    .iter()
                    .find(|r| {
                        r.attempt == attempt
                            && r.result == attestation::pool_ledger::RESULT_VERIFIED
                            && r.evidence_digest.as_deref() == Some(digest.as_str())
                    })
                    .ok_or_else(|| {
                        format!(
                            "store: run {}: the accepted attempt {attempt} has no verified execution with its \
                             evidence in the ledger",
                            attestation::text::escape(run_id)
                        )
                    })?;
                let checked = row.detail.clone().unwrap_or_default();
                Some(crate::workflow::AttemptResult {
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    execution: u32::try_from(row.execution).unwrap_or(0),
                    simulated: checked.contains(crate::ledger::SIMULATED_MARK),
                    checked,
                    worker: row.worker.clone(),
                    outcome: outcome.clone(),
                    verdict: self.verdict(run_id).await?.unwrap_or_default(),
                    evidence_digest: digest.clone(),
                    nonce: row.nonce.clone(),
                })
            }
            _ => None,
        };
        Ok(Some(crate::workflow::RunResult {
            run_id: run.run_id,
            accepted,
            attempts: u32::try_from(attempts.len()).unwrap_or(0),
            cancelled: why.starts_with(crate::workflow::CANCELLED_WHY),
            why,
        }))
    }

    /// The verdict (JSON) of the run's accepted attempt, when the run is final.
    pub async fn verdict(&self, run_id: &str) -> Result<Option<serde_json::Value>, String> {
        let row = self
            .client
            .query_opt(
                "SELECT verdict FROM pool_runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: run", e))?
            .ok_or_else(|| not_found(run_id))?;
        Ok(row.get(0))
    }

    /// The evidence of the attempt the workflow accepted for `run_id` (and that attempt's number).
    pub async fn accepted_evidence(&self, run_id: &str) -> Result<(i32, Vec<u8>), String> {
        let (run, _) = self.status(run_id).await?;
        let (Some(attempt), Some(digest)) = (run.accepted_attempt, run.evidence_digest) else {
            return Err(format!(
                "run {}: no accepted evidence yet ({})",
                attestation::text::escape(run_id),
                run.ended_why.as_deref().unwrap_or("the run is still going")
            ));
        };
        let row = self
            .client
            .query_opt(
                "SELECT bytes FROM pool_evidence WHERE founder = $1 AND digest = $2",
                &[&run.founder, &digest],
            )
            .await
            .map_err(|e| db_err("store: evidence", e))?
            .ok_or_else(|| format!("store: evidence {digest} of run {run_id} is missing"))?;
        let bytes: Vec<u8> = row.get(0);
        if crate::digest(&bytes) != digest {
            return Err(format!(
                "store: evidence {digest}: stored bytes do not hash to their address"
            ));
        }
        Ok((attempt, bytes))
    }

    /// Issues the nonce of a new execution of `attempt` for the guest key whose SHA-256 is `key_sha256`, asked by
    /// `worker`: the ledger row is committed before the nonce is returned. Returns the execution number and the
    /// nonce. Refused when the run is not in the store or has ended.
    pub async fn issue_nonce(
        &self,
        run_id: &str,
        attempt: i32,
        key_sha256: &[u8; 32],
        worker: &str,
    ) -> Result<(i32, Vec<u8>), String> {
        let key: &[u8] = key_sha256;
        let row = self
            .client
            .query_one(
                "SELECT issued_execution, issued_nonce FROM pool_issue_nonce($1, $2, $3, $4)",
                &[&run_id, &attempt, &key, &worker],
            )
            .await
            .map_err(|e| db_err("store: issuing a nonce", e))?;
        Ok((row.get(0), row.get(1)))
    }

    /// Every execution of `run_id` (as far as this role may see), by attempt and execution.
    pub async fn executions(&self, run_id: &str) -> Result<Vec<ExecutionRow>, String> {
        Ok(self
            .client
            .query(
                "SELECT attempt, execution, key_sha256, nonce, issued_at, worker, result, outcome, \
                 evidence_digest, detail FROM pool_executions WHERE run_id = $1 ORDER BY attempt, execution",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: executions", e))?
            .into_iter()
            .map(|r| ExecutionRow {
                attempt: r.get(0),
                execution: r.get(1),
                key_sha256: hex::encode(r.get::<_, Vec<u8>>(2)),
                nonce: hex::encode(r.get::<_, Vec<u8>>(3)),
                issued_at: ts(r.get(4)),
                worker: r.get(5),
                result: r
                    .get::<_, Option<String>>(6)
                    .unwrap_or_else(|| attestation::pool_ledger::RESULT_NONE.to_owned()),
                outcome: r.get(7),
                evidence_digest: r.get(8),
                detail: r.get(9),
            })
            .collect())
    }

    /// Fills the result of one execution, once (the ledger's trigger refuses a second fill). `result` is
    /// `verified` or `rejected`.
    #[allow(clippy::too_many_arguments)]
    pub async fn execution_result(
        &self,
        run_id: &str,
        attempt: i32,
        execution: i32,
        result: &str,
        outcome: Option<&str>,
        evidence_digest: Option<&str>,
        detail: &str,
    ) -> Result<(), String> {
        self.client
            .execute(
                "UPDATE pool_executions SET result = $4, outcome = $5, evidence_digest = $6, detail = $7, \
                 result_at = clock_timestamp() WHERE run_id = $1 AND attempt = $2 AND execution = $3",
                &[&run_id, &attempt, &execution, &result, &outcome, &evidence_digest, &detail],
            )
            .await
            .map(|_| ())
            .map_err(|e| db_err("store: execution result", e))
    }

    /// The evidence `digest` of `founder`, checked against its address; `None` when it is not in the store.
    pub async fn evidence(&self, founder: &str, digest: &str) -> Result<Option<Vec<u8>>, String> {
        let Some(row) = self
            .client
            .query_opt(
                "SELECT bytes FROM pool_evidence WHERE founder = $1 AND digest = $2",
                &[&founder, &digest],
            )
            .await
            .map_err(|e| db_err("store: evidence", e))?
        else {
            return Ok(None);
        };
        let bytes: Vec<u8> = row.get(0);
        if crate::digest(&bytes) != digest {
            return Err(format!(
                "store: evidence {digest}: stored bytes do not hash to their address"
            ));
        }
        Ok(Some(bytes))
    }

    /// The run's ledger as the founder receives it (unsigned; [`attestation::pool_ledger::Ledger::sign`]).
    pub async fn ledger(&self, run_id: &str) -> Result<attestation::pool_ledger::Ledger, String> {
        use sha2::Digest;
        let row = self
            .client
            .query_opt(
                "SELECT nonce, ended_at IS NOT NULL, now() FROM pool_runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: run", e))?
            .ok_or_else(|| not_found(run_id))?;
        let nonce: Vec<u8> = row.get(0);
        let executions = self.executions(run_id).await?;
        Ok(attestation::pool_ledger::Ledger {
            format: attestation::pool_ledger::LEDGER_FORMAT.into(),
            run_id: run_id.to_owned(),
            founder_nonce_sha256: hex::encode(sha2::Sha256::digest(&nonce)),
            run_ended: row.get(1),
            exported_at: ts(row.get(2)),
            executions: executions.iter().map(ExecutionRow::to_ledger).collect(),
        })
    }
}

fn not_found(run_id: &str) -> String {
    format!(
        "run {}: not found in the store (or not one of this role's runs)",
        attestation::text::escape(run_id)
    )
}

/// What `pool status` shows of a run: the workflow's state as Temporal reports it and the store's rows.
#[derive(Debug)]
pub struct StatusView {
    /// The run's row.
    pub run: RunRow,
    /// Its attempts.
    pub attempts: Vec<AttemptRow>,
    /// Its executions (the ledger).
    pub executions: Vec<ExecutionRow>,
    /// The workflow's state, from Temporal.
    pub workflow: String,
}

/// Where reading a run's status failed.
#[derive(Debug)]
pub enum StatusReadError {
    /// The store could not be reached.
    Connect(String),
    /// The run's row or attempts could not be read (no such run, or the store failed).
    Run(String),
    /// The executions could not be read.
    Executions(String),
}

/// Reads a run's status for `pool status`, directly and through the gateway: the workflow's state first (awaiting
/// `workflow`), then the store's rows. The workflow records the run's end before it completes, so a workflow read
/// as completed always comes with its end; read the other way round, a run ending in between looked completed
/// with no outcome.
pub async fn read_status(
    workflow: impl std::future::Future<Output = String>,
    store_url: &str,
    run_id: &str,
) -> Result<StatusView, StatusReadError> {
    let workflow = workflow.await;
    let store = Store::connect(store_url)
        .await
        .map_err(StatusReadError::Connect)?;
    let (run, attempts) = store.status(run_id).await.map_err(StatusReadError::Run)?;
    let executions = store
        .executions(run_id)
        .await
        .map_err(StatusReadError::Executions)?;
    Ok(StatusView {
        run,
        attempts,
        executions,
        workflow,
    })
}
