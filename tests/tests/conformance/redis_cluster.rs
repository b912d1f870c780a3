//! The conformance suite on Redis Cluster: every case against a cluster of its own (three
//! masters, each with a replica), with two cluster backends standing in for two processes.

use integration_tests::RedisCluster;
use tower_lock::RedisBackend;
use tower_lock::backend::redis::ClusterLink;
use tower_lock::conformance::Store;

tower_lock::conformance_suite!(
    RedisClusterStore,
    leases,
    read_write,
    semaphore,
    shared_leases,
    wait_queue,
    inspect,
    listing,
    inspect_shapes
);

/// A fresh cluster, killed when the case ends.
struct RedisClusterStore(RedisCluster);

impl Store for RedisClusterStore {
    type Backend = RedisBackend<ClusterLink>;

    async fn start() -> Self {
        Self(
            tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
                .await
                .expect("the cluster starts"),
        )
    }

    async fn backend(&self) -> RedisBackend<ClusterLink> {
        RedisBackend::connect_cluster(self.0.urls())
            .await
            .expect("the test's cluster answers")
    }

    fn records_releases(&self) -> bool {
        true
    }
}
