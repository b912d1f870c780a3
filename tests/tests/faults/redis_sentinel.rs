//! Redis with Sentinels while the master dies or its replicas stall: lockers follow the
//! Sentinels to the promoted replica by themselves, a lock the replicas do not acknowledge
//! is refused and given back, and a renewal they do not acknowledge fails.

use std::time::Duration;

use integration_tests::{MASTER_NAME, RedisSentinels, lockers_recover_from};
use tower_lock::backend::redis::SentinelConnection;
use tower_lock::backend::{Attempt, Inspect, LockBackend, LockRequest, OwnerToken};
use tower_lock::{LockError, Locker, RedisBackend};

async fn group() -> RedisSentinels {
    let group = tokio::task::spawn_blocking(|| RedisSentinels::start(2)).await;
    group.expect("the Sentinels and their master start")
}

async fn backend(group: &RedisSentinels) -> RedisBackend<SentinelConnection> {
    let backend = RedisBackend::connect_sentinel(group.sentinel_urls(), MASTER_NAME).await;
    backend.expect("the test's Sentinels answer")
}

fn locker(
    backend: RedisBackend<SentinelConnection>,
    ttl: Duration,
) -> Locker<RedisBackend<SentinelConnection>> {
    Locker::builder(backend)
        .wait(Duration::from_secs(30))
        .ttl(ttl)
        .build()
        .expect("valid settings")
}

/// The master is killed under contention: once the Sentinels have promoted a replica (the
/// master down after 1 s without an answer, then an election) and the lease of a hold the dead
/// master had has run out, the lockers take the lock again on the new master by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_follow_the_sentinels_to_the_promoted_replica() {
    let mut group = group().await;
    let ttl = Duration::from_secs(2);
    let lockers = [
        locker(backend(&group).await, ttl),
        locker(backend(&group).await, ttl),
    ];
    let group = lockers_recover_from(lockers, ttl, move || {
        group.kill_master_and_wait_for_another();
        group
    })
    .await;
    drop(group);
}

/// With `replica_acks(2, …)` and both replicas frozen, taking a lock fails naming how many
/// acknowledged, and the lock is given back at once (another process takes it without waiting
/// out its lease). The twin: with the replicas running, the same lock is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_its_replicas_do_not_acknowledge_is_refused_and_given_back() {
    let group = group().await;
    let acked = |backend: RedisBackend<SentinelConnection>| {
        backend.replica_acks(2, Duration::from_millis(100))
    };
    let careful = locker(acked(backend(&group).await), Duration::from_secs(30));
    let held = careful
        .lock("k")
        .await
        .expect("both replicas acknowledge it");
    held.release().await.expect("released");

    let replicas = group.replicas();
    for &replica in &replicas {
        group.pause(replica);
    }
    let refused = careful.lock("k").await;
    for &replica in &replicas {
        group.resume(replica);
    }
    match refused {
        Err(LockError::StoreUnavailable(error)) => assert!(
            error.to_string().contains("0 of the 2 replicas"),
            "the error says how many acknowledged: {error}"
        ),
        other => panic!("expected the unacknowledged lock refused, got {other:?}"),
    }
    let other = locker(backend(&group).await, Duration::from_secs(30));
    let reject = Locker::builder(other.backend().clone()).reject().build();
    let free = reject.expect("valid settings").lock("k").await;
    assert!(free.is_ok(), "the refused lock was given back: {free:?}");
}

/// With `replica_acks(2, …)` and both replicas frozen, renewing a lease fails naming how many
/// acknowledged (a promoted replica without the renewal would end the lease sooner than its
/// holder counts on), and the lease stays its holder's on the master. The twin: without
/// `replica_acks`, the same renewal succeeds while the replicas are frozen — nothing waits for
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_its_replicas_do_not_acknowledge_fails() {
    let group = group().await;
    let ttl = Duration::from_secs(30);
    let careful = backend(&group)
        .await
        .replica_acks(2, Duration::from_millis(100));
    let careless = backend(&group).await;
    let mut leases = Vec::new();
    for (backend, name) in [(&careful, "careful"), (&careless, "careless")] {
        match backend
            .acquire(name, LockRequest::new(OwnerToken::new(), ttl))
            .await
        {
            Ok(Attempt::Acquired(granted)) => leases.push(granted.lease),
            other => panic!("expected {name} taken while the replicas run, got {other:?}"),
        }
    }

    let replicas = group.replicas();
    for &replica in &replicas {
        group.pause(replica);
    }
    let unacknowledged = careful.extend("careful", &leases[0], ttl).await;
    let unwaited = careless.extend("careless", &leases[1], ttl).await;
    for &replica in &replicas {
        group.resume(replica);
    }
    match unacknowledged {
        Err(error) => assert!(
            error
                .to_string()
                .contains("renewing lock careful: 0 of the 2 replicas"),
            "the error says how many acknowledged: {error}"
        ),
        other => panic!("expected the unacknowledged renewal to fail, got {other:?}"),
    }
    assert!(
        matches!(unwaited, Ok(true)),
        "without replica_acks nothing waits for the replicas: {unwaited:?}"
    );
    let state = careful
        .inspect("careful")
        .await
        .expect("the master answers");
    assert!(
        state.is_held(),
        "the lease stays its holder's on the master"
    );
}
