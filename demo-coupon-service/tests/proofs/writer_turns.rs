//! Three replicas storm one coupon whose claims each work 20 ms inside the coupon's write lock
//! (held on within a replica for runs of up to 8 claims): no claim is passed over, on etcd and
//! ZooKeeper as on Redis — each replica's waiting writer keeps its place in line across the
//! replicas, and a replica whose run ends asks again behind them.

use std::time::Duration;

use http::StatusCode;
use integration_tests::{EtcdCluster, RedisServer, ZookeeperEnsemble};
use tokio::time::sleep;

use crate::claim_storm::{CLAIMERS, REPLICAS, Storm, claim_storm, jain};

/// How long each storm lasts.
const STORM: Duration = Duration::from_secs(15);
/// The most claims a replica hands its lock on to in a row (the demo's `--lock-local-run`).
const RUN: usize = 8;

/// Storms a coupon with its locks in `lock_store`; prints what each replica was granted, and
/// checks that no claim waited for more than twice the other claimers' turns.
///
/// The bound is the line's, not the clock's: a claim waits in its replica's line (at most 7
/// other claimers of its replica ahead), whose head waits in the store's queue behind the other
/// two replicas' heads, each of which gets a run of at most [`RUN`] — so it sees at most
/// 2 × 8 + 7 grants before its own, or twice that if it came just as its replica's run ended.
/// (Grants are counted by when their answers came back, a moment after the grant: one
/// answered just after the claim was sent may be counted, which the doubling covers.) A replica
/// that lost its place to the others again and again would make its claims wait longer. How
/// long that takes depends on the machine (a claim over its 3 s is answered 409 and printed);
/// how many turns it waits does not.
async fn storm_of_long_claims(lock_store: &str) -> Storm {
    let (storm, ()) = claim_storm(lock_store, &["--work-ms", "20"], || sleep(STORM)).await;
    let granted = storm.granted_per_replica();
    let busy = storm.count(StatusCode::CONFLICT);
    let waited = storm.most_grants_waited_for();
    println!(
        "claims granted per replica {granted:?} (Jain {:.2}), {busy} answered 409, the slowest \
         answered after {:?}, at most {waited} grants to others while one waited",
        jain(&granted),
        storm.slowest()
    );
    let ahead = (REPLICAS - 1) * RUN + (CLAIMERS / REPLICAS - 1);
    assert!(
        waited <= 2 * ahead,
        "a claim waited while {waited} others were granted, past twice the {ahead} the line puts \
         ahead of it"
    );
    storm
}

#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_keep_their_turns_across_replicas_on_etcd() {
    storm_of_long_claims(&EtcdCluster::start(3).url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_keep_their_turns_across_replicas_on_zookeeper() {
    storm_of_long_claims(&ZookeeperEnsemble::start(3).url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_keep_their_turns_across_replicas_on_redis() {
    storm_of_long_claims(&RedisServer::start().url()).await;
}
