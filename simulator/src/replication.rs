//! A store that replicates asynchronously and fails over, as Redis with a replica and
//! Sentinel does: the replica catches up every so often, and whenever the backend waits for it
//! (`WAIT`, `RedisBackend::replica_acks`); a failover promotes it, and the store forgets every
//! write it had not caught up with.
//!
//! The Redis backend, with `replica_acks`, waits after every grant and every renewal (before it
//! answers), and gives a grant back when the replica did not acknowledge it: so a failover can
//! forget only what no holder was told it has. A session lease store (etcd, ZooKeeper) never
//! forgets a write it answered: a quorum has it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep};
use tower_lock::MemoryBackend;
use tower_lock::backend::memory::Replica;

/// How a replicating store's replica keeps up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replicating {
    /// How often the replica catches up on its own.
    pub(crate) lag: Duration,
    /// How long a `WAIT` takes: the replica's acknowledgement's way back.
    pub(crate) ack: Duration,
}

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
    replicating: Replicating,
    acknowledged: Acknowledged,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    replica: Replica,
    failovers: Vec<Instant>,
}

impl Replication {
    /// `store`'s replica, caught up now and every `replicating.lag` from now on.
    pub(crate) fn start(store: &MemoryBackend, replicating: Replicating) -> Self {
        let replication = Self(Arc::new(Inner {
            store: store.clone(),
            replicating,
            acknowledged: Acknowledged::now(),
            state: Mutex::new(State {
                replica: store.replica(),
                failovers: Vec::new(),
            }),
        }));
        let catching_up = replication.clone();
        tokio::spawn(async move {
            loop {
                sleep(replicating.lag).await;
                catching_up.catch_up();
            }
        });
        replication
    }

    fn catch_up(&self) {
        let replica = self.0.store.replica();
        lock(&self.0.state).replica = replica;
    }

    /// Whether the backend waits for the replica after a `what` call that took or renewed a
    /// lease.
    pub(crate) fn acknowledges(&self, what: &str) -> bool {
        self.0.acknowledged.after(what)
    }

    /// `WAIT`: the replica catches up with every write so far and acknowledges it, unless the
    /// store failed over first (`false`: the write may be forgotten).
    pub(crate) async fn wait_for_replica(&self) -> bool {
        let failovers = lock(&self.0.state).failovers.len();
        sleep(self.0.replicating.ack).await;
        if lock(&self.0.state).failovers.len() > failovers {
            return false;
        }
        self.catch_up();
        true
    }

    /// The replica is promoted: the store forgets every write it had not caught up with.
    pub(crate) fn fail_over(&self) {
        let mut state = lock(&self.0.state);
        self.0.store.fail_over_to(&state.replica);
        state.failovers.push(Instant::now());
    }

    /// Whether the store failed over between `from` and `until`.
    pub(crate) fn failed_over_between(&self, from: Instant, until: Instant) -> bool {
        (lock(&self.0.state).failovers.iter()).any(|at| (from..=until).contains(at))
    }

    /// How many times the store failed over.
    pub(crate) fn failovers(&self) -> u64 {
        lock(&self.0.state).failovers.len() as u64
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
