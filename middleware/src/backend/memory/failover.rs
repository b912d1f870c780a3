//! A failover that forgets recent writes, for a simulation of a store that replicates
//! asynchronously (Redis with replicas): a replica is a copy of the store as it was at one
//! moment, and a failover puts the store back to it, as promoting that replica does.

use std::collections::BTreeSet;

use tokio::time::Instant;

use super::{KeyState, MemoryBackend, State};

/// What a replica holds: the store as it was when the replica last caught up — every lock
/// name's state, and the fencing counter.
#[derive(Clone, Debug)]
pub struct Replica(State);

impl MemoryBackend {
    /// A replica that has caught up with the store now.
    pub fn replica(&self) -> Replica {
        Replica(self.lock_state().clone())
    }

    /// Fails over to `replica`: the store forgets every write made since the replica caught
    /// up — grants, renewals, releases, tickets, fences issued — and tells the `on_change`
    /// listener who holds each lock name now. It announces nothing, as a promoted replica does
    /// not. The names whose state it changed.
    ///
    /// # Example
    ///
    /// ```
    /// use tower_lock::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_lock::LockError> {
    /// let store = MemoryBackend::new();
    /// let replica = store.replica();
    /// let held = Locker::new(store.clone()).lock("a").await?;
    /// assert_eq!(store.fail_over_to(&replica), ["lock:a"]);
    /// assert_eq!(store.held_locks(), 0, "the grant came after the replica caught up");
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    pub fn fail_over_to(&self, replica: &Replica) -> Vec<String> {
        let now = Instant::now();
        let mut state = self.lock_state();
        let names: BTreeSet<String> = (state.keys.keys())
            .chain(replica.0.keys.keys())
            .cloned()
            .collect();
        let before = std::mem::replace(&mut *state, replica.0.clone());
        let empty = KeyState::default();
        let mut changed = Vec::new();
        for name in names {
            let now_held = state.keys.get(&name).unwrap_or(&empty);
            self.changed(&name, now_held, now);
            if before.keys.get(&name).unwrap_or(&empty) != now_held {
                changed.push(name);
            }
        }
        changed
    }
}
