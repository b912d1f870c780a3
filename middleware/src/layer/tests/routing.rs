//! Where the layer sits among axum's routes: requests that match no route, a layer outside the
//! router, and keys scoped by the resource their route names.

use super::*;

#[tokio::test]
async fn under_router_layer_a_request_matching_no_route_is_answered_404_by_axum() {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = claim_app(
        LockLayer::new(Locker::new(MemoryBackend::new()), coupon_key()),
        runs,
    )
    .layer(LockLayer::new(
        Locker::new(MemoryBackend::new()),
        path("id"),
    ));

    let reply = send(&app, request(Method::POST, "/zzz")).await;

    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.body);
}

#[tokio::test]
async fn a_layer_around_the_whole_router_says_it_runs_before_routing() {
    let router: Router = Router::new().route("/coupons/{id}/claim", post(|| async { "claimed" }));
    let app = ServiceBuilder::new()
        .layer(LockLayer::new(
            Locker::new(MemoryBackend::new()),
            path("id"),
        ))
        .service(router);

    let response = app.oneshot(claim("7")).await.unwrap();

    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("runs before routing"), "{body}");
    assert!(
        body.contains("urn:tower-lock:layer-before-routing"),
        "{body}"
    );
}

/// Answers with its lock's key, on `/items/{id}` and `/orders/{id}` under one layer keyed by
/// `key`, rejecting when busy.
fn two_resources(store: &MemoryBackend, key: impl crate::key::KeyExtractor) -> Router {
    let handler = |Extension(lock): Extension<LockGuard>| async move { lock.key().to_owned() };
    Router::new()
        .route("/items/{id}", post(handler))
        .route("/orders/{id}", post(handler))
        .route_layer(LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            key,
        ))
}

#[tokio::test]
async fn path_keys_are_scoped_by_the_resource_so_items_and_orders_do_not_share_a_lock() {
    let store = MemoryBackend::new();
    let app = two_resources(&store, path("id"));
    hold(&store, "lock:items:42", TTL).await;

    let order = send(&app, request(Method::POST, "/orders/42")).await;
    let item = send(&app, request(Method::POST, "/items/42")).await;

    assert_eq!(
        (order.status, order.body.as_str()),
        (StatusCode::OK, "orders:42")
    );
    assert_eq!(
        item.status,
        StatusCode::CONFLICT,
        "the held item is still locked"
    );
}

#[tokio::test]
async fn a_bare_path_placeholder_shares_one_lock_across_resources() {
    let store = MemoryBackend::new();
    let app = two_resources(&store, KeyTemplate::parse("{path id}").unwrap());
    hold(&store, "lock:42", TTL).await;

    let order = send(&app, request(Method::POST, "/orders/42")).await;

    assert_eq!(
        order.status,
        StatusCode::CONFLICT,
        "the item's lock blocks the order"
    );
}

#[tokio::test]
async fn routes_of_one_resource_share_its_lock() {
    let store = MemoryBackend::new();
    let handler = || async { "ok" };
    let app = Router::new()
        .route("/coupons/{id}", get(handler))
        .route("/coupons/{id}/claim", post(handler))
        .route_layer(LockLayer::new(
            Locker::builder(store.clone()).reject().build().unwrap(),
            path("id"),
        ));
    hold(&store, "lock:coupons:42", TTL).await;

    assert_eq!(send(&app, claim("42")).await.status, StatusCode::CONFLICT);
    assert_eq!(
        send(&app, request(Method::GET, "/coupons/42")).await.status,
        StatusCode::CONFLICT
    );
}
