//! Transfers between two coupons under a lock on both: across three replicas, 200 concurrent
//! transfers in both directions neither deadlock nor lose or create stock; nor do optimistic
//! transfers (`--optimistic`, version checks on PostgreSQL). Without the lock, transfers
//! answered 200 are lost.

use http::StatusCode;
use integration_tests::{DemoReplica, Http, PostgresSchema, RedisServer};
use serde_json::json;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
const STOCK: i64 = 100;

/// Which transfers a storm fires.
#[derive(Clone, Copy)]
enum Storm {
    /// 1–5 units, alternately from `a` to `b` and back.
    BothWays,
    /// 1 unit each, from `a` to `b`.
    OneUnitAToB,
}

/// Fires 200 transfers between `a` and `b` over three replicas sharing a Redis of their own;
/// returns the statuses and the stock left on each coupon.
async fn transfer_storm(args: &[&str], storm: Storm) -> (Vec<StatusCode>, i64, i64) {
    let redis = RedisServer::start();
    transfer_storm_on(&redis.url(), args, storm).await
}

/// The same storm over three replicas sharing the store at `url`.
async fn transfer_storm_on(url: &str, args: &[&str], storm: Storm) -> (Vec<StatusCode>, i64, i64) {
    let mut all = vec!["--store", url];
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
            let body = match storm {
                Storm::BothWays if i % 2 == 1 => {
                    json!({ "from": "b", "to": "a", "amount": 1 + i % 5 })
                }
                Storm::BothWays => json!({ "from": "a", "to": "b", "amount": 1 + i % 5 }),
                Storm::OneUnitAToB => json!({ "from": "a", "to": "b", "amount": 1 }),
            };
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
    let (statuses, a, b) = transfer_storm(&["--lock-wait-ms", "30000"], Storm::BothWays).await;

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
async fn optimistic_transfers_on_postgres_conserve_stock_and_move_what_they_answer() {
    let schema = PostgresSchema::create().await;
    let (statuses, a, b) =
        transfer_storm_on(&schema.url(), &["--optimistic"], Storm::BothWays).await;

    assert!(
        statuses
            .iter()
            .all(|status| [StatusCode::OK, StatusCode::CONFLICT].contains(status)),
        "every transfer finished (200, or 409 conflict/insufficient): {statuses:?}"
    );
    assert!(statuses.contains(&StatusCode::OK));
    assert_eq!(a + b, 2 * STOCK, "stock conserved: a {a}, b {b}");
    assert!(a >= 0 && b >= 0, "no coupon below zero: a {a}, b {b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_lock_every_answered_transfer_moves_its_unit() {
    let (statuses, a, b) = transfer_storm(&["--lock-wait-ms", "30000"], Storm::OneUnitAToB).await;

    let moved = statuses.iter().filter(|s| **s == StatusCode::OK).count() as i64;
    assert_eq!(
        (a, b),
        (STOCK - moved, STOCK + moved),
        "{moved} transfers answered 200"
    );
}

/// The twin: one-unit transfers one way, so a lost update cannot be cancelled out by another
/// (in a storm both ways, lost units may happen to add up to the same total).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_answered_transfers_are_lost() {
    let (statuses, a, _) =
        transfer_storm(&["--no-lock", "--work-ms", "20"], Storm::OneUnitAToB).await;

    let moved = statuses.iter().filter(|s| **s == StatusCode::OK).count() as i64;
    assert!(
        a > STOCK - moved,
        "the twin shows lost updates: {moved} transfers answered 200, yet a only fell to {a}"
    );
}
