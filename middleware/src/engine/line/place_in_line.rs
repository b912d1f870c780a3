//! A task's place in its lock's line: waiting to be handed the lock or told to ask the store,
//! and what it is told when its wait ends.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::{Instant, timeout_at};

use super::{Baton, Contender, Lines, Side, Turn};
use crate::backend::BackendError;

/// What gives back a lock handed to a task that left before it heard.
pub(crate) type GiveBack<L> = Box<dyn FnOnce(Baton<L>) + Send>;

/// A task waiting in its lock's line. Dropped, it leaves the line; a turn it was told
/// meanwhile is passed on (a handed lock through its `give_back`).
pub(crate) struct PlaceInLine<'a, L> {
    pub(super) lines: &'a Lines<L>,
    pub(super) name: &'a str,
    pub(super) side: Side,
    pub(super) id: u64,
    pub(super) told: Option<oneshot::Receiver<Turn<L>>>,
    pub(super) give_back: Option<GiveBack<L>>,
}

/// How a task's wait in line ended.
#[derive(Debug)]
pub(crate) enum Told<'a, L> {
    /// The lock is its own (or, a reader's, shared with it).
    Handed(Baton<L>),
    /// It asks the store now.
    Ask(Contender<'a, L>),
    /// The store failed the task asking it.
    Failed(BackendError),
    /// Its wait ran out while the lock was busy: held by a run of this locker whose lease is
    /// certain for `holder_ttl` more, or said busy by the store to the task asking it, lately.
    Busy { holder_ttl: Option<Duration> },
    /// Its wait ran out, and the store has not said lately that the lock is busy: the task
    /// asks it once itself before it answers (so that it never calls busy a lock that only a
    /// silent store kept from it).
    Unheard,
}

/// How a look at a waiter's line turned out.
enum Look {
    /// Still waiting; look again at this instant at the latest (the run's lease ends).
    Waiting(Option<Instant>),
    /// It left the line to ask the store: the run it waited for had lapsed.
    Asks,
    /// It is not in the line any more: its turn was sent.
    Told,
}

impl<'a, L> PlaceInLine<'a, L> {
    /// Waits for its turn until `deadline`, and how it ended. The exclusive run lapsing (its
    /// lease ran out unrenewed) is its turn to ask the store, when nobody else of this locker
    /// asks. At the deadline (it has left the line then), the lock counts as busy if the store
    /// said so within `lately`, or a run of this locker holds it.
    pub(crate) async fn turn(mut self, deadline: Instant, lately: Duration) -> Told<'a, L> {
        let turn = loop {
            let wake = match self.look() {
                Look::Waiting(lease_ends) => lease_ends.map_or(deadline, |ends| ends.min(deadline)),
                Look::Asks => break Some(Turn::Ask),
                Look::Told => break self.told.as_mut().and_then(|told| told.try_recv().ok()),
            };
            let Some(told) = self.told.as_mut() else {
                break None;
            };
            match timeout_at(wake, told).await {
                Ok(Ok(turn)) => break Some(turn),
                // A waiter's sender is only dropped once it sent (or with the line, which keeps
                // its waiters).
                Ok(Err(_)) => break None,
                Err(_) if Instant::now() >= deadline => break self.leave(),
                Err(_) => {}
            }
        };
        self.told = None;
        match turn {
            Some(turn) => self.told(turn),
            None => self.standing(lately),
        }
    }

    /// What the line knows of the lock, for a task whose wait ran out: busy — held by a run of
    /// this locker with a lease not run out, or said busy by the store within `lately` — or
    /// not heard of lately.
    fn standing(&self, lately: Duration) -> Told<'a, L> {
        let mut lines = self.lines.lines();
        let Some(line) = lines.get_mut(self.name) else {
            return Told::Unheard;
        };
        if self.side == Side::Exclusive
            && let Some(run) = line.run
        {
            let left = run.lease_ends.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                return Told::Busy {
                    holder_ttl: Some(left),
                };
            }
        }
        match line.queue(self.side).said_busy_within(lately) {
            true => Told::Busy { holder_ttl: None },
            false => Told::Unheard,
        }
    }

    /// Looks at the line: whether this task still waits (and until when the run it waits for
    /// is known to hold), or was told its turn, or — the run having lapsed — asks now.
    fn look(&self) -> Look {
        let mut lines = self.lines.lines();
        let Some(line) = lines.get_mut(self.name) else {
            return Look::Told;
        };
        let queue = line.queue(self.side);
        let Some(place) = queue.waiters.iter().position(|waiter| waiter.id == self.id) else {
            return Look::Told;
        };
        if self.side == Side::Shared {
            // Readers wait for the one of them asking the store, which has a deadline of its own.
            return Look::Waiting(None);
        }
        let lease_ends = line.run.map(|run| run.lease_ends);
        let lapsed = lease_ends.is_some_and(|ends| ends <= Instant::now());
        if !lapsed {
            return Look::Waiting(lease_ends);
        }
        line.run = None;
        if line.exclusive.contending {
            return Look::Waiting(None);
        }
        line.exclusive.waiters.remove(place);
        line.exclusive.contending = true;
        Look::Asks
    }

    /// Leaves the line: the turn told meanwhile, if any.
    fn leave(&mut self) -> Option<Turn<L>> {
        let mut lines = self.lines.lines();
        if let Some(line) = lines.get_mut(self.name) {
            let waiters = &mut line.queue(self.side).waiters;
            let before = waiters.len();
            waiters.retain(|waiter| waiter.id != self.id);
            if waiters.len() < before {
                if line.is_idle() {
                    lines.remove(self.name);
                }
                return None;
            }
        }
        drop(lines);
        // Not in the line any more: a turn was sent to it, under the lines' lock.
        self.told.as_mut()?.try_recv().ok()
    }

    fn told(&self, turn: Turn<L>) -> Told<'a, L> {
        match turn {
            Turn::Handed(baton) => Told::Handed(baton),
            Turn::Ask => Told::Ask(Contender::new(self.lines, self.name, self.side)),
            Turn::Failed(error) => Told::Failed(error),
        }
    }
}

impl<L> Drop for PlaceInLine<'_, L> {
    fn drop(&mut self) {
        if self.told.is_none() {
            return;
        }
        match self.leave() {
            None | Some(Turn::Failed(_)) => {}
            // The contender it was made lets the next waiter ask.
            Some(Turn::Ask) => drop(self.told(Turn::Ask)),
            Some(Turn::Handed(baton)) => {
                tracing::debug!(
                    lock = self.name,
                    "the waiter of a handed lock left; passing it on"
                );
                if let Some(give_back) = self.give_back.take() {
                    give_back(baton);
                }
            }
        }
    }
}
