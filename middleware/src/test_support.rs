//! What the crate's own tests share: holding and probing locks on the memory backend, counting
//! who is inside by hold, and backends that fail on purpose.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, TokenLease};
use crate::token::OwnerToken;

/// Takes lock `name` in `store` as another process would; its lease.
pub(crate) async fn hold(store: &MemoryBackend, name: &str, ttl: Duration) -> TokenLease {
    let request = LockRequest::new(OwnerToken::new(), ttl);
    match store.acquire(name, request).await.expect("memory answers") {
        Attempt::Acquired(grant) => grant.lease,
        Attempt::Busy { .. } => panic!("{name} should be free"),
    }
}

/// Whether lock `name` is free in `store` (taken and given back to find out).
pub(crate) async fn is_free(store: &MemoryBackend, name: &str) -> bool {
    let request = LockRequest::new(OwnerToken::new(), Duration::from_secs(1));
    match store.acquire(name, request).await.expect("memory answers") {
        Attempt::Acquired(grant) => {
            store.release(name, &grant.lease).await.ok();
            true
        }
        Attempt::Busy { .. } => false,
    }
}

/// Counts who is inside a critical section by hold, the most readers at once, and every
/// moment a writer was not alone.
#[derive(Debug, Default)]
pub(crate) struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Inside {
    /// Stays inside for `work` as `hold`.
    pub(crate) async fn visit(&self, hold: Hold, work: Duration) {
        let (mine, other) = match hold {
            Hold::Read => (&self.readers, &self.writers),
            _ => (&self.writers, &self.readers),
        };
        let now = mine.fetch_add(1, SeqCst) + 1;
        if hold == Hold::Read {
            self.most_readers.fetch_max(now, SeqCst);
        }
        if other.load(SeqCst) > 0 || (hold.is_exclusive() && now > 1) {
            self.overlaps.fetch_add(1, SeqCst);
        }
        tokio::time::sleep(work).await;
        mine.fetch_sub(1, SeqCst);
    }

    pub(crate) fn most_readers(&self) -> usize {
        self.most_readers.load(SeqCst)
    }

    pub(crate) fn overlaps(&self) -> usize {
        self.overlaps.load(SeqCst)
    }
}

/// The memory backend's mutex and nothing else — no shapes, no wait queue (waiters poll), the
/// contract's default `acquire_many` — optionally failing on purpose.
#[derive(Clone, Debug, Default)]
pub(crate) struct MutexOnly {
    memory: MemoryBackend,
    fault: Fault,
    max_ttl: Option<Duration>,
}

/// How a [`MutexOnly`] fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fault {
    /// It does not.
    #[default]
    None,
    /// The answer to every acquire is lost after the store acted on it (a dropped connection,
    /// a timeout): the lock may have been taken.
    LostAnswers,
    /// Every renewal finds the lock taken by somebody else.
    Stolen,
    /// Every acquire reaches the store this late, in a task of its own: a request on its way is
    /// applied whatever its sender does meanwhile.
    AppliedLate(Duration),
}

impl MutexOnly {
    pub(crate) fn failing(fault: Fault) -> Self {
        Self {
            fault,
            ..Self::default()
        }
    }

    /// One that vouches for leases of at most `max` ([`LockBackend::max_ttl`]), as a
    /// session store does.
    pub(crate) fn vouching_for(max: Duration) -> Self {
        Self {
            max_ttl: Some(max),
            ..Self::default()
        }
    }

    /// The store it keeps its locks in.
    pub(crate) fn memory(&self) -> &MemoryBackend {
        &self.memory
    }
}

/// A store that never answers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hanging;

impl LockBackend for MutexOnly {
    type Lease = TokenLease;

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        if let Fault::AppliedLate(delay) = self.fault {
            let (memory, name) = (self.memory.clone(), name.to_owned());
            let applied = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                memory.acquire(&name, request).await
            });
            return applied.await.expect("the late request is applied");
        }
        let answer = self.memory.acquire(name, request).await;
        match self.fault {
            Fault::LostAnswers => Err(BackendError::new(
                "the connection dropped before the answer",
            )),
            _ => answer,
        }
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        match self.fault {
            Fault::Stolen => Ok(false),
            _ => self.memory.extend(name, lease, ttl).await,
        }
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        self.memory.release(name, lease).await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.memory.abandon(name, request).await
    }

    fn max_ttl(&self) -> Option<Duration> {
        self.max_ttl
    }
}

impl LockBackend for Hanging {
    type Lease = TokenLease;

    async fn acquire(
        &self,
        _: &str,
        _: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        std::future::pending().await
    }

    async fn extend(&self, _: &str, _: &TokenLease, _: Duration) -> Result<bool, BackendError> {
        std::future::pending().await
    }

    async fn release(&self, _: &str, _: &TokenLease) -> Result<bool, BackendError> {
        std::future::pending().await
    }

    async fn abandon(&self, _: &str, _: LockRequest) -> Result<(), BackendError> {
        std::future::pending().await
    }
}
