//! SIGTERM lets in-flight claims finish and release their locks before the replica exits.

use std::time::Duration;

use http::StatusCode;
use integration_tests::{DemoReplica, Http, RedisServer};
use redis::AsyncCommands;
use serde_json::json;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");

#[tokio::test]
async fn sigterm_finishes_in_flight_claims_and_releases_their_locks() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut replica = DemoReplica::start(DEMO, &["--redis-url", &url, "--work-ms", "1500"]);
    let http = Http::default();
    http.put(
        &format!("{}/coupons/c1", replica.url()),
        json!({ "stock": 5 }),
    )
    .await;
    let claim = tokio::spawn({
        let (http, url) = (http.clone(), format!("{}/coupons/c1/claim", replica.url()));
        async move { http.post(&url, json!({ "user_id": "ada" })).await }
    });
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    while !connection
        .exists::<_, bool>("{lock:coupon:c1}")
        .await
        .unwrap()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let exited_cleanly = tokio::task::spawn_blocking(move || replica.terminate())
        .await
        .unwrap();

    assert!(
        exited_cleanly,
        "the replica exits with success after SIGTERM"
    );
    assert_eq!(
        claim.await.unwrap().status,
        StatusCode::CREATED,
        "the in-flight claim finished"
    );
    let locked: bool = connection.exists("{lock:coupon:c1}").await.unwrap();
    assert!(!locked, "its lock was released, not left to the TTL");
}
