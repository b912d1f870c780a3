//! Handoffs inside one process: while a waiter of a lock's line holds the lock, its release
//! hands the lock straight to the head of the line, and tells it here.
//!
//! The head of the line need not ask the store while a waiter of its own line holds the lock:
//! that holder's release (the SQL backends' `release_through_queue`) hands the lock to the head
//! in the same write that releases it — unless another process's ticket is first in the
//! store's queue — and wakes it here, without an announcement through the store. A release
//! that hands the lock to another process's ticket puts the head's ticket in the queue in the
//! same write (so the head keeps its process's turn), and wakes it all the same, as does a
//! release that fails. So a handoff between two waiters of one process costs the release
//! alone. The head asks the store itself once a release has not handed the lock to it, and
//! when the holder's lease may have ended.

use std::time::Duration;

use tokio::time::Instant;

use super::{Handed, WaitingRoom};
use crate::OwnerToken;
use crate::backend::{FencingToken, lease_deadline};

/// The head of a line that has asked the store for the lock (so it withdraws its ticket, and
/// passes on a lock handed to it, if it gives up): who, and on what terms it asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadyHead {
    pub(crate) token: OwnerToken,
    /// The lease it asks for.
    pub(crate) lease: Duration,
    /// How long its ticket lives in the store's queue unless renewed.
    pub(crate) ticket_ttl: Duration,
}

/// What releases in this process may hand over to a line.
#[derive(Debug, Default)]
pub(super) struct Handoffs {
    /// The head of the line, once it asked the store: a release in this process may hand the
    /// lock to it.
    pub(super) ready: Option<ReadyHead>,
    /// The lock, while a waiter of the line holds it.
    pub(super) local: Option<LocalHold>,
}

/// A lock held by a waiter of its line.
#[derive(Clone, Copy, Debug)]
pub(super) struct LocalHold {
    token: OwnerToken,
    /// Until when its lease certainly runs (the store cannot have given the lock to anybody
    /// else before), unless it is released.
    until: Instant,
}

impl WaitingRoom {
    /// The head of `name`'s line asks the store for the lock on `terms`: from now on a release
    /// in this process may hand the lock to it, or put its ticket in the store's queue. Returns
    /// how long the lease of the lock's holder has left at least, when a waiter of this line
    /// holds it: then the head need not ask the store, that holder's release (even one under
    /// way) hands the lock over or wakes it.
    pub(crate) fn head_asks(&self, name: &str, terms: ReadyHead) -> Option<Duration> {
        let mut names = self.names();
        let waiters = names.get_mut(name)?;
        if waiters
            .line
            .front()
            .is_none_or(|(_, head, _)| *head != terms.token)
        {
            return None;
        }
        waiters.handoffs.ready = Some(terms);
        let local = waiters.handoffs.local?;
        let left = local.until.saturating_duration_since(Instant::now());
        (local.token != terms.token && !left.is_zero()).then_some(left)
    }

    /// The head of `name`'s line, owning `token`, took the lock when it asked, in a write
    /// sent at `sent`.
    pub(crate) fn head_took(&self, name: &str, token: OwnerToken, sent: Instant) {
        if let Some(waiters) = self.names().get_mut(name) {
            waiters.handoffs.hold(token, sent);
        }
    }

    /// `token` starts releasing lock `name`; the release's write is sent after this.
    pub(crate) fn begin_release<'a>(&'a self, name: &'a str, token: OwnerToken) -> Release<'a> {
        Release {
            room: self,
            name,
            token,
            sent: Instant::now(),
            ended: false,
        }
    }

    /// See [`Release::finish`]; without a handoff when the release failed.
    fn end_release(
        &self,
        release: &Release<'_>,
        handed: Option<(OwnerToken, Option<FencingToken>)>,
    ) -> Option<OwnerToken> {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(release.name) else {
            return handed.map(|(to, _)| to);
        };
        let was_local = waiters
            .handoffs
            .local
            .take_if(|local| local.token == release.token)
            .is_some();
        let Some((to, fence)) = handed else {
            // The head may have relied on this release (it held the lock through the line): it
            // asks the store itself now. Where no announcement will come, everyone does.
            if !self.hears_announcements() {
                waiters.wake_everyone();
            } else if was_local {
                waiters.released.notify_one();
            }
            return None;
        };
        if !waiters
            .handoffs
            .ready
            .is_some_and(|ready| ready.token == to)
        {
            return Some(to);
        }
        waiters.handed = Some(Handed {
            to,
            fence,
            sent: Some(release.sent),
        });
        waiters.handoffs.hold(to, release.sent);
        waiters.released.notify_one();
        None
    }
}

impl Handoffs {
    /// `token`, the ready head, holds the lock from a write sent at `sent`.
    fn hold(&mut self, token: OwnerToken, sent: Instant) {
        if let Some(ready) = self.ready.filter(|ready| ready.token == token) {
            self.local = Some(LocalHold {
                token,
                until: lease_deadline(sent, ready.lease),
            });
        }
    }
}

/// A release under way of a lock that waiters of this process may wait for. Dropped without
/// [`finish`](Self::finish) (the release failed), it wakes the line's head to ask the store.
#[derive(Debug)]
pub(crate) struct Release<'a> {
    room: &'a WaitingRoom,
    name: &'a str,
    token: OwnerToken,
    pub(super) sent: Instant,
    ended: bool,
}

impl Release<'_> {
    /// The head of the line this release may hand the lock to (or queue a ticket for), and
    /// its terms.
    pub(crate) fn head(&self) -> Option<ReadyHead> {
        let names = self.room.names();
        let ready = names.get(self.name)?.handoffs.ready?;
        (ready.token != self.token).then_some(ready)
    }

    /// The release is written: it handed the lock to `handed` (the [`head`](Self::head), with
    /// this fence), which is woken to take it, or to nobody of this process. Returns the token
    /// of a head it was handed to that has left the line meanwhile: the caller releases the
    /// lock for it, passing it on.
    pub(crate) fn finish(
        mut self,
        handed: Option<(OwnerToken, Option<FencingToken>)>,
    ) -> Option<OwnerToken> {
        self.ended = true;
        self.room.end_release(&self, handed)
    }
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.room.end_release(self, None);
        }
    }
}
