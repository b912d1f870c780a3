//! The conformance suite on Redis: every case against a `redis-server` of its own, with two
//! backends (own connections, own subscriber) standing in for two processes.

use integration_tests::RedisServer;
use tower_lock::RedisBackend;
use tower_lock::conformance::{Outage, Store};

mod fenced {
    tower_lock::conformance_suite!(
        super::RedisStore,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue,
        inspect,
        listing,
        inspect_shapes,
        outage
    );
}

mod unfenced {
    tower_lock::conformance_suite!(
        super::UnfencedRedisStore,
        leases,
        read_write,
        wait_queue,
        inspect
    );
}

/// A fresh `redis-server`, killed when the case ends.
struct RedisStore(RedisServer);

impl Store for RedisStore {
    type Backend = RedisBackend;

    async fn start() -> Self {
        Self(RedisServer::start())
    }

    async fn backend(&self) -> RedisBackend {
        RedisBackend::connect(self.0.url())
            .await
            .expect("the test's redis-server answers")
    }

    fn records_releases(&self) -> bool {
        true
    }
}

impl Outage for RedisStore {
    fn stop_answering(&self) {
        self.0.pause();
    }

    fn answer_again(&self) {
        self.0.resume();
    }
}

/// The same, with `RedisBackend::fencing(false)`: no fencing tokens, the rest unchanged.
struct UnfencedRedisStore(RedisStore);

impl Store for UnfencedRedisStore {
    type Backend = RedisBackend;

    async fn start() -> Self {
        Self(RedisStore::start().await)
    }

    async fn backend(&self) -> RedisBackend {
        self.0.backend().await.fencing(false)
    }

    fn fences(&self) -> bool {
        false
    }

    fn records_releases(&self) -> bool {
        true
    }
}
