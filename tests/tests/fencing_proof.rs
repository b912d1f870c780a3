//! A claim that lost its lock — too slow without renewal, or frozen like a long GC pause —
//! cannot write over the next holder's claim: the fencing token refuses it. Each proof has a
//! twin with `--no-fence` that oversells.

use std::time::{Duration, Instant};

use http::StatusCode;
use integration_tests::{DemoReplica, Http, RedisServer, Reply};
use redis::AsyncCommands;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-replica");
const LOCK: &str = "{lock:coupon:c1}";

struct Scenario {
    redis: RedisServer,
    http: Http,
}

impl Scenario {
    fn new() -> Self {
        Self {
            redis: RedisServer::start(),
            http: Http::default(),
        }
    }

    fn replica(&self, args: &[&str]) -> DemoReplica {
        let url = self.redis.url();
        let mut all = vec!["--redis-url", url.as_str()];
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

    async fn lock_exists(&self) -> bool {
        let mut connection = self
            .redis
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        connection.exists(LOCK).await.unwrap()
    }

    /// Waits until the coupon's lock is taken (`true`) or gone (`false`), at most 10 s.
    async fn wait_for_lock(&self, present: bool) {
        let started = Instant::now();
        while self.lock_exists().await != present {
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
async fn paused_holder(fence: bool) -> (Reply, Reply, Value) {
    let scenario = Scenario::new();
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

#[tokio::test]
async fn a_paused_holder_wakes_up_and_its_write_is_refused() {
    let (first, second, coupon) = paused_holder(true).await;

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

#[tokio::test]
async fn without_the_fence_a_paused_holder_oversells() {
    let (first, second, coupon) = paused_holder(false).await;

    assert_eq!(
        (first.status, second.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_eq!(coupon["oversold"], 1, "{coupon}");
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
        scenario.lock_exists().await,
        "nobody released it: only the TTL can free it"
    );
    tokio::time::sleep_until((killed + Duration::from_millis(1000)).into()).await;
    assert!(!scenario.lock_exists().await, "free within the 1 s TTL");
}
