//! A store that replicates asynchronously and fails over, as Redis with a replica and
//! Sentinel does: the replica catches up every so often, and whenever the backend waits for it
//! (`WAIT`, `RedisBackend::replica_acks`); when the master dies, nothing answers until the
//! replica is promoted, and the store forgets every write the replica had not caught up with.
//!
//! The Redis backend, with `replica_acks`, waits after every grant and every renewal (before it
//! answers), and gives a grant back when the replica did not acknowledge it in time: so a
//! failover cannot take from a holder what it was told it has, nor shorten a lease it counts
//! on. Everything else may be forgotten after its caller was told it was done: a release (the
//! lease comes back until its TTL runs out), a ticket withdrawn or placed, an abandonment. A
//! session lease store (etcd, ZooKeeper) never forgets a write it answered: a quorum has it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep};
use tower_lock::MemoryBackend;
use tower_lock::backend::memory::Replica;

/// How a replicating store's replica keeps up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicaPlan {
    /// How often the replica catches up on its own.
    pub(crate) catches_up_every: Duration,
    /// How long a `WAIT` the replica answers in time takes.
    pub(crate) ack: Duration,
    /// How often the replica does not answer a `WAIT` in time (it falls short after
    /// [`ACK_TIMEOUT`], and the backend gives a grant back).
    pub(crate) short: f64,
}

/// How long the backend's `WAIT` waits for the replica (the demo's `?wait=1`: 100 ms).
const ACK_TIMEOUT: Duration = Duration::from_millis(100);

/// What the backend waits for the replica to acknowledge before it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acknowledged {
    /// Grants and renewals (`replica_acks`).
    GrantsAndRenewals,
    /// Grants only: the Redis backend's `replica_acks` until a failover was simulated
    /// (mutant `renewals-not-acknowledged`).
    Grants,
    /// Nothing: Redis with replicas, without `replica_acks` (mutant `no-replica-acks`).
    Nothing,
}

impl Acknowledged {
    /// What the backend acknowledges in this run: grants and renewals, unless a mutant says
    /// otherwise.
    pub(crate) fn now() -> Self {
        use tower_lock::testing::mutants::active;
        match (
            active("renewals-not-acknowledged"),
            active("no-replica-acks"),
        ) {
            (true, _) => Self::Grants,
            (_, true) => Self::Nothing,
            _ => Self::GrantsAndRenewals,
        }
    }

    /// Whether the backend waits for the replica after a `what` call that took or renewed a
    /// lease.
    pub(crate) fn after(self, what: &str) -> bool {
        match self {
            Self::GrantsAndRenewals => what.starts_with("acquire") || what == "extend",
            Self::Grants => what.starts_with("acquire"),
            Self::Nothing => false,
        }
    }
}

/// The store's replica, and the failovers to it.
#[derive(Clone, Debug)]
pub(crate) struct Replication(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    store: MemoryBackend,
    plan: ReplicaPlan,
    acknowledged: Acknowledged,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    replica: Replica,
    /// Each failover: when the master died, how long nothing answered, and the lock names
    /// whose state the promoted replica changed.
    failovers: Vec<(Instant, Duration, Vec<String>)>,
    /// Until when nothing answers: the replica is being promoted.
    down_until: Instant,
    /// Whether replication has stalled: the replica catches up with nothing until the store
    /// fails over to it.
    stalled: bool,
    /// Whether each `WAIT` falls short.
    rng: fastrand::Rng,
    /// When a `WAIT` fell short, and the lock names of the call it followed.
    short: Vec<(Instant, String)>,
}

impl Replication {
    /// `store`'s replica, caught up now and every `plan.catches_up_every` from now on; whether
    /// each `WAIT` falls short drawn from `seed`.
    pub(crate) fn start(store: &MemoryBackend, plan: ReplicaPlan, seed: u64) -> Self {
        let replication = Self(Arc::new(Inner {
            store: store.clone(),
            plan,
            acknowledged: Acknowledged::now(),
            state: Mutex::new(State {
                replica: store.replica(),
                failovers: Vec::new(),
                down_until: Instant::now(),
                stalled: false,
                rng: fastrand::Rng::with_seed(seed),
                short: Vec::new(),
            }),
        }));
        let catching_up = replication.clone();
        tokio::spawn(async move {
            loop {
                sleep(plan.catches_up_every).await;
                catching_up.catch_up();
            }
        });
        replication
    }

    /// The replica catches up with every write so far, unless replication has stalled
    /// (`false`).
    fn catch_up(&self) -> bool {
        let mut state = lock(&self.0.state);
        if !state.stalled {
            state.replica = self.0.store.replica();
        }
        !state.stalled
    }

    /// Replication stalls: the replica catches up with nothing, and acknowledges nothing,
    /// until the store fails over to it.
    pub(crate) fn stall(&self) {
        lock(&self.0.state).stalled = true;
    }

    /// Whether the backend waits for the replica after a `what` call that took or renewed a
    /// lease.
    pub(crate) fn acknowledges(&self, what: &str) -> bool {
        self.0.acknowledged.after(what)
    }

    /// How many times the store has failed over so far: taken before a call is applied, for
    /// [`wait_for_replica`](Self::wait_for_replica) to tell whether one came after it.
    pub(crate) fn failovers(&self) -> usize {
        lock(&self.0.state).failovers.len()
    }

    /// `WAIT`, after a call about `names` (joined by `\n`) applied when the store had failed
    /// over `failovers` times: the replica catches up with every write so far and acknowledges
    /// it — unless it does not answer in time, or the store failed over since the call was
    /// applied (`false`: the call's write may be forgotten).
    pub(crate) async fn wait_for_replica(&self, names: &str, failovers: usize) -> bool {
        let short = {
            let mut state = lock(&self.0.state);
            let short = state.rng.f64() < self.0.plan.short || state.stalled;
            if short {
                let now = Instant::now();
                let names = names.split('\n').map(|name| (now, name.to_owned()));
                state.short.extend(names);
            }
            short
        };
        if short {
            sleep(ACK_TIMEOUT).await;
            return false;
        }
        sleep(self.0.plan.ack).await;
        if self.failovers() > failovers || !self.answers() {
            return false;
        }
        self.catch_up()
    }

    /// The master dies: nothing answers for `outage`, and then the replica is promoted — the
    /// store forgets every write it had not caught up with. The lock names whose state that
    /// changed.
    pub(crate) fn fail_over(&self, outage: Duration) -> Vec<String> {
        let mut state = lock(&self.0.state);
        let changed = self.0.store.fail_over_to(&state.replica);
        state.stalled = false;
        let now = Instant::now();
        state.failovers.push((now, outage, changed.clone()));
        state.down_until = now + outage;
        changed
    }

    /// Whether the store answers now (no failover is under way).
    pub(crate) fn answers(&self) -> bool {
        lock(&self.0.state).down_until <= Instant::now()
    }

    /// Whether, between `from` and `until`, a failover changed `name` or left every call
    /// unanswered (a ticket may lapse meanwhile), or a `WAIT` after a call about `name` fell
    /// short (a grant given back is handed to the next ticket in line).
    pub(crate) fn struck_between(&self, name: &str, from: Instant, until: Instant) -> bool {
        let state = lock(&self.0.state);
        let within = |at: &Instant| (from..=until).contains(at);
        let failed_over = (state.failovers.iter()).any(|(at, outage, changed)| {
            let unanswered = !outage.is_zero() && *at <= until && *at + *outage >= from;
            unanswered || (within(at) && changed.iter().any(|changed| changed == name))
        });
        failed_over || (state.short.iter()).any(|(at, short)| within(at) && short == name)
    }

    /// Faults the replication dealt: failovers, and `WAIT`s that fell short.
    pub(crate) fn faults_dealt(&self) -> u64 {
        let state = lock(&self.0.state);
        (state.failovers.len() + state.short.len()) as u64
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
