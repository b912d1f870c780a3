//! Three replicas storm one coupon whose claims each work 20 ms inside the coupon's write lock
//! (held on within a replica for runs of up to 8 claims), with the demo's lock wait of 3 s: no
//! claim waits it out, on etcd and ZooKeeper as on Redis — each replica's waiting writer keeps
//! its place in line across the replicas, and a replica whose run ends asks again behind them.

use std::time::Duration;

use http::StatusCode;
use integration_tests::{EtcdCluster, RedisServer, ZookeeperEnsemble};
use tokio::time::sleep;

use crate::claim_storm::{Storm, claim_storm, jain};

/// How long each storm lasts.
const STORM: Duration = Duration::from_secs(15);

/// Storms a coupon with its locks in `lock_store`; prints what each replica was granted, and
/// checks that no claim was answered 409.
async fn storm_of_long_claims(lock_store: &str) -> Storm {
    let (storm, ()) = claim_storm(lock_store, &["--work-ms", "20"], || sleep(STORM)).await;
    let granted = storm.granted_per_replica();
    let busy = storm.count(StatusCode::CONFLICT);
    println!(
        "claims granted per replica {granted:?} (Jain {:.2}), {busy} answered 409, the slowest \
         answered after {:?}",
        jain(&granted),
        storm.slowest()
    );
    assert_eq!(busy, 0, "a claim waited out its 3 s for the lock");
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
