//! A chaos worker: a process whose tasks take hot keys' locks on the store under test, over and
//! over, each time in a shape drawn from the plan's — a mutex, a read or write lock, a permit of
//! a semaphore of [`PERMITS`], two keys at once —, recording every hold
//! (`tower_lock::testing::history`). Under an exclusive hold a task reads and writes back each
//! key's counter in the register with the key's fencing token; readers and permit holders only
//! hold (readers share, and a semaphore's holders overlap by design).
//!
//! The runner starts it with its plan, as JSON, in [`WORKER_ENV`]; it runs until killed.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tower_lock::backend::etcd::{EtcdBackend, EtcdSettings};
use tower_lock::backend::mysql::MysqlBackend;
use tower_lock::backend::postgres::PostgresBackend;
use tower_lock::backend::redis::RedisBackend;
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
use tower_lock::backend::{Semaphores, SharedLocks};
use tower_lock::testing::history;
use tower_lock::{HeldLock, LockError, LockGuard, Locker, OnLost};

use super::register::Register;
use super::within;

/// The environment variable that carries a worker's plan: a process started with it set is a
/// chaos worker ([`run_worker`]).
pub const WORKER_ENV: &str = "TOWER_LOCK_CHAOS_WORKER";

/// The etcd session's TTL and ZooKeeper's session timeout: how long a killed worker keeps its
/// locks (the default, 15 s, would leave the hot keys held through most of a run whose faults
/// come every few seconds).
const SESSION: Duration = Duration::from_secs(3);

/// The permits of the semaphores the workers take.
pub const PERMITS: NonZeroU32 = NonZeroU32::new(2).expect("two");

/// A shape of lock a chaos worker takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ChaosShape {
    /// A mutex on one hot key.
    Mutex,
    /// A read lock on one hot key (the same keys as mutexes and writers).
    Read,
    /// The write lock on one hot key.
    Write,
    /// A permit of a semaphore of [`PERMITS`] (keys of their own).
    Permit,
    /// Two hot keys at once, all or none.
    TwoKeys,
}

impl ChaosShape {
    /// Every shape.
    pub const ALL: [Self; 5] = [
        Self::Mutex,
        Self::Read,
        Self::Write,
        Self::Permit,
        Self::TwoKeys,
    ];
}

/// What a worker does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct WorkerPlan {
    /// The store, as a `--lock-store` URL: `redis://`, `postgres://`, `mysql://`,
    /// `etcd://HOST:PORT,…`, `zk://HOST:PORT,…`.
    pub(crate) store: String,
    /// The register's Redis.
    pub(crate) register: String,
    /// Whether the register checks fences.
    pub(crate) fenced: bool,
    /// Whether work runs to its end after its lease was lost.
    pub(crate) finish_after_loss: bool,
    /// How long a task holds a lock between reading and writing the counter: from, to.
    pub(crate) holds_for: (Duration, Duration),
    /// How many hot keys the tasks share (and as many semaphores).
    pub(crate) keys: usize,
    /// The shapes its tasks take, one drawn at random for each hold.
    pub(crate) shapes: Vec<ChaosShape>,
    /// How many tasks take locks at once.
    pub(crate) tasks: usize,
    /// The locks' TTL.
    pub(crate) ttl: Duration,
    /// Where to record the holds.
    pub(crate) history: PathBuf,
}

/// Runs the chaos worker whose plan [`WORKER_ENV`] holds, until the process is killed; returns
/// at once, `false`, when it is not set.
///
/// # Panics
///
/// When the plan cannot be read or the history cannot be written.
pub fn run_worker() -> bool {
    let Some(plan) = std::env::var_os(WORKER_ENV) else {
        return false;
    };
    let plan: WorkerPlan =
        serde_json::from_str(&plan.to_string_lossy()).expect("a worker plan in JSON");
    history::record_to(&plan.history).expect("the history file can be written");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime")
        .block_on(work(plan));
    true
}

async fn work(plan: WorkerPlan) {
    let register = retry("the register", || {
        Register::connect(&plan.register, plan.fenced)
    })
    .await;
    let (scheme, address) = plan.store.split_once("://").expect("a store URL");
    match scheme {
        "redis" => {
            let backend = retry("Redis", || RedisBackend::connect(plan.store.as_str())).await;
            take_locks(backend, &plan, register).await;
        }
        "postgres" => {
            let backend = retry("PostgreSQL", || PostgresBackend::connect(&plan.store)).await;
            take_locks(backend, &plan, register).await;
        }
        "mysql" => {
            let backend = retry("MariaDB", || MysqlBackend::connect(&plan.store)).await;
            take_locks(backend, &plan, register).await;
        }
        "etcd" => {
            let endpoints: Vec<String> = (address.split(','))
                .map(|member| format!("http://{member}"))
                .collect();
            let settings = EtcdSettings::default().session_ttl(SESSION);
            let connect = || EtcdBackend::connect_with(&endpoints, settings.clone());
            let backend = retry("etcd", connect).await;
            take_locks(backend, &plan, register).await;
        }
        "zk" => {
            let settings = ZookeeperSettings::default().session_timeout(SESSION);
            let connect = || ZookeeperBackend::connect_with(address, settings.clone());
            let backend = retry("ZooKeeper", connect).await;
            take_locks(backend, &plan, register).await;
        }
        other => panic!("a store the chaos worker does not know: {other}"),
    }
}

/// Calls `connect` until it succeeds (the store may be down when a worker starts).
async fn retry<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    mut connect: impl FnMut() -> F,
) -> T {
    loop {
        match connect().await {
            Ok(connected) => return connected,
            Err(error) => {
                eprintln!("chaos worker: cannot connect to {what} yet: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Runs the plan's tasks on `backend` until the process is killed.
async fn take_locks<B: SharedLocks + Semaphores>(
    backend: B,
    plan: &WorkerPlan,
    register: Register,
) {
    let on_lost = match plan.finish_after_loss {
        true => OnLost::Continue,
        false => OnLost::Abort,
    };
    let locker = Locker::builder(backend)
        .ttl(plan.ttl)
        .wait(Duration::from_secs(10))
        .on_lost(on_lost)
        .build()
        .expect("valid settings");
    let tasks = (0..plan.tasks).map(|_| {
        let (locker, register, plan) = (locker.clone(), register.clone(), plan.clone());
        tokio::spawn(async move {
            loop {
                let shape = plan.shapes[fastrand::usize(..plan.shapes.len())];
                let hold = within(plan.holds_for);
                if hold_once(&locker, shape, &plan, (&register, hold))
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    });
    for task in tasks.collect::<Vec<_>>() {
        task.await.ok();
    }
}

/// One hold of `shape` on random keys: exclusive, the keys' counters claimed `hold` apart; else
/// held for `hold`. Its work stops when the lease is lost, unless the plan finishes after a
/// loss.
async fn hold_once<B: SharedLocks + Semaphores>(
    locker: &Locker<B>,
    shape: ChaosShape,
    plan: &WorkerPlan,
    (register, hold): (&Register, Duration),
) -> Result<(), LockError> {
    let key = |n: usize| format!("chaos:{n}");
    let first = fastrand::usize(..plan.keys);
    if shape == ChaosShape::Mutex {
        let key = key(first);
        let claimed = |lock| claim(register, vec![key.clone()], lock, hold);
        return locker.with_lock(&key, claimed).await;
    }
    let held: HeldLock<B> = match shape {
        ChaosShape::Read => locker.read(&key(first)).await?,
        ChaosShape::Write => locker.write(&key(first)).await?,
        ChaosShape::Permit => {
            locker
                .permit(&format!("chaos-permits:{first}"), PERMITS)
                .await?
        }
        ChaosShape::TwoKeys | ChaosShape::Mutex => {
            // Another key, when there is one.
            let second = (first + 1 + fastrand::usize(..plan.keys.max(2) - 1)) % plan.keys;
            locker.lock_all([key(first), key(second)]).await?
        }
    };
    let lock = held.guard().clone();
    let work = async {
        match shape {
            ChaosShape::Write | ChaosShape::TwoKeys => {
                let keys: Vec<String> = lock.keys().map(str::to_owned).collect();
                claim(register, keys, lock.clone(), hold).await;
            }
            _ => tokio::time::sleep(hold).await,
        }
    };
    match plan.finish_after_loss {
        true => work.await,
        false => {
            tokio::select! {
                () = work => {}
                _ = lock.lost() => {}
            }
        }
    }
    held.release().await
}

/// Reads each of `keys`' counters and writes it back plus one with its fence, `hold` apart.
async fn claim(register: &Register, keys: Vec<String>, lock: LockGuard, hold: Duration) {
    let mut values = Vec::with_capacity(keys.len());
    for key in &keys {
        let fence = lock.fence_of(key).map_or(0, |fence| fence.get());
        let Ok(Some(value)) = register.read(key, fence).await else {
            return;
        };
        values.push((key, fence, value));
    }
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    for (key, fence, value) in values {
        register.write(key, fence, value + 1).await.ok();
    }
}
