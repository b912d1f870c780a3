//! A waiter's place in the room: in its lock's local line, or holding a ticket. The engine's
//! side of the room.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::WaitingRoom;
use crate::OwnerToken;
use crate::backend::FencingToken;

/// How a waiter is in the room.
#[derive(Debug)]
pub(super) enum Member {
    /// In its lock's local line; woken by `turn` when it becomes the head.
    InLine { id: u64, turn: Arc<Notify> },
    /// Holding a ticket (fair mode, and shared shapes): woken when its ticket is named.
    Ticket(OwnerToken),
}

/// A waiter's place in the room; leaving it (drop) passes the turn on at once.
#[derive(Debug)]
pub(crate) struct Place {
    pub(super) room: Arc<WaitingRoom>,
    pub(super) name: String,
    pub(super) member: Member,
    pub(super) released: Arc<Notify>,
}

impl Place {
    /// Resolves when this waiter is at the head of its local line (at once for a ticket).
    pub(crate) async fn turn(&self) {
        let Member::InLine { id, turn } = &self.member else {
            return;
        };
        while !self.room.is_head(&self.name, *id) {
            turn.notified().await;
        }
    }

    /// The store answered this waiter's queued attempt, so its ticket is in the store's queue:
    /// as head of its line, it sleeps through announcements naming others.
    pub(crate) fn enqueued(&self) {
        if let Member::InLine { id, .. } = &self.member {
            self.room.head_enqueued(&self.name, *id);
        }
    }

    /// The announcements this waiter listens to. Arm the `notified()` future (with `enable`)
    /// before asking the store, so that an announcement in between is not missed.
    pub(crate) fn released(&self) -> &Notify {
        &self.released
    }

    /// If a release handed the lock to `token`, its fence (once): the waiter holds the lock.
    /// With it, when the handing write was sent, if this process sent it (the lease counts
    /// from no earlier than that).
    pub(crate) fn handed(
        &self,
        token: OwnerToken,
    ) -> Option<(Option<FencingToken>, Option<Instant>)> {
        self.room.take_handed(&self.name, token)
    }

    /// Whether announcements for this lock reach us now; if not, retry on a timer.
    pub(crate) fn announcements_live(&self) -> bool {
        self.room.is_live(&self.name)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.room.leave(&self.name, &self.member);
    }
}
