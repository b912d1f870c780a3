//! The per-process line: a locker's tasks waiting for one lock line up here, and only one of
//! them asks the store at a time (the contender). N local waiters cost the store what one does,
//! and a newcomer never jumps the line.
//!
//! Cohort handoff (lock cohorting: Dice, Marathe and Shavit, PPoPP 2012): a mutex or write lock
//! released while another task of the same locker waits for it is handed straight to that task
//! — no store round trip — up to the locker's `max_local_run` holds in a row (a *run*); then it
//! is released in the store, and the first waiter asks for it there, behind the other
//! processes' waiters. Without handing on (`max_local_run(1)`), the next task asks while the
//! lock is still held, so that its place in the store's queue is taken when the lock is
//! released.
//!
//! Readers share (`reading.rs`): one store read hold serves every reader of the locker that
//! waited for the store's answer, while holds are handed on (`max_local_run` above 1).
//!
//! Per lock name, a [`Line`]: the run of exclusive holds of this locker (its store grant's
//! fence, how many holds it has had, until when its lease is known to run), its runs of
//! readers, and two queues — exclusive (mutex, writers) and shared (readers) — each with
//! whether a task is asking the store and the tasks waiting for the lock to be handed to them
//! or for their turn to ask. A run whose lease lapsed (its holder stalled past it, unrenewed)
//! no longer holds its waiters back: the first of them ends it and asks the store, as another
//! process would.
//!
//! A store failure is every waiting task's answer: a contender the store failed (an error, or
//! no answer within the store timeout) tells each task waiting in its queue the same failure at
//! once, instead of letting them ask the store one after another, each after the last one's
//! failure, until their waits run out. A task whose wait runs out calls the lock busy only on a
//! store's word: the store said so to its queue's contender within the store timeout, or a run
//! of the locker holds the lock; otherwise it asks the store once itself.
//!
//! Fences: a run's holds are numbered from 0, and a hold's fence is the store's fence times
//! 256 plus its number ([`compose`]), so they increase strictly within a run, and every hold of
//! a later store grant (larger store fence) is above all of them. Every fence the engine hands
//! out is composed this way, so lockers with and without handing on agree.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{BackendError, FencingToken};
use reading::ReadRun;

mod contender;
mod place_in_line;
mod reading;

pub(crate) use contender::Contender;
pub(crate) use place_in_line::{GiveBack, PlaceInLine, Told};
pub(crate) use reading::ReadEntry;

/// How many holds a run may have at most: their numbers fit the fence's low byte.
pub(crate) const MAX_LOCAL_RUN: u32 = 256;

/// The fence of hold number `hold` of a run whose store grant was fenced `store`.
///
/// A store's tokens stay far below 2⁵⁶ (etcd revisions, ZooKeeper zxids of fewer than 2²⁴
/// elections, counters); a larger one saturates.
pub(crate) fn compose(store: Option<FencingToken>, hold: u32) -> Option<FencingToken> {
    let store = store?.get();
    let composed = store
        .checked_mul(MAX_LOCAL_RUN.into())
        .map_or(u64::MAX, |base| base + u64::from(hold));
    Some(FencingToken::new(composed))
}

/// The lines of one locker, by lock name.
#[derive(Debug)]
pub(crate) struct Lines<L> {
    lines: Mutex<HashMap<String, Line<L>>>,
    /// Holds in a row before a release goes to the store; 1 turns handoffs off.
    max_run: u32,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Line<L> {
    /// The run of exclusive holds of this locker, while one of its tasks holds the lock.
    run: Option<Run>,
    /// Mutex and writer tasks.
    exclusive: Queue<L>,
    /// Reader tasks.
    shared: Queue<L>,
    /// The locker's runs of readers sharing a store read hold, the newest last.
    reading: Vec<ReadRun>,
    /// Readers of this locker waiting for the lock: a write lock is not handed on past them.
    readers: usize,
}

/// The tasks of a locker waiting for one lock in one way: whether one of them is asking the
/// store (the contender), the others, in the order they came, and when the store last told a
/// contender that the lock is busy.
#[derive(Debug)]
struct Queue<L> {
    contending: bool,
    waiters: VecDeque<Waiter<L>>,
    said_busy: Option<Instant>,
}

/// Which queue of its line a task waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Exclusive,
    Shared,
}

/// A run of holds that started with one store grant.
#[derive(Clone, Copy, Debug)]
struct Run {
    id: RunId,
    store_fence: Option<FencingToken>,
    /// Holds so far, the current one included.
    holds: u32,
    /// Until when its lease certainly runs, as last confirmed.
    lease_ends: Instant,
}

/// Which run a hold belongs to: a holder whose run was ended (its lease lapsed) cannot hand
/// on or end the run after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunId(u64);

#[derive(Debug)]
struct Waiter<L> {
    id: u64,
    turn: oneshot::Sender<Turn<L>>,
}

/// What a waiting task is told.
#[derive(Debug)]
pub(crate) enum Turn<L> {
    /// The lock is handed (or, to a reader, shared) with it.
    Handed(Baton<L>),
    /// It asks the store now.
    Ask,
    /// The store failed the task asking it: the lock cannot be had now, and nobody knows who
    /// holds it.
    Failed(BackendError),
}

/// A held lock passed from one task to the next, or shared with a reader: its run, the
/// store's leases of the run, the fence of the new hold, and the lease as it was last known
/// (the new holder renews it from there).
#[derive(Debug)]
pub(crate) struct Baton<L> {
    pub(crate) run: RunId,
    pub(crate) leases: Arc<Vec<L>>,
    pub(crate) fence: Option<FencingToken>,
    pub(crate) renewed_at: Instant,
    pub(crate) deadline: Instant,
}

impl<L> Default for Queue<L> {
    fn default() -> Self {
        Self {
            contending: false,
            waiters: VecDeque::new(),
            said_busy: None,
        }
    }
}

impl<L> Queue<L> {
    fn is_idle(&self) -> bool {
        !self.contending && self.waiters.is_empty()
    }

    /// Tells the first waiter still there to ask the store, unless a task asks already.
    fn call_contender(&mut self) {
        if self.contending {
            return;
        }
        while let Some(waiter) = self.waiters.pop_front() {
            if waiter.turn.send(Turn::Ask).is_ok() {
                self.contending = true;
                return;
            }
        }
    }

    /// Hands `baton` to the first waiter still there: `Err` with the baton when nobody is.
    fn hand_to_first(&mut self, mut baton: Baton<L>) -> Result<(), Baton<L>> {
        while let Some(waiter) = self.waiters.pop_front() {
            match waiter.turn.send(Turn::Handed(baton)) {
                Ok(()) => return Ok(()),
                Err(Turn::Handed(back)) => baton = back,
                Err(_) => unreachable!("the turn sent was a handoff"),
            }
        }
        Err(baton)
    }

    /// Tells every waiter that the store failed: none of them waits for a turn that the store
    /// cannot give.
    fn fail_everyone(&mut self, error: &BackendError) {
        for waiter in self.waiters.drain(..) {
            waiter.turn.send(Turn::Failed(error.clone())).ok();
        }
    }

    /// How many tasks wait here (not the one asking the store), leaving out those that gave up.
    fn waiting(&self) -> usize {
        let waits = |waiter: &&Waiter<L>| !waiter.turn.is_closed();
        self.waiters.iter().filter(waits).count()
    }

    /// Whether the store said the lock is busy within `recently`.
    fn said_busy_within(&self, recently: Duration) -> bool {
        self.said_busy.is_some_and(|at| at.elapsed() <= recently)
    }
}

impl<L> Default for Line<L> {
    fn default() -> Self {
        Self {
            run: None,
            exclusive: Queue::default(),
            shared: Queue::default(),
            reading: Vec::new(),
            readers: 0,
        }
    }
}

impl<L> Line<L> {
    fn is_idle(&self) -> bool {
        self.run.is_none()
            && self.exclusive.is_idle()
            && self.shared.is_idle()
            && self.reading.is_empty()
            && self.readers == 0
    }

    fn queue(&mut self, side: Side) -> &mut Queue<L> {
        match side {
            Side::Exclusive => &mut self.exclusive,
            Side::Shared => &mut self.shared,
        }
    }

    /// The current run, if it is `id`.
    fn run(&mut self, id: RunId) -> Option<&mut Run> {
        self.run.as_mut().filter(|run| run.id == id)
    }

    /// Tells the first waiter of `side` still there to ask the store, unless a task asks for
    /// the lock already — or, exclusive, holds it in a run that may hand it on (`hands_on`):
    /// without handing on, the next task asks while the lock is held, so that its place in the
    /// store's queue is taken when the lock is released.
    fn call_contender(&mut self, side: Side, hands_on: bool) {
        if side == Side::Exclusive && self.run.is_some() && hands_on {
            return;
        }
        self.queue(side).call_contender();
    }
}

/// How a task enters its lock's line.
pub(crate) enum Entry<'a, L> {
    /// Nobody of this locker asks for the lock: this task asks the store — at once with its
    /// place in the store's queue when a task of the locker holds the lock (`behind_a_holder`:
    /// a first look would find it busy).
    Contend {
        contender: Contender<'a, L>,
        behind_a_holder: bool,
    },
    /// It waits for a handoff or for its turn to ask.
    Wait(PlaceInLine<'a, L>),
}

impl<L> Lines<L> {
    /// The lines of a locker handing a lock on locally up to `max_run` holds in a row.
    pub(crate) fn new(max_run: u32) -> Self {
        Self {
            lines: Mutex::default(),
            max_run,
            next_id: AtomicU64::new(0),
        }
    }

    /// Whether locks are handed on (and read holds shared) at all.
    pub(crate) fn hands_on(&self) -> bool {
        self.max_run > 1
    }

    fn lines(&self) -> MutexGuard<'_, HashMap<String, Line<L>>> {
        // Every update leaves the map consistent between statements.
        self.lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// How many of the locker's tasks wait in lock `name`'s line, behind the one asking the
    /// store or holding the lock: for a mutex, a write lock or a read lock.
    pub(crate) fn waiting(&self, name: &str) -> usize {
        let lines = self.lines();
        lines
            .get(name)
            .map_or(0, |line| line.exclusive.waiting() + line.shared.waiting())
    }

    /// A mutex or writer task asks for lock `name`: it contends in the store, or waits here. A
    /// lock handed to it after it left goes to `give_back`.
    pub(crate) fn enter<'a>(&'a self, name: &'a str, give_back: GiveBack<L>) -> Entry<'a, L> {
        let mut lines = self.lines();
        let line = lines.entry(name.to_owned()).or_default();
        if !line.exclusive.contending && (line.run.is_none() || !self.hands_on()) {
            line.exclusive.contending = true;
            return Entry::Contend {
                contender: Contender::new(self, name, Side::Exclusive),
                behind_a_holder: line.run.is_some(),
            };
        }
        Entry::Wait(self.wait_in(line, (name, Side::Exclusive), give_back))
    }

    /// Queues a task in `line` (of lock `name`) on `side`.
    fn wait_in<'a>(
        &'a self,
        line: &mut Line<L>,
        (name, side): (&'a str, Side),
        give_back: GiveBack<L>,
    ) -> PlaceInLine<'a, L> {
        let id = self.next_id();
        let (turn, told) = oneshot::channel();
        line.queue(side).waiters.push_back(Waiter { id, turn });
        PlaceInLine {
            lines: self,
            name,
            side,
            id,
            told: Some(told),
            give_back: Some(give_back),
        }
    }

    /// Hands `baton` (with its run and lease; its fence is set here) to the next waiter of
    /// `name`'s line, unless the run has had its holds or was ended, or nobody waits — or, for
    /// a write lock (`shared_with_readers`), a reader of this locker waits for it: then it is
    /// given back.
    pub(crate) fn hand_on(
        &self,
        name: &str,
        mut baton: Baton<L>,
        shared_with_readers: bool,
    ) -> Result<(), Baton<L>> {
        let mut lines = self.lines();
        let Some(line) = lines.get_mut(name) else {
            return Err(baton);
        };
        if shared_with_readers && line.readers > 0 {
            return Err(baton);
        }
        let max_run = self.max_run;
        let Some(run) = line.run(baton.run).filter(|run| run.holds < max_run) else {
            return Err(baton);
        };
        baton.fence = compose(run.store_fence, run.holds);
        run.lease_ends = baton.deadline;
        let id = run.id;
        line.exclusive.hand_to_first(baton)?;
        if let Some(run) = line.run(id) {
            run.holds += 1;
        }
        Ok(())
    }

    /// A holder of run `id` renewed its lease, now certain until `lease_ends`.
    pub(crate) fn renewed(&self, name: &str, id: RunId, lease_ends: Instant) {
        if let Some(run) = self.lines().get_mut(name).and_then(|line| line.run(id)) {
            run.lease_ends = lease_ends;
        }
    }

    /// Run `id` of `name` ends: its last holder releases the lock in the store. The first
    /// waiter asks the store next. A run ended already (its lease lapsed) is left alone.
    pub(crate) fn end_run(&self, name: &str, id: RunId) {
        let mut lines = self.lines();
        let Some(line) = lines.get_mut(name) else {
            return;
        };
        if line.run(id).is_none() {
            return;
        }
        line.run = None;
        line.call_contender(Side::Exclusive, self.hands_on());
        if line.is_idle() {
            lines.remove(name);
        }
    }
}
