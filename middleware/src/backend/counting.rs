//! A backend wrapper that counts calls: for metrics, and for tests and benchmarks that check
//! what a lock costs the store.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Acquire, AcquireMany, BackendError, Hold, LockBackend, WaitingRoom};
use crate::OwnerToken;

/// Wraps a backend and counts its calls by kind. With the Redis backend each call is one
/// round trip. Clones share the counts, so keep one to read them while the layer owns another.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::backend::CountingBackend;
/// use tower_lock::{LockBackend, MemoryBackend, OwnerToken};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let backend = CountingBackend::new(MemoryBackend::new());
/// let token = OwnerToken::new();
/// backend.acquire("lock:a", token, Duration::from_secs(10)).await?;
/// backend.release("lock:a", token).await?;
///
/// let counts = backend.counts();
/// assert_eq!((counts.acquires, counts.extends, counts.releases), (1, 0, 1));
/// assert_eq!(counts.total(), 2);
/// # Ok::<_, tower_lock::BackendError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct CountingBackend<B> {
    inner: B,
    counts: Arc<[AtomicU64; 3]>,
}

/// Calls counted by a [`CountingBackend`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Acquire attempts of every kind (mutex, ticketed, shaped, several keys).
    pub acquires: u64,
    /// Lease renewals.
    pub extends: u64,
    /// Releases, and tickets withdrawn.
    pub releases: u64,
}

impl CallCounts {
    /// All calls.
    pub fn total(&self) -> u64 {
        self.acquires + self.extends + self.releases
    }
}

const ACQUIRES: usize = 0;
const EXTENDS: usize = 1;
const RELEASES: usize = 2;

impl<B> CountingBackend<B> {
    /// Counts the calls made to `inner`.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            counts: Arc::default(),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The calls counted so far.
    pub fn counts(&self) -> CallCounts {
        let count = |kind: usize| self.counts[kind].load(Ordering::Relaxed);
        CallCounts {
            acquires: count(ACQUIRES),
            extends: count(EXTENDS),
            releases: count(RELEASES),
        }
    }

    fn count(&self, kind: usize) {
        self.counts[kind].fetch_add(1, Ordering::Relaxed);
    }
}

impl<B: fmt::Debug> fmt::Debug for CountingBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingBackend")
            .field("inner", &self.inner)
            .field("counts", &self.counts())
            .finish()
    }
}

impl<B: LockBackend> LockBackend for CountingBackend<B> {
    async fn acquire(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        self.count(ACQUIRES);
        self.inner.acquire(key, token, ttl).await
    }

    async fn extend(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        self.count(EXTENDS);
        self.inner.extend(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: OwnerToken) -> Result<bool, BackendError> {
        self.count(RELEASES);
        self.inner.release(key, token).await
    }

    async fn acquire_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> Result<Acquire, BackendError> {
        self.count(ACQUIRES);
        self.inner.acquire_hold(key, token, ttl, hold).await
    }

    async fn extend_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> Result<bool, BackendError> {
        self.count(EXTENDS);
        self.inner.extend_hold(key, token, ttl, hold).await
    }

    async fn release_hold(
        &self,
        key: &str,
        token: OwnerToken,
        hold: Hold,
    ) -> Result<bool, BackendError> {
        self.count(RELEASES);
        self.inner.release_hold(key, token, hold).await
    }

    async fn acquire_many(
        &self,
        keys: &[String],
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<AcquireMany, BackendError> {
        self.count(ACQUIRES);
        self.inner.acquire_many(keys, token, ttl).await
    }

    fn waiting_room(&self) -> Option<&Arc<WaitingRoom>> {
        self.inner.waiting_room()
    }

    async fn acquire_fair(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        ticket_ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        self.count(ACQUIRES);
        self.inner.acquire_fair(key, token, ttl, ticket_ttl).await
    }

    async fn leave_fair_queue(&self, key: &str, token: OwnerToken) -> Result<(), BackendError> {
        self.count(RELEASES);
        self.inner.leave_fair_queue(key, token).await
    }
}
