//! A release hands the lock straight to the first ticket in its queue, when the ticket
//! outlives the lease it asked for: the waiter holds the lock on hearing the announcement,
//! without asking again.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use futures_util::StreamExt;
use http::{Request, StatusCode};
use integration_tests::{RedisServer, send};
use integration_tests::{fence_of, granted};
use redis::AsyncCommands;
use redis::aio::{MultiplexedConnection, PubSub};
use tower_lock::backend::{
    BackendError, LockBackend, LockRequest, OwnerToken, QueuedAttempt, TokenLease,
};
use tower_lock::key::header;
use tower_lock::testing::CountingBackend;
use tower_lock::{Hold, LockLayer, Locker, RedisBackend};

const LEASE: Duration = Duration::from_secs(3);
/// A ticket that outlives a lease.
const LONG_TICKET: Duration = Duration::from_secs(10);

async fn connection(redis: &RedisServer) -> MultiplexedConnection {
    redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Listens to lock `k`'s release announcements.
async fn announcements(redis: &RedisServer) -> PubSub {
    let mut pubsub = redis.client().get_async_pubsub().await.unwrap();
    pubsub.subscribe("{lock:k}:free").await.unwrap();
    pubsub
}

async fn next_announcement(pubsub: &mut PubSub) -> String {
    let message = tokio::time::timeout(Duration::from_secs(5), pubsub.on_message().next())
        .await
        .expect("an announcement")
        .unwrap();
    message.get_payload().unwrap()
}

/// Takes lock `k` for `token`, as a holder outside any locker would.
async fn take(backend: &RedisBackend, token: OwnerToken) -> u64 {
    fence_of(&granted(
        backend
            .acquire("lock:k", LockRequest::new(token, LEASE))
            .await,
    ))
}

/// Asks for lock `k` with `token`'s ticket in its queue, living `ticket_ttl`.
async fn ask_queued(
    backend: &RedisBackend,
    token: OwnerToken,
    ticket_ttl: Duration,
) -> Result<QueuedAttempt<TokenLease>, BackendError> {
    let queue = backend
        .wait_queue()
        .expect("connected backends have a queue");
    queue
        .acquire_queued("lock:k", LockRequest::new(token, LEASE), ticket_ttl)
        .await
}

async fn queue(backend: &RedisBackend, token: OwnerToken, ticket_ttl: Duration) {
    let answer = ask_queued(backend, token, ticket_ttl).await.unwrap();
    assert!(matches!(answer, QueuedAttempt::Queued { .. }), "{answer:?}");
}

/// The fence of the lock a queued attempt got.
fn fence_held<L: std::fmt::Debug>(answer: Result<QueuedAttempt<L>, BackendError>) -> u64 {
    match answer.unwrap() {
        QueuedAttempt::Acquired(grant) => fence_of(&grant),
        queued => panic!("expected the lock, got {queued:?}"),
    }
}

async fn release(backend: &RedisBackend, token: OwnerToken) -> bool {
    let lease = TokenLease::new(token, Hold::Mutex);
    backend.release("lock:k", &lease).await.unwrap()
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_first_ticket_that_outlives_its_lease() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());
    let held = take(&backend, holder).await;
    queue(&backend, waiter, LONG_TICKET).await;
    let mut heard = announcements(&redis).await;

    assert!(release(&backend, holder).await);

    let handed = held + 1;
    assert_eq!(
        next_announcement(&mut heard).await,
        format!("{waiter} {handed}")
    );
    let mut connection = connection(&redis).await;
    let value: String = connection.get("{lock:k}").await.unwrap();
    assert!(
        value.starts_with(&format!("{waiter}*")),
        "held for the waiter, marked as waited for: {value}"
    );
    assert!(
        value.contains(&format!(" {handed} m ")),
        "with its record: when, the fence, a mutex, the label: {value}"
    );
    let pttl: i64 = connection.pttl("{lock:k}").await.unwrap();
    assert!(pttl > 0 && pttl <= LEASE.as_millis() as i64, "{pttl}");
    let line: i64 = connection.llen("{lock:k}:line").await.unwrap();
    assert_eq!(line, 0, "the ticket was used");

    // A waiter that missed the announcement asks again, and is told it holds the lock.
    let again = fence_held(ask_queued(&backend, waiter, LONG_TICKET).await);
    assert!(again > handed, "a fresh fence: {again} after {handed}");
    assert!(release(&backend, waiter).await);
    let exists: bool = connection.exists("{lock:k}").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_ticket_that_may_expire_before_the_lease_is_only_announced() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let (holder, waiter) = (OwnerToken::new(), OwnerToken::new());
    take(&backend, holder).await;
    queue(&backend, waiter, LEASE / 2).await;
    let mut heard = announcements(&redis).await;

    assert!(release(&backend, holder).await);

    assert_eq!(next_announcement(&mut heard).await, waiter.to_string());
    let exists: bool = connection(&redis).await.exists("{lock:k}").await.unwrap();
    assert!(
        !exists,
        "not handed: a crashed waiter could block it for a lease"
    );
    fence_held(ask_queued(&backend, waiter, LEASE / 2).await);
}

#[tokio::test]
async fn a_waiter_that_leaves_holding_a_handed_lock_passes_it_on() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let (holder, first, second) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());
    take(&backend, holder).await;
    queue(&backend, first, LONG_TICKET).await;
    queue(&backend, second, LONG_TICKET).await;
    release(&backend, holder).await;

    let queue = backend.wait_queue().unwrap();
    queue.leave_queue("lock:k", first).await.unwrap();

    let value: String = connection(&redis).await.get("{lock:k}").await.unwrap();
    assert!(value.starts_with(&format!("{second}*")), "{value}");
}

/// The release hands the lock to the queued request's ticket; woken by its announcement, the
/// request confirms it with one ask (an announcement heard late may name a handover that
/// lapsed: `engine/tests/waiting.rs`) and holds it — no wait for the lease or a backoff.
#[tokio::test]
async fn a_queued_request_takes_the_lock_handed_to_it_with_one_confirming_ask() {
    let redis = RedisServer::start();
    let backend = CountingBackend::new(RedisBackend::connect(redis.url()).await.unwrap());
    let app = Router::new()
        .route("/", post(|| async {}))
        .route_layer(LockLayer::new(
            Locker::builder(backend.clone())
                .wait(LEASE * 2)
                .build()
                .unwrap(),
            header("x-key"),
        ));
    let holder = OwnerToken::new();
    take(backend.inner(), holder).await;
    let request = Request::post("/")
        .header("x-key", "k")
        .body(Body::empty())
        .unwrap();
    let waiter = tokio::spawn(async move { send(&app, request).await.status });
    let mut connection = connection(&redis).await;
    let started = Instant::now();
    while connection.llen::<_, i64>("{lock:k}:line").await.unwrap() == 0 {
        assert!(started.elapsed() < LEASE, "the request never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Past the subscription's confirmation and any backoff retry before it (at most 250 ms):
    // from here on the queued head sleeps until it hears the release.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let asked = backend.counts().acquires;

    release(backend.inner(), holder).await;

    assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    assert!(started.elapsed() < LEASE, "woken by the release");
    assert_eq!(
        backend.counts().acquires,
        asked + 1,
        "one acquire after the release: the handover confirmed"
    );
}
