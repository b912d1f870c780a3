//! A lock name's state as an operator sees it, and the operator's release.

use std::num::NonZeroU32;

use tokio::time::Instant;

use super::{Entry, FenceCounter, KeyState};
use crate::backend::waiting::Announcement;
use crate::backend::{Hold, Holding, LockState};

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
    /// (a ticket in line gets the lock next), and every shared hold dropped. The freed holders,
    /// and what to announce.
    pub(in crate::backend::memory) fn force_free(
        &mut self,
        fences: &mut FenceCounter,
        now: Instant,
    ) -> (Vec<Holding>, Option<Announcement>) {
        self.forget_expired(now);
        let freed = self.holdings(now);
        let holder = self.live_holder(now).map(|holder| holder.token);
        let announcement = holder.and_then(|token| self.release_exclusive(token, fences, now));
        let shared = !(self.readers.is_empty() && self.permits.is_empty());
        self.readers.clear();
        self.permits.clear();
        (freed, announcement.or(shared.then_some(Announcement::Free)))
    }
}

fn holding(hold: Hold, entry: &Entry, now: Instant) -> Holding {
    Holding::new(
        hold,
        entry.label,
        now - entry.since,
        Some(entry.expires_at - now),
    )
}
