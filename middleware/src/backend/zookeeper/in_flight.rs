//! One exclusive attempt (a mutex's, a writer's) per lock at a time from this process. An
//! attempt creates a node before it knows whether the lock is free, and a busy one deletes it
//! again (a writer's then creates its intent): a burst of N concurrent attempts on one lock
//! costs the ensemble N creations, N listings of up to N nodes and N − 1 deletions, all but
//! one for nothing, and leaves N − 1 intents that every later listing carries. So while one
//! attempt of this process is taking a lock, another is answered busy at once (the lock is
//! being taken, by this process) — as in notified mode only the head of a process's line asks
//! the store.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

/// The locks this process is taking exclusively right now.
#[derive(Debug, Default)]
pub(super) struct InFlight(Mutex<HashSet<String>>);

impl InFlight {
    /// Starts an attempt on `name`, unless one is under way: its end is the guard's drop.
    pub(super) fn start(&self, name: &str) -> Option<Flight<'_>> {
        self.names().insert(name.to_owned()).then(|| Flight {
            in_flight: self,
            name: name.to_owned(),
        })
    }

    fn names(&self) -> MutexGuard<'_, HashSet<String>> {
        // Every update leaves the set consistent between statements.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An attempt under way; dropping it ends it.
#[derive(Debug)]
pub(super) struct Flight<'a> {
    in_flight: &'a InFlight,
    name: String,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.in_flight.names().remove(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_attempt_on_a_lock_waits_for_the_first_to_end() {
        let in_flight = InFlight::default();
        let first = in_flight.start("a").expect("the first");
        assert!(in_flight.start("a").is_none(), "one at a time");
        assert!(in_flight.start("b").is_some(), "per lock");
        drop(first);
        assert!(in_flight.start("a").is_some(), "free again once it ended");
    }
}
