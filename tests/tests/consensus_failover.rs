//! Locks on three-member etcd clusters and three-server ZooKeeper ensembles while members
//! fail: the leader killed under contention (nobody is let in twice, and grants go on; the
//! figures are printed for docs/BENCHMARKS.md), and the quorum lost (new acquires fail within
//! the store timeout, holders are told their leases are lost by their deadline) and restored
//! (locks are granted again by the same backends, nothing restarted). The scenarios are in
//! `tests/src/consensus/failover.rs`.

use integration_tests::consensus::failover;
use integration_tests::{EtcdCluster, ZookeeperEnsemble};

mod etcd {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killing_the_leader_under_contention_lets_nobody_in_twice() {
        failover::killing_the_leader_under_contention_lets_nobody_in_twice::<EtcdCluster>().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn losing_the_quorum_fails_fast_and_restoring_it_resumes_service() {
        failover::losing_the_quorum_fails_fast_and_restoring_it_resumes_service::<EtcdCluster>()
            .await;
    }
}

mod zookeeper {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killing_the_leader_under_contention_lets_nobody_in_twice() {
        failover::killing_the_leader_under_contention_lets_nobody_in_twice::<ZookeeperEnsemble>()
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn losing_the_quorum_fails_fast_and_restoring_it_resumes_service() {
        failover::losing_the_quorum_fails_fast_and_restoring_it_resumes_service::<ZookeeperEnsemble>().await;
    }
}
