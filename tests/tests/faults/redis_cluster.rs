//! Locks on a Redis Cluster while it changes: a lock's hash slot migrated to another master
//! while a waiter waits for it.

use std::time::Duration;

use integration_tests::{RedisCluster, lockers_recover_from};
use tokio::time::{Instant, sleep, timeout};
use tower_lock::backend::redis::ClusterLink;
use tower_lock::{Locker, RedisBackend};

/// Long enough that a waiter left to the holder's lease would be seen.
const LONG: Duration = Duration::from_secs(30);

async fn cluster(masters: usize, replicas: usize) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start(masters, replicas))
        .await
        .expect("the cluster starts")
}

async fn locker(cluster: &RedisCluster, ttl: Duration) -> Locker<RedisBackend<ClusterLink>> {
    let backend = RedisBackend::connect_cluster(cluster.urls()).await;
    let backend = backend.expect("the test's cluster answers");
    Locker::builder(backend)
        .wait(LONG)
        .ttl(ttl)
        .build()
        .expect("valid settings")
}

/// A waiter whose lock's hash slot moves to another master while it waits is woken by the
/// release on the new master, not by the holder's lease running out: its sharded subscription,
/// which the old master drops (`SUNSUBSCRIBE`), is made again on the new one. The twin, the
/// server's `SUNSUBSCRIBE` left to redis-rs, got the lock 14 s after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_after_its_locks_slot_moved() {
    let cluster = cluster(3, 1).await;
    let (holder, waiter) = (locker(&cluster, LONG).await, locker(&cluster, LONG).await);
    let held = holder.lock("k").await.expect("free");
    let waiting = tokio::spawn(async move { waiter.lock("k").await });
    sleep(Duration::from_millis(300)).await;

    let slot = cluster.slot_of(&RedisBackend::lock_key("lock:k"));
    let from = cluster.master_of(slot);
    let to = *cluster
        .masters()
        .iter()
        .find(|&&port| port != from)
        .expect("another master");
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.migrate_slot(slot, from, to);
        cluster
    })
    .await
    .expect("the slot moves");
    assert_eq!(cluster.master_of(slot), to, "the slot moved");
    sleep(Duration::from_millis(500)).await;

    let released = Instant::now();
    held.release()
        .await
        .expect("released on the slot's new master");
    let taken = timeout(LONG, waiting)
        .await
        .expect("the waiter gets the lock");
    let woken_after = released.elapsed();
    let held = taken
        .expect("the waiter finished")
        .expect("it holds the lock");
    held.release().await.expect("released");
    assert!(
        woken_after < Duration::from_secs(2),
        "the waiter got the lock {woken_after:?} after the release"
    );
}

/// The master serving a contended lock is killed: once its replica has taken over (the node
/// timeout, 1 s, then an election) and the lease of a hold the dead master had has run out (the
/// replica may have it), the lockers take the lock again by themselves — the connections follow
/// the new topology, nothing is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_recover_by_themselves_when_the_locks_master_dies() {
    let mut cluster = cluster(3, 1).await;
    let ttl = Duration::from_secs(2);
    let lockers = [locker(&cluster, ttl).await, locker(&cluster, ttl).await];
    let master = cluster.master_of(cluster.slot_of(&RedisBackend::lock_key("lock:k")));
    let cluster = lockers_recover_from(lockers, ttl, move || {
        cluster.kill(master);
        cluster.wait_until_settled();
        cluster
    })
    .await;
    drop(cluster);
}
