//! The advisory-lock mode: PostgreSQL's own session locks instead of lease rows.

use std::fmt;
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use crate::backend::BackendError;
use crate::backend::sql::connect_pool;
use crate::backend::sql::session::{SessionLock, SessionLocks, session_backend};

/// The namespace a backend made by [`connect`](AdvisoryBackend::connect) hashes names in.
pub const DEFAULT_NAMESPACE: &str = "tower_lock";

/// Locks as PostgreSQL advisory locks: `pg_try_advisory_lock` on a 64-bit hash of the name,
/// held by a connection of the backend's pool for as long as the lock is.
///
/// Nothing is written: no table, no row per name. The lock lives in the holder's database
/// session, so it ends with [`release`](crate::backend::LockBackend::release) or with the session — a
/// crashed holder's lock is freed as soon as PostgreSQL notices its connection gone, however
/// long the engine's TTL. The trade-offs, beside [`PostgresBackend`](super::PostgresBackend):
///
/// * **No lease.** The TTL means nothing to the database: renewing pings the holder's
///   connection, and a dead connection is reported as a lost lease. A holder that is alive but
///   stuck keeps the lock for as long as its session lives.
/// * **No fence of its own.** Grants carry no fencing token; a holder paused while its
///   connection was closed could still write. Pair it with a fence kept by the data store.
/// * **One connection per held lock**, out of the pool until released: a pool of 16 (the
///   default) holds at most 16 locks at once in this process, and a busy database counts them
///   against `max_connections`.
/// * **Mutex only, waiters poll** (with backoff; no queue, no read-write locks or
///   semaphores).
/// * **Names are hashed** (`hashtextextended(namespace || ':' || name, 0)`, PostgreSQL's own
///   64-bit hash, the same for every client): two names whose hashes collide exclude each
///   other — never the other way round. The namespace keeps the locks of different
///   applications on one database apart.
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::postgres::AdvisoryBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = AdvisoryBackend::connect("postgres://app@127.0.0.1/app").await?;
/// let locker = Locker::new(backend);
/// let held = locker.lock("coupon:42").await?;
/// assert!(held.fence().is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AdvisoryBackend(SessionLocks<Advisory>);

impl AdvisoryBackend {
    /// Connects to the database at `url` with a pool of up to 16 connections (so at most 15
    /// locks held at once, one connection left to try) in [`DEFAULT_NAMESPACE`].
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        let pool = connect_pool(url, 16).await?;
        Ok(Self::with_pool(pool, DEFAULT_NAMESPACE))
    }

    /// Takes locks through `pool`'s connections, in `namespace`: backends in different
    /// namespaces never exclude each other (unless two hashes collide).
    pub fn with_pool(pool: PgPool, namespace: &str) -> Self {
        let advisory = Advisory {
            namespace: namespace.into(),
        };
        Self(SessionLocks::new(pool, advisory))
    }
}

/// What the advisory mode sends: the lock functions on the hash of the namespaced name.
#[derive(Clone, Debug)]
pub(crate) struct Advisory {
    /// Put before every name, with a `:`.
    namespace: Arc<str>,
}

const LOCK: &str = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
const UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";

impl Advisory {
    /// Runs `statement` (`LOCK` or `UNLOCK`) on `name` in `connection`'s session.
    async fn call(
        &self,
        statement: &'static str,
        connection: &mut PoolConnection<Postgres>,
        name: &str,
    ) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(statement)
            .bind(self.hashed_name(name))
            .fetch_one(&mut **connection)
            .await
    }

    /// What the lock on `name` hashes.
    fn hashed_name(&self, name: &str) -> String {
        format!("{}:{name}", self.namespace)
    }
}

impl SessionLock for Advisory {
    type Db = Postgres;

    /// The session is the holder: PostgreSQL names it (see the operator's view).
    async fn lock(
        &self,
        connection: &mut PoolConnection<Postgres>,
        name: &str,
    ) -> Result<bool, sqlx::Error> {
        self.call(LOCK, connection, name).await
    }

    async fn unlock(
        &self,
        connection: &mut PoolConnection<Postgres>,
        name: &str,
    ) -> Result<bool, sqlx::Error> {
        self.call(UNLOCK, connection, name).await
    }
}

session_backend!(AdvisoryBackend, Postgres, "postgres-advisory");

mod inspection;

impl fmt::Debug for AdvisoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvisoryBackend")
            .field("namespace", &self.0.kind().namespace)
            .finish_non_exhaustive()
    }
}
