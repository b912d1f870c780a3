//! Redis keeps only live locks and one fencing counter per slot; a cancelled request frees its
//! key at once. (Owner-only release and expiry are conformance cases.)

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use integration_tests::{Gate, RedisServer, fence_of, hold, post as post_request, send};
use redis::AsyncCommands;
use tower_lock::backend::LockBackend;
use tower_lock::key::KeyTemplate;
use tower_lock::{LockLayer, Locker, RedisBackend};

const TTL: Duration = Duration::from_secs(30);

async fn lock_exists(redis: &RedisServer, key: &str) -> bool {
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    connection.exists(key).await.unwrap()
}

#[tokio::test]
async fn fences_increase_per_key_and_their_counters_do_not_pile_up() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url()).await.unwrap();
    let mut fences_of_a = Vec::new();
    for round in 0..3 {
        let held = hold(&store, "lock:a", TTL).await;
        fences_of_a.push(fence_of(&held));
        for other in 0..300 {
            let name = format!("lock:other:{round}:{other}");
            let other = hold(&store, &name, TTL).await;
            store.release(&name, &other.lease).await.unwrap();
        }
        store.release("lock:a", &held.lease).await.unwrap();
    }

    assert!(
        fences_of_a.is_sorted_by(|earlier, later| earlier < later),
        "strictly increasing: {fences_of_a:?}"
    );
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(
        keys.iter().all(|key| key.starts_with("tower-lock:fence:{")),
        "released locks leave only fencing counters: {keys:?}"
    );
    assert!(
        !keys.is_empty() && keys.len() <= 901,
        "at most one counter per hash slot the 901 locks fall in: {}",
        keys.len()
    );
    for counter in &keys {
        let ttl: i64 = connection.pttl(counter).await.unwrap();
        assert_eq!(
            ttl, -1,
            "{counter}: at most 16384 counters, so none expires"
        );
    }
}

#[tokio::test]
async fn a_cancelled_request_releases_its_lock_well_before_the_ttl() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let (gate, mut control) = Gate::new();
    let app = Router::new()
        .route(
            "/coupons/{id}/claim",
            post(move || async move { gate.pass("holder".into()).await }),
        )
        .route_layer(LockLayer::new(
            Locker::builder(backend)
                .ttl(Duration::from_secs(30))
                .build()
                .unwrap(),
            KeyTemplate::parse("coupon:{path id}").unwrap(),
        ));
    let request = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_request("/coupons/7/claim")).await }
    });
    control.entered().await;
    assert!(lock_exists(&redis, "{lock:coupon:7}").await);

    request.abort();
    let cancelled = Instant::now();
    while lock_exists(&redis, "{lock:coupon:7}").await {
        assert!(
            cancelled.elapsed() < Duration::from_secs(5),
            "the lock outlived its cancelled request by 5 s (TTL 30 s)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
