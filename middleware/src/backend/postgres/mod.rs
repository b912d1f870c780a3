//! The PostgreSQL backend: one lease row per lock, taken and given back in one statement each.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgPool, Postgres};

use super::sql::lease_rows::{LeaseRows, lease_rows_backend};
use super::sql::{AcquireSlots, ReachablePool, connect_pool};
use super::waiting::WaitingRoom;
use super::{Attempt, BackendError, Granted, Hold, LockRequest, OwnerToken, Patience, TokenLease};
use crate::backend::FencingToken;
use statements::Statements;

mod advisory;
mod inspection;
mod listener;
mod queue_rows;
mod statements;

pub use advisory::{AdvisoryBackend, DEFAULT_NAMESPACE};

/// The table a backend made by [`connect`](PostgresBackend::connect) keeps its leases in.
pub const DEFAULT_TABLE: &str = "tower_lock_leases";

/// Locks in PostgreSQL, shared by every process that uses the same database and table.
///
/// Each lock name that was ever taken has one row holding all of its state: the exclusive holder's
/// owner token and the lease's expiry (both `NULL` when free), a fencing counter that survives
/// releases, the readers or permit holders with an expiry each, the waiting writers' places in
/// line and waiting readers' claims. Every acquire is one statement: an `INSERT … ON CONFLICT (name) DO
/// UPDATE … WHERE` the row allows it (free or expired for a mutex; no writer nor barring intent for
/// a reader; no reader, no writer that came before it and no readers' claim for a writer, unless
/// its intent bars readers; fewer
/// holders than permits for a semaphore), which PostgreSQL checks with the row locked; a mutex or
/// writer gets the bumped counter as its fencing token, and a busy acquire learns from the same
/// statement how long until the lock may change. Extending and releasing are one owner-checked
/// `UPDATE` each. Expiry is measured by the database's clock (`clock_timestamp()`), never a
/// client's, so replicas with skewed clocks agree on who holds a lock.
///
/// The table is created on connect when it is missing (idempotent):
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS tower_lock_leases (
///     name           text COLLATE "C" PRIMARY KEY,
///     owner          text,             -- the mutex's or writer's owner token; NULL when free
///     expires_at     timestamptz,      -- by the database's clock; NULL when free
///     fence          bigint NOT NULL,  -- the last fencing token issued for this name
///     holder         text,             -- the exclusive holder's label
///     since          timestamptz,      -- when it took the lock
///     is_writer      boolean NOT NULL DEFAULT false, -- it is a writer, not a mutex holder
///     shared         jsonb NOT NULL DEFAULT '{}', -- readers or permit holders:
///                                      -- owner token -> expiry, ms since the epoch
///     holders        jsonb NOT NULL DEFAULT '{}', -- their records, for an operator: owner
///                                      -- token -> [label, since ms, permits; 0 a reader]
///     claims         jsonb NOT NULL DEFAULT '{}', -- waiting readers: the next turn is theirs
///                                      -- owner token -> expiry, ms since the epoch
///     writers        jsonb NOT NULL DEFAULT '{}', -- waiting writers, in line by arrival; the
///                                      -- first has the next writer's turn, may bar readers:
///                                      -- owner token -> [arrival µs, expiry ms, bars readers]
///     waited         boolean NOT NULL DEFAULT false, -- releases go through the queue
///     tickets        text NOT NULL DEFAULT ''       -- the queue of waiters' tickets
/// );
/// ```
///
/// Rows stay after release, so fencing tokens keep increasing per name: one small row per
/// lock name in use. Waiters are woken by `LISTEN/NOTIFY` (one listening connection of the
/// pool per backend, one channel per table), and queue in the row for fair and notified
/// waiting.
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::postgres::PostgresBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = PostgresBackend::connect("postgres://app@127.0.0.1/app").await?;
/// let locker = Locker::new(backend);
/// let held = locker.lock("coupon:42").await?;
/// assert!(held.fence().is_some());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresBackend {
    pool: ReachablePool<Postgres>,
    statements: Arc<Statements>,
    slots: AcquireSlots,
    room: Arc<WaitingRoom>,
    /// The channel the table's releases are announced on.
    channel: Arc<str>,
}

/// The longest lock name: an announcement's payload (at most 8000 bytes) carries it.
const MAX_NAME_LEN: usize = 7_900;

impl PostgresBackend {
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

    /// Keeps leases in `table` (a name, or `schema.name`) of the database behind `pool`,
    /// creating the table when missing.
    ///
    /// # Errors
    ///
    /// When `table` is not one or two plain identifiers (letters, digits and `_`, not starting
    /// with a digit), or the database refused to create the table.
    pub async fn with_table(pool: PgPool, table: &str) -> Result<Self, BackendError> {
        let statements = Statements::for_table(table)?;
        let create = || sqlx::query(&statements.create_table).execute(&pool);
        // Two sessions creating the same table at once can collide in PostgreSQL's catalog
        // (replicas starting together); the second try finds the table made.
        if create().await.is_err() {
            create().await.map_err(BackendError::new)?;
        }
        let channel = listener::channel(table);
        let room = listener::waiting_room(&pool, &channel).await?;
        // The listening connection is one of the pool's for good.
        let connections = pool.options().get_max_connections().saturating_sub(1);
        Ok(Self {
            slots: AcquireSlots::of_pool(connections),
            pool: ReachablePool::new(pool),
            statements: Arc::new(statements),
            room,
            channel: channel.into(),
        })
    }

    /// The acquire statement for `hold`, and whether the lock was waited for already.
    async fn ask(
        &self,
        name: &str,
        request: LockRequest,
        hold: Hold,
    ) -> Result<(Attempt<Granted<TokenLease>>, bool), BackendError> {
        let statements = &self.statements;
        let statement = match hold {
            Hold::Mutex => &statements.acquire,
            Hold::Read => &statements.acquire_read,
            Hold::Write => &statements.acquire_write,
            Hold::Permit { .. } => &statements.acquire_permit,
        };
        let query = sqlx::query_as(statement)
            .bind(name)
            .bind(request.token.to_string())
            .bind(millis(request.ttl))
            .bind(request.holder);
        let query = match hold {
            Hold::Permit { permits } => query.bind(i64::from(permits.get())),
            _ => query,
        };
        let (taken, holder_ms, waited): (Option<i64>, Option<i64>, Option<bool>) = query
            .fetch_one(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        let answer = match taken {
            Some(fence) => Attempt::Acquired(Granted {
                lease: TokenLease::new(request.token, hold).labelled(request.holder),
                fence: hold
                    .is_exclusive()
                    .then(|| FencingToken::new(u64::try_from(fence).unwrap_or(0))),
            }),
            None => Attempt::Busy {
                holder_ttl: holder_ms
                    .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            },
        };
        Ok((answer, waited == Some(true)))
    }

    /// Runs `statement` on `name` for `owner` (and `ttl`, where it takes one): whether it
    /// changed the row, that is whether the lease was still the owner's.
    async fn owner_checked(
        &self,
        statement: &str,
        name: &str,
        owner: OwnerToken,
        ttl: Option<Duration>,
    ) -> Result<bool, BackendError> {
        let query = sqlx::query(statement).bind(name).bind(owner.to_string());
        let query = match ttl {
            Some(ttl) => query.bind(millis(ttl)),
            None => query,
        };
        let done = query
            .execute(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        Ok(done.rows_affected() == 1)
    }
}

impl PostgresBackend {
    /// Runs `statement` (which returns the row's `waited`) on `name` for `owner`; announces
    /// the lock free when it changed a row that is waited for. `None`: it changed nothing.
    async fn returning_waited(
        &self,
        statement: &str,
        name: &str,
        owner: OwnerToken,
    ) -> Result<Option<bool>, BackendError> {
        let waited: Option<bool> = sqlx::query_scalar(statement)
            .bind(name)
            .bind(owner.to_string())
            .fetch_optional(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        if waited == Some(true) {
            self.announce_free(name).await?;
        }
        Ok(waited)
    }
}

/// PostgreSQL's dialect of lease rows: a shared hold's release, and an abandoned acquire, are
/// announced (`NOTIFY`) when the row is waited for.
impl LeaseRows for PostgresBackend {
    /// One acquire statement for `hold`: taken (with a fence when exclusive), or busy with
    /// how long until the lock may change. A busy writer that will ask again leaves its
    /// intent, a busy reader its claim, with a second statement; a busy caller that listens
    /// marks the lock as waited
    /// for (unless it is already), and then asks once more: a release between the answer and
    /// the mark was not announced, every one after it is.
    async fn try_acquire(
        &self,
        name: &str,
        request: LockRequest,
        hold: Hold,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let (answer, waited) = self.ask(name, request, hold).await?;
        if matches!(answer, Attempt::Acquired(_)) {
            return Ok(answer);
        }
        let statements = &self.statements;
        let mark = match hold {
            Hold::Write => Some(&statements.write_intent),
            Hold::Read => Some(&statements.claim),
            Hold::Mutex | Hold::Permit { .. } => None,
        };
        if let Some(mark) = mark.filter(|_| request.patience != Patience::Once) {
            sqlx::query(mark)
                .bind(name)
                .bind(request.token.to_string())
                .execute(&mut *self.pool.connection().await?)
                .await
                .map_err(BackendError::new)?;
        }
        if request.patience == Patience::Listens && !waited {
            let marked = sqlx::query(&statements.mark_waited)
                .bind(name)
                .execute(&mut *self.pool.connection().await?)
                .await
                .map_err(BackendError::new)?;
            if marked.rows_affected() == 1 {
                return Ok(self.ask(name, request, hold).await?.0);
            }
        }
        Ok(answer)
    }

    async fn extend_lease(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let statements = &self.statements;
        if !lease.hold().is_exclusive() {
            let extend = &statements.extend_shared;
            return self
                .owner_checked(extend, name, lease.token(), Some(ttl))
                .await;
        }
        let done = sqlx::query(&statements.extend)
            .bind(name)
            .bind(lease.token().to_string())
            .bind(millis(ttl))
            .bind(lease.label())
            .execute(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_shared(&self, name: &str, owner: OwnerToken) -> Result<bool, BackendError> {
        let release = &self.statements.release_shared;
        Ok(self.returning_waited(release, name, owner).await?.is_some())
    }

    async fn release_unwaited(&self, name: &str, owner: OwnerToken) -> Result<bool, BackendError> {
        let release = &self.statements.release;
        self.owner_checked(release, name, owner, None).await
    }

    async fn abandon_attempt(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        let abandon = &self.statements.abandon;
        self.returning_waited(abandon, name, request.token)
            .await
            .map(drop)
    }
}

lease_rows_backend!(PostgresBackend, "postgres", MAX_NAME_LEN);

/// A duration in whole milliseconds, as the statements take it.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(feature = "test-util")]
impl PostgresBackend {
    /// The statements a mutex's acquire and release send (feature `test-util`), for
    /// benchmarks that compare the backend with its own SQL sent directly. The acquire takes
    /// `$1` name, `$2` owner token (text), `$3` TTL in ms, `$4` holder label and answers
    /// (fence if taken, ms the holder has left, whether waited for); the release takes `$1`
    /// name, `$2` owner token.
    pub fn mutex_statements(&self) -> (&str, &str) {
        (&self.statements.acquire, &self.statements.release)
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("table", &self.statements.table)
            .finish_non_exhaustive()
    }
}
