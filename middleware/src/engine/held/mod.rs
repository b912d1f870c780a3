//! A taken lock, [`HeldLock`]: work runs under it inline (the layer, `with_lock`), or it is
//! handed out renewing itself.

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

/// Runs `work` while keeping its lease; when the lease is lost, stops the work (its future is
/// dropped on return: `None`) or lets it finish, as `on_lost` says.
async fn run_while_kept<F: Future, B: LockBackend>(
    work: F,
    leases: &ReleaseDuty<B>,
    on_lost: OnLost,
) -> Option<F::Output> {
    run_until_lost(work, leases.guard(), keep(leases), on_lost).await
}

/// Runs `work` until `lost` resolves, then stops it (`None`) or lets it finish, as `on_lost`
/// says.
async fn run_until_lost<F: Future>(
    work: F,
    guard: &LockGuard,
    lost: impl Future<Output = LeaseLost>,
    on_lost: OnLost,
) -> Option<F::Output> {
    let mut work = pin!(work);
    let lost = tokio::select! {
        biased;
        output = &mut work => return Some(output),
        lost = lost => lost,
    };
    match on_lost {
        OnLost::Abort => {
            tracing::warn!(lock = guard.name(), because = %lost, "lock lost; stopping the work");
            None
        }
        OnLost::Continue => {
            tracing::warn!(lock = guard.name(), because = %lost, "lock lost; the work goes on");
            Some(work.await)
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
/// One from [`Locker::acquire`](crate::Locker::acquire) has no renewal task yet: its lease is
/// kept while [`run`](Self::run) runs work under it, and by a task from
/// [`renew_in_background`](Self::renew_in_background) on.
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
    /// The handle of a lock taken now, not renewing its lease yet.
    pub(crate) fn taken(leases: ReleaseDuty<B>) -> Self {
        Self {
            guard: leases.guard().clone(),
            owned: Some(Owned {
                leases: Arc::new(leases),
                renewal: RenewalTask::Idle,
            }),
        }
    }

    /// The handle of a lock the running future held already: the outer holder keeps and
    /// releases it.
    pub(crate) fn reentered(guard: LockGuard) -> Self {
        Self { guard, owned: None }
    }

    /// Starts renewing the lease in a task of its own, from its last renewal, unless that runs
    /// already; the task ends when the lease is lost or the handle released or dropped.
    pub fn renew_in_background(&mut self) {
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
                    let lost = keep(&leases).await;
                    tracing::warn!(lock = leases.guard().name(), because = %lost, "lock lost");
                });
                RenewalTask::Running(renewal.abort_handle())
            }
            Err(_) => RenewalTask::Impossible,
        };
    }

    /// Runs `work` under the lock and hands the lock back with the work's output, still held —
    /// for as long as that output is being delivered (a streamed response body); release or
    /// drop it then. Meanwhile the lease is kept: by this future itself when no task renews it
    /// (no task is spawned), else by that task. Code in `work` that asks for this lock again
    /// passes through.
    ///
    /// When the lease is lost, the locker's [`OnLost`] decides: `Abort` (the default) drops
    /// `work` at its next await point, gives the lock back and answers
    /// [`LockError::LeaseLost`]; `Continue` lets the work finish.
    ///
    /// # Example
    ///
    /// A consumer of a queue that chooses each message's lock itself:
    ///
    /// ```
    /// use tower_lock::{Ask, Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_lock::LockError> {
    /// let locker = Locker::new(MemoryBackend::new());
    /// let (read, write) = (Ask::read(), Ask::write());
    /// for (account, only_reads) in [("account:7", true), ("account:7", false)] {
    ///     let ask = if only_reads { read } else { write };
    ///     let lock = locker.acquire([account], ask, Some("consumer")).await?;
    ///     let (handled, lock) = lock.run(async { "handled" }).await?;
    ///     assert_eq!(handled, "handled");
    ///     lock.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(self, work: F) -> Result<(F::Output, Self), LockError> {
        let Some(owned) = &self.owned else {
            return Ok((work.await, self));
        };
        let leases = &owned.leases;
        let on_lost = leases.locker().settings.on_lost;
        let work = reentry::scope(self.guard.clone(), work);
        let output = match owned.renewal {
            RenewalTask::Running(_) => {
                run_until_lost(work, &self.guard, self.guard.lost(), on_lost).await
            }
            RenewalTask::Idle | RenewalTask::Impossible => {
                run_while_kept(work, leases, on_lost).await
            }
        };
        match output {
            Some(output) => Ok((output, self)),
            None => {
                let key = self.guard.lock_names().joined_keys();
                self.release_quietly().await;
                Err(LockError::LeaseLost { key })
            }
        }
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
