//! The conformance suite on etcd: every case against a one-member cluster of its own, with two
//! backends (own sessions, own watch streams) standing in for two processes.
//!
//! No `leases` cases: a lock lives as long as its session, not a TTL of its own (the session's
//! expiry is tested on real clusters in `faults/consensus_sessions.rs`).

use std::time::Duration;

use integration_tests::EtcdCluster;
use tower_lock::backend::etcd::{EtcdBackend, EtcdSettings};
use tower_lock::conformance::{Outage, Store};

tower_lock::conformance_suite!(
    EtcdStore,
    read_write,
    semaphore,
    wait_queue,
    outage,
    inspect,
    listing,
    inspect_shapes
);

/// A fresh one-member cluster, killed when the case ends.
struct EtcdStore(EtcdCluster);

/// Sessions long enough for the suite's 30 s leases (a locker may lease two thirds).
const SESSION_TTL: Duration = Duration::from_secs(45);

impl Store for EtcdStore {
    type Backend = EtcdBackend;

    async fn start() -> Self {
        Self(EtcdCluster::start(1))
    }

    async fn backend(&self) -> EtcdBackend {
        let settings = EtcdSettings::default().session_ttl(SESSION_TTL);
        EtcdBackend::connect_with(self.0.endpoints(), settings)
            .await
            .expect("the test's etcd answers")
    }

    fn leases_expire(&self) -> bool {
        false
    }
}

impl Outage for EtcdStore {
    fn stop_answering(&self) {
        self.0.pause(0);
    }

    fn answer_again(&self) {
        self.0.resume(0);
    }
}
