//! The backend contract: what a lock store must do for the engine, and the stores that do it.
//!
//! A backend knows nothing of HTTP or of waiting policies: it takes, extends and releases
//! leases on lock names, each call atomic in the store. Every backend passes the same
//! conformance suite (`tower_lock::conformance`, feature `conformance`).
//!
//! * [`LockBackend`]: the mutex, several names at once, expiring leases, owner-checked extend
//!   and release, optional fencing tokens. Required of every backend.
//! * [`SharedLocks`] (read-write locks) and [`Semaphores`]: shapes a backend may offer; the
//!   engine's and the layer's methods for them only compile for backends that do.
//! * [`WaitQueue`]: a queue of waiters woken by release announcements, which a backend may
//!   offer ([`LockBackend::wait_queue`]); without one, waiters poll.
//!
//! Backends: [`MemoryBackend`](memory::MemoryBackend) (one process) and, with the `redis`
//! feature, `RedisBackend`; with the `postgres` feature, `postgres::PostgresBackend` (lease
//! rows) and `postgres::AdvisoryBackend` (advisory locks); with the `mysql` feature,
//! `mysql::MysqlBackend` (lease rows) and `mysql::NowaitBackend` (row locks in an open
//! transaction); with the `etcd` feature, `etcd::EtcdBackend` (etcd's concurrency mutex); with the
//! `zookeeper` feature, `zookeeper::ZookeeperBackend` (Curator's recipes).
//!
//! # A store of your own
//!
//! A backend needs four calls; the rest have defaults. The smallest one keeps its leases in a
//! map (a real one keeps them in a store every process shares, each call atomic there), and
//! a [`Locker`](crate::Locker) then runs on it like on any other. Run the conformance suite on
//! yours to know it holds.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use std::time::{Duration, Instant};
//!
//! use tower_lock::Locker;
//! use tower_lock::backend::{
//!     Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, OwnerToken, TokenLease,
//! };
//!
//! /// Lock name → the holder's token and when its lease ends.
//! type Leases = HashMap<String, (OwnerToken, Instant)>;
//!
//! #[derive(Default)]
//! struct MapStore(Mutex<Leases>);
//!
//! impl MapStore {
//!     /// Whether `token` holds `name` now.
//!     fn holds(leases: &Leases, name: &str, token: OwnerToken) -> bool {
//!         let now = Instant::now();
//!         leases.get(name).is_some_and(|&(owner, ends)| owner == token && ends > now)
//!     }
//! }
//!
//! impl LockBackend for MapStore {
//!     type Lease = TokenLease;
//!
//!     async fn acquire(
//!         &self,
//!         name: &str,
//!         request: LockRequest,
//!     ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
//!         let mut leases = self.0.lock().unwrap();
//!         let now = Instant::now();
//!         if let Some(&(_, ends)) = leases.get(name).filter(|&&(_, ends)| ends > now) {
//!             return Ok(Attempt::Busy { holder_ttl: Some(ends - now) });
//!         }
//!         leases.insert(name.to_owned(), (request.token, now + request.ttl));
//!         let lease = TokenLease::new(request.token, Hold::Mutex);
//!         Ok(Attempt::Acquired(Granted { lease, fence: None }))
//!     }
//!
//!     async fn extend(
//!         &self,
//!         name: &str,
//!         lease: &TokenLease,
//!         ttl: Duration,
//!     ) -> Result<bool, BackendError> {
//!         let mut leases = self.0.lock().unwrap();
//!         let held = Self::holds(&leases, name, lease.token());
//!         if held {
//!             leases.insert(name.to_owned(), (lease.token(), Instant::now() + ttl));
//!         }
//!         Ok(held)
//!     }
//!
//!     async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
//!         let mut leases = self.0.lock().unwrap();
//!         let held = Self::holds(&leases, name, lease.token());
//!         if held {
//!             leases.remove(name);
//!         }
//!         Ok(held)
//!     }
//!
//!     /// An attempt whose answer was lost may have taken the lock: give it back.
//!     async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
//!         let mut leases = self.0.lock().unwrap();
//!         if Self::holds(&leases, name, request.token) {
//!             leases.remove(name);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower_lock::LockError> {
//! let locker = Locker::new(MapStore::default());
//! let report = locker.lock("report:daily").await?;
//! assert_eq!(report.fence(), None, "this store issues no fencing tokens");
//! report.release().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

pub mod any;
mod ask;
mod attempt;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub(crate) mod holder_label;
mod inspect;
pub(crate) mod lock_shapes;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
mod request;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql;
mod store_support;
#[cfg(test)]
mod tests;
mod wait_queue;
pub mod waiting;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use crate::token::OwnerToken;
pub use ask::Ask;
pub use attempt::{Attempt, FencingToken, Granted, TokenLease};
pub use error::BackendError;
pub use inspect::{Holding, Inspect, Listing, LockState};
pub use lock_shapes::{Hold, Semaphores, SharedLocks};
pub(crate) use request::lease_deadline;
pub use request::{LockRequest, Patience};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use sql::session::ConnectionLease;
pub use wait_queue::{QueuedAttempt, WaitQueue};

/// The longest a store's `connect` takes, in all, before it gives up on a server that does not
/// answer (not a setting): the bound a service that connects to the same server for its own
/// data may keep too. RedLock connects on first use instead, within the store timeout.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A store of leases on lock names: exclusive, expiring, owner-checked, optionally fenced.
///
/// Each call must be atomic in the store: two concurrent acquires of one name never both
/// succeed, and [`extend`](Self::extend) and [`release`](Self::release) act only while the
/// lease is still the holder's. `name` is the full lock name (the engine's prefix and the
/// key); a backend may wrap it (Redis adds a hash tag) but must not share state between names.
///
/// # Implementing a backend
///
/// Acquire, extend, release and [`abandon`](Self::abandon) are required; several names at
/// once, shapes ([`SharedLocks`], [`Semaphores`]) and waking waiters ([`WaitQueue`]) are
/// optional. `docs/ARCHITECTURE.md` walks through adding one; the conformance suite says
/// whether it holds.
pub trait LockBackend: Send + Sync + 'static {
    /// What the backend keeps of one acquisition and needs again to extend and release it: an
    /// owner token ([`TokenLease`]), a connection, a lease id, a node path.
    type Lease: Send + Sync + 'static;

    /// Takes lock `name` for `request.ttl` if it is free; otherwise reports how long the
    /// holder has left. Exclusive: a reader of the same name (see [`SharedLocks`]) keeps it
    /// busy too.
    fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> impl Future<Output = Result<Attempt<Granted<Self::Lease>>, BackendError>> + Send;

    /// Resets the lease to `ttl` from now, if it is still the holder's. `Ok(false)`: it is
    /// lost (expired, or taken by someone else).
    fn extend(
        &self,
        name: &str,
        lease: &Self::Lease,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Gives the lock back, if the lease is still the holder's, and announces the release to
    /// waiters where the backend can. `Ok(false)`: the lease had already been lost.
    fn release(
        &self,
        name: &str,
        lease: &Self::Lease,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Who freed `lease` on `name` when a renewal or release found it gone: the label of the
    /// operator whose [`force_release`](Inspect::force_release) freed it, where the store
    /// recorded one (it keeps the record while the freed lease would have lived). `None` (the
    /// default): the store cannot tell, and the holder says only that its lease is gone.
    fn released_by(
        &self,
        name: &str,
        lease: &Self::Lease,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send {
        let _ = (name, lease);
        std::future::ready(Ok(None))
    }

    /// An attempt by `request.token` on `name` ended without the lock reaching its caller:
    /// its answer was lost (the store failed or was too slow, or the caller was dropped before
    /// the answer came), or a writer or reader gave up waiting. Undo what it may have left: a
    /// lock or a shared hold the store granted it, a writer's intent, a reader's claim. Must be
    /// harmless when it left nothing.
    fn abandon(
        &self,
        name: &str,
        request: LockRequest,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Takes every lock in `names` (sorted, distinct) for `request`, or none of them; one
    /// grant per name, in the order given.
    ///
    /// The default takes them one by one in the given (sorted) order and, at the first busy
    /// name, gives back those it took: no caller ever waits while holding part of a set, and
    /// everybody takes names in the same order, so two callers over overlapping sets cannot
    /// deadlock. Backends that can take them atomically (Redis on one node, memory) override
    /// it.
    fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> impl Future<Output = Result<Attempt<Vec<Granted<Self::Lease>>>, BackendError>> + Send {
        acquire_one_by_one(self, names, request)
    }

    /// What kind of store this is, as the `backend` label of the metrics
    /// ([`telemetry`](crate::telemetry)): `memory`, `redis`, `postgres`, … — a fixed word per
    /// backend type, never an address. The default is `custom`.
    fn store_kind(&self) -> &'static str {
        "custom"
    }

    /// This backend's queue of waiters woken by release announcements. `None` (the default):
    /// waiters poll with backoff, and fair mode is refused when a locker is built.
    fn wait_queue(&self) -> Option<&dyn WaitQueue<Self::Lease>> {
        None
    }

    /// The longest lock name the store accepts, in bytes, if it has a limit. A locker whose
    /// prefix and longest key would not fit is refused when it is built.
    fn max_name_len(&self) -> Option<usize> {
        None
    }

    /// The longest lease the store can vouch for, if it has a limit: a store whose locks live
    /// as long as the process's session (etcd, ZooKeeper) knows its locks are held only as
    /// far ahead as the session is confirmed alive. A locker with a longer TTL is refused when
    /// it is built.
    fn max_ttl(&self) -> Option<Duration> {
        None
    }
}

/// Takes `names` one by one in the order given (sorted, by the engine), all or none: at the
/// first busy name, gives back what it took. [`LockBackend::acquire_many`]'s default, for
/// backends that cannot take several names in one atomic step.
pub(crate) async fn acquire_one_by_one<B: LockBackend + ?Sized>(
    backend: &B,
    names: &[&str],
    request: LockRequest,
) -> Result<Attempt<Vec<Granted<B::Lease>>>, BackendError> {
    let mut granted: Vec<Granted<B::Lease>> = Vec::with_capacity(names.len());
    for name in names {
        let stopped = match backend.acquire(name, request).await {
            Ok(Attempt::Acquired(grant)) => {
                granted.push(grant);
                continue;
            }
            Ok(Attempt::Busy { holder_ttl }) => Ok(Attempt::Busy { holder_ttl }),
            Err(error) => Err(error),
        };
        for (taken, grant) in names.iter().zip(&granted) {
            backend.release(taken, &grant.lease).await?;
        }
        return stopped;
    }
    Ok(Attempt::Acquired(granted))
}
