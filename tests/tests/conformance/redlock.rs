//! The conformance suite on RedLock over three `redis-server` masters of the case's own, with
//! two backends standing in for two processes.

use integration_tests::RedisServer;
use tower_lock::backend::redis::RedlockBackend;
use tower_lock::conformance::{Outage, Store};

tower_lock::conformance_suite!(RedlockStore, leases, outage, inspect, listing);

/// Three fresh, independent masters, killed when the case ends.
struct RedlockStore([RedisServer; 3]);

impl Store for RedlockStore {
    type Backend = RedlockBackend;

    async fn start() -> Self {
        Self([
            RedisServer::start(),
            RedisServer::start(),
            RedisServer::start(),
        ])
    }

    async fn backend(&self) -> RedlockBackend {
        RedlockBackend::connect(self.0.iter().map(RedisServer::url)).expect("valid URLs")
    }

    fn fences(&self) -> bool {
        false
    }

    fn records_releases(&self) -> bool {
        true
    }
}

impl Outage for RedlockStore {
    fn stop_answering(&self) {
        self.0.iter().for_each(RedisServer::pause);
    }

    fn answer_again(&self) {
        self.0.iter().for_each(RedisServer::resume);
    }
}
