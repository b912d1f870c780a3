//! The layer as HTTP sees it: keys from requests, answers instead of the handler, the guard in
//! the extensions, nesting, cancellation, a failing store, a lost lease.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tower::{ServiceBuilder, ServiceExt, service_fn};

use crate::backend::LockBackend;
use crate::key::{Header, KeyTemplate, header, many, path};
use crate::test_support::{Hanging, hold, is_free};
use crate::{LockGuard, LockLayer, Locker, MemoryBackend, OnLost};

mod answers;
mod arbitrary_input;
mod bodies;
mod guards;
mod routing;
mod settings;

const TTL: Duration = Duration::from_secs(30);

/// What an app answered, with the body read to the end.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

/// Sends `request` to a clone of `app` and reads the whole answer.
async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app
        .clone()
        .oneshot(request)
        .await
        .expect("routers are infallible");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("a readable body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Sends `request` to `app` in a task of its own; its status.
fn spawn_send(app: &Router, request: Request<Body>) -> tokio::task::JoinHandle<StatusCode> {
    let app = app.clone();
    tokio::spawn(async move { send(&app, request).await.status })
}

/// A request with an empty body.
fn request(method: Method, uri: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .expect("a valid request")
}

/// A request to `/` whose `x-key` header names its lock, and whose `x-id` names the request.
fn keyed(method: Method, key: &str, id: usize) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri("/")
        .header("x-key", key)
        .header("x-id", id.to_string())
        .body(Body::empty())
        .expect("a valid request")
}

fn coupon_key() -> KeyTemplate {
    KeyTemplate::parse("coupon:{path id}").unwrap()
}

fn claim(id: &str) -> Request<Body> {
    request(Method::POST, &format!("/coupons/{id}/claim"))
}

/// A claim route under `layer` whose handler counts its runs and answers with its lock's name
/// and fence.
fn claim_app<B: LockBackend>(layer: LockLayer<B, KeyTemplate>, runs: Arc<AtomicUsize>) -> Router {
    let handler = move |lock: Option<Extension<LockGuard>>| async move {
        runs.fetch_add(1, Ordering::SeqCst);
        lock.map(|Extension(lock)| format!("{} {:?}", lock.name(), lock.fence().map(|f| f.get())))
            .unwrap_or_else(|| "unlocked".to_owned())
    };
    Router::new()
        .route("/coupons/{id}/claim", post(handler))
        .route_layer(layer)
}

/// A route on `/` under `layer` whose handler answers with the hold it got.
fn hold_app(layer: LockLayer<MemoryBackend, impl crate::key::KeyExtractor>) -> Router {
    let handler =
        |Extension(lock): Extension<LockGuard>| async move { format!("{:?}", lock.hold()) };
    Router::new()
        .route("/", get(handler).post(handler))
        .route_layer(layer)
}

#[tokio::test]
async fn the_handler_runs_holding_the_lock_and_it_is_released_afterwards() {
    let store = MemoryBackend::new();
    let probe = store.clone();
    let app = Router::new()
        .route(
            "/coupons/{id}/claim",
            post(move || async move { is_free(&probe, "lock:coupon:7").await.to_string() }),
        )
        .route_layer(LockLayer::new(Locker::new(store.clone()), coupon_key()));

    let reply = send(&app, claim("7")).await;

    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "false")
    );
    assert!(is_free(&store, "lock:coupon:7").await);
}

#[tokio::test]
async fn the_handler_sees_its_guard_with_key_and_fence() {
    let app = claim_app(
        LockLayer::new(Locker::new(MemoryBackend::new()), coupon_key()),
        Arc::default(),
    );

    assert_eq!(send(&app, claim("7")).await.body, "lock:coupon:7 Some(256)");
    assert_eq!(send(&app, claim("7")).await.body, "lock:coupon:7 Some(512)");
}

#[tokio::test]
async fn a_busy_lock_is_rejected_with_409_and_retry_after() {
    let store = MemoryBackend::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let app = claim_app(
        LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            coupon_key(),
        ),
        runs.clone(),
    );
    hold(&store, "lock:coupon:7", TTL).await;

    let reply = send(&app, claim("7")).await;

    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(reply.headers["retry-after"], "1", "no hold time known yet");
    assert_eq!(reply.headers["content-type"], "application/problem+json");
    assert!(reply.body.contains("resource is locked"), "{}", reply.body);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        send(&app, claim("8")).await.status,
        StatusCode::OK,
        "other keys are free"
    );
}

#[tokio::test]
async fn the_busy_status_is_configurable() {
    let store = MemoryBackend::new();
    let layer = LockLayer::new(
        Locker::builder(store.clone()).reject().build().unwrap(),
        coupon_key(),
    )
    .busy_status(StatusCode::TOO_MANY_REQUESTS);
    let app = claim_app(layer, Arc::default());
    hold(&store, "lock:coupon:7", TTL).await;

    assert_eq!(
        send(&app, claim("7")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gives_up_with_409_when_its_timeout_passes() {
    let store = MemoryBackend::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = LockLayer::new(
        Locker::builder(store.clone())
            .wait(Duration::from_secs(2))
            .build()
            .unwrap(),
        coupon_key(),
    );
    let app = claim_app(layer, runs.clone());
    hold(&store, "lock:coupon:7", TTL).await;
    let started = tokio::time::Instant::now();

    let reply = send(&app, claim("7")).await;

    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_request_without_a_key_runs_unlocked() {
    let only_with_header =
        |parts: &http::request::Parts| Ok(parts.headers.get("x-lock").map(|_| "locked".to_owned()));
    let app = Router::new()
        .route(
            "/",
            post(|lock: Option<Extension<LockGuard>>| async move { lock.is_some().to_string() }),
        )
        .route_layer(LockLayer::new(
            Locker::new(MemoryBackend::new()),
            only_with_header,
        ));
    let marked = Request::post("/")
        .header("x-lock", "1")
        .body(Body::empty())
        .unwrap();

    assert_eq!(send(&app, request(Method::POST, "/")).await.body, "false");
    assert_eq!(send(&app, marked).await.body, "true");
}

#[tokio::test]
async fn invalid_keys_are_answered_400_naming_the_problem() {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = claim_app(
        LockLayer::new(Locker::new(MemoryBackend::new()), coupon_key()),
        runs.clone(),
    );
    let cases = [
        ("a%7Bb%7D", "`{` or `}`"),
        ("a%01b", "control character"),
        (&"x".repeat(300), "is 307 bytes long; at most 256"),
    ];

    for (id, detail) in cases {
        let reply = send(&app, claim(id)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{id}");
        assert_eq!(reply.headers["content-type"], "application/problem+json");
        assert!(reply.body.contains(detail), "{}", reply.body);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_key_limit_is_configurable() {
    let layer = LockLayer::new(
        Locker::builder(MemoryBackend::new())
            .max_key_len(10)
            .build()
            .unwrap(),
        coupon_key(),
    );
    let app = claim_app(layer, Arc::default());

    assert_eq!(send(&app, claim("123")).await.status, StatusCode::OK);
    assert_eq!(
        send(&app, claim("1234")).await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn the_path_parameter_is_seen_under_router_layer_too() {
    let app = Router::new()
        .route("/coupons/{id}/claim", post(|| async { "claimed" }))
        .layer(LockLayer::new(
            Locker::new(MemoryBackend::new()),
            path("id"),
        ));

    assert_eq!(send(&app, claim("7")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn nested_layers_on_the_same_lock_pass_through() {
    let store = MemoryBackend::new();
    let app = claim_app(
        LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            coupon_key(),
        ),
        Arc::default(),
    )
    .layer(LockLayer::new(
        Locker::builder(store.clone()).reject().build().unwrap(),
        coupon_key(),
    ));

    let reply = send(&app, claim("7")).await;

    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "lock:coupon:7 Some(256)"),
        "one acquire, by the outer layer"
    );
    assert!(is_free(&store, "lock:coupon:7").await);
}

#[tokio::test]
async fn nested_layers_on_different_locks_take_both() {
    let store = MemoryBackend::new();
    let probe = store.clone();
    let app = Router::new()
        .route(
            "/coupons/{id}/claim",
            post(move || async move {
                let tenant = is_free(&probe, "lock:tenant:acme").await;
                let coupon = is_free(&probe, "lock:coupon:7").await;
                format!("{tenant} {coupon}")
            }),
        )
        .route_layer(LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            coupon_key(),
        ))
        .layer(LockLayer::new(
            Locker::new(store.clone()),
            KeyTemplate::parse("tenant:{header x-tenant}").unwrap(),
        ));
    let request = Request::post("/coupons/7/claim")
        .header("x-tenant", "acme")
        .body(Body::empty())
        .unwrap();

    assert_eq!(send(&app, request).await.body, "false false");
    assert!(is_free(&store, "lock:tenant:acme").await);
    assert!(is_free(&store, "lock:coupon:7").await);
}

#[tokio::test]
async fn an_inner_writer_under_an_outer_reader_of_the_same_key_is_refused_not_run_shared() {
    let store = MemoryBackend::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let inner = LockLayer::new(
        Locker::builder(store.clone()).reject().build().unwrap(),
        coupon_key(),
    );
    let outer = LockLayer::new(Locker::new(store), coupon_key()).read_write_by(|_| true);
    let app = claim_app(inner, runs.clone()).layer(outer);

    let reply = send(&app, claim("7")).await;

    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.body
    );
    assert!(
        reply.body.contains("urn:tower-lock:lock-not-reentrant"),
        "{}",
        reply.body
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the handler never ran under a shared lock"
    );
}

#[tokio::test]
async fn the_lock_is_released_when_the_inner_service_fails() {
    let store = MemoryBackend::new();
    let failing = service_fn(|_: Request<Body>| async { Err::<http::Response<String>, _>("boom") });
    let service = ServiceBuilder::new()
        .layer(LockLayer::new(Locker::new(store.clone()), header("x-key")))
        .service(failing);

    assert_eq!(
        service
            .oneshot(keyed(Method::POST, "a", 0))
            .await
            .unwrap_err(),
        "boom"
    );
    assert!(is_free(&store, "lock:a").await);
}

#[tokio::test]
async fn a_dropped_request_releases_its_lock() {
    let store = MemoryBackend::new();
    let (entered, mut inside) = tokio::sync::mpsc::channel(1);
    let forever = service_fn(move |_: Request<Body>| {
        let entered = entered.clone();
        async move {
            entered.send(()).await.unwrap();
            std::future::pending::<Result<http::Response<String>, Infallible>>().await
        }
    });
    let service = ServiceBuilder::new()
        .layer(LockLayer::new(Locker::new(store.clone()), header("x-key")))
        .service(forever);
    let in_flight = tokio::spawn(service.oneshot(keyed(Method::POST, "a", 0)));
    inside.recv().await.unwrap();
    assert!(!is_free(&store, "lock:a").await);

    in_flight.abort();
    drop(in_flight.await);
    tokio::task::yield_now().await;

    assert!(is_free(&store, "lock:a").await);
}

/// The coupon lock in a store that never answers, given up on after 300 ms.
fn lock_in_a_silent_store() -> LockLayer<Hanging, KeyTemplate> {
    let locker = Locker::builder(Hanging)
        .store_timeout(Duration::from_millis(300))
        .build();
    LockLayer::new(locker.expect("valid settings"), coupon_key())
}

#[tokio::test(start_paused = true)]
async fn a_store_that_does_not_answer_is_503_after_the_store_timeout_and_never_runs_the_handler() {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = claim_app(lock_in_a_silent_store(), runs.clone());
    let started = tokio::time::Instant::now();

    let reply = send(&app, claim("7")).await;

    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers["retry-after"], "1");
    assert!(
        !reply.body.contains("answer"),
        "internals stay in the logs: {}",
        reply.body
    );
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn fail_open_runs_the_handler_when_the_store_is_down() {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = claim_app(lock_in_a_silent_store().fail_open(), runs.clone());

    let reply = send(&app, claim("7")).await;

    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "unlocked")
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A route on `/` whose handler works for `work`, then answers whether it still held its lock.
fn slow_app(
    layer: LockLayer<MemoryBackend, Header>,
    work: Duration,
    finished: Arc<AtomicBool>,
) -> Router {
    let handler = move |Extension(lock): Extension<LockGuard>| async move {
        tokio::time::sleep(work).await;
        finished.store(true, Ordering::SeqCst);
        lock.is_held().to_string()
    };
    Router::new().route("/", post(handler)).route_layer(layer)
}

#[tokio::test(start_paused = true)]
async fn without_renewal_a_slow_handler_loses_its_lock_and_is_answered_503() {
    let ttl = Duration::from_millis(300);
    let finished = Arc::new(AtomicBool::new(false));
    let layer = LockLayer::new(
        Locker::builder(MemoryBackend::new())
            .ttl(ttl)
            .renew(false)
            .build()
            .unwrap(),
        header("x-key"),
    );
    let app = slow_app(layer.clone(), ttl * 2, finished.clone());

    let reply = send(&app, keyed(Method::POST, "a", 0)).await;
    tokio::time::sleep(ttl * 2).await;

    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body.contains("urn:tower-lock:lock-lost"),
        "{}",
        reply.body
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "no step after the loss ran"
    );
    assert_eq!(layer.locker().held_locks(), 0);
}

#[tokio::test(start_paused = true)]
async fn with_on_lost_continue_the_handler_finishes_and_sees_the_loss() {
    let ttl = Duration::from_millis(300);
    let finished = Arc::new(AtomicBool::new(false));
    let layer = LockLayer::new(
        Locker::builder(MemoryBackend::new())
            .ttl(ttl)
            .renew(false)
            .on_lost(OnLost::Continue)
            .build()
            .unwrap(),
        header("x-key"),
    );
    let app = slow_app(layer, ttl * 2, finished.clone());

    let reply = send(&app, keyed(Method::POST, "a", 0)).await;

    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "false")
    );
    assert!(finished.load(Ordering::SeqCst));
}

#[tokio::test]
async fn the_guard_says_which_hold_it_has() {
    let app =
        hold_app(LockLayer::new(Locker::new(MemoryBackend::new()), header("x-key")).read_write());

    assert_eq!(send(&app, keyed(Method::GET, "k", 0)).await.body, "Read");
    assert_eq!(send(&app, keyed(Method::POST, "k", 0)).await.body, "Write");
}

#[tokio::test]
async fn the_mutex_stays_the_default() {
    let app = hold_app(LockLayer::new(
        Locker::new(MemoryBackend::new()),
        header("x-key"),
    ));

    assert_eq!(send(&app, keyed(Method::GET, "k", 0)).await.body, "Mutex");
}

#[tokio::test]
async fn several_keys_are_held_exclusively_and_released_even_in_read_write_mode() {
    let store = MemoryBackend::new();
    let both = many(|_: &http::request::Parts| Ok(vec!["b".to_owned(), "a".to_owned()]));
    let app = hold_app(LockLayer::new(Locker::new(store.clone()), both).read_write());

    assert_eq!(send(&app, request(Method::GET, "/")).await.body, "Mutex");
    assert_eq!(store.held_locks(), 0, "both keys were released");
}

#[tokio::test(start_paused = true)]
async fn a_full_semaphore_is_answered_with_the_busy_status() {
    let layer = LockLayer::new(
        Locker::builder(MemoryBackend::new())
            .reject()
            .build()
            .unwrap(),
        header("x-key"),
    )
    .semaphore(std::num::NonZeroU32::new(2).expect("two"))
    .busy_status(StatusCode::TOO_MANY_REQUESTS);
    let app = Router::new()
        .route("/", post(|| tokio::time::sleep(Duration::from_secs(1))))
        .route_layer(layer);
    let first = spawn_send(&app, keyed(Method::POST, "k", 1));
    let second = spawn_send(&app, keyed(Method::POST, "k", 2));
    tokio::time::sleep(Duration::from_millis(10)).await;

    let third = send(&app, keyed(Method::POST, "k", 3)).await.status;

    assert_eq!(third, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        (first.await.unwrap(), second.await.unwrap()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(
        send(&app, keyed(Method::POST, "k", 4)).await.status,
        StatusCode::OK,
        "permits came back"
    );
}

/// Lock `k` on one memory store: readers through a read-write layer, a writer of several keys
/// or a mutex through others. Whether the mutex, then the multi-key request, got in while a
/// reader held `k`.
async fn exclusive_holds_while_a_reader_holds() -> [StatusCode; 2] {
    let store = MemoryBackend::new();
    let (gate_tx, mut gate_rx) = tokio::sync::mpsc::channel::<()>(1);
    let release = Arc::new(tokio::sync::Notify::new());
    let reader = {
        let release = release.clone();
        Router::new()
            .route(
                "/",
                get(move || async move {
                    gate_tx.send(()).await.ok();
                    release.notified().await;
                }),
            )
            .route_layer(LockLayer::new(Locker::new(store.clone()), header("x-key")).read_write())
    };
    let mutex = hold_app(LockLayer::new(
        Locker::builder(store.clone()).reject().build().unwrap(),
        header("x-key"),
    ));
    let both = many(|_: &http::request::Parts| Ok(vec!["k".to_owned(), "z".to_owned()]));
    let multi = hold_app(LockLayer::new(
        Locker::builder(store).reject().build().unwrap(),
        both,
    ));
    let reading = spawn_send(&reader, keyed(Method::GET, "k", 0));
    gate_rx.recv().await;

    let statuses = [
        send(&mutex, keyed(Method::POST, "k", 1)).await.status,
        send(&multi, request(Method::POST, "/")).await.status,
    ];
    release.notify_one();
    assert_eq!(reading.await.unwrap(), StatusCode::OK);
    statuses
}

#[tokio::test]
async fn a_mutex_and_a_multi_key_request_wait_for_readers_in_memory_as_in_redis() {
    assert_eq!(
        exclusive_holds_while_a_reader_holds().await,
        [StatusCode::CONFLICT; 2]
    );
}
