//! What a release announcement says about the lock's next holder.

use crate::OwnerToken;
use crate::backend::FencingToken;

/// What a release announcement says about the lock's next holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Announcement {
    /// Anybody may take it: every waiter for the lock is woken.
    Free,
    /// Only the waiter holding this ticket may take it next: only it is woken (and the first
    /// local waiter that holds no ticket yet, so that it takes one).
    Next(OwnerToken),
    /// The release handed the lock to this ticket: its waiter holds it, with this fence, on
    /// hearing the announcement (the lease of [`QueuedAttempt::Queued`]'s `handover`).
    ///
    /// [`QueuedAttempt::Queued`]: crate::backend::QueuedAttempt::Queued
    Handed {
        /// The ticket that now holds the lock.
        to: OwnerToken,
        /// Its fencing token, when the backend fences.
        fence: Option<FencingToken>,
    },
}
