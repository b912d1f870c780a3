//! A claim storm on three replicas: coupons in a Redis of their own, locks in the store a test
//! names; 24 clients claim one coupon over and over while the test does what it proves.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::StatusCode;
use integration_tests::{DemoReplica, Http, RedisServer};
use serde_json::json;
use tokio::time::Instant;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
/// Concurrent claimers, spread over the replicas.
pub const CLAIMERS: usize = 24;
/// The replicas the claimers are spread over.
pub const REPLICAS: usize = 3;
/// More stock than a storm can claim: every claim should be granted.
const STOCK: u64 = 1_000_000;

/// One claim's answer: from which replica, when, how long after the claim was sent, and its
/// status.
pub struct Answer {
    pub replica: usize,
    pub at: Instant,
    pub took: Duration,
    pub status: StatusCode,
}

/// What a storm saw: every claim's answer.
pub struct Storm {
    pub answers: Vec<Answer>,
}

impl Storm {
    /// Claims granted by each replica.
    pub fn granted_per_replica(&self) -> [u64; REPLICAS] {
        let mut granted = [0; REPLICAS];
        for answer in &self.answers {
            if answer.status == StatusCode::CREATED {
                granted[answer.replica] += 1;
            }
        }
        granted
    }

    /// The longest a claim took to be answered.
    pub fn slowest(&self) -> Duration {
        let took = self.answers.iter().map(|answer| answer.took);
        took.max().unwrap_or_default()
    }

    /// The most claims granted to others while any one claim waited for its answer (from when
    /// it was sent until it was answered, granted or refused).
    pub fn most_grants_waited_for(&self) -> usize {
        let mut grants: Vec<Instant> = (self.answers.iter())
            .filter(|answer| answer.status == StatusCode::CREATED)
            .map(|answer| answer.at)
            .collect();
        grants.sort();
        let during = |answer: &Answer| {
            let sent = answer.at - answer.took;
            let (from, to) = (
                grants.partition_point(|&at| at <= sent),
                grants.partition_point(|&at| at < answer.at),
            );
            to.saturating_sub(from)
        };
        self.answers.iter().map(during).max().unwrap_or_default()
    }

    /// Claims answered `status`.
    pub fn count(&self, status: StatusCode) -> usize {
        let answered = self.answers.iter().filter(|answer| answer.status == status);
        answered.count()
    }
}

/// Jain's fairness index over `counts`: 1.0 when even, 1/n when one got all.
pub fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&count| count as f64).sum();
    let squares: f64 = counts.iter().map(|&count| (count as f64).powi(2)).sum();
    sum * sum / (counts.len() as f64 * squares)
}

/// Storms one coupon on three replicas started with `--lock-store lock_store` and `args`, while
/// `during` runs; then checks that the coupon counted every claim granted once and none twice.
pub async fn claim_storm<T, F: Future<Output = T>>(
    lock_store: &str,
    args: &[&str],
    during: impl FnOnce() -> F,
) -> (Storm, T) {
    let redis = RedisServer::start();
    let store = redis.url();
    let mut all_args = vec!["--store", store.as_str(), "--lock-store", lock_store];
    all_args.extend_from_slice(args);
    let replicas: Vec<DemoReplica> = (0..REPLICAS)
        .map(|_| DemoReplica::start(DEMO, &all_args))
        .collect();
    let http = Http::default();
    let seeded = (http.put(
        &format!("{}/coupons/c1", replicas[0].url()),
        json!({ "stock": STOCK }),
    ))
    .await;
    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);

    let stop = Arc::new(AtomicBool::new(false));
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|claimer| {
            let replica = claimer % REPLICAS;
            let url = format!("{}/coupons/c1/claim", replicas[replica].url());
            let (http, stop) = (http.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for n in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let user = format!("user-{claimer}-{n}");
                    let sent = Instant::now();
                    let status = http.post(&url, json!({ "user_id": user })).await.status;
                    answers.push(Answer {
                        replica,
                        at: Instant::now(),
                        took: sent.elapsed(),
                        status,
                    });
                }
                answers
            })
        })
        .collect();
    let outcome = during().await;
    stop.store(true, Ordering::Relaxed);

    let mut answers = Vec::new();
    for claimer in claimers {
        answers.extend(claimer.await.expect("a claimer panicked"));
    }
    let coupon = http
        .get(&format!("{}/coupons/c1", replicas[0].url()))
        .await
        .json();
    assert_eq!(coupon["oversold"], 0, "{coupon}");
    assert_eq!(coupon["duplicate_claims"], 0, "{coupon}");
    let claimed = coupon["claimed"].as_u64().expect("a count");
    let storm = Storm { answers };
    assert_eq!(
        storm.count(StatusCode::CREATED) as u64,
        claimed,
        "every claim granted is counted once"
    );
    (storm, outcome)
}
