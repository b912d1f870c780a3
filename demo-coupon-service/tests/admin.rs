//! The operator's routes, driven in-process in embedded mode: served only with a token, 401
//! without the right one, the held locks listed with their holders, and the operator's
//! release that stops the stuck claim and lets the next one in. On Tokio's paused clock: the
//! embedded store and the claims' work keep time there, so no case waits on the wall clock.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use demo_coupon_service::admin::AdminToken;
use demo_coupon_service::{AppState, LockSettings, app};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "a-token-of-twenty-chars";

/// The embedded demo whose claims work for `work` with leases of `ttl` (renewed every third),
/// serving the operator's routes when `token` is given.
fn demo(work: Duration, ttl: Duration, token: Option<&str>) -> Router {
    let settings = LockSettings {
        ttl: Some(ttl),
        ..LockSettings::default()
    };
    let state = AppState::embedded(work, settings, true).expect("valid settings");
    let state = match token {
        Some(token) => state.with_admin_token(AdminToken::new(token).expect("a valid token")),
        None => state,
    };
    app(state)
}

async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = body
        .map(|body| Body::from(body.to_string()))
        .unwrap_or_default();
    let response = app
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(start_paused = true)]
async fn without_a_token_the_operators_routes_are_not_served() {
    let app = demo(Duration::ZERO, Duration::from_secs(10), None);
    for (method, uri) in [
        (Method::GET, "/admin/locks"),
        (Method::DELETE, "/admin/locks/coupon:c1"),
    ] {
        let (status, problem) = call(&app, method, uri, Some(TOKEN), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {problem}");
        assert_eq!(problem["type"], "urn:coupon-demo:no-such-route");
    }
}

#[tokio::test(start_paused = true)]
async fn a_missing_or_wrong_token_is_401_and_tells_nothing_of_what_exists() {
    let app = demo(Duration::from_secs(2), Duration::from_secs(10), Some(TOKEN));
    call(
        &app,
        Method::PUT,
        "/coupons/c1",
        None,
        Some(json!({ "stock": 1 })),
    )
    .await;
    let claim = tokio::spawn({
        let app = app.clone();
        async move {
            call(
                &app,
                Method::POST,
                "/coupons/c1/claim",
                None,
                Some(json!({ "user_id": "a" })),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut answers = Vec::new();
    for token in [
        None,
        Some("a-token-of-twenty-chaR"),
        Some("short"),
        Some(""),
    ] {
        for (method, uri) in [
            (Method::GET, "/admin/locks"),
            (Method::DELETE, "/admin/locks/coupon:c1"),
            (Method::DELETE, "/admin/locks/coupon:none"),
        ] {
            let (status, problem) = call(&app, method, uri, token, None).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{token:?} {uri}: {problem}"
            );
            answers.push(problem);
        }
    }
    assert!(
        answers.windows(2).all(|pair| pair[0] == pair[1]),
        "{answers:?}"
    );
    assert_eq!(answers[0]["type"], "urn:coupon-demo:unauthorized");
    assert_eq!(
        claim.await.unwrap().0,
        StatusCode::CREATED,
        "the claim ran on, unreleased"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_lock_is_listed_with_its_holder_and_the_operators_release_stops_its_claim() {
    // Work of 2 s under a 300 ms lease renewed every 100 ms: the release is heard at the
    // next renewal, long before the work ends.
    let app = demo(
        Duration::from_secs(2),
        Duration::from_millis(300),
        Some(TOKEN),
    );
    call(
        &app,
        Method::PUT,
        "/coupons/c1",
        None,
        Some(json!({ "stock": 1 })),
    )
    .await;
    let stuck = tokio::spawn({
        let app = app.clone();
        async move {
            call(
                &app,
                Method::POST,
                "/coupons/c1/claim",
                None,
                Some(json!({ "user_id": "a" })),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (status, page) = call(&app, Method::GET, "/admin/locks", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["store"], "memory");
    let [lock] = page["locks"].as_array().expect("a list").as_slice() else {
        panic!("one held lock: {page}");
    };
    assert_eq!(lock["key"], "coupon:c1");
    assert_eq!(lock["waiting"], 0);
    let holder = &lock["holders"][0];
    assert_eq!(
        holder["shape"], "write",
        "claims take the coupon's lock alone: {holder}"
    );
    assert!(
        holder["holder"]
            .as_str()
            .is_some_and(|label| label.contains(':')),
        "host:pid: {holder}"
    );
    assert!(
        holder["fence"]
            .as_str()
            .is_some_and(|fence| fence.parse::<u64>().is_ok()),
        "{holder}"
    );
    assert!(
        holder["held_for_ms"]
            .as_u64()
            .is_some_and(|ms| (100..2000).contains(&ms)),
        "{holder}"
    );
    assert!(
        holder["lease_left_ms"].as_u64().is_some_and(|ms| ms <= 300),
        "{holder}"
    );

    let (status, released) = call(
        &app,
        Method::DELETE,
        "/admin/locks/coupon:c1",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["released"][0]["fence"], holder["fence"]);
    let (status, problem) = stuck.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert_eq!(problem["type"], "urn:tower-lock:lock-lost");

    let (status, next) = call(
        &app,
        Method::POST,
        "/coupons/c1/claim",
        None,
        Some(json!({ "user_id": "b" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    let (_, coupon) = call(&app, Method::GET, "/coupons/c1", None, None).await;
    assert_eq!(
        (coupon["claimed"].clone(), coupon["oversold"].clone()),
        (json!(1), json!(0)),
        "{coupon}"
    );
    let (_, page) = call(&app, Method::GET, "/admin/locks", Some(TOKEN), None).await;
    assert_eq!(page["locks"], json!([]), "nothing held: {page}");
}

/// A claim waiting behind another on the same coupon, in the same replica, is counted as
/// waiting: it waits in the replica's line, where the store cannot see it (the single claim
/// above counts none).
#[tokio::test(start_paused = true)]
async fn a_claim_queued_behind_the_holder_is_counted_as_waiting() {
    let app = demo(
        Duration::from_secs(2),
        Duration::from_millis(300),
        Some(TOKEN),
    );
    let stock = Some(json!({ "stock": 2 }));
    call(&app, Method::PUT, "/coupons/c1", None, stock).await;
    let mut claims = Vec::new();
    for user in ["a", "b"] {
        let app = app.clone();
        claims.push(tokio::spawn(async move {
            let claim = Some(json!({ "user_id": user }));
            call(&app, Method::POST, "/coupons/c1/claim", None, claim).await
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (status, page) = call(&app, Method::GET, "/admin/locks", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["locks"][0]["key"], "coupon:c1", "{page}");
    assert_eq!(page["locks"][0]["waiting"], 1, "{page}");
    for claim in claims {
        assert_eq!(claim.await.unwrap().0, StatusCode::CREATED);
    }
}

#[tokio::test(start_paused = true)]
async fn the_twin_without_the_release_the_stuck_claim_keeps_the_coupon() {
    let app = demo(
        Duration::from_millis(1500),
        Duration::from_millis(300),
        Some(TOKEN),
    );
    call(
        &app,
        Method::PUT,
        "/coupons/c1",
        None,
        Some(json!({ "stock": 1 })),
    )
    .await;
    let stuck = tokio::spawn({
        let app = app.clone();
        async move {
            call(
                &app,
                Method::POST,
                "/coupons/c1/claim",
                None,
                Some(json!({ "user_id": "a" })),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _) = call(
        &app,
        Method::POST,
        "/coupons/c1/claim",
        None,
        Some(json!({ "user_id": "b" })),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::GONE,
        "b waited for the stuck claim, which sold the last unit"
    );
    assert_eq!(stuck.await.unwrap().0, StatusCode::CREATED);
}

#[tokio::test(start_paused = true)]
async fn a_lock_nobody_holds_is_404_and_a_bad_page_is_400() {
    let app = demo(Duration::ZERO, Duration::from_secs(10), Some(TOKEN));
    let (status, problem) = call(
        &app,
        Method::DELETE,
        "/admin/locks/coupon:c9",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["type"], "urn:coupon-demo:no-such-lock");
    for uri in [
        "/admin/locks?limit=0",
        "/admin/locks?limit=1001",
        "/admin/locks?limit=many",
    ] {
        let (status, problem) = call(&app, Method::GET, uri, Some(TOKEN), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {problem}");
        assert_eq!(problem["type"], "urn:coupon-demo:invalid-request", "{uri}");
    }
    let (status, problem) = call(
        &app,
        Method::DELETE,
        &format!("/admin/locks/{}", "k".repeat(2000)),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a key the locker refuses: {problem}"
    );
}

#[test]
fn a_short_token_is_refused_at_start() {
    let error = AdminToken::new("secret").expect_err("too short");
    assert!(error.contains("--admin-token"), "{error}");
    assert!(AdminToken::new("a token with spaces in it").is_err());
}
