//! A waiter on a consensus store is woken by its watch, not by polling: while it waits behind
//! a held lock, it sends the cluster nothing but its session's heartbeats (counted by the
//! server itself); the same waiter in polling mode keeps asking.

use std::time::Duration;

use tokio::time::sleep;
use tower_lock::backend::LockBackend;
use tower_lock::{Locker, LockerBuilder};

use super::ConsensusStore;

/// How long the requests are counted.
const WAITED: Duration = Duration::from_secs(3);

/// The holder's lease: its first renewal comes after the counting ends.
const HOLDER_TTL: Duration = Duration::from_secs(20);

/// Sessions long enough to renew themselves rarely (see
/// [`ConsensusStore::HEARTBEATS_IN_3_S`]).
const SESSION: Duration = Duration::from_secs(40);

/// A waiter in notified mode (the default) sends nothing while it waits.
///
/// # Panics
///
/// When it does, or is not served soon after the release.
pub async fn a_notified_waiter_asks_nothing_while_it_waits<S: ConsensusStore>() {
    let requests = requests_while_waiting::<S>(|builder| builder).await;
    assert_eq!(
        requests, 0,
        "requests sent while waiting, beyond heartbeats"
    );
}

/// A waiter in fair mode sends nothing while it waits.
///
/// # Panics
///
/// When it does, or is not served soon after the release.
pub async fn a_fair_waiter_asks_nothing_while_it_waits<S: ConsensusStore>() {
    let requests =
        requests_while_waiting::<S>(|builder| builder.fair(Duration::from_secs(3))).await;
    assert_eq!(
        requests, 0,
        "requests sent while waiting, beyond heartbeats"
    );
}

/// The twin: without the watch (polling with a short backoff), the waiter keeps asking.
///
/// # Panics
///
/// When it asks fewer than 10 times in 3 s, or is not served soon after the release.
pub async fn a_polling_waiter_keeps_asking<S: ConsensusStore>() {
    let requests = requests_while_waiting::<S>(polling).await;
    assert!(requests >= 10, "only {requests} requests in 3 s of polling");
}

/// Polling with a short backoff instead of waiting for the watch.
fn polling<B: LockBackend>(builder: LockerBuilder<B>) -> LockerBuilder<B> {
    builder
        .wait_polling(Duration::from_secs(30))
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
}

/// The lock requests the server handled while a waiter of `configure`'s kind waited for
/// `WAITED` behind a held lock, less what the sessions' heartbeats may account for; the waiter
/// then gets the lock once it is released.
async fn requests_while_waiting<S: ConsensusStore>(
    configure: impl FnOnce(LockerBuilder<S::Backend>) -> LockerBuilder<S::Backend>,
) -> u64 {
    let cluster = S::start(1);
    // A lease renewed after the counting (every TTL/3): a renewal reads the holder's key or
    // node, which is the holder's request, not the waiter's.
    let holder = Locker::builder(cluster.backend(&[0], SESSION).await)
        .ttl(HOLDER_TTL)
        .build()
        .expect("valid settings");
    let waiter =
        Locker::builder(cluster.backend(&[0], SESSION).await).wait(Duration::from_secs(30));
    let waiter = configure(waiter).build().expect("valid settings");
    let held = holder.lock("k").await.expect("free");
    let waiting = tokio::spawn(async move { waiter.lock("k").await.map(drop) });
    // In line (its key or node in place and its predecessor watched) well before counting.
    sleep(Duration::from_millis(500)).await;

    let before = cluster.lock_requests(0);
    sleep(WAITED).await;
    let after = cluster.lock_requests(0);

    held.release().await.expect("released");
    let served = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    served
        .expect("the waiter is served soon after the release")
        .expect("the waiter did not panic")
        .expect("the waiter gets the lock");
    (after - before).saturating_sub(S::HEARTBEATS_IN_3_S)
}
