//! Readers of a locker sharing one store read hold: one reader asks the store, the readers of
//! the locker that come while its answer is on its way wait for it, and when the store grants
//! the lock they all hold it with that one grant (a *read run*). The last of them to leave
//! releases the store's hold. N readers of a phase cost the store one acquire and one release
//! instead of N of each.
//!
//! A reader that comes while a run is held does not join it: it asks the store (or waits for
//! the reader asking), which bars it while a writer waits — so a writer waits for the readers
//! already in, never for a stream of newcomers of a process that keeps the lock read.
//!
//! Readers are not fenced, so a shared hold's fence is none; each reader renews the shared
//! lease on its own schedule.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Baton, Contender, GiveBack, Lines, PlaceInLine, RunId, Side};

/// A store read hold shared by readers of the locker.
#[derive(Debug)]
pub(super) struct ReadRun {
    pub(super) id: RunId,
    /// Readers holding it now.
    holders: u32,
}

/// How a reader enters its lock's line.
pub(crate) enum ReadEntry<'a, L> {
    /// It asks the store; the locker's readers that come meanwhile wait for its answer.
    Contend(Contender<'a, L>),
    /// It waits for the answer of the reader asking the store.
    Wait(PlaceInLine<'a, L>),
    /// It asks the store alone: it will not wait, and another reader is asking.
    Alone,
}

impl<L> Lines<L> {
    /// A reader asks for lock `name`: it asks the store, or (when it `waits`) waits for the
    /// reader of the locker asking. A hold shared with it after it left goes to `give_back`.
    pub(crate) fn enter_read<'a>(
        &'a self,
        name: &'a str,
        waits: bool,
        give_back: GiveBack<L>,
    ) -> ReadEntry<'a, L> {
        let mut lines = self.lines();
        let line = lines.entry(name.to_owned()).or_default();
        if !line.shared.contending {
            line.shared.contending = true;
            return ReadEntry::Contend(Contender::new(self, name, Side::Shared));
        }
        if !waits {
            return ReadEntry::Alone;
        }
        ReadEntry::Wait(self.wait_in(line, (name, Side::Shared), give_back))
    }

    /// A reader of run `id` of `name` leaves it: whether it was the last, who releases the
    /// store's hold (also when the run is unknown).
    pub(crate) fn leave_read(&self, name: &str, id: RunId) -> bool {
        let mut lines = self.lines();
        let Some(line) = lines.get_mut(name) else {
            return true;
        };
        let Some(place) = line.reading.iter().position(|run| run.id == id) else {
            return true;
        };
        let run = &mut line.reading[place];
        run.holders = run.holders.saturating_sub(1);
        if run.holders > 0 {
            return false;
        }
        line.reading.remove(place);
        if line.is_idle() {
            lines.remove(name);
        }
        true
    }
}

impl<L> Contender<'_, L> {
    /// The store granted this reader the lock with `leases`, sent at `renewed_at` and certain
    /// until `deadline`: shared with every reader of the locker waiting for this answer, in a
    /// read run — its id, unless nobody waited.
    pub(crate) fn won_read(
        self,
        leases: &Arc<Vec<L>>,
        (renewed_at, deadline): (Instant, Instant),
    ) -> Option<RunId> {
        let id = RunId(self.lines.next_id());
        let mut run = ReadRun { id, holders: 1 };
        let share = || Baton {
            run: id,
            leases: Arc::clone(leases),
            fence: None,
            renewed_at,
            deadline,
        };
        let mut lines = self.lines.lines();
        let line = lines.entry(self.name.to_owned()).or_default();
        line.shared.contending = false;
        while line.shared.hand_to_first(share()).is_ok() {
            run.holders += 1;
        }
        let shared = run.holders > 1;
        if shared {
            line.reading.push(run);
        } else if line.is_idle() {
            lines.remove(self.name);
        }
        drop(lines);
        std::mem::forget(self);
        shared.then_some(id)
    }
}

/// A reader of a locker waiting for a lock: while it waits, a write lock is not handed on
/// within the locker (readers wait at most one writer's hold behind the writers already in).
#[derive(Debug)]
pub(crate) struct WaitingReader<'a, L> {
    lines: &'a Lines<L>,
    name: &'a str,
}

impl<L> Lines<L> {
    /// A reader of this locker waits for lock `name` until the guard is dropped.
    pub(crate) fn reader_waits<'a>(&'a self, name: &'a str) -> WaitingReader<'a, L> {
        self.lines().entry(name.to_owned()).or_default().readers += 1;
        WaitingReader { lines: self, name }
    }
}

impl<L> Drop for WaitingReader<'_, L> {
    fn drop(&mut self) {
        let mut lines = self.lines.lines();
        let Some(line) = lines.get_mut(self.name) else {
            return;
        };
        line.readers = line.readers.saturating_sub(1);
        if line.is_idle() {
            lines.remove(self.name);
        }
    }
}
