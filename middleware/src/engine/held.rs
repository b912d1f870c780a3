//! A taken lock: run work under it inline (the layer, `with_lock`), or hand it out as a
//! [`HeldLock`] that renews itself.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::pin;
use std::sync::Arc;

use tokio::task::AbortHandle;

use super::error::LockError;
use super::guard::LockGuard;
use super::lease::keep;
use super::leases::Leases;
use super::policy::OnLost;
use super::reentry;
use crate::backend::LockBackend;

/// A lock just taken by the engine, or found already held by the running future.
pub(crate) enum Acquisition<B: LockBackend> {
    /// Taken now: its leases must be given back.
    Owned(Leases<B>),
    /// Held by the running future already (re-entered): the outer holder gives it back.
    Reentered(LockGuard),
}

/// How work under a lock ended.
pub(crate) enum Ran<T> {
    /// It finished (with `OnLost::Continue`, maybe after the lease was lost).
    Finished(T),
    /// The lease was lost and the work stopped (`OnLost::Abort`).
    Aborted(LockError),
}

impl<B: LockBackend> Acquisition<B> {
    pub(crate) fn guard(&self) -> &LockGuard {
        match self {
            Acquisition::Owned(leases) => leases.guard(),
            Acquisition::Reentered(guard) => guard,
        }
    }

    /// Runs `work` under the lock, keeping its lease meanwhile (renewal runs inline: no task),
    /// then releases it. When the lease is lost, `on_lost` decides whether the work is dropped
    /// at its next await point or runs on. Dropping this future drops the work and releases
    /// the lock in the background.
    pub(crate) async fn run<F: Future>(self, work: F, on_lost: OnLost) -> Ran<F::Output> {
        let leases = match self {
            Acquisition::Reentered(_) => return Ran::Finished(work.await),
            Acquisition::Owned(leases) => leases,
        };
        let work = reentry::scope(leases.guard().clone(), work);
        let ran = run_while_held(work, &leases, on_lost).await;
        leases.release_quietly().await;
        ran
    }

    /// The lock as a handle that renews itself (in a task of its own) until released.
    pub(crate) fn into_held(self) -> HeldLock<B> {
        let leases = match self {
            Acquisition::Reentered(guard) => return HeldLock { guard, owned: None },
            Acquisition::Owned(leases) => Arc::new(leases),
        };
        let guard = leases.guard().clone();
        let renewal = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let leases = Arc::clone(&leases);
            runtime
                .spawn(async move {
                    let (guard, plan) = (leases.guard(), leases.locker().settings.lease_plan());
                    let lost = keep(guard.lease(), plan, guard.name(), || leases.extend()).await;
                    tracing::warn!(lock = guard.name(), because = %lost, "lock lost");
                })
                .abort_handle()
        });
        HeldLock {
            guard,
            owned: Some(Owned { leases, renewal }),
        }
    }
}

/// Runs `work` while keeping its lease; when the lease is lost, aborts the work (its future
/// is dropped on return) or lets it finish, as `on_lost` says.
async fn run_while_held<F: Future, B: LockBackend>(
    work: F,
    leases: &Leases<B>,
    on_lost: OnLost,
) -> Ran<F::Output> {
    let (guard, plan) = (leases.guard(), leases.locker().settings.lease_plan());
    let mut work = pin!(work);
    let lost = tokio::select! {
        biased;
        output = &mut work => return Ran::Finished(output),
        lost = keep(guard.lease(), plan, guard.name(), || leases.extend()) => lost,
    };
    match on_lost {
        OnLost::Abort => {
            tracing::warn!(lock = guard.name(), because = %lost, "lock lost; stopping the work");
            Ran::Aborted(LockError::LeaseLost {
                key: guard.lock_names().joined_keys(),
            })
        }
        OnLost::Continue => {
            tracing::warn!(lock = guard.name(), because = %lost, "lock lost; the work goes on");
            Ran::Finished(work.await)
        }
    }
}

/// A lock held by this process until [`release`](Self::release)d or dropped, as
/// [`Locker::lock`](crate::Locker::lock) and its siblings return it.
///
/// While it is held, a task of its own renews the lease every TTL/3; if the lease is lost
/// anyway, [`is_held`](LockGuard::is_held) turns false and [`lost`](LockGuard::lost) resolves
/// (it dereferences to its [`LockGuard`]). Dropping it releases the lock in the background;
/// [`release`](Self::release) does it now and says whether the lock was still held.
///
/// # Example
///
/// ```
/// use tower_lock::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_lock::LockError> {
/// let locker = Locker::new(MemoryBackend::new());
/// let report = locker.lock("report:daily").await?;
/// assert!(report.is_held());
/// // ... produce the report, passing `report.fence()` to the store it is written to ...
/// report.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the handle is dropped"]
pub struct HeldLock<B: LockBackend> {
    guard: LockGuard,
    /// `None` when the running future already held the lock (its holder releases it).
    owned: Option<Owned<B>>,
}

struct Owned<B: LockBackend> {
    leases: Arc<Leases<B>>,
    renewal: Option<AbortHandle>,
}

impl<B: LockBackend> HeldLock<B> {
    /// What the code under the lock sees of it (also reachable through `Deref`).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Releases the lock now. `Err(LockError::LeaseLost)` when it was no longer held (its
    /// lease had been lost), `Err(LockError::StoreUnavailable)` when the store did not
    /// confirm (the lease then expires by itself). Releasing a lock re-entered from an outer
    /// holder does nothing: the outer holder releases it.
    pub async fn release(mut self) -> Result<(), LockError> {
        let Some(owned) = self.owned.take() else {
            return Ok(());
        };
        if let Some(renewal) = &owned.renewal {
            renewal.abort();
        }
        owned.leases.release().await
    }
}

impl<B: LockBackend> Drop for HeldLock<B> {
    fn drop(&mut self) {
        if let Some(renewal) = self.owned.as_ref().and_then(|owned| owned.renewal.as_ref()) {
            // The task's copy of the leases goes with it; the last copy releases the lock.
            renewal.abort();
        }
    }
}

impl<B: LockBackend> Deref for HeldLock<B> {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl<B: LockBackend> fmt::Debug for HeldLock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLock")
            .field("guard", &self.guard)
            .field("reentered", &self.owned.is_none())
            .finish()
    }
}
