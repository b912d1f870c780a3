//! The conformance suite on Redis with Sentinels: every case against a master with two
//! replicas watched by three Sentinels of its own, with two backends (finding the master
//! through the Sentinels, each lock acknowledged by a replica) standing in for two processes.

use std::time::Duration;

use integration_tests::{MASTER_NAME, RedisSentinels};
use tower_lock::RedisBackend;
use tower_lock::backend::redis::SentinelConnection;
use tower_lock::conformance::Store;

tower_lock::conformance_suite!(
    SentinelStore,
    leases,
    read_write,
    semaphore,
    shared_leases,
    wait_queue,
    inspect,
    listing,
    inspect_shapes
);

/// A fresh group, killed when the case ends.
struct SentinelStore(RedisSentinels);

impl Store for SentinelStore {
    type Backend = RedisBackend<SentinelConnection>;

    async fn start() -> Self {
        let group = tokio::task::spawn_blocking(|| RedisSentinels::start(2)).await;
        Self(group.expect("the Sentinels and their master start"))
    }

    async fn backend(&self) -> RedisBackend<SentinelConnection> {
        let backend = RedisBackend::connect_sentinel(self.0.sentinel_urls(), MASTER_NAME).await;
        let backend = backend.expect("the test's Sentinels answer");
        backend.replica_acks(1, Duration::from_millis(500))
    }

    fn records_releases(&self) -> bool {
        true
    }
}
