//! Locks on three-member etcd clusters and three-server ZooKeeper ensembles while members
//! fail: the leader killed under contention (nobody is let in twice, and grants go on; the
//! figures are printed for docs/BENCHMARKS.md), and the quorum lost (new acquires fail within
//! the store timeout, holders are told their leases are lost by their deadline) and restored
//! (locks are granted again by the same backends, nothing restarted). The scenarios are in
//! `tests/src/consensus/failover.rs`.

integration_tests::consensus_tests!(failover:
    killing_the_leader_under_contention_lets_nobody_in_twice,
    losing_the_quorum_fails_fast_and_restoring_it_resumes_service,
);
