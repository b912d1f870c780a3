//! The SQL backends' queue of waiters, decided in Rust on the lock's row.
//!
//! The tickets live in the lock's row (`tickets`, text), so every queue operation reads one row
//! and writes it back as one atomic step (MySQL: in a transaction holding the row's lock;
//! PostgreSQL: a write that applies only to the row version read): the same atomicity as the
//! Redis backend's scripts, with the same rules (`fair.lua`, `release.lua`). Times are the
//! database's, in microseconds since the epoch.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{AcquireSlots, acquire_detached};
use crate::OwnerToken;
use crate::backend::waiting::{Announcement, WaitingRoom};
use crate::backend::{
    BackendError, BoxFuture, FencingToken, Granted, Hold, LockBackend, LockRequest, QueuedAttempt,
    TokenLease, WaitQueue,
};

/// A SQL backend whose queue operations decide on the lock's row, one atomic step each; its
/// [`WaitQueue`] follows.
pub(in crate::backend) trait QueueRows:
    LockBackend<Lease = TokenLease> + Clone
{
    /// Where its waiters wait (announced, or silent).
    fn waiting_room(&self) -> &Arc<WaitingRoom>;

    /// The slots its detached acquires take (`sql::acquire_detached`).
    fn acquire_slots(&self) -> &AcquireSlots;

    /// Runs `decide` on `name`'s row (made first if missing) and writes the change it
    /// returns (if any), announcing what the change says where the store can, as one atomic
    /// step: no other change to the row comes between the state `decide` saw and the write.
    /// A store may run `decide` more than once (optimistically, again on a row that changed
    /// meanwhile); the answer is the one from the state written over.
    fn decide_on_row<T: Send>(
        &self,
        name: &str,
        decide: impl Fn(RowState) -> (Option<RowChange>, T) + Send + Sync,
    ) -> impl Future<Output = Result<T, BackendError>> + Send;
}

impl<B: QueueRows> WaitQueue<TokenLease> for B {
    fn room(&self) -> &Arc<WaitingRoom> {
        self.waiting_room()
    }

    /// Runs in a task of its own, like every acquire (`sql::acquire_detached`).
    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<TokenLease>, BackendError>> {
        Box::pin(acquire_detached(
            self,
            self.acquire_slots(),
            name,
            request,
            move |backend, name, request| async move {
                acquire_with_ticket(&backend, &name, request, ticket_ttl).await
            },
        ))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(leave_line(self, name, token))
    }
}

/// Releases `token`'s exclusive lease on a lock that is waited for: to the first ticket —
/// handed to it when the ticket outlives the lease it asked for, else announced for it to
/// take — or, with nobody in line (or readers waiting for their turn), freed and announced.
/// Whether the lease was still the token's.
pub(in crate::backend) async fn release_through_queue<B: QueueRows>(
    backend: &B,
    name: &str,
    token: OwnerToken,
) -> Result<bool, BackendError> {
    backend
        .decide_on_row(name, |row| match row.release_waited(token) {
            Some(change) => (Some(change), true),
            None => (None, false),
        })
        .await
}

/// [`WaitQueue::acquire_queued`](crate::backend::WaitQueue::acquire_queued) on the row.
async fn acquire_with_ticket<B: QueueRows>(
    backend: &B,
    name: &str,
    request: LockRequest,
    ticket_ttl: Duration,
) -> Result<QueuedAttempt<TokenLease>, BackendError> {
    let (lease_us, ticket_us) = (micros_of(request.ttl), micros_of(ticket_ttl));
    let queued = backend
        .decide_on_row(name, |row| {
            let (change, queued) = row.acquire_queued(request.token, lease_us, ticket_us);
            (Some(change), queued)
        })
        .await?;
    let lease = TokenLease::new(request.token, Hold::Mutex);
    Ok(match queued {
        Queued::Acquired(fence) => QueuedAttempt::Acquired(Granted {
            lease,
            fence: Some(fence),
        }),
        Queued::Waiting(holder_ttl) => QueuedAttempt::Queued {
            holder_ttl,
            handover: lease,
        },
    })
}

/// [`WaitQueue::leave_queue`](crate::backend::WaitQueue::leave_queue) on the row: a lock a
/// release handed to the leaving ticket meanwhile is released (passed on).
async fn leave_line<B: QueueRows>(
    backend: &B,
    name: &str,
    token: OwnerToken,
) -> Result<(), BackendError> {
    let handed = backend
        .decide_on_row(name, |row| {
            let (change, handed) = row.leave(token);
            (Some(change), handed)
        })
        .await?;
    if handed {
        release_through_queue(backend, name, token).await?;
    }
    Ok(())
}

/// A duration in whole microseconds, as tickets keep them.
fn micros_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// One waiter's place in a lock's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) struct Ticket {
    token: OwnerToken,
    /// When the ticket expires unless its waiter asks again.
    expires_us: i64,
    /// The lease its waiter asked for: a release may hand it the lock for this long.
    lease_us: i64,
}

/// A lock's queue of live tickets, in arrival order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::backend) struct Tickets(Vec<Ticket>);

impl Tickets {
    /// Reads the `tickets` column (`"<token> <expiry µs> <lease µs>"`, joined by `;`),
    /// dropping tickets expired at `now_us` and anything unreadable.
    pub(in crate::backend) fn parse(column: &str, now_us: i64) -> Self {
        let ticket = |text: &str| {
            let mut parts = text.split(' ');
            let ticket = Ticket {
                token: OwnerToken::parse(parts.next()?)?,
                expires_us: parts.next()?.parse().ok()?,
                lease_us: parts.next()?.parse().ok()?,
            };
            (ticket.expires_us > now_us).then_some(ticket)
        };
        Self(column.split(';').filter_map(ticket).collect())
    }

    /// The `tickets` column.
    pub(in crate::backend) fn column(&self) -> String {
        let tickets: Vec<String> = self
            .0
            .iter()
            .map(|ticket| format!("{} {} {}", ticket.token, ticket.expires_us, ticket.lease_us))
            .collect();
        tickets.join(";")
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

/// A lock's row as the queue operations see it.
#[derive(Clone, Debug)]
pub(in crate::backend) struct RowState {
    /// The database's clock.
    pub(in crate::backend) now_us: i64,
    /// The exclusive holder and how long its lease has left, while it runs.
    pub(in crate::backend) holder: Option<(OwnerToken, i64)>,
    /// How long until the first live shared hold (reader or permit) ends, if any.
    pub(in crate::backend) shared_left_us: Option<i64>,
    /// The last fencing token issued.
    pub(in crate::backend) fence: i64,
    pub(in crate::backend) tickets: Tickets,
    /// Whether readers wait for the next turn (their claims): a release is theirs.
    pub(in crate::backend) readers_wait: bool,
}

/// Who holds the lock after a queue operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) enum Holder {
    /// As before.
    Unchanged,
    /// `owner`, for a fresh lease of `lease_us`.
    Taken { owner: OwnerToken, lease_us: i64 },
    /// Nobody.
    Freed,
}

impl Holder {
    /// The row-writing statements' parameters: the action (0 keeps the holder, 1 takes the
    /// lock, 2 frees it), the new owner's token and its lease in µs.
    pub(in crate::backend) fn columns(self) -> (i32, Option<String>, i64) {
        match self {
            Self::Unchanged => (0, None, 0),
            Self::Taken { owner, lease_us } => (1, Some(owner.to_string()), lease_us),
            Self::Freed => (2, None, 0),
        }
    }
}

/// A lock's row as the SQL reads it: the database's now in µs, the live exclusive owner and
/// its µs left, µs until the first shared hold ends, fence, tickets, whether readers wait.
pub(in crate::backend) type RowColumns = (
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
    i64,
    String,
    bool,
);

impl RowState {
    /// The state read as [`RowColumns`].
    pub(in crate::backend) fn from_columns(
        (now_us, owner, left_us, shared_left_us, fence, tickets, readers_wait): RowColumns,
    ) -> Self {
        let owner = owner.as_deref().and_then(OwnerToken::parse);
        Self {
            now_us,
            holder: owner.zip(left_us),
            shared_left_us,
            fence,
            tickets: Tickets::parse(&tickets, now_us),
            readers_wait,
        }
    }
}

/// What a queue operation writes to the row, and announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::backend) struct RowChange {
    pub(in crate::backend) holder: Holder,
    pub(in crate::backend) fence: i64,
    /// Whether the lock's releases go through the queue (and are announced).
    pub(in crate::backend) waited: bool,
    pub(in crate::backend) tickets: Tickets,
    pub(in crate::backend) announce: Option<Announcement>,
}

/// The answer to a queued acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) enum Queued {
    /// Taken, with this fence.
    Acquired(FencingToken),
    /// The ticket is in the line; ask again within this long.
    Waiting(Option<Duration>),
}

impl RowState {
    fn fence_after(&self) -> FencingToken {
        FencingToken::new(u64::try_from(self.fence + 1).unwrap_or(0))
    }

    /// `token` asks for the lock with a ticket: it takes the lock if it is free and the ticket
    /// is first (or the line empty), or finds the lock handed to it; otherwise its ticket is
    /// put in the line, or refreshed, for `ticket_ttl_us`.
    pub(in crate::backend) fn acquire_queued(
        mut self,
        token: OwnerToken,
        lease_us: i64,
        ticket_ttl_us: i64,
    ) -> (RowChange, Queued) {
        let mine = matches!(self.holder, Some((holder, _)) if holder == token);
        let free = self.holder.is_none() && self.shared_left_us.is_none();
        let first = self.tickets.first().map(|ticket| ticket.token);
        if mine || (free && first.is_none_or(|first| first == token)) {
            self.tickets.remove(token);
            let fence = self.fence_after();
            let change = RowChange {
                holder: Holder::Taken {
                    owner: token,
                    lease_us,
                },
                fence: self.fence + 1,
                waited: true,
                tickets: self.tickets,
                announce: None,
            };
            return (change, Queued::Acquired(fence));
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
        let change = RowChange {
            holder: Holder::Unchanged,
            fence: self.fence,
            waited: true,
            tickets: self.tickets,
            announce: None,
        };
        (change, Queued::Waiting(Some(micros(wait))))
    }

    /// `token` releases the lock, which is waited for. It goes to the first ticket: handed to
    /// it when the ticket outlives the lease it asked for, else announced for it to take. With
    /// nobody waiting it is announced free, and while readers wait for their turn (a writer
    /// released) it is freed and announced for them, whoever else waits. Returns the change;
    /// `None` when `token` no longer holds the lock.
    pub(in crate::backend) fn release_waited(mut self, token: OwnerToken) -> Option<RowChange> {
        if !matches!(self.holder, Some((holder, _)) if holder == token) {
            return None;
        }
        if self.readers_wait {
            // The waiting readers' turn (a writer released): freed for them, announced.
            return Some(RowChange {
                holder: Holder::Freed,
                fence: self.fence,
                waited: false,
                tickets: self.tickets,
                announce: Some(Announcement::Free),
            });
        }
        let Some(&next) = self.tickets.first() else {
            return Some(RowChange {
                holder: Holder::Freed,
                fence: self.fence,
                waited: false,
                tickets: self.tickets,
                announce: Some(Announcement::Free),
            });
        };
        if next.expires_us - self.now_us < next.lease_us {
            // The ticket may expire before the lease would: it takes the lock itself, or
            // expires.
            return Some(RowChange {
                holder: Holder::Freed,
                fence: self.fence,
                waited: true,
                tickets: self.tickets,
                announce: Some(Announcement::Next(next.token)),
            });
        }
        self.tickets.remove(next.token);
        let fence = self.fence_after();
        let change = RowChange {
            holder: Holder::Taken {
                owner: next.token,
                lease_us: next.lease_us,
            },
            fence: self.fence + 1,
            waited: true,
            tickets: self.tickets,
            announce: Some(Announcement::Handed {
                to: next.token,
                fence: Some(fence),
            }),
        };
        Some(change)
    }

    /// `token`'s waiter gave up: its ticket leaves the line. Returns the change and whether a
    /// release had handed the lock to it meanwhile (the caller then releases it, passing it
    /// on). A free lock is announced to the next ticket.
    pub(in crate::backend) fn leave(mut self, token: OwnerToken) -> (RowChange, bool) {
        self.tickets.remove(token);
        let handed = matches!(self.holder, Some((holder, _)) if holder == token);
        let free = self.holder.is_none() && self.shared_left_us.is_none();
        let announce = free.then(|| {
            self.tickets
                .first()
                .map_or(Announcement::Free, |next| Announcement::Next(next.token))
        });
        let change = RowChange {
            holder: Holder::Unchanged,
            fence: self.fence,
            waited: true,
            tickets: self.tickets,
            announce,
        };
        (change, handed)
    }
}

/// A non-negative count of microseconds as a duration.
fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000;

    fn row(holder: Option<OwnerToken>, tickets: &[(OwnerToken, i64)]) -> RowState {
        let now_us = 100 * SECOND;
        let mut line = Tickets::default();
        for &(token, left) in tickets {
            line.put(Ticket {
                token,
                expires_us: now_us + left,
                lease_us: SECOND,
            });
        }
        RowState {
            now_us,
            holder: holder.map(|holder| (holder, 5 * SECOND)),
            shared_left_us: None,
            fence: 7,
            tickets: line,
            readers_wait: false,
        }
    }

    #[test]
    fn tickets_survive_their_column_and_expired_ones_are_dropped() {
        let (a, b) = (OwnerToken::new(), OwnerToken::new());
        let tickets = row(None, &[(a, SECOND), (b, 2 * SECOND)]).tickets;

        let column = tickets.column();

        assert_eq!(Tickets::parse(&column, 100 * SECOND), tickets);
        let later = Tickets::parse(&column, 101 * SECOND + 1);
        assert_eq!(later.first().map(|ticket| ticket.token), Some(b));
        assert_eq!(Tickets::parse("", 0), Tickets::default());
        assert_eq!(Tickets::parse("junk;1 2", 0), Tickets::default());
    }

    #[test]
    fn a_release_while_readers_wait_frees_the_lock_for_them() {
        let (writer, next) = (OwnerToken::new(), OwnerToken::new());
        let waiting = RowState {
            readers_wait: true,
            ..row(Some(writer), &[(next, 3 * SECOND)])
        };

        let change = waiting.release_waited(writer).expect("it held the lock");

        assert_eq!(
            change.holder,
            Holder::Freed,
            "not handed to the next writer"
        );
        assert_eq!(change.announce, Some(Announcement::Free));
    }

    #[test]
    fn a_free_lock_goes_to_the_first_ticket_only() {
        let (first, second) = (OwnerToken::new(), OwnerToken::new());
        let line = [(first, 3 * SECOND), (second, 3 * SECOND)];

        let (_, answer) = row(None, &line).acquire_queued(second, SECOND, 3 * SECOND);
        assert_eq!(answer, Queued::Waiting(Some(Duration::from_secs(3))));

        let (change, answer) = row(None, &line).acquire_queued(first, SECOND, 3 * SECOND);
        assert_eq!(answer, Queued::Acquired(FencingToken::new(8)));
        assert_eq!(
            change.tickets.first().map(|ticket| ticket.token),
            Some(second)
        );
    }

    #[test]
    fn a_busy_lock_queues_the_ticket_at_the_end_once() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());

        let (change, answer) = row(Some(holder), &[]).acquire_queued(waiter, SECOND, SECOND);
        let (again, _) = RowState {
            tickets: change.tickets,
            ..row(Some(holder), &[])
        }
        .acquire_queued(waiter, SECOND, 2 * SECOND);

        assert_eq!(answer, Queued::Waiting(Some(Duration::from_secs(5))));
        assert_eq!(again.tickets.0.len(), 1, "refreshed, not queued twice");
        assert!(again.waited);
    }

    #[test]
    fn a_release_hands_the_lock_to_a_ticket_that_outlives_its_lease() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());

        let change = row(Some(holder), &[(waiter, 3 * SECOND)])
            .release_waited(holder)
            .expect("held");

        let to_waiter = Holder::Taken {
            owner: waiter,
            lease_us: SECOND,
        };
        assert_eq!((change.holder, change.fence), (to_waiter, 8));
        let handed = Announcement::Handed {
            to: waiter,
            fence: Some(FencingToken::new(8)),
        };
        assert_eq!(change.announce, Some(handed));
    }

    #[test]
    fn a_release_names_a_ticket_that_may_expire_first_and_frees_an_empty_line() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());

        let named = row(Some(holder), &[(waiter, SECOND / 2)]).release_waited(holder);
        let freed = row(Some(holder), &[]).release_waited(holder);
        let lost = row(Some(waiter), &[]).release_waited(holder);

        let named = named.expect("held");
        assert_eq!(named.holder, Holder::Freed);
        assert_eq!(named.announce, Some(Announcement::Next(waiter)));
        let freed = freed.expect("held");
        assert_eq!(freed.announce, Some(Announcement::Free));
        assert!(!freed.waited, "nobody waits any more");
        assert_eq!(lost, None, "somebody else holds it");
    }

    #[test]
    fn a_leaving_ticket_hands_back_a_lock_given_to_it_and_names_the_next() {
        let (holder, gone, next) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());

        let (change, handed) = row(None, &[(gone, SECOND), (next, SECOND)]).leave(gone);
        assert!(!handed);
        assert_eq!(change.announce, Some(Announcement::Next(next)));

        let (change, handed) = row(Some(gone), &[(next, SECOND)]).leave(gone);
        assert!(handed, "the caller releases it");
        assert_eq!(change.announce, None);

        let (change, _) = row(Some(holder), &[(gone, SECOND)]).leave(gone);
        assert_eq!((change.announce, change.tickets.0.len()), (None, 0));
    }
}
