//! Scenario `distinct-keys` on Redis beyond one node (`--backend redis-cluster`, `--backend
//! redlock`): tasks lock and unlock keys nobody else uses, through tower-lock's engine and
//! backend on a Redis Cluster of three masters (each with a replica) or RedLock over three
//! masters, beside the engine and backend on one Redis node in the same run. Cluster keys
//! spread over every master.

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use tower_lock::backend::redis::RedlockBackend;
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

    pub fn name(self) -> &'static str {
        match self {
            RedisPair::ClusterBackend => "cluster-backend",
            RedisPair::ClusterEngine => "cluster-engine",
            RedisPair::RedlockBackend => "redlock-backend",
            RedisPair::RedlockEngine => "redlock-engine",
            RedisPair::RedisBackend => "redis-backend",
            RedisPair::RedisEngine => "redis-engine",
        }
    }
}

enum Pairs {
    ClusterEngine(Locker<RedisBackend<ClusterConnection>>),
    ClusterBackend(RedisBackend<ClusterConnection>),
    RedlockEngine(Locker<RedlockBackend>),
    RedlockBackend(RedlockBackend),
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
        let redis = || async {
            let backend = RedisBackend::connect(redis_url).await;
            backend.expect("Redis reachable")
        };
        match which {
            RedisPair::ClusterEngine => Pairs::ClusterEngine(engine(cluster().await)),
            RedisPair::ClusterBackend => Pairs::ClusterBackend(cluster().await),
            RedisPair::RedlockEngine => Pairs::RedlockEngine(engine(redlock())),
            RedisPair::RedlockBackend => Pairs::RedlockBackend(redlock()),
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
            Pairs::RedisEngine(locker) => engine_pair(locker, key).await,
            Pairs::ClusterBackend(backend) => backend_pair(backend, key).await,
            Pairs::RedlockBackend(backend) => backend_pair(backend, key).await,
            Pairs::RedisBackend(backend) => backend_pair(backend, key).await,
        }
    }
}

/// One run of `which` at `concurrency` for `duration`, on the cluster's or RedLock's `nodes`
/// or the Redis at `redis_url`.
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
