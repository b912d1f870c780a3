//! A backend wrapper that counts calls: for tests and benchmarks that check what a lock costs
//! the store.

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::backend::waiting::WaitingRoom;
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, QueuedAttempt, Semaphores,
    SharedLocks, WaitQueue,
};
use crate::token::OwnerToken;

/// Wraps a backend and counts its calls by kind. With the Redis backend each call is one
/// round trip. Clones share the counts, so keep one to read them while a locker owns another.
/// It offers every capability its backend has, counted.
///
/// It can also stand for a store that went away ([`set_availability`](Self::set_availability)):
/// every call from then on is refused at once, or never answered, until it answers again.
///
/// # Example
///
/// ```
/// use tower_lock::testing::CountingBackend;
/// use tower_lock::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_lock::LockError> {
/// let backend = CountingBackend::new(MemoryBackend::new());
/// let locker = Locker::new(backend.clone());
/// locker.lock("a").await?.release().await?;
///
/// let counts = backend.counts();
/// assert_eq!((counts.acquires, counts.extends, counts.releases), (1, 0, 1));
/// assert_eq!(counts.total(), 2);
/// # Ok(()) }
/// ```
pub struct CountingBackend<B: LockBackend> {
    inner: Arc<B>,
    counts: Arc<Counts>,
    queue: Option<CountedQueue<B>>,
}

/// Calls counted by a [`CountingBackend`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Acquire attempts of every kind (mutex, queued, shaped, several names).
    pub acquires: u64,
    /// Lease renewals.
    pub extends: u64,
    /// Releases, abandoned attempts and tickets withdrawn.
    pub releases: u64,
}

impl CallCounts {
    /// All calls.
    pub fn total(&self) -> u64 {
        self.acquires + self.extends + self.releases
    }
}

/// Whether a [`CountingBackend`]'s store answers its calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Availability {
    /// Every call goes to the wrapped backend.
    #[default]
    Answers,
    /// Every call fails at once, as on a connection the store's host refuses.
    Refuses,
    /// No call is ever answered, as by a store that stopped or a network that drops packets.
    Hangs,
}

#[derive(Debug, Default)]
struct Counts {
    acquires: AtomicU64,
    /// Acquire attempts answered: granted, busy or queued, or failed by the store.
    acquires_answered: AtomicU64,
    /// The callers whose queued attempts were answered with their ticket in the queue.
    queued_callers: Mutex<HashSet<OwnerToken>>,
    extends: AtomicU64,
    releases: AtomicU64,
    availability: AtomicU8,
}

impl Counts {
    /// Counts a call on `counter`, and answers as the store's availability says: `Ok` when the
    /// call goes to the wrapped backend; refused; or never. (The wrapped backend's call is
    /// awaited by the caller, not here: moving a store's large future into this one costs its
    /// size again in stack frames.)
    async fn call(&self, counter: &AtomicU64) -> Result<(), BackendError> {
        counter.fetch_add(1, Ordering::Relaxed);
        match self.availability() {
            Availability::Answers => Ok(()),
            Availability::Refuses => Err(BackendError::new(
                "connection refused (the test's store is down)",
            )),
            Availability::Hangs => std::future::pending().await,
        }
    }

    fn queued_callers(&self) -> std::sync::MutexGuard<'_, HashSet<OwnerToken>> {
        // Every update leaves the set consistent.
        self.queued_callers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts an acquire attempt's `answer` as answered.
    fn answered<T>(&self, answer: T) -> T {
        self.acquires_answered.fetch_add(1, Ordering::Relaxed);
        answer
    }

    fn availability(&self) -> Availability {
        match self.availability.load(Ordering::Relaxed) {
            0 => Availability::Answers,
            1 => Availability::Refuses,
            _ => Availability::Hangs,
        }
    }
}

/// The wrapped backend's wait queue, counted.
struct CountedQueue<B> {
    inner: Arc<B>,
    counts: Arc<Counts>,
    room: Arc<WaitingRoom>,
}

impl<B: LockBackend> CountingBackend<B> {
    /// Counts the calls made to `inner`.
    pub fn new(inner: B) -> Self {
        let (inner, counts) = (Arc::new(inner), Arc::<Counts>::default());
        let queue = inner.wait_queue().map(|queue| CountedQueue {
            inner: Arc::clone(&inner),
            counts: Arc::clone(&counts),
            room: Arc::clone(queue.room()),
        });
        Self {
            inner,
            counts,
            queue,
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The same backend, its waiters in a room of their own that the store announces nothing
    /// to: only the engine's word of this process's own releases reaches them.
    #[cfg(test)]
    pub(crate) fn deaf(mut self) -> Self {
        if let Some(queue) = &mut self.queue {
            queue.room = WaitingRoom::in_process();
        }
        self
    }

    /// From now on, the store answers every call, refuses it at once, or answers none (a call
    /// already waiting for its answer is not affected).
    ///
    /// ```
    /// use tower_lock::testing::{Availability, CountingBackend};
    /// use tower_lock::{LockError, Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let backend = CountingBackend::new(MemoryBackend::new());
    /// let locker = Locker::new(backend.clone());
    /// backend.set_availability(Availability::Refuses);
    /// assert!(matches!(locker.lock("a").await, Err(LockError::StoreUnavailable(_))));
    /// # }
    /// ```
    pub fn set_availability(&self, availability: Availability) {
        let value = match availability {
            Availability::Answers => 0,
            Availability::Refuses => 1,
            Availability::Hangs => 2,
        };
        self.counts.availability.store(value, Ordering::Relaxed);
    }

    /// How many acquire attempts the wrapped backend has answered — granted, busy, queued or
    /// failed — in all, by every clone: fewer than [`counts`](Self::counts)' `acquires` while
    /// some are in flight, and for good when one was refused or left hanging
    /// ([`set_availability`](Self::set_availability)) or dropped unanswered. A test that knows
    /// the calls a waiter makes (a writer's first look, then the attempt whose busy answer
    /// leaves its intent) waits on it to know that the waiter stands in the store.
    pub fn acquires_answered(&self) -> u64 {
        self.counts.acquires_answered.load(Ordering::Relaxed)
    }

    /// How many callers the wrapped backend has answered with their ticket in a lock's queue,
    /// in all, over every lock and every clone — each caller once, however often it renewed
    /// its ticket or asked again; the count never goes down. A test waits on it to know that a
    /// waiter's ticket is in the store.
    pub fn tickets_queued(&self) -> usize {
        self.counts.queued_callers().len()
    }

    /// The calls counted so far.
    pub fn counts(&self) -> CallCounts {
        let Counts {
            acquires,
            extends,
            releases,
            ..
        } = &*self.counts;
        CallCounts {
            acquires: acquires.load(Ordering::Relaxed),
            extends: extends.load(Ordering::Relaxed),
            releases: releases.load(Ordering::Relaxed),
        }
    }
}

impl<B: LockBackend> Clone for CountingBackend<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            counts: Arc::clone(&self.counts),
            queue: self.queue.as_ref().map(|queue| CountedQueue {
                inner: Arc::clone(&queue.inner),
                counts: Arc::clone(&queue.counts),
                room: Arc::clone(&queue.room),
            }),
        }
    }
}

impl<B: LockBackend + fmt::Debug> fmt::Debug for CountingBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingBackend")
            .field("inner", &self.inner)
            .field("counts", &self.counts())
            .finish()
    }
}

impl<B: LockBackend> LockBackend for CountingBackend<B> {
    type Lease = B::Lease;

    fn store_kind(&self) -> &'static str {
        self.inner.store_kind()
    }

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<B::Lease>>, BackendError> {
        self.counts.call(&self.counts.acquires).await?;
        self.counts
            .answered(self.inner.acquire(name, request).await)
    }

    async fn extend(
        &self,
        name: &str,
        lease: &B::Lease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        self.counts.call(&self.counts.extends).await?;
        self.inner.extend(name, lease, ttl).await
    }

    async fn release(&self, name: &str, lease: &B::Lease) -> Result<bool, BackendError> {
        self.counts.call(&self.counts.releases).await?;
        self.inner.release(name, lease).await
    }

    async fn released_by(
        &self,
        name: &str,
        lease: &B::Lease,
    ) -> Result<Option<String>, BackendError> {
        self.inner.released_by(name, lease).await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.counts.call(&self.counts.releases).await?;
        self.inner.abandon(name, request).await
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<B::Lease>>>, BackendError> {
        self.counts.call(&self.counts.acquires).await?;
        self.counts
            .answered(self.inner.acquire_many(names, request).await)
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<B::Lease>> {
        self.queue
            .as_ref()
            .map(|queue| queue as &dyn WaitQueue<B::Lease>)
    }

    fn max_name_len(&self) -> Option<usize> {
        self.inner.max_name_len()
    }

    fn max_ttl(&self) -> Option<Duration> {
        self.inner.max_ttl()
    }
}

impl<B: SharedLocks> SharedLocks for CountingBackend<B> {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<B::Lease>>, BackendError> {
        self.counts.call(&self.counts.acquires).await?;
        self.counts
            .answered(self.inner.acquire_read(name, request).await)
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<B::Lease>>, BackendError> {
        self.counts.call(&self.counts.acquires).await?;
        self.counts
            .answered(self.inner.acquire_write(name, request).await)
    }
}

impl<B: Semaphores> Semaphores for CountingBackend<B> {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<B::Lease>>, BackendError> {
        self.counts.call(&self.counts.acquires).await?;
        let answer = self.inner.acquire_permit(name, request, permits).await;
        self.counts.answered(answer)
    }
}

/// The wrapped backend offered no queue after all (its queue is looked up again per call).
fn no_queue() -> BackendError {
    BackendError::new("the wrapped backend has no wait queue")
}

impl<B: LockBackend> WaitQueue<B::Lease> for CountedQueue<B> {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<B::Lease>, BackendError>> {
        Box::pin(async move {
            self.counts.call(&self.counts.acquires).await?;
            let queue = self.inner.wait_queue().ok_or_else(no_queue)?;
            let answer = queue.acquire_queued(name, request, ticket_ttl).await;
            if let Ok(QueuedAttempt::Queued { .. }) = answer {
                self.counts.queued_callers().insert(request.token);
            }
            self.counts.answered(answer)
        })
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            self.counts.call(&self.counts.releases).await?;
            let queue = self.inner.wait_queue().ok_or_else(no_queue)?;
            queue.leave_queue(name, token).await
        })
    }
}
