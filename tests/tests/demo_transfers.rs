//! Transfers between two coupons under a lock on both: across three replicas, 200 concurrent
//! transfers in both directions neither deadlock nor lose or create stock. Without the lock,
//! the total drifts.

use http::StatusCode;
use integration_tests::{DemoReplica, Http, RedisServer};
use serde_json::json;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-replica");
const STOCK: i64 = 100;

/// Fires 200 transfers of 1–5 units between `a` and `b`, both ways, over three replicas;
/// returns the statuses and the stock left on each coupon.
async fn transfer_storm(args: &[&str]) -> (Vec<StatusCode>, i64, i64) {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut all = vec!["--redis-url", url.as_str()];
    all.extend_from_slice(args);
    let replicas: Vec<_> = (0..3).map(|_| DemoReplica::start(DEMO, &all)).collect();
    let http = Http::default();
    for coupon in ["a", "b"] {
        http.put(
            &format!("{}/coupons/{coupon}", replicas[0].url()),
            json!({ "stock": STOCK }),
        )
        .await;
    }

    let transfers: Vec<_> = (0..200)
        .map(|i| {
            let (from, to) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
            let body = json!({ "from": from, "to": to, "amount": 1 + i % 5 });
            let (http, url) = (http.clone(), format!("{}/transfers", replicas[i % 3].url()));
            tokio::spawn(async move { http.post(&url, body).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for transfer in transfers {
        statuses.push(transfer.await.unwrap());
    }
    let remaining = |coupon: &'static str| {
        let (http, url) = (
            http.clone(),
            format!("{}/coupons/{coupon}", replicas[0].url()),
        );
        async move { http.get(&url).await.json()["remaining"].as_i64().unwrap() }
    };
    (statuses, remaining("a").await, remaining("b").await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_transfers_across_three_replicas_conserve_stock_without_deadlock() {
    let (statuses, a, b) = transfer_storm(&["--lock-wait-ms", "30000"]).await;

    assert!(
        statuses
            .iter()
            .all(|status| [StatusCode::OK, StatusCode::CONFLICT].contains(status)),
        "every transfer finished (200, or 409 busy/insufficient): {statuses:?}"
    );
    assert!(statuses.contains(&StatusCode::OK));
    assert_eq!(a + b, 2 * STOCK, "stock conserved: a {a}, b {b}");
    assert!(a >= 0 && b >= 0, "no coupon below zero: a {a}, b {b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_the_total_drifts() {
    let (_, a, b) = transfer_storm(&["--no-lock", "--work-ms", "20"]).await;

    assert_ne!(
        a + b,
        2 * STOCK,
        "the twin shows lost updates: a {a}, b {b}"
    );
}
