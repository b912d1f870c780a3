//! Reject and wait on a busy lock, against a real Redis.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::routing::post;
use http::StatusCode;
use integration_tests::{Gate, RedisServer, post as post_request, send};
use tower_lock::key::KeyTemplate;
use tower_lock::{LockLayer, Locker, LockerBuilder, RedisBackend};

async fn gated_app(
    redis: &RedisServer,
    configure: impl FnOnce(LockerBuilder<RedisBackend>) -> LockerBuilder<RedisBackend>,
) -> (Router, integration_tests::GateControl) {
    let (gate, control) = Gate::new();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let locker = configure(Locker::builder(backend)).build().unwrap();
    let layer = LockLayer::new(locker, KeyTemplate::parse("coupon:{path id}").unwrap());
    let app = Router::new()
        .route(
            "/coupons/{id}/claim",
            post(move |Path(id): Path<String>| async move { gate.pass(id).await }),
        )
        .route_layer(layer);
    (app, control)
}

fn claim(app: &Router, id: &str) -> tokio::task::JoinHandle<StatusCode> {
    let (app, uri) = (app.clone(), format!("/coupons/{id}/claim"));
    tokio::spawn(async move { send(&app, post_request(&uri)).await.status })
}

#[tokio::test]
async fn a_busy_key_is_rejected_while_other_keys_run_concurrently() {
    let redis = RedisServer::start();
    let (app, mut gate) = gated_app(&redis, LockerBuilder::reject).await;
    let holder = claim(&app, "7");
    assert_eq!(gate.entered().await, "7");

    let rejected = send(&app, post_request("/coupons/7/claim")).await;
    let other = claim(&app, "8");

    assert_eq!(rejected.status, StatusCode::CONFLICT);
    let retry_after: u64 = rejected.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(rejected.headers["content-type"], "application/problem+json");
    assert_eq!(gate.entered().await, "8", "key 8 runs while key 7 is held");
    gate.let_out(2);
    assert_eq!(holder.await.unwrap(), StatusCode::OK);
    assert_eq!(other.await.unwrap(), StatusCode::OK);
    assert_eq!(gate.entered_now(), None, "the rejected request never ran");
}

#[tokio::test]
async fn a_waiter_gets_the_lock_soon_after_the_holder_releases() {
    let redis = RedisServer::start();
    let (app, mut gate) = gated_app(&redis, |locker| locker.wait(Duration::from_secs(10))).await;
    let holder = claim(&app, "7");
    gate.entered().await;
    let waiter = claim(&app, "7");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        gate.entered_now(),
        None,
        "the waiter stays out while the lock is held"
    );

    gate.let_out(1);
    let released = Instant::now();
    gate.entered().await;
    let waited = released.elapsed();
    gate.let_out(1);

    assert_eq!(holder.await.unwrap(), StatusCode::OK);
    assert_eq!(waiter.await.unwrap(), StatusCode::OK);
    assert!(
        waited < Duration::from_secs(5),
        "the waiter retries within its backoff (at most 250 ms), it does not wait for the \
         holder's 30 s TTL: took {waited:?}"
    );
}

#[tokio::test]
async fn a_waiter_whose_timeout_passes_gets_409() {
    let redis = RedisServer::start();
    let (app, mut gate) = gated_app(&redis, |locker| locker.wait(Duration::from_millis(400))).await;
    let holder = claim(&app, "7");
    gate.entered().await;
    let started = Instant::now();

    let waiter = send(&app, post_request("/coupons/7/claim")).await;

    assert_eq!(waiter.status, StatusCode::CONFLICT);
    assert!(waiter.headers.contains_key("retry-after"));
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "it waited out its timeout"
    );
    assert_eq!(gate.entered_now(), None);
    gate.let_out(1);
    assert_eq!(holder.await.unwrap(), StatusCode::OK);
}
