//! Founders' credentials for the gateway (docs/pool.md, "The founder gateway"): `pool founder add NAME` issues a
//! random bearer token, printed once; the store keeps only its SHA-256 in `pool_founders`, so a copy of the
//! store does not let anyone act as a founder. Founders get no database role: the token is the only thing they
//! hold, and it opens the gateway, not PostgreSQL.
//!
//! The table has its own migration track (`pool_gateway_schema`), run under the same advisory lock as the
//! store's migration, so the gateway's table and the store's schema (`store.rs`) are upgraded independently.

use sha2::{Digest, Sha256};
use std::str::FromStr;
use tokio_postgres::{Client, NoTls};

/// The version of the founders' table schema the migration brings a store to.
pub const FOUNDERS_SCHEMA_VERSION: i32 = 1;

/// What every issued token starts with (so that a token pasted in the wrong place is recognisable).
pub const TOKEN_PREFIX: &str = "frp1_";

/// The longest `Authorization` credential the gateway looks at; anything longer is refused unread.
pub const MAX_TOKEN_LEN: usize = 256;

const FOUNDERS_MIGRATION_1: &str = r#"
CREATE TABLE pool_founders (
    founder text PRIMARY KEY CHECK (founder ~ '^[a-z_][a-z0-9_]{0,62}$'),
    token_sha256 bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    issued_at timestamptz NOT NULL DEFAULT now()
);
"#;

/// Errors of the founders' table.
#[derive(Debug, thiserror::Error)]
pub enum FounderError {
    /// The founder name is not usable.
    #[error("founder name {0}: use 1 to 63 of a-z, 0-9 and _, not starting with a digit")]
    BadName(String),
    /// The founder already has a token (and `--replace` was not given).
    #[error("founder {0} already exists; `pool founder add {0} --replace` issues a new token (the old one stops working)")]
    Exists(String),
    /// `--replace` for a founder that does not exist.
    #[error("founder {0} does not exist")]
    NoSuchFounder(String),
    /// The store refused or could not be reached.
    #[error("{0}")]
    Store(String),
    /// No randomness for the token.
    #[error("cannot read random bytes for the token: {0}")]
    Random(String),
}

fn db_err(what: &str, e: tokio_postgres::Error) -> FounderError {
    FounderError::Store(match e.as_db_error() {
        Some(d) => format!("{what}: {}", d.message()),
        None => format!("{what}: {e}"),
    })
}

/// Checks a founder name: 1 to 63 of a-z, 0-9 and `_`, not starting with a digit (the rule the store's founder
/// column and the gateway's run-ID scoping rely on: a name never contains `:`).
pub fn check_name(name: &str) -> Result<(), FounderError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(FounderError::BadName(
            attestation::text::escape(name).into_owned(),
        ))
    }
}

/// SHA-256 of a token, as stored.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A new token: the prefix and 32 random bytes from the operating system, hex.
pub fn new_token() -> Result<String, FounderError> {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut b)
        .map_err(|e| FounderError::Random(e.to_string()))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(b)))
}

/// A connection to the store for the founders' table and the gateway's ownership checks.
pub struct Founders {
    client: Client,
    conn: tokio::task::JoinHandle<()>,
}

impl Drop for Founders {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl Founders {
    /// Connects to the store at `url` (as for `--store`).
    pub async fn connect(url: &str) -> Result<Founders, FounderError> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| {
            FounderError::Store(format!("--store: not a PostgreSQL connection URL: {e}"))
        })?;
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| db_err("--store: cannot connect", e))?;
        let conn = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Founders { client, conn })
    }

    /// Creates or upgrades the founders' table (one transaction, under the store migration's advisory lock).
    pub async fn migrate(&mut self) -> Result<i32, FounderError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| db_err("founders migration", e))?;
        tx.execute("SELECT pg_advisory_xact_lock(7316104531)", &[])
            .await
            .map_err(|e| db_err("founders migration: lock", e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS pool_gateway_schema (version integer NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(|e| db_err("founders migration: pool_gateway_schema", e))?;
        let before: i32 = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM pool_gateway_schema",
                &[],
            )
            .await
            .map_err(|e| db_err("founders migration: version", e))?
            .get(0);
        if before > FOUNDERS_SCHEMA_VERSION {
            return Err(FounderError::Store(format!(
                "the founders' table is at version {before}; this build knows up to {FOUNDERS_SCHEMA_VERSION}"
            )));
        }
        if before < 1 {
            tx.batch_execute(FOUNDERS_MIGRATION_1)
                .await
                .map_err(|e| db_err("founders migration 1", e))?;
            tx.execute("INSERT INTO pool_gateway_schema (version) VALUES (1)", &[])
                .await
                .map_err(|e| db_err("founders migration 1", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| db_err("founders migration", e))?;
        Ok(before)
    }

    /// Issues a token for `name` and stores its hash: a new founder, or (with `replace`) a new token for an
    /// existing one, the old token no longer accepted. Returns the token, which is not kept anywhere.
    pub async fn issue(&self, name: &str, replace: bool) -> Result<String, FounderError> {
        check_name(name)?;
        let token = new_token()?;
        let hash = token_hash(&token).to_vec();
        let n = if replace {
            self.client
                .execute(
                    "UPDATE pool_founders SET token_sha256 = $2, issued_at = now() WHERE founder = $1",
                    &[&name, &hash],
                )
                .await
                .map_err(|e| db_err(&format!("founder {name}"), e))?
        } else {
            self.client
                .execute(
                    "INSERT INTO pool_founders (founder, token_sha256) VALUES ($1, $2) \
                     ON CONFLICT (founder) DO NOTHING",
                    &[&name, &hash],
                )
                .await
                .map_err(|e| db_err(&format!("founder {name}"), e))?
        };
        match (n, replace) {
            (0, false) => Err(FounderError::Exists(name.to_owned())),
            (0, true) => Err(FounderError::NoSuchFounder(name.to_owned())),
            _ => Ok(token),
        }
    }

    /// The founder whose token this is, or None. The token is looked up by its SHA-256 (an index lookup: no
    /// comparison of secrets byte by byte in this process).
    pub async fn authenticate(&self, token: &str) -> Result<Option<String>, FounderError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Ok(None);
        }
        let hash = token_hash(token).to_vec();
        let row = self
            .client
            .query_opt(
                "SELECT founder FROM pool_founders WHERE token_sha256 = $1",
                &[&hash],
            )
            .await
            .map_err(|e| db_err("store: founders", e))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// The founder that owns the run `run_id`, or None when there is no such run.
    pub async fn owner_of(&self, run_id: &str) -> Result<Option<String>, FounderError> {
        let row = self
            .client
            .query_opt(
                "SELECT founder FROM pool_runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(|e| db_err("store: run", e))?;
        Ok(row.map(|r| r.get(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["alice", "a", "_x", "bob_2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "2a", "Alice", "a:b", "a-b", &"a".repeat(64), "a\u{1b}"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tokens_are_random_and_prefixed() {
        let a = new_token().expect("token");
        let b = new_token().expect("token");
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 64);
        assert_ne!(token_hash(&a), token_hash(&b));
    }
}
