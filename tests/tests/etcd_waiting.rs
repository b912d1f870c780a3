//! A waiter on etcd is woken by its watch, not by polling: while it waits behind a held lock,
//! it sends the cluster no requests (counted by the member's own metrics); the same waiter in
//! polling mode keeps asking.

use std::time::Duration;

use integration_tests::EtcdCluster;
use tokio::time::sleep;
use tower_lock::backend::etcd::EtcdBackend;
use tower_lock::{Locker, LockerBuilder};

/// The key-value requests the member handled while a waiter of `configure`'s kind waited for
/// `WAITED` behind a held lock; the waiter then gets the lock once it is released.
async fn requests_while_waiting(
    configure: impl FnOnce(LockerBuilder<EtcdBackend>) -> LockerBuilder<EtcdBackend>,
) -> u64 {
    const WAITED: Duration = Duration::from_secs(3);
    let cluster = EtcdCluster::start(1);
    let holder = Locker::builder(connect(&cluster).await)
        .build()
        .expect("valid settings");
    let waiter = configure(Locker::builder(connect(&cluster).await).wait(Duration::from_secs(30)))
        .build()
        .expect("valid settings");
    let held = holder.lock("k").await.expect("free");
    let waiting = tokio::spawn(async move { waiter.lock("k").await.map(drop) });
    // In line (its key put and its predecessor watched) well before counting starts.
    sleep(Duration::from_millis(500)).await;

    let before = cluster.requests_started(0, "etcdserverpb.KV");
    sleep(WAITED).await;
    let after = cluster.requests_started(0, "etcdserverpb.KV");

    held.release().await.expect("released");
    let served = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    served
        .expect("the waiter is served soon after the release")
        .expect("the waiter did not panic")
        .expect("the waiter gets the lock");
    after - before
}

async fn connect(cluster: &EtcdCluster) -> EtcdBackend {
    EtcdBackend::connect(cluster.endpoints())
        .await
        .expect("the cluster answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notified_waiter_asks_nothing_while_it_waits() {
    let requests = requests_while_waiting(|builder| builder).await;
    assert_eq!(requests, 0, "requests sent while waiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_asks_nothing_while_it_waits() {
    let requests = requests_while_waiting(|builder| builder.fair(Duration::from_secs(3))).await;
    assert_eq!(requests, 0, "requests sent while waiting");
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
    assert!(requests >= 10, "only {requests} requests in 3 s of polling");
}
