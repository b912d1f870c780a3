//! The demo coupon service never oversells with the lock — across three replicas sharing
//! Redis (alone, in a cluster, or watched by Sentinels), PostgreSQL or MariaDB (with the locks there, or in etcd, ZooKeeper
//! or RedLock), and in embedded mode — nor with `--optimistic` version checks on SQL, and does
//! oversell without either.

use std::collections::HashMap;

use http::StatusCode;
use integration_tests::{
    DemoReplica, EtcdCluster, Http, MASTER_NAME, MysqlDatabase, PostgresSchema, RedisCluster,
    RedisSentinels, RedisServer, ZookeeperEnsemble,
};
use serde_json::{Value, json};

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
const STOCK: u64 = 50;
const USERS: usize = 300;
/// The first `REPEATERS` users claim twice.
const REPEATERS: usize = 100;

/// Seeds coupon `c1` on the first replica, fires every claim at once spread over the
/// replicas, and returns the count of answers by status and the coupon afterwards.
async fn claim_storm(replicas: &[DemoReplica]) -> (HashMap<StatusCode, usize>, Value) {
    let http = Http::default();
    let seeded = http
        .put(
            &format!("{}/coupons/c1", replicas[0].url()),
            json!({ "stock": STOCK }),
        )
        .await;
    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);

    let users = (0..USERS)
        .chain(0..REPEATERS)
        .map(|user| format!("user-{user}"));
    let claims: Vec<_> = users
        .enumerate()
        .map(|(i, user)| {
            let (http, url) = (
                http.clone(),
                format!("{}/coupons/c1/claim", replicas[i % replicas.len()].url()),
            );
            tokio::spawn(async move { http.post(&url, json!({ "user_id": user })).await.status })
        })
        .collect();
    let mut statuses = HashMap::new();
    for claim in claims {
        *statuses.entry(claim.await.unwrap()).or_default() += 1;
    }
    let coupon = http
        .get(&format!("{}/coupons/c1", replicas[0].url()))
        .await
        .json();
    (statuses, coupon)
}

fn assert_sold_exactly_once(statuses: &HashMap<StatusCode, usize>, coupon: &Value) {
    assert_eq!(
        statuses.get(&StatusCode::CREATED),
        Some(&(STOCK as usize)),
        "{statuses:?}"
    );
    assert_eq!(coupon["remaining"], 0, "{coupon}");
    assert_eq!(coupon["claimed"], STOCK, "{coupon}");
    assert_eq!(coupon["oversold"], 0, "{coupon}");
    assert_eq!(
        coupon["duplicate_claims"], 0,
        "no user holds the coupon twice: {coupon}"
    );
    assert_eq!(
        statuses.values().sum::<usize>(),
        USERS + REPEATERS,
        "every claim was answered"
    );
}

fn assert_oversold(statuses: &HashMap<StatusCode, usize>, coupon: &Value) {
    assert!(
        coupon["oversold"].as_u64().unwrap() > 0,
        "{coupon} {statuses:?}"
    );
    assert!(
        statuses[&StatusCode::CREATED] > STOCK as usize,
        "{statuses:?}"
    );
}

fn replicas(count: usize, args: &[&str]) -> Vec<DemoReplica> {
    (0..count).map(|_| DemoReplica::start(DEMO, args)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_sharing_redis_never_oversell() {
    let redis = RedisServer::start();
    let url = redis.url();
    let replicas = replicas(3, &["--redis-url", &url, "--lock-wait-ms", "30000"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_three_replicas_oversell() {
    let redis = RedisServer::start();
    let url = redis.url();
    let replicas = replicas(3, &["--redis-url", &url, "--no-lock", "--work-ms", "50"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_oversold(&statuses, &coupon);
}

/// Coupons of the cluster storm: ten units each, fifty in all, on keys in different hash slots.
const CLUSTER_COUPONS: [&str; 5] = ["c1", "c2", "c3", "c4", "c5"];

/// Seeds every coupon of [`CLUSTER_COUPONS`], fires 400 claims at once spread over coupons and
/// replicas (a quarter of the users twice), and returns the count of answers by status and
/// the coupons afterwards.
async fn claim_storm_on_coupons(
    replicas: &[DemoReplica],
) -> (HashMap<StatusCode, usize>, Vec<Value>) {
    let http = Http::default();
    for coupon in CLUSTER_COUPONS {
        let url = format!("{}/coupons/{coupon}", replicas[0].url());
        let seeded = http.put(&url, json!({ "stock": 10 })).await;
        assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);
    }
    let claims: Vec<_> = (0..400)
        .map(|claim| {
            let coupon = CLUSTER_COUPONS[claim % CLUSTER_COUPONS.len()];
            let user = format!("user-{}", claim % 300);
            let replica = &replicas[claim % replicas.len()];
            let (http, url) = (
                http.clone(),
                format!("{}/coupons/{coupon}/claim", replica.url()),
            );
            tokio::spawn(async move { http.post(&url, json!({ "user_id": user })).await.status })
        })
        .collect();
    let mut statuses = HashMap::new();
    for claim in claims {
        *statuses.entry(claim.await.unwrap()).or_default() += 1;
    }
    let mut coupons = Vec::new();
    for coupon in CLUSTER_COUPONS {
        let url = format!("{}/coupons/{coupon}", replicas[0].url());
        coupons.push(http.get(&url).await.json());
    }
    (statuses, coupons)
}

/// Three replicas sharing a Redis Cluster (three masters with a replica each) for coupons and
/// locks, the coupons' keys on different masters: each coupon's ten units are claimed exactly
/// once each, fifty in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_sharing_a_redis_cluster_never_oversell() {
    let cluster = RedisCluster::start(3, 1);
    let masters: std::collections::HashSet<u16> = (CLUSTER_COUPONS.iter())
        .map(|coupon| cluster.master_of(cluster.slot_of(&format!("coupon:{{{coupon}}}"))))
        .collect();
    assert!(masters.len() > 1, "the coupons are on several masters");
    let url = format!("redis+cluster://{}", cluster.addresses().join(","));
    let replicas = replicas(3, &["--store", &url, "--lock-wait-ms", "30000"]);

    let (statuses, coupons) = claim_storm_on_coupons(&replicas).await;

    assert_eq!(
        statuses.get(&StatusCode::CREATED),
        Some(&50),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.values().sum::<usize>(),
        400,
        "every claim was answered"
    );
    for coupon in coupons {
        assert_eq!(coupon["remaining"], 0, "{coupon}");
        assert_eq!(coupon["claimed"], 10, "{coupon}");
        assert_eq!(coupon["oversold"], 0, "{coupon}");
        assert_eq!(coupon["duplicate_claims"], 0, "{coupon}");
    }
}

/// Three replicas sharing a master that Sentinels name (two replicas, three Sentinels), each
/// lock acknowledged by a replica (`?wait=1`), through a claim storm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_sharing_a_sentinel_watched_master_never_oversell() {
    let group = RedisSentinels::start(2);
    let sentinels = group.sentinel_addresses().join(",");
    let url = format!("redis+sentinel://{sentinels}/{MASTER_NAME}?wait=1");
    let replicas = replicas(3, &["--store", &url, "--lock-wait-ms", "30000"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

/// The same cluster storm without the lock oversells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_three_replicas_sharing_a_redis_cluster_oversell() {
    let cluster = RedisCluster::start(3, 1);
    let url = format!("redis+cluster://{}", cluster.addresses().join(","));
    let replicas = replicas(3, &["--store", &url, "--no-lock", "--work-ms", "50"]);

    let (statuses, coupons) = claim_storm_on_coupons(&replicas).await;

    let oversold: u64 = coupons
        .iter()
        .map(|coupon| coupon["oversold"].as_u64().unwrap())
        .sum();
    assert!(oversold > 0, "{coupons:?} {statuses:?}");
}

/// Three replicas keeping coupons at `store` and locks at `lock_store`, through a claim storm.
async fn claim_storm_with_locks_in(store: &str, lock_store: &str) {
    let args = [
        "--store",
        store,
        "--lock-store",
        lock_store,
        "--lock-wait-ms",
        "30000",
    ];
    let replicas = replicas(3, &args);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

/// Coupons in Redis, locks in RedLock over three masters of their own (the control without
/// the lock is `without_the_lock_three_replicas_oversell`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_locks_in_redlock_never_oversell() {
    let redis = RedisServer::start();
    let masters = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let addresses: Vec<String> = (masters.iter())
        .map(|master| format!("127.0.0.1:{}", master.port()))
        .collect();
    let lock_store = format!("redlock://{}", addresses.join(","));
    claim_storm_with_locks_in(&redis.url(), &lock_store).await;
}

/// Coupons in Redis, locks in a three-member etcd cluster (the control without the lock is
/// `without_the_lock_three_replicas_oversell`: the same coupon store and claims).
#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_locks_in_etcd_never_oversell() {
    let (redis, etcd) = (RedisServer::start(), EtcdCluster::start(3));
    claim_storm_with_locks_in(&redis.url(), &etcd.url()).await;
}

/// Coupons in Redis, locks in a three-server ZooKeeper ensemble (the same control as etcd's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_locks_in_zookeeper_never_oversell() {
    let (redis, zookeeper) = (RedisServer::start(), ZookeeperEnsemble::start(3));
    claim_storm_with_locks_in(&redis.url(), &zookeeper.url()).await;
}

/// Coupons in PostgreSQL, locks in etcd: the database fences the claim with etcd's tokens.
#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_postgres_with_locks_in_etcd_never_oversell() {
    let (schema, etcd) = (PostgresSchema::create().await, EtcdCluster::start(1));
    claim_storm_with_locks_in(&schema.url(), &etcd.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_sharing_postgres_never_oversell() {
    let schema = PostgresSchema::create().await;
    let url = schema.url();
    let replicas = replicas(3, &["--store", &url, "--lock-wait-ms", "30000"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_three_replicas_sharing_postgres_oversell() {
    let schema = PostgresSchema::create().await;
    let url = schema.url();
    let replicas = replicas(3, &["--store", &url, "--no-lock", "--work-ms", "50"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_oversold(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_sharing_mariadb_never_oversell() {
    let database = MysqlDatabase::create().await;
    let url = database.url();
    let replicas = replicas(3, &["--store", &url, "--lock-wait-ms", "30000"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_three_replicas_sharing_mariadb_oversell() {
    let database = MysqlDatabase::create().await;
    let url = database.url();
    let replicas = replicas(3, &["--store", &url, "--no-lock", "--work-ms", "50"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_oversold(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_replicas_sharing_postgres_never_oversell() {
    let schema = PostgresSchema::create().await;
    let url = schema.url();
    let replicas = replicas(3, &["--store", &url, "--optimistic"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_replicas_sharing_mariadb_never_oversell() {
    let database = MysqlDatabase::create().await;
    let url = database.url();
    let replicas = replicas(3, &["--store", &url, "--optimistic"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_mode_never_oversells() {
    let replicas = replicas(1, &["--lock-wait-ms", "30000"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert_sold_exactly_once(&statuses, &coupon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_the_embedded_mode_oversells() {
    let replicas = replicas(1, &["--no-lock", "--work-ms", "50"]);

    let (statuses, coupon) = claim_storm(&replicas).await;

    assert!(
        coupon["oversold"].as_u64().unwrap() > 0,
        "{coupon} {statuses:?}"
    );
}
