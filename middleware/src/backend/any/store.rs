//! [`AnyBackend`]: one type over every store the build has, chosen at run time; each call goes
//! to the chosen store's own backend.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::lease::{AnyLease, LeaseIn, all_wrapped, queued_wrapped, wrapped};
use crate::backend::memory::MemoryBackend;
use crate::backend::waiting::WaitingRoom;
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, QueuedAttempt, Semaphores,
    SharedLocks, WaitQueue,
};
use crate::token::OwnerToken;

/// A lock store chosen at run time — from a URL ([`AnyBackend::connect`]) or from a backend
/// you made — with every lock shape: mutexes, read-write locks, semaphores, several keys at
/// once, fencing where the store fences, and waiters woken by the store.
///
/// Stores with mutexes only (PostgreSQL's advisory locks, MySQL's `NOWAIT` rows, RedLock) are
/// not among them, so that a read-write or semaphore layer on an `AnyBackend` never meets a
/// store that cannot serve it: [`AnyMutexBackend`](super::AnyMutexBackend) takes every store,
/// for mutexes.
///
/// # Example
///
/// ```
/// use tower_lock::Locker;
/// use tower_lock::backend::any::AnyBackend;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // LOCK_STORE=redis://10.0.0.5:6379 in one deployment, etcd://10.0.0.7:2379 in another.
/// let url = std::env::var("LOCK_STORE").unwrap_or_else(|_| "memory://".into());
/// let locker = Locker::new(AnyBackend::connect(&url).await?);
/// let report = locker.read("report:q3").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnyBackend {
    store: Store,
    /// The room of a store without a wait queue (none of today's): nobody is woken there.
    silent: Arc<WaitingRoom>,
}

/// The chosen store's backend.
#[derive(Clone)]
pub(super) enum Store {
    Memory(MemoryBackend),
    #[cfg(feature = "redis")]
    Redis(crate::backend::redis::RedisBackend),
    #[cfg(feature = "redis-cluster")]
    RedisCluster(crate::backend::redis::RedisBackend<crate::backend::redis::ClusterLink>),
    #[cfg(feature = "redis-sentinel")]
    RedisSentinel(crate::backend::redis::RedisBackend<crate::backend::redis::SentinelConnection>),
    #[cfg(feature = "postgres")]
    Postgres(crate::backend::postgres::PostgresBackend),
    #[cfg(feature = "mysql")]
    Mysql(crate::backend::mysql::MysqlBackend),
    #[cfg(feature = "etcd")]
    Etcd(crate::backend::etcd::EtcdBackend),
    #[cfg(feature = "zookeeper")]
    Zookeeper(crate::backend::zookeeper::ZookeeperBackend),
}

/// `$body` with `$backend` bound to the chosen store's backend, whatever its type.
macro_rules! each_store {
    ($store:expr, $backend:ident => $body:expr) => {
        match $store {
            Store::Memory($backend) => $body,
            #[cfg(feature = "redis")]
            Store::Redis($backend) => $body,
            #[cfg(feature = "redis-cluster")]
            Store::RedisCluster($backend) => $body,
            #[cfg(feature = "redis-sentinel")]
            Store::RedisSentinel($backend) => $body,
            #[cfg(feature = "postgres")]
            Store::Postgres($backend) => $body,
            #[cfg(feature = "mysql")]
            Store::Mysql($backend) => $body,
            #[cfg(feature = "etcd")]
            Store::Etcd($backend) => $body,
            #[cfg(feature = "zookeeper")]
            Store::Zookeeper($backend) => $body,
        }
    };
}
pub(super) use each_store;

impl AnyBackend {
    pub(super) fn on(store: Store) -> Self {
        Self {
            store,
            silent: WaitingRoom::silent(),
        }
    }

    /// The chosen store's backend.
    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    /// The chosen store's own backend, when it is a `B`: for what only that store does (a
    /// Redis backend's connection, say). `None` for any other store.
    ///
    /// # Example
    ///
    /// ```
    /// use tower_lock::MemoryBackend;
    /// use tower_lock::backend::any::AnyBackend;
    ///
    /// let backend = AnyBackend::from(MemoryBackend::new());
    /// assert!(backend.downcast_ref::<MemoryBackend>().is_some());
    /// ```
    pub fn downcast_ref<B: 'static>(&self) -> Option<&B> {
        each_store!(&self.store, backend => (backend as &dyn std::any::Any).downcast_ref())
    }
}

macro_rules! from_backend {
    ($(#[$cfg:meta])* $backend:ty, $variant:ident) => {
        $(#[$cfg])*
        impl From<$backend> for AnyBackend {
            fn from(backend: $backend) -> Self {
                Self::on(Store::$variant(backend))
            }
        }
    };
}

from_backend!(MemoryBackend, Memory);
from_backend!(
    #[cfg(feature = "redis")]
    crate::backend::redis::RedisBackend,
    Redis
);
from_backend!(
    #[cfg(feature = "redis-cluster")]
    crate::backend::redis::RedisBackend<crate::backend::redis::ClusterLink>,
    RedisCluster
);
from_backend!(
    #[cfg(feature = "redis-sentinel")]
    crate::backend::redis::RedisBackend<crate::backend::redis::SentinelConnection>,
    RedisSentinel
);
from_backend!(
    #[cfg(feature = "postgres")]
    crate::backend::postgres::PostgresBackend,
    Postgres
);
from_backend!(
    #[cfg(feature = "mysql")]
    crate::backend::mysql::MysqlBackend,
    Mysql
);
from_backend!(
    #[cfg(feature = "etcd")]
    crate::backend::etcd::EtcdBackend,
    Etcd
);
from_backend!(
    #[cfg(feature = "zookeeper")]
    crate::backend::zookeeper::ZookeeperBackend,
    Zookeeper
);

impl fmt::Debug for AnyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AnyBackend")
            .field(&self.store_kind())
            .finish()
    }
}

impl LockBackend for AnyBackend {
    type Lease = AnyLease;

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<AnyLease>>, BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.acquire(name, request)).await.map(wrapped))
    }

    async fn extend(
        &self,
        name: &str,
        lease: &AnyLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.extend(name, LeaseIn::of(lease)?, ttl)).await)
    }

    async fn release(&self, name: &str, lease: &AnyLease) -> Result<bool, BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.release(name, LeaseIn::of(lease)?)).await)
    }

    async fn released_by(
        &self,
        name: &str,
        lease: &AnyLease,
    ) -> Result<Option<String>, BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.released_by(name, LeaseIn::of(lease)?)).await)
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.abandon(name, request)).await)
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<AnyLease>>>, BackendError> {
        each_store!(
            &self.store,
            backend => Box::pin(backend.acquire_many(names, request)).await.map(all_wrapped)
        )
    }

    fn store_kind(&self) -> &'static str {
        each_store!(&self.store, backend => backend.store_kind())
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<AnyLease>> {
        let queued = each_store!(&self.store, backend => backend.wait_queue().is_some());
        queued.then_some(self as &dyn WaitQueue<AnyLease>)
    }

    fn max_name_len(&self) -> Option<usize> {
        each_store!(&self.store, backend => backend.max_name_len())
    }

    fn max_ttl(&self) -> Option<Duration> {
        each_store!(&self.store, backend => backend.max_ttl())
    }
}

impl SharedLocks for AnyBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<AnyLease>>, BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.acquire_read(name, request)).await.map(wrapped))
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<AnyLease>>, BackendError> {
        each_store!(&self.store, backend => Box::pin(backend.acquire_write(name, request)).await.map(wrapped))
    }
}

impl Semaphores for AnyBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<AnyLease>>, BackendError> {
        each_store!(
            &self.store,
            backend => Box::pin(backend.acquire_permit(name, request, permits)).await.map(wrapped)
        )
    }
}

/// The error of a queue call on a store without a queue ([`LockBackend::wait_queue`] said so,
/// so the engine never makes one).
pub(super) fn no_queue() -> BackendError {
    BackendError::new("this store has no wait queue")
}

impl WaitQueue<AnyLease> for AnyBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        each_store!(&self.store, backend => match backend.wait_queue() {
            Some(queue) => queue.room(),
            None => &self.silent,
        })
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<AnyLease>, BackendError>> {
        Box::pin(async move {
            each_store!(&self.store, backend => match backend.wait_queue() {
                Some(queue) => (queue.acquire_queued(name, request, ticket_ttl).await)
                    .map(queued_wrapped),
                None => Err(no_queue()),
            })
        })
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            each_store!(&self.store, backend => match backend.wait_queue() {
                Some(queue) => queue.leave_queue(name, token).await,
                None => Err(no_queue()),
            })
        })
    }
}
