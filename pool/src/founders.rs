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
pub const FOUNDERS_SCHEMA_VERSION: i32 = 2;

/// How long a token is accepted when `pool founder add` is not given `--expires-in`: 90 days.
pub const DEFAULT_TOKEN_LIFETIME: std::time::Duration =
    std::time::Duration::from_secs(90 * 24 * 3600);

/// The longest `--expires-in`: 5 years (a token is a bearer secret: it should end).
pub const MAX_TOKEN_LIFETIME: std::time::Duration =
    std::time::Duration::from_secs(5 * 366 * 24 * 3600);

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

/// The migration to version 2: tokens expire (`expires_at`). Tokens issued before it expire
/// [`DEFAULT_TOKEN_LIFETIME`] after they were issued.
const FOUNDERS_MIGRATION_2: &str = r#"
ALTER TABLE pool_founders ADD COLUMN expires_at timestamptz;
UPDATE pool_founders SET expires_at = issued_at + interval '90 days';
ALTER TABLE pool_founders ALTER COLUMN expires_at SET NOT NULL;
"#;

/// What a token presented to the gateway is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    /// A current token of this founder.
    Valid(String),
    /// A token the store knows whose time is over: the founder and when it expired (RFC 3339).
    Expired(String, String),
    /// A token the store does not know (never issued, or replaced).
    Unknown,
}

/// Parses `--expires-in`: a whole number with a unit, `s`, `m`, `h` or `d` (`90d`, `12h`), from 1 s to
/// [`MAX_TOKEN_LIFETIME`].
pub fn parse_lifetime(s: &str) -> Result<std::time::Duration, String> {
    let shown = attestation::text::escape(s);
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let per: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => {
            return Err(format!(
                "{shown}: give a whole number and a unit, s, m, h or d (e.g. 90d, 12h)"
            ))
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{shown}: give a whole number and a unit (e.g. 90d, 12h)"))?;
    let secs = n.saturating_mul(per);
    if secs == 0 || secs > MAX_TOKEN_LIFETIME.as_secs() {
        return Err(format!(
            "{shown}: from 1s to {} days",
            MAX_TOKEN_LIFETIME.as_secs() / 86400
        ));
    }
    Ok(std::time::Duration::from_secs(secs))
}

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
        if before < 2 {
            tx.batch_execute(FOUNDERS_MIGRATION_2)
                .await
                .map_err(|e| db_err("founders migration 2", e))?;
            tx.execute("INSERT INTO pool_gateway_schema (version) VALUES (2)", &[])
                .await
                .map_err(|e| db_err("founders migration 2", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| db_err("founders migration", e))?;
        Ok(before)
    }

    /// Issues a token for `name`, accepted for `lifetime`, and stores its hash: a new founder, or (with
    /// `replace`) a new token for an existing one, the old token no longer accepted. Returns the token, which is
    /// not kept anywhere, and when it expires (RFC 3339).
    pub async fn issue(
        &self,
        name: &str,
        replace: bool,
        lifetime: std::time::Duration,
    ) -> Result<(String, String), FounderError> {
        check_name(name)?;
        let token = new_token()?;
        let hash = token_hash(&token).to_vec();
        let secs = f64::from(u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX));
        let row = if replace {
            self.client
                .query_opt(
                    "UPDATE pool_founders SET token_sha256 = $2, issued_at = now(), \
                     expires_at = now() + make_interval(secs => $3) WHERE founder = $1 \
                     RETURNING expires_at",
                    &[&name, &hash, &secs],
                )
                .await
                .map_err(|e| db_err(&format!("founder {name}"), e))?
        } else {
            self.client
                .query_opt(
                    "INSERT INTO pool_founders (founder, token_sha256, expires_at) \
                     VALUES ($1, $2, now() + make_interval(secs => $3)) \
                     ON CONFLICT (founder) DO NOTHING RETURNING expires_at",
                    &[&name, &hash, &secs],
                )
                .await
                .map_err(|e| db_err(&format!("founder {name}"), e))?
        };
        match (row, replace) {
            (None, false) => Err(FounderError::Exists(name.to_owned())),
            (None, true) => Err(FounderError::NoSuchFounder(name.to_owned())),
            (Some(r), _) => Ok((token, rfc3339(r.get(0)))),
        }
    }

    /// What the token is: a current founder's, an expired one's, or unknown. The token is looked up by its
    /// SHA-256 (an index lookup: no comparison of secrets byte by byte in this process); the store's clock
    /// decides expiry.
    pub async fn authenticate(&self, token: &str) -> Result<TokenCheck, FounderError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Ok(TokenCheck::Unknown);
        }
        let hash = token_hash(token).to_vec();
        let row = self
            .client
            .query_opt(
                "SELECT founder, expires_at, expires_at <= now() FROM pool_founders WHERE token_sha256 = $1",
                &[&hash],
            )
            .await
            .map_err(|e| db_err("store: founders", e))?;
        Ok(match row {
            None => TokenCheck::Unknown,
            Some(r) if r.get::<_, bool>(2) => TokenCheck::Expired(r.get(0), rfc3339(r.get(1))),
            Some(r) => TokenCheck::Valid(r.get(0)),
        })
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

fn rfc3339(t: std::time::SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes() {
        use std::time::Duration;
        assert_eq!(parse_lifetime("90d"), Ok(Duration::from_secs(90 * 86400)));
        assert_eq!(parse_lifetime("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_lifetime("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_lifetime("1s"), Ok(Duration::from_secs(1)));
        for bad in [
            "",
            "0d",
            "d",
            "90",
            "9x",
            "-1d",
            "1.5d",
            "99999999999999999999d",
            "1900d",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad:?}");
        }
    }

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
