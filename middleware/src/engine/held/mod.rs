//! A taken lock: run work under it inline (the layer, `with_lock`), or hand it out as a
//! [`HeldLock`] that renews itself.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::pin;
use std::sync::Arc;

use tokio::task::AbortHandle;

use crate::backend::LockBackend;
use crate::engine::error::LockError;
use crate::engine::guard::LockGuard;
use crate::engine::policy::OnLost;
use crate::engine::reentry;
use local_lease::keep;

mod hold_times;
mod local_lease;
mod release_duty;

pub(crate) use hold_times::HoldTimes;
pub use local_lease::LeaseLost;
pub(crate) use local_lease::{LeasePlan, LocalLease};
pub(crate) use release_duty::{ReleaseDuty, give_back_baton, give_back_share};

/// A lock just taken by the engine, or found already held by the running future.
pub(crate) enum Acquisition<B: LockBackend> {
    /// Taken now: its leases must be given back.
    Owned(ReleaseDuty<B>),
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
        match self.run_and_keep(work, on_lost).await {
            Ran::Finished((output, held)) => {
                if let Some(held) = held {
                    held.release_quietly().await;
                }
                Ran::Finished(output)
            }
            Ran::Aborted(error) => Ran::Aborted(error),
        }
    }

    /// Like [`run`](Self::run), but a lock taken here outlives the work: it is returned with
    /// the work's output, not renewing until [`HeldLock::renew_in_background`] is called, for
    /// as long as that output is being delivered (a streamed response body). `None` for a lock
    /// re-entered from an outer holder.
    pub(crate) async fn run_and_keep<F: Future>(
        self,
        work: F,
        on_lost: OnLost,
    ) -> Ran<(F::Output, Option<HeldLock<B>>)> {
        let leases = match self {
            Acquisition::Reentered(_) => return Ran::Finished((work.await, None)),
            Acquisition::Owned(leases) => leases,
        };
        let work = reentry::scope(leases.guard().clone(), work);
        match run_while_held(work, &leases, on_lost).await {
            Ran::Finished(output) => Ran::Finished((output, Some(HeldLock::idle(leases)))),
            Ran::Aborted(error) => {
                leases.release_quietly().await;
                Ran::Aborted(error)
            }
        }
    }

    /// The lock as a handle that renews itself (in a task of its own) until released.
    pub(crate) fn into_held(self) -> HeldLock<B> {
        let mut held = match self {
            Acquisition::Reentered(guard) => return HeldLock { guard, owned: None },
            Acquisition::Owned(leases) => HeldLock::idle(leases),
        };
        held.renew_in_background();
        held
    }
}

/// Runs `work` while keeping its lease; when the lease is lost, aborts the work (its future
/// is dropped on return) or lets it finish, as `on_lost` says.
async fn run_while_held<F: Future, B: LockBackend>(
    work: F,
    leases: &ReleaseDuty<B>,
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
    leases: Arc<ReleaseDuty<B>>,
    renewal: RenewalTask,
}

/// The task renewing a held lock's lease.
enum RenewalTask {
    /// Not started: the lease is not being renewed.
    Idle,
    Running(AbortHandle),
    /// There was no Tokio runtime to run it on: the lease runs out.
    Impossible,
}

impl<B: LockBackend> HeldLock<B> {
    /// The handle of `leases`, not renewing them yet.
    fn idle(leases: ReleaseDuty<B>) -> Self {
        Self {
            guard: leases.guard().clone(),
            owned: Some(Owned {
                leases: Arc::new(leases),
                renewal: RenewalTask::Idle,
            }),
        }
    }

    /// Starts renewing the lease in a task of its own, from its last renewal, unless that runs
    /// already; the task ends when the lease is lost or the handle released or dropped.
    pub(crate) fn renew_in_background(&mut self) {
        let Some(owned) = self.owned.as_mut() else {
            return;
        };
        if !matches!(owned.renewal, RenewalTask::Idle) {
            return;
        }
        owned.renewal = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let leases = Arc::clone(&owned.leases);
                let renewal = runtime.spawn(async move {
                    let (guard, plan) = (leases.guard(), leases.locker().settings.lease_plan());
                    let lost = keep(guard.lease(), plan, guard.name(), || leases.extend()).await;
                    tracing::warn!(lock = guard.name(), because = %lost, "lock lost");
                });
                RenewalTask::Running(renewal.abort_handle())
            }
            Err(_) => RenewalTask::Impossible,
        };
    }

    /// Releases the lock now, logging what went wrong instead of returning it.
    pub(crate) async fn release_quietly(mut self) {
        if let Some(owned) = self.owned.take() {
            owned.renewal.stop();
            owned.leases.release_quietly().await;
        }
    }

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
        owned.renewal.stop();
        owned.leases.release().await
    }
}

impl<B: LockBackend> Drop for HeldLock<B> {
    fn drop(&mut self) {
        if let Some(owned) = &self.owned {
            // The task's copy of the leases goes with it; the last copy releases the lock.
            owned.renewal.stop();
        }
    }
}

impl RenewalTask {
    fn stop(&self) {
        if let RenewalTask::Running(task) = self {
            task.abort();
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
