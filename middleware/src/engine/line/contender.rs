//! The one task of a locker that asks the store for a lock, for the tasks waiting behind it.

use tokio::time::Instant;

use super::{Lines, Run, RunId, Side};
use crate::backend::{BackendError, FencingToken};

/// The task of a locker asking the store for a lock. Dropped without having won it
/// ([`won`](Self::won), or `won_read`), it lets the next waiter ask.
#[derive(Debug)]
pub(crate) struct Contender<'a, L> {
    pub(super) lines: &'a Lines<L>,
    pub(super) name: &'a str,
    pub(super) side: Side,
}

impl<'a, L> Contender<'a, L> {
    pub(super) fn new(lines: &'a Lines<L>, name: &'a str, side: Side) -> Self {
        Self { lines, name, side }
    }

    /// The store granted the lock with `store_fence`, its lease certain until `lease_ends`: a
    /// run starts, this hold its first (its fence is [`compose`]d with 0, as every hold's
    /// outside a run).
    pub(crate) fn won(self, store_fence: Option<FencingToken>, lease_ends: Instant) -> RunId {
        let id = RunId(self.lines.next_id());
        let mut lines = self.lines.lines();
        let line = lines.entry(self.name.to_owned()).or_default();
        line.exclusive.contending = false;
        line.run = Some(Run {
            id,
            store_fence,
            holds: 1,
            lease_ends,
        });
        line.call_contender(Side::Exclusive, self.lines.hands_on());
        drop(lines);
        std::mem::forget(self);
        id
    }

    /// The store failed this task (an error, or no answer within the store timeout): every
    /// task waiting behind it hears the same failure now, instead of asking in turn, each
    /// after the last one's failure, until their waits run out. A task that comes later asks
    /// for itself.
    pub(crate) fn failed(self, error: &BackendError) {
        let mut lines = self.lines.lines();
        if let Some(line) = lines.get_mut(self.name) {
            let queue = line.queue(self.side);
            queue.contending = false;
            queue.fail_everyone(error);
            if line.is_idle() {
                lines.remove(self.name);
            }
        }
        drop(lines);
        std::mem::forget(self);
    }
}

impl<L: Send + Sync> crate::engine::acquire::HearsBusy for Contender<'_, L> {
    fn said_busy(&self) {
        if let Some(line) = self.lines.lines().get_mut(self.name) {
            line.queue(self.side).said_busy = Some(Instant::now());
        }
    }
}

impl<L> Drop for Contender<'_, L> {
    fn drop(&mut self) {
        let mut lines = self.lines.lines();
        let Some(line) = lines.get_mut(self.name) else {
            return;
        };
        line.queue(self.side).contending = false;
        line.call_contender(self.side, self.lines.hands_on());
        if line.is_idle() {
            lines.remove(self.name);
        }
    }
}
