//! The contract's defaults: a backend that implements only what is required — no atomic
//! `acquire_many`, no wait queue, no shapes — passes the mutex conformance suite (its waiters
//! poll, and several keys are taken one by one in order).

use std::time::Duration;

use super::memory::MemoryBackend;
use super::{Attempt, BackendError, Granted, LockBackend, LockRequest, TokenLease};

crate::conformance_suite!(MutexOnlyStore);

/// The memory backend's mutex, and nothing else.
#[derive(Clone, Debug, Default)]
struct MutexOnly(MemoryBackend);

impl LockBackend for MutexOnly {
    type Lease = TokenLease;

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        self.0.acquire(name, request).await
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        self.0.extend(name, lease, ttl).await
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        self.0.release(name, lease).await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.0.abandon(name, request).await
    }
}

#[derive(Default)]
struct MutexOnlyStore(MutexOnly);

impl crate::conformance::Store for MutexOnlyStore {
    type Backend = MutexOnly;

    async fn start() -> Self {
        Self::default()
    }

    async fn backend(&self) -> MutexOnly {
        self.0.clone()
    }
}
