//! One exclusive attempt per lock at a time from this process: a mutex's, or a writer's that
//! asks once (a writer that waits asks for itself, to keep its own place among the writers,
//! `shared_holds.rs`). An attempt creates a node before it knows whether the lock is free, and a busy
//! one deletes it again: a burst of N concurrent attempts on one lock costs the ensemble N
//! creations, N listings of up to N nodes and N − 1 deletions, all but one for nothing. So
//! while one attempt of this process is taking a lock, another waits for its answer and
//! answers as the store answered it: busy when the lock was taken (by this process) or busy,
//! the store's failure when it failed — never busy from a store that did not answer. Only the
//! head of a process's line asks the store in notified mode, for the same reason.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;

use crate::backend::BackendError;

/// The locks this process is taking exclusively right now, each with how its attempt ended
/// once it has.
#[derive(Debug, Default)]
pub(super) struct InFlight(Mutex<HashMap<String, watch::Receiver<Option<Landed>>>>);

/// How an attempt under way ended, for those that waited for it.
#[derive(Clone, Debug)]
pub(super) enum Landed {
    /// The store granted the lock (to this process's attempt) or said it is busy.
    Busy,
    /// The store failed.
    Failed(BackendError),
}

/// What an attempt on a lock does: ask the store, or wait for the attempt under way.
#[derive(Debug)]
pub(super) enum Start<'a> {
    Flies(Flight<'a>),
    Follows(watch::Receiver<Option<Landed>>),
}

impl InFlight {
    /// Starts an attempt on `name`, unless one is under way: then its landing is waited for.
    pub(super) fn start(&self, name: &str) -> Start<'_> {
        let mut names = self.names();
        if let Some(landing) = names.get(name) {
            return Start::Follows(landing.clone());
        }
        let (landed, landing) = watch::channel(None);
        names.insert(name.to_owned(), landing);
        Start::Flies(Flight {
            in_flight: self,
            name: name.to_owned(),
            landed,
        })
    }

    fn names(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<Option<Landed>>>> {
        // Every update leaves the map consistent between statements.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How an attempt that waited for another ends: `None` when that one was dropped before its
/// answer (its caller went away), and the waiter asks for itself.
pub(super) async fn landing(mut follows: watch::Receiver<Option<Landed>>) -> Option<Landed> {
    let landed = follows.wait_for(Option::is_some).await.ok()?;
    landed.clone()
}

/// An attempt under way; dropping it ends it.
#[derive(Debug)]
pub(super) struct Flight<'a> {
    in_flight: &'a InFlight,
    name: String,
    landed: watch::Sender<Option<Landed>>,
}

impl Flight<'_> {
    /// The attempt ended so: those waiting for it answer the same.
    pub(super) fn landed<T>(self, answer: &Result<T, BackendError>) {
        let landed = match answer {
            Ok(_) => Landed::Busy,
            Err(error) => Landed::Failed(error.clone()),
        };
        self.landed.send_replace(Some(landed));
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.in_flight.names().remove(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_attempt_on_a_lock_answers_as_the_first_was_answered() {
        let in_flight = InFlight::default();
        let Start::Flies(first) = in_flight.start("a") else {
            panic!("the first flies");
        };
        let Start::Follows(second) = in_flight.start("a") else {
            panic!("one at a time");
        };
        assert!(matches!(in_flight.start("b"), Start::Flies(_)), "per lock");
        first.landed::<()>(&Err(BackendError::new("down")));
        assert!(matches!(landing(second).await, Some(Landed::Failed(_))));
        assert!(
            matches!(in_flight.start("a"), Start::Flies(_)),
            "free again once it ended"
        );
    }

    #[tokio::test]
    async fn a_waiter_of_an_attempt_dropped_unanswered_asks_for_itself() {
        let in_flight = InFlight::default();
        let first = in_flight.start("a");
        let Start::Follows(second) = in_flight.start("a") else {
            panic!("one at a time");
        };
        drop(first);
        assert!(landing(second).await.is_none());
    }
}
