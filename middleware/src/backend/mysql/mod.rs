//! The MySQL/MariaDB backend: one lease row per lock, with a version column as fencing token.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

use super::sql::acquire_detached;
use super::{
    Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, OwnerToken, TokenLease,
};
use crate::FencingToken;
use statements::{MAX_NAME_LEN, Statements};

mod statements;

/// The table a backend made by [`connect`](MysqlBackend::connect) keeps its leases in.
pub const DEFAULT_TABLE: &str = "tower_lock_leases";

/// Locks in MySQL or MariaDB, shared by every process that uses the same database and table.
///
/// The design of the classic MySQL lock, done carefully: one row per lock name with a unique
/// key, the holder's owner id (only the owner extends or releases), an expiry (so a dead
/// holder frees the lock), and a version column that is the fencing token — bumped by every
/// acquire and kept across releases, so it increases strictly per name. An acquire is one
/// `INSERT … ON DUPLICATE KEY UPDATE` that takes the row only if it is free or expired and
/// returns the new version through `LAST_INSERT_ID`; when the lock is busy, a second query asks
/// how long the holder has left. Extending and releasing are one owner-checked `UPDATE` each.
/// Expiry is measured by the server's UTC clock (`UTC_TIMESTAMP(6)`), never a client's, and
/// whatever the session's time zone.
///
/// The table is created on connect when it is missing (idempotent):
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS tower_lock_leases (
///     name       VARBINARY(512) NOT NULL PRIMARY KEY,
///     owner      CHAR(32) NULL,    -- the holder's owner token; NULL when free
///     expires_at DATETIME(6) NULL, -- UTC, by the server's clock; NULL when free
///     fence      BIGINT UNSIGNED NOT NULL -- the version: the last fencing token issued
/// ) ENGINE = InnoDB;
/// ```
///
/// Lock names are at most 512 bytes (a locker whose names could be longer is refused when it
/// is built). MySQL has no `LISTEN`: waiters poll with backoff.
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::mysql::MysqlBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = MysqlBackend::connect("mysql://app@127.0.0.1/app").await?;
/// let locker = Locker::new(backend);
/// let held = locker.lock("coupon:42").await?;
/// assert!(held.fence().is_some());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MysqlBackend {
    pool: MySqlPool,
    statements: Arc<Statements>,
}

impl MysqlBackend {
    /// Connects to the database at `url` (a pool of up to 10 connections) and keeps leases in
    /// [`DEFAULT_TABLE`], creating it when missing.
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        let pool = MySqlPoolOptions::new()
            .max_connections(10)
            .connect(url)
            .await
            .map_err(BackendError::new)?;
        Self::with_table(pool, DEFAULT_TABLE).await
    }

    /// Keeps leases in `table` (a name, or `database.name`) of the server behind `pool`,
    /// creating the table when missing.
    ///
    /// # Errors
    ///
    /// When `table` is not one or two plain identifiers (letters, digits and `_`, not starting
    /// with a digit), or the server refused to create the table.
    pub async fn with_table(pool: MySqlPool, table: &str) -> Result<Self, BackendError> {
        let statements = Statements::for_table(table)?;
        sqlx::query(&statements.create_table)
            .execute(&pool)
            .await
            .map_err(BackendError::new)?;
        Ok(Self {
            pool,
            statements: Arc::new(statements),
        })
    }

    /// One acquire statement (and, when busy, one query for the holder's time left).
    async fn try_acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let done = sqlx::query(&self.statements.acquire)
            .bind(name.as_bytes())
            .bind(request.token.to_string())
            .bind(micros(request.ttl))
            .execute(&self.pool)
            .await
            .map_err(BackendError::new)?;
        if let fence @ 1.. = done.last_insert_id() {
            return Ok(Attempt::Acquired(Granted {
                lease: TokenLease::new(request.token, Hold::Mutex),
                fence: Some(FencingToken::new(fence)),
            }));
        }
        let left: Option<Option<i64>> = sqlx::query_scalar(&self.statements.holder_left)
            .bind(name.as_bytes())
            .fetch_optional(&self.pool)
            .await
            .map_err(BackendError::new)?;
        let left = left.flatten().and_then(|micros| u64::try_from(micros).ok());
        Ok(Attempt::Busy {
            holder_ttl: left.map(Duration::from_micros),
        })
    }

    /// Runs the owner-checked `statement` on `name` for `owner`: whether it matched the row,
    /// that is whether the lease was still the owner's.
    async fn owner_checked(
        &self,
        statement: &str,
        ttl: Option<Duration>,
        name: &str,
        owner: OwnerToken,
    ) -> Result<bool, BackendError> {
        let query = sqlx::query(statement);
        let query = match ttl {
            Some(ttl) => query.bind(micros(ttl)),
            None => query,
        };
        let query = query.bind(name.as_bytes()).bind(owner.to_string());
        let done = query.execute(&self.pool).await.map_err(BackendError::new)?;
        Ok(done.rows_affected() == 1)
    }
}

impl LockBackend for MysqlBackend {
    type Lease = TokenLease;

    /// The statement runs in a task of its own: an `abandon` sent on another pooled
    /// connection could otherwise reach the server before the acquire it undoes.
    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        acquire_detached(self, name, request, |backend, name, request| async move {
            backend.try_acquire(&name, request).await
        })
        .await
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let extend = &self.statements.extend;
        self.owner_checked(extend, Some(ttl), name, lease.token())
            .await
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        let release = &self.statements.release;
        self.owner_checked(release, None, name, lease.token()).await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        let release = &self.statements.release;
        self.owner_checked(release, None, name, request.token)
            .await
            .map(drop)
    }

    fn max_name_len(&self) -> Option<usize> {
        Some(MAX_NAME_LEN)
    }
}

/// A duration in whole microseconds, as the statements take it.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("table", &self.statements.table)
            .finish_non_exhaustive()
    }
}
