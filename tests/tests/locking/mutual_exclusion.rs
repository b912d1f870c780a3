//! Two replicas sharing one Redis never run two requests on the same key at once.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use integration_tests::{Occupancy, RedisServer, post as post_request, send};
use tower_lock::key::KeyTemplate;
use tower_lock::{LockLayer, Locker, RedisBackend};

const REQUESTS: usize = 64;
const WORK: Duration = Duration::from_millis(2);

fn claim_route(occupancy: Arc<Occupancy>) -> Router {
    Router::new().route(
        "/coupons/{id}/claim",
        post(move || async move { occupancy.visit(WORK).await }),
    )
}

async fn replica(redis: &RedisServer, occupancy: Arc<Occupancy>) -> Router {
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let lock = LockLayer::new(
        Locker::builder(backend)
            .wait(Duration::from_secs(60))
            .build()
            .unwrap(),
        KeyTemplate::parse("coupon:{path id}").unwrap(),
    );
    claim_route(occupancy).route_layer(lock)
}

/// Fires `REQUESTS` concurrent claims on one coupon, alternating between the replicas.
async fn claim_concurrently(replicas: [Router; 2]) -> Vec<StatusCode> {
    let requests = (0..REQUESTS).map(|i| {
        let replica = replicas[i % 2].clone();
        tokio::spawn(async move {
            send(&replica, post_request("/coupons/7/claim"))
                .await
                .status
        })
    });
    let mut statuses = Vec::new();
    for request in requests.collect::<Vec<_>>() {
        statuses.push(request.await.unwrap());
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_never_run_two_requests_on_one_key_at_once() {
    let redis = RedisServer::start();
    let occupancy = Arc::new(Occupancy::default());
    let replicas = [
        replica(&redis, occupancy.clone()).await,
        replica(&redis, occupancy.clone()).await,
    ];

    let statuses = claim_concurrently(replicas).await;

    assert!(
        statuses.iter().all(|status| *status == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(occupancy.most(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_layer_requests_on_one_key_overlap() {
    let occupancy = Arc::new(Occupancy::default());
    let replicas = [
        claim_route(occupancy.clone()),
        claim_route(occupancy.clone()),
    ];

    let statuses = claim_concurrently(replicas).await;

    assert!(statuses.iter().all(|status| *status == StatusCode::OK));
    assert!(
        occupancy.most() > 1,
        "the twin must show overlap, saw {}",
        occupancy.most()
    );
}
