//! Chaos runs: worker processes take hot keys' locks on a store of the run's own — every
//! store several processes share: Redis, PostgreSQL, MariaDB, etcd, ZooKeeper —, in every
//! shape (mutexes, read and write locks, permits of semaphores, two keys at once), while a
//! schedule of random faults runs (a worker killed or paused, cut off its store, a store
//! member killed and restarted), a fault beginning while others still run; each worker records
//! every hold it is granted (`tower_lock::testing::history`). Under each exclusive hold a worker
//! reads and writes back the keys' counters in a register that checks fencing tokens. The run
//! then checks the holds ([`History`]): every overlap of two holders of one key where one was
//! exclusive, fenced or not, and whether the stale holder was told it had lost the lease; every
//! moment a semaphore had more holders than permits; and the register: updates lost.
//!
//! `tests/tests/chaos/main.rs` runs a short version on every store; `lockbench --scenario
//! chaos` a long one (see `docs/RELIABILITY.md`).

use std::time::Duration;

mod proxy;
mod register;
mod runner;
mod stores;
mod worker;

pub use register::Tally;
pub use runner::{ChaosPlan, ChaosReport, Fault, run};
pub use stores::ChaosStore;
pub use tower_lock::testing::history::{History, Verdict};
pub use worker::{ChaosShape, PERMITS, WORKER_ENV, run_worker};

/// A random time within `(from, to)`, in whole milliseconds.
fn within((from, to): (Duration, Duration)) -> Duration {
    Duration::from_millis(fastrand::u64(
        from.as_millis() as u64..=to.as_millis() as u64,
    ))
}
