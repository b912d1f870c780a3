//! What the layer answers, and when it lets the service below take a slot: retry hints from
//! real hold times, the application's own rejections, readiness after the lock.

use super::*;
use crate::{LockError, Rejection};

/// A route on `/` under `layer` whose handler works for `work`.
fn working_app(layer: LockLayer<MemoryBackend, Header>, work: Duration) -> Router {
    let handler = move || async move {
        tokio::time::sleep(work).await;
        "done"
    };
    Router::new().route("/", post(handler)).route_layer(layer)
}

/// The `Retry-After` of a busy answer on a 10 s lease, after one request held the lock for
/// `work`.
async fn retry_after_once_requests_held_for(work: Duration) -> String {
    let store = MemoryBackend::new();
    let app = working_app(
        LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            header("x-key"),
        ),
        work,
    );
    assert_eq!(
        send(&app, keyed(Method::POST, "a", 0)).await.status,
        StatusCode::OK
    );
    hold(&store, "lock:a", Duration::from_secs(10)).await;

    let reply = send(&app, keyed(Method::POST, "a", 1)).await;

    assert_eq!(reply.status, StatusCode::CONFLICT);
    reply.headers["retry-after"].to_str().unwrap().to_owned()
}

#[tokio::test(start_paused = true)]
async fn retry_after_follows_how_long_requests_hold_the_lock_not_the_renewed_lease() {
    assert_eq!(
        retry_after_once_requests_held_for(Duration::from_millis(300)).await,
        "1"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_grows_with_longer_holds() {
    assert_eq!(
        retry_after_once_requests_held_for(Duration::from_millis(2_500)).await,
        "3"
    );
}

#[tokio::test]
async fn the_application_can_answer_rejections_its_own_way() {
    let store = MemoryBackend::new();
    let layer = LockLayer::new(
        Locker::builder(store.clone()).reject().build().unwrap(),
        header("x-key"),
    )
    .on_rejection(|rejection: Rejection| {
        let busy = matches!(rejection, Rejection::Lock(LockError::Busy { .. }));
        let mut response = http::Response::new(format!("busy: {busy}"));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
    });
    let app = working_app(layer, Duration::ZERO);
    hold(&store, "lock:a", TTL).await;

    let busy = send(&app, keyed(Method::POST, "a", 0)).await;
    let keyless = send(&app, request(Method::POST, "/")).await;

    assert_eq!(
        (busy.status, busy.body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "busy: true")
    );
    assert_eq!(keyless.body, "busy: false");
}

/// An inner service that answers at once.
fn instant() -> impl tower::Service<
    Request<Body>,
    Response = http::Response<Body>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    service_fn(|_: Request<Body>| async { Ok(http::Response::new(Body::empty())) })
}

/// How long a request on a free key took while another waited up to 2 s for a busy one, with
/// a concurrency limit of 1 below the lock layer or above it.
async fn free_key_latency_beside_a_waiter(limit_below: bool) -> Duration {
    let store = MemoryBackend::new();
    hold(&store, "lock:busy", TTL).await;
    let lock = LockLayer::new(
        Locker::builder(store.clone())
            .wait(Duration::from_secs(2))
            .build()
            .unwrap(),
        header("x-key"),
    );
    let service = if limit_below {
        ServiceBuilder::new()
            .layer(lock)
            .concurrency_limit(1)
            .service(instant())
            .boxed_clone()
    } else {
        ServiceBuilder::new()
            .concurrency_limit(1)
            .layer(lock)
            .service(instant())
            .boxed_clone()
    };
    let waiting = tokio::spawn(service.clone().oneshot(keyed(Method::POST, "busy", 0)));
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();

    let free = service
        .oneshot(keyed(Method::POST, "free", 1))
        .await
        .unwrap();

    assert_eq!(free.status(), StatusCode::OK);
    let elapsed = started.elapsed();
    assert_eq!(
        waiting.await.unwrap().unwrap().status(),
        StatusCode::CONFLICT
    );
    elapsed
}

#[tokio::test(start_paused = true)]
async fn a_request_waiting_for_its_lock_holds_no_slot_of_a_concurrency_limit_below() {
    assert_eq!(free_key_latency_beside_a_waiter(true).await, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_limit_above_the_layer_is_held_by_the_waiter() {
    assert!(free_key_latency_beside_a_waiter(false).await >= Duration::from_secs(2));
}
