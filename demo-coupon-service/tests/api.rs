//! The demo's HTTP API, driven in-process in embedded mode.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use demo_coupon_service::{AppState, LockSettings, app};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn demo() -> Router {
    let state = AppState::embedded(Duration::ZERO, LockSettings::default(), true);
    app(state.expect("the default settings are valid"))
}

async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    body: Option<&str>,
) -> (StatusCode, String, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.map(|b| Body::from(b.to_owned())).unwrap_or_default())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, content_type, json)
}

async fn claim(app: &Router, coupon: &str, user: &str) -> (StatusCode, String, Value) {
    let body = json!({ "user_id": user }).to_string();
    call(
        app,
        Method::POST,
        &format!("/coupons/{coupon}/claim"),
        Some(&body),
    )
    .await
}

#[tokio::test]
async fn a_coupon_is_created_claimed_and_sold_out() {
    let app = demo();
    let (status, _, created) =
        call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 2}"#)).await;
    assert_eq!(
        (status, created),
        (StatusCode::OK, json!({ "coupon_id": "c1", "stock": 2 }))
    );

    let (status, _, first) = claim(&app, "c1", "ada").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        first,
        json!({ "coupon_id": "c1", "user_id": "ada", "remaining": 1 })
    );
    assert_eq!(claim(&app, "c1", "bob").await.0, StatusCode::CREATED);
    let (status, content_type, problem) = claim(&app, "c1", "cy").await;

    assert_eq!(status, StatusCode::GONE);
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(problem["type"], "urn:coupon-demo:sold-out");
    let (_, _, coupon) = call(&app, Method::GET, "/coupons/c1", None).await;
    assert_eq!(
        coupon,
        json!({
            "coupon_id": "c1", "supply": 2, "remaining": 0,
            "claimed": 2, "oversold": 0, "duplicate_claims": 0,
        })
    );
}

#[tokio::test]
async fn a_second_claim_by_the_same_user_is_a_conflict_unlike_a_busy_lock() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 5}"#)).await;
    claim(&app, "c1", "ada").await;

    let (status, _, problem) = claim(&app, "c1", "ada").await;

    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["type"], "urn:coupon-demo:already-claimed");
    assert_ne!(problem["type"], "urn:tower-lock:resource-locked");
}

#[tokio::test]
async fn a_reset_restores_the_stock_and_forgets_claims() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 1}"#)).await;
    claim(&app, "c1", "ada").await;

    call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 3}"#)).await;

    let (_, _, coupon) = call(&app, Method::GET, "/coupons/c1", None).await;
    assert_eq!(
        (coupon["remaining"].clone(), coupon["claimed"].clone()),
        (json!(3), json!(0))
    );
    assert_eq!(claim(&app, "c1", "ada").await.0, StatusCode::CREATED);
}

#[tokio::test]
async fn unknown_coupons_are_404() {
    let app = demo();
    assert_eq!(claim(&app, "nope", "ada").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        call(&app, Method::GET, "/coupons/nope", None).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn malformed_requests_are_400_problems() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 1}"#)).await;
    let long_user = json!({ "user_id": "u".repeat(200) }).to_string();
    let cases = [
        (Method::POST, "/coupons/c1/claim", "{not json"),
        (Method::POST, "/coupons/c1/claim", r#"{"user": "ada"}"#),
        (Method::POST, "/coupons/c1/claim", r#"{"user_id": ""}"#),
        (Method::POST, "/coupons/c1/claim", long_user.as_str()),
        (Method::PUT, "/coupons/c1", r#"{"stock": -1}"#),
        (Method::PUT, "/coupons/bad%20id", r#"{"stock": 1}"#),
    ];
    for (method, uri, body) in cases {
        let (status, content_type, problem) = call(&app, method, uri, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}");
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(problem["type"], "urn:coupon-demo:invalid-request");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{problem}"
        );
    }
    let (_, _, coupon) = call(&app, Method::GET, "/coupons/c1", None).await;
    assert_eq!(coupon["remaining"], 1, "nothing was claimed");
}

#[tokio::test]
async fn healthz_answers() {
    assert_eq!(
        call(&demo(), Method::GET, "/healthz", None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_transfer_moves_stock_between_two_coupons() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/a", Some(r#"{"stock": 5}"#)).await;
    call(&app, Method::PUT, "/coupons/b", Some(r#"{"stock": 1}"#)).await;

    let (status, _, moved) = call(
        &app,
        Method::POST,
        "/transfers",
        Some(r#"{"from": "a", "to": "b", "amount": 3}"#),
    )
    .await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        moved,
        json!({ "from": "a", "to": "b", "amount": 3, "from_remaining": 2, "to_remaining": 4 })
    );
    let (status, _, problem) = call(
        &app,
        Method::POST,
        "/transfers",
        Some(r#"{"from": "a", "to": "b", "amount": 3}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["type"], "urn:coupon-demo:insufficient-stock");
}

#[tokio::test]
async fn malformed_transfers_are_400_and_change_nothing() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/a", Some(r#"{"stock": 5}"#)).await;
    for body in [
        r#"{"from": "a"}"#,
        "not json",
        r#"{"from": "a", "to": "a", "amount": 1}"#,
        r#"{"from": "a", "to": "b", "amount": 0}"#,
    ] {
        let (status, content_type, _) = call(&app, Method::POST, "/transfers", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(content_type, "application/problem+json");
    }
    let (_, _, coupon) = call(&app, Method::GET, "/coupons/a", None).await;
    assert_eq!(coupon["remaining"], 5);
}

#[tokio::test]
async fn claims_of_units_moved_into_a_sold_out_coupon_are_not_oversold() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/a", Some(r#"{"stock": 3}"#)).await;
    call(&app, Method::PUT, "/coupons/b", Some(r#"{"stock": 1}"#)).await;
    assert_eq!(claim(&app, "b", "ada").await.0, StatusCode::CREATED);
    let transfer = r#"{"from": "a", "to": "b", "amount": 2}"#;
    assert_eq!(
        call(&app, Method::POST, "/transfers", Some(transfer))
            .await
            .0,
        StatusCode::OK
    );

    assert_eq!(claim(&app, "b", "bob").await.0, StatusCode::CREATED);
    assert_eq!(claim(&app, "b", "cyd").await.0, StatusCode::CREATED);
    assert_eq!(claim(&app, "b", "dan").await.0, StatusCode::GONE);

    let (_, _, b) = call(&app, Method::GET, "/coupons/b", None).await;
    assert_eq!(
        (b["supply"].clone(), b["claimed"].clone()),
        (json!(3), json!(3))
    );
    assert_eq!(b["oversold"], 0, "{b}");
    let (_, _, a) = call(&app, Method::GET, "/coupons/a", None).await;
    assert_eq!(
        (a["supply"].clone(), a["oversold"].clone()),
        (json!(1), json!(0))
    );
}

#[tokio::test]
async fn a_bad_coupon_id_gets_one_answer_whatever_its_length() {
    let app = demo();
    let answers: Vec<Value> =
        answers_to_claims_on(&app, ["x".repeat(65), "x".repeat(10_247)]).await;

    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0]["type"], "urn:coupon-demo:invalid-request");
    assert!(
        answers[0]["detail"]
            .as_str()
            .unwrap()
            .contains("1 to 64 characters"),
        "{}",
        answers[0]
    );
}

/// The problem documents answering claims on each of `ids`.
async fn answers_to_claims_on(app: &Router, ids: [String; 2]) -> Vec<Value> {
    let mut answers = Vec::new();
    for id in ids {
        let (status, _, problem) = claim(app, &id, "ada").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        answers.push(problem);
    }
    answers
}

#[tokio::test]
async fn a_negative_transfer_amount_is_an_invalid_request_not_an_invalid_lock_key() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/a", Some(r#"{"stock": 5}"#)).await;
    call(&app, Method::PUT, "/coupons/b", Some(r#"{"stock": 5}"#)).await;
    let transfer = r#"{"from": "a", "to": "b", "amount": -1}"#;

    let (status, _, problem) = call(&app, Method::POST, "/transfers", Some(transfer)).await;

    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["title"], "invalid request", "{problem}");
    assert_eq!(
        problem["detail"], "`amount` must be a whole number from 1 to 4294967295",
        "{problem}"
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems_too() {
    let app = demo();
    let (status, content_type, problem) = call(&app, Method::GET, "/nope", None).await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::NOT_FOUND, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:coupon-demo:no-such-route");

    let (status, content_type, problem) = call(&app, Method::DELETE, "/coupons/a", None).await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:coupon-demo:method-not-allowed");
}

#[tokio::test]
async fn a_body_that_is_no_json_object_is_refused_naming_what_is_expected() {
    let app = demo();
    for (uri, body) in [
        ("/coupons/x", "[2]"),
        ("/coupons/x", "2"),
        ("/transfers", "[2]"),
    ] {
        let method = if uri == "/transfers" {
            Method::POST
        } else {
            Method::PUT
        };
        let (status, content_type, problem) = call(&app, method, uri, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}: {problem}");
        assert_eq!(content_type, "application/problem+json");
        assert!(
            problem["detail"].as_str().unwrap().contains("JSON object"),
            "{problem}"
        );
    }
    assert_eq!(
        call(&app, Method::GET, "/coupons/x", None).await.0,
        StatusCode::NOT_FOUND,
        "no coupon was created"
    );
}

#[tokio::test]
async fn details_name_the_field_and_what_it_expects_never_a_rust_type() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 1}"#)).await;
    let cases = [
        (
            Method::PUT,
            "/coupons/c1",
            r#"{"stock": "many"}"#,
            "`stock` must be a whole number from 0 to 4294967295",
        ),
        (
            Method::PUT,
            "/coupons/c1",
            r#"{"stock": 4294967296}"#,
            "`stock` must be a whole number from 0 to 4294967295",
        ),
        (
            Method::PUT,
            "/coupons/c1",
            "{}",
            "`stock` must be a whole number from 0 to 4294967295",
        ),
        (
            Method::POST,
            "/coupons/c1/claim",
            r#"{"user_id": 7}"#,
            "`user_id` must be a string",
        ),
        (
            Method::POST,
            "/transfers",
            r#"{"from": "c1", "to": 2, "amount": 1}"#,
            "`to` must be a string",
        ),
    ];
    for (method, uri, body, detail) in cases {
        let (status, _, problem) = call(&app, method, uri, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}");
        assert_eq!(problem["detail"], detail, "{uri} {body}");
    }
}

#[tokio::test]
async fn a_path_that_does_not_decode_is_a_bad_coupon_id_on_every_route() {
    let app = demo();
    let routes = [
        (Method::POST, "/coupons/a%FFb/audit", None),
        (
            Method::POST,
            "/coupons/a%FFb/claim",
            Some(r#"{"user_id": "ada"}"#),
        ),
        (Method::GET, "/coupons/a%FFb", None),
        (Method::PUT, "/coupons/a%FFb", Some(r#"{"stock": 1}"#)),
    ];
    for (method, uri, body) in routes {
        let (status, content_type, problem) = call(&app, method, uri, body).await;
        assert_eq!(
            (status, content_type.as_str()),
            (StatusCode::BAD_REQUEST, "application/problem+json"),
            "{uri}"
        );
        assert_eq!(
            problem["detail"], "a coupon id is 1 to 64 characters of A-Z, a-z, 0-9, `-` and `_`",
            "{uri}"
        );
    }
}

#[tokio::test]
async fn a_transfer_cannot_fill_a_coupon_past_the_stock_limit() {
    let app = demo();
    call(
        &app,
        Method::PUT,
        "/coupons/full",
        Some(r#"{"stock": 4294967295}"#),
    )
    .await;
    call(&app, Method::PUT, "/coupons/src", Some(r#"{"stock": 5}"#)).await;

    let transfer = r#"{"from": "src", "to": "full", "amount": 1}"#;
    let (status, content_type, problem) =
        call(&app, Method::POST, "/transfers", Some(transfer)).await;

    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::CONFLICT, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:coupon-demo:stock-limit");
    assert_eq!(problem["detail"], "a coupon holds at most 4294967295 units");
    let (_, _, full) = call(&app, Method::GET, "/coupons/full", None).await;
    let (_, _, source) = call(&app, Method::GET, "/coupons/src", None).await;
    assert_eq!(
        (full["remaining"].clone(), source["remaining"].clone()),
        (json!(4294967295u64), json!(5))
    );
}

#[tokio::test]
async fn a_user_id_of_128_characters_is_claimed_whatever_their_bytes() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/c1", Some(r#"{"stock": 1}"#)).await;
    let (status, _, claimed) = claim(&app, "c1", &"😀".repeat(128)).await;
    assert_eq!(status, StatusCode::CREATED, "{claimed}");
}

/// One rule for every route's body: a JSON `null` is told it must be an object, with no other
/// route's example; a body past the limit is 413, the lock layers' problem, on every route.
#[tokio::test]
async fn every_route_answers_a_null_or_oversized_body_the_same_way() {
    let app = demo();
    call(&app, Method::PUT, "/coupons/x", Some(r#"{"stock": 5}"#)).await;
    let routes = [
        (Method::POST, "/coupons/x/claim"),
        (Method::PUT, "/coupons/x"),
        (Method::POST, "/transfers"),
    ];
    for (method, uri) in routes.clone() {
        let (status, _, problem) = call(&app, method.clone(), uri, Some("null")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {uri}: {problem}");
        assert_eq!(
            problem["detail"], "the body must be a JSON object",
            "{method} {uri}"
        );
    }
    let huge = format!(r#"{{"user_id": "{}"}}"#, "u".repeat(10 * 1024 * 1024));
    let mut answers = Vec::new();
    for (method, uri) in routes {
        let (status, content_type, problem) = call(&app, method.clone(), uri, Some(&huge)).await;
        assert_eq!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{method} {uri}: {problem}"
        );
        assert_eq!(content_type, "application/problem+json");
        answers.push(problem);
    }
    assert!(
        answers.iter().all(|answer| *answer == answers[0]),
        "{answers:?}"
    );
    assert_eq!(answers[0]["type"], "urn:tower-lock:request-body-too-large");
    let (_, _, coupon) = call(&app, Method::GET, "/coupons/x", None).await;
    assert_eq!(
        (coupon["remaining"].clone(), coupon["claimed"].clone()),
        (json!(5), json!(0))
    );
}

#[tokio::test]
async fn the_dashboard_has_an_icon() {
    let app = demo();
    for uri in ["/favicon.ico", "/favicon.svg"] {
        let request = Request::get(uri).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
        assert_eq!(response.headers()["content-type"], "image/svg+xml", "{uri}");
    }
}
