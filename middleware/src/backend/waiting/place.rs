//! A waiter's place in the room, by its ticket: the engine's side of the room.

use std::sync::Arc;

use tokio::sync::Notify;

use super::WaitingRoom;
use crate::backend::FencingToken;
use crate::token::OwnerToken;

/// A waiter's place in the room; leaving it (drop) stops its wake-ups.
#[derive(Debug)]
pub(crate) struct Place {
    pub(super) room: Arc<WaitingRoom>,
    pub(super) name: String,
    pub(super) ticket: OwnerToken,
    pub(super) wake: Arc<Notify>,
}

impl Place {
    /// The store answered this waiter's queued attempt, so its ticket is in the store's queue:
    /// as a head of line, it sleeps through announcements naming others.
    pub(crate) fn enqueued(&self) {
        self.room.enqueued(&self.name, self.ticket);
    }

    /// The announcements this waiter listens to. Arm the `notified()` future (with `enable`)
    /// before asking the store, so that an announcement in between is not missed.
    pub(crate) fn released(&self) -> &Notify {
        &self.wake
    }

    /// If a release handed the lock to this waiter's ticket, its fence (once): the waiter
    /// holds the lock.
    pub(crate) fn handed(&self) -> Option<Option<FencingToken>> {
        self.room.take_handed(&self.name, self.ticket)
    }

    /// Whether announcements for this lock reach us now; if not, retry on a timer.
    pub(crate) fn announcements_live(&self) -> bool {
        self.room.is_live(&self.name)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.room.leave(&self.name, self.ticket);
    }
}
