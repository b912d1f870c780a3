//! [`AnyMutexBackend`]: every store the build has, chosen at run time, for mutexes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::AnyBackend;
use super::lease::{AnyLease, AnyMutexLease, LeaseIn, all_wrapped, queued_wrapped, wrapped};
use super::store::no_queue;
use crate::backend::waiting::WaitingRoom;
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, QueuedAttempt, WaitQueue,
};
use crate::token::OwnerToken;

/// A lock store chosen at run time for mutexes (one key or several at once): every store of
/// an [`AnyBackend`], and the stores with mutexes only — RedLock, PostgreSQL's advisory locks,
/// MySQL's `NOWAIT` rows. Its type has no read-write locks or semaphores, so nothing asks a
/// store for a shape it lacks; connect with [`AnyMutexBackend::connect`].
///
/// # Example
///
/// ```
/// use tower_lock::Locker;
/// use tower_lock::backend::any::AnyMutexBackend;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // LOCK_STORE=redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379, or any AnyBackend URL.
/// let url = std::env::var("LOCK_STORE").unwrap_or_else(|_| "memory://".into());
/// let locker = Locker::new(AnyMutexBackend::connect(&url).await?);
/// let export = locker.lock("job:nightly-export").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnyMutexBackend {
    store: MutexStore,
    silent: Arc<WaitingRoom>,
}

/// The chosen store's backend.
#[derive(Clone)]
pub(super) enum MutexStore {
    Any(AnyBackend),
    #[cfg(feature = "redis")]
    Redlock(crate::backend::redis::RedlockBackend),
    #[cfg(feature = "postgres")]
    Advisory(crate::backend::postgres::AdvisoryBackend),
    #[cfg(feature = "mysql")]
    Nowait(crate::backend::mysql::NowaitBackend),
}

/// `$body` with `$backend` bound to the chosen store's backend, whatever its type.
macro_rules! each_mutex_store {
    ($store:expr, $backend:ident => $body:expr) => {
        match $store {
            MutexStore::Any($backend) => $body,
            #[cfg(feature = "redis")]
            MutexStore::Redlock($backend) => $body,
            #[cfg(feature = "postgres")]
            MutexStore::Advisory($backend) => $body,
            #[cfg(feature = "mysql")]
            MutexStore::Nowait($backend) => $body,
        }
    };
}
pub(super) use each_mutex_store;

impl AnyMutexBackend {
    pub(super) fn on(store: MutexStore) -> Self {
        Self {
            store,
            silent: WaitingRoom::silent(),
        }
    }

    /// The chosen store's backend.
    pub(super) fn store(&self) -> &MutexStore {
        &self.store
    }

    /// The store's queue of waiters, where it has one (the stores of an [`AnyBackend`]).
    fn queue(&self) -> Option<&AnyBackend> {
        match &self.store {
            MutexStore::Any(any) => Some(any).filter(|any| any.wait_queue().is_some()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

macro_rules! from_backend {
    ($(#[$cfg:meta])* $backend:ty, $variant:ident) => {
        $(#[$cfg])*
        impl From<$backend> for AnyMutexBackend {
            fn from(backend: $backend) -> Self {
                Self::on(MutexStore::$variant(backend))
            }
        }
    };
}

from_backend!(AnyBackend, Any);
from_backend!(
    #[cfg(feature = "redis")]
    crate::backend::redis::RedlockBackend,
    Redlock
);
from_backend!(
    #[cfg(feature = "postgres")]
    crate::backend::postgres::AdvisoryBackend,
    Advisory
);
from_backend!(
    #[cfg(feature = "mysql")]
    crate::backend::mysql::NowaitBackend,
    Nowait
);

/// The backend with every lock shape inside, when the store has them all (every store but
/// RedLock, advisory locks and `NOWAIT` rows); the mutex-only backend back otherwise.
///
/// # Example
///
/// ```
/// use tower_lock::backend::any::{AnyBackend, AnyMutexBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = AnyMutexBackend::connect("memory://").await?;
/// let every_shape = AnyBackend::try_from(backend).expect("memory has every shape");
/// # Ok(()) }
/// ```
impl TryFrom<AnyMutexBackend> for AnyBackend {
    type Error = AnyMutexBackend;

    fn try_from(backend: AnyMutexBackend) -> Result<Self, AnyMutexBackend> {
        match backend.store {
            MutexStore::Any(any) => Ok(any),
            #[allow(unreachable_patterns)]
            store => Err(AnyMutexBackend {
                store,
                silent: backend.silent,
            }),
        }
    }
}

impl fmt::Debug for AnyMutexBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AnyMutexBackend")
            .field(&self.store_kind())
            .finish()
    }
}

impl LockBackend for AnyMutexBackend {
    type Lease = AnyMutexLease;

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<AnyMutexLease>>, BackendError> {
        each_mutex_store!(&self.store, backend => Box::pin(backend.acquire(name, request)).await.map(wrapped))
    }

    async fn extend(
        &self,
        name: &str,
        lease: &AnyMutexLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        each_mutex_store!(&self.store, backend => Box::pin(backend.extend(name, LeaseIn::of(lease)?, ttl)).await)
    }

    async fn release(&self, name: &str, lease: &AnyMutexLease) -> Result<bool, BackendError> {
        each_mutex_store!(&self.store, backend => Box::pin(backend.release(name, LeaseIn::of(lease)?)).await)
    }

    async fn released_by(
        &self,
        name: &str,
        lease: &AnyMutexLease,
    ) -> Result<Option<String>, BackendError> {
        each_mutex_store!(&self.store, backend => Box::pin(backend.released_by(name, LeaseIn::of(lease)?)).await)
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        each_mutex_store!(&self.store, backend => Box::pin(backend.abandon(name, request)).await)
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<AnyMutexLease>>>, BackendError> {
        each_mutex_store!(
            &self.store,
            backend => Box::pin(backend.acquire_many(names, request)).await.map(all_wrapped)
        )
    }

    fn store_kind(&self) -> &'static str {
        each_mutex_store!(&self.store, backend => backend.store_kind())
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<AnyMutexLease>> {
        self.queue().map(|_| self as &dyn WaitQueue<AnyMutexLease>)
    }

    fn max_name_len(&self) -> Option<usize> {
        each_mutex_store!(&self.store, backend => backend.max_name_len())
    }

    fn max_ttl(&self) -> Option<Duration> {
        each_mutex_store!(&self.store, backend => backend.max_ttl())
    }
}

impl WaitQueue<AnyMutexLease> for AnyMutexBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        match self.queue() {
            Some(any) => WaitQueue::<AnyLease>::room(any),
            None => &self.silent,
        }
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<AnyMutexLease>, BackendError>> {
        Box::pin(async move {
            let any = self.queue().ok_or_else(no_queue)?;
            let attempt = any.acquire_queued(name, request, ticket_ttl).await?;
            Ok(queued_wrapped(attempt))
        })
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            self.queue()
                .ok_or_else(no_queue)?
                .leave_queue(name, token)
                .await
        })
    }
}
