//! The operator's view across replicas: a claim held open by a slow handler on one replica is
//! seen in another replica's `GET /admin/locks`, released there with `DELETE`; the stuck claim
//! then answers 503 lock-lost and writes nothing, the next claim succeeds, and nothing is
//! oversold — with the locks in Redis, PostgreSQL, etcd and ZooKeeper. The twin: without the
//! release, the next claim waits out its turn and is refused.

use std::time::{Duration, Instant};

use http::StatusCode;
use integration_tests::{
    DemoReplica, EtcdCluster, Http, PostgresSchema, RedisServer, ZookeeperEnsemble,
};
use serde_json::{Value, json};

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
const TOKEN: &str = "operators-token-of-the-proof";

/// Two replicas on `store` (and `lock_store`): the stuck one's claims work 5 s, the other's
/// 10 ms and wait at most 1 s for a lock.
fn replicas(store: &str, lock_store: Option<&str>) -> (DemoReplica, DemoReplica) {
    let start = |work: &str, wait: &str| {
        let mut args = vec![
            "--store",
            store,
            "--admin-token",
            TOKEN,
            "--work-ms",
            work,
            "--lock-wait-ms",
            wait,
        ];
        if let Some(lock_store) = lock_store {
            args.extend(["--lock-store", lock_store]);
        }
        DemoReplica::start(DEMO, &args)
    };
    (start("5000", "1000"), start("10", "1000"))
}

/// The operator's release, proven on the replicas `store` and `lock_store` give; with
/// `release: false`, its twin.
async fn stuck_claim(store: &str, lock_store: Option<&str>, release: bool) {
    let (stuck, other) = replicas(store, lock_store);
    let http = Http::default();
    let operator = http.bearer(TOKEN);
    let seeded = http
        .put(
            &format!("{}/coupons/c1", other.url()),
            json!({ "stock": 1 }),
        )
        .await;
    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);

    let claim = {
        let (http, url) = (http.clone(), format!("{}/coupons/c1/claim", stuck.url()));
        tokio::spawn(async move { http.post(&url, json!({ "user_id": "a" })).await })
    };
    let lock = held_lock(&operator, &other, "coupon:c1").await;
    let holder = &lock["holders"][0];
    assert_eq!(holder["shape"], "write", "{lock}");
    let address = stuck.url().replace("http://", "");
    assert_eq!(
        holder["holder"],
        address.as_str(),
        "the stuck replica holds it: {lock}"
    );

    if release {
        let released = operator
            .delete(&format!("{}/admin/locks/coupon:c1", other.url()))
            .await;
        assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    }
    let next = http
        .post(
            &format!("{}/coupons/c1/claim", other.url()),
            json!({ "user_id": "b" }),
        )
        .await;
    let stuck_answer = claim.await.unwrap();
    let coupon: Value = http
        .get(&format!("{}/coupons/c1", other.url()))
        .await
        .json();
    if release {
        assert_eq!(
            next.status,
            StatusCode::CREATED,
            "the next claim gets in: {}",
            next.body
        );
        assert_eq!(
            stuck_answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            stuck_answer.body
        );
        assert!(
            stuck_answer.body.contains("urn:tower-lock:lock-lost"),
            "{}",
            stuck_answer.body
        );
    } else {
        assert_eq!(
            next.status,
            StatusCode::CONFLICT,
            "the stuck claim keeps it: {}",
            next.body
        );
        assert_eq!(
            stuck_answer.status,
            StatusCode::CREATED,
            "{}",
            stuck_answer.body
        );
    }
    assert_eq!(
        (coupon["claimed"].clone(), coupon["oversold"].clone()),
        (json!(1), json!(0)),
        "{coupon}"
    );
}

/// The lock on `key` as `replica`'s operator's view lists it, once it is held (at most 10 s).
async fn held_lock(operator: &Http, replica: &DemoReplica, key: &str) -> Value {
    let started = Instant::now();
    loop {
        let page: Value = operator
            .get(&format!("{}/admin/locks", replica.url()))
            .await
            .json();
        let locks = page["locks"].as_array().cloned().unwrap_or_default();
        if let Some(lock) = locks.into_iter().find(|lock| lock["key"] == key) {
            return lock;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{key} never listed: {page}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_operator_frees_a_stuck_claim_on_redis() {
    let redis = RedisServer::start();
    stuck_claim(&redis.url(), None, true).await;
}

#[tokio::test]
async fn without_the_operators_release_the_stuck_claim_keeps_the_coupon() {
    let redis = RedisServer::start();
    stuck_claim(&redis.url(), None, false).await;
}

#[tokio::test]
async fn an_operator_frees_a_stuck_claim_on_postgres() {
    let schema = PostgresSchema::create().await;
    stuck_claim(&schema.url(), None, true).await;
}

#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test]
async fn an_operator_frees_a_stuck_claim_on_etcd() {
    let (redis, etcd) = (RedisServer::start(), EtcdCluster::start(1));
    stuck_claim(&redis.url(), Some(&etcd.url()), true).await;
}

#[tokio::test]
async fn an_operator_frees_a_stuck_claim_on_zookeeper() {
    let (redis, zookeeper) = (RedisServer::start(), ZookeeperEnsemble::start(1));
    stuck_claim(&redis.url(), Some(&zookeeper.url()), true).await;
}
