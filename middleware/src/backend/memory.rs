//! The in-process backend: the embedded default, with the same semantics as Redis.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, AcquireMany, BackendError, Hold, LockBackend};
use crate::OwnerToken;
use crate::waiting::{Announcement, WaitingRoom};

/// Locks held in this process's memory: expiring leases, owner-checked release and fencing
/// tokens, as the Redis backend keeps them, but visible to one process only.
///
/// Use it for a single instance, for tests and for examples; use Redis as soon as more than
/// one process serves the same resources. Clones share the same locks.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::{Acquire, LockBackend, MemoryBackend, OwnerToken};
///
/// # tokio_test_block_on(async {
/// let store = MemoryBackend::new();
/// let (me, you) = (OwnerToken::new(), OwnerToken::new());
/// let ttl = Duration::from_secs(30);
///
/// assert!(matches!(store.acquire("lock:a", me, ttl).await?, Acquire::Acquired { fence: 1 }));
/// assert!(matches!(store.acquire("lock:a", you, ttl).await?, Acquire::Busy { .. }));
/// assert!(!store.release("lock:a", you).await?, "only the owner releases");
/// assert!(store.release("lock:a", me).await?);
/// assert!(matches!(store.acquire("lock:a", you, ttl).await?, Acquire::Acquired { fence: 2 }));
/// # Ok::<_, tower_lock::BackendError>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    room: Arc<WaitingRoom>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            room: WaitingRoom::local(),
        }
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    keys: HashMap<String, KeyState>,
    sweep_at_len: usize,
    fences: FenceCounter,
}

/// The store's one fencing counter. Every lock's tokens come from it, so each lock's tokens are
/// strictly increasing, and nothing about a lock has to outlive the lock.
#[derive(Debug, Default)]
struct FenceCounter(u64);

impl FenceCounter {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

#[derive(Debug, Default)]
struct KeyState {
    holder: Option<Holder>,
    /// Tickets in arrival order (see `acquire_fair`).
    tickets: VecDeque<Ticket>,
    /// Shared holds (readers, permits) with their lease expiry.
    shared: Vec<(OwnerToken, Instant)>,
    /// A waiting writer's intent, barring new readers until it expires.
    intent: Option<(OwnerToken, Instant)>,
}

/// How long a waiting writer's intent bars new readers unless the writer renews it.
const WRITER_INTENT_TTL: Duration = Duration::from_secs(2);

/// A waiter's place in a lock's queue.
#[derive(Debug)]
struct Ticket {
    token: OwnerToken,
    expires_at: Instant,
    /// The lease it asked for: a release hands the lock over with it.
    lease: Duration,
}

#[derive(Debug)]
struct Holder {
    token: OwnerToken,
    expires_at: Instant,
}

/// Below this many keys the map is not swept.
const MIN_SWEEP_LEN: usize = 1024;

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys the store tracks (held locks, shared holds, waiting tickets). For tests
    /// and metrics: it shows that released and expired state is dropped.
    pub fn tracked_keys(&self) -> usize {
        self.lock_state().keys.len()
    }

    /// How many locks are held right now (leases not yet released or expired).
    pub fn held_locks(&self) -> usize {
        let now = Instant::now();
        let state = self.lock_state();
        state
            .keys
            .values()
            .filter(|key| key.live_holder(now).is_some())
            .count()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave a half-written entry (every update is a
        // single assignment), so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl KeyState {
    fn live_holder(&self, now: Instant) -> Option<&Holder> {
        self.holder
            .as_ref()
            .filter(|holder| holder.expires_at > now)
    }

    fn is_dead(&self, now: Instant) -> bool {
        self.live_holder(now).is_none()
            && self.tickets.is_empty()
            && self.shared.iter().all(|(_, expires_at)| *expires_at <= now)
            && self.intent.is_none_or(|(_, expires_at)| expires_at <= now)
    }

    /// Drops expired shared holds and a lapsed writer intent.
    fn forget_expired_shared(&mut self, now: Instant) {
        self.shared.retain(|(_, expires_at)| *expires_at > now);
        if self.intent.is_some_and(|(_, expires_at)| expires_at <= now) {
            self.intent = None;
        }
    }

    fn hold_shared(&mut self, token: OwnerToken, ttl: Duration, now: Instant) -> Acquire {
        self.shared.push((token, now + ttl));
        Acquire::Acquired { fence: 0 }
    }

    /// How long until the first shared hold expires.
    fn first_shared_expiry(&self, now: Instant) -> Duration {
        self.shared
            .iter()
            .map(|(_, expires_at)| *expires_at - now)
            .min()
            .unwrap_or_default()
    }

    fn take_hold(
        &mut self,
        (token, ttl, hold): (OwnerToken, Duration, Hold),
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Acquire {
        self.forget_expired_shared(now);
        let busy = |wait: Duration| Acquire::Busy {
            holder_ttl: Some(wait),
        };
        let holder_ttl = self.live_holder(now).map(|holder| holder.expires_at - now);
        match hold {
            Hold::Exclusive => match holder_ttl {
                Some(ttl_left) => busy(ttl_left),
                None => Acquire::Acquired {
                    fence: self.take(token, ttl, fences, now),
                },
            },
            Hold::Read => match (holder_ttl, self.intent) {
                (Some(ttl_left), _) => busy(ttl_left),
                (None, Some((_, expires_at))) => busy(expires_at - now),
                (None, None) => self.hold_shared(token, ttl, now),
            },
            Hold::Permit { permits } => {
                if self.shared.len() < usize::try_from(permits).unwrap_or(usize::MAX) {
                    self.hold_shared(token, ttl, now)
                } else {
                    busy(self.first_shared_expiry(now))
                }
            }
            Hold::Write => {
                let others_intent = self.intent.filter(|(owner, _)| *owner != token);
                if holder_ttl.is_some() || !self.shared.is_empty() || others_intent.is_some() {
                    if others_intent.is_none() {
                        self.intent = Some((token, now + WRITER_INTENT_TTL));
                    }
                    let wait = holder_ttl
                        .or_else(|| {
                            (!self.shared.is_empty()).then(|| self.first_shared_expiry(now))
                        })
                        .or_else(|| others_intent.map(|(_, expires_at)| expires_at - now));
                    return busy(wait.unwrap_or_default());
                }
                self.intent = None;
                Acquire::Acquired {
                    fence: self.take(token, ttl, fences, now),
                }
            }
        }
    }

    /// Drops expired tickets from the front of the line and returns the first live one.
    fn next_ticket(&mut self, now: Instant) -> Option<OwnerToken> {
        while self
            .tickets
            .front()
            .is_some_and(|ticket| ticket.expires_at <= now)
        {
            self.tickets.pop_front();
        }
        self.tickets.front().map(|ticket| ticket.token)
    }

    /// After a release: the lock goes to the first live ticket, handed to it when the ticket
    /// outlives the lease it asked for, else announced for it to take.
    fn pass_on(&mut self, fences: &mut FenceCounter, now: Instant) -> Announcement {
        let Some(next) = self.next_ticket(now) else {
            return Announcement::Free;
        };
        let lease = match self.tickets.front() {
            Some(first) if first.expires_at - now >= first.lease => first.lease,
            _ => return Announcement::Next(next),
        };
        self.tickets.pop_front();
        Announcement::Handed {
            to: next,
            fence: self.take(next, lease, fences, now),
        }
    }

    /// Hands the lock to `token`; returns its new fence.
    fn take(
        &mut self,
        token: OwnerToken,
        ttl: Duration,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> u64 {
        self.holder = Some(Holder {
            token,
            expires_at: now + ttl,
        });
        fences.next()
    }

    fn release(&mut self, token: OwnerToken, now: Instant) -> bool {
        let owned = self
            .live_holder(now)
            .is_some_and(|holder| holder.token == token);
        if owned {
            self.holder = None;
        }
        owned
    }
}

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
    /// Runs `change` on `key`'s state, if the store has any.
    fn with_existing_key<T>(
        &self,
        key: &str,
        change: impl FnOnce(&mut KeyState, Instant) -> T,
    ) -> Option<T> {
        self.with_existing_key_and_fences(key, |entry, _, now| change(entry, now))
    }

    /// [`with_existing_key`](Self::with_existing_key), for changes that may issue fences.
    fn with_existing_key_and_fences<T>(
        &self,
        key: &str,
        change: impl FnOnce(&mut KeyState, &mut FenceCounter, Instant) -> T,
    ) -> Option<T> {
        let now = Instant::now();
        let mut state = self.lock_state();
        let State { keys, fences, .. } = &mut *state;
        keys.get_mut(key).map(|entry| change(entry, fences, now))
    }

    /// Runs `change` on `key`'s state (created if missing) with the map swept as needed.
    fn with_key<T>(
        &self,
        key: &str,
        change: impl FnOnce(&mut KeyState, &mut FenceCounter, Instant) -> T,
    ) -> T {
        let now = Instant::now();
        let mut state = self.lock_state();
        state.sweep_if_grown(now);
        let State { keys, fences, .. } = &mut *state;
        let entry = keys.entry(key.to_owned()).or_default();
        change(entry, fences, now)
    }
}

impl LockBackend for MemoryBackend {
    async fn acquire(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        Ok(self.with_key(key, |entry, fences, now| {
            entry.take_hold((token, ttl, Hold::Exclusive), fences, now)
        }))
    }

    async fn extend(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let extended = self.with_existing_key(key, |entry, now| {
            let holder = entry
                .holder
                .as_mut()
                .filter(|holder| holder.expires_at > now && holder.token == token);
            holder.map(|holder| holder.expires_at = now + ttl).is_some()
        });
        Ok(extended.unwrap_or(false))
    }

    async fn release(&self, key: &str, token: OwnerToken) -> Result<bool, BackendError> {
        let announcement = self
            .with_existing_key_and_fences(key, |entry, fences, now| {
                entry
                    .release(token, now)
                    .then(|| entry.pass_on(fences, now))
            })
            .flatten();
        if let Some(announcement) = announcement {
            self.room.announce(key, announcement);
        }
        Ok(announcement.is_some())
    }

    fn waiting_room(&self) -> Option<&Arc<WaitingRoom>> {
        Some(&self.room)
    }

    async fn acquire_many(
        &self,
        keys: &[String],
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<AcquireMany, BackendError> {
        let now = Instant::now();
        let mut state = self.lock_state();
        state.sweep_if_grown(now);
        let busy = keys.iter().find_map(|key| {
            let holder = state.keys.get(key)?.live_holder(now)?;
            Some(holder.expires_at - now)
        });
        if let Some(wait) = busy {
            return Ok(AcquireMany::Busy {
                holder_ttl: Some(wait),
            });
        }
        // All free, and the map stays locked: take them all.
        let State {
            keys: held,
            fences: counter,
            ..
        } = &mut *state;
        let fences = keys
            .iter()
            .map(|key| {
                let entry = held.entry(key.clone()).or_default();
                entry.take(token, ttl, counter, now)
            })
            .collect();
        Ok(AcquireMany::Acquired { fences })
    }

    async fn acquire_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> Result<Acquire, BackendError> {
        Ok(self.with_key(key, |entry, fences, now| {
            entry.take_hold((token, ttl, hold), fences, now)
        }))
    }

    async fn extend_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> Result<bool, BackendError> {
        if hold.is_exclusive() {
            return self.extend(key, token, ttl).await;
        }
        let extended = self.with_existing_key(key, |entry, now| {
            entry.forget_expired_shared(now);
            let held = entry.shared.iter_mut().find(|(owner, _)| *owner == token);
            held.map(|(_, expires_at)| *expires_at = now + ttl)
                .is_some()
        });
        Ok(extended.unwrap_or(false))
    }

    async fn release_hold(
        &self,
        key: &str,
        token: OwnerToken,
        hold: Hold,
    ) -> Result<bool, BackendError> {
        if hold.is_exclusive() {
            return self.release(key, token).await;
        }
        let released = self
            .with_existing_key(key, |entry, now| {
                entry.forget_expired_shared(now);
                let before = entry.shared.len();
                entry.shared.retain(|(owner, _)| *owner != token);
                entry.shared.len() < before
            })
            .unwrap_or(false);
        if released {
            self.room.announce(key, Announcement::Free);
        }
        Ok(released)
    }

    async fn acquire_fair(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        ticket_ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        Ok(self.with_key(key, |entry, fences, now| {
            if entry
                .live_holder(now)
                .is_some_and(|holder| holder.token == token)
            {
                // Handed to this ticket by a release: a fresh lease and fence.
                return Acquire::Acquired {
                    fence: entry.take(token, ttl, fences, now),
                };
            }
            let first = entry.next_ticket(now);
            if entry.live_holder(now).is_none() && first.is_none_or(|first| first == token) {
                if first.is_some() {
                    entry.tickets.pop_front();
                }
                return Acquire::Acquired {
                    fence: entry.take(token, ttl, fences, now),
                };
            }
            let ticket = Ticket {
                token,
                expires_at: now + ticket_ttl,
                lease: ttl,
            };
            match entry
                .tickets
                .iter_mut()
                .find(|queued| queued.token == token)
            {
                Some(queued) => *queued = ticket,
                None => entry.tickets.push_back(ticket),
            }
            let wait = match entry.live_holder(now) {
                Some(holder) => holder.expires_at - now,
                // Free, but promised to the first ticket: at most until that ticket expires.
                None => entry
                    .tickets
                    .front()
                    .map_or(ticket_ttl, |first| first.expires_at - now),
            };
            Acquire::Busy {
                holder_ttl: Some(wait),
            }
        }))
    }

    async fn leave_fair_queue(&self, key: &str, token: OwnerToken) -> Result<(), BackendError> {
        // The lock is free, or was handed to the leaver: it goes to the next ticket.
        let announcement = self
            .with_existing_key_and_fences(key, |entry, fences, now| {
                entry.tickets.retain(|ticket| ticket.token != token);
                let handed_to_leaver = entry.release(token, now);
                (handed_to_leaver || entry.live_holder(now).is_none())
                    .then(|| entry.pass_on(fences, now))
            })
            .flatten();
        if let Some(announcement) = announcement {
            self.room.announce(key, announcement);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn fence_of(answer: Acquire) -> u64 {
        match answer {
            Acquire::Acquired { fence } => fence,
            Acquire::Busy { .. } => panic!("expected the lock to be acquired, it was busy"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_key_is_busy_with_the_holders_remaining_ttl() {
        let store = MemoryBackend::new();
        store.acquire("k", OwnerToken::new(), TTL).await.unwrap();
        tokio::time::advance(Duration::from_secs(4)).await;

        let answer = store.acquire("k", OwnerToken::new(), TTL).await.unwrap();

        assert_eq!(
            answer,
            Acquire::Busy {
                holder_ttl: Some(Duration::from_secs(6))
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn different_keys_do_not_block_each_other() {
        let store = MemoryBackend::new();
        fence_of(store.acquire("a", OwnerToken::new(), TTL).await.unwrap());
        fence_of(store.acquire("b", OwnerToken::new(), TTL).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_expires_after_its_ttl() {
        let store = MemoryBackend::new();
        store.acquire("k", OwnerToken::new(), TTL).await.unwrap();
        tokio::time::advance(TTL - Duration::from_millis(1)).await;
        assert!(matches!(
            store.acquire("k", OwnerToken::new(), TTL).await.unwrap(),
            Acquire::Busy { .. }
        ));

        tokio::time::advance(Duration::from_millis(1)).await;

        fence_of(store.acquire("k", OwnerToken::new(), TTL).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn release_does_not_delete_a_foreign_lock() {
        let store = MemoryBackend::new();
        let (stale, current) = (OwnerToken::new(), OwnerToken::new());
        store.acquire("k", stale, TTL).await.unwrap();
        tokio::time::advance(TTL).await;
        store.acquire("k", current, TTL).await.unwrap();

        assert!(!store.release("k", stale).await.unwrap());

        assert!(matches!(
            store.acquire("k", OwnerToken::new(), TTL).await.unwrap(),
            Acquire::Busy { .. }
        ));
        assert!(store.release("k", current).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn extend_renews_only_the_owners_live_lease() {
        let store = MemoryBackend::new();
        let (owner, other) = (OwnerToken::new(), OwnerToken::new());
        store.acquire("k", owner, TTL).await.unwrap();
        tokio::time::advance(TTL - Duration::from_secs(1)).await;

        assert!(!store.extend("k", other, TTL).await.unwrap());
        assert!(store.extend("k", owner, TTL).await.unwrap());
        tokio::time::advance(TTL - Duration::from_secs(1)).await;
        assert!(matches!(
            store.acquire("k", other, TTL).await.unwrap(),
            Acquire::Busy { .. }
        ));

        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            !store.extend("k", owner, TTL).await.unwrap(),
            "an expired lease stays lost"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fences_increase_strictly_across_releases_and_expiries() {
        let store = MemoryBackend::new();
        let mut last = 0;
        for round in 0..5 {
            let token = OwnerToken::new();
            let fence = fence_of(store.acquire("k", token, TTL).await.unwrap());
            assert!(fence > last, "round {round}: {fence} after {last}");
            last = fence;
            if round % 2 == 0 {
                store.release("k", token).await.unwrap();
            } else {
                tokio::time::advance(TTL).await;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fences_of_different_keys_come_from_one_counter() {
        let store = MemoryBackend::new();
        let a = fence_of(store.acquire("a", OwnerToken::new(), TTL).await.unwrap());
        let b = fence_of(store.acquire("b", OwnerToken::new(), TTL).await.unwrap());
        tokio::time::advance(TTL).await;
        let a_again = fence_of(store.acquire("a", OwnerToken::new(), TTL).await.unwrap());

        assert!(a < b && b < a_again, "{a} {b} {a_again}");
    }

    #[tokio::test(start_paused = true)]
    async fn released_keys_are_swept_and_fences_still_increase() {
        let store = MemoryBackend::new();
        let mut last = 0;
        for i in 0..MIN_SWEEP_LEN {
            let token = OwnerToken::new();
            last = fence_of(store.acquire(&format!("k{i}"), token, TTL).await.unwrap());
            store.release(&format!("k{i}"), token).await.unwrap();
        }
        assert_eq!(store.tracked_keys(), MIN_SWEEP_LEN);

        let again = fence_of(store.acquire("k0", OwnerToken::new(), TTL).await.unwrap());

        assert!(again > last, "a swept key's next fence is still larger");
        assert_eq!(store.tracked_keys(), 1);
    }

    async fn queue(store: &MemoryBackend, token: OwnerToken, ticket_ttl: Duration) {
        let answer = store
            .acquire_fair("k", token, TTL, ticket_ttl)
            .await
            .unwrap();
        assert!(matches!(answer, Acquire::Busy { .. }), "{answer:?}");
    }

    fn holder_of(store: &MemoryBackend) -> Option<OwnerToken> {
        let state = store.lock_state();
        let holder = state.keys.get("k")?.live_holder(Instant::now())?;
        Some(holder.token)
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_hands_the_lock_to_a_ticket_that_outlives_its_lease() {
        let store = MemoryBackend::new();
        let (holder, long, short) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());
        let held = fence_of(store.acquire("k", holder, TTL).await.unwrap());
        queue(&store, long, TTL * 2).await;
        queue(&store, short, TTL / 2).await;

        store.release("k", holder).await.unwrap();
        assert_eq!(holder_of(&store), Some(long), "handed over");
        let again = fence_of(store.acquire_fair("k", long, TTL, TTL * 2).await.unwrap());
        assert!(again > held + 1, "asking again gives a fresh fence");

        store.release("k", long).await.unwrap();
        assert_eq!(holder_of(&store), None, "a short ticket is only announced");
        fence_of(store.acquire_fair("k", short, TTL, TTL / 2).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_ticket_leaving_with_a_handed_lock_passes_it_on() {
        let store = MemoryBackend::new();
        let (holder, first, second) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());
        fence_of(store.acquire("k", holder, TTL).await.unwrap());
        queue(&store, first, TTL * 2).await;
        queue(&store, second, TTL * 2).await;
        store.release("k", holder).await.unwrap();

        store.leave_fair_queue("k", first).await.unwrap();

        assert_eq!(holder_of(&store), Some(second));
    }
}
