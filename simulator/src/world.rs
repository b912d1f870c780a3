//! One simulated run: the processes a seed plans, their callers, the faults that strike them,
//! and the checks of what happened.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastrand::Rng;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tower_lock::backend::Inspect;
use tower_lock::testing::history::{History, Recording};
use tower_lock::{Locker, MemoryBackend};

use crate::caller::{Caller, stall_callers};
use crate::check::{self, Outcome};
use crate::delivery::Delivery;
use crate::fairness::Waiters;
use crate::link::Link;
use crate::oracle::Oracle;
use crate::plan::{ACQUISITIONS, Event, Plan, Policy, ProcessPlan};
use crate::register::Registers;
use crate::replication::Replication;
use crate::store::{Leases, SimBackend};
use crate::workload::Call;

/// The most calls for locks one run makes, whatever else happens.
const MAX_CALLS: usize = 20_000;

/// How long after the last fault every caller must have been answered.
const CALLERS_ANSWERED_WITHIN: Duration = Duration::from_secs(60);

/// How long after its lease (or its session) runs out a lock nobody holds may stay taken.
pub(crate) const LEAK_BOUND: Duration = Duration::from_secs(1);

/// Runs seed `seed` on a current-thread runtime of its own, on Tokio's paused clock, with
/// mutant `mutant` switched on, if any (see `tower_lock::testing::mutants`).
///
/// # Panics
///
/// On a mutant that does not exist.
pub fn simulate(seed: u64, mutant: Option<&str>) -> Outcome {
    run_seed(seed, mutant, true)
}

/// [`simulate`], keeping no log of the store's calls and announcements and writing no history:
/// faster, for runs of many seeds. Its digest covers the holds, the callers' calls, the
/// registers, the plan and what the run did at its own hand (not each store call), so it
/// differs from [`simulate`]'s.
///
/// # Panics
///
/// On a mutant that does not exist.
pub fn simulate_quietly(seed: u64, mutant: Option<&str>) -> Outcome {
    run_seed(seed, mutant, false)
}

fn run_seed(seed: u64, mutant: Option<&str>, logs: bool) -> Outcome {
    assert!(
        tower_lock::testing::mutants::switch_on(mutant),
        "no mutant is called {mutant:?}"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(run(seed, logs))
}

/// What every caller of every process shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) registers: Registers,
    pub(crate) keys: Vec<String>,
    pub(crate) granted: AtomicU64,
    faults_left: AtomicUsize,
    pub(crate) calls: Mutex<Vec<Call>>,
    pub(crate) epoch: Instant,
}

impl Shared {
    /// Whether callers go on: the run has not granted its acquisitions, or faults are still
    /// to strike; and the calls' cap is not reached.
    pub(crate) fn more(&self) -> bool {
        let wanted = self.granted.load(Ordering::Relaxed) < ACQUISITIONS
            || self.faults_left.load(Ordering::Relaxed) > 0;
        wanted && lock(&self.calls).len() < MAX_CALLS
    }
}

/// One simulated process.
struct Process {
    pid: u64,
    plan: ProcessPlan,
    link: Arc<Link>,
    backend: SimBackend,
    recording: Recording,
    workers: Vec<JoinHandle<()>>,
    died: Option<Instant>,
}

/// Something that happens at a time: a planned fault, or what follows one.
#[derive(Clone, Copy, Debug)]
enum Action {
    Fault(Event),
    Restart {
        slot: usize,
    },
    /// The master dies, once its replication has stalled; its replica answers `outage` later.
    FailOver {
        outage: Duration,
    },
}

struct World {
    plan: Plan,
    rng: Rng,
    store: MemoryBackend,
    /// The store's replica, where it replicates.
    replication: Option<Replication>,
    oracle: Oracle,
    waiters: Waiters,
    /// How many tasks stalled at a stall point.
    stalled: Rc<Cell<u64>>,
    delivery: Delivery,
    shared: Arc<Shared>,
    /// Every process that ran, in pid order.
    processes: Vec<Process>,
    /// Each slot's process now: its index in `processes`.
    slots: Vec<usize>,
    pauses: u64,
    kills: u64,
    /// What the run did at its own hand, and when: each process started (and how it was set
    /// up), paused or killed; each failover (and the lock names it changed).
    happened: Vec<(Duration, String)>,
    /// Whether links and the delivery keep logs.
    logs: bool,
}

async fn run(seed: u64, logs: bool) -> Outcome {
    tower_lock::testing::seed_this_thread(seed);
    let mut rng = Rng::with_seed(seed);
    let plan = Plan::draw(&mut rng);
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        registers: Registers::default(),
        keys: plan.keys.clone(),
        granted: AtomicU64::new(0),
        faults_left: AtomicUsize::new(plan.events.len()),
        calls: Mutex::default(),
        epoch,
    });
    let store = MemoryBackend::new();
    let oracle = Oracle::watch(&store, epoch);
    let replication =
        (plan.replica).map(|replica| Replication::start(&store, replica, rng.u64(..)));
    let stalled = stall_callers(plan.stalls, rng.u64(..));
    let delivery = Delivery::new(rng.u64(..), plan.announcements, (epoch, logs));
    let announcing = delivery.clone();
    store.on_announce(move |name, announcement| announcing.announce(name, announcement));
    let mut world = World {
        rng,
        store,
        replication,
        oracle,
        waiters: Waiters::default(),
        stalled,
        delivery,
        shared,
        processes: Vec::new(),
        slots: Vec::new(),
        plan,
        pauses: 0,
        kills: 0,
        happened: Vec::new(),
        logs,
    };
    for _ in 0..world.plan.processes {
        let index = world.start();
        world.slots.push(index);
    }
    let mut actions: Vec<(Instant, u64, Action)> = (world.plan.events.iter())
        .enumerate()
        .map(|(order, (at, event))| (epoch + *at, order as u64, Action::Fault(*event)))
        .collect();
    let mut order = actions.len() as u64;
    while let Some(next) = (0..actions.len()).min_by_key(|&i| (actions[i].0, actions[i].1)) {
        let (at, _, action) = actions.remove(next);
        sleep_until(at).await;
        for (after, then) in world.act(action) {
            actions.push((Instant::now() + after, order, then));
            order += 1;
        }
    }
    let mut violations = Vec::new();
    let workers: Vec<JoinHandle<()>> = (world.processes.iter_mut())
        .filter(|process| process.died.is_none())
        .flat_map(|process| std::mem::take(&mut process.workers))
        .collect();
    for worker in workers {
        if timeout(CALLERS_ANSWERED_WITHIN, worker).await.is_err() {
            violations.push(format!(
                "a caller was still waiting for its answer {CALLERS_ANSWERED_WITHIN:?} after the last fault"
            ));
        }
    }
    let granted = world.shared.granted.load(Ordering::Relaxed);
    if granted < ACQUISITIONS {
        violations.push(format!(
            "the run granted {granted} acquisitions in {MAX_CALLS} calls, not the {ACQUISITIONS} \
             a run must: its callers were refused nearly every time"
        ));
    }
    let ended = Instant::now();
    let longest_lease = (world.processes.iter())
        .map(|process| process.plan.ttl)
        .chain(match world.plan.leases {
            Leases::Ttl => None,
            Leases::Session { timeout } => Some(timeout),
        })
        .max()
        .unwrap_or_default();
    sleep(longest_lease + LEAK_BOUND).await;
    for name in world.lock_names() {
        match world.store.inspect(&name).await {
            Ok(state) if state.is_held() => violations.push(format!(
                "{name} was still held {:?} after the run ended, by {:?}",
                longest_lease + LEAK_BOUND,
                state.holders
            )),
            _ => {}
        }
    }
    tower_lock::testing::stalls::on_stall(None::<fn(&'static str) -> Option<Duration>>);
    world.outcome(seed, ended, violations)
}

impl World {
    /// Starts a process in a slot: its locker on its own link, its callers. Its index.
    fn start(&mut self) -> usize {
        let pid = self.processes.len() as u64 + 1;
        let plan = ProcessPlan::draw(&mut self.rng, self.plan.leases);
        let link = Arc::new(Link::new(
            self.rng.u64(..),
            self.plan.faults,
            (self.shared.epoch, self.logs),
        ));
        let backend = SimBackend::new(
            (self.store.clone(), self.replication.clone()),
            link.clone(),
            self.plan.leases,
            (pid, self.waiters.clone()),
        );
        let recording = Recording::new(pid, self.shared.epoch);
        self.note(format!("p{pid} starts: {plan:?}"));
        let builder = Locker::builder(backend.clone())
            .holder_label(&format!("p{pid}"))
            .ttl(plan.ttl)
            .store_timeout(plan.store_timeout)
            .max_local_run(plan.max_local_run)
            .recorded_in(&recording);
        let builder = match plan.policy {
            Policy::Reject => builder.reject(),
            Policy::Notified(wait) => builder.wait(wait),
            Policy::Polling(wait) => builder.wait_polling(wait),
            Policy::Fair(wait, ticket_ttl) => builder.wait(wait).fair(ticket_ttl),
        };
        self.delivery.listen(backend.room(), link.clone(), pid);
        let locker = Arc::new(builder.build().expect("the plan's settings are valid"));
        let workers = (0..plan.workers)
            .map(|_| {
                let caller = Caller {
                    shared: self.shared.clone(),
                    locker: locker.clone(),
                    link: link.clone(),
                    backend: backend.clone(),
                    pid,
                    plan,
                    rng: Rng::with_seed(self.rng.u64(..)),
                };
                tokio::spawn(caller.run())
            })
            .collect();
        self.processes.push(Process {
            pid,
            plan,
            link,
            backend,
            recording,
            workers,
            died: None,
        });
        self.processes.len() - 1
    }

    /// Does `action`: what follows it, and after how long.
    fn act(&mut self, action: Action) -> Vec<(Duration, Action)> {
        match action {
            Action::Fault(event) => {
                if !matches!(event, Event::FailOver { .. }) {
                    self.shared.faults_left.fetch_sub(1, Ordering::Relaxed);
                }
                match event {
                    Event::Pause { slot, pause } => {
                        self.pauses += 1;
                        let process = &self.processes[self.slots[slot]];
                        process.backend.freeze(pause);
                        let pid = process.pid;
                        self.note(format!("p{pid} pauses for {pause:?}"));
                        Vec::new()
                    }
                    Event::Kill {
                        slot,
                        restart_after,
                    } => {
                        let process = &mut self.processes[self.slots[slot]];
                        if process.died.is_some() {
                            // Killed already, and not started again yet.
                            return Vec::new();
                        }
                        self.kills += 1;
                        process.backend.kill();
                        for worker in &process.workers {
                            worker.abort();
                        }
                        process.died = Some(Instant::now());
                        let pid = process.pid;
                        self.note(format!("p{pid} is killed"));
                        vec![(restart_after, Action::Restart { slot })]
                    }
                    Event::FailOver { stall, outage } => {
                        self.replica().stall();
                        self.note(format!("the store's replication stalls for {stall:?}"));
                        vec![(stall, Action::FailOver { outage })]
                    }
                }
            }
            Action::FailOver { outage } => {
                self.shared.faults_left.fetch_sub(1, Ordering::Relaxed);
                let changed = self.replica().fail_over(outage);
                self.note(format!(
                    "the store's master dies; its replica answers {outage:?} later: {changed:?} change"
                ));
                Vec::new()
            }
            Action::Restart { slot } => {
                self.slots[slot] = self.start();
                Vec::new()
            }
        }
    }

    /// The store's replication, which a plan that fails the store over has.
    fn replica(&self) -> &Replication {
        let replication = self.replication.as_ref();
        replication.expect("a store that fails over replicates")
    }

    /// Notes what the run does now, for its history.
    fn note(&mut self, what: String) {
        let at = Instant::now() - self.shared.epoch;
        self.happened.push((at, what));
    }

    /// Every lock name the run may have taken.
    fn lock_names(&self) -> Vec<String> {
        (self.plan.keys.iter())
            .flat_map(|key| [format!("lock:{key}"), format!("lock:{key}-pool")])
            .collect()
    }

    fn outcome(self, seed: u64, ended: Instant, mut violations: Vec<String>) -> Outcome {
        let epoch = self.shared.epoch;
        let at = |instant: Instant| (instant - epoch).as_nanos();
        let mut history = History::default();
        let mut recorded = BTreeMap::new();
        let mut store_calls = BTreeMap::new();
        let mut store_events = self.delivery.log();
        store_events.extend(self.happened.iter().cloned());
        store_events.push((Duration::ZERO, format!("the run: {:?}", self.plan)));
        store_calls.insert(0, store_events);
        for process in &self.processes {
            store_calls.insert(process.pid, process.link.calls());
            let mut lines = process.recording.lines();
            if let Some(died) = process.died {
                // Its tasks ran on in the runtime, cut off from the store: a dead process
                // records nothing.
                lines = before(&lines, at(died));
            }
            if let Err(error) = history.add(&lines) {
                violations.push(format!("p{}'s history does not read: {error}", process.pid));
            }
            if let Some(died) = process.died {
                history.died(process.pid, at(died));
            }
            recorded.insert(process.pid, lines);
        }
        history.ran_until(at(ended));
        // The simulated store loses no lease its holder was told it has (a failover forgets no
        // grant or renewal the replica did not acknowledge first): a holder knows by its end.
        history.told_by_end();
        let beliefs: Vec<_> = history.beliefs().collect();
        let uncovered = self.oracle.uncovered(&beliefs, at(ended));
        let session = match self.plan.leases {
            Leases::Session { timeout } => Some(timeout),
            Leases::Ttl => None,
        };
        // A lease held by nobody lasts its TTL (or its session's timeout) from when its holder
        // last could tell the store, and a paused holder cannot.
        let longest = |pid: u64, (from, until): (u128, u128)| {
            let process = &self.processes[pid as usize - 1];
            let instant = |nanos: u128| epoch + Duration::from_nanos(nanos as u64);
            let paused = process.link.paused_within(instant(from), instant(until));
            let ttl = process.plan.ttl;
            session.map_or(ttl, |timeout| timeout.max(ttl)) + paused + LEAK_BOUND
        };
        violations.extend(self.oracle.held_by_nobody(&beliefs, at(ended), longest));
        // A failover that changed the lock may have forgotten a ticket, or a grant a release
        // handed it; a grant given back for want of the replica's acknowledgement is handed on.
        let struck = |(name, pid, ticket): (&str, u64, _), (from, until)| {
            let process = &self.processes[pid as usize - 1];
            process.link.struck_between(ticket, from, until)
                || (self.replication.as_ref())
                    .is_some_and(|replica| replica.struck_between(name, from, until))
        };
        let first_held = self.oracle.first_held(&beliefs);
        let served = |name: &str, token| {
            let held = first_held.get(&(name.to_owned(), token))?;
            Some(epoch + Duration::from_nanos(*held as u64))
        };
        violations.extend(self.waiters.overtaken(served, struck, epoch));
        let calls = std::mem::take(&mut *lock(&self.shared.calls));
        let faults = (self.processes.iter())
            .map(|process| process.link.dealt().total())
            .sum::<u64>()
            + self.delivery.faults_dealt()
            + self.pauses
            + self.kills
            + self
                .replication
                .as_ref()
                .map_or(0, Replication::faults_dealt)
            + self.stalled.get();
        check::judge(check::Run {
            seed,
            // Not as a fenced store: an overlap passes only when its stale holder was told.
            verdict: history.check(false),
            uncovered,
            recorded,
            store_calls,
            calls,
            registers: self.shared.registers.all(),
            granted: self.shared.granted.load(Ordering::Relaxed),
            processes: self.processes.len(),
            faults,
            violations,
            history: self.logs,
        })
    }
}

/// The recorded `lines` from before `died` (ns since the run's start).
fn before(lines: &str, died: u128) -> String {
    let at = |line: &str| {
        let event = serde_json::from_str::<serde_json::Value>(line).ok()?;
        event["at"].as_u64()
    };
    let kept = lines
        .lines()
        .filter(|line| at(line).is_none_or(|at| u128::from(at) <= died));
    kept.map(|line| format!("{line}\n")).collect()
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
