//! Taking a lock under the locker's policy: attempts, waiting, store timeouts, and what an
//! unfinished acquire leaves to the background.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::names::LockNames;
use super::policy::{BusyPolicy, WaitMode};
use super::settings::Settings;
use super::telemetry::Tally;
use crate::backend::Ask;
use crate::backend::waiting::Wakes;
use crate::backend::{BackendError, Granted, Hold, LockBackend, LockRequest, Patience, WaitQueue};
use crate::token::OwnerToken;
use attempts::{Answer, Attempts, How};
use cleanup::Abandon;

mod attempts;
mod cleanup;
mod many;

/// How often a waiter for a shared-shape lock asks again at the latest: a waiting writer's
/// intent (2 s in the stores here) must be renewed before it lapses.
pub(crate) const SHARED_REFRESH: Duration = Duration::from_millis(500);

/// Notified mode: how long the ticket of a process's head of line lives in the store's queue
/// unless renewed (the head renews it every third of that), at the least. A crashed process
/// holds up the other processes' turns for at most this long.
pub(crate) const HEAD_TICKET_TTL: Duration = Duration::from_secs(2);

/// Room for the time between a head's renewal being due and the store receiving it.
const TICKET_SLACK: Duration = Duration::from_millis(200);

/// Notified mode: the head's ticket TTL for leases of `ttl`. Renewed every third, the ticket
/// always outlives a lease, so a release may hand the lock straight to it; a crashed process
/// then holds up the others for at most one and a half leases, about what a crashed holder
/// does.
fn head_ticket_ttl(ttl: Duration) -> Duration {
    HEAD_TICKET_TTL.max(ttl * 3 / 2 + TICKET_SLACK)
}

/// The lock is taken: one grant per name, and when the successful attempt was sent (the lease
/// counts from there).
pub(crate) struct Obtained<L> {
    pub(crate) grants: Vec<Granted<L>>,
    pub(crate) sent: Instant,
}

/// Why the lock was not taken.
#[derive(Debug)]
pub(crate) enum NotObtained {
    /// Somebody else held it until the policy gave up.
    Busy { holder_ttl: Option<Duration> },
    /// The store failed or did not answer within the store timeout.
    Store(BackendError),
}

/// Told of every busy answer the store gives an acquire: the locker's line, whose other tasks
/// wait for that acquire, keeps when the store last said the lock is busy.
pub(crate) trait HearsBusy: Sync {
    /// The store said the lock is busy, now.
    fn said_busy(&self);
}

/// The line an acquire asks for: whether its task was `called` from it (it was waiting there
/// for the lock, and its turn to ask has come — it takes its place in the store's queue at
/// once, without a first look), and who hears the store's busy answers.
#[derive(Clone, Copy)]
pub(crate) struct ForLine<'a> {
    pub(crate) called: bool,
    pub(crate) hears: &'a dyn HearsBusy,
}

/// Takes `names` for `token` as `ask` says (several names: always exclusively), waiting while
/// busy as `settings` allow, until `deadline` at the latest; its attempts and its wait are
/// counted in `tally`, and asked for its locker's line, if any (`line`).
pub(crate) async fn acquire<B: LockBackend>(
    backend: &Arc<B>,
    (names, token): (&LockNames, OwnerToken),
    ask: Ask<B>,
    (settings, deadline): (&Settings, Instant),
    (tally, line): (&Tally, Option<ForLine<'_>>),
) -> Result<Obtained<B::Lease>, NotObtained> {
    let Some(name) = names.single() else {
        return many::acquire_all(backend, names, token, settings, tally).await;
    };
    let queue = backend.wait_queue();
    let can_listen = queue.is_some_and(|queue| queue.room().hears_announcements());
    let patience = patience(settings.policy, can_listen);
    let attempts = Attempts {
        backend,
        names,
        name,
        request: LockRequest::new(token, settings.ttl)
            .patience(patience)
            .holder(settings.holder),
        ask,
        settings,
        tally,
        hears: line.map(|line| line.hears),
    };
    let called = line.is_some_and(|line| line.called);
    let BusyPolicy::Wait { timeout, mode } = settings.policy else {
        return attempts.once_more_busy().await;
    };
    if timeout.is_zero() {
        return attempts.once_more_busy().await;
    }
    match (ask.hold(), mode, queue) {
        (Hold::Mutex, WaitMode::Fair { ticket_ttl }, Some(queue)) => {
            let place = queue.room().take_ticket(name, token, Wakes::Named);
            attempts
                .wait_queued(Some(&place), deadline, ticket_ttl)
                .await
        }
        (Hold::Mutex, WaitMode::Notified, Some(queue)) => {
            wait_queued_ahead(&attempts, queue, deadline, called).await
        }
        (Hold::Mutex, ..) => attempts.wait(None, deadline, None, How::Plain).await,
        (_, _, queue) => wait_shared(&attempts, queue, deadline, called).await,
    }
}

/// One attempt on `name` (`names`' one name) that leaves nothing behind when busy, by a task
/// whose wait in its locker's line ran out without the store having said lately that the lock
/// is busy: taken, or busy (as the store says now), or the store's failure.
pub(crate) async fn look<B: LockBackend>(
    backend: &Arc<B>,
    (names, name, token): (&LockNames, &str, OwnerToken),
    ask: Ask<B>,
    settings: &Settings,
    tally: &Tally,
) -> Result<Obtained<B::Lease>, NotObtained> {
    let attempts = Attempts {
        backend,
        names,
        name,
        request: LockRequest::new(token, settings.ttl).holder(settings.holder),
        ask,
        settings,
        tally,
        hears: None,
    };
    attempts.once_more_busy().await
}

/// When a wait of `timeout` from now ends; a wait too long for the clock ends in 30 years.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or(now + FOREVER)
}

/// How a caller waits under `policy`, when announcements can reach it or not.
fn patience(policy: BusyPolicy, can_listen: bool) -> Patience {
    match policy {
        BusyPolicy::Wait { timeout, .. } if timeout.is_zero() => Patience::Once,
        BusyPolicy::Reject => Patience::Once,
        BusyPolicy::Wait {
            mode: WaitMode::Polling,
            ..
        } => Patience::Polls,
        BusyPolicy::Wait { .. } if can_listen => Patience::Listens,
        BusyPolicy::Wait { .. } => Patience::Polls,
    }
}

/// Notified mode, by the one task of its locker asking for the lock: one attempt (unless it
/// was `called` from its locker's line: it does not jump the line of the store), then its
/// place in the store's queue, kept until the lock is its own.
async fn wait_queued_ahead<B: LockBackend>(
    attempts: &Attempts<'_, B>,
    queue: &dyn WaitQueue<B::Lease>,
    deadline: Instant,
    called: bool,
) -> Result<Obtained<B::Lease>, NotObtained> {
    if !called {
        match attempts.once(How::Plain).await? {
            Answer::Acquired(obtained) => return Ok(obtained),
            // A slow store answered after the wait ended: no more attempts.
            Answer::Busy { holder_ttl } if Instant::now() >= deadline => {
                return Err(NotObtained::Busy { holder_ttl });
            }
            Answer::Busy { .. } => {}
        }
    }
    attempts.tally.waiting();
    let place = queue
        .room()
        .take_ticket(attempts.name, attempts.request.token, Wakes::Head);
    let ticket_ttl = head_ticket_ttl(attempts.settings.ttl);
    attempts
        .wait_queued(Some(&place), deadline, ticket_ttl)
        .await
}

/// Shared shapes (read, write, permit). Readers and permit holders each ask for themselves
/// (readers can share), woken by any release when they listen. Writers line up in their
/// locker's line: only one of them asks the store at a time, so a release wakes one writer per
/// process instead of every one (each then asks once more). Only a caller that found the lock
/// busy enters the waiting room (which subscribes to the lock's announcements); its first wait
/// attempt asks again, so no release between the two is missed.
///
/// A writer's intent (its place among the waiting writers; the first of them, once readers
/// alone held it back, bars new readers) is only ever left by the one writer of its locker
/// that keeps asking: a writer's first look leaves nothing, since a writer that then queued
/// behind another of its locker would leave its place standing, unrenewed, holding up the
/// others until it lapsed (2 s). A writer `called` from its locker's line skips that look. A
/// reader that waits claims the next turn for readers, and a permit waiter may keep a place in
/// line (ZooKeeper). A caller that gives up withdraws its intent, claim or place before it
/// answers, so that nobody is held back by a caller that left — or, from its deadline plus one
/// store timeout on (the latest a caller is answered), in the background.
async fn wait_shared<B: LockBackend>(
    attempts: &Attempts<'_, B>,
    queue: Option<&dyn WaitQueue<B::Lease>>,
    deadline: Instant,
    called: bool,
) -> Result<Obtained<B::Lease>, NotObtained> {
    let (request, name) = (attempts.request, attempts.name);
    let hold = attempts.ask.hold();
    let is_writer = hold == Hold::Write;
    let store_timeout = attempts.settings.store_timeout;
    let marks = Abandon::new(attempts.backend, attempts.names, request, store_timeout);
    let room = queue.map(WaitQueue::room);
    if !(is_writer && called) {
        let first_look = if is_writer {
            attempts.look().await?
        } else {
            attempts.once(How::Plain).await?
        };
        match first_look {
            Answer::Acquired(obtained) => {
                marks.disarm();
                return Ok(obtained);
            }
            // A slow store answered after the wait ended: no more attempts.
            Answer::Busy { holder_ttl } if Instant::now() >= deadline => {
                let busy = Err(NotObtained::Busy { holder_ttl });
                return withdraw(marks, busy, deadline, attempts.settings.store_timeout).await;
            }
            Answer::Busy { .. } => {}
        }
    }
    attempts.tally.waiting();
    let listens = request.patience == Patience::Listens;
    let place = match room {
        Some(room) if is_writer && listens => {
            Some(room.take_ticket(name, request.token, Wakes::Head))
        }
        Some(room) if listens => Some(room.take_ticket(name, request.token, Wakes::Named)),
        // A writer that polls, and in a room that hears no announcements (where a ticket costs
        // the store nothing) a reader or permit waiter: woken by releases in this process.
        Some(room) if is_writer || !room.hears_announcements() => {
            Some(room.take_ticket(name, request.token, Wakes::Polling))
        }
        _ => None,
    };
    let waited = attempts
        .wait(place.as_ref(), deadline, Some(SHARED_REFRESH), How::Plain)
        .await;
    withdraw(marks, waited, deadline, attempts.settings.store_timeout).await
}

/// A shared wait's end: a writer's intent, a reader's claim or a permit's place (`marks`)
/// withdrawn when the wait `ended` busy — by the latest the caller is answered (its deadline
/// and one store timeout), in the background from then on —, kept with the lock, abandoned in
/// the background after a store failure.
async fn withdraw<L>(
    marks: Abandon<'_, impl LockBackend<Lease = L>>,
    ended: Result<Obtained<L>, NotObtained>,
    deadline: Instant,
    store_timeout: Duration,
) -> Result<Obtained<L>, NotObtained> {
    match &ended {
        Err(NotObtained::Busy { .. }) => marks.before(deadline + store_timeout).await,
        Ok(_) => marks.disarm(),
        Err(NotObtained::Store(_)) => {}
    }
    ended
}
