//! What handlers see of their locks: the guard as an extractor, every guard of nested layers,
//! and an answer when a handler asks for a lock its request does not hold.

use super::*;
use crate::{LockGuards, NoLockGuard};

/// `/coupons/{id}/claim` under a coupon lock, inside a tenant lock named by `x-tenant`.
fn tenant_and_coupon(store: &MemoryBackend, handler: axum::routing::MethodRouter) -> Router {
    Router::new()
        .route("/coupons/{id}/claim", handler)
        .route_layer(LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            coupon_key(),
        ))
        .layer(LockLayer::new(
            Locker::new(store.clone()),
            KeyTemplate::parse("tenant:{header x-tenant}").unwrap(),
        ))
}

fn tenant_claim(tenant: &str, id: &str) -> Request<Body> {
    Request::post(format!("/coupons/{id}/claim"))
        .header("x-tenant", tenant)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn a_handler_behind_nested_layers_reaches_every_guard_outermost_first() {
    let store = MemoryBackend::new();
    let handler = post(|locks: LockGuards| async move {
        let keys: Vec<_> = locks.iter().map(LockGuard::key).collect();
        let tenant = locks.get("tenant:acme").map(LockGuard::is_held);
        format!("{keys:?} {tenant:?}")
    });
    let app = tenant_and_coupon(&store, handler);

    let reply = send(&app, tenant_claim("acme", "7")).await;

    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, r#"["tenant:acme", "coupon:7"] Some(true)"#)
    );
}

#[tokio::test]
async fn without_the_guard_list_a_handler_sees_only_the_innermost_lock() {
    let store = MemoryBackend::new();
    let handler = post(|Extension(lock): Extension<LockGuard>| async move {
        lock.keys().collect::<Vec<_>>().join(",")
    });
    let app = tenant_and_coupon(&store, handler);

    let reply = send(&app, tenant_claim("acme", "7")).await;

    assert_eq!(reply.body, "coupon:7", "the tenant lock is out of reach");
}

#[tokio::test]
async fn a_layer_passing_through_an_outer_lock_adds_no_second_guard() {
    let store = MemoryBackend::new();
    let handler = |locks: LockGuards| async move { locks.len().to_string() };
    let app = Router::new()
        .route("/coupons/{id}/claim", post(handler))
        .route_layer(LockLayer::new(Locker::new(store.clone()), coupon_key()))
        .layer(LockLayer::new(Locker::new(store), coupon_key()));

    assert_eq!(send(&app, claim("7")).await.body, "1");
}

#[tokio::test]
async fn an_inner_layer_wanting_more_keys_than_the_outer_holds_is_refused_at_once() {
    let store = MemoryBackend::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handler = post(move || async move { counted.fetch_add(1, Ordering::SeqCst).to_string() });
    let tenant_and_coupon =
        many(|_: &http::request::Parts| Ok(vec!["tenant:acme".into(), "coupon:7".into()]));
    let app = Router::new()
        .route("/coupons/{id}/claim", handler)
        .route_layer(LockLayer::new(
            Locker::builder(store.clone())
                .wait(Duration::from_secs(600))
                .build()
                .unwrap(),
            tenant_and_coupon,
        ))
        .layer(LockLayer::new(
            Locker::new(store),
            KeyTemplate::parse("tenant:{header x-tenant}").unwrap(),
        ));

    let reply = send(&app, tenant_claim("acme", "7")).await;

    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "a configuration error, not a 409 after the wait: {}",
        reply.body
    );
    assert!(reply.body.contains("lock-not-reentrant"), "{}", reply.body);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_guard_is_an_extractor() {
    let handler = |lock: LockGuard| async move { format!("{} {:?}", lock.key(), lock.hold()) };
    let app = Router::new()
        .route("/coupons/{id}/claim", post(handler))
        .route_layer(LockLayer::new(
            Locker::new(MemoryBackend::new()),
            coupon_key(),
        ));

    assert_eq!(send(&app, claim("7")).await.body, "coupon:7 Mutex");
}

#[tokio::test]
async fn a_guard_asked_for_without_a_lock_is_a_500_problem_naming_the_fix() {
    let app: Router = Router::new().route("/", get(|_: LockGuard| async { "ran" }));

    let reply = send(&app, request(Method::GET, "/")).await;

    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        reply.headers["content-type"], "application/problem+json",
        "{}",
        reply.body
    );
    assert!(reply.body.contains("urn:tower-lock:not-locked"));
    assert!(
        reply.body.contains(&NoLockGuard.to_string()),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn an_optional_guard_is_none_when_the_request_has_no_key() {
    let handler = |lock: Option<LockGuard>, locks: Option<LockGuards>| async move {
        format!(
            "{:?} {:?}",
            lock.map(|lock| lock.key().to_owned()),
            locks.map(|l| l.len())
        )
    };
    let key_if_given =
        |parts: &http::request::Parts| Ok(parts.headers.get("x-key").map(|_| "a".to_owned()));
    let app = Router::new()
        .route("/", get(handler))
        .route_layer(LockLayer::new(
            Locker::new(MemoryBackend::new()),
            key_if_given,
        ));

    assert_eq!(
        send(&app, request(Method::GET, "/")).await.body,
        "None None"
    );
    assert_eq!(
        send(&app, keyed(Method::GET, "a", 1)).await.body,
        r#"Some("a") Some(1)"#
    );
}
