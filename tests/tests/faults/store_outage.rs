//! When Redis dies or hangs, requests are answered 503 and never run unlocked; when it comes
//! back, locking works again without restarting anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use integration_tests::{RedisServer, post as post_request, send};
use redis::AsyncCommands;
use tower_lock::key::KeyTemplate;
use tower_lock::{LockLayer, Locker, RedisBackend};

const WAIT: Duration = Duration::from_secs(3);

async fn counting_app(redis: &RedisServer, runs: Arc<AtomicUsize>) -> Router {
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    Router::new()
        .route(
            "/coupons/{id}/claim",
            post(move || async move { runs.fetch_add(1, Ordering::SeqCst).to_string() }),
        )
        .route_layer(LockLayer::new(
            Locker::builder(backend).wait(WAIT).build().unwrap(),
            KeyTemplate::parse("coupon:{path id}").unwrap(),
        ))
}

/// Claims until one succeeds, for at most `limit`.
async fn claim_until_ok(app: &Router, limit: Duration) -> StatusCode {
    let started = Instant::now();
    loop {
        let status = send(app, post_request("/coupons/7/claim")).await.status;
        if status == StatusCode::OK || started.elapsed() > limit {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_killed_redis_answers_503_and_a_restarted_one_serves_again() {
    let mut redis = RedisServer::start();
    let runs = Arc::new(AtomicUsize::new(0));
    let app = counting_app(&redis, runs.clone()).await;
    assert_eq!(
        send(&app, post_request("/coupons/7/claim")).await.status,
        StatusCode::OK
    );

    redis.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let reply = send(&app, post_request("/coupons/7/claim")).await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.body
        );
        assert!(reply.headers.contains_key("retry-after"));
        assert!(
            started.elapsed() < WAIT,
            "answered within the acquire timeout"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "no handler ran while Redis was down"
    );

    redis.restart();

    assert_eq!(
        claim_until_ok(&app, Duration::from_secs(10)).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_hung_redis_answers_503_after_the_store_timeout_and_leaves_no_lock_behind() {
    let redis = RedisServer::start();
    let runs = Arc::new(AtomicUsize::new(0));
    let app = counting_app(&redis, runs.clone()).await;
    assert_eq!(
        send(&app, post_request("/coupons/7/claim")).await.status,
        StatusCode::OK
    );

    redis.pause();
    let reply = send(&app, post_request("/coupons/7/claim")).await;
    redis.resume();

    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The acquire sent while Redis hung runs once it resumes; the timed-out request gives
    // that lock back instead of leaving it to its 30 s TTL.
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let resumed = Instant::now();
    while connection
        .exists::<_, bool>("{lock:coupon:7}")
        .await
        .unwrap()
    {
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "the orphaned lock was not given back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        claim_until_ok(&app, Duration::from_secs(5)).await,
        StatusCode::OK
    );
}
