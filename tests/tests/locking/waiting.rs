//! Waiting for a busy lock against real Redis: release announcements, their loss, fair order
//! across processes, and mutual exclusion under many contenders.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{Request, StatusCode};
use integration_tests::{Occupancy, RedisServer, send};
use redis::AsyncCommands;
use tokio::sync::mpsc;
use tower_lock::backend::{LockBackend, LockRequest, OwnerToken, QueuedAttempt, TokenLease};
use tower_lock::key::header;
use tower_lock::{LockLayer, Locker, RedisBackend};

const HOLD_TTL: Duration = Duration::from_secs(3);

/// Fair mode's tickets, when they are shorter than 1.5 leases: a release names the next
/// ticket, which takes the lock itself.
const SHORT_TICKETS: Duration = Duration::from_secs(3);
/// Fair mode's tickets, when they outlive a lease: a release hands the lock to the next one.
const LONG_TICKETS: Duration = Duration::from_secs(10);

/// A "process": its own backend (own connections, own subscriber) and its own app (leases of
/// `HOLD_TTL`, fair mode with these tickets if `fair`), reporting which request (`x-id`) got
/// the lock, and holding it for `hold`.
async fn process(
    redis: &RedisServer,
    fair: Option<Duration>,
    hold: Duration,
    order: mpsc::UnboundedSender<String>,
) -> Router {
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    // Every release through Redis: these cases are about the store's queue, not about locks
    // handed on within a process.
    let mut locker = Locker::builder(backend)
        .ttl(HOLD_TTL)
        .wait(Duration::from_secs(20))
        .max_local_run(1);
    if let Some(ticket_ttl) = fair {
        locker = locker.fair(ticket_ttl);
    }
    let layer = LockLayer::new(locker.build().unwrap(), header("x-key"));
    Router::new()
        .route(
            "/",
            post(move |request: Request<Body>| async move {
                order
                    .send(request.headers()["x-id"].to_str().unwrap().to_owned())
                    .unwrap();
                tokio::time::sleep(hold).await;
            }),
        )
        .route_layer(layer)
}

fn request(app: &Router, id: usize) -> tokio::task::JoinHandle<StatusCode> {
    let request = Request::post("/")
        .header("x-key", "k")
        .header("x-id", id.to_string())
        .body(Body::empty())
        .unwrap();
    let app = app.clone();
    tokio::spawn(async move { send(&app, request).await.status })
}

/// Takes lock `k` directly, as another holder would.
async fn hold(backend: &RedisBackend) -> TokenLease {
    integration_tests::hold(backend, "lock:k", HOLD_TTL)
        .await
        .lease
}

async fn subscribers(redis: &RedisServer) -> i64 {
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("{lock:k}:free")
        .query_async(&mut connection)
        .await
        .unwrap();
    counts[0].1
}

/// Waits until `count` processes subscribe to lock `k`'s announcements.
async fn until_subscribed(redis: &RedisServer, count: i64) {
    let started = Instant::now();
    while subscribers(redis).await < count {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "nobody subscribed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_announced_release() {
    let redis = RedisServer::start();
    let (order, mut served) = mpsc::unbounded_channel();
    let app = process(&redis, None, Duration::ZERO, order).await;
    let holder_backend = RedisBackend::connect(redis.url()).await.unwrap();
    let holder = hold(&holder_backend).await;
    let waiter = request(&app, 1);
    until_subscribed(&redis, 1).await;

    let released = Instant::now();
    holder_backend.release("lock:k", &holder).await.unwrap();

    assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    assert!(
        released.elapsed() < HOLD_TTL / 2,
        "woken by the announcement, not by the holder's lease running out: {:?}",
        released.elapsed()
    );
    assert_eq!(served.recv().await.unwrap(), "1");
}

#[tokio::test]
async fn a_waiter_still_gets_the_lock_when_the_release_is_never_announced() {
    let redis = RedisServer::start();
    let (order, _served) = mpsc::unbounded_channel();
    let app = process(&redis, None, Duration::ZERO, order).await;
    let holder_backend = RedisBackend::connect(redis.url()).await.unwrap();
    hold(&holder_backend).await;
    let waiter = request(&app, 1);
    until_subscribed(&redis, 1).await;
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    // The lock vanishes without a PUBLISH: an operator's DEL, or a lost message.
    let _: () = connection.del("{lock:k}").await.unwrap();

    let status = tokio::time::timeout(HOLD_TTL * 2, waiter)
        .await
        .expect("woken by the lease bound");
    assert_eq!(status.unwrap(), StatusCode::OK);
}

#[tokio::test]
async fn a_killed_subscriber_connection_does_not_strand_its_waiters() {
    let redis = RedisServer::start();
    let (order, _served) = mpsc::unbounded_channel();
    let app = process(&redis, None, Duration::ZERO, order).await;
    let holder_backend = RedisBackend::connect(redis.url()).await.unwrap();
    let holder = hold(&holder_backend).await;
    let waiter = request(&app, 1);
    until_subscribed(&redis, 1).await;
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"])
        .query_async(&mut connection)
        .await
        .unwrap();
    holder_backend.release("lock:k", &holder).await.unwrap();

    assert_eq!(killed, 1, "the waiter's subscriber connection");
    let status = tokio::time::timeout(HOLD_TTL * 2, waiter)
        .await
        .expect("the waiter got the lock");
    assert_eq!(status.unwrap(), StatusCode::OK);

    // The subscriber reconnects by itself, and announcements reach the next waiter again.
    let holder = hold(&holder_backend).await;
    let next = request(&app, 2);
    until_subscribed(&redis, 1).await;
    let released = Instant::now();
    holder_backend.release("lock:k", &holder).await.unwrap();
    assert_eq!(next.await.unwrap(), StatusCode::OK);
    assert!(
        released.elapsed() < HOLD_TTL / 2,
        "announced again: {:?}",
        released.elapsed()
    );
}

/// Twelve requests queued alternately in two fair processes behind a held lock, with
/// `ticket_ttl` tickets: the order they were served in.
async fn fair_order(ticket_ttl: Duration) -> Vec<String> {
    let redis = RedisServer::start();
    let (order, mut served) = mpsc::unbounded_channel();
    let processes = [
        process(&redis, Some(ticket_ttl), Duration::ZERO, order.clone()).await,
        process(&redis, Some(ticket_ttl), Duration::ZERO, order).await,
    ];
    let holder_backend = RedisBackend::connect(redis.url()).await.unwrap();
    let queue = holder_backend.wait_queue().unwrap();
    let holding = LockRequest::new(OwnerToken::new(), HOLD_TTL);
    let queued = queue.acquire_queued("lock:k", holding, ticket_ttl).await;
    let QueuedAttempt::Acquired(holder) = queued.unwrap() else {
        panic!("the lock is free");
    };
    let holder = holder.lease;
    let mut waiters = Vec::new();
    for id in 0..12 {
        waiters.push(request(&processes[id % 2], id));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }

    holder_backend.release("lock:k", &holder).await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    }
    (0..12).map(|_| served.try_recv().unwrap()).collect()
}

#[tokio::test]
async fn fair_mode_serves_two_processes_in_arrival_order() {
    let arrival: Vec<String> = (0..12).map(|id| id.to_string()).collect();
    assert_eq!(fair_order(SHORT_TICKETS).await, arrival);
}

#[tokio::test]
async fn fair_mode_hands_the_lock_over_in_arrival_order_when_tickets_outlive_leases() {
    let arrival: Vec<String> = (0..12).map(|id| id.to_string()).collect();
    assert_eq!(fair_order(LONG_TICKETS).await, arrival);
}

/// Twelve requests queued alternately in two notified processes behind a held lock are served
/// one process after the other: each process's head of line holds a ticket in the store's
/// queue, and a process's next head queues behind the other's. Which head's ticket came first
/// (their requests were sent 10 ms apart) is up to the machine's timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notified_processes_take_turns_instead_of_the_releaser_winning_every_race() {
    let redis = RedisServer::start();
    let (order, mut served) = mpsc::unbounded_channel();
    let hold_each = Duration::from_millis(20);
    let processes = [
        process(&redis, None, hold_each, order.clone()).await,
        process(&redis, None, hold_each, order).await,
    ];
    let holder_backend = RedisBackend::connect(redis.url()).await.unwrap();
    let holder = hold(&holder_backend).await;
    let mut waiters = Vec::new();
    for id in 0..12 {
        waiters.push(request(&processes[id % 2], id));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    holder_backend.release("lock:k", &holder).await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    }

    let by_process: String = (0..12)
        .map(
            |_| match served.try_recv().unwrap().parse::<usize>().unwrap() % 2 {
                0 => 'A',
                _ => 'B',
            },
        )
        .collect();
    let in_turn = by_process
        .as_bytes()
        .windows(2)
        .all(|pair| pair[0] != pair[1]);
    assert!(in_turn, "each process in turn: {by_process}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_notified_contenders_across_two_processes_never_overlap() {
    let redis = RedisServer::start();
    let occupancy = Arc::new(Occupancy::default());
    let mut processes = Vec::new();
    for _ in 0..2 {
        let backend = RedisBackend::connect(redis.url()).await.unwrap();
        let occupancy = occupancy.clone();
        processes.push(
            Router::new()
                .route(
                    "/",
                    post(move || async move { occupancy.visit(Duration::from_millis(1)).await }),
                )
                .route_layer(LockLayer::new(
                    Locker::builder(backend)
                        .wait(Duration::from_secs(30))
                        .build()
                        .unwrap(),
                    header("x-key"),
                )),
        );
    }

    let requests: Vec<_> = (0..64).map(|id| request(&processes[id % 2], id)).collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }

    assert_eq!(occupancy.most(), 1);
}

#[tokio::test]
async fn without_fencing_a_waiter_that_queued_gets_no_token_either() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url())
        .await
        .unwrap()
        .fencing(false);
    let (queue, ticket_ttl) = (backend.wait_queue().unwrap(), Duration::from_secs(3));
    let waiter = LockRequest::new(OwnerToken::new(), HOLD_TTL);
    let held = integration_tests::hold(&backend, "lock:k", HOLD_TTL).await;
    let queued = queue.acquire_queued("lock:k", waiter, ticket_ttl).await;

    backend.release("lock:k", &held.lease).await.unwrap();
    let taken = queue.acquire_queued("lock:k", waiter, ticket_ttl).await;

    assert_eq!(held.fence, None);
    assert!(
        matches!(queued, Ok(QueuedAttempt::Queued { .. })),
        "{queued:?}"
    );
    assert!(
        matches!(taken, Ok(QueuedAttempt::Acquired(ref grant)) if grant.fence.is_none()),
        "{taken:?}"
    );
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let counters: Vec<String> = connection.keys("tower-lock:fence:*").await.unwrap();
    assert!(counters.is_empty(), "no fencing counter: {counters:?}");
}
