//! The lock implementations lockbench compares, behind one interface: hold a key while a
//! piece of work runs, and count the store round trips it took.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::aio::MultiplexedConnection;
use tower_lock::backend::any::{AnyBackend, AnyMutexBackend};
use tower_lock::backend::{LockBackend, OwnerToken, Semaphores, SharedLocks};
use tower_lock::testing::CountingBackend;
use tower_lock::{Locker, RedisBackend};

use crate::lease_settings::TTL;
use crate::shape::{PERMITS, Shape, Taking, pair_of};

/// How long a contender may wait before an implementation gives up (then it asks again).
const WAIT: Duration = Duration::from_secs(30);
/// The naive loop's fixed sleep between attempts, as in the seed articles.
const NAIVE_SLEEP: Duration = Duration::from_millis(100);

/// The implementations, by the names used on the command line and in JSON.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Impl {
    /// tower-lock's `Locker::with_lock`, waiting woken by release announcements; every
    /// release goes to the store (`max_local_run(1)`).
    TowerLockNotified,
    /// tower-lock's defaults: notified, and a lock released while another task of the process
    /// waits handed straight to it, up to 8 holds in a row (cohort handoff).
    TowerLockCohort,
    /// tower-lock's `Locker::with_lock`, waiting by polling with backoff.
    TowerLockPolling,
    /// tower-lock's `Locker::with_lock` in fair (FIFO) mode.
    TowerLockFair,
    /// tower-lock-notified on a `RedisBackend` chosen in code, not from a URL: the baseline
    /// of the run-time choice's cost.
    TowerLockTyped,
    /// tower-lock on the in-process `MemoryBackend` (one process only), waiting woken by
    /// releases: the engine without a store's round trips.
    Memory,
    /// SET NX PX, sleep 100 ms, retry; compare-and-delete release.
    SeedNaive,
    /// The rslock crate: `lock()` again whenever it gives up, `unlock()` after.
    Rslock,
    /// tower-lock on PostgreSQL, waiting woken by `LISTEN/NOTIFY`; every release goes to the
    /// store.
    PostgresNotified,
    /// tower-lock on PostgreSQL with its defaults: notified, with cohort handoff.
    PostgresCohort,
    /// tower-lock on PostgreSQL, waiting by polling with backoff.
    PostgresPolling,
    /// tower-lock on PostgreSQL in fair (FIFO) mode.
    PostgresFair,
    /// tower-lock on MySQL/MariaDB, waiting in line: one waiter per process polls; every
    /// release goes to the store.
    MysqlInLine,
    /// tower-lock on MySQL/MariaDB with its defaults: in line, with cohort handoff.
    MysqlCohort,
    /// tower-lock on MySQL/MariaDB, every waiter polling with backoff.
    MysqlPolling,
    /// tower-lock on etcd, each process's head of line watching its predecessor's key; every
    /// release goes to the store.
    EtcdNotified,
    /// tower-lock on etcd with its defaults: notified, with cohort handoff.
    EtcdCohort,
    /// tower-lock on etcd, every waiter polling with backoff.
    EtcdPolling,
    /// tower-lock on etcd in fair (FIFO) mode: every waiter's key in line.
    EtcdFair,
    /// tower-lock on ZooKeeper, each process's head of line watching its predecessor's node;
    /// every release goes to the store.
    ZookeeperNotified,
    /// tower-lock on ZooKeeper with its defaults: notified, with cohort handoff.
    ZookeeperCohort,
    /// tower-lock on ZooKeeper, every waiter polling with backoff.
    ZookeeperPolling,
    /// tower-lock on ZooKeeper in fair (FIFO) mode: every waiter's node in line.
    ZookeeperFair,
    /// tower-lock on Redis Cluster, waiting woken by sharded pub/sub; every release goes to
    /// the store.
    RedisClusterNotified,
    /// tower-lock on Redis Cluster with its defaults: notified, with cohort handoff.
    RedisClusterCohort,
    /// tower-lock on RedLock over three masters: waiters poll; every release goes to the
    /// masters.
    RedlockPolling,
    /// tower-lock on RedLock with its defaults: holds handed on within a process.
    RedlockCohort,
    /// tower-lock on the master Sentinels name: notified, every release in the store.
    SentinelNotified,
    /// tower-lock on the master Sentinels name with its defaults (cohort handoff).
    SentinelCohort,
    /// The same, every lock acknowledged by a replica (`WAIT 1`).
    SentinelWait,
}

impl Impl {
    pub const HOT_KEY: [Impl; 8] = [
        Impl::TowerLockNotified,
        Impl::TowerLockTyped,
        Impl::TowerLockCohort,
        Impl::TowerLockPolling,
        Impl::TowerLockFair,
        Impl::Memory,
        Impl::SeedNaive,
        Impl::Rslock,
    ];

    pub const POSTGRES_HOT_KEY: [Impl; 5] = [
        Impl::PostgresNotified,
        Impl::PostgresCohort,
        Impl::PostgresPolling,
        Impl::PostgresFair,
        Impl::TowerLockNotified,
    ];

    pub const MYSQL_HOT_KEY: [Impl; 4] = [
        Impl::MysqlInLine,
        Impl::MysqlCohort,
        Impl::MysqlPolling,
        Impl::TowerLockNotified,
    ];

    pub const ETCD_HOT_KEY: [Impl; 5] = [
        Impl::EtcdNotified,
        Impl::EtcdCohort,
        Impl::EtcdFair,
        Impl::EtcdPolling,
        Impl::TowerLockNotified,
    ];

    pub const ZOOKEEPER_HOT_KEY: [Impl; 5] = [
        Impl::ZookeeperNotified,
        Impl::ZookeeperCohort,
        Impl::ZookeeperFair,
        Impl::ZookeeperPolling,
        Impl::TowerLockNotified,
    ];

    pub const REDIS_CLUSTER_HOT_KEY: [Impl; 4] = [
        Impl::RedisClusterNotified,
        Impl::RedisClusterCohort,
        Impl::TowerLockNotified,
        Impl::TowerLockCohort,
    ];

    pub const REDLOCK_HOT_KEY: [Impl; 4] = [
        Impl::RedlockPolling,
        Impl::RedlockCohort,
        Impl::TowerLockPolling,
        Impl::TowerLockCohort,
    ];

    pub const SENTINEL_HOT_KEY: [Impl; 5] = [
        Impl::SentinelNotified,
        Impl::SentinelCohort,
        Impl::SentinelWait,
        Impl::TowerLockNotified,
        Impl::TowerLockCohort,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Impl::TowerLockNotified => "tower-lock-notified",
            Impl::TowerLockCohort => "tower-lock-cohort",
            Impl::TowerLockPolling => "tower-lock-polling",
            Impl::TowerLockFair => "tower-lock-fair",
            Impl::TowerLockTyped => "tower-lock-typed",
            Impl::Memory => "memory",
            Impl::SeedNaive => "seed-naive",
            Impl::Rslock => "rslock",
            Impl::PostgresNotified => "postgres-notified",
            Impl::PostgresCohort => "postgres-cohort",
            Impl::PostgresPolling => "postgres-polling",
            Impl::PostgresFair => "postgres-fair",
            Impl::MysqlInLine => "mysql-in-line",
            Impl::MysqlCohort => "mysql-cohort",
            Impl::MysqlPolling => "mysql-polling",
            Impl::EtcdNotified => "etcd-notified",
            Impl::EtcdCohort => "etcd-cohort",
            Impl::EtcdPolling => "etcd-polling",
            Impl::EtcdFair => "etcd-fair",
            Impl::ZookeeperNotified => "zookeeper-notified",
            Impl::ZookeeperCohort => "zookeeper-cohort",
            Impl::ZookeeperPolling => "zookeeper-polling",
            Impl::ZookeeperFair => "zookeeper-fair",
            Impl::RedisClusterNotified => "redis-cluster-notified",
            Impl::RedisClusterCohort => "redis-cluster-cohort",
            Impl::RedlockPolling => "redlock-polling",
            Impl::RedlockCohort => "redlock-cohort",
            Impl::SentinelNotified => "sentinel-notified",
            Impl::SentinelCohort => "sentinel-cohort",
            Impl::SentinelWait => "sentinel-wait",
        }
    }

    /// Whether it runs on the store under test rather than Redis (its plan's URL is that
    /// store's).
    pub fn off_redis(self) -> bool {
        matches!(
            self,
            Impl::Memory
                | Impl::PostgresNotified
                | Impl::PostgresCohort
                | Impl::PostgresPolling
                | Impl::PostgresFair
                | Impl::MysqlInLine
                | Impl::MysqlCohort
                | Impl::MysqlPolling
                | Impl::EtcdNotified
                | Impl::EtcdCohort
                | Impl::EtcdPolling
                | Impl::EtcdFair
                | Impl::ZookeeperNotified
                | Impl::ZookeeperCohort
                | Impl::ZookeeperPolling
                | Impl::ZookeeperFair
                | Impl::RedisClusterNotified
                | Impl::RedisClusterCohort
                | Impl::RedlockPolling
                | Impl::RedlockCohort
                | Impl::SentinelNotified
                | Impl::SentinelCohort
                | Impl::SentinelWait
        )
    }

    /// Whether it runs on etcd or ZooKeeper (whose own request counts are read off the
    /// server).
    pub fn on_consensus_store(self) -> bool {
        matches!(
            self,
            Impl::EtcdNotified
                | Impl::EtcdCohort
                | Impl::EtcdPolling
                | Impl::EtcdFair
                | Impl::ZookeeperNotified
                | Impl::ZookeeperCohort
                | Impl::ZookeeperPolling
                | Impl::ZookeeperFair
        )
    }

    /// Whether the client counts its own round trips (rslock's are read off the server).
    pub fn counts_round_trips(self) -> bool {
        self != Impl::Rslock
    }
}

/// Runs `work` while `locker` holds `key` as `taking` says, waiting as long as it takes.
async fn held<B, T>(
    locker: &Locker<B>,
    key: &str,
    taking: Taking,
    work: impl Future<Output = T>,
) -> T
where
    B: SharedLocks + Semaphores,
{
    let held = match taking {
        Taking::Mutex => {
            return locker
                .with_lock(key, |_| work)
                .await
                .unwrap_or_else(|error| panic!("tower-lock gave up on {key}: {error}"));
        }
        Taking::Read => locker.read(key).await,
        Taking::Write => locker.write(key).await,
        Taking::Permit => locker.permit(key, PERMITS).await,
        Taking::Pair => locker.lock_all([key, &pair_of(key)]).await,
    };
    let held = held.unwrap_or_else(|error| panic!("tower-lock gave up on {key}: {error}"));
    let output = work.await;
    held.release()
        .await
        .unwrap_or_else(|error| panic!("tower-lock could not release {key}: {error}"));
    output
}

/// One implementation, connected.
pub enum Contender {
    /// tower-lock on the store its URL names, chosen at run time, with every lock shape.
    /// Shares its counts with the backend inside the locker: one call, one round trip.
    EveryShape(Locker<CountingBackend<AnyBackend>>),
    /// tower-lock on a store with mutexes only (RedLock), chosen at run time.
    MutexesOnly(Locker<CountingBackend<AnyMutexBackend>>),
    /// tower-lock on a `RedisBackend` chosen in code: the baseline the run-time choice is
    /// measured against.
    Typed(Locker<CountingBackend<RedisBackend>>),
    SeedNaive {
        connection: MultiplexedConnection,
        release: Arc<Script>,
    },
    Rslock(rslock::LockManager),
}

/// The waiting `which` asks for, on `locker`: every release in the store, but for the cohort
/// rows and memory (which keep the default run of holds handed on in the process).
fn waiting<B: LockBackend>(which: Impl, backend: B) -> Locker<CountingBackend<B>> {
    let locker = Locker::builder(CountingBackend::new(backend)).ttl(TTL);
    let locker = match which {
        Impl::TowerLockPolling
        | Impl::PostgresPolling
        | Impl::MysqlPolling
        | Impl::EtcdPolling
        | Impl::ZookeeperPolling
        | Impl::RedlockPolling => locker.wait_polling(WAIT).max_local_run(1),
        Impl::TowerLockFair | Impl::PostgresFair | Impl::EtcdFair | Impl::ZookeeperFair => {
            locker.wait(WAIT).fair(Duration::from_secs(3))
        }
        Impl::TowerLockCohort
        | Impl::PostgresCohort
        | Impl::MysqlCohort
        | Impl::EtcdCohort
        | Impl::ZookeeperCohort
        | Impl::RedisClusterCohort
        | Impl::RedlockCohort
        | Impl::SentinelCohort
        | Impl::SentinelWait
        | Impl::Memory => locker.wait(WAIT),
        _ => locker.wait(WAIT).max_local_run(1),
    };
    locker.build().expect("valid settings")
}

impl Contender {
    /// Connects `which` to the store at `url` (a tower-lock store URL; for the peers and the
    /// typed baseline, a Redis URL).
    pub async fn connect(which: Impl, url: &str) -> Self {
        match which {
            Impl::TowerLockTyped => {
                let backend = RedisBackend::connect(url).await.expect("Redis reachable");
                Contender::Typed(waiting(which, backend))
            }
            Impl::SeedNaive => {
                let client = redis::Client::open(url).expect("a valid Redis URL");
                Contender::SeedNaive {
                    connection: client
                        .get_multiplexed_async_connection()
                        .await
                        .expect("Redis reachable"),
                    release: Arc::new(Script::new(
                        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                    )),
                }
            }
            Impl::Rslock => Contender::Rslock(rslock::LockManager::new(vec![url])),
            _ => {
                let url = match which {
                    Impl::Memory => "memory://".to_owned(),
                    Impl::SentinelWait => format!("{url}?wait=1"),
                    _ => url.to_owned(),
                };
                let backend = AnyMutexBackend::connect(&url).await;
                let backend = backend.unwrap_or_else(|error| panic!("{error}"));
                match AnyBackend::try_from(backend) {
                    Ok(backend) => Contender::EveryShape(waiting(which, backend)),
                    Err(mutexes) => Contender::MutexesOnly(waiting(which, mutexes)),
                }
            }
        }
    }

    /// Round trips of tower-lock's backend so far (the others count theirs in `with_lock`).
    pub fn backend_round_trips(&self) -> u64 {
        match self {
            Contender::EveryShape(locker) => locker.backend().counts().total(),
            Contender::MutexesOnly(locker) => locker.backend().counts().total(),
            Contender::Typed(locker) => locker.backend().counts().total(),
            Contender::SeedNaive { .. } | Contender::Rslock(_) => 0,
        }
    }

    /// Whether it can take `shape` (the peers and RedLock have mutexes only) in `processes`
    /// processes (memory's locks are one process's).
    pub fn takes(which: Impl, shape: Shape, processes: u8) -> bool {
        let mutexes_only = matches!(
            which,
            Impl::SeedNaive | Impl::Rslock | Impl::RedlockPolling | Impl::RedlockCohort
        );
        let shaped = shape == Shape::Mutex || !mutexes_only;
        shaped && (which != Impl::Memory || processes == 1)
    }

    /// Runs `work` while holding `key` as `taking` says (the peers: a mutex), waiting as long as
    /// it takes. Round trips of the naive loop are added to `calls`.
    pub async fn with_lock<T>(
        &self,
        key: &str,
        taking: Taking,
        work: impl Future<Output = T> + Send,
        calls: &AtomicU64,
    ) -> T {
        match self {
            Contender::EveryShape(locker) => held(locker, key, taking, work).await,
            Contender::Typed(locker) => held(locker, key, taking, work).await,
            Contender::MutexesOnly(locker) => {
                let held = locker.with_lock(key, |_| work).await;
                held.unwrap_or_else(|error| panic!("tower-lock gave up on {key}: {error}"))
            }
            Contender::SeedNaive {
                connection,
                release,
            } => {
                let token = OwnerToken::new().to_string();
                let mut connection = connection.clone();
                loop {
                    calls.fetch_add(1, Ordering::Relaxed);
                    let taken: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL.as_millis() as u64)
                        .query_async(&mut connection)
                        .await
                        .expect("Redis answers");
                    if taken.is_some() {
                        break;
                    }
                    tokio::time::sleep(NAIVE_SLEEP).await;
                }
                let output = work.await;
                calls.fetch_add(1, Ordering::Relaxed);
                let _: i64 = release
                    .key(key)
                    .arg(&token)
                    .invoke_async(&mut connection)
                    .await
                    .expect("Redis answers");
                output
            }
            Contender::Rslock(manager) => {
                let lock = loop {
                    if let Ok(lock) = manager.lock(key.as_bytes(), TTL).await {
                        break lock;
                    }
                };
                let output = work.await;
                manager.unlock(&lock).await;
                output
            }
        }
    }
}
