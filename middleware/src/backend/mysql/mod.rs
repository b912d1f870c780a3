//! The MySQL/MariaDB backend: one lease row per lock, with a version column as fencing token.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{MySql, MySqlPool, Row};

use super::sql::lease_rows::{LeaseRows, lease_rows_backend};
use super::sql::{AcquireSlots, ReachablePool, connect_pool};
use super::waiting::WaitingRoom;
use super::{Attempt, BackendError, Granted, Hold, LockRequest, OwnerToken, Patience, TokenLease};
use crate::backend::FencingToken;
use statements::{MAX_NAME_LEN, Param, Statement, Statements};

mod inspection;
mod nowait;
mod queue_rows;
mod statements;

pub use nowait::{DEFAULT_ROW_TABLE, NowaitBackend};

/// The table a backend made by [`connect`](MysqlBackend::connect) keeps its leases in.
pub const DEFAULT_TABLE: &str = "tower_lock_leases";

/// Locks in MySQL or MariaDB, shared by every process that uses the same database and table.
///
/// The design of the classic MySQL lock, done carefully: one row per lock name with a unique key,
/// the holder's owner id (only the owner extends or releases), an expiry (so a dead holder frees
/// the lock), and a version column that is the fencing token — bumped by every exclusive acquire
/// and kept across releases, so it increases strictly per name. An acquire is one `INSERT … ON
/// DUPLICATE KEY UPDATE` that takes the row only if it allows it and returns the new version
/// through `LAST_INSERT_ID`; when the lock is busy, a second query asks how long until it may
/// change. Readers and permit holders are kept in the same row (a JSON array with an expiry each),
/// beside the waiting writers' places in line and waiting readers' claims (readers and writers
/// take turns, and writers in the order they came),
/// so read-write locks and semaphores are one statement too. Extending and releasing are one
/// owner-checked `UPDATE` each. Expiry is measured by the server's UTC clock (`UTC_TIMESTAMP(6)`),
/// never a client's, and whatever the session's time zone. Needs `JSON_TABLE`: MariaDB 10.6 or
/// MySQL 8.
///
/// The table is created on connect when it is missing (idempotent):
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS tower_lock_leases (
///     name           VARBINARY(512) NOT NULL PRIMARY KEY,
///     owner          CHAR(32) NULL,    -- the mutex's or writer's owner token; NULL when free
///     expires_at     DATETIME(6) NULL, -- UTC, by the server's clock; NULL when free
///     fence          BIGINT UNSIGNED NOT NULL, -- the version: the last fencing token issued
///     holder         VARCHAR(512) NULL, -- the exclusive holder's label
///     since          DATETIME(6) NULL, -- when it took the lock (UTC)
///     is_writer      BOOLEAN NOT NULL DEFAULT FALSE, -- it is a writer, not a mutex holder
///     shared         JSON NOT NULL,    -- readers or permit holders:
///                                      -- [{"t": owner token, "e": expiry, µs since the epoch}]
///     holders        JSON NULL,        -- their records, for an operator:
///                                      -- {owner token: [label, since µs, permits; 0 a reader]}
///     claims         JSON NULL,        -- waiting readers, the next turn is theirs:
///                                      -- [{"t": owner token, "e": expiry, µs since the epoch}]
///     writers        JSON NULL,        -- waiting writers, in line by arrival; the first has
///                                      -- the next writer's turn, and may bar new readers:
///                                      -- [{"t": owner token, "a": arrival, "e": expiry,
///                                      --   µs since the epoch, "b": bars readers 0 | 1}]
///     waited         BOOLEAN NOT NULL DEFAULT FALSE, -- releases go through the queue
///     tickets        MEDIUMTEXT NULL   -- the queue of waiters' tickets
/// ) ENGINE = InnoDB;
/// ```
///
/// Lock names are at most 512 bytes (a locker whose names could be longer is refused when it
/// is built). MySQL has no `LISTEN`: waiters poll with backoff, in line — one per process
/// polls, holding a ticket in the row's queue.
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
    pool: ReachablePool<MySql>,
    statements: Arc<Statements>,
    slots: AcquireSlots,
    room: Arc<WaitingRoom>,
}

impl MysqlBackend {
    /// Connects to the database at `url` (a pool of up to 10 connections) and keeps leases in
    /// [`DEFAULT_TABLE`], creating it when missing.
    ///
    /// The pool pings a connection before handing it out only when it was idle for more than a
    /// second (sqlx's default pings every time: a round trip in front of each statement). A
    /// pool of your own goes to [`with_table`](Self::with_table).
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Self::connect_to_table(url, DEFAULT_TABLE).await
    }

    /// [`connect`](Self::connect), the leases in `table`.
    pub(crate) async fn connect_to_table(url: &str, table: &str) -> Result<Self, BackendError> {
        let pool = connect_pool(url, 10).await?;
        Self::with_table(pool, table).await
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
            slots: AcquireSlots::of_pool(pool.options().get_max_connections()),
            pool: ReachablePool::new(pool),
            statements: Arc::new(statements),
            room: WaitingRoom::silent(),
        })
    }

    /// Runs the owner-checked `statement` on `name` for `owner` (and `ttl` and its `label`,
    /// where it takes them): whether it matched the row, that is whether the lease was still
    /// the owner's.
    async fn owner_checked(
        &self,
        statement: &Statement,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
        label: Option<&'static str>,
    ) -> Result<bool, BackendError> {
        let args = Args {
            name,
            owner,
            ttl,
            permits: None,
            patient: false,
            label,
        };
        let done = args
            .bind(statement)
            .execute(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        Ok(done.rows_affected() == 1)
    }
}

/// The values a statement's `?`s stand for.
#[derive(Clone, Copy)]
struct Args<'a> {
    name: &'a str,
    owner: OwnerToken,
    ttl: Duration,
    permits: Option<NonZeroU32>,
    patient: bool,
    label: Option<&'static str>,
}

impl<'a> Args<'a> {
    /// `statement` with its `?`s bound, in its order.
    fn bind(self, statement: &'a Statement) -> Query<'a, MySql, MySqlArguments> {
        statement
            .params
            .iter()
            .fold(sqlx::query(&statement.sql), |query, param| match param {
                Param::Name => query.bind(self.name.as_bytes()),
                Param::Owner => query.bind(self.owner.to_string()),
                Param::Ttl => query.bind(micros(self.ttl)),
                Param::Permits => query.bind(self.permits.map_or(0, NonZeroU32::get)),
                Param::Patient => query.bind(self.patient),
                Param::Label => query.bind(self.label),
                Param::Zero => query.bind(0),
            })
    }
}

/// MySQL's dialect of lease rows. MySQL cannot announce a release, so this process's waiters
/// for a lock are woken here (a shared hold's release) or by the queue (an exclusive one's
/// handed to nobody of this process).
impl LeaseRows for MysqlBackend {
    /// One acquire statement for `hold` (and, when busy, one query for how long until the
    /// lock may change).
    async fn try_acquire(
        &self,
        name: &str,
        request: LockRequest,
        hold: Hold,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let statements = &self.statements;
        let (statement, permits) = match hold {
            Hold::Mutex => (&statements.acquire, None),
            Hold::Read => (&statements.acquire_read, None),
            Hold::Write => (&statements.acquire_write, None),
            Hold::Permit { permits } => (&statements.acquire_permit, Some(permits)),
        };
        let args = Args {
            name,
            owner: request.token,
            ttl: request.ttl,
            permits,
            patient: request.patience != Patience::Once,
            label: Some(request.holder),
        };
        let done = args
            .bind(statement)
            .execute(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        if let answer @ 1.. = done.last_insert_id() {
            return Ok(Attempt::Acquired(Granted {
                lease: TokenLease::new(request.token, hold).labelled(request.holder),
                fence: hold.is_exclusive().then(|| FencingToken::new(answer)),
            }));
        }
        let left: Option<Option<i64>> = args
            .bind(&statements.holder_left)
            .try_map(|row: MySqlRow| row.try_get(0))
            .fetch_optional(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        let left = left.flatten().and_then(|micros| u64::try_from(micros).ok());
        Ok(Attempt::Busy {
            holder_ttl: left.map(Duration::from_micros),
        })
    }

    async fn extend_lease(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let statements = &self.statements;
        let extend = if lease.hold().is_exclusive() {
            &statements.extend
        } else {
            &statements.extend_shared
        };
        (self.owner_checked(extend, name, lease.token(), ttl, lease.label())).await
    }

    async fn release_shared(&self, name: &str, owner: OwnerToken) -> Result<bool, BackendError> {
        let release = &self.statements.release_shared;
        (self.owner_checked(release, name, owner, Duration::ZERO, None)).await
    }

    async fn release_unwaited(&self, name: &str, owner: OwnerToken) -> Result<bool, BackendError> {
        let release = &self.statements.release;
        (self.owner_checked(release, name, owner, Duration::ZERO, None)).await
    }

    async fn abandon_attempt(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        let abandon = &self.statements.abandon;
        self.owner_checked(abandon, name, request.token, request.ttl, None)
            .await
            .map(drop)
    }
}

lease_rows_backend!(MysqlBackend, "mysql", MAX_NAME_LEN);

/// A duration in whole microseconds, as the statements take it.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(feature = "test-util")]
impl MysqlBackend {
    /// The statements a mutex's acquire and release send (feature `test-util`), for
    /// benchmarks that compare the backend with its own SQL sent directly. The acquire takes
    /// name (bytes), owner token, TTL in µs, holder label and answers in `LAST_INSERT_ID`
    /// (the fence, or 0 when busy); the release takes name, owner token.
    pub fn mutex_statements(&self) -> (&str, &str) {
        (&self.statements.acquire.sql, &self.statements.release.sql)
    }
}

impl fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("table", &self.statements.table)
            .finish_non_exhaustive()
    }
}
