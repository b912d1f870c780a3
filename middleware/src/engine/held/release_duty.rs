//! The backend's leases of a held lock, and the duty to give them back: explicitly, or in the
//! background when dropped — or to hand them on to the next task of the locker waiting for the
//! lock (`engine/line/`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::backend::{BackendError, Hold, LockBackend, lease_deadline};
use crate::background;
use crate::engine::error::LockError;
use crate::engine::guard::LockGuard;
use crate::engine::line::{Baton, RunId};
use crate::engine::locker::LockerInner;
use crate::engine::telemetry::StoreOp;

/// A held lock's leases, one per name, counted among the locker's held locks until dropped.
/// Dropped unreleased (the work was cancelled, the handle dropped), they are released in the
/// background. A lock held in a run is handed on to the next waiting task of the locker
/// instead, while the run may go on.
pub(crate) struct ReleaseDuty<B: LockBackend> {
    locker: Arc<LockerInner<B>>,
    guard: LockGuard,
    /// The store's leases, shared by the holds of a run.
    leases: Arc<Vec<B::Lease>>,
    /// The run it is held in: handed on when released, while the run may go on.
    run: Option<RunId>,
    released: AtomicBool,
    taken_at: Instant,
    /// Its number among the holds an observer watches, if one does (`engine/observer.rs`).
    observed: Option<u64>,
}

impl<B: LockBackend> ReleaseDuty<B> {
    /// Takes on the release of `guard`'s lock, whose leases are `leases` (one per name),
    /// taken at `taken_at`, held in run `run`, if any.
    pub(crate) fn new(
        locker: Arc<LockerInner<B>>,
        (guard, leases, run): (LockGuard, Arc<Vec<B::Lease>>, Option<RunId>),
        taken_at: Instant,
    ) -> Self {
        locker.held.fetch_add(1, Ordering::Relaxed);
        guard.lease().meters().taken();
        Self {
            observed: locker.settings.observer.granted(&guard),
            locker,
            guard,
            leases,
            run,
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

    /// Extends every lease by the locker's TTL: `Ok(true)` while all are still ours. The
    /// lock's run, if any, hears until when its lease runs now.
    pub(crate) async fn extend(&self) -> Result<bool, BackendError> {
        let sent = Instant::now();
        let extended = self.extend_all().await;
        if let Ok(false) = extended {
            self.locker.settings.observer.lost(self.observed);
        }
        if let (Some(run), Ok(true)) = (self.run, &extended) {
            let lease_ends = lease_deadline(sent, self.locker.settings.ttl);
            self.locker
                .lines
                .renewed(self.guard.name(), run, lease_ends);
        }
        extended
    }

    async fn extend_all(&self) -> Result<bool, BackendError> {
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

    /// Logs who freed this lock, where the store recorded an operator's release: asked in the
    /// background once a renewal found the lease gone (the holder is told at once; the label
    /// follows).
    pub(crate) fn tell_who_released(&self) {
        let (locker, leases) = (Arc::clone(&self.locker), Arc::clone(&self.leases));
        let names: Vec<String> = self.guard.names().map(str::to_owned).collect();
        background::spawn("ask who released a lock", async move {
            if let Some(operator) = released_by(&locker, &names, &leases).await {
                tracing::warn!(
                    lock = names[0],
                    released_by = operator,
                    "an operator released the lock"
                );
            }
        });
    }

    /// Gives every lease back at once, within one store timeout: `Ok(())`, or why the lock
    /// was no longer (certainly) ours: the store had lost it, or its lease had been lost here
    /// (the work may have run unprotected, even when the store still held it).
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        if self.released.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let was_held = self.ends();
        let key = || self.guard.lock_names().joined_keys();
        if self.handed_on(was_held) {
            return match was_held {
                true => Ok(()),
                false => Err(LockError::LeaseLost { key: key() }),
            };
        }
        let store_timeout = self.locker.settings.store_timeout;
        let give_back = give_back(&*self.locker.backend, &self.guard, &self.leases);
        let meters = self.guard.lease().meters();
        let released = (meters.store_call(StoreOp::Release, store_timeout, give_back)).await;
        if let Ok(Ok(false)) = released {
            self.locker.settings.observer.lost(self.observed);
        }
        match released {
            Ok(Ok(true)) if was_held => Ok(()),
            Ok(Ok(_)) => Err(LockError::LeaseLost { key: key() }),
            Ok(Err(error)) => Err(LockError::StoreUnavailable(error)),
            Err(_) => Err(LockError::StoreUnavailable(BackendError::timed_out(
                store_timeout,
            ))),
        }
    }

    /// Hands the lock (if it `was_held` until its release) to the next task of the locker
    /// waiting for it, if its run may go on; else ends the run (the next waiter asks
    /// the store) and the caller releases it. A reader sharing its hold leaves it to the
    /// others, and the last of them releases it.
    fn handed_on(&self, was_held: bool) -> bool {
        let Some(run) = self.run else {
            return false;
        };
        if self.guard.hold() == Hold::Read {
            return !self.locker.lines.leave_read(self.guard.name(), run);
        }
        let (renewed_at, deadline) = self.guard.lease().timing();
        let baton = Baton {
            run,
            leases: Arc::clone(&self.leases),
            fence: None,
            renewed_at,
            deadline,
        };
        let shared_with_readers = self.guard.hold() == Hold::Write;
        if was_held && hand_on(&self.locker, self.guard.name(), baton, shared_with_readers).is_ok()
        {
            return true;
        }
        self.locker.lines.end_run(self.guard.name(), run);
        false
    }

    /// Ends the hold — its time recorded, its lease released here — before the lock is handed
    /// on or given back: whether its lease was still held.
    fn ends(&self) -> bool {
        self.record_hold_time();
        let was_held = self.guard.is_held();
        self.locker.settings.observer.ended(self.observed, was_held);
        self.guard.lease().release();
        was_held
    }

    fn record_hold_time(&self) {
        let held = self.taken_at.elapsed();
        self.locker.hold_times.record(held);
        self.guard.lease().meters().released(held);
    }

    /// Who freed this lock, asked after a release found it gone (see [`released_by`]).
    async fn released_here(&self) -> Option<String> {
        let names: Vec<String> = self.guard.names().map(str::to_owned).collect();
        released_by(&self.locker, &names, &self.leases).await
    }

    /// [`release`](Self::release), logging instead of returning what went wrong: the work's
    /// answer must not turn into an error because of it, and the lease expires anyway.
    pub(crate) async fn release_quietly(&self) {
        match self.release().await {
            Ok(()) => tracing::trace!(lock = self.guard.name(), "released"),
            Err(LockError::LeaseLost { .. }) => match self.released_here().await {
                Some(operator) => tracing::warn!(
                    lock = self.guard.name(),
                    released_by = operator,
                    "the lock was no longer ours at release: an operator released it"
                ),
                None => tracing::warn!(
                    lock = self.guard.name(),
                    "the lock was no longer ours at release: its lease was gone from the store"
                ),
            },
            Err(error) => tracing::warn!(
                lock = self.guard.name(),
                %error,
                "release failed; the lock expires with its TTL"
            ),
        }
    }
}

/// The label of the operator who freed `leases` (one per name of `names`), where the store
/// recorded one: asked within one store timeout. `None` when the store cannot tell, fails or
/// is too slow.
async fn released_by<B: LockBackend>(
    locker: &LockerInner<B>,
    names: &[String],
    leases: &[B::Lease],
) -> Option<String> {
    let backend = &*locker.backend;
    let asks = (names.iter().zip(leases)).map(|(name, lease)| backend.released_by(name, lease));
    let store_timeout = locker.settings.store_timeout;
    let answers = tokio::time::timeout(store_timeout, join_all(asks)).await;
    (answers.ok()?.into_iter()).find_map(|answer| answer.ok().flatten())
}

/// Releases every name of `guard`'s lock: whether all were still ours.
async fn give_back<B: LockBackend>(
    backend: &B,
    guard: &LockGuard,
    leases: &[B::Lease],
) -> Result<bool, BackendError> {
    match leases {
        [lease] => release(backend, guard.name(), lease).await,
        leases => {
            let releases = guard
                .names()
                .zip(leases)
                .map(|(name, lease)| release(backend, name, lease));
            let released = join_all(releases).await;
            released
                .into_iter()
                .try_fold(true, |all, one| Ok(all & one?))
        }
    }
}

/// Releases `lease` of lock `name` in the store: whether it was still ours. Once it is
/// released, this process's waiters for it that poll are woken: no announcement reaches them.
async fn release<B: LockBackend>(
    backend: &B,
    name: &str,
    lease: &B::Lease,
) -> Result<bool, BackendError> {
    let released = backend.release(name, lease).await;
    if let (Ok(true), Some(queue)) = (&released, backend.wait_queue()) {
        queue.room().released_here(name);
    }
    released
}

impl<B: LockBackend> Drop for ReleaseDuty<B> {
    fn drop(&mut self) {
        self.locker.held.fetch_sub(1, Ordering::Relaxed);
        if *self.released.get_mut() {
            return;
        }
        let was_held = self.ends();
        if self.handed_on(was_held) {
            return;
        }
        let (locker, guard, leases) = (
            Arc::clone(&self.locker),
            self.guard.clone(),
            Arc::clone(&self.leases),
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

/// Hands `baton` on to the next task of `locker` waiting for lock `name`, unless the lease has
/// too little left for the new holder to renew it in time (a third of the TTL: its renewal is
/// due), the run has had its holds, nobody waits, or — a write lock, `shared_with_readers` —
/// a reader of the locker waits.
fn hand_on<B: LockBackend>(
    locker: &LockerInner<B>,
    name: &str,
    baton: Baton<B::Lease>,
    shared_with_readers: bool,
) -> Result<(), Baton<B::Lease>> {
    let left = baton.deadline.saturating_duration_since(Instant::now());
    if left <= locker.settings.ttl / 3 {
        return Err(baton);
    }
    locker.lines.hand_on(name, baton, shared_with_readers)
}

/// Gives back a lock handed to a task of `locker` that left before it heard: to the next
/// waiting task, else to the store, in the background.
pub(crate) fn give_back_baton<B: LockBackend>(
    locker: &Arc<LockerInner<B>>,
    name: &str,
    baton: Baton<B::Lease>,
) {
    // A lock handed to a waiter that left: a writer's or a mutex's; readers may wait for it.
    let Err(baton) = hand_on(locker, name, baton, true) else {
        return;
    };
    locker.lines.end_run(name, baton.run);
    release_in_background(locker, name, baton.leases);
}

/// Gives back a read hold shared with a reader of `locker` that left before it heard: the last
/// reader of its run releases it in the store, in the background.
pub(crate) fn give_back_share<B: LockBackend>(
    locker: &Arc<LockerInner<B>>,
    name: &str,
    baton: Baton<B::Lease>,
) {
    if locker.lines.leave_read(name, baton.run) {
        release_in_background(locker, name, baton.leases);
    }
}

/// Releases `leases` of a lock (of one name) nobody holds, in the background.
fn release_in_background<B: LockBackend>(
    locker: &LockerInner<B>,
    name: &str,
    leases: Arc<Vec<B::Lease>>,
) {
    let (backend, store_timeout) = (Arc::clone(&locker.backend), locker.settings.store_timeout);
    let name = name.to_owned();
    background::store_call(
        "release a handed lock nobody took",
        name.clone(),
        store_timeout,
        async move {
            match leases.first() {
                Some(lease) => release(&*backend, &name, lease).await,
                None => Ok(false),
            }
        },
    );
}
