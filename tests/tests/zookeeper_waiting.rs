//! A waiter on ZooKeeper is woken by its watch, not by polling: while it waits behind a held
//! lock, it sends the ensemble nothing but its session's heartbeats (counted by the server's
//! own `srvr` statistics); the same waiter in polling mode keeps asking.

use std::time::Duration;

use integration_tests::ZookeeperEnsemble;
use tokio::time::sleep;
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
use tower_lock::{Locker, LockerBuilder};

/// How long the requests are counted.
const WAITED: Duration = Duration::from_secs(3);

/// 40 s sessions: each backend renews its session every 10 s (a touch and a listing of its
/// nodes) and its client pings after 6 s without sending, so within `WAITED` each of the two
/// backends sends at most one of those: two requests.
const SESSION_TIMEOUT: Duration = Duration::from_secs(40);
const HEARTBEATS: u64 = 2 * 2;

/// The requests the server received while a waiter of `configure`'s kind waited for `WAITED`
/// behind a held lock; the waiter then gets the lock once it is released.
async fn requests_while_waiting(
    configure: impl FnOnce(LockerBuilder<ZookeeperBackend>) -> LockerBuilder<ZookeeperBackend>,
) -> u64 {
    let ensemble = ZookeeperEnsemble::start(1);
    let holder = Locker::builder(connect(&ensemble).await)
        .build()
        .expect("valid settings");
    let waiter = configure(Locker::builder(connect(&ensemble).await).wait(Duration::from_secs(30)))
        .build()
        .expect("valid settings");
    let held = holder.lock("k").await.expect("free");
    let waiting = tokio::spawn(async move { waiter.lock("k").await.map(drop) });
    // In line (its node created and its predecessor watched) well before counting starts.
    sleep(Duration::from_millis(500)).await;

    let before = ensemble.requests_received(0);
    sleep(WAITED).await;
    let after = ensemble.requests_received(0);

    held.release().await.expect("released");
    let served = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    served
        .expect("the waiter is served soon after the release")
        .expect("the waiter did not panic")
        .expect("the waiter gets the lock");
    after - before
}

async fn connect(ensemble: &ZookeeperEnsemble) -> ZookeeperBackend {
    let settings = ZookeeperSettings::default().session_timeout(SESSION_TIMEOUT);
    ZookeeperBackend::connect_with(&ensemble.connect_string(), settings)
        .await
        .expect("the ensemble answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notified_waiter_asks_nothing_while_it_waits() {
    let requests = requests_while_waiting(|builder| builder).await;
    assert!(
        requests <= HEARTBEATS,
        "{requests} requests while waiting, more than the sessions' heartbeats"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_asks_nothing_while_it_waits() {
    let requests = requests_while_waiting(|builder| builder.fair(Duration::from_secs(3))).await;
    assert!(
        requests <= HEARTBEATS,
        "{requests} requests while waiting, more than the sessions' heartbeats"
    );
}

/// The twin: without the watch (polling), the waiter keeps asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_waiter_keeps_asking() {
    let requests = requests_while_waiting(|builder| {
        builder
            .wait_polling(Duration::from_secs(30))
            .backoff(Duration::from_millis(50), Duration::from_millis(200))
    })
    .await;
    assert!(requests >= 20, "only {requests} requests in 3 s of polling");
}
