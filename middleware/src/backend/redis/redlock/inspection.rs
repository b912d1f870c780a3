//! The operator's view of RedLock: every master asked, a holder counted where a majority of
//! them records it.

use std::collections::HashMap;

use super::{RELEASE_LIMIT, RedlockBackend, Vote, failures, no_quorum};
use crate::backend::{BackendError, Holding, Inspect, Listing, LockState};
use crate::token::OwnerToken;

impl RedlockBackend {
    /// Each answering master's answer to `call`, or the error when fewer than a majority
    /// answered.
    async fn answered_by_a_quorum<T, F>(
        &self,
        name: &str,
        call: impl Fn(usize) -> F,
    ) -> Result<Vec<T>, BackendError>
    where
        F: Future<Output = Result<T, BackendError>>,
    {
        let calls = (0..self.masters.len()).map(call);
        let votes = self.votes(RELEASE_LIMIT, calls).await;
        let failed = failures(&votes);
        if self.masters.len() - failed.len() < self.quorum() {
            return Err(no_quorum(name, self.quorum(), self.masters.len(), &failed));
        }
        let answers = votes.into_iter().filter_map(|vote| match vote {
            Vote::Answered(answer) => Some(answer),
            Vote::Failed(_) => None,
        });
        Ok(answers.collect())
    }
}

/// RedLock's holders: a holder is one that a majority of the masters records (each master
/// keeps the record as a Redis lock does; RedLock does not fence). Waiters poll, so none is
/// counted. Listing pages through the first master that answers: a lock held on a majority
/// is on it unless that master missed the grant. The operator's release runs on every master
/// that answers; a majority must.
impl Inspect for RedlockBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        let answers = (self
            .answered_by_a_quorum(name, |master| self.masters[master].backend.recorded(name)))
        .await?;
        let mut seen: HashMap<OwnerToken, (usize, Holding)> = HashMap::new();
        for (recorded, _) in answers {
            for holder in recorded {
                seen.entry(holder.handle).or_insert((0, holder.holding)).0 += 1;
            }
        }
        let holders = (seen.into_values())
            .filter(|(masters, _)| *masters >= self.quorum())
            .map(|(_, holding)| holding)
            .collect();
        Ok(LockState::new(holders, 0))
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        // The cursor is `<master>:<that master's cursor>`: a listing stays on one master.
        let (first, after) = match after.and_then(|after| after.split_once(':')) {
            Some((master, after)) => (master.parse().unwrap_or(0), Some(after)),
            None => (0, None),
        };
        let mut failed = Vec::new();
        for (index, master) in self.masters.iter().enumerate().skip(first) {
            let after = after.filter(|_| index == first);
            match master.backend.held_names(prefix, after, limit).await {
                Ok(listing) => {
                    let next = listing.next.map(|next| format!("{index}:{next}"));
                    return Ok(Listing::new(listing.names, next));
                }
                Err(error) => failed.push(format!("{}: {error}", master.address)),
            }
        }
        Err(BackendError::new(format!(
            "RedLock: no master answered the listing: {}",
            failed.join("; ")
        )))
    }

    async fn force_release(&self, name: &str, by: &str) -> Result<Vec<Holding>, BackendError> {
        let state = self.inspect(name).await?;
        self.answered_by_a_quorum(name, |master| {
            self.masters[master].backend.force_release(name, by)
        })
        .await?;
        Ok(state.holders)
    }
}
