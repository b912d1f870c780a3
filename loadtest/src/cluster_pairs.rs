//! Scenario `distinct-keys` on Redis Cluster (`--backend redis-cluster`): tasks lock and unlock
//! keys nobody else uses, through tower-lock's engine and backend on a cluster of three masters
//! (each with a replica), beside the engine and backend on one Redis node in the same run. Keys
//! spread over every master.

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use tower_lock::{Locker, RedisBackend};

use crate::distinct_keys::{PairSummary, Pairing, backend_pair, client_timed, engine, engine_pair};

/// What is compared, by its name in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterPair {
    /// The backend's `acquire` and `release` on the cluster.
    ClusterBackend,
    /// `Locker::with_lock` around no work, on the cluster.
    ClusterEngine,
    /// The backend's `acquire` and `release` on one Redis.
    RedisBackend,
    /// `Locker::with_lock` on one Redis, on the same machine.
    RedisEngine,
}

impl ClusterPair {
    pub const ALL: [ClusterPair; 4] = [
        ClusterPair::ClusterBackend,
        ClusterPair::ClusterEngine,
        ClusterPair::RedisBackend,
        ClusterPair::RedisEngine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ClusterPair::ClusterBackend => "cluster-backend",
            ClusterPair::ClusterEngine => "cluster-engine",
            ClusterPair::RedisBackend => "redis-backend",
            ClusterPair::RedisEngine => "redis-engine",
        }
    }
}

enum Pairs {
    ClusterEngine(Locker<RedisBackend<ClusterConnection>>),
    ClusterBackend(RedisBackend<ClusterConnection>),
    RedisEngine(Locker<RedisBackend>),
    RedisBackend(RedisBackend),
}

impl Pairs {
    async fn connect(which: ClusterPair, nodes: &[String], redis_url: &str) -> Self {
        let cluster = || async {
            let backend = RedisBackend::connect_cluster(nodes.to_vec()).await;
            backend.expect("the cluster reachable")
        };
        let redis = || async {
            let backend = RedisBackend::connect(redis_url).await;
            backend.expect("Redis reachable")
        };
        match which {
            ClusterPair::ClusterEngine => Pairs::ClusterEngine(engine(cluster().await)),
            ClusterPair::ClusterBackend => Pairs::ClusterBackend(cluster().await),
            ClusterPair::RedisEngine => Pairs::RedisEngine(engine(redis().await)),
            ClusterPair::RedisBackend => Pairs::RedisBackend(redis().await),
        }
    }
}

impl Pairing for Pairs {
    async fn pair(&self, key: &str) {
        match self {
            Pairs::ClusterEngine(locker) => engine_pair(locker, key).await,
            Pairs::RedisEngine(locker) => engine_pair(locker, key).await,
            Pairs::ClusterBackend(backend) => backend_pair(backend, key).await,
            Pairs::RedisBackend(backend) => backend_pair(backend, key).await,
        }
    }
}

/// One run of `which` at `concurrency` for `duration`.
pub async fn run(
    which: ClusterPair,
    nodes: &[String],
    redis_url: &str,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let pairs = Pairs::connect(which, nodes, redis_url).await;
    client_timed(which.name(), pairs, concurrency, duration).await
}
