//! The pessimistic mode: a row locked by `SELECT … FOR UPDATE NOWAIT` in a transaction left
//! open while the lock is held.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlDatabaseError;
use sqlx::pool::PoolConnection;
use sqlx::{Executor, MySql, MySqlPool};

use super::statements::MAX_NAME_LEN;
use crate::backend::BackendError;
use crate::backend::holder_label::MAX_LABEL_LEN;
use crate::backend::sql::session::{SessionLock, SessionLocks, session_backend};
use crate::backend::sql::{check_table_name, connect_pool};

/// The table a backend made by [`connect`](NowaitBackend::connect) locks rows of.
pub const DEFAULT_ROW_TABLE: &str = "tower_lock_rows";

/// MySQL's error for a row `NOWAIT` found locked (MySQL 8: `ER_LOCK_NOWAIT`).
const LOCK_NOWAIT: u16 = 3572;
/// MariaDB's: `ER_LOCK_WAIT_TIMEOUT`, a wait of no time.
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// Locks as InnoDB row locks, the pessimistic lock of the classic MySQL designs: one row per
/// lock name, locked with `SELECT … FOR UPDATE NOWAIT` in a transaction that stays open on a
/// connection of the backend's pool for as long as the lock is held, and rolled back to
/// release it.
///
/// The lock lives in the holder's transaction, so it ends with
/// [`release`](crate::backend::LockBackend::release) or with the session — a crashed holder's lock is freed as
/// soon as the server notices its connection gone (or its `wait_timeout` passes). The
/// trade-offs, beside [`MysqlBackend`](super::MysqlBackend):
///
/// * **No lease.** The TTL means nothing to the server: renewing pings the holder's
///   connection, and a dead connection is reported as a lost lease. A holder that is alive but
///   stuck keeps the lock for as long as its session lives.
/// * **No fence.** A version bumped in the locking transaction is rolled back with a dead
///   holder's session, so the next holder would read the same number: grants carry no fencing
///   token. Pair it with a fence kept by the data store.
/// * **One connection and one open transaction per held lock**, out of the pool until
///   released: a pool of 16 (the default) holds at most 15 locks at once in this process. A
///   long hold keeps a transaction open on the server.
/// * **Mutex only, waiters poll** (with backoff; MySQL has no `LISTEN`).
///
/// The table is created on connect when it is missing (idempotent), and a row is added the
/// first time a name is locked. At its first renewal (a third of the TTL after the grant) a
/// holder writes its label, start and session into the row it locked, uncommitted — gone with
/// the transaction — so that an operator reading the rows uncommitted sees who holds each lock
/// ([`Inspect`](crate::backend::Inspect)); a lock given back sooner writes nothing, and one
/// held without renewal is never seen:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS tower_lock_rows (
///     name VARBINARY(512) NOT NULL PRIMARY KEY,
///     holder VARBINARY(128) NULL,
///     since DATETIME(6) NULL,
///     session BIGINT UNSIGNED NULL
/// ) ENGINE = InnoDB;
/// ```
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::mysql::NowaitBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = NowaitBackend::connect("mysql://app@127.0.0.1/app").await?;
/// let locker = Locker::new(backend);
/// let held = locker.lock("coupon:42").await?;
/// assert!(held.fence().is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NowaitBackend(SessionLocks<Nowait>);

impl NowaitBackend {
    /// Connects to the database at `url` with a pool of up to 16 connections and locks rows of
    /// [`DEFAULT_ROW_TABLE`], creating it when missing.
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        let pool = connect_pool(url, 16).await?;
        Self::with_table(pool, DEFAULT_ROW_TABLE).await
    }

    /// Locks rows of `table` (a name, or `database.name`) through `pool`'s connections,
    /// creating the table when missing.
    ///
    /// # Errors
    ///
    /// When `table` is not one or two plain identifiers (letters, digits and `_`, not starting
    /// with a digit), or the server refused to create the table.
    pub async fn with_table(pool: MySqlPool, table: &str) -> Result<Self, BackendError> {
        check_table_name(table)?;
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (\
                name VARBINARY({MAX_NAME_LEN}) NOT NULL PRIMARY KEY, \
                holder VARBINARY({MAX_LABEL_LEN}) NULL, \
                since DATETIME(6) NULL, \
                session BIGINT UNSIGNED NULL) ENGINE = InnoDB"
        );
        sqlx::query(&create)
            .execute(&pool)
            .await
            .map_err(BackendError::new)?;
        let nowait = Nowait {
            lock_row: format!("SELECT 1 FROM {table} WHERE name = ? FOR UPDATE NOWAIT").into(),
            record_holder: format!(
                "UPDATE {table} SET holder = ?, \
                    since = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, session = CONNECTION_ID() \
                 WHERE name = ?"
            )
            .into(),
            add_row: format!("INSERT IGNORE INTO {table} (name) VALUES (?)").into(),
            table: table.into(),
        };
        Ok(Self(SessionLocks::new(pool, nowait)))
    }
}

/// What the `NOWAIT` mode sends.
#[derive(Clone, Debug)]
pub(crate) struct Nowait {
    table: Arc<str>,
    lock_row: Arc<str>,
    record_holder: Arc<str>,
    add_row: Arc<str>,
}

/// Starts the transaction that will hold the row lock. Read committed: a name without a row
/// yet takes no gap lock that would stall other names' rows being added.
const BEGIN: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

impl SessionLock for Nowait {
    type Db = MySql;

    /// The row locked without waiting, in a transaction left open; a name locked for the
    /// first time gets its row (outside the transaction) and is asked again.
    async fn lock(
        &self,
        connection: &mut PoolConnection<MySql>,
        name: &str,
    ) -> Result<bool, sqlx::Error> {
        for _ in 0..2 {
            (&mut **connection).execute(BEGIN).await?;
            let locked = sqlx::query(&self.lock_row)
                .bind(name.as_bytes())
                .fetch_optional(&mut **connection)
                .await;
            match locked {
                Ok(Some(_)) => return Ok(true),
                Ok(_) => {
                    (&mut **connection).execute("ROLLBACK").await?;
                    sqlx::query(&self.add_row)
                        .bind(name.as_bytes())
                        .execute(&mut **connection)
                        .await?;
                }
                Err(error) if is_locked_elsewhere(&error) => {
                    (&mut **connection).execute("ROLLBACK").await?;
                    return Ok(false);
                }
                Err(error) => return Err(error),
            }
        }
        Err(sqlx::Error::Protocol(format!(
            "the row of a lock vanished from {} as it was added",
            self.table
        )))
    }

    const RECORDS_HOLDERS: bool = true;

    /// The holder's label, start and session written into its locked row, in its open
    /// transaction: uncommitted, they live as long as the lock.
    async fn record_holder(
        &self,
        connection: &mut PoolConnection<MySql>,
        name: &str,
        holder: &str,
        held_for: Duration,
    ) -> Result<(), sqlx::Error> {
        let held_for_us = u64::try_from(held_for.as_micros()).unwrap_or(u64::MAX);
        sqlx::query(&self.record_holder)
            .bind(holder.as_bytes())
            .bind(held_for_us)
            .bind(name.as_bytes())
            .execute(&mut **connection)
            .await?;
        Ok(())
    }

    /// `ROLLBACK`: the transaction, and with it the row lock, ends.
    async fn unlock(
        &self,
        connection: &mut PoolConnection<MySql>,
        _name: &str,
    ) -> Result<bool, sqlx::Error> {
        (&mut **connection).execute("ROLLBACK").await?;
        Ok(true)
    }

    fn max_name_len(&self) -> Option<usize> {
        Some(MAX_NAME_LEN)
    }
}

/// Whether `error` says the row is locked by another transaction.
fn is_locked_elsewhere(error: &sqlx::Error) -> bool {
    matches!(error_number(error), Some(LOCK_NOWAIT | LOCK_WAIT_TIMEOUT))
}

/// The server's error number, for an error the server answered.
fn error_number(error: &sqlx::Error) -> Option<u16> {
    let sqlx::Error::Database(error) = error else {
        return None;
    };
    (error.try_downcast_ref::<MySqlDatabaseError>()).map(MySqlDatabaseError::number)
}

mod inspection;

session_backend!(NowaitBackend, MySql, "mysql-nowait");

impl fmt::Debug for NowaitBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NowaitBackend")
            .field("table", &self.0.kind().table)
            .finish_non_exhaustive()
    }
}
