//! The in-process backend: the embedded default, with the same semantics as Redis.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::waiting::{Announcement, WaitingRoom};
use super::{
    Attempt, BackendError, Granted, Hold, Holding, Inspect, Listing, LockBackend, LockRequest,
    LockState, QueuedAttempt, Semaphores, SharedLocks, TokenLease, WaitQueue,
};
use crate::token::OwnerToken;
use key_state::{FenceCounter, KeyState, Taken};

#[cfg(feature = "test-util")]
mod failover;
mod key_state;
#[cfg(test)]
mod tests;
#[cfg(feature = "test-util")]
pub use failover::Replica;

/// Locks held in this process's memory: expiring leases, owner-checked release, fencing
/// tokens, read-write locks, semaphores, a fair queue and wake-on-release, with the Redis
/// backend's rules, but visible to one process only.
///
/// Use it for a single instance, for tests and for examples; use a shared store as soon as more
/// than one process serves the same resources. Clones share the same locks.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_lock::LockError> {
/// let store = MemoryBackend::new();
/// let (mine, yours) = (Locker::new(store.clone()), Locker::builder(store).reject().build().unwrap());
///
/// let held = mine.lock("a").await?;
/// assert!(yours.lock("a").await.is_err(), "busy: the clones share their locks");
/// held.release().await?;
/// assert!(yours.lock("a").await?.fence() > Some(tower_lock::FencingToken::new(1)));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    room: Arc<WaitingRoom>,
    /// Who is told of every announcement and every change of the holders (`on_announce`,
    /// `on_change`).
    #[cfg(feature = "test-util")]
    watchers: Arc<Watchers>,
}

/// A live lease as `on_change` tells it: its holder's label, owner token, fence (an exclusive
/// hold's), and expiry.
#[cfg(feature = "test-util")]
type LiveLease = (
    &'static str,
    OwnerToken,
    Option<super::FencingToken>,
    Instant,
);

#[cfg(feature = "test-util")]
#[derive(Default)]
struct Watchers {
    announced: std::sync::OnceLock<AnnouncementWatcher>,
    changed: std::sync::OnceLock<ChangeWatcher>,
}

/// Told of every announcement of a lock name.
#[cfg(feature = "test-util")]
type AnnouncementWatcher = Box<dyn Fn(&str, Announcement) + Send + Sync>;

/// Told of a lock name's live leases after every change of it.
#[cfg(feature = "test-util")]
type ChangeWatcher = Box<dyn Fn(&str, &[LiveLease]) + Send + Sync>;

impl Default for MemoryBackend {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            room: WaitingRoom::in_process(),
            #[cfg(feature = "test-util")]
            watchers: Arc::default(),
        }
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Default)]
struct State {
    keys: HashMap<String, KeyState>,
    sweep_at_len: usize,
    fences: FenceCounter,
    /// Leases an operator freed: by whom, until they would have expired.
    released: HashMap<OwnerToken, (String, Instant)>,
}

/// Below this many keys the map is not swept.
const MIN_SWEEP_LEN: usize = 1024;

impl State {
    /// Drops keys with nothing live left (holder, shared holds, tickets). Amortised: runs when
    /// the map has doubled since the last sweep, so each call costs O(1) on average.
    fn sweep_if_grown(&mut self, now: Instant) {
        if self.keys.len() < self.sweep_at_len.max(MIN_SWEEP_LEN) {
            return;
        }
        self.keys.retain(|_, state| !state.is_dead(now));
        self.sweep_at_len = self.keys.len() * 2;
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many lock names the store tracks (held locks, shared holds, waiting tickets). For
    /// tests and metrics: it shows that released and expired state is dropped.
    pub fn tracked_keys(&self) -> usize {
        self.lock_state().keys.len()
    }

    /// How many lock names are held right now (leases not yet released or expired).
    pub fn held_locks(&self) -> usize {
        let now = Instant::now();
        let state = self.lock_state();
        state.keys.values().filter(|key| key.is_held(now)).count()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave a half-written entry (every update is a
        // single assignment), so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `change` on `name`'s state (created if missing), with the map swept as needed.
    fn with_key<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut KeyState, &mut FenceCounter, Instant) -> T,
    ) -> T {
        let now = Instant::now();
        let mut state = self.lock_state();
        state.sweep_if_grown(now);
        let State { keys, fences, .. } = &mut *state;
        let entry = keys.entry(name.to_owned()).or_default();
        let changed = change(entry, fences, now);
        self.changed(name, entry, now);
        changed
    }

    /// Runs `change` on `name`'s state, if the store has any.
    fn with_existing_key<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut KeyState, &mut FenceCounter, Instant) -> T,
    ) -> Option<T> {
        let now = Instant::now();
        let mut state = self.lock_state();
        let State { keys, fences, .. } = &mut *state;
        let entry = keys.get_mut(name)?;
        let changed = change(entry, fences, now);
        self.changed(name, entry, now);
        Some(changed)
    }

    /// Tells `listener` of every release this store announces, as well as its own room's
    /// waiters (once per store: a second listener is refused, `false`). For a simulation whose
    /// processes each have a room of their own, reached after a delay or not at all.
    #[cfg(feature = "test-util")]
    pub fn on_announce(
        &self,
        listener: impl Fn(&str, Announcement) + Send + Sync + 'static,
    ) -> bool {
        self.watchers.announced.set(Box::new(listener)).is_ok()
    }

    /// Tells `listener`, after every change of a lock name (once per store: a second listener
    /// is refused, `false`), who holds it now: each live lease's holder label, owner token,
    /// fence (an exclusive hold's) and expiry. The store's own record of who held what, and
    /// when: a simulation checks what its processes believed against it.
    #[cfg(feature = "test-util")]
    pub fn on_change(&self, listener: impl Fn(&str, &[LiveLease]) + Send + Sync + 'static) -> bool {
        self.watchers.changed.set(Box::new(listener)).is_ok()
    }

    fn announce(&self, name: &str, announcement: Announcement) {
        self.room.announce(name, announcement);
        #[cfg(feature = "test-util")]
        if let Some(listener) = self.watchers.announced.get() {
            listener(name, announcement);
        }
    }

    /// Tells the `on_change` listener, if any, who holds `name` (in `entry`) now.
    #[cfg_attr(not(feature = "test-util"), allow(clippy::unused_self))]
    fn changed(&self, name: &str, entry: &KeyState, now: Instant) {
        #[cfg(feature = "test-util")]
        if let Some(listener) = self.watchers.changed.get() {
            listener(name, &entry.live_leases(now));
        }
        #[cfg(not(feature = "test-util"))]
        let _ = (name, entry, now);
    }

    /// Runs a change on `name` that may free it, and announces what it says.
    fn freeing(
        &self,
        name: &str,
        change: impl FnOnce(&mut KeyState, &mut FenceCounter, Instant) -> Option<Announcement>,
    ) -> bool {
        let announcement = self.with_existing_key(name, change).flatten();
        if let Some(announcement) = announcement {
            self.announce(name, announcement);
        }
        announcement.is_some()
    }
}

/// A grant (or busy answer) for `token`, holding as `hold`.
fn granted(taken: Taken, token: OwnerToken, hold: Hold) -> Attempt<Granted<TokenLease>> {
    match taken {
        Attempt::Acquired(fence) => Attempt::Acquired(Granted {
            lease: TokenLease::new(token, hold),
            fence,
        }),
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    }
}

impl LockBackend for MemoryBackend {
    type Lease = TokenLease;

    fn store_kind(&self) -> &'static str {
        "memory"
    }

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let taken = self.with_key(name, |entry, fences, now| {
            entry.take_exclusive(&request, fences, now)
        });
        Ok(granted(taken, request.token, Hold::Mutex))
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let exclusive = lease.hold().is_exclusive();
        let extended = self.with_existing_key(name, |entry, _, now| {
            entry.extend(lease.token(), exclusive, ttl, now)
        });
        Ok(extended.unwrap_or(false))
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        let token = lease.token();
        if lease.hold().is_exclusive() {
            return Ok(self.freeing(name, |entry, fences, now| {
                entry.release_exclusive(token, fences, now)
            }));
        }
        Ok(self.freeing(name, |entry, _, now| {
            entry
                .release_shared(token, now)
                .then_some(Announcement::Free)
        }))
    }

    async fn released_by(
        &self,
        _name: &str,
        lease: &TokenLease,
    ) -> Result<Option<String>, BackendError> {
        let now = Instant::now();
        let state = self.lock_state();
        let released = state.released.get(&lease.token());
        Ok(released
            .filter(|(_, until)| *until > now)
            .map(|(by, _)| by.clone()))
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.freeing(name, |entry, fences, now| {
            entry.abandon(request.token, fences, now)
        });
        Ok(())
    }

    /// All or none at once: the store is locked while it looks at every name.
    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<TokenLease>>>, BackendError> {
        let now = Instant::now();
        let mut state = self.lock_state();
        state.sweep_if_grown(now);
        let State { keys, fences, .. } = &mut *state;
        let busy = names.iter().find_map(|name| {
            keys.get_mut(*name)
                .and_then(|entry| entry.wait_for_exclusive(now))
        });
        if let Some(wait) = busy {
            return Ok(Attempt::Busy {
                holder_ttl: Some(wait),
            });
        }
        let grants = names
            .iter()
            .map(|name| {
                let entry = keys.entry((*name).to_owned()).or_default();
                let fence = Some(entry.take(&request, Hold::Mutex, fences, now));
                self.changed(name, entry, now);
                Granted {
                    lease: TokenLease::new(request.token, Hold::Mutex),
                    fence,
                }
            })
            .collect();
        Ok(Attempt::Acquired(grants))
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<TokenLease>> {
        Some(self)
    }
}

impl SharedLocks for MemoryBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let taken = self.with_key(name, |entry, _, now| entry.take_read(&request, now));
        Ok(granted(taken, request.token, Hold::Read))
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let taken = self.with_key(name, |entry, fences, now| {
            entry.take_write(&request, fences, now)
        });
        Ok(granted(taken, request.token, Hold::Write))
    }
}

impl Semaphores for MemoryBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let taken = self.with_key(name, |entry, _, now| {
            entry.take_permit(&request, permits.get(), now)
        });
        Ok(granted(taken, request.token, Hold::Permit { permits }))
    }
}

/// Every name in the process's memory is looked at for a listing: there is no store to page
/// through.
impl Inspect for MemoryBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        let state = self.with_existing_key(name, |entry, _, now| entry.state(now));
        Ok(state.unwrap_or_default())
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        let now = Instant::now();
        let state = self.lock_state();
        let mut names: Vec<&String> = (state.keys.iter())
            .filter(|(name, entry)| {
                name.starts_with(prefix)
                    && after.is_none_or(|after| name.as_str() > after)
                    && entry.is_held(now)
            })
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        let limit = limit.max(1);
        let next = (names.len() > limit).then(|| names[limit - 1].clone());
        names.truncate(limit);
        Ok(Listing::new(names.into_iter().cloned().collect(), next))
    }

    async fn force_release(&self, name: &str, by: &str) -> Result<Vec<Holding>, BackendError> {
        let now = Instant::now();
        let mut state = self.lock_state();
        let State {
            keys,
            fences,
            released,
            ..
        } = &mut *state;
        let Some(entry) = keys.get_mut(name) else {
            return Ok(Vec::new());
        };
        let freed = entry.force_free(fences, now);
        self.changed(name, entry, now);
        released.retain(|_, (_, until)| *until > now);
        for (token, until) in freed.leases {
            released.insert(token, (by.to_owned(), until));
        }
        drop(state);
        if let Some(announcement) = freed.announcement {
            self.announce(name, announcement);
        }
        Ok(freed.holders)
    }
}

impl WaitQueue<TokenLease> for MemoryBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<TokenLease>, BackendError>> {
        Box::pin(async move {
            let taken = self.with_key(name, |entry, fences, now| {
                entry.take_queued(&request, ticket_ttl, fences, now)
            });
            let lease = TokenLease::new(request.token, Hold::Mutex);
            Ok(match taken {
                Attempt::Acquired(fence) => QueuedAttempt::Acquired(Granted { lease, fence }),
                Attempt::Busy { holder_ttl } => QueuedAttempt::Queued {
                    holder_ttl,
                    handover: lease,
                },
            })
        })
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            self.freeing(name, |entry, fences, now| {
                entry.leave_queue(token, fences, now)
            });
            Ok(())
        })
    }
}
