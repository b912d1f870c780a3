//! An uncontended request costs exactly two Redis round trips: the acquire script and the
//! release script, nothing else.

use std::future::Future;

use futures_util::StreamExt;
use integration_tests::{RedisServer, post, send};
use tower_lock::key::KeyTemplate;
use tower_lock::{LockGuard, LockLayer, RedisBackend};

const REQUESTS: usize = 10;
const SENTINEL: &str = "end-of-test";

/// A claim route locked on `coupon:{id}` that answers with its fencing token; one request has
/// already loaded the scripts into Redis's cache.
async fn claims(backend: RedisBackend) -> axum::Router {
    let app = axum::Router::new()
        .route(
            "/coupons/{id}/claim",
            axum::routing::post(
                |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                    lock.fence().to_string()
                },
            ),
        )
        .route_layer(LockLayer::new(
            backend,
            KeyTemplate::parse("coupon:{path id}").unwrap(),
        ));
    send(&app, post("/coupons/0/claim")).await;
    app
}

/// Runs `during` and returns its output with every command Redis ran meanwhile (MONITOR
/// lines; commands run inside scripts are marked `lua]`).
async fn monitored<T>(redis: &RedisServer, during: impl Future<Output = T>) -> (T, Vec<String>) {
    let mut monitor = redis
        .client()
        .get_async_monitor()
        .await
        .unwrap()
        .into_on_message::<String>();
    let output = during.await;
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: String = redis::cmd("ECHO")
        .arg(SENTINEL)
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut lines = Vec::new();
    while let Some(line) = monitor.next().await {
        if line.contains(SENTINEL) {
            break;
        }
        lines.push(line);
    }
    (output, lines)
}

#[tokio::test]
async fn an_uncontended_request_sends_two_commands() {
    let redis = RedisServer::start();
    let app = claims(RedisBackend::connect(redis.url()).await.unwrap()).await;

    let ((), lines) = monitored(&redis, async {
        for i in 1..=REQUESTS {
            assert_eq!(
                send(&app, post(&format!("/coupons/{i}/claim")))
                    .await
                    .status,
                200
            );
        }
    })
    .await;

    let announcements = lines
        .iter()
        .filter(|line| line.to_lowercase().contains("\"publish\""))
        .count();
    assert_eq!(
        announcements, 0,
        "nobody waited, so no release was announced"
    );
    let sent_by_clients: Vec<_> = lines
        .iter()
        .filter(|line| !line.contains(" lua]"))
        .collect();
    assert_eq!(sent_by_clients.len(), 2 * REQUESTS, "{sent_by_clients:#?}");
    assert!(
        sent_by_clients
            .iter()
            .all(|line| line.contains("\"EVALSHA\"")),
        "{sent_by_clients:#?}"
    );
}

#[tokio::test]
async fn without_fencing_an_uncontended_request_sends_a_plain_set_and_one_script() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url())
        .await
        .unwrap()
        .fencing(false);
    let app = claims(backend).await;

    let (reply, sent) = monitored(&redis, send(&app, post("/coupons/1/claim"))).await;

    assert_eq!(reply.body, "0", "no fencing token");
    assert_eq!(
        sent.len(),
        2 + 2,
        "SET, then EVALSHA of release.lua running GET and DEL: {sent:#?}"
    );
    assert!(sent[0].contains("\"SET\" \"{lock:coupon:1}\""), "{sent:#?}");
    assert!(
        sent.iter().all(|line| !line.contains(":fence")),
        "no counter key: {sent:#?}"
    );
}
