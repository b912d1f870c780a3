//! Waking waiters on release, as a capability: a backend that can announce releases (Redis
//! pub/sub, PostgreSQL `LISTEN/NOTIFY`, a ZooKeeper or etcd watch) offers a [`WaitQueue`];
//! without one, waiters poll with backoff.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::waiting::WaitingRoom;
use super::{BackendError, Granted, LockRequest};
use crate::token::OwnerToken;

/// The answer to a queued attempt.
#[derive(Debug)]
#[must_use]
pub enum QueuedAttempt<L> {
    /// The lock is the caller's.
    Acquired(Granted<L>),
    /// The caller's ticket is in the lock's queue (placed, or refreshed).
    Queued {
        /// How long to wait at most before asking again: until the holder's lease runs out,
        /// or until a lock promised to the first ticket is taken or that ticket expires.
        holder_ttl: Option<Duration>,
        /// The lease the caller holds if a release hands the lock to its ticket (the room
        /// then hears [`Announcement::Handed`](super::waiting::Announcement::Handed)).
        handover: L,
    },
}

impl<L> QueuedAttempt<L> {
    /// In the queue at `handover`, behind a holder whose lease's end the store does not say
    /// (etcd's and ZooKeeper's lines: the waiter watches what is ahead of it instead).
    #[cfg(any(feature = "etcd", feature = "zookeeper"))]
    pub(crate) fn in_line_at(handover: L) -> Self {
        Self::Queued {
            holder_ttl: None,
            handover,
        }
    }
}

/// A backend's queue of waiters and the room where they are woken: the two come together, so a
/// backend (or a wrapper around one) offers both or neither.
///
/// The promise: the release of every lock taken by, or found busy by, a queued attempt, or by
/// an attempt with [`Patience::Listens`](super::Patience::Listens), is announced to the
/// [`room`](Self::room) — to the first ticket of the lock's queue when it has one (which may
/// be handed the lock), else to anybody — so that a waiter may sleep until it hears it (or
/// until the holder's lease runs out, which bounds a lost announcement).
///
/// Fair mode's waiters all ask with [`acquire_queued`](Self::acquire_queued); in notified mode
/// the first waiter of each process does, so that processes take turns.
pub trait WaitQueue<L>: Send + Sync {
    /// Where this backend's waiters wait, and its releases are announced.
    fn room(&self) -> &Arc<WaitingRoom>;

    /// Takes lock `name` if it is free and the caller's ticket is first in its queue (or the
    /// queue is empty); otherwise puts the ticket in the queue, or refreshes it, for
    /// `ticket_ttl`. A ticket that is not refreshed expires, so a crashed waiter holds up the
    /// queue at most that long. A ticket that asks again holding a lock a release handed to it
    /// gets it, with a fresh lease and fence: a lost announcement costs one wait, never the
    /// lock.
    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<L>, BackendError>>;

    /// Withdraws `token`'s ticket (its waiter gave up): the next ticket is announced if the
    /// lock is free, and a lock handed to `token` meanwhile is released.
    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
}
