//! A waiter on a consensus store is woken by its watch, not by polling: while it waits behind
//! a held lock, it sends the cluster nothing but its session's heartbeats (counted by the
//! server itself); the same waiter in polling mode keeps asking.

use std::time::Duration;

use tokio::time::sleep;
use tower_lock::{Locker, LockerBuilder};

use super::ConsensusStore;

/// How long the requests are counted.
const WAITED: Duration = Duration::from_secs(3);

/// Sessions long enough to renew themselves rarely (see
/// [`ConsensusStore::HEARTBEATS_IN_3_S`]).
const SESSION: Duration = Duration::from_secs(40);

/// The lock requests the server handled while a waiter of `configure`'s kind waited for
/// `WAITED` behind a held lock, less what the sessions' heartbeats may account for; the waiter
/// then gets the lock once it is released.
///
/// # Panics
///
/// When the waiter is not served soon after the release.
pub async fn requests_while_waiting<S: ConsensusStore>(
    configure: impl FnOnce(LockerBuilder<S::Backend>) -> LockerBuilder<S::Backend>,
) -> u64 {
    let cluster = S::start(1);
    let holder = Locker::builder(cluster.backend(&[0], SESSION).await)
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
