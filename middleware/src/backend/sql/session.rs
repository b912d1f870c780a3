//! Locks that live in a database session: PostgreSQL's advisory locks and MySQL's row locks in
//! an open transaction. The lease is the connection that took the lock, out of the pool for as
//! long as it is held; the lock ends with `unlock` or with the session, so a crashed holder
//! frees it as soon as the server notices its connection gone. No TTL, no fence of their own.

use std::fmt;
use std::future::{self, Future};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database, Pool};

use super::ReachablePool;
use tokio::sync::Mutex;

use super::{AcquireSlots, acquire_detached};
use crate::backend::{Attempt, BackendError, Granted, LockBackend, LockRequest};

/// What a session lock sends to take and give back a lock in one connection's session.
pub(in crate::backend) trait SessionLock: Clone + Send + Sync + 'static {
    /// The database whose sessions hold the locks.
    type Db: Database;

    /// Takes `name`'s lock in `connection`'s session if it is free: whether it was free.
    fn lock(
        &self,
        connection: &mut PoolConnection<Self::Db>,
        name: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Gives `name`'s lock back in `connection`'s session: whether the session held it.
    fn unlock(
        &self,
        connection: &mut PoolConnection<Self::Db>,
        name: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Whether holders write their own record for the operator's view, by
    /// [`record_holder`](Self::record_holder) at their first renewal; `false` where the store
    /// names the session holding a lock by itself.
    const RECORDS_HOLDERS: bool = false;

    /// Writes who holds `name`'s lock in `connection`'s session — labelled `holder`, for
    /// `held_for` so far — where an operator reads it. Called once per hold, at its first
    /// renewal and in place of its ping, so that a lock given back sooner writes nothing: an
    /// error answers as a failed ping does.
    fn record_holder(
        &self,
        connection: &mut PoolConnection<Self::Db>,
        name: &str,
        holder: &str,
        held_for: Duration,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let _ = (connection, name, holder, held_for);
        future::ready(Ok(()))
    }

    /// The longest lock name the store accepts, in bytes, if it has a limit.
    fn max_name_len(&self) -> Option<usize> {
        None
    }
}

/// A holder whose record is yet to be written (stores whose holders record themselves).
struct UnrecordedHolder {
    label: Box<str>,
    granted: Instant,
}

/// What a held session lock keeps: the connection whose session holds it, and the holder's
/// record until it is written.
struct HeldSession<DB: Database> {
    connection: Option<PoolConnection<DB>>,
    unrecorded: Option<UnrecordedHolder>,
}

/// The lease of a lock held by a database session: the connection that took it.
///
/// Dropped without a release (its holder gone), it closes the connection rather than return
/// it to the pool — a pooled session still holding the lock would hand it to whoever uses the
/// connection next — so the server ends the session and frees the lock.
pub struct ConnectionLease<DB: Database> {
    session: Mutex<HeldSession<DB>>,
}

impl<DB: Database> ConnectionLease<DB> {
    fn new(connection: PoolConnection<DB>, unrecorded: Option<UnrecordedHolder>) -> Self {
        let connection = Some(connection);
        Self {
            session: Mutex::new(HeldSession {
                connection,
                unrecorded,
            }),
        }
    }
}

impl<DB: Database> Drop for ConnectionLease<DB> {
    fn drop(&mut self) {
        if let Some(connection) = self.session.get_mut().connection.as_mut() {
            connection.close_on_drop();
        }
    }
}

impl<DB: Database> fmt::Debug for ConnectionLease<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionLease").finish_non_exhaustive()
    }
}

/// A backend of session locks of kind `K` on a pool: one connection per held lock.
pub(in crate::backend) struct SessionLocks<K: SessionLock> {
    pool: ReachablePool<K::Db>,
    kind: K,
    slots: AcquireSlots,
}

impl<K: SessionLock> Clone for SessionLocks<K> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            kind: self.kind.clone(),
            slots: self.slots.clone(),
        }
    }
}

impl<K: SessionLock> SessionLocks<K> {
    pub(in crate::backend) fn new(pool: Pool<K::Db>, kind: K) -> Self {
        let slots = AcquireSlots::of_pool(pool.options().get_max_connections());
        let pool = ReachablePool::new(pool);
        Self { pool, kind, slots }
    }

    /// The pool the locks' connections come from.
    pub(in crate::backend) fn pool(&self) -> &ReachablePool<K::Db> {
        &self.pool
    }

    /// What these locks send.
    pub(in crate::backend) fn kind(&self) -> &K {
        &self.kind
    }

    /// A connection from the pool, and the lock in its session if it is free.
    async fn try_lock(
        &self,
        name: &str,
        holder: &str,
    ) -> Result<Attempt<Granted<ConnectionLease<K::Db>>>, BackendError> {
        let mut connection = self.pool.connection().await?;
        match self.kind.lock(&mut connection, name).await {
            Ok(true) => {
                let unrecorded = K::RECORDS_HOLDERS.then(|| UnrecordedHolder {
                    label: holder.into(),
                    granted: Instant::now(),
                });
                Ok(Attempt::Acquired(Granted {
                    lease: ConnectionLease::new(connection, unrecorded),
                    fence: None,
                }))
            }
            Ok(false) => Ok(Attempt::Busy { holder_ttl: None }),
            Err(error) => {
                // Whether the lock was taken is unknown: end the session, which frees it.
                connection.close_on_drop();
                Err(BackendError::new(error))
            }
        }
    }
}

impl<K: SessionLock> LockBackend for SessionLocks<K> {
    type Lease = ConnectionLease<K::Db>;

    /// In a task of its own (`sql::acquire_detached`): a caller dropped mid-statement would
    /// otherwise leave a pooled session that may hold the lock.
    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<Self::Lease>>, BackendError> {
        acquire_detached(
            self,
            &self.slots,
            name,
            request,
            |backend, name, request| async move { backend.try_lock(&name, request.holder).await },
        )
        .await
    }

    /// The lock lasts as long as its session: extending checks that the connection is alive
    /// (a ping, or the holder's record at its first renewal). A dead one is closed and reported
    /// lost — the server frees its locks.
    async fn extend(
        &self,
        name: &str,
        lease: &Self::Lease,
        _ttl: Duration,
    ) -> Result<bool, BackendError> {
        let mut session = lease.session.lock().await;
        let HeldSession {
            connection,
            unrecorded,
        } = &mut *session;
        let Some(live) = connection.as_mut() else {
            return Ok(false);
        };
        // The record is kept until written: an extend cut short (the store timeout) leaves it
        // to the next renewal.
        let alive = match unrecorded.as_ref() {
            None => live.ping().await.is_ok(),
            Some(holder) => {
                let held_for = holder.granted.elapsed();
                let recorded = (self.kind)
                    .record_holder(live, name, &holder.label, held_for)
                    .await;
                match recorded {
                    Ok(()) => {
                        *unrecorded = None;
                        true
                    }
                    // Refused by a session that lives on (a killed one answers too, then
                    // closes): the lock is held, unrecorded, and is not asked again.
                    Err(sqlx::Error::Database(error)) if live.ping().await.is_ok() => {
                        *unrecorded = None;
                        return Err(BackendError::new(format!(
                            "the holder's record for the operator's view was refused: {error}"
                        )));
                    }
                    Err(_) => false,
                }
            }
        };
        if alive {
            return Ok(true);
        }
        live.close_on_drop();
        connection.take();
        Ok(false)
    }

    /// Unlocks in the holder's session and returns the connection to the pool. The connection
    /// stays in the lease until the unlock has answered, so a release cut short (its caller
    /// timed out) leaves it to the lease, which closes it when dropped; a connection that
    /// failed, or whose session did not hold the lock, is closed too.
    async fn release(&self, name: &str, lease: &Self::Lease) -> Result<bool, BackendError> {
        let mut session = lease.session.lock().await;
        let Some(connection) = session.connection.as_mut() else {
            return Ok(false);
        };
        let unlocked = self.kind.unlock(connection, name).await;
        if !matches!(unlocked, Ok(true)) {
            connection.close_on_drop();
        }
        session.connection.take();
        unlocked.map_err(BackendError::new)
    }

    /// Nothing to undo: a grant nobody received is released by the task that took it, and a
    /// session whose answer was lost is closed.
    async fn abandon(&self, _name: &str, _request: LockRequest) -> Result<(), BackendError> {
        Ok(())
    }

    fn max_name_len(&self) -> Option<usize> {
        self.kind.max_name_len()
    }
}

/// Implements [`LockBackend`] for `$backend`, a public wrapper of a [`SessionLocks`] whose
/// connections are `$db`'s, by handing every call to it; its metrics' `backend` label is
/// `$kind`.
macro_rules! session_backend {
    ($backend:ty, $db:ty, $kind:literal) => {
        impl $crate::backend::LockBackend for $backend {
            type Lease = $crate::backend::ConnectionLease<$db>;

            fn store_kind(&self) -> &'static str {
                $kind
            }

            async fn acquire(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
            ) -> Result<
                $crate::backend::Attempt<$crate::backend::Granted<Self::Lease>>,
                $crate::backend::BackendError,
            > {
                self.0.acquire(name, request).await
            }

            async fn extend(
                &self,
                name: &str,
                lease: &Self::Lease,
                ttl: ::std::time::Duration,
            ) -> Result<bool, $crate::backend::BackendError> {
                self.0.extend(name, lease, ttl).await
            }

            async fn release(
                &self,
                name: &str,
                lease: &Self::Lease,
            ) -> Result<bool, $crate::backend::BackendError> {
                self.0.release(name, lease).await
            }

            async fn abandon(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
            ) -> Result<(), $crate::backend::BackendError> {
                self.0.abandon(name, request).await
            }

            fn max_name_len(&self) -> Option<usize> {
                self.0.max_name_len()
            }
        }
    };
}
pub(in crate::backend) use session_backend;
