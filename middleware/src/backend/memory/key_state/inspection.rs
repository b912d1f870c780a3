//! A lock name's state as an operator sees it, and the operator's release.

use std::num::NonZeroU32;

use tokio::time::Instant;

use super::{Entry, FenceCounter, KeyState};
use crate::backend::waiting::Announcement;
use crate::backend::{Hold, Holding, LockState};
use crate::token::OwnerToken;

impl KeyState {
    /// Its live holders and the waiters it records, at `now`.
    pub(in crate::backend::memory) fn state(&mut self, now: Instant) -> LockState {
        self.forget_expired(now);
        LockState::new(self.holdings(now), self.waiting(now))
    }

    fn holdings(&self, now: Instant) -> Vec<Holding> {
        let exclusive = self.live_holder(now).map(|holder| {
            let lease_left = Some(holder.expires_at - now);
            Holding::new(holder.hold, holder.label, now - holder.since, lease_left)
                .fence(Some(holder.fence))
        });
        let permits = NonZeroU32::new(self.permit_limit).unwrap_or(NonZeroU32::MIN);
        let shared = (self.readers.iter().map(|entry| (Hold::Read, entry)))
            .chain(
                self.permits
                    .iter()
                    .map(|entry| (Hold::Permit { permits }, entry)),
            )
            .map(|(hold, entry)| holding(hold, entry, now));
        exclusive.into_iter().chain(shared).collect()
    }

    /// Tickets in line, writers waiting for their turn, readers claiming theirs.
    fn waiting(&self, now: Instant) -> usize {
        let now_us = self.now_us(now);
        let tickets = (self.tickets.0.iter())
            .filter(|ticket| ticket.expires_us > now_us)
            .count();
        tickets + self.writers.len() + self.claims.len()
    }

    /// Frees the name whatever its holders: the exclusive holder's release, as its own would be
    /// (a ticket in line gets the lock next), and every shared hold dropped.
    pub(in crate::backend::memory) fn force_free(
        &mut self,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> Freed {
        self.forget_expired(now);
        let holders = self.holdings(now);
        let exclusive = self
            .live_holder(now)
            .map(|holder| (holder.token, holder.expires_at));
        let shared =
            (self.readers.iter().chain(&self.permits)).map(|entry| (entry.token, entry.expires_at));
        let leases: Vec<(OwnerToken, Instant)> = exclusive.into_iter().chain(shared).collect();
        let announcement =
            exclusive.and_then(|(token, _)| self.release_exclusive(token, fences, now));
        let any_shared = !(self.readers.is_empty() && self.permits.is_empty());
        self.readers.clear();
        self.permits.clear();
        Freed {
            holders,
            leases,
            announcement: announcement.or(any_shared.then_some(Announcement::Free)),
        }
    }
}

/// What an operator's release freed: the holders as it saw them, each freed lease's token and
/// the instant it would have expired, and what to announce.
pub(in crate::backend::memory) struct Freed {
    pub(in crate::backend::memory) holders: Vec<Holding>,
    pub(in crate::backend::memory) leases: Vec<(OwnerToken, Instant)>,
    pub(in crate::backend::memory) announcement: Option<Announcement>,
}

fn holding(hold: Hold, entry: &Entry, now: Instant) -> Holding {
    Holding::new(
        hold,
        entry.label,
        now - entry.since,
        Some(entry.expires_at - now),
    )
}
