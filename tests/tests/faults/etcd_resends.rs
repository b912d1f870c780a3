//! Requests lost with an etcd leader. A member goes on forwarding writes to a leader that died
//! until its election timeout tells it otherwise, and etcd drops what it forwarded: such a write
//! is answered only with etcd's own request timeout, seconds after a new leader took over. The
//! backend sends it again once the member follows a new leader — so each of its writes must be
//! safe to apply twice: an attempt whose first copy was applied after all is granted, once.

use std::time::Duration;

use integration_tests::EtcdCluster;
use tower_lock::Locker;
use tower_lock::backend::etcd::{EtcdBackend, EtcdLease};
use tower_lock::backend::{
    Attempt, Granted, LockBackend, LockRequest, OwnerToken, Patience, Semaphores, SharedLocks,
};

/// Far longer than etcd takes to elect a leader, and to give up on a lost write (7 s with its
/// default timing): an attempt that fails within it failed for etcd's reasons.
const STORE_TIMEOUT: Duration = Duration::from_secs(20);

const TTL: Duration = Duration::from_secs(10);

/// A three-member cluster with a leader, and a follower of it.
fn cluster_with_a_follower() -> (EtcdCluster, usize, usize) {
    let cluster = EtcdCluster::start(3);
    let leader = cluster.leader().expect("the cluster elected a leader");
    (cluster, leader, (leader + 1) % 3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_asked_through_a_follower_as_the_leader_dies_is_granted_by_the_next() {
    let (mut cluster, leader, follower) = cluster_with_a_follower();
    let backend = EtcdBackend::connect([cluster.endpoint(follower)])
        .await
        .expect("the follower answers");
    let locker = Locker::builder(backend)
        .reject()
        .store_timeout(STORE_TIMEOUT)
        .build()
        .expect("valid settings");
    let warm = locker.lock("warm").await.expect("the cluster serves");
    warm.release().await.expect("released");

    cluster.kill(leader);
    let held = locker.lock("k").await;
    assert!(
        held.is_ok(),
        "the attempt the follower forwarded to the dead leader was not sent again: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sending_again_a_write_forwarded_to_the_dead_leader_is_lost() {
    let (mut cluster, leader, follower) = cluster_with_a_follower();
    cluster
        .put_through(follower, "warm")
        .expect("the cluster serves");

    cluster.kill(leader);
    let cluster = tokio::task::spawn_blocking(move || cluster.put_through(follower, "k"));
    let put = cluster.await.expect("the put ran");
    let error = put.expect_err("a write the follower forwarded to the dead leader was applied");
    assert!(error.contains("timed out"), "{error}");
}

fn acquired<T>(attempt: Attempt<T>) -> bool {
    matches!(attempt, Attempt::Acquired(_))
}

/// Asks `ask` twice with the same request, as a copy sent again after a leader change would
/// be: the second answer must be the first grant, not a busy lock held by its own key.
async fn asked_twice(
    ask: impl AsyncFn(LockRequest) -> Attempt<Granted<EtcdLease>>,
) -> (Granted<EtcdLease>, Attempt<()>) {
    let request = LockRequest::new(OwnerToken::new(), TTL).patience(Patience::Polls);
    let Attempt::Acquired(first) = ask(request).await else {
        panic!("the lock is free");
    };
    let again = match ask(request).await {
        Attempt::Acquired(again) => {
            assert_eq!(again.lease, first.lease, "the same key, put once");
            assert_eq!(again.fence, first.fence);
            Attempt::Acquired(())
        }
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    };
    (first, again)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_attempt_applied_twice_is_granted_once_and_bars_everyone_else() {
    let cluster = EtcdCluster::start(1);
    let backend = EtcdBackend::connect(cluster.endpoints())
        .await
        .expect("etcd answers");
    let other = || LockRequest::new(OwnerToken::new(), TTL);

    let (mutex, again) = asked_twice(async |request| {
        backend
            .acquire("mutex", request)
            .await
            .expect("etcd answers")
    })
    .await;
    assert!(acquired(again), "a mutex attempt applied twice");
    let outsider = backend
        .acquire("mutex", other())
        .await
        .expect("etcd answers");
    assert!(
        !acquired(outsider),
        "another attempt got the mutex beside it"
    );
    assert!(
        backend
            .release("mutex", &mutex.lease)
            .await
            .expect("etcd answers")
    );
    let free = backend
        .acquire("mutex", other())
        .await
        .expect("etcd answers");
    assert!(acquired(free), "the mutex was not free after one release");

    let (writer, again) = asked_twice(async |request| {
        backend
            .acquire_write("rw", request)
            .await
            .expect("etcd answers")
    })
    .await;
    assert!(acquired(again), "a write attempt applied twice");
    let reader = backend
        .acquire_read("rw", other())
        .await
        .expect("etcd answers");
    assert!(!acquired(reader), "a reader got in beside the writer");
    assert!(
        backend
            .release("rw", &writer.lease)
            .await
            .expect("etcd answers")
    );

    let (reader, again) = asked_twice(async |request| {
        backend
            .acquire_read("rw", request)
            .await
            .expect("etcd answers")
    })
    .await;
    assert!(acquired(again), "a read attempt applied twice");
    let writer = backend
        .acquire_write("rw", other())
        .await
        .expect("etcd answers");
    assert!(!acquired(writer), "a writer got in beside the reader");
    assert!(
        backend
            .release("rw", &reader.lease)
            .await
            .expect("etcd answers")
    );

    let one = std::num::NonZeroU32::MIN;
    let (permit, again) = asked_twice(async |request| {
        let permit = backend.acquire_permit("permits", request, one);
        permit.await.expect("etcd answers")
    })
    .await;
    assert!(acquired(again), "a permit attempt applied twice");
    let outsider = backend.acquire_permit("permits", other(), one).await;
    assert!(
        !acquired(outsider.expect("etcd answers")),
        "a second permit of one"
    );
    assert!(
        backend
            .release("permits", &permit.lease)
            .await
            .expect("etcd answers")
    );
}
