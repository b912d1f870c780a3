//! The SQL backends' queue of waiters, decided on the lock's row by the queue's rules
//! (`backend::store_support::ticket_rules`, which the memory backend follows too).
//!
//! The tickets live in the lock's row (`tickets`, text), so every queue operation reads one row
//! and writes it back as one atomic step (MySQL: in a transaction holding the row's lock;
//! PostgreSQL: a write that applies only to the row version read): the same atomicity as the
//! Redis backend's scripts. Times are the database's, in microseconds since the epoch; the
//! row's fence counter gives a lock taken its fence.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{AcquireSlots, acquire_detached};
use crate::backend::store_support::ticket_rules::{
    HolderChange, QueueView, Queued, Step, Ticket, Tickets, to_micros,
};
use crate::backend::waiting::{Announcement, WaitingRoom};
use crate::backend::{
    BackendError, FencingToken, Granted, Hold, LockBackend, LockRequest, QueuedAttempt, TokenLease,
    WaitQueue,
};
use crate::token::OwnerToken;

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
        .decide_on_row(name, |row| match row.queue.clone().release_waited(token) {
            Some(step) => (Some(row.change(step).0), true),
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
    let (lease_us, ticket_us) = (to_micros(request.ttl), to_micros(ticket_ttl));
    let (queued, fence) = backend
        .decide_on_row(name, |row| {
            let queue = row.queue.clone();
            let (step, queued) = queue.acquire_queued(request.token, lease_us, ticket_us);
            let (change, fence) = row.change(step);
            let change = RowChange {
                taker: matches!(queued, Queued::Acquired).then_some(request.holder),
                ..change
            };
            (Some(change), (queued, fence))
        })
        .await?;
    let lease = TokenLease::new(request.token, Hold::Mutex).labelled(request.holder);
    Ok(match queued {
        Queued::Acquired => QueuedAttempt::Acquired(Granted { lease, fence }),
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
            let (step, handed) = row.queue.clone().leave(token);
            (Some(row.change(step).0), handed)
        })
        .await?;
    if handed {
        release_through_queue(backend, name, token).await?;
    }
    Ok(())
}

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
}

/// A lock's row as the queue operations see it: the queue, and the last fencing token issued.
#[derive(Clone, Debug)]
pub(in crate::backend) struct RowState {
    pub(in crate::backend) queue: QueueView,
    pub(in crate::backend) fence: i64,
}

impl HolderChange {
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
        let queue = QueueView {
            now_us,
            holder: owner.zip(left_us),
            shared_left_us,
            tickets: Tickets::parse(&tickets, now_us),
            readers_wait,
        };
        Self { queue, fence }
    }

    /// The row's change for the rules' `step`: a lock taken gets the next fence.
    fn change(&self, step: Step) -> (RowChange, Option<FencingToken>) {
        let taken = matches!(step.holder, HolderChange::Taken { .. });
        let fence = if taken { self.fence + 1 } else { self.fence };
        let issued = taken.then(|| FencingToken::new(u64::try_from(fence).unwrap_or(0)));
        let change = RowChange {
            holder: step.holder,
            taker: None,
            fence,
            waited: step.waited,
            tickets: step.tickets,
            announce: step.notice.map(|notice| notice.announcement(issued)),
        };
        (change, issued)
    }
}

/// What a queue operation writes to the row, and announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::backend) struct RowChange {
    pub(in crate::backend) holder: HolderChange,
    /// The label of a holder that takes the lock itself; `None` for one a release hands it
    /// to, which records its label with its first renewal.
    pub(in crate::backend) taker: Option<&'static str>,
    pub(in crate::backend) fence: i64,
    /// Whether the lock's releases go through the queue (and are announced).
    pub(in crate::backend) waited: bool,
    pub(in crate::backend) tickets: Tickets,
    pub(in crate::backend) announce: Option<Announcement>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000;

    #[test]
    fn tickets_survive_their_column_and_expired_ones_are_dropped() {
        let (a, b) = (OwnerToken::new(), OwnerToken::new());
        let ticket = |token, left| Ticket {
            token,
            expires_us: 100 * SECOND + left,
            lease_us: SECOND,
        };
        let tickets = Tickets(vec![ticket(a, SECOND), ticket(b, 2 * SECOND)]);

        let column = tickets.column();

        assert_eq!(Tickets::parse(&column, 100 * SECOND), tickets);
        let later = Tickets::parse(&column, 101 * SECOND + 1);
        assert_eq!(later.0.iter().map(|ticket| ticket.token).next(), Some(b));
        assert_eq!(Tickets::parse("", 0), Tickets::default());
        assert_eq!(Tickets::parse("junk;1 2", 0), Tickets::default());
    }

    #[test]
    fn a_ticket_handed_the_lock_gets_the_rows_next_fence_in_its_announcement() {
        let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());
        let row = RowState {
            queue: QueueView {
                now_us: 100 * SECOND,
                holder: Some((holder, SECOND)),
                shared_left_us: None,
                tickets: Tickets(vec![Ticket {
                    token: waiter,
                    expires_us: 103 * SECOND,
                    lease_us: SECOND,
                }]),
                readers_wait: false,
            },
            fence: 7,
        };

        let step = row.queue.clone().release_waited(holder).expect("held");
        let (change, issued) = row.change(step);

        assert_eq!((change.fence, issued), (8, Some(FencingToken::new(8))));
        let handed = Announcement::Handed {
            to: waiter,
            fence: Some(FencingToken::new(8)),
        };
        assert_eq!(change.announce, Some(handed));
    }
}
