//! Locks on a Redis Cluster while it changes: a lock's hash slot migrated to another master
//! while a waiter waits for it.

use std::time::Duration;

use integration_tests::{RedisCluster, lockers_recover_from};
use tokio::time::{Instant, sleep, timeout};
use tower_lock::backend::redis::ClusterLink;
use tower_lock::{LockError, Locker, RedisBackend};

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

/// The hash slot of lock `k`, the master serving it, and another master.
fn slot_of_k_and_two_masters(cluster: &RedisCluster) -> (u16, u16, u16) {
    let slot = cluster.slot_of(&RedisBackend::lock_key("lock:k"));
    let from = cluster.master_of(slot);
    let to = *cluster
        .masters()
        .iter()
        .find(|&&port| port != from)
        .expect("another master");
    (slot, from, to)
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

    let (slot, from, to) = slot_of_k_and_two_masters(&cluster);
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
    // The holder's lease has 30 s left: a waiter that missed the release on the slot's new
    // master would wait for that; one woken by it asks again at once.
    assert!(
        woken_after < Duration::from_secs(2),
        "the waiter got the lock {woken_after:?} after the release"
    );
}

/// A lock whose hash slot is half moved (importing on one master, migrating from another,
/// the slot's fencing counter still on the old one) is taken on the new master, where the old
/// one sends it (`ASK`, then `ASKING`), with a fence above the old master's last; another
/// process finds it held; it is given back there and taken again. With `ASK` not followed,
/// the other process was told the store failed, the redirection as its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_taken_and_given_back_while_its_slot_moves() {
    let cluster = cluster(3, 0).await;
    let mine = locker(&cluster, LONG).await;
    // Not waiting: a waiter would mark the lock, and its release would then need the lock's
    // line too, keys on both masters, which Redis refuses until the move ends (`TRYAGAIN`).
    let theirs = RedisBackend::connect_cluster(cluster.urls()).await;
    let theirs = Locker::builder(theirs.expect("the test's cluster answers"))
        .wait(Duration::ZERO)
        .build()
        .expect("valid settings");
    let first = mine.lock("k").await.expect("free");
    let last_fence = first.fence().expect("fenced");
    first.release().await.expect("released");

    let (slot, from, to) = slot_of_k_and_two_masters(&cluster);
    cluster.begin_migration(slot, from, to);

    let held = mine
        .lock("k")
        .await
        .expect("taken where the old master sends it");
    let fence = held.fence().expect("fenced");
    assert!(fence > last_fence, "fence {fence} after {last_fence}");
    let meanwhile = theirs.lock("k").await;
    assert!(
        matches!(meanwhile, Err(LockError::Busy { .. })),
        "another process was told {meanwhile:?} of a held lock"
    );
    held.release().await.expect("given back where it was taken");
    let again = theirs.lock("k").await.expect("free again");
    again.release().await.expect("released");
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

/// The master serving a contended lock freezes (its connections stay open, its commands go
/// unanswered): once its replica has taken over, the lockers take the lock again by themselves —
/// the link notices a master that answers nothing for a second and asks the other nodes which
/// master serves the slot now. With that watch removed, no holds came after the takeover while
/// the old master stayed frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_recover_by_themselves_when_the_locks_master_freezes() {
    let cluster = cluster(3, 1).await;
    let ttl = Duration::from_secs(2);
    let lockers = [locker(&cluster, ttl).await, locker(&cluster, ttl).await];
    let master = cluster.master_of(cluster.slot_of(&RedisBackend::lock_key("lock:k")));
    let cluster = lockers_recover_from(lockers, ttl, move || {
        cluster.pause(master);
        cluster.wait_until_replaced(master);
        cluster
    })
    .await;
    cluster.resume(master);
}
