//! A claim that lost its lock — too slow without renewal, or frozen like a long GC pause —
//! cannot write over the next holder's claim: the fencing token refuses it, in Redis, and in
//! PostgreSQL and MariaDB by the database itself — also with the locks in etcd or ZooKeeper,
//! whose tokens the coupon store checks (a frozen replica's session expires, and another takes
//! the lock). Each proof has a twin with `--no-fence` that oversells.

use std::time::{Duration, Instant};

use http::StatusCode;
use integration_tests::{
    DemoReplica, EtcdCluster, Http, MysqlDatabase, PostgresSchema, RedisServer, Reply,
    ZookeeperEnsemble,
};
use redis::AsyncCommands;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
/// The claim lock's name in the stores: the locker's prefix and the key.
const LOCK: &str = "lock:coupon:c1";

/// Where the replicas keep coupons and locks.
enum Store {
    Redis(RedisServer),
    Postgres(PostgresSchema),
    Mysql(MysqlDatabase),
    /// Coupons in Redis, locks in etcd (`--lock-store`).
    RedisWithEtcdLocks(RedisServer, EtcdCluster),
    /// Coupons in Redis, locks in ZooKeeper (`--lock-store`).
    RedisWithZookeeperLocks(RedisServer, ZookeeperEnsemble),
}

impl Store {
    fn url(&self) -> String {
        match self {
            Self::Redis(redis) => redis.url(),
            Self::Postgres(schema) => schema.url(),
            Self::Mysql(database) => database.url(),
            Self::RedisWithEtcdLocks(redis, _) | Self::RedisWithZookeeperLocks(redis, _) => {
                redis.url()
            }
        }
    }

    /// The replica's `--lock-store`, if any: with a 2 s session (the default is 15 s), so
    /// that a frozen holder's 500 ms leases pass on soon after they end.
    fn lock_store(&self) -> Option<String> {
        match self {
            Self::RedisWithEtcdLocks(_, etcd) => Some(format!("{}?session_ms=2000", etcd.url())),
            Self::RedisWithZookeeperLocks(_, zookeeper) => {
                Some(format!("{}?session_ms=2000", zookeeper.url()))
            }
            _ => None,
        }
    }

    /// Whether somebody holds the claim lock (a writer: claims take it alone).
    async fn lock_held(&self) -> bool {
        match self {
            Self::RedisWithEtcdLocks(_, etcd) => {
                etcd.keys_under(0, &format!("tower-lock/{LOCK}/x/")) > 0
            }
            Self::RedisWithZookeeperLocks(_, zookeeper) => {
                zookeeper.ephemerals_under(0, &format!("/tower-lock/{LOCK}/x-")) > 0
            }
            Self::Redis(redis) => {
                let mut connection = redis.client().get_multiplexed_async_connection().await;
                let key = format!("{{{LOCK}}}");
                connection.as_mut().unwrap().exists(key).await.unwrap()
            }
            Self::Postgres(schema) => {
                let held = format!(
                    "SELECT count(*) FROM {} WHERE name = $1 AND expires_at > clock_timestamp()",
                    schema.table("tower_lock_leases")
                );
                let pool = schema.pool().await;
                let count: i64 = sqlx::query_scalar(&held)
                    .bind(LOCK)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                count > 0
            }
            Self::Mysql(database) => {
                let held = format!(
                    "SELECT count(*) FROM {} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)",
                    database.table("tower_lock_leases")
                );
                let pool = database.pool().await;
                let count: i64 = sqlx::query_scalar(&held)
                    .bind(LOCK.as_bytes())
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                count > 0
            }
        }
    }
}

struct Scenario {
    store: Store,
    http: Http,
}

impl Scenario {
    fn new() -> Self {
        Self::on(Store::Redis(RedisServer::start()))
    }

    fn on(store: Store) -> Self {
        Self {
            store,
            http: Http::default(),
        }
    }

    fn replica(&self, args: &[&str]) -> DemoReplica {
        let (url, lock_store) = (self.store.url(), self.store.lock_store());
        let mut all = vec!["--store", url.as_str()];
        if let Some(lock_store) = &lock_store {
            all.extend(["--lock-store", lock_store.as_str()]);
        }
        all.extend_from_slice(args);
        DemoReplica::start(DEMO, &all)
    }

    async fn seed(&self, replica: &DemoReplica) {
        let reply = self
            .http
            .put(
                &format!("{}/coupons/c1", replica.url()),
                json!({ "stock": 1 }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK);
    }

    fn claim(&self, replica: &DemoReplica, user: &str) -> JoinHandle<Reply> {
        let (http, url, body) = (
            self.http.clone(),
            format!("{}/coupons/c1/claim", replica.url()),
            json!({ "user_id": user }),
        );
        tokio::spawn(async move { http.post(&url, body).await })
    }

    async fn coupon(&self, replica: &DemoReplica) -> Value {
        self.http
            .get(&format!("{}/coupons/c1", replica.url()))
            .await
            .json()
    }

    /// Waits until the coupon's lock is taken (`true`) or gone (`false`), at most 10 s.
    async fn wait_for_lock(&self, present: bool) {
        let started = Instant::now();
        while self.store.lock_held().await != present {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "lock present={present} never happened"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Claim `a` holds the lock with no renewal past its 300 ms TTL; claim `b` gets in meanwhile.
async fn slow_claim_without_renewal(fence: bool) -> (Reply, Reply, Value) {
    let scenario = Scenario::new();
    let mut args = vec![
        "--no-renew",
        "--lock-ttl-ms",
        "300",
        "--work-ms",
        "1000",
        "--on-lost",
        "continue",
    ];
    if !fence {
        args.push("--no-fence");
    }
    let replica = scenario.replica(&args);
    scenario.seed(&replica).await;

    let first = scenario.claim(&replica, "a");
    scenario.wait_for_lock(true).await;
    scenario.wait_for_lock(false).await;
    let second = scenario.claim(&replica, "b");

    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    (first, second, scenario.coupon(&replica).await)
}

#[tokio::test]
async fn a_claim_that_outlived_its_lease_cannot_write() {
    let (first, second, coupon) = slow_claim_without_renewal(true).await;

    assert_eq!(
        first.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        first.body
    );
    assert!(
        first.body.contains("urn:tower-lock:lock-lost"),
        "{}",
        first.body
    );
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    assert_eq!(
        (coupon["claimed"].clone(), coupon["oversold"].clone()),
        (json!(1), json!(0)),
        "{coupon}"
    );
}

#[tokio::test]
async fn without_the_fence_a_claim_that_outlived_its_lease_oversells() {
    let (first, second, coupon) = slow_claim_without_renewal(false).await;

    assert_eq!(
        (first.status, second.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_eq!(coupon["oversold"], 1, "{coupon}");
}

/// Replica one takes claim `a`'s lock and, while its handler works, is frozen (SIGSTOP) past
/// its lease; replica two claims for `b`; then replica one thaws and goes on with `a`.
async fn paused_holder(store: Store, fence: bool) -> (Reply, Reply, Value) {
    let scenario = Scenario::on(store);
    let mut args = vec![
        "--lock-ttl-ms",
        "500",
        "--work-ms",
        "800",
        "--on-lost",
        "continue",
    ];
    if !fence {
        args.push("--no-fence");
    }
    let frozen = scenario.replica(&args);
    let other = scenario.replica(&["--work-ms", "10"]);
    scenario.seed(&other).await;

    let first = scenario.claim(&frozen, "a");
    scenario.wait_for_lock(true).await;
    // Let the replica read the acquire's answer (its handler then works for 800 ms): frozen
    // before that, it would hear the answer only after the lease and refuse the lock itself.
    tokio::time::sleep(Duration::from_millis(100)).await;
    frozen.pause();
    scenario.wait_for_lock(false).await;
    let second = scenario.claim(&other, "b").await.unwrap();
    frozen.resume();

    let first = first.await.unwrap();
    (first, second, scenario.coupon(&other).await)
}

fn assert_refused_by_the_fence(first: &Reply, second: &Reply, coupon: &Value) {
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    assert_eq!(
        first.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        first.body
    );
    assert_eq!(
        (coupon["claimed"].clone(), coupon["oversold"].clone()),
        (json!(1), json!(0)),
        "{coupon}"
    );
}

fn assert_oversold(first: &Reply, second: &Reply, coupon: &Value) {
    assert_eq!(
        (first.status, second.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_eq!(coupon["oversold"], 1, "{coupon}");
}

#[tokio::test]
async fn a_paused_holder_wakes_up_and_its_write_is_refused() {
    let (first, second, coupon) = paused_holder(Store::Redis(RedisServer::start()), true).await;
    assert_refused_by_the_fence(&first, &second, &coupon);
}

#[tokio::test]
async fn without_the_fence_a_paused_holder_oversells() {
    let (first, second, coupon) = paused_holder(Store::Redis(RedisServer::start()), false).await;
    assert_oversold(&first, &second, &coupon);
}

#[tokio::test]
async fn on_postgres_a_paused_holders_write_is_refused_by_the_database() {
    let store = Store::Postgres(PostgresSchema::create().await);
    let (first, second, coupon) = paused_holder(store, true).await;
    assert_refused_by_the_fence(&first, &second, &coupon);
}

#[tokio::test]
async fn on_postgres_without_the_fence_a_paused_holder_oversells() {
    let store = Store::Postgres(PostgresSchema::create().await);
    let (first, second, coupon) = paused_holder(store, false).await;
    assert_oversold(&first, &second, &coupon);
}

#[tokio::test]
async fn on_mariadb_a_paused_holders_write_is_refused_by_the_database() {
    let store = Store::Mysql(MysqlDatabase::create().await);
    let (first, second, coupon) = paused_holder(store, true).await;
    assert_refused_by_the_fence(&first, &second, &coupon);
}

#[tokio::test]
async fn on_mariadb_without_the_fence_a_paused_holder_oversells() {
    let store = Store::Mysql(MysqlDatabase::create().await);
    let (first, second, coupon) = paused_holder(store, false).await;
    assert_oversold(&first, &second, &coupon);
}

#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test]
async fn with_locks_in_etcd_a_paused_holders_write_is_refused_by_the_coupon_store() {
    let store = Store::RedisWithEtcdLocks(RedisServer::start(), EtcdCluster::start(1));
    let (first, second, coupon) = paused_holder(store, true).await;
    assert_refused_by_the_fence(&first, &second, &coupon);
}

#[cfg_attr(
    not(feature = "etcd"),
    ignore = "locks in etcd need the demo's etcd feature (scripts/test enables it)"
)]
#[tokio::test]
async fn with_locks_in_etcd_without_the_fence_a_paused_holder_oversells() {
    let store = Store::RedisWithEtcdLocks(RedisServer::start(), EtcdCluster::start(1));
    let (first, second, coupon) = paused_holder(store, false).await;
    assert_oversold(&first, &second, &coupon);
}

#[tokio::test]
async fn with_locks_in_zookeeper_a_paused_holders_write_is_refused_by_the_coupon_store() {
    let store = Store::RedisWithZookeeperLocks(RedisServer::start(), ZookeeperEnsemble::start(1));
    let (first, second, coupon) = paused_holder(store, true).await;
    assert_refused_by_the_fence(&first, &second, &coupon);
}

#[tokio::test]
async fn with_locks_in_zookeeper_without_the_fence_a_paused_holder_oversells() {
    let store = Store::RedisWithZookeeperLocks(RedisServer::start(), ZookeeperEnsemble::start(1));
    let (first, second, coupon) = paused_holder(store, false).await;
    assert_oversold(&first, &second, &coupon);
}

#[tokio::test]
async fn a_killed_holders_lock_is_free_again_within_its_ttl() {
    let scenario = Scenario::new();
    let mut holder = scenario.replica(&["--lock-ttl-ms", "1000", "--work-ms", "10000"]);
    scenario.seed(&holder).await;
    let _claim = scenario.claim(&holder, "a");
    scenario.wait_for_lock(true).await;

    holder.kill();
    let killed = Instant::now();

    assert!(
        scenario.store.lock_held().await,
        "nobody released it: only the TTL can free it"
    );
    tokio::time::sleep_until((killed + Duration::from_millis(1000)).into()).await;
    assert!(!scenario.store.lock_held().await, "free within the 1 s TTL");
}
