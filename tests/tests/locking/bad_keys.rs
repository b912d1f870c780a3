//! Requests without a valid lock key are answered 400 and never reach their handler or Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::post;
use http::{Request, StatusCode};
use integration_tests::{RedisServer, send};
use tower_lock::key::KeyTemplate;
use tower_lock::{LockLayer, Locker, RedisBackend};

fn claim(uri: &str, tenant: Option<&str>) -> Request<axum::body::Body> {
    let mut request = Request::post(uri);
    if let Some(tenant) = tenant {
        request = request.header("x-tenant", tenant);
    }
    request.body(axum::body::Body::empty()).unwrap()
}

#[tokio::test]
async fn bad_keys_are_answered_400_and_the_handler_never_runs() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = {
        let runs = runs.clone();
        post(move || async move { runs.fetch_add(1, Ordering::SeqCst).to_string() })
    };
    let key = KeyTemplate::parse("tenant:{header x-tenant}:coupon:{path id}").unwrap();
    let app = Router::new()
        .route("/coupons/{id}/claim", handler.clone())
        .route("/coupons/claim", handler)
        .route_layer(LockLayer::new(Locker::new(backend), key));
    let long = "x".repeat(10 * 1024);
    let cases = [
        (
            claim("/coupons/claim", Some("acme")),
            "path parameter `id` is missing",
        ),
        (
            claim("/coupons/7/claim", None),
            "header `x-tenant` is missing",
        ),
        (
            claim("/coupons/7/claim", Some(&long)),
            "bytes long; at most 256",
        ),
        (
            claim(&format!("/coupons/{long}/claim"), Some("acme")),
            "bytes long; at most 256",
        ),
        (
            claim("/coupons/7%0A/claim", Some("acme")),
            "control character",
        ),
        (claim("/coupons/%7B7%7D/claim", Some("acme")), "`{` or `}`"),
    ];

    for (request, detail) in cases {
        let uri = request.uri().to_string();
        let reply = send(&app, request).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{uri}: {}",
            reply.body
        );
        assert_eq!(reply.headers["content-type"], "application/problem+json");
        assert!(reply.body.contains(detail), "{uri}: {}", reply.body);
    }

    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: usize = redis::cmd("DBSIZE")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(keys, 0, "no lock was ever taken");
    let good = send(&app, claim("/coupons/7/claim", Some("acme"))).await;
    assert_eq!(good.status, StatusCode::OK, "the same app locks valid keys");
}
