//! Taking a lock under the layer's policy: attempts, waiting, and store timeouts.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout, timeout_at};

use crate::waiting::Place;
use crate::{Acquire, AcquireMany, Backoff, BusyPolicy, Hold, LockBackend, OwnerToken, WaitMode};

/// How often a waiter for a shared-shape lock asks again at the latest: a waiting writer's
/// intent (2 s) must be renewed before it lapses.
const SHARED_REFRESH: Duration = Duration::from_millis(500);

/// Notified mode: how long the ticket of a process's head of line lives in the store's queue
/// unless renewed (the head renews it every third of that), at the least. A crashed process
/// holds up the other processes' turns for at most this long.
pub(crate) const HEAD_TICKET_TTL: Duration = Duration::from_secs(2);

/// Notified mode: the head's ticket TTL for leases of `ttl`. Renewed every third, the ticket
/// always outlives a lease, so a release may hand the lock straight to it (see
/// [`LockBackend::acquire_fair`]); a crashed process then holds up the others for at most
/// one and a half leases, about what a crashed holder does.
pub(crate) fn head_ticket_ttl(ttl: Duration) -> Duration {
    HEAD_TICKET_TTL.max(ttl * 3 / 2 + TICKET_SLACK)
}

/// Room for the time between a head's renewal being due and the store receiving it.
const TICKET_SLACK: Duration = Duration::from_millis(200);

/// How a request's lock was not taken.
#[derive(Debug)]
pub(crate) enum NotObtained {
    /// Somebody else held it until the policy gave up.
    Busy { holder_ttl: Option<Duration> },
    /// The store failed or did not answer within the store timeout.
    StoreUnavailable,
}

/// What an acquire needs besides the backend.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcquirePlan {
    pub(crate) ttl: Duration,
    pub(crate) policy: BusyPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) store_timeout: Duration,
}

/// The lock is ours: its fencing token, and when the successful attempt was sent (the lease
/// counts from there).
pub(crate) type Acquired = (u64, Instant);

/// Tries to take a `hold` on lock `name` for `token`, waiting while busy as the policy allows.
pub(crate) async fn acquire<B: LockBackend>(
    backend: &Arc<B>,
    name: &str,
    token: OwnerToken,
    hold: Hold,
    plan: AcquirePlan,
) -> Result<Acquired, NotObtained> {
    let attempts = Attempts {
        backend,
        name,
        token,
        hold,
        plan,
    };
    let BusyPolicy::Wait {
        timeout: patience,
        mode,
    } = plan.policy
    else {
        return attempts
            .once(Ask::Plain)
            .await?
            .map_err(|holder_ttl| NotObtained::Busy { holder_ttl });
    };
    let deadline = Instant::now() + patience;
    if hold != Hold::Exclusive {
        // Shared shapes: every waiter asks for itself (readers can share), woken by any release.
        // Only a request that found the lock busy enters the waiting room (which subscribes to
        // the lock's announcements); its first wait attempt asks again, so no release between
        // the two is missed.
        match attempts.once(Ask::Plain).await? {
            Ok(acquired) => return Ok(acquired),
            Err(holder_ttl) if patience.is_zero() => {
                return Err(NotObtained::Busy { holder_ttl });
            }
            Err(_) => {}
        }
        let place = backend
            .waiting_room()
            .map(|room| room.take_ticket(name, token));
        return attempts
            .wait(place.as_ref(), deadline, Some(SHARED_REFRESH), Ask::Plain)
            .await;
    }
    match (mode, backend.waiting_room()) {
        (WaitMode::Fair { ticket_ttl }, room) => {
            let place = room.map(|room| room.take_ticket(name, token));
            attempts
                .wait_ticketed(place.as_ref(), deadline, ticket_ttl)
                .await
        }
        (WaitMode::Notified, Some(room)) => {
            if !room.has_line(name) {
                match attempts.once(Ask::Plain).await? {
                    Ok(acquired) => return Ok(acquired),
                    Err(holder_ttl) if patience.is_zero() => {
                        return Err(NotObtained::Busy { holder_ttl });
                    }
                    Err(_) => {}
                }
            }
            // Once at the head of the local line, it asks at once, even when the previous head
            // just took the lock: its ticket is then in the store's queue when that lock is
            // released, and the release hands the lock straight to it.
            let place = room.join_line(name, token);
            if timeout_at(deadline, place.turn()).await.is_err() {
                return attempts.once_more_busy().await;
            }
            attempts
                .wait_ticketed(Some(&place), deadline, head_ticket_ttl(plan.ttl))
                .await
        }
        (WaitMode::Polling | WaitMode::Notified, _) => {
            attempts.wait(None, deadline, None, Ask::Plain).await
        }
    }
}

/// How an attempt asks the store for an exclusive lock.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// Take it if it is free.
    Plain,
    /// Take it if it is free and this ticket is first in its queue; else hold a place in the
    /// queue for this long ([`LockBackend::acquire_fair`]).
    Ticketed(Duration),
}

/// Acquire attempts for one request.
struct Attempts<'a, B> {
    backend: &'a Arc<B>,
    name: &'a str,
    token: OwnerToken,
    hold: Hold,
    plan: AcquirePlan,
}

impl<B: LockBackend> Attempts<'_, B> {
    /// One attempt: `Ok(Ok(acquired))`, `Ok(Err(holder_ttl))` when busy, or the store failed.
    async fn once(&self, ask: Ask) -> Result<Result<Acquired, Option<Duration>>, NotObtained> {
        let (backend, name, token, plan) = (self.backend, self.name, self.token, self.plan);
        let (ttl, store_timeout) = (plan.ttl, plan.store_timeout);
        let sent = Instant::now();
        let answer = match ask {
            _ if self.hold != Hold::Exclusive => {
                timeout(
                    store_timeout,
                    backend.acquire_hold(name, token, ttl, self.hold),
                )
                .await
            }
            Ask::Ticketed(ticket_ttl) => {
                timeout(
                    store_timeout,
                    backend.acquire_fair(name, token, ttl, ticket_ttl),
                )
                .await
            }
            Ask::Plain => timeout(store_timeout, backend.acquire(name, token, ttl)).await,
        };
        match answer {
            Ok(Ok(Acquire::Acquired { fence })) => Ok(Ok((fence, sent))),
            Ok(Ok(Acquire::Busy { holder_ttl })) => Ok(Err(holder_ttl)),
            Ok(Err(error)) => {
                tracing::warn!(lock = name, %error, "acquire failed");
                Err(give_back(backend, name, token, self.hold, plan))
            }
            Err(_) => {
                tracing::warn!(lock = name, timeout = ?plan.store_timeout, "acquire timed out");
                Err(give_back(backend, name, token, self.hold, plan))
            }
        }
    }

    /// The wait is over: one last look, for an accurate `Retry-After`.
    async fn once_more_busy(&self) -> Result<Acquired, NotObtained> {
        match self.once(Ask::Plain).await? {
            Ok(acquired) => Ok(acquired),
            Err(holder_ttl) => Err(NotObtained::Busy { holder_ttl }),
        }
    }

    /// Attempts until acquired or `deadline`. Between attempts it sleeps until `place` hears a
    /// release announced (armed before each attempt, so none is missed) or the holder's lease
    /// runs out — or, without live announcements, for a backoff delay. `refresh` caps each
    /// sleep (tickets and intents must be renewed).
    async fn wait(
        &self,
        place: Option<&Place>,
        deadline: Instant,
        refresh: Option<Duration>,
        ask: Ask,
    ) -> Result<Acquired, NotObtained> {
        let mut attempt: u32 = 0;
        loop {
            let mut announced = pin!(place.map(|place| place.released().notified()));
            if let Some(announced) = announced.as_mut().as_pin_mut() {
                announced.enable();
            }
            let asked = Instant::now();
            let holder_ttl = match self.once(ask).await? {
                Ok(acquired) => return Ok(acquired),
                Err(holder_ttl) => holder_ttl,
            };
            if let (Ask::Ticketed(_), Some(place)) = (ask, place) {
                place.enqueued();
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let live = place.is_some_and(Place::announcements_live);
            let delay = if live {
                (!remaining.is_zero()).then(|| holder_ttl.unwrap_or(remaining).min(remaining))
            } else {
                self.plan
                    .backoff
                    .next_delay(attempt, fastrand::f64(), holder_ttl, remaining)
            };
            let Some(delay) = delay else {
                return Err(NotObtained::Busy { holder_ttl });
            };
            let delay = refresh.map_or(delay, |refresh| delay.min(refresh));
            match announced.as_pin_mut() {
                Some(announced) if live => {
                    let _ = timeout(delay, announced).await;
                }
                _ => sleep(delay).await,
            }
            // A release handed the lock to our ticket after the busy answer to the attempt
            // made at `asked`: its lease started later than that.
            if let Some(fence) = place.and_then(|place| place.handed(self.token)) {
                return Ok((fence, asked));
            }
            attempt = attempt.saturating_add(1);
        }
    }

    /// [`wait`](Self::wait) with ticketed attempts, renewing the ticket every third of
    /// `ticket_ttl` and withdrawing it if the wait ends without the lock (or is dropped).
    async fn wait_ticketed(
        &self,
        place: Option<&Place>,
        deadline: Instant,
        ticket_ttl: Duration,
    ) -> Result<Acquired, NotObtained> {
        let ticket = Ticket::new(self.backend, self.name, self.token, self.plan.store_timeout);
        let refresh = Some(ticket_ttl / 3);
        let acquired = self
            .wait(place, deadline, refresh, Ask::Ticketed(ticket_ttl))
            .await;
        if acquired.is_ok() {
            ticket.used();
        }
        acquired
    }
}

/// An attempt that failed or timed out may still have taken the lock in the store (the reply
/// was lost, not the command). Give it back in the background so it does not block the key
/// until its TTL; the compare-and-delete makes this harmless when we never held it.
/// (A ticket is withdrawn by its own guard, [`Ticket`].)
fn give_back<B: LockBackend>(
    backend: &Arc<B>,
    name: &str,
    token: OwnerToken,
    hold: Hold,
    plan: AcquirePlan,
) -> NotObtained {
    let (backend, name) = (Arc::clone(backend), name.to_owned());
    tokio::spawn(async move {
        let outcome = timeout(plan.store_timeout, backend.release_hold(&name, token, hold)).await;
        tracing::debug!(lock = name, ?outcome, "gave back a possibly taken lock");
    });
    NotObtained::StoreUnavailable
}

/// A ticket in the store's queue: withdrawn in the background when the waiter gives up or is
/// dropped, so it does not hold up the line until it expires.
struct Ticket<B: LockBackend> {
    backend: Arc<B>,
    name: String,
    token: OwnerToken,
    store_timeout: Duration,
    used: bool,
}

impl<B: LockBackend> Ticket<B> {
    fn new(backend: &Arc<B>, name: &str, token: OwnerToken, store_timeout: Duration) -> Self {
        Self {
            backend: Arc::clone(backend),
            name: name.to_owned(),
            token,
            store_timeout,
            used: false,
        }
    }

    /// The ticket was turned into the lock; nothing to withdraw.
    fn used(mut self) {
        self.used = true;
    }
}

impl<B: LockBackend> Drop for Ticket<B> {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        let (backend, name, token, store_timeout) = (
            Arc::clone(&self.backend),
            std::mem::take(&mut self.name),
            self.token,
            self.store_timeout,
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let outcome = timeout(store_timeout, backend.leave_fair_queue(&name, token)).await;
                tracing::debug!(lock = name, ?outcome, "withdrew a fair-mode ticket");
            });
        }
    }
}

/// Takes every lock in `names` (sorted) for `token`, all or none, retrying while busy as the
/// policy allows (with backoff: a set is not announced free as a whole). Fences come in the
/// order of `names`. Exclusive holds only.
pub(crate) async fn acquire_all<B: LockBackend>(
    backend: &Arc<B>,
    names: &[String],
    token: OwnerToken,
    plan: AcquirePlan,
) -> Result<(Vec<u64>, Instant), NotObtained> {
    let deadline = match plan.policy {
        BusyPolicy::Reject => None,
        BusyPolicy::Wait { timeout, .. } => Some(Instant::now() + timeout),
    };
    let mut attempt: u32 = 0;
    loop {
        let sent = Instant::now();
        let holder_ttl = match timeout(
            plan.store_timeout,
            backend.acquire_many(names, token, plan.ttl),
        )
        .await
        {
            Ok(Ok(AcquireMany::Acquired { fences })) => return Ok((fences, sent)),
            Ok(Ok(AcquireMany::Busy { holder_ttl })) => holder_ttl,
            failed => {
                tracing::warn!(locks = ?names, ?failed, "acquire failed");
                for name in names {
                    give_back(backend, name, token, Hold::Exclusive, plan);
                }
                return Err(NotObtained::StoreUnavailable);
            }
        };
        let delay = deadline.and_then(|deadline| {
            let remaining = deadline.saturating_duration_since(Instant::now());
            plan.backoff
                .next_delay(attempt, fastrand::f64(), holder_ttl, remaining)
        });
        let Some(delay) = delay else {
            return Err(NotObtained::Busy { holder_ttl });
        };
        sleep(delay).await;
        attempt = attempt.saturating_add(1);
    }
}
