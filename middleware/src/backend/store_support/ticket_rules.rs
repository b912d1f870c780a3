//! The rules of a lock's queue of tickets, decided in Rust for the stores that keep the queue as
//! data: the memory backend and the SQL ones (in the lock's row). The Redis backend's scripts
//! (`fair.lua`, `release.lua`) follow the same rules in Lua, and etcd and ZooKeeper get them
//! from the order of their keys and nodes; the conformance case
//! `a_queue_follows_the_ticket_rules` holds every store to them.
//!
//! * A ticket asks for the lock: it takes it when it is free and the ticket is first (or the
//!   line is empty), or finds it handed to it; otherwise the ticket is put at the end of the
//!   line, or refreshed in its place.
//! * A release of a lock waited for goes to the first live ticket: handed to it when the ticket
//!   outlives the lease it asked for, else announced for it to take. With nobody in line it is
//!   announced free, and while readers wait for their turn (a writer released) it is freed and
//!   announced for them, whoever else waits.
//! * A ticket leaving the line hands back a lock given to it meanwhile (the store releases it,
//!   passing it on); leaving a free lock, it announces the next ticket.
//!
//! Times are the store's, in microseconds; fences are the store's to issue when a step gives
//! somebody the lock.

use std::time::Duration;

use crate::backend::FencingToken;
use crate::backend::waiting::Announcement;
use crate::token::OwnerToken;

/// One waiter's place in a lock's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) struct Ticket {
    pub(in crate::backend) token: OwnerToken,
    /// When the ticket expires unless its waiter asks again.
    pub(in crate::backend) expires_us: i64,
    /// The lease its waiter asked for: a release may hand it the lock for this long.
    pub(in crate::backend) lease_us: i64,
}

/// A lock's queue of tickets, in arrival order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::backend) struct Tickets(pub(in crate::backend) Vec<Ticket>);

impl Tickets {
    /// Drops the tickets expired at `now_us`.
    pub(in crate::backend) fn drop_expired(&mut self, now_us: i64) {
        self.0.retain(|ticket| ticket.expires_us > now_us);
    }

    fn first(&self) -> Option<&Ticket> {
        self.0.first()
    }

    fn remove(&mut self, token: OwnerToken) -> bool {
        let before = self.0.len();
        self.0.retain(|ticket| ticket.token != token);
        self.0.len() < before
    }

    /// Refreshes `ticket` in its place, or puts it at the end of the line.
    fn put(&mut self, ticket: Ticket) {
        match self.0.iter_mut().find(|held| held.token == ticket.token) {
            Some(held) => *held = ticket,
            None => self.0.push(ticket),
        }
    }
}

/// A lock as its queue's rules see it, at one instant of the store's clock.
#[derive(Clone, Debug)]
pub(in crate::backend) struct QueueView {
    pub(in crate::backend) now_us: i64,
    /// The exclusive holder and how long its lease has left, while it runs.
    pub(in crate::backend) holder: Option<(OwnerToken, i64)>,
    /// How long until a live shared hold (reader or permit) may end, if any is held.
    pub(in crate::backend) shared_left_us: Option<i64>,
    /// The live tickets, in arrival order.
    pub(in crate::backend) tickets: Tickets,
    /// Whether readers wait for the next turn (their claims): a release is theirs.
    pub(in crate::backend) readers_wait: bool,
}

/// Who holds the lock after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) enum HolderChange {
    /// As before.
    Unchanged,
    /// `owner`, for a fresh lease of `lease_us` (and a new fence).
    Taken { owner: OwnerToken, lease_us: i64 },
    /// Nobody.
    Freed,
}

/// What a step announces about the lock's next holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) enum Notice {
    /// Anybody may take it.
    Free,
    /// Only this ticket may take it next.
    Next(OwnerToken),
    /// It was handed to this ticket (the step's `HolderChange::Taken`).
    Handed(OwnerToken),
}

impl Notice {
    /// The announcement, with the fence the store issued to a ticket the lock was handed to.
    pub(in crate::backend) fn announcement(self, fence: Option<FencingToken>) -> Announcement {
        match self {
            Notice::Free => Announcement::Free,
            Notice::Next(token) => Announcement::Next(token),
            Notice::Handed(to) => Announcement::Handed { to, fence },
        }
    }
}

/// What a step changes, and announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::backend) struct Step {
    pub(in crate::backend) holder: HolderChange,
    /// Whether the lock's releases go through the queue (and are announced).
    pub(in crate::backend) waited: bool,
    pub(in crate::backend) tickets: Tickets,
    pub(in crate::backend) notice: Option<Notice>,
}

/// The answer to a ticket asking for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) enum Queued {
    /// Taken (the step's `HolderChange::Taken`).
    Acquired,
    /// The ticket is in the line; ask again within this long.
    Waiting(Option<Duration>),
}

impl QueueView {
    fn holds(&self, token: OwnerToken) -> bool {
        matches!(self.holder, Some((holder, _)) if holder == token)
    }

    fn is_free(&self) -> bool {
        self.holder.is_none() && self.shared_left_us.is_none()
    }

    /// `token` asks for the lock with a ticket: it takes the lock if it is free and the ticket
    /// is first (or the line empty), or finds the lock handed to it; otherwise its ticket is
    /// put in the line, or refreshed, for `ticket_ttl_us`.
    pub(in crate::backend) fn acquire_queued(
        mut self,
        token: OwnerToken,
        lease_us: i64,
        ticket_ttl_us: i64,
    ) -> (Step, Queued) {
        let first = self.tickets.first().map(|ticket| ticket.token);
        if self.holds(token) || (self.is_free() && first.is_none_or(|first| first == token)) {
            self.tickets.remove(token);
            let step = Step {
                holder: HolderChange::Taken {
                    owner: token,
                    lease_us,
                },
                waited: true,
                tickets: self.tickets,
                notice: None,
            };
            return (step, Queued::Acquired);
        }
        self.tickets.put(Ticket {
            token,
            expires_us: self.now_us + ticket_ttl_us,
            lease_us,
        });
        let wait = match (self.holder, self.shared_left_us) {
            (Some((_, left)), _) | (None, Some(left)) => left,
            // Free, but promised to the first ticket: until it is used or expires.
            (None, None) => self
                .tickets
                .first()
                .map_or(0, |first| first.expires_us - self.now_us),
        };
        let step = Step {
            holder: HolderChange::Unchanged,
            waited: true,
            tickets: self.tickets,
            notice: None,
        };
        (step, Queued::Waiting(Some(from_micros(wait))))
    }

    /// `token` releases the lock, which is waited for. It goes to the first ticket: handed to
    /// it when the ticket outlives the lease it asked for, else announced for it to take. With
    /// nobody waiting it is announced free, and while readers wait for their turn (a writer
    /// released) it is freed and announced for them, whoever else waits. `None` when `token`
    /// no longer holds the lock.
    pub(in crate::backend) fn release_waited(mut self, token: OwnerToken) -> Option<Step> {
        if !self.holds(token) {
            return None;
        }
        let freed = |tickets, waited, notice| Step {
            holder: HolderChange::Freed,
            waited,
            tickets,
            notice: Some(notice),
        };
        let next = match self.tickets.first() {
            Some(&next) if !self.readers_wait => next,
            // Nobody in line, or the waiting readers' turn (a writer released): freed for
            // anybody, announced.
            _ => return Some(freed(self.tickets, false, Notice::Free)),
        };
        if next.expires_us - self.now_us < next.lease_us {
            // The ticket may expire before the lease would: it takes the lock itself, or
            // expires.
            return Some(freed(self.tickets, true, Notice::Next(next.token)));
        }
        self.tickets.remove(next.token);
        Some(Step {
            holder: HolderChange::Taken {
                owner: next.token,
                lease_us: next.lease_us,
            },
            waited: true,
            tickets: self.tickets,
            notice: Some(Notice::Handed(next.token)),
        })
    }

    /// `token`'s waiter gave up: its ticket leaves the line. Returns the step and whether a
    /// release had handed the lock to it meanwhile (the store then releases it, passing it
    /// on). A free lock is announced to the next ticket.
    pub(in crate::backend) fn leave(mut self, token: OwnerToken) -> (Step, bool) {
        self.tickets.remove(token);
        let handed = self.holds(token);
        let notice = self.is_free().then(|| {
            self.tickets
                .first()
                .map_or(Notice::Free, |next| Notice::Next(next.token))
        });
        let step = Step {
            holder: HolderChange::Unchanged,
            waited: true,
            tickets: self.tickets,
            notice,
        };
        (step, handed)
    }
}

/// A non-negative count of microseconds as a duration.
pub(in crate::backend) fn from_micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// A duration in whole microseconds, as tickets keep them.
pub(in crate::backend) fn to_micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000;

    fn view(holder: Option<OwnerToken>, tickets: &[(OwnerToken, i64)]) -> QueueView {
        let now_us = 100 * SECOND;
        let mut line = Tickets::default();
        for &(token, left) in tickets {
            line.put(Ticket {
                token,
                expires_us: now_us + left,
                lease_us: SECOND,
            });
        }
        QueueView {
            now_us,
            holder: holder.map(|holder| (holder, 5 * SECOND)),
            shared_left_us: None,
            tickets: line,
            readers_wait: false,
        }
    }

    #[test]
    fn a_release_while_readers_wait_frees_the_lock_for_them() {
        let (writer, next) = (OwnerToken::new(), OwnerToken::new());
        let waiting = QueueView {
            readers_wait: true,
            ..view(Some(writer), &[(next, 3 * SECOND)])
        };

        let step = waiting.release_waited(writer).expect("it held the lock");

        assert_eq!(
            step.holder,
            HolderChange::Freed,
            "not handed to the next writer"
        );
        assert_eq!(step.notice, Some(Notice::Free));
    }

    #[test]
    fn a_free_lock_goes_to_the_first_ticket_only() {
        let (first, second) = (OwnerToken::new(), OwnerToken::new());
        let line = [(first, 3 * SECOND), (second, 3 * SECOND)];

        let (_, answer) = view(None, &line).acquire_queued(second, SECOND, 3 * SECOND);
        assert_eq!(answer, Queued::Waiting(Some(Duration::from_secs(3))));

        let (step, answer) = view(None, &line).acquire_queued(first, SECOND, 3 * SECOND);
        assert_eq!(answer, Queued::Acquired);
        let taken = HolderChange::Taken {
            owner: first,
            lease_us: SECOND,
        };
        assert_eq!(step.holder, taken);
        assert_eq!(
            step.tickets.first().map(|ticket| ticket.token),
            Some(second)
        );
    }

    #[test]
    fn a_busy_lock_queues_the_ticket_at_the_end_once() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());

        let (step, answer) = view(Some(holder), &[]).acquire_queued(waiter, SECOND, SECOND);
        let (again, _) = QueueView {
            tickets: step.tickets,
            ..view(Some(holder), &[])
        }
        .acquire_queued(waiter, SECOND, 2 * SECOND);

        assert_eq!(answer, Queued::Waiting(Some(Duration::from_secs(5))));
        assert_eq!(again.tickets.0.len(), 1, "refreshed, not queued twice");
        assert!(again.waited);
    }

    #[test]
    fn a_release_hands_the_lock_to_a_ticket_that_outlives_its_lease() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());

        let step = view(Some(holder), &[(waiter, 3 * SECOND)])
            .release_waited(holder)
            .expect("held");

        let to_waiter = HolderChange::Taken {
            owner: waiter,
            lease_us: SECOND,
        };
        assert_eq!(step.holder, to_waiter);
        assert_eq!(step.notice, Some(Notice::Handed(waiter)));
        assert!(step.tickets.0.is_empty());
    }

    #[test]
    fn a_release_names_a_ticket_that_may_expire_first_and_frees_an_empty_line() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());

        let named = view(Some(holder), &[(waiter, SECOND / 2)]).release_waited(holder);
        let freed = view(Some(holder), &[]).release_waited(holder);
        let lost = view(Some(waiter), &[]).release_waited(holder);

        let named = named.expect("held");
        assert_eq!(named.holder, HolderChange::Freed);
        assert_eq!(named.notice, Some(Notice::Next(waiter)));
        let freed = freed.expect("held");
        assert_eq!(freed.notice, Some(Notice::Free));
        assert!(!freed.waited, "nobody waits any more");
        assert_eq!(lost, None, "somebody else holds it");
    }

    #[test]
    fn a_leaving_ticket_hands_back_a_lock_given_to_it_and_names_the_next() {
        let (holder, gone, next) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());

        let (step, handed) = view(None, &[(gone, SECOND), (next, SECOND)]).leave(gone);
        assert!(!handed);
        assert_eq!(step.notice, Some(Notice::Next(next)));

        let (step, handed) = view(Some(gone), &[(next, SECOND)]).leave(gone);
        assert!(handed, "the store releases it");
        assert_eq!(step.notice, None);

        let (step, _) = view(Some(holder), &[(gone, SECOND)]).leave(gone);
        assert_eq!((step.notice, step.tickets.0.len()), (None, 0));
    }

    #[test]
    fn expired_tickets_are_dropped() {
        let (a, b) = (OwnerToken::new(), OwnerToken::new());
        let mut tickets = view(None, &[(a, SECOND), (b, 2 * SECOND)]).tickets;

        tickets.drop_expired(101 * SECOND);

        assert_eq!(tickets.first().map(|ticket| ticket.token), Some(b));
    }
}
