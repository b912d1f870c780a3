//! A chaos run: worker processes taking hot keys' locks, in every shape, on a store of the run's
//! own while a schedule of random faults runs — one after another, or overlapping, a fault
//! beginning while others still run —, then the check of every hold they recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::proxy::CutProxy;
use super::register::Tally;
use super::stores::ChaosStore;
use super::within;
use super::worker::{ChaosShape, WORKER_ENV, WorkerPlan};
use super::{History, Verdict};
use crate::RedisServer;
use crate::private_server::ServerDir;

/// How long a worker stays cut off its store.
const CUT_OFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(3));
/// How long a killed store (member) stays down.
const STORE_DOWN: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(2));

/// What a chaos run does.
#[derive(Clone, Debug)]
pub struct ChaosPlan {
    /// The store.
    pub store: ChaosStore,
    /// Worker processes.
    pub processes: usize,
    /// Tasks taking locks in each.
    pub tasks: usize,
    /// Hot keys they share.
    pub keys: usize,
    /// The shapes the workers' tasks take, one drawn at random for each hold.
    pub shapes: Vec<ChaosShape>,
    /// The locks' TTL: a process paused longer loses its leases.
    pub ttl: Duration,
    /// Run until this many holds reached the register, every kind of fault ran (and, when
    /// they may overlap, one began while another ran)…
    pub acquisitions: u64,
    /// …or this long at most.
    pub time_limit: Duration,
    /// Whether the register checks fences (the twin: it does not).
    pub fenced: bool,
    /// Whether work under a lock whose lease was lost runs to its end (`OnLost::Continue`)
    /// instead of being stopped (the default): its writes then rely on fencing alone.
    pub finish_after_loss: bool,
    /// The faults, taken in turn; the run injects each of them at least once.
    pub schedule: Vec<Fault>,
    /// The time between two faults: from, to — from the end of one to the beginning of the
    /// next, or, overlapping, between their beginnings.
    pub quiet: (Duration, Duration),
    /// Whether a fault may begin while others still run (on a target none of them has: a
    /// worker paused while a store member restarts, a worker cut off during a leader's loss;
    /// one store member down at a time).
    pub overlapping: bool,
    /// How long a paused worker stays frozen: from, to.
    pub pauses: (Duration, Duration),
    /// How long a task holds a lock between reading and writing the key's counter: from, to.
    pub holds_for: (Duration, Duration),
}

impl ChaosPlan {
    /// A run on `store`: 3 processes × 16 tasks on 4 hot keys (and 4 semaphores) in every
    /// shape with a TTL of 1 s, each hold 0–2 ms between read and write, fenced, overlapping
    /// faults beginning 1–3 s apart, until `acquisitions` holds and one of each fault, or 15
    /// minutes.
    pub fn new(store: ChaosStore, acquisitions: u64) -> Self {
        Self {
            store,
            processes: 3,
            tasks: 16,
            keys: 4,
            shapes: ChaosShape::ALL.to_vec(),
            ttl: Duration::from_secs(1),
            acquisitions,
            time_limit: Duration::from_secs(15 * 60),
            fenced: true,
            finish_after_loss: false,
            schedule: Fault::ALL.to_vec(),
            quiet: (Duration::from_secs(1), Duration::from_secs(3)),
            overlapping: true,
            pauses: (Duration::from_millis(500), Duration::from_secs(3)),
            holds_for: (Duration::ZERO, Duration::from_millis(2)),
        }
    }
}

/// The faults of a schedule, taken in turn, each on a random target for a random time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A worker killed with SIGKILL, started again 0.3 s later.
    KillProcess,
    /// A worker frozen with SIGSTOP for 0.5–3 s.
    PauseProcess,
    /// A worker cut off its store (every member) for 0.5–3 s.
    CutOff,
    /// A store member (the store, where it has one) killed with SIGKILL, restarted 0.5–2 s
    /// later on its data.
    RestartStore,
}

impl fmt::Display for Fault {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::KillProcess => "kill",
            Self::PauseProcess => "pause",
            Self::CutOff => "cut-off",
            Self::RestartStore => "store restart",
        })
    }
}

impl Fault {
    /// Every fault, in the order a schedule takes them.
    pub const ALL: [Self; 4] = [
        Self::PauseProcess,
        Self::KillProcess,
        Self::CutOff,
        Self::RestartStore,
    ];
}

/// What a chaos run found.
#[derive(Clone, Debug)]
pub struct ChaosReport {
    /// The store.
    pub store: ChaosStore,
    /// How long it ran.
    pub elapsed: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<Fault, usize>,
    /// Faults that began while another still ran.
    pub overlapped: usize,
    /// The faults that began from 3 s before the longest time without a grant until its end,
    /// each with when, in seconds from the gap's start (negative: before it): what caused it.
    pub longest_gap_faults: Vec<(Fault, f64)>,
    /// The check of every recorded hold.
    pub verdict: Verdict,
    /// The register at the end.
    pub register: Tally,
}

impl ChaosReport {
    /// Whether the run holds up: no overlap outside fencing or a reported loss, no update
    /// lost.
    pub fn holds_up(&self) -> bool {
        self.verdict.holds_up() && self.register.lost_updates() == 0
    }

    /// The faults around the longest gap, e.g. ` (pause at -1.20 s, kill at +0.35 s)`.
    pub fn longest_gap_cause(&self) -> String {
        let faults: Vec<String> = (self.longest_gap_faults.iter())
            .map(|(fault, offset)| format!("{fault} at {offset:+.2} s"))
            .collect();
        match faults.is_empty() {
            true => String::new(),
            false => format!(" ({})", faults.join(", ")),
        }
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults: usize = self.faults.values().sum();
        let (verdict, register) = (&self.verdict, &self.register);
        write!(
            formatter,
            "{}: {} holds {:?} in {:.0?}, {faults} faults {:?} ({} while another ran); \
             overlaps: {} fenced, {} unfenced (reported lost), {} unfenced (never told), of \
             which semaphores over their permits: {}; register: {} reads, {} writes, {} \
             refused for a stale fence, {} taken with one, {} updates lost; longest without a \
             grant: {:.2?}{}",
            self.store,
            verdict.holds,
            verdict.shapes,
            self.elapsed,
            self.faults,
            self.overlapped,
            verdict.fenced_overlaps,
            verdict.unfenced_reported,
            verdict.unfenced_unreported,
            verdict.permits_exceeded,
            register.reads,
            register.writes,
            register.refused,
            register.stale,
            register.lost_updates(),
            verdict.longest_gap,
            self.longest_gap_cause(),
        )?;
        for example in &verdict.examples {
            write!(formatter, "\n  {example}")?;
        }
        Ok(())
    }
}

/// Runs `plan`, starting each worker with `worker()` (a command that runs
/// [`run_worker`](super::run_worker) first thing), and checks what they recorded.
///
/// # Panics
///
/// When a server the run needs is not installed (the message says how to install it), or a
/// worker's history cannot be read.
pub fn run(plan: &ChaosPlan, worker: &(dyn Fn() -> Command + Sync)) -> ChaosReport {
    let register = RedisServer::start();
    let store = plan.store.start();
    let dir = ServerDir::create("chaos", None);
    let members = store.members();
    let workers: Vec<Worker> = (0..plan.processes)
        .map(|index| {
            let proxies: Vec<CutProxy> = members.iter().map(|&to| CutProxy::start(to)).collect();
            let addresses: Vec<_> = proxies.iter().map(CutProxy::address).collect();
            let plan = WorkerPlan {
                store: store.url_through(&addresses),
                register: register.url(),
                fenced: plan.fenced,
                finish_after_loss: plan.finish_after_loss,
                holds_for: plan.holds_for,
                keys: plan.keys,
                shapes: plan.shapes.clone(),
                tasks: plan.tasks,
                ttl: plan.ttl,
                history: dir.path().join(format!("p{index}")),
            };
            Worker::start(plan, proxies, worker)
        })
        .collect();

    let started = Instant::now();
    let reads = || Tally::read(&register.url()).map_or(0, |tally| tally.reads);
    let schedule = Schedule::new(plan);
    let workers: Vec<Mutex<Worker>> = workers.into_iter().map(Mutex::new).collect();
    let store = Mutex::new(store);
    let (workers_struck, store_struck, schedule_kept) = (&workers, &store, &schedule);
    let member_count = members.len();
    std::thread::scope(|faults| {
        while (reads() < plan.acquisitions || !schedule.complete(plan.overlapping))
            && started.elapsed() < plan.time_limit
        {
            sleep(within(plan.quiet));
            let Some((fault, target)) = schedule.next(workers.len()) else {
                continue;
            };
            let inject = move || {
                let (workers, store) = (workers_struck, store_struck);
                match (fault, target) {
                    (Fault::KillProcess, Target::Worker(index)) => {
                        lock(&workers[index]).kill_and_restart(worker);
                    }
                    (Fault::PauseProcess, Target::Worker(index)) => {
                        let paused = lock(&workers[index]).pause();
                        sleep(within(plan.pauses));
                        paused.resume();
                    }
                    (Fault::CutOff, Target::Worker(index)) => {
                        lock(&workers[index]).cut_off(within(CUT_OFF));
                    }
                    (_, _) => {
                        let member = fastrand::usize(..member_count);
                        lock(store).kill(member);
                        sleep(within(STORE_DOWN));
                        lock(store).restart(member);
                    }
                }
                schedule_kept.ended(target);
            };
            match plan.overlapping {
                true => drop(faults.spawn(inject)),
                false => inject(),
            }
        }
    });
    // The workers run on for two TTLs after the last fault: a holder that was paused past its
    // lease hears of its loss before the run ends, as it would in a run that went on.
    sleep(plan.ttl * 2);
    let mut workers: Vec<Worker> = (workers.into_iter())
        .map(|worker| {
            worker
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        })
        .collect();
    let (faults, overlapped, schedule_log) = schedule.log();

    let mut history = History::default();
    for worker in &mut workers {
        worker.kill();
        for (pid, died, file) in &worker.incarnations {
            let recorded = std::fs::read_to_string(file).unwrap_or_default();
            history.add(&recorded).expect("a worker's history reads");
            history.died(u64::from(*pid), *died);
        }
    }
    history.ran_until(now());
    let verdict = history.check(plan.fenced);
    let gap_from = verdict.longest_gap_from as f64 / 1e9;
    let gap_until = gap_from + verdict.longest_gap.as_secs_f64();
    let longest_gap_faults = (schedule_log.iter())
        .map(|&(began, fault)| (fault, began as f64 / 1e9 - gap_from))
        .filter(|&(_, offset)| (-3.0..=gap_until - gap_from).contains(&offset))
        .collect();
    let report = ChaosReport {
        store: plan.store,
        elapsed: started.elapsed(),
        faults,
        overlapped,
        longest_gap_faults,
        verdict,
        register: Tally::read(&register.url()).expect("the register answers"),
    };
    // A run without fence checks is the twin, expected to lose updates.
    if plan.fenced && !report.holds_up() {
        eprintln!("{}: the histories are kept in {:?}", plan.store, dir.keep());
    }
    report
}

/// What a fault strikes: a worker, or the store (one of its members, one at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Worker(usize),
    Store,
}

/// A run's faults: which comes next and on which target — none that a running fault has —,
/// and what ran.
struct Schedule<'p> {
    order: &'p [Fault],
    state: Mutex<Injected>,
}

#[derive(Default)]
struct Injected {
    next: usize,
    running: BTreeSet<Target>,
    counts: BTreeMap<Fault, usize>,
    overlapped: usize,
    /// When each fault began, nanoseconds since the Unix epoch.
    log: Vec<(u128, Fault)>,
}

impl<'p> Schedule<'p> {
    fn new(plan: &'p ChaosPlan) -> Self {
        Self {
            order: &plan.schedule,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, Injected> {
        lock(&self.state)
    }

    /// Whether every fault of the order was injected, and one began while another ran when
    /// faults may `overlap`.
    fn complete(&self, overlap: bool) -> bool {
        let state = self.state();
        let injected: usize = state.counts.values().sum();
        injected >= self.order.len() && (!overlap || state.overlapped > 0)
    }

    /// The next fault and its target, which is running from now on: `None` while every
    /// target it could strike is struck by another (it comes next time).
    fn next(&self, workers: usize) -> Option<(Fault, Target)> {
        let mut state = self.state();
        let fault = self.order[state.next % self.order.len()];
        let targets: Vec<Target> = match fault {
            Fault::RestartStore => vec![Target::Store],
            _ => (0..workers).map(Target::Worker).collect(),
        };
        let free: Vec<Target> = (targets.into_iter())
            .filter(|target| !state.running.contains(target))
            .collect();
        let target = *free.get(fastrand::usize(..free.len().max(1)))?;
        state.next += 1;
        if !state.running.is_empty() {
            state.overlapped += 1;
        }
        state.running.insert(target);
        state.log.push((now(), fault));
        *state.counts.entry(fault).or_default() += 1;
        Some((fault, target))
    }

    /// The fault on `target` ended.
    fn ended(&self, target: Target) {
        self.state().running.remove(&target);
    }

    /// Faults by kind, how many began while another ran, and when each began.
    fn log(self) -> (BTreeMap<Fault, usize>, usize, Vec<(u128, Fault)>) {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (state.counts, state.overlapped, state.log)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A fault that panicked leaves what it held as it was: the run goes on to its end.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Nanoseconds since the Unix epoch: the clock the histories are recorded by.
fn now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

/// A worker process and the proxies between it and the store's members.
struct Worker {
    plan: WorkerPlan,
    proxies: Vec<CutProxy>,
    child: Child,
    /// Every process that ran as it: pid, when it died, its history.
    incarnations: Vec<(u32, u128, PathBuf)>,
    started: usize,
}

impl Worker {
    fn start(plan: WorkerPlan, proxies: Vec<CutProxy>, worker: &dyn Fn() -> Command) -> Self {
        let child = spawn(&plan, 0, worker);
        Self {
            plan,
            proxies,
            child,
            incarnations: Vec::new(),
            started: 1,
        }
    }

    /// Kills it with SIGKILL, noting when it died.
    fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        let history = file_of(&self.plan, self.started - 1, "jsonl");
        self.incarnations.push((self.child.id(), now(), history));
    }

    fn kill_and_restart(&mut self, worker: &dyn Fn() -> Command) {
        self.kill();
        sleep(Duration::from_millis(300));
        self.child = spawn(&self.plan, self.started, worker);
        self.started += 1;
    }

    /// Freezes it with SIGSTOP until the answer is resumed.
    fn pause(&self) -> Paused {
        signal(&self.child, "STOP");
        Paused(self.child.id())
    }

    fn cut_off(&self, for_: Duration) {
        self.proxies.iter().for_each(|proxy| proxy.set_cut(true));
        sleep(for_);
        self.proxies.iter().for_each(|proxy| proxy.set_cut(false));
    }
}

/// A worker frozen by [`Worker::pause`].
struct Paused(u32);

impl Paused {
    /// Thaws it with SIGCONT.
    fn resume(self) {
        let status = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status()
            .expect("`kill` runs");
        assert!(status.success(), "kill -CONT {} failed", self.0);
    }
}

impl Drop for Worker {
    /// A run that panicked leaves no worker behind.
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn spawn(plan: &WorkerPlan, incarnation: usize, worker: &dyn Fn() -> Command) -> Child {
    let log = std::fs::File::create(file_of(plan, incarnation, "log")).expect("a log file");
    let plan = WorkerPlan {
        history: file_of(plan, incarnation, "jsonl"),
        ..plan.clone()
    };
    worker()
        .env(
            WORKER_ENV,
            serde_json::to_string(&plan).expect("a plan in JSON"),
        )
        .stdout(log.try_clone().expect("the log file"))
        .stderr(log)
        .spawn()
        .expect("a chaos worker starts")
}

/// Incarnation `incarnation`'s history (`jsonl`) or log (`log`) file.
fn file_of(plan: &WorkerPlan, incarnation: usize, extension: &str) -> PathBuf {
    plan.history
        .with_extension(format!("{incarnation}.{extension}"))
}

fn signal(child: &Child, signal: &str) {
    crate::process::send_signal(child, signal);
}
