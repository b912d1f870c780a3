//! The state of one lock name in the memory backend, and the rules every shape follows on it.

use std::time::Duration;

use tokio::time::Instant;

use crate::token::OwnerToken;

mod inspection;
use crate::backend::lock_shapes::WAITER_MARK_TTL;
use crate::backend::store_support::ticket_rules::{HolderChange, QueueView, Queued, Step, Tickets};
use crate::backend::store_support::ticket_rules::{from_micros, to_micros};
use crate::backend::waiting::Announcement;
use crate::backend::{Attempt, FencingToken, Hold, LockRequest, Patience};

/// The store's one fencing counter. Every lock's tokens come from it, so each lock's tokens are
/// strictly increasing, and nothing about a lock has to outlive the lock.
#[derive(Clone, Debug, Default)]
pub(super) struct FenceCounter(u64);

impl FenceCounter {
    fn next(&mut self) -> FencingToken {
        self.0 += 1;
        FencingToken::new(self.0)
    }
}

/// An attempt's answer before it becomes a grant: the fence of an exclusive hold, if any.
pub(super) type Taken = Attempt<Option<FencingToken>>;

/// One owner's shared hold (a reader's or a permit's), or a waiting reader's claim on the next
/// turn, until it expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    token: OwnerToken,
    expires_at: Instant,
    /// Its holder's label.
    label: &'static str,
    /// When it was taken.
    since: Instant,
}

type Shared = Vec<Entry>;

/// One lock name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct KeyState {
    /// The exclusive holder: a mutex, a writer, or one of several names held together.
    holder: Option<Holder>,
    readers: Shared,
    permits: Shared,
    /// Waiting writers' intents in the order they came (see `take_write`), each until it
    /// expires: the first is the next writer's turn.
    writers: Vec<Intent>,
    /// Readers that found a writer in their way and wait: the next turn is theirs.
    claims: Shared,
    /// Tickets in arrival order (see `WaitQueue::acquire_queued`), on the clock that starts
    /// at `epoch`.
    tickets: Tickets,
    /// When the name's ticket clock started: at its first ticket.
    epoch: Option<Instant>,
    /// The labels of the tickets' holders, for the grant a release hands them.
    ticket_labels: Vec<(OwnerToken, &'static str)>,
    /// The number of permits the semaphore's holders asked for, last.
    permit_limit: u32,
}

/// A waiting writer's intent: its place in line (the writers that came before it go first);
/// once readers alone held the first of them back, its intent also bars new readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Intent {
    token: OwnerToken,
    bars_readers: bool,
    expires_at: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Holder {
    token: OwnerToken,
    expires_at: Instant,
    hold: Hold,
    label: &'static str,
    fence: FencingToken,
    since: Instant,
}

impl Entry {
    /// `request`'s entry, for `ttl` from `now`.
    fn of(request: &LockRequest, ttl: Duration, now: Instant) -> Self {
        Self {
            token: request.token,
            expires_at: now + ttl,
            label: request.holder,
            since: now,
        }
    }
}

fn busy(wait: Duration) -> Taken {
    Attempt::Busy {
        holder_ttl: Some(wait),
    }
}

/// How long until the first of `holds` expires, or the last.
fn first_expiry(holds: &Shared, now: Instant) -> Option<Duration> {
    holds.iter().map(|entry| entry.expires_at - now).min()
}

fn last_expiry(holds: &Shared, now: Instant) -> Option<Duration> {
    holds.iter().map(|entry| entry.expires_at - now).max()
}

fn extend_shared(holds: &mut Shared, token: OwnerToken, expires_at: Instant) -> bool {
    let held = holds.iter_mut().find(|entry| entry.token == token);
    held.map(|entry| entry.expires_at = expires_at).is_some()
}

fn remove_shared(holds: &mut Shared, token: OwnerToken) -> bool {
    if mutant!("shared-release-ignores-owner") && !holds.iter().any(|hold| hold.token == token) {
        return holds.pop().is_some();
    }
    let before = holds.len();
    holds.retain(|entry| entry.token != token);
    holds.len() < before
}

impl KeyState {
    fn live_holder(&self, now: Instant) -> Option<&Holder> {
        self.holder
            .as_ref()
            .filter(|holder| holder.expires_at > now)
    }

    /// Every live lease: its holder's label, owner token, fence (an exclusive hold's), and when
    /// it expires.
    #[cfg(feature = "test-util")]
    pub(super) fn live_leases(
        &self,
        now: Instant,
    ) -> Vec<(&'static str, OwnerToken, Option<FencingToken>, Instant)> {
        let exclusive = (self.live_holder(now)).map(|holder| {
            (
                holder.label,
                holder.token,
                Some(holder.fence),
                holder.expires_at,
            )
        });
        let shared = (self.readers.iter().chain(&self.permits))
            .filter(|entry| entry.expires_at > now)
            .map(|entry| (entry.label, entry.token, None, entry.expires_at));
        exclusive.into_iter().chain(shared).collect()
    }

    /// How long the exclusive holder has left, if there is one.
    fn holder_ttl(&self, now: Instant) -> Option<Duration> {
        self.live_holder(now).map(|holder| holder.expires_at - now)
    }

    /// The exclusive holder's token, while its lease runs.
    #[cfg(test)]
    pub(super) fn holder_token(&self, now: Instant) -> Option<OwnerToken> {
        self.live_holder(now).map(|holder| holder.token)
    }

    /// Whether anybody holds the name now: its exclusive holder, or a reader or permit whose
    /// lease has not run out.
    pub(super) fn is_held(&self, now: Instant) -> bool {
        let live = |holds: &Shared| holds.iter().any(|entry| entry.expires_at > now);
        self.live_holder(now).is_some() || live(&self.readers) || live(&self.permits)
    }

    pub(super) fn is_dead(&self, now: Instant) -> bool {
        let now_us = self.now_us(now);
        self.live_holder(now).is_none()
            && self
                .tickets
                .0
                .iter()
                .all(|ticket| ticket.expires_us <= now_us)
            && [&self.readers, &self.permits, &self.claims]
                .iter()
                .all(|holds| holds.iter().all(|entry| entry.expires_at <= now))
            && self.writers.iter().all(|intent| intent.expires_at <= now)
    }

    /// Drops expired shared holds, readers' claims and tickets, and lapsed writers' intents.
    pub(super) fn forget_expired(&mut self, now: Instant) {
        let now_us = self.now_us(now);
        self.tickets.drop_expired(now_us);
        for holds in [&mut self.readers, &mut self.permits, &mut self.claims] {
            holds.retain(|entry| entry.expires_at > now);
        }
        self.writers.retain(|intent| intent.expires_at > now);
        let tickets = &self.tickets;
        (self.ticket_labels)
            .retain(|(token, _)| tickets.0.iter().any(|ticket| ticket.token == *token));
    }

    /// How long an exclusive taker must wait: for the holder, else for the last reader.
    fn exclusive_wait(&self, now: Instant) -> Option<Duration> {
        self.holder_ttl(now)
            .or_else(|| last_expiry(&self.readers, now))
    }

    /// A mutex (or one name of several): free of holders and readers.
    pub(super) fn take_exclusive(
        &mut self,
        request: &LockRequest,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Taken {
        self.forget_expired(now);
        match self.exclusive_wait(now) {
            Some(wait) => busy(wait),
            None => Attempt::Acquired(Some(self.take(request, Hold::Mutex, fences, now))),
        }
    }

    /// How long an exclusive attempt must wait now; `None` when the lock is free for it.
    pub(super) fn wait_for_exclusive(&mut self, now: Instant) -> Option<Duration> {
        self.forget_expired(now);
        self.exclusive_wait(now)
    }

    /// A reader: free of an exclusive holder and of a writer's intent that bars readers. A busy
    /// reader that will ask again claims the next turn for readers, ahead of waiting writers.
    pub(super) fn take_read(&mut self, request: &LockRequest, now: Instant) -> Taken {
        let (token, patience) = (request.token, request.patience);
        self.forget_expired(now);
        let barred = self.writers.first().filter(|intent| intent.bars_readers);
        let wait = self
            .holder_ttl(now)
            .or_else(|| barred.map(|intent| intent.expires_at - now));
        let Some(wait) = wait else {
            remove_shared(&mut self.claims, token);
            self.readers.push(Entry::of(request, request.ttl, now));
            return Attempt::Acquired(None);
        };
        if patience != Patience::Once
            && !extend_shared(&mut self.claims, token, now + WAITER_MARK_TTL)
        {
            self.claims.push(Entry::of(request, WAITER_MARK_TTL, now));
        }
        busy(wait)
    }

    pub(super) fn take_permit(
        &mut self,
        request: &LockRequest,
        permits: u32,
        now: Instant,
    ) -> Taken {
        self.forget_expired(now);
        self.permit_limit = permits;
        if self.permits.len() < usize::try_from(permits).unwrap_or(usize::MAX) {
            self.permits.push(Entry::of(request, request.ttl, now));
            return Attempt::Acquired(None);
        }
        busy(first_expiry(&self.permits, now).unwrap_or_default())
    }

    /// A writer: free of holders, readers, the writers that came before it, and — unless its
    /// own intent bars readers — of readers' claims. A busy writer that will ask again keeps
    /// its place among the waiting writers (its intent, renewed by each attempt); the first of
    /// them has the next writer's turn, and once readers alone held it back (every reader that
    /// claimed a turn came in), it bars new readers too (sticky until it takes the lock). So
    /// each side waits for at most the other's current turn, and writers take turns in the
    /// order they came.
    pub(super) fn take_write(
        &mut self,
        request: &LockRequest,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Taken {
        let (token, patience) = (request.token, request.patience);
        self.forget_expired(now);
        let place = self.writers.iter().position(|intent| intent.token == token);
        let ahead = &self.writers[..place.unwrap_or(self.writers.len())];
        let own_bar = place.is_some_and(|place| self.writers[place].bars_readers);
        let wait = self
            .holder_ttl(now)
            .or_else(|| first_expiry(&self.readers, now))
            .or_else(|| ahead.iter().map(|intent| intent.expires_at - now).min())
            .or_else(|| {
                (!own_bar)
                    .then(|| first_expiry(&self.claims, now))
                    .flatten()
            });
        let Some(wait) = wait else {
            if let Some(place) = place {
                self.writers.remove(place);
            }
            return Attempt::Acquired(Some(self.take(request, Hold::Write, fences, now)));
        };
        if patience != Patience::Once {
            let first = place.unwrap_or(self.writers.len()) == 0;
            let readers_alone = !self.readers.is_empty() && self.claims.is_empty();
            let intent = Intent {
                token,
                bars_readers: own_bar || (first && readers_alone),
                expires_at: now + WAITER_MARK_TTL,
            };
            match place {
                Some(place) => self.writers[place] = intent,
                None => self.writers.push(intent),
            }
        }
        busy(wait)
    }

    /// Resets the lease of `token`'s hold (exclusive, or a shared one) to `ttl` from now.
    pub(super) fn extend(
        &mut self,
        token: OwnerToken,
        exclusive: bool,
        ttl: Duration,
        now: Instant,
    ) -> bool {
        self.forget_expired(now);
        let expires_at = now + ttl;
        if exclusive {
            let holder = self
                .holder
                .as_mut()
                .filter(|holder| holder.expires_at > now && holder.token == token);
            return holder
                .map(|holder| holder.expires_at = expires_at)
                .is_some();
        }
        extend_shared(&mut self.readers, token, expires_at)
            || extend_shared(&mut self.permits, token, expires_at)
    }

    /// Gives back `token`'s exclusive hold, passing it on as the queue's rules say; what to
    /// announce, when it was held.
    pub(super) fn release_exclusive(
        &mut self,
        token: OwnerToken,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Option<Announcement> {
        self.forget_expired(now);
        let step = self.queue_view(now).release_waited(token)?;
        let (announcement, _) = self.apply(step, fences, now);
        Some(announcement.unwrap_or(Announcement::Free))
    }

    /// Gives back `token`'s shared hold; whether it was held.
    pub(super) fn release_shared(&mut self, token: OwnerToken, now: Instant) -> bool {
        self.forget_expired(now);
        remove_shared(&mut self.readers, token) || remove_shared(&mut self.permits, token)
    }

    /// Undoes whatever `token` holds or left here; what to announce, if anything was freed.
    pub(super) fn abandon(
        &mut self,
        token: OwnerToken,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Option<Announcement> {
        // A withdrawn intent lets in the readers it barred; a withdrawn claim, the writers.
        let before = self.writers.len();
        self.writers.retain(|intent| intent.token != token);
        let intent = self.writers.len() < before;
        let claim = remove_shared(&mut self.claims, token);
        let shared = self.release_shared(token, now);
        self.release_exclusive(token, fences, now)
            .or((shared || intent || claim).then_some(Announcement::Free))
    }

    /// Queued attempt, by the queue's rules: the lock if it is free and `token` is first in
    /// line (or already holds it, handed over by a release); else a ticket in the line, and how
    /// long to wait.
    pub(super) fn take_queued(
        &mut self,
        request: &LockRequest,
        ticket_ttl: Duration,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Taken {
        let (token, ttl) = (request.token, request.ttl);
        self.forget_expired(now);
        if !self.ticket_labels.iter().any(|(owner, _)| *owner == token) {
            self.ticket_labels.push((token, request.holder));
        }
        let view = self.queue_view(now);
        let (step, queued) = view.acquire_queued(token, to_micros(ttl), to_micros(ticket_ttl));
        let (_, fence) = self.apply(step, fences, now);
        match queued {
            Queued::Acquired => Attempt::Acquired(fence),
            Queued::Waiting(holder_ttl) => Attempt::Busy { holder_ttl },
        }
    }

    /// Withdraws `token`'s ticket; what to announce: a lock handed to `token` meanwhile is
    /// passed on, a free one announced to the next ticket.
    pub(super) fn leave_queue(
        &mut self,
        token: OwnerToken,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Option<Announcement> {
        self.forget_expired(now);
        let (step, handed) = self.queue_view(now).leave(token);
        let (announcement, _) = self.apply(step, fences, now);
        match handed {
            true => self.release_exclusive(token, fences, now),
            false => announcement,
        }
    }

    /// Microseconds on the name's ticket clock at `now`.
    fn now_us(&self, now: Instant) -> i64 {
        self.epoch
            .map_or(0, |epoch| to_micros(now.saturating_duration_since(epoch)))
    }

    /// The lock as the queue's rules see it at `now` (expired state forgotten).
    fn queue_view(&mut self, now: Instant) -> QueueView {
        self.epoch.get_or_insert(now);
        QueueView {
            now_us: self.now_us(now),
            holder: (self.live_holder(now))
                .map(|holder| (holder.token, to_micros(holder.expires_at - now))),
            shared_left_us: last_expiry(&self.readers, now).map(to_micros),
            tickets: self.tickets.clone(),
            readers_wait: !self.claims.is_empty(),
        }
    }

    /// Carries out a step of the queue's rules: what it announces, and the fence of a lock it
    /// gave somebody.
    fn apply(
        &mut self,
        step: Step,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> (Option<Announcement>, Option<FencingToken>) {
        self.tickets = step.tickets;
        let fence = match step.holder {
            HolderChange::Unchanged => None,
            HolderChange::Taken { owner, lease_us } => {
                let label = (self.ticket_labels.iter())
                    .find(|(token, _)| *token == owner)
                    .map_or("", |(_, label)| *label);
                let request = LockRequest::new(owner, from_micros(lease_us)).holder(label);
                Some(self.take(&request, Hold::Mutex, fences, now))
            }
            HolderChange::Freed => {
                self.holder = None;
                None
            }
        };
        (step.notice.map(|notice| notice.announcement(fence)), fence)
    }

    /// Hands the exclusive hold to `request`'s holder for its lease, holding as `hold`;
    /// returns its new fence.
    pub(super) fn take(
        &mut self,
        request: &LockRequest,
        hold: Hold,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> FencingToken {
        let fence = fences.next();
        self.holder = Some(Holder {
            token: request.token,
            expires_at: now + request.ttl,
            hold,
            label: request.holder,
            fence,
            since: now,
        });
        fence
    }
}
