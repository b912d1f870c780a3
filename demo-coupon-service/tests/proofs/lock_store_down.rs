//! The demo with its coupons in one Redis and its locks in another store that goes away: a
//! burst of claims on one coupon is answered `503 lock-store-unavailable`, every one of them,
//! soon — never 409 "held by another request", which would tell a client (or an alert) that the
//! coupon is contended when the lock store is down — and no claim runs. The twin: the same
//! burst while the lock is really held is answered 409, after the claims' wait.

use std::time::Duration;

use http::StatusCode;
use integration_tests::{DemoReplica, Http, RedisServer};
use serde_json::json;
use tokio::time::Instant;
use tower_lock::{Locker, RedisBackend};

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
/// Claims arriving at once on one coupon.
const CLAIMS: usize = 20;
/// The demo's defaults: how long a claim waits for a busy lock, and the store timeout.
const WAIT: Duration = Duration::from_secs(3);
const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// Room for scheduling on two busy cores.
const SLACK: Duration = Duration::from_millis(700);

/// How a burst of claims was answered.
#[derive(Debug, Default)]
struct Answers {
    unavailable: usize,
    busy: usize,
    other: Vec<(StatusCode, String)>,
    slowest: Duration,
}

/// A demo replica with its coupons in a Redis of its own and its locks at `lock_store`, with
/// coupon `d2` in stock.
async fn demo(coupons: &RedisServer, lock_store: &str) -> DemoReplica {
    let args = ["--store", &coupons.url(), "--lock-store", lock_store];
    let replica = DemoReplica::start(DEMO, &args);
    let stocked = (Http::default())
        .put(
            &format!("{}/coupons/d2", replica.url()),
            json!({ "stock": 100 }),
        )
        .await;
    assert_eq!(stocked.status, StatusCode::OK, "{}", stocked.body);
    replica
}

/// [`CLAIMS`] claims on coupon `d2` at once.
async fn burst(replica: &DemoReplica) -> Answers {
    let (http, url) = (
        Http::default(),
        format!("{}/coupons/d2/claim", replica.url()),
    );
    let sent = Instant::now();
    let claims: Vec<_> = (0..CLAIMS)
        .map(|user| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let reply = http
                    .post(&url, json!({ "user_id": format!("u{user}") }))
                    .await;
                (reply, sent.elapsed())
            })
        })
        .collect();
    let mut answers = Answers::default();
    for claim in claims {
        let (reply, after) = claim.await.expect("a claim did not panic");
        answers.slowest = answers.slowest.max(after);
        match reply.status {
            StatusCode::SERVICE_UNAVAILABLE if reply.body.contains("lock-store-unavailable") => {
                answers.unavailable += 1;
            }
            StatusCode::CONFLICT => answers.busy += 1,
            status => answers.other.push((status, reply.body)),
        }
    }
    answers
}

/// Every claim was answered 503 lock-store-unavailable, none after `within`, and none ran: the
/// coupon's claims, read from its store (the demo's own reads are locked too), are none.
fn every_claim_unavailable(coupons: &RedisServer, answers: &Answers, within: Duration) {
    println!("{answers:?}");
    assert_eq!(answers.unavailable, CLAIMS, "{answers:?}");
    assert!(
        answers.slowest <= within,
        "{answers:?}, later than {within:?}"
    );
    let mut store = coupons
        .client()
        .get_connection()
        .expect("the coupons' Redis answers");
    let claims: usize = redis::Commands::llen(&mut store, "coupon:{d2}:claims").expect("LLEN");
    assert_eq!(claims, 0, "no claim ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_hear_a_killed_or_silent_lock_store_as_unavailable_not_busy() {
    let (coupons, mut locks) = (RedisServer::start(), RedisServer::start());
    let replica = demo(&coupons, &locks.url()).await;

    locks.kill();
    let killed = burst(&replica).await;
    every_claim_unavailable(&coupons, &killed, SLACK);

    locks.restart();
    locks.pause();
    let silent = burst(&replica).await;
    locks.resume();
    every_claim_unavailable(&coupons, &silent, STORE_TIMEOUT + SLACK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_hear_redlock_without_a_majority_as_unavailable_not_busy() {
    let coupons = RedisServer::start();
    let mut masters = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = masters
        .iter()
        .map(|master| master.port().to_string())
        .collect();
    let lock_store = format!("redlock://127.0.0.1:{}", urls.join(",127.0.0.1:"));
    let replica = demo(&coupons, &lock_store).await;

    masters[0].kill();
    masters[1].kill();
    let answers = burst(&replica).await;

    every_claim_unavailable(&coupons, &answers, SLACK);
}

/// The twin: with the lock store up and coupon `d2`'s lock held by another process, the same
/// burst is answered 409, once each claim's wait ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_on_a_held_lock_hear_busy_after_their_wait() {
    let (coupons, locks) = (RedisServer::start(), RedisServer::start());
    let replica = demo(&coupons, &locks.url()).await;
    let backend = RedisBackend::connect(locks.url())
        .await
        .expect("Redis answers");
    let _held = Locker::new(backend).lock("coupon:d2").await.expect("free");

    let answers = burst(&replica).await;

    println!("{answers:?}");
    assert_eq!(answers.busy, CLAIMS, "{answers:?}");
    assert!(answers.slowest >= WAIT, "{answers:?}");
}
