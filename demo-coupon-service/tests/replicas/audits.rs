//! The demo's audits are a cluster-wide semaphore: across three replicas, never more than
//! `--audit-permits` run at once; a killed replica's permit comes back after its lease.

use std::time::Duration;

use http::StatusCode;
use integration_tests::{DemoReplica, Http, RedisServer};
use serde_json::json;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");

/// Fires `count` audits at once over the replicas; returns the statuses and the most
/// `running_audits` any answer reported.
async fn audit_storm(replicas: &[DemoReplica], count: usize) -> (Vec<StatusCode>, u64) {
    let http = Http::default();
    http.put(
        &format!("{}/coupons/c1", replicas[0].url()),
        json!({ "stock": 5 }),
    )
    .await;
    let audits: Vec<_> = (0..count)
        .map(|i| {
            let (http, url) = (
                http.clone(),
                format!("{}/coupons/c1/audit", replicas[i % replicas.len()].url()),
            );
            tokio::spawn(async move { http.post(&url, json!({})).await })
        })
        .collect();
    let (mut statuses, mut most) = (Vec::new(), 0);
    for audit in audits {
        let reply = audit.await.unwrap();
        if reply.status == StatusCode::OK {
            most = most.max(reply.json()["running_audits"].as_u64().unwrap());
        }
        statuses.push(reply.status);
    }
    (statuses, most)
}

fn replicas(redis: &RedisServer, args: &[&str]) -> Vec<DemoReplica> {
    let url = redis.url();
    let mut all = vec!["--redis-url", url.as_str()];
    all.extend_from_slice(args);
    (0..3).map(|_| DemoReplica::start(DEMO, &all)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_audits_across_three_replicas_never_run_more_than_two_at_once() {
    let redis = RedisServer::start();
    let replicas = replicas(
        &redis,
        &[
            "--audit-permits",
            "2",
            "--work-ms",
            "50",
            "--lock-wait-ms",
            "30000",
        ],
    );

    let (statuses, most) = audit_storm(&replicas, 50).await;

    assert!(
        statuses.iter().all(|status| *status == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(most, 2, "the limit held, and was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_audits_pile_up() {
    let redis = RedisServer::start();
    let replicas = replicas(&redis, &["--no-lock", "--work-ms", "50"]);

    let (_, most) = audit_storm(&replicas, 50).await;

    assert!(
        most > 2,
        "the twin shows the limit is the lock's doing: {most}"
    );
}

#[tokio::test]
async fn a_killed_holders_permit_frees_after_its_ttl() {
    let redis = RedisServer::start();
    let url = redis.url();
    let common = [
        "--redis-url",
        url.as_str(),
        "--audit-permits",
        "1",
        "--lock-ttl-ms",
        "1000",
    ];
    let mut holder = DemoReplica::start(DEMO, &[&common[..], &["--work-ms", "60000"]].concat());
    let other = DemoReplica::start(
        DEMO,
        &[&common[..], &["--work-ms", "10", "--lock-wait-ms", "0"]].concat(),
    );
    let http = Http::default();
    http.put(
        &format!("{}/coupons/c1", other.url()),
        json!({ "stock": 5 }),
    )
    .await;
    let _held = tokio::spawn({
        let (http, url) = (http.clone(), format!("{}/coupons/c1/audit", holder.url()));
        async move { http.post(&url, json!({})).await }
    });
    let audit_url = format!("{}/coupons/c1/audit", other.url());
    let audit = || http.post(&audit_url, json!({}));
    let started = std::time::Instant::now();
    while audit().await.status != StatusCode::CONFLICT {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the holder never took its permit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    holder.kill();
    let killed = std::time::Instant::now();
    assert_eq!(
        audit().await.status,
        StatusCode::CONFLICT,
        "its permit outlives it for its TTL"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;

    assert_eq!(
        audit().await.status,
        StatusCode::OK,
        "free {:?} after the kill",
        killed.elapsed()
    );
}
