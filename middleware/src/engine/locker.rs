//! [`Locker`]: take locks in a backend, from any code.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tracing::Instrument;

use super::acquire::{ForLine, NotObtained, Obtained, acquire, deadline_after, look};
use super::error::LockError;
use super::guard::LockGuard;
use super::held::{HeldLock, HoldTimes, LocalLease, ReleaseDuty, give_back_baton, give_back_share};
use super::line::{self, Baton, Entry, Lines, ReadEntry, RunId, Told};
use super::names::LockNames;
use super::policy::{BusyPolicy, OnLost, WaitMode};
use super::reentry::{self, Reentry};
use super::settings::{LockerBuilder, Settings};
use super::telemetry::{Instruments, Meters, Outcome, Shape, Tally};
use crate::backend::Ask;
use crate::backend::waiting::Wakes;
use crate::backend::{FencingToken, Hold, LockBackend, Semaphores, SharedLocks, lease_deadline};
use crate::token::OwnerToken;
use tokio::time::Instant;

/// Takes locks in a backend, under one set of settings: the lock engine, usable from any code —
/// background jobs, queue consumers, the HTTP layer (which is an adapter over it).
///
/// Each lock is a key (`coupon:42`, stored as the prefix and the key) taken as a mutex
/// ([`lock`](Self::lock), [`with_lock`](Self::with_lock)), a read or write lock
/// ([`read`](Self::read), [`write`](Self::write)), a semaphore permit ([`permit`](Self::permit))
/// or several keys at once ([`lock_all`](Self::lock_all)). A busy lock is waited for or
/// refused as the locker's settings say ([`LockerBuilder`]); a held lock renews its lease
/// every TTL/3, reports its loss, carries its fencing token, and is released when its work
/// ends or its handle is dropped.
///
/// Code running under a lock that asks for it again — inside [`with_lock`](Self::with_lock), or
/// a handler behind the layer — passes through, and the outermost holder releases it; asking
/// to write what it holds for reading is an error ([`LockError::Upgrade`]), not a wait for
/// itself. Clones are cheap and share everything.
///
/// # Example
///
/// ```
/// use tower_lock::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_lock::LockError> {
/// let locker = Locker::new(MemoryBackend::new());
///
/// // Run work under a lock; it is released when the work ends.
/// let fence = locker
///     .with_lock("invoice:42", |lock| async move {
///         // ... read, compute, write with `lock.fence()` ...
///         lock.fence()
///     })
///     .await?;
/// assert!(fence.is_some());
///
/// // Or hold it as a handle, released on drop or explicitly.
/// let held = locker.lock("invoice:42").await?;
/// held.release().await?;
/// # Ok(()) }
/// ```
pub struct Locker<B: LockBackend> {
    inner: Arc<LockerInner<B>>,
}

/// What every clone of a locker, and every lock it holds, shares.
pub(crate) struct LockerInner<B: LockBackend> {
    pub(crate) backend: Arc<B>,
    pub(crate) settings: Settings,
    /// Locks held right now (leases not yet given back).
    pub(crate) held: Arc<AtomicUsize>,
    /// How long locks are typically held, for busy answers' retry hints.
    pub(crate) hold_times: Arc<HoldTimes>,
    /// The handles of its metrics.
    pub(crate) instruments: Instruments,
    /// Its lines: per lock, its tasks waiting for it, one asking the store, holds handed on.
    pub(crate) lines: Lines<B::Lease>,
}

/// How a lock of one name lines up in its locker.
enum Lineup<'n> {
    /// Mutex or write lock: one task asks the store at a time; holds are handed on.
    Exclusive(&'n str),
    /// Read lock: readers that wait for one store answer share its hold.
    Readers(&'n str),
}

/// A lock taken: its leases, one per name (shared by the holds of a run), fences, how
/// its lease began, and the run it is held in.
struct Taken<L> {
    leases: Arc<Vec<L>>,
    fences: Vec<Option<FencingToken>>,
    lease: LeaseStart,
    run: Option<RunId>,
}

/// How a lease began.
enum LeaseStart {
    /// With a store command sent then.
    Sent(Instant),
    /// Handed on by another holder, whose lease it continues.
    Continued {
        renewed_at: Instant,
        deadline: Instant,
    },
}

impl<L> Taken<L> {
    /// Taken from the store by one task, outside any run.
    fn alone(obtained: Obtained<L>) -> Self {
        let (leases, fences): (Vec<_>, Vec<_>) = obtained
            .grants
            .into_iter()
            .map(|grant| (grant.lease, line::compose(grant.fence, 0)))
            .unzip();
        Self {
            leases: Arc::new(leases),
            fences,
            lease: LeaseStart::Sent(obtained.sent),
            run: None,
        }
    }

    /// Handed on by the previous holder of a run.
    fn handed(baton: Baton<L>) -> Self {
        Self {
            run: Some(baton.run),
            leases: baton.leases,
            fences: vec![baton.fence],
            lease: LeaseStart::Continued {
                renewed_at: baton.renewed_at,
                deadline: baton.deadline,
            },
        }
    }
}

impl<B: LockBackend> Locker<B> {
    /// A locker with the default settings (see [`LockerBuilder`]).
    pub fn new(backend: B) -> Self {
        LockerBuilder::defaults(backend)
    }

    /// A builder, to change the settings.
    pub fn builder(backend: B) -> LockerBuilder<B> {
        LockerBuilder::new(Arc::new(backend))
    }

    pub(crate) fn from_inner(inner: LockerInner<B>) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// How many locks this locker holds right now (each with its renewal). For metrics, and for
    /// tests that show nothing is left behind.
    pub fn held_locks(&self) -> usize {
        self.inner.held.load(Ordering::Relaxed)
    }

    /// The lease TTL of its locks: the one set, or the default (10 s, or the longest the
    /// backend vouches for when that is shorter).
    pub fn ttl(&self) -> Duration {
        self.inner.settings.ttl
    }

    /// What a lock's work does when its lease is lost: stop (the default) or go on.
    pub fn on_lost(&self) -> OnLost {
        self.inner.settings.on_lost
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// How many of this locker's tasks wait in its line for the lock `name`, behind the one
    /// asking the store or holding it.
    pub(crate) fn waiting_in_line(&self, name: &str) -> usize {
        self.inner.lines.waiting(name)
    }

    /// Takes the mutex on `key`, waiting while it is busy as the settings say.
    pub async fn lock(&self, key: &str) -> Result<HeldLock<B>, LockError> {
        self.hold([key], Ask::mutex()).await
    }

    /// Takes every one of `keys` exclusively, all or none (never holding some while waiting
    /// for others, so overlapping sets cannot deadlock). Each key gets its own fencing token
    /// ([`LockGuard::fence_of`]).
    pub async fn lock_all<S: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = S>,
    ) -> Result<HeldLock<B>, LockError> {
        self.hold(keys, Ask::mutex()).await
    }

    /// Runs `work` under the mutex on `key` and releases it when the work ends, also when this
    /// future is dropped. `work` gets the lock's [`LockGuard`]. The lease is renewed while the
    /// work runs; if it is lost, the work is stopped at its next await point and this answers
    /// [`LockError::LeaseLost`] (with [`OnLost::Continue`](crate::OnLost::Continue) it runs on
    /// and can see the loss on the guard).
    pub async fn with_lock<T, F, Fut>(&self, key: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let held = self.acquire([key], Ask::mutex(), None).await?;
        let work = work(held.guard().clone());
        let (output, held) = held.run(work).await?;
        held.release_quietly().await;
        Ok(output)
    }

    async fn hold<S: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = S>,
        ask: Ask<B>,
    ) -> Result<HeldLock<B>, LockError> {
        let mut held = self.acquire(keys, ask, None).await?;
        held.renew_in_background();
        Ok(held)
    }

    /// Takes `keys` as `ask` says (several keys: always exclusively, all or none), waiting
    /// while busy as the settings say: the door for adapters that choose the lock per message,
    /// as the HTTP layer does. The lock's metrics are grouped by the locker's
    /// [group](LockerBuilder::metrics_group), else by `group` (the layer's: the route).
    ///
    /// The handle has no renewal task yet: [`HeldLock::run`] keeps the lease while it runs work
    /// under the lock, [`HeldLock::renew_in_background`] starts the task. Code that holds these
    /// keys already (running under this lock) gets them at once, as a handle that leaves
    /// keeping and releasing to the outer holder.
    ///
    /// # Example
    ///
    /// ```
    /// use tower_lock::{Ask, Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_lock::LockError> {
    /// let locker = Locker::new(MemoryBackend::new());
    /// let mut lock = locker.acquire(["order:9"], Ask::mutex(), None).await?;
    /// lock.renew_in_background();
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire<S: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = S>,
        ask: Ask<B>,
        group: Option<&str>,
    ) -> Result<HeldLock<B>, LockError> {
        let settings = self.settings();
        let names = LockNames::new(&settings.prefix, keys, settings.max_key_len);
        let many = names.as_ref().is_ok_and(|names| names.single().is_none());
        let ask = if many { Ask::mutex() } else { ask };
        let meters = self.meters(ask, many, group);
        let names = match names {
            Ok(names) => names,
            Err(error) => {
                meters.count(Outcome::InvalidKey);
                return Err(error.into());
            }
        };
        match reentry::check(&names, ask.hold()) {
            Reentry::No => {}
            Reentry::Pass(guard) => return Ok(HeldLock::reentered(guard)),
            Reentry::Refused(error) => {
                meters.count(Outcome::NotReentrant);
                return Err(error);
            }
        }
        let tally = Tally::new(meters, &names, settings.policy);
        let span = tally.span().clone();
        self.acquire_new(names, ask, tally).instrument(span).await
    }

    /// The meters of a lock asked `ask` (of several keys when `many`), in the locker's group,
    /// else in `group`.
    fn meters(&self, ask: Ask<B>, many: bool, group: Option<&str>) -> Meters {
        let shape = Shape::of(ask.hold(), if many { 2 } else { 1 });
        self.inner.instruments.meters(shape, group)
    }

    /// Counts, in the lock's metrics (outcome `invalid_key`), a message an adapter refused
    /// before it could ask for its lock because it could not read the key from it — the HTTP
    /// layer's request without a valid key. `ask` and `group` as for
    /// [`acquire`](Self::acquire).
    pub fn count_invalid_key(&self, ask: Ask<B>, group: Option<&str>) {
        self.meters(ask, false, group).count(Outcome::InvalidKey);
    }

    async fn acquire_new(
        &self,
        names: LockNames,
        ask: Ask<B>,
        tally: Tally,
    ) -> Result<HeldLock<B>, LockError> {
        let settings = self.settings();
        let deadline = deadline_after(settings.policy.timeout());
        let taken = match self.lineup(&names, &ask) {
            Some(Lineup::Exclusive(name)) => {
                self.take_in_line(name, (&names, ask), deadline, &tally)
                    .await
            }
            Some(Lineup::Readers(name)) => {
                self.take_reading(name, (&names, ask), deadline, &tally)
                    .await
            }
            None => {
                // A reader that will wait keeps its locker's writers from handing the lock on.
                let waits = !settings.policy.timeout().is_zero();
                let _reader = match (ask.hold(), names.single()) {
                    (Hold::Read, Some(name)) if waits => Some(self.inner.lines.reader_waits(name)),
                    _ => None,
                };
                self.take_from_store((&names, ask), deadline, (&tally, None))
                    .await
                    .map(Taken::alone)
            }
        };
        let taken = match taken {
            Ok(taken) => taken,
            Err(NotObtained::Busy { holder_ttl }) => {
                let refused_at_once = settings.policy.timeout().is_zero();
                let outcome = match refused_at_once {
                    true => Outcome::Busy,
                    false => Outcome::WaitTimedOut,
                };
                tally.answer(outcome, None);
                let key = names.joined_keys();
                tracing::debug!(locks = key, ?holder_ttl, "busy");
                return Err(LockError::Busy {
                    key,
                    holder_ttl,
                    typical_hold: self.inner.hold_times.typical(),
                });
            }
            Err(NotObtained::Store(error)) => {
                tally.answer(Outcome::StoreUnavailable, None);
                return Err(LockError::StoreUnavailable(error));
            }
        };
        stall_point!("granted");
        let meters = tally.meters().clone();
        let taken_at = tally.answer(Outcome::Acquired, taken.fences.first().copied().flatten());
        let lease = match taken.lease {
            LeaseStart::Sent(_) if mutant!("lease-from-answer") => {
                LocalLease::new(tokio::time::Instant::now(), settings.ttl, meters)
            }
            LeaseStart::Sent(sent) => LocalLease::new(sent, settings.ttl, meters),
            LeaseStart::Continued { .. } if mutant!("handed-lease-restarts") => {
                LocalLease::new(tokio::time::Instant::now(), settings.ttl, meters)
            }
            LeaseStart::Continued {
                renewed_at,
                deadline,
            } => LocalLease::continued(renewed_at, deadline, meters),
        };
        let guard = LockGuard::new(names, (ask.hold(), taken.fences), lease);
        tracing::trace!(lock = guard.name(), fence = ?guard.fence(), "acquired");
        let inner = Arc::clone(&self.inner);
        Ok(HeldLock::taken(ReleaseDuty::new(
            inner,
            (guard, taken.leases, taken.run),
            taken_at,
        )))
    }

    /// How a lock of one name lines up in this locker, if it does. Held exclusively by a
    /// locker that waits, one task asks the store at a time, and holds are handed on while a
    /// run may go on — a write lock always; a mutex when notified, or polling with holds handed
    /// on (fair mutexes each keep a place in the store's queue, in strict order; polling ones
    /// without handing on each poll, as the baseline does). Readers share a store read hold
    /// wherever holds are handed on (not in fair mode, nor with `max_local_run(1)`).
    fn lineup<'n>(&self, names: &'n LockNames, ask: &Ask<B>) -> Option<Lineup<'n>> {
        let name = names.single()?;
        if ask.hold() == Hold::Read {
            return self.inner.lines.hands_on().then_some(Lineup::Readers(name));
        }
        let BusyPolicy::Wait { timeout, mode } = self.settings().policy else {
            return None;
        };
        let lines_up = match ask.hold() {
            Hold::Write => true,
            Hold::Mutex => match mode {
                WaitMode::Notified => true,
                WaitMode::Polling => self.settings().max_local_run > 1,
                WaitMode::Fair { .. } => false,
            },
            Hold::Read | Hold::Permit { .. } => false,
        };
        (!timeout.is_zero() && lines_up).then_some(Lineup::Exclusive(name))
    }

    /// Takes lock `name` in this locker's line for it: handed on by a task of the locker that
    /// holds it, or asked of the store when it is this task's turn.
    async fn take_in_line(
        &self,
        name: &str,
        (names, ask): (&LockNames, Ask<B>),
        deadline: Instant,
        tally: &Tally,
    ) -> Result<Taken<B::Lease>, NotObtained> {
        let inner = Arc::clone(&self.inner);
        let owned_name = name.to_owned();
        let give_back = Box::new(move |baton| give_back_baton(&inner, &owned_name, baton));
        let (contender, called) = match self.inner.lines.enter(name, give_back) {
            Entry::Contend {
                contender,
                behind_a_holder,
            } => (contender, behind_a_holder),
            Entry::Wait(waiting) => {
                tally.waiting();
                // Seen by the backend as a waiter of this process, so that a release goes
                // through the store's queue at once, without asking whether anybody waits.
                let _present = (self.inner.backend.wait_queue()).map(|queue| {
                    queue
                        .room()
                        .take_ticket(name, OwnerToken::new(), Wakes::Named)
                });
                let told = waiting.turn(deadline, self.settings().store_timeout).await;
                match self.wait_ended(told, (names, name, ask), tally).await? {
                    Ok(taken) => return Ok(taken),
                    Err(contender) => (contender, true),
                }
            }
        };
        let asked = self.contend(contender, (names, ask), deadline, (tally, called));
        let (obtained, contender) = asked.await?;
        let store_fence = obtained.grants.first().and_then(|grant| grant.fence);
        let lease_ends = lease_deadline(obtained.sent, self.settings().ttl);
        let run = contender.won(store_fence, lease_ends);
        Ok(Taken {
            run: Some(run),
            ..Taken::alone(obtained)
        })
    }

    /// Asks the store for `names` as `contender`, the task of this locker's line that asks for
    /// it (`called` from the line, or not): a store failure is the answer of every task waiting
    /// behind it too.
    async fn contend<'a>(
        &self,
        contender: line::Contender<'a, B::Lease>,
        (names, ask): (&LockNames, Ask<B>),
        deadline: Instant,
        (tally, called): (&Tally, bool),
    ) -> Result<(Obtained<B::Lease>, line::Contender<'a, B::Lease>), NotObtained> {
        let line = ForLine {
            called,
            hears: &contender,
        };
        match (self.take_from_store((names, ask), deadline, (tally, Some(line)))).await {
            Ok(obtained) => Ok((obtained, contender)),
            Err(NotObtained::Store(error)) => {
                contender.failed(&error);
                Err(NotObtained::Store(error))
            }
            Err(busy) => Err(busy),
        }
    }

    /// A wait in this locker's line for lock `name` (of `names`, asked `ask`) ended as `told`:
    /// the lock taken (handed on, or by a last look of the task's own), the contender it is now,
    /// or why it is not taken. A wait that ran out calls the lock busy only when the store said
    /// so lately (or a run of this locker holds it); otherwise the task asks the store once
    /// itself, so that a store that stopped answering is answered as a failure, not as a busy
    /// lock.
    async fn wait_ended<'a>(
        &self,
        told: Told<'a, B::Lease>,
        (names, name, ask): (&LockNames, &str, Ask<B>),
        tally: &Tally,
    ) -> Result<Result<Taken<B::Lease>, line::Contender<'a, B::Lease>>, NotObtained> {
        match told {
            Told::Handed(baton) => Ok(Ok(Taken::handed(baton))),
            Told::Ask(contender) => Ok(Err(contender)),
            Told::Failed(error) => Err(NotObtained::Store(error)),
            Told::Busy { holder_ttl } => Err(NotObtained::Busy { holder_ttl }),
            Told::Unheard => {
                let (backend, settings) = (&self.inner.backend, self.settings());
                let token = OwnerToken::new();
                // Boxed: a rare path, which would otherwise deepen every acquire's future.
                let looked = Box::pin(look(backend, (names, name, token), ask, settings, tally));
                looked.await.map(|obtained| Ok(Taken::alone(obtained)))
            }
        }
    }

    /// Takes a read lock on `name` in this locker's line for it: asked of the store, or shared
    /// with the reader of the locker asking it.
    async fn take_reading(
        &self,
        name: &str,
        (names, ask): (&LockNames, Ask<B>),
        deadline: Instant,
        tally: &Tally,
    ) -> Result<Taken<B::Lease>, NotObtained> {
        let waits = !self.settings().policy.timeout().is_zero();
        // A reader that will wait keeps its locker's writers from handing the lock on.
        let _reader = waits.then(|| self.inner.lines.reader_waits(name));
        let inner = Arc::clone(&self.inner);
        let owned_name = name.to_owned();
        let give_back = Box::new(move |baton| give_back_share(&inner, &owned_name, baton));
        let contender = match self.inner.lines.enter_read(name, waits, give_back) {
            ReadEntry::Contend(contender) => contender,
            ReadEntry::Alone => {
                let obtained = self.take_from_store((names, ask), deadline, (tally, None));
                return obtained.await.map(Taken::alone);
            }
            ReadEntry::Wait(waiting) => {
                tally.waiting();
                let told = waiting.turn(deadline, self.settings().store_timeout).await;
                match self.wait_ended(told, (names, name, ask), tally).await? {
                    Ok(taken) => return Ok(taken),
                    Err(contender) => contender,
                }
            }
        };
        let asked = self.contend(contender, (names, ask), deadline, (tally, false));
        let (obtained, contender) = asked.await?;
        let sent = obtained.sent;
        let taken = Taken::alone(obtained);
        let lease = (sent, lease_deadline(sent, self.settings().ttl));
        let run = contender.won_read(&taken.leases, lease);
        Ok(Taken { run, ..taken })
    }

    /// Takes `names` as `ask` says from the store, waiting until `deadline` as the settings
    /// say, for this locker's line if any (see [`acquire`]).
    async fn take_from_store(
        &self,
        (names, ask): (&LockNames, Ask<B>),
        deadline: Instant,
        (tally, line): (&Tally, Option<ForLine<'_>>),
    ) -> Result<Obtained<B::Lease>, NotObtained> {
        let (backend, settings) = (&self.inner.backend, self.settings());
        let token = OwnerToken::new();
        acquire(
            backend,
            (names, token),
            ask,
            (settings, deadline),
            (tally, line),
        )
        .await
    }
}

impl<B: SharedLocks> Locker<B> {
    /// Takes a read lock on `key`: shared with other readers, excluded by a writer, and barred
    /// while a writer waits (so writers are not starved).
    pub async fn read(&self, key: &str) -> Result<HeldLock<B>, LockError> {
        self.hold([key], Ask::read()).await
    }

    /// Takes the write lock on `key`: alone, readers included, fenced like a mutex.
    pub async fn write(&self, key: &str) -> Result<HeldLock<B>, LockError> {
        self.hold([key], Ask::write()).await
    }
}

impl<B: Semaphores> Locker<B> {
    /// Takes one of the `permits` permits of `key`: at most `permits` holders at once across
    /// every process sharing the store, each with its own lease.
    pub async fn permit(&self, key: &str, permits: NonZeroU32) -> Result<HeldLock<B>, LockError> {
        self.hold([key], Ask::permit(permits)).await
    }
}

impl<B: LockBackend> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<B: LockBackend + fmt::Debug> fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.inner.backend)
            .field("settings", &self.inner.settings)
            .field("held_locks", &self.held_locks())
            .finish()
    }
}
