//! The backend's leases of a held lock, and the duty to give them back: explicitly, or in the
//! background when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::join_all;
use tokio::time::Instant;

use super::error::LockError;
use super::guard::LockGuard;
use super::locker::LockerInner;
use super::telemetry::StoreOp;
use crate::backend::{BackendError, LockBackend};
use crate::background;

/// A held lock's leases, one per name, counted among the locker's held locks until dropped.
/// Dropped unreleased (the work was cancelled, the handle dropped), they are released in the
/// background.
pub(crate) struct Leases<B: LockBackend> {
    locker: Arc<LockerInner<B>>,
    guard: LockGuard,
    leases: Vec<B::Lease>,
    released: AtomicBool,
    taken_at: Instant,
}

impl<B: LockBackend> Leases<B> {
    /// Takes on the release of `guard`'s lock, whose leases are `leases` (one per name),
    /// taken at `taken_at`.
    pub(crate) fn new(
        locker: Arc<LockerInner<B>>,
        (guard, leases): (LockGuard, Vec<B::Lease>),
        taken_at: Instant,
    ) -> Self {
        locker.held.fetch_add(1, Ordering::Relaxed);
        guard.lease().meters().taken();
        Self {
            locker,
            guard,
            leases,
            released: AtomicBool::new(false),
            taken_at,
        }
    }

    pub(crate) fn guard(&self) -> &LockGuard {
        &self.guard
    }

    pub(crate) fn locker(&self) -> &LockerInner<B> {
        &self.locker
    }

    /// Extends every lease by the locker's TTL: `Ok(true)` while all are still ours.
    pub(crate) async fn extend(&self) -> Result<bool, BackendError> {
        let (backend, ttl) = (&*self.locker.backend, self.locker.settings.ttl);
        let names = self.guard.names();
        match &self.leases[..] {
            [lease] => backend.extend(self.guard.name(), lease, ttl).await,
            leases => {
                let extends = names
                    .zip(leases)
                    .map(|(name, lease)| backend.extend(name, lease, ttl));
                let extended = join_all(extends).await;
                extended
                    .into_iter()
                    .try_fold(true, |all, one| Ok(all & one?))
            }
        }
    }

    /// Gives every lease back at once, within one store timeout: `Ok(())`, or why the lock
    /// was no longer (certainly) ours: the store had lost it, or its lease had been lost here
    /// (the work may have run unprotected, even when the store still held it).
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        if self.released.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        self.record_hold_time();
        let was_held = self.guard.is_held();
        self.guard.lease().release();
        let store_timeout = self.locker.settings.store_timeout;
        let give_back = give_back(&*self.locker.backend, &self.guard, &self.leases);
        let meters = self.guard.lease().meters();
        let released = (meters.store_call(StoreOp::Release, store_timeout, give_back)).await;
        let key = || self.guard.lock_names().joined_keys();
        match released {
            Ok(Ok(true)) if was_held => Ok(()),
            Ok(Ok(_)) => Err(LockError::LeaseLost { key: key() }),
            Ok(Err(error)) => Err(LockError::StoreUnavailable(error)),
            Err(_) => Err(LockError::StoreUnavailable(BackendError::timed_out(
                store_timeout,
            ))),
        }
    }

    fn record_hold_time(&self) {
        let held = self.taken_at.elapsed();
        self.locker.hold_times.record(held);
        self.guard.lease().meters().released(held);
    }

    /// [`release`](Self::release), logging instead of returning what went wrong: the work's
    /// answer must not turn into an error because of it, and the lease expires anyway.
    pub(crate) async fn release_quietly(&self) {
        match self.release().await {
            Ok(()) => tracing::trace!(lock = self.guard.name(), "released"),
            Err(LockError::LeaseLost { .. }) => tracing::warn!(
                lock = self.guard.name(),
                "the lock was no longer ours at release: its lease had expired"
            ),
            Err(error) => tracing::warn!(
                lock = self.guard.name(),
                %error,
                "release failed; the lock expires with its TTL"
            ),
        }
    }
}

/// Releases every name of `guard`'s lock: whether all were still ours.
async fn give_back<B: LockBackend>(
    backend: &B,
    guard: &LockGuard,
    leases: &[B::Lease],
) -> Result<bool, BackendError> {
    match leases {
        [lease] => backend.release(guard.name(), lease).await,
        leases => {
            let releases = guard
                .names()
                .zip(leases)
                .map(|(name, lease)| backend.release(name, lease));
            let released = join_all(releases).await;
            released
                .into_iter()
                .try_fold(true, |all, one| Ok(all & one?))
        }
    }
}

impl<B: LockBackend> Drop for Leases<B> {
    fn drop(&mut self) {
        self.locker.held.fetch_sub(1, Ordering::Relaxed);
        if *self.released.get_mut() {
            return;
        }
        self.record_hold_time();
        self.guard.lease().release();
        let (locker, guard, leases) = (
            Arc::clone(&self.locker),
            self.guard.clone(),
            std::mem::take(&mut self.leases),
        );
        let store_timeout = locker.settings.store_timeout;
        background::store_call(
            "release a dropped lock",
            guard.lock_names().joined_keys(),
            store_timeout,
            async move {
                let give_back = give_back(&*locker.backend, &guard, &leases);
                let meters = guard.lease().meters();
                (meters
                    .store_call(StoreOp::Release, store_timeout, give_back)
                    .await)
                    .unwrap_or_else(|_| Err(BackendError::timed_out(store_timeout)))
            },
        );
    }
}
