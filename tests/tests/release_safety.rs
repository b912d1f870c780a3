//! Releases only ever delete the caller's own lock; dead and cancelled holders free their keys.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use integration_tests::{Gate, RedisServer, post as post_request, send};
use redis::AsyncCommands;
use tower_lock::key::KeyTemplate;
use tower_lock::{Acquire, LockBackend, LockLayer, OwnerToken, RedisBackend};

fn fence_of(answer: Acquire) -> u64 {
    match answer {
        Acquire::Acquired { fence } => fence,
        Acquire::Busy { .. } => panic!("expected to acquire, the lock was busy"),
    }
}

async fn lock_exists(redis: &RedisServer, key: &str) -> bool {
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    connection.exists(key).await.unwrap()
}

#[tokio::test]
async fn release_never_deletes_a_foreign_lock() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url()).await.unwrap();
    let (stale, current) = (OwnerToken::new(), OwnerToken::new());
    fence_of(
        store
            .acquire("lock:a", stale, Duration::from_millis(100))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    fence_of(
        store
            .acquire("lock:a", current, Duration::from_secs(30))
            .await
            .unwrap(),
    );

    let released = store.release("lock:a", stale).await.unwrap();

    assert!(
        !released,
        "the stale holder's release reports it held nothing"
    );
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let value: String = connection.get("{lock:a}").await.unwrap();
    assert_eq!(
        value,
        current.to_string(),
        "the current holder keeps its lock"
    );
    assert!(store.release("lock:a", current).await.unwrap());
}

#[tokio::test]
async fn a_dead_holders_lock_is_free_again_after_its_ttl() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url()).await.unwrap();
    let ttl = Duration::from_millis(300);
    let dead_holders_fence = fence_of(
        store
            .acquire("lock:a", OwnerToken::new(), ttl)
            .await
            .unwrap(),
    );

    let before_expiry = store
        .acquire("lock:a", OwnerToken::new(), ttl)
        .await
        .unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let after_expiry = store
        .acquire("lock:a", OwnerToken::new(), ttl)
        .await
        .unwrap();

    let Acquire::Busy {
        holder_ttl: Some(left),
    } = before_expiry
    else {
        panic!("the holder never released, so the key is busy: {before_expiry:?}");
    };
    assert!(
        left <= ttl,
        "the busy answer carries the holder's remaining lease: {left:?}"
    );
    assert!(fence_of(after_expiry) > dead_holders_fence);
}

#[tokio::test]
async fn fences_increase_per_key_and_their_counters_do_not_pile_up() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url()).await.unwrap();
    let mut fences_of_a = Vec::new();
    for round in 0..3 {
        let token = OwnerToken::new();
        fences_of_a.push(fence_of(
            store
                .acquire("lock:a", token, Duration::from_secs(30))
                .await
                .unwrap(),
        ));
        for other in 0..300 {
            let token = OwnerToken::new();
            let name = format!("lock:other:{round}:{other}");
            fence_of(
                store
                    .acquire(&name, token, Duration::from_secs(30))
                    .await
                    .unwrap(),
            );
            store.release(&name, token).await.unwrap();
        }
        store.release("lock:a", token).await.unwrap();
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
        .route_layer(
            LockLayer::new(backend, KeyTemplate::parse("coupon:{path id}").unwrap())
                .ttl(Duration::from_secs(30)),
        );
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
