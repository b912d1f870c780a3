//! A chaos worker: a process whose tasks take hot keys' locks on the store under test, over and
//! over, and under each lock read and write back the key's counter in the register with the
//! lock's fencing token, recording every hold (`tower_lock::testing::history`).
//!
//! The runner starts it with its plan, as JSON, in [`WORKER_ENV`]; it runs until killed.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tower_lock::backend::LockBackend;
use tower_lock::backend::etcd::{EtcdBackend, EtcdSettings};
use tower_lock::backend::mysql::MysqlBackend;
use tower_lock::backend::postgres::PostgresBackend;
use tower_lock::backend::redis::RedisBackend;
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
use tower_lock::testing::history;
use tower_lock::{LockGuard, Locker, OnLost};

use super::register::Register;
use super::within;

/// The environment variable that carries a worker's plan: a process started with it set is a
/// chaos worker ([`run_worker`]).
pub const WORKER_ENV: &str = "TOWER_LOCK_CHAOS_WORKER";

/// The etcd session's TTL and ZooKeeper's session timeout: how long a killed worker keeps its
/// locks (the default, 15 s, would leave the hot keys held through most of a run whose faults
/// come every few seconds).
const SESSION: Duration = Duration::from_secs(3);

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
    /// How many hot keys the tasks share.
    pub(crate) keys: usize,
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
async fn take_locks<B: LockBackend>(backend: B, plan: &WorkerPlan, register: Register) {
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
        let (locker, register, keys) = (locker.clone(), register.clone(), plan.keys);
        let holds_for = plan.holds_for;
        tokio::spawn(async move {
            loop {
                let key = format!("chaos:{}", fastrand::usize(..keys));
                let hold = within(holds_for);
                let claimed = locker.with_lock(&key, |lock| claim(&register, &key, lock, hold));
                if claimed.await.is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    });
    for task in tasks.collect::<Vec<_>>() {
        task.await.ok();
    }
}

/// Reads `key`'s counter and writes it back plus one with `lock`'s fence, `hold` apart.
async fn claim(register: &Register, key: &str, lock: LockGuard, hold: Duration) {
    let fence = lock.fence().map_or(0, |fence| fence.get());
    let Ok(Some(value)) = register.read(key, fence).await else {
        return;
    };
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    register.write(key, fence, value + 1).await.ok();
}
