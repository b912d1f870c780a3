//! The operator's view of a locker's locks: who holds one and who waits, which are held, and a
//! release that frees a lock whatever its holder.

use std::future::Future;

use super::line::compose;
use super::names::validate_key;
use super::{LockError, Locker};
use crate::backend::{BackendError, Holding, Inspect, Listing, LockState};

impl<B: Inspect> Locker<B> {
    /// Who holds the lock on `key` now — each holder's label, fence, time held and lease left
    /// — and how many wait for it: those the store records (readable by any process, for any
    /// locker's locks under the same prefix), and this locker's own tasks waiting in its line
    /// behind the one that asks the store or holds the lock — so inspect through the locker
    /// the work takes its locks with to see those. Other lockers' lines are not counted.
    ///
    /// # Example
    ///
    /// ```
    /// use tower_lock::{Hold, Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    /// let worker = Locker::builder(store.clone()).holder_label("worker-1").build()?;
    /// let held = worker.lock("coupon:42").await?;
    ///
    /// let operator = Locker::new(store);
    /// let state = operator.inspect("coupon:42").await?;
    /// assert_eq!(state.holders[0].label, "worker-1");
    /// assert_eq!(state.holders[0].hold, Hold::Mutex);
    /// assert_eq!(state.holders[0].fence, held.fence());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`], or the store's failure ([`LockError::StoreUnavailable`]).
    pub async fn inspect(&self, key: &str) -> Result<LockState, LockError> {
        let name = self.name_of(key)?;
        let mut state = (self.within_store_timeout(self.backend().inspect(&name))).await?;
        state.holders = state.holders.into_iter().map(as_handed_out).collect();
        state.waiting += self.waiting_in_line(&name);
        Ok(state)
    }

    /// One page of the keys held under `key_prefix` (within this locker's prefix): at most
    /// `limit` (at least one), from `after` (the previous page's [`next`](Listing::next)) on. The store looks
    /// at a bounded number of its entries per page, so a store with a million locks is never
    /// scanned at once; a page may come back shorter than `limit` and still have a next.
    ///
    /// # Errors
    ///
    /// The store's failure ([`LockError::StoreUnavailable`]).
    pub async fn held_keys(
        &self,
        key_prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, LockError> {
        let prefix = &self.settings().prefix;
        let under = format!("{prefix}{key_prefix}");
        let names = self.backend().held_names(&under, after, limit.max(1));
        let mut listing = self.within_store_timeout(names).await?;
        for name in &mut listing.names {
            name.drain(..prefix.len());
        }
        Ok(listing)
    }

    /// Frees the lock on `key` whatever its holders — for an operator whose holder is stuck —
    /// and wakes its waiters. Safe where the store fences: the next holder's fence is above
    /// every freed holder's, so a data store that checks fences refuses their late writes; each
    /// freed holder finds its lease lost at its next renewal ([`LockError::LeaseLost`], its
    /// work stopped under [`OnLost::Abort`](crate::OnLost::Abort)); where the store records
    /// who freed it (memory, Redis), each freed holder's process logs this locker's
    /// [label](crate::LockerBuilder::holder_label) as `released_by`. Logged at WARN here too,
    /// naming the key, the freed holders and this locker's label. Returns the holders it
    /// freed (none: the lock was free).
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`], or the store's failure ([`LockError::StoreUnavailable`]).
    pub async fn force_release(&self, key: &str) -> Result<Vec<Holding>, LockError> {
        let name = self.name_of(key)?;
        let by = self.settings().holder;
        let freed = (self.within_store_timeout(self.backend().force_release(&name, by))).await?;
        let freed: Vec<Holding> = freed.into_iter().map(as_handed_out).collect();
        if !freed.is_empty() {
            let holders: Vec<String> = (freed.iter())
                .map(|holder| match holder.fence {
                    Some(fence) => format!("{} ({}, fence {fence})", holder.label, holder.hold),
                    None => format!("{} ({})", holder.label, holder.hold),
                })
                .collect();
            tracing::warn!(
                key,
                released_by = self.settings().holder,
                holders = holders.join(", "),
                "lock released by an operator: its holders lose their leases"
            );
        }
        Ok(freed)
    }

    /// The full lock name of `key`, once checked.
    fn name_of(&self, key: &str) -> Result<String, LockError> {
        let settings = self.settings();
        validate_key(key, settings.max_key_len)?;
        Ok(format!("{}{key}", settings.prefix))
    }

    /// Runs `call` within the store timeout.
    async fn within_store_timeout<T>(
        &self,
        call: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<T, LockError> {
        let limit = self.settings().store_timeout;
        match tokio::time::timeout(limit, call).await {
            Ok(answer) => answer.map_err(LockError::StoreUnavailable),
            Err(_) => Err(LockError::StoreUnavailable(BackendError::timed_out(limit))),
        }
    }
}

/// `holder` with its fence as lockers hand fences out: the store's, composed with the first
/// place of a run (holds handed on within the holder's process follow it, up to 255 above).
fn as_handed_out(holder: Holding) -> Holding {
    let fence = compose(holder.fence, 0);
    holder.fence(fence)
}
