//! Scenario `distinct-keys` on Redis beyond one node (`--backend redis-cluster`, `redlock`,
//! `redis-sentinel`): tasks lock and unlock keys nobody else uses, through tower-lock's engine
//! and backend on a Redis Cluster of three masters (each with a replica), RedLock over three
//! masters, or the master three Sentinels name (with two replicas; with and without `WAIT 1`),
//! beside the engine and backend on one Redis node in the same run. Cluster keys spread over
//! every master.

use std::time::Duration;

use integration_tests::MASTER_NAME;
use tower_lock::backend::redis::{ClusterLink, RedlockBackend, SentinelConnection};
use tower_lock::{Locker, RedisBackend};

use crate::distinct_keys::{PairSummary, Pairing, backend_pair, client_timed, engine, engine_pair};

/// What is compared, by its name in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisPair {
    /// The backend's `acquire` and `release` on the cluster.
    ClusterBackend,
    /// `Locker::with_lock` around no work, on the cluster.
    ClusterEngine,
    /// The backend's `acquire` and `release` on RedLock's masters.
    RedlockBackend,
    /// `Locker::with_lock` around no work, on RedLock's masters.
    RedlockEngine,
    /// The backend's `acquire` and `release` on the master Sentinels name.
    SentinelBackend,
    /// `Locker::with_lock` around no work, on the master Sentinels name.
    SentinelEngine,
    /// The same, every lock acknowledged by a replica (`WAIT 1`).
    SentinelWaitEngine,
    /// The backend's `acquire` and `release` on one Redis.
    RedisBackend,
    /// `Locker::with_lock` on one Redis, on the same machine.
    RedisEngine,
}

impl RedisPair {
    pub const CLUSTER: [RedisPair; 4] = [
        RedisPair::ClusterBackend,
        RedisPair::ClusterEngine,
        RedisPair::RedisBackend,
        RedisPair::RedisEngine,
    ];

    pub const REDLOCK: [RedisPair; 4] = [
        RedisPair::RedlockBackend,
        RedisPair::RedlockEngine,
        RedisPair::RedisBackend,
        RedisPair::RedisEngine,
    ];

    pub const SENTINEL: [RedisPair; 5] = [
        RedisPair::SentinelBackend,
        RedisPair::SentinelEngine,
        RedisPair::SentinelWaitEngine,
        RedisPair::RedisBackend,
        RedisPair::RedisEngine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RedisPair::ClusterBackend => "cluster-backend",
            RedisPair::ClusterEngine => "cluster-engine",
            RedisPair::RedlockBackend => "redlock-backend",
            RedisPair::RedlockEngine => "redlock-engine",
            RedisPair::SentinelBackend => "sentinel-backend",
            RedisPair::SentinelEngine => "sentinel-engine",
            RedisPair::SentinelWaitEngine => "sentinel-wait-engine",
            RedisPair::RedisBackend => "redis-backend",
            RedisPair::RedisEngine => "redis-engine",
        }
    }
}

enum Pairs {
    ClusterEngine(Locker<RedisBackend<ClusterLink>>),
    ClusterBackend(RedisBackend<ClusterLink>),
    RedlockEngine(Locker<RedlockBackend>),
    RedlockBackend(RedlockBackend),
    SentinelEngine(Locker<RedisBackend<SentinelConnection>>),
    SentinelBackend(RedisBackend<SentinelConnection>),
    RedisEngine(Locker<RedisBackend>),
    RedisBackend(RedisBackend),
}

impl Pairs {
    async fn connect(which: RedisPair, nodes: &[String], redis_url: &str) -> Self {
        let cluster = || async {
            let backend = RedisBackend::connect_cluster(nodes.to_vec()).await;
            backend.expect("the cluster reachable")
        };
        let redlock = || RedlockBackend::connect(nodes.to_vec()).expect("valid URLs");
        let sentinel = || async {
            let backend = RedisBackend::connect_sentinel(nodes.to_vec(), MASTER_NAME).await;
            backend.expect("the Sentinels reachable")
        };
        let redis = || async {
            let backend = RedisBackend::connect(redis_url).await;
            backend.expect("Redis reachable")
        };
        match which {
            RedisPair::ClusterEngine => Pairs::ClusterEngine(engine(cluster().await)),
            RedisPair::ClusterBackend => Pairs::ClusterBackend(cluster().await),
            RedisPair::RedlockEngine => Pairs::RedlockEngine(engine(redlock())),
            RedisPair::RedlockBackend => Pairs::RedlockBackend(redlock()),
            RedisPair::SentinelEngine => Pairs::SentinelEngine(engine(sentinel().await)),
            RedisPair::SentinelWaitEngine => {
                let acked = sentinel().await.replica_acks(1, REPLICA_ACK_TIMEOUT);
                Pairs::SentinelEngine(engine(acked))
            }
            RedisPair::SentinelBackend => Pairs::SentinelBackend(sentinel().await),
            RedisPair::RedisEngine => Pairs::RedisEngine(engine(redis().await)),
            RedisPair::RedisBackend => Pairs::RedisBackend(redis().await),
        }
    }
}

impl Pairing for Pairs {
    async fn pair(&self, key: &str) {
        match self {
            Pairs::ClusterEngine(locker) => engine_pair(locker, key).await,
            Pairs::RedlockEngine(locker) => engine_pair(locker, key).await,
            Pairs::SentinelEngine(locker) => engine_pair(locker, key).await,
            Pairs::RedisEngine(locker) => engine_pair(locker, key).await,
            Pairs::ClusterBackend(backend) => backend_pair(backend, key).await,
            Pairs::RedlockBackend(backend) => backend_pair(backend, key).await,
            Pairs::SentinelBackend(backend) => backend_pair(backend, key).await,
            Pairs::RedisBackend(backend) => backend_pair(backend, key).await,
        }
    }
}

/// How long a lock waits for a replica's acknowledgement.
pub const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(100);

/// One run of `which` at `concurrency` for `duration`, on the cluster's, RedLock's or the
/// Sentinels' `nodes`, or the Redis at `redis_url`.
pub async fn run(
    which: RedisPair,
    nodes: &[String],
    redis_url: &str,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let pairs = Pairs::connect(which, nodes, redis_url).await;
    client_timed(which.name(), pairs, concurrency, duration).await
}
