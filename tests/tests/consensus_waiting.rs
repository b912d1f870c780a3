//! A waiter on etcd or ZooKeeper is woken by its watch, not by polling: while it waits behind a
//! held lock, it sends the cluster nothing but its session's heartbeats (counted by the server
//! itself); the same waiter in polling mode keeps asking. The scenario is in
//! `tests/src/consensus/waiting.rs`.

use std::time::Duration;

use integration_tests::consensus::waiting::requests_while_waiting;
use integration_tests::{EtcdCluster, ZookeeperEnsemble};
use tower_lock::LockerBuilder;

/// Polling with a short backoff instead of waiting for the watch.
fn polling<B: tower_lock::LockBackend>(builder: LockerBuilder<B>) -> LockerBuilder<B> {
    builder
        .wait_polling(Duration::from_secs(30))
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
}

mod etcd {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_notified_waiter_asks_nothing_while_it_waits() {
        let requests = requests_while_waiting::<EtcdCluster>(|builder| builder).await;
        assert_eq!(
            requests, 0,
            "requests sent while waiting, beyond heartbeats"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fair_waiter_asks_nothing_while_it_waits() {
        let requests =
            requests_while_waiting::<EtcdCluster>(|builder| builder.fair(Duration::from_secs(3)))
                .await;
        assert_eq!(
            requests, 0,
            "requests sent while waiting, beyond heartbeats"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_polling_waiter_keeps_asking() {
        // The twin: without the watch (polling), the waiter keeps asking.
        let requests = requests_while_waiting::<EtcdCluster>(polling).await;
        assert!(requests >= 10, "only {requests} requests in 3 s of polling");
    }
}

mod zookeeper {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_notified_waiter_asks_nothing_while_it_waits() {
        let requests = requests_while_waiting::<ZookeeperEnsemble>(|builder| builder).await;
        assert_eq!(
            requests, 0,
            "requests sent while waiting, beyond heartbeats"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fair_waiter_asks_nothing_while_it_waits() {
        let requests = requests_while_waiting::<ZookeeperEnsemble>(|builder| {
            builder.fair(Duration::from_secs(3))
        })
        .await;
        assert_eq!(
            requests, 0,
            "requests sent while waiting, beyond heartbeats"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_polling_waiter_keeps_asking() {
        // The twin: without the watch (polling), the waiter keeps asking.
        let requests = requests_while_waiting::<ZookeeperEnsemble>(polling).await;
        assert!(requests >= 10, "only {requests} requests in 3 s of polling");
    }
}
