//! The conformance suite on ZooKeeper: every case against a standalone server of its own, with
//! two backends (own sessions) standing in for two processes.
//!
//! No `leases` cases: a lock lives as long as its session, not a TTL of its own (the session's
//! expiry is tested on real ensembles in `faults/consensus_sessions.rs`).

use std::time::Duration;

use integration_tests::ZookeeperEnsemble;
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
use tower_lock::conformance::{Outage, Store};

tower_lock::conformance_suite!(
    ZookeeperStore,
    read_write,
    semaphore,
    wait_queue,
    outage,
    inspect,
    listing,
    inspect_shapes
);

/// A fresh standalone server, killed when the case ends.
struct ZookeeperStore(ZookeeperEnsemble);

/// Sessions long enough for the suite's 30 s leases (a locker may lease two thirds).
const SESSION_TIMEOUT: Duration = Duration::from_secs(45);

impl Store for ZookeeperStore {
    type Backend = ZookeeperBackend;

    async fn start() -> Self {
        Self(ZookeeperEnsemble::start(1))
    }

    async fn backend(&self) -> ZookeeperBackend {
        let settings = ZookeeperSettings::default().session_timeout(SESSION_TIMEOUT);
        ZookeeperBackend::connect_with(&self.0.connect_string(), settings)
            .await
            .expect("the test's ZooKeeper answers")
    }

    fn leases_expire(&self) -> bool {
        false
    }
}

impl Outage for ZookeeperStore {
    fn stop_answering(&self) {
        self.0.pause(0);
    }

    fn answer_again(&self) {
        self.0.resume(0);
    }
}
