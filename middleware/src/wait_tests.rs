//! Waiting for a busy lock, on the in-process backend: woken by releases, one contender per
//! lock in the process, first come first served.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{Request, StatusCode};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::acquire::HEAD_TICKET_TTL;
use crate::backend::CountingBackend;
use crate::key::{Header, header};
use crate::{Acquire, LockBackend, LockLayer, MemoryBackend, OwnerToken};

const TTL: Duration = Duration::from_secs(30);

/// The memory backend, counting acquire attempts.
type Counted = CountingBackend<MemoryBackend>;

fn counted() -> Counted {
    CountingBackend::new(MemoryBackend::new())
}

/// A route that reports which request (its `x-id`) got the lock, in order.
fn recording_app(layer: LockLayer<Counted, Header>) -> (Router, mpsc::UnboundedReceiver<String>) {
    let (order, received) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/",
            post(move |request: Request<Body>| async move {
                let id = request.headers()["x-id"].to_str().unwrap().to_owned();
                order.send(id).unwrap();
            }),
        )
        .route_layer(layer);
    (app, received)
}

fn spawn_request(app: &Router, id: usize) -> tokio::task::JoinHandle<StatusCode> {
    let request = Request::post("/")
        .header("x-key", "k")
        .header("x-id", id.to_string())
        .body(Body::empty())
        .unwrap();
    let app = app.clone();
    tokio::spawn(async move { app.oneshot(request).await.unwrap().status() })
}

async fn hold(backend: &Counted) -> OwnerToken {
    let token = OwnerToken::new();
    let answer = backend.inner().acquire("lock:k", token, TTL).await.unwrap();
    assert!(matches!(answer, Acquire::Acquired { .. }));
    token
}

/// Lets spawned requests run until they all wait (well within a ticket renewal).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_woken_by_the_release_not_by_a_timer() {
    let backend = counted();
    let (app, mut order) = recording_app(
        LockLayer::new(backend.clone(), header("x-key")).wait(Duration::from_secs(10)),
    );
    let holder = hold(&backend).await;
    let waiter = spawn_request(&app, 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts_while_waiting = backend.counts().acquires as usize;

    let waited = Duration::from_secs(5);
    tokio::time::sleep(waited).await;
    let renewals = (waited.as_millis() / (HEAD_TICKET_TTL / 3).as_millis()) as usize;
    assert!(
        backend.counts().acquires as usize <= attempts_while_waiting + renewals,
        "no polling: only the head's ticket is renewed, every third of its TTL"
    );
    let released = Instant::now();
    backend.inner().release("lock:k", holder).await.unwrap();

    assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    assert_eq!(released.elapsed(), Duration::ZERO, "woken at the release");
    assert_eq!(order.recv().await.unwrap(), "1");
}

#[tokio::test(start_paused = true)]
async fn polling_waiters_retry_on_timers_instead() {
    let backend = counted();
    let layer =
        LockLayer::new(backend.clone(), header("x-key")).wait_polling(Duration::from_secs(10));
    let (app, _order) = recording_app(layer);
    let holder = hold(&backend).await;
    let waiter = spawn_request(&app, 1);

    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        backend.counts().acquires as usize > 10,
        "the baseline polls"
    );
    backend.inner().release("lock:k", holder).await.unwrap();

    assert_eq!(waiter.await.unwrap(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn local_waiters_are_served_in_arrival_order_with_one_contender() {
    let backend = counted();
    let (app, mut order) = recording_app(
        LockLayer::new(backend.clone(), header("x-key")).wait(Duration::from_secs(10)),
    );
    let holder = hold(&backend).await;
    let mut waiters = Vec::new();
    for id in 0..20 {
        waiters.push(spawn_request(&app, id));
        settle().await;
    }
    let attempts_before = backend.counts().acquires as usize;
    assert_eq!(
        attempts_before, 2,
        "only the first waiter asked: a first look, then as head"
    );

    backend.inner().release("lock:k", holder).await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    }

    let served: Vec<String> = (0..20).map(|_| order.try_recv().unwrap()).collect();
    assert_eq!(served, (0..20).map(|id| id.to_string()).collect::<Vec<_>>());
    let per_handoff = (backend.counts().acquires as usize - attempts_before) as f64 / 20.0;
    assert!(
        per_handoff <= 2.0,
        "O(1) attempts per handoff, not O(waiters): {per_handoff}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_leaves_the_line_at_once() {
    let backend = counted();
    let (app, mut order) = recording_app(
        LockLayer::new(backend.clone(), header("x-key")).wait(Duration::from_secs(10)),
    );
    let holder = hold(&backend).await;
    let first = spawn_request(&app, 1);
    settle().await;
    let second = spawn_request(&app, 2);
    settle().await;

    first.abort();
    let _ = first.await;
    backend.inner().release("lock:k", holder).await.unwrap();

    assert_eq!(second.await.unwrap(), StatusCode::OK);
    assert_eq!(order.recv().await.unwrap(), "2");
}

#[tokio::test(start_paused = true)]
async fn fair_waiters_are_served_in_arrival_order() {
    let backend = counted();
    let layer = LockLayer::new(backend.clone(), header("x-key"))
        .wait(Duration::from_secs(10))
        .fair(Duration::from_secs(3));
    let (app, mut order) = recording_app(layer);
    let holder = OwnerToken::new();
    backend
        .inner()
        .acquire_fair("lock:k", holder, TTL, Duration::from_secs(3))
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for id in 0..10 {
        waiters.push(spawn_request(&app, id));
        settle().await;
    }

    backend.inner().release("lock:k", holder).await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    }

    let served: Vec<String> = (0..10).map(|_| order.try_recv().unwrap()).collect();
    assert_eq!(served, (0..10).map(|id| id.to_string()).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_crashed_fair_waiter_holds_up_the_line_only_until_its_ticket_expires() {
    let store = MemoryBackend::new();
    let ticket_ttl = Duration::from_secs(3);
    let (holder, crashed, patient) = (OwnerToken::new(), OwnerToken::new(), OwnerToken::new());
    store
        .acquire_fair("k", holder, TTL, ticket_ttl)
        .await
        .unwrap();
    store
        .acquire_fair("k", crashed, TTL, ticket_ttl)
        .await
        .unwrap();
    store
        .acquire_fair("k", patient, TTL, ticket_ttl)
        .await
        .unwrap();
    store.release("k", holder).await.unwrap();

    let before_expiry = store
        .acquire_fair("k", patient, TTL, ticket_ttl)
        .await
        .unwrap();
    tokio::time::sleep(ticket_ttl).await;
    let after_expiry = store
        .acquire_fair("k", patient, TTL, ticket_ttl)
        .await
        .unwrap();

    assert!(
        matches!(before_expiry, Acquire::Busy { .. }),
        "the line is kept: {before_expiry:?}"
    );
    assert!(
        matches!(after_expiry, Acquire::Acquired { .. }),
        "{after_expiry:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gives_up_at_its_deadline_and_its_place_is_forgotten() {
    let backend = counted();
    let (app, _order) = recording_app(
        LockLayer::new(backend.clone(), header("x-key")).wait(Duration::from_secs(2)),
    );
    hold(&backend).await;
    let started = Instant::now();

    assert_eq!(spawn_request(&app, 1).await.unwrap(), StatusCode::CONFLICT);
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(backend.inner().waiting_room().unwrap().waiting_names(), 0);
}
