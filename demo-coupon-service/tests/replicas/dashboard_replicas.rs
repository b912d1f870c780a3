//! The dashboard's replica reports do not pile up in the shared store: a replica that starts
//! deletes the reports of replicas that stopped over a minute ago, and keeps the recent ones
//! (a replica stopped seconds ago may only be paused; the page hides it while it is silent).
//! And the page shows every coupon in the store, in natural order. On each shared store.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use demo_coupon_service::dashboard::{FORGOTTEN_AFTER, Report};
use demo_coupon_service::store::{CouponStore, Dialect, RedisConnection, RedisStore, SqlStore};
use http::StatusCode;
use integration_tests::{DemoReplica, Http, MysqlDatabase, PostgresSchema, RedisServer};

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");

/// A report of `replica` made `age` ago.
fn report_made(replica: &str, age: Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let report = Report {
        replica: replica.to_owned(),
        at_ms: u64::try_from((now - age).as_millis()).unwrap(),
        claims: Default::default(),
        claims_per_s: 0.0,
        rejection_ratio: 0.0,
        lock_wait_p50_ms: None,
        lock_wait_p99_ms: None,
        held: 0.0,
        waiters: 0.0,
    };
    serde_json::to_string(&report).unwrap()
}

async fn replicas_reporting(store: &CouponStore) -> BTreeSet<String> {
    let reports = store.reports().await.expect("reading the reports");
    (reports.iter())
        .map(|report| serde_json::from_str::<Report>(report).unwrap().replica)
        .collect()
}

/// Leaves a report stopped long ago and one stopped lately in `store`, starts a replica on
/// `url`, and checks which reports it left once its own is in.
async fn a_starting_replica_forgets_only_long_stopped_ones(store: CouponStore, url: &str) {
    let long_ago = FORGOTTEN_AFTER + Duration::from_secs(60);
    let lately = Duration::from_secs(10);
    for (replica, age) in [("stopped-long-ago", long_ago), ("stopped-lately", lately)] {
        (store.publish_report(replica, &report_made(replica, age)))
            .await
            .expect("publishing a report");
    }
    let replica = DemoReplica::start(DEMO, &["--store", url]);
    let name = replica.url().trim_start_matches("http://").to_owned();
    let mut reporting = replicas_reporting(&store).await;
    for _ in 0..100 {
        if reporting.contains(&name) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        reporting = replicas_reporting(&store).await;
    }
    let expected = BTreeSet::from([name.clone(), "stopped-lately".to_owned()]);
    assert_eq!(reporting, expected);
    // The page shows only the replica that reports now.
    let stats = Http::default()
        .get(&format!("{}/dashboard/stats", replica.url()))
        .await;
    assert_eq!(stats.status, StatusCode::OK, "{}", stats.body);
    let shown: Vec<_> = (stats.json()["replicas"].as_array().unwrap().iter())
        .map(|report| report["replica"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shown, [name]);
}

#[tokio::test]
async fn redis_keeps_no_report_of_a_replica_stopped_long_ago() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let connection = redis::aio::ConnectionManager::new(client).await.unwrap();
    let store = CouponStore::Redis(RedisStore::new(RedisConnection::Node(connection)));
    a_starting_replica_forgets_only_long_stopped_ones(store, &redis.url()).await;
}

#[tokio::test]
async fn postgres_keeps_no_report_of_a_replica_stopped_long_ago() {
    let schema = PostgresSchema::create().await;
    let store = SqlStore::connect(&schema.url(), Dialect::Postgres).await;
    let store = CouponStore::Sql(store.expect("connecting to the test schema"));
    a_starting_replica_forgets_only_long_stopped_ones(store, &schema.url()).await;
}

#[tokio::test]
async fn mariadb_keeps_no_report_of_a_replica_stopped_long_ago() {
    let database = MysqlDatabase::create().await;
    let store = SqlStore::connect(&database.url(), Dialect::Mysql).await;
    let store = CouponStore::Sql(store.expect("connecting to the test database"));
    a_starting_replica_forgets_only_long_stopped_ones(store, &database.url()).await;
}

/// Creates coupons through a replica on `url` and checks that the page lists every one of
/// them, numbers in names in numeric order.
async fn the_page_shows_every_coupon_in_natural_order(url: &str) {
    let replica = DemoReplica::start(DEMO, &["--store", url]);
    let http = Http::default();
    let ids = ["x11", "x7", "a", "x2", "x100", "x10", "b", "x9", "x8", "x3"];
    for id in ids {
        let created = http
            .put(
                &format!("{}/coupons/{id}", replica.url()),
                serde_json::json!({ "stock": 1 }),
            )
            .await;
        assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    }
    let stats = http
        .get(&format!("{}/dashboard/stats", replica.url()))
        .await;
    let shown: Vec<_> = (stats.json()["coupons"].as_array().unwrap().iter())
        .map(|coupon| coupon["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        shown,
        ["a", "b", "x2", "x3", "x7", "x8", "x9", "x10", "x11", "x100"],
        "more than the eight coupons created last, in natural order"
    );
    assert_eq!(stats.json()["more_coupons"], 0);
}

#[tokio::test]
async fn redis_coupons_are_all_shown() {
    let redis = RedisServer::start();
    the_page_shows_every_coupon_in_natural_order(&redis.url()).await;
}

#[tokio::test]
async fn postgres_coupons_are_all_shown() {
    let schema = PostgresSchema::create().await;
    the_page_shows_every_coupon_in_natural_order(&schema.url()).await;
}

#[tokio::test]
async fn mariadb_coupons_are_all_shown() {
    let database = MysqlDatabase::create().await;
    the_page_shows_every_coupon_in_natural_order(&database.url()).await;
}
