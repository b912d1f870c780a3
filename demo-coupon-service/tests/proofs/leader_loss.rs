//! Three replicas with their locks in a three-member etcd cluster or ZooKeeper ensemble, under
//! a claim storm, when the ensemble's leader is killed: every claim stays correct, locked routes
//! answer again after the ensemble has a new leader, and how soon is measured.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use integration_tests::consensus::ConsensusStore;
use integration_tests::{EtcdCluster, ZookeeperEnsemble};
use tokio::time::{Instant, sleep};

use crate::claim_storm::{Storm, claim_storm};

/// How long the storm goes on after the kill: this test checks that claims are served again,
/// the benchmark (docs/BENCHMARKS.md) how soon.
const STORM_AFTER_KILL: Duration = Duration::from_secs(12);
/// How long a claim waits for the coupon's lock: longer than the election, so that a claim
/// answered 409 would be a writer that lost its place in line, not the leader's loss.
const LOCK_WAIT_MS: &str = "8000";

/// What the storm saw around the kill, timed from it.
#[derive(Debug)]
struct Recovery {
    /// Until a surviving member said it leads.
    new_leader: Duration,
    /// Until the first claim granted after that.
    first_grant: Duration,
    /// Until the last claim answered 503, the lock store unavailable (none: zero).
    last_unavailable: Duration,
    /// Claims answered 503.
    unavailable: usize,
    /// Claims answered 409, the lock still busy after the claim's 8 s wait.
    busy: usize,
    /// Claims granted.
    granted: usize,
}

impl Recovery {
    /// What `storm` saw around a kill at `killed`, whose new leader came `new_leader` after it.
    fn of(storm: &Storm, killed: Instant, new_leader: Duration) -> Self {
        let mut recovery = Self {
            new_leader,
            first_grant: Duration::MAX,
            last_unavailable: Duration::ZERO,
            unavailable: 0,
            busy: 0,
            granted: 0,
        };
        for answer in &storm.answers {
            let since_kill = answer.at.saturating_duration_since(killed);
            match answer.status {
                StatusCode::CREATED => {
                    recovery.granted += 1;
                    if since_kill > new_leader {
                        recovery.first_grant = recovery.first_grant.min(since_kill);
                    }
                }
                StatusCode::CONFLICT => recovery.busy += 1,
                status => {
                    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "a claim's answer");
                    assert!(
                        answer.at > killed,
                        "a claim before the kill was answered {status}"
                    );
                    recovery.unavailable += 1;
                    recovery.last_unavailable = recovery.last_unavailable.max(since_kill);
                }
            }
        }
        recovery
    }

    /// Prints the figures (docs/BENCHMARKS.md has those of several runs; the goal, claims
    /// served again within 1 s of the new leader, is measured there, not asserted here: two
    /// shared cores make a bound that tight flaky), and checks that claims were served again
    /// after the new leader, with no 503 in the storm's last second, and that no claim waited
    /// out its 8 s (each writer keeps its place in line across the replicas).
    fn assert_served_again(&self) {
        println!(
            "a new leader {:?} after the kill; the first claim granted after it at {:?}, the \
             last 503 at {:?} ({} in all), {} 409s; {} claims granted",
            self.new_leader,
            self.first_grant,
            self.last_unavailable,
            self.unavailable,
            self.busy,
            self.granted
        );
        assert!(
            self.first_grant < STORM_AFTER_KILL
                && self.last_unavailable + Duration::from_secs(1) < STORM_AFTER_KILL,
            "claims were not served again after the new leader: {self:?}"
        );
        assert_eq!(self.busy, 0, "a claim waited out its lock wait: {self:?}");
    }
}

/// Runs a claim storm over three replicas with their locks in `ensemble`, whose leader is
/// killed 1 s in; storms on for [`STORM_AFTER_KILL`].
async fn claim_storm_through_leader_loss(ensemble: impl ConsensusStore) -> Recovery {
    let lock_store = ensemble.url();
    // Kept until the storm's end: the coupon is read through the lock store then.
    let ensemble = Arc::new(Mutex::new(ensemble));
    let leader_lost = Arc::clone(&ensemble);
    let args = ["--lock-wait-ms", LOCK_WAIT_MS];
    let kill_the_leader = || async move {
        sleep(Duration::from_secs(1)).await;
        let killed = Instant::now();
        let new_leader = tokio::task::spawn_blocking(move || {
            let mut ensemble = leader_lost.lock().expect("the ensemble");
            let leader = ensemble.leader().expect("the ensemble has a leader");
            ensemble.kill(leader);
            while ensemble.leader().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            killed.elapsed()
        })
        .await
        .expect("a surviving member leads");
        sleep(STORM_AFTER_KILL.saturating_sub(killed.elapsed())).await;
        (killed, new_leader)
    };
    let (storm, (killed, new_leader)) = claim_storm(&lock_store, &args, kill_the_leader).await;
    drop(ensemble);
    Recovery::of(&storm, killed, new_leader)
}

#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_etcd_leader_under_a_claim_storm() {
    let recovery = claim_storm_through_leader_loss(EtcdCluster::start(3)).await;
    recovery.assert_served_again();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_zookeeper_leader_under_a_claim_storm() {
    let recovery = claim_storm_through_leader_loss(ZookeeperEnsemble::start(3)).await;
    recovery.assert_served_again();
}
