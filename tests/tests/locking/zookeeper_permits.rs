//! ZooKeeper's permit waiters keep their nodes in line, as Curator's semaphore does: they are
//! served in the order they came, and one that gives up withdraws its node — else it would hold
//! its place, and keep later waiters out, for as long as its session lives.

use std::num::NonZeroU32;
use std::time::Duration;

use integration_tests::ZookeeperEnsemble;
use tower_lock::backend::zookeeper::{DEFAULT_ROOT, ZookeeperBackend, ZookeeperLease};
use tower_lock::backend::{Attempt, LockBackend, LockRequest, OwnerToken, Patience, Semaphores};
use tower_lock::{LockError, Locker};
use zookeeper_client::Client;

const ONE: NonZeroU32 = NonZeroU32::MIN;
const TTL: Duration = Duration::from_secs(5);

/// Takes `lock:k`'s only permit: its lease.
async fn the_only_permit(backend: &ZookeeperBackend) -> ZookeeperLease {
    let holding = LockRequest::new(OwnerToken::new(), TTL);
    match backend.acquire_permit("lock:k", holding, ONE).await {
        Ok(Attempt::Acquired(held)) => held.lease,
        other => panic!("expected the only permit, got {other:?}"),
    }
}

/// The permit nodes (`s-…`) in `lock:k`'s directory.
async fn permit_nodes(client: &Client) -> usize {
    let dir = format!("{DEFAULT_ROOT}/lock:k");
    let children = client
        .list_children(&dir)
        .await
        .expect("the directory is there");
    children
        .iter()
        .filter(|name| name.starts_with("s-"))
        .count()
}

async fn connected(ensemble: &ZookeeperEnsemble) -> (ZookeeperBackend, Client) {
    let backend = ZookeeperBackend::connect(&ensemble.connect_string()).await;
    let client = Client::connect(&ensemble.connect_string()).await;
    (
        backend.expect("the ensemble answers"),
        client.expect("the ensemble answers"),
    )
}

/// A waiter that gives up withdraws its place: the directory keeps the holder's node alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_waiter_that_gives_up_leaves_no_node_in_line() {
    let ensemble = ZookeeperEnsemble::start(1);
    let (backend, client) = connected(&ensemble).await;
    let holder = Locker::new(backend.clone());
    let held = holder.permit("k", ONE).await.expect("the only permit");
    let waiter = Locker::builder(backend)
        .wait(Duration::from_millis(300))
        .build();
    let gave_up = waiter.expect("valid settings").permit("k", ONE).await;
    assert!(
        matches!(gave_up, Err(LockError::Busy { .. })),
        "{gave_up:?}"
    );
    assert_eq!(permit_nodes(&client).await, 1, "the holder's node alone");
    held.release().await.expect("released");
}

/// The twin, at the contract: an attempt that will ask again keeps its node in line while the
/// permit is taken, and only `abandon` (what the engine sends when its caller gives up) takes
/// it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_attempt_that_will_ask_again_keeps_its_node_until_abandoned() {
    let ensemble = ZookeeperEnsemble::start(1);
    let (backend, client) = connected(&ensemble).await;
    the_only_permit(&backend).await;
    let waiting = LockRequest::new(OwnerToken::new(), TTL).patience(Patience::Polls);
    let busy = backend.acquire_permit("lock:k", waiting, ONE).await;
    assert!(matches!(busy, Ok(Attempt::Busy { .. })), "{busy:?}");
    assert_eq!(
        permit_nodes(&client).await,
        2,
        "the waiter's node stays in line"
    );
    backend.abandon("lock:k", waiting).await.expect("abandoned");
    assert_eq!(permit_nodes(&client).await, 1, "abandoned, it is gone");
}

/// Waiters in line are served in the order they came, whichever asks first after a release
/// (the twin below: without a place in line, the first to ask gets in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_waiters_are_served_in_the_order_they_came() {
    let ensemble = ZookeeperEnsemble::start(1);
    let (backend, _client) = connected(&ensemble).await;
    let held = the_only_permit(&backend).await;
    let waiters: Vec<LockRequest> = (0..3)
        .map(|_| LockRequest::new(OwnerToken::new(), TTL).patience(Patience::Polls))
        .collect();
    for waiter in &waiters {
        let busy = backend.acquire_permit("lock:k", *waiter, ONE).await;
        assert!(matches!(busy, Ok(Attempt::Busy { .. })), "{busy:?}");
    }
    backend.release("lock:k", &held).await.expect("released");
    // The last to come asks first, then the others, latest first: only the first to come gets in.
    for (position, waiter) in waiters.iter().enumerate().rev() {
        let answer = backend.acquire_permit("lock:k", *waiter, ONE).await;
        let acquired = matches!(answer, Ok(Attempt::Acquired(_)));
        assert_eq!(acquired, position == 0, "waiter {position}: {answer:?}");
    }
}

/// The twin: attempts that ask once keep no place, and the first to ask after the release
/// gets in, whoever came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_attempts_that_ask_once_keep_no_order() {
    let ensemble = ZookeeperEnsemble::start(1);
    let (backend, _client) = connected(&ensemble).await;
    let held = the_only_permit(&backend).await;
    let (first, last) = (
        LockRequest::new(OwnerToken::new(), TTL),
        LockRequest::new(OwnerToken::new(), TTL),
    );
    for attempt in [first, last] {
        let busy = backend.acquire_permit("lock:k", attempt, ONE).await;
        assert!(matches!(busy, Ok(Attempt::Busy { .. })), "{busy:?}");
    }
    backend.release("lock:k", &held).await.expect("released");
    let answer = backend.acquire_permit("lock:k", last, ONE).await;
    assert!(
        matches!(answer, Ok(Attempt::Acquired(_))),
        "the last came, first served: {answer:?}"
    );
}
