//! `GET /metrics` of a demo replica counts what a known sequence of requests did: the locks it
//! took by route, how they ended, the store calls they made, and the answers by status.

use http::StatusCode;
use integration_tests::{DemoReplica, Http};
use serde_json::json;

use demo_coupon_service::telemetry::{RESPONSES_TOTAL, Scrape};
use tower_lock::telemetry::Metric;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");
const CLAIM: &str = "/coupons/{id}/claim";

#[tokio::test]
async fn the_metrics_count_a_known_sequence_of_claims() {
    let replica = DemoReplica::start(DEMO, &["--work-ms", "0"]);
    let (http, url) = (Http::default(), replica.url());
    let seeded = (http.put(&format!("{url}/coupons/c1"), json!({ "stock": 3 }))).await;
    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);
    // Stock 3: three users get one, one of them asks again, a fourth finds it sold out.
    let mut answers = Vec::new();
    for user in ["u1", "u1", "u2", "u3", "u4"] {
        let claim = json!({ "user_id": user });
        answers.push(
            http.post(&format!("{url}/coupons/c1/claim"), claim)
                .await
                .status,
        );
    }
    assert_eq!(
        answers.iter().map(StatusCode::as_u16).collect::<Vec<_>>(),
        [201, 409, 201, 201, 410]
    );
    let too_long = format!("{url}/coupons/{}/claim", "x".repeat(300));
    let refused = http.post(&too_long, json!({ "user_id": "u5" })).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);

    let scraped = http.get(&format!("{url}/metrics")).await;
    assert_eq!(scraped.status, StatusCode::OK);
    let scrape = Scrape::parse(&scraped.body);
    let claims = [("group", CLAIM), ("backend", "memory"), ("shape", "write")];
    let outcome = |outcome| {
        let labels = [claims.as_slice(), &[("outcome", outcome)]].concat();
        scrape.sum(Metric::OutcomesTotal.name(), &labels)
    };
    assert_eq!(outcome("acquired"), 5.0, "{}", scraped.body);
    assert_eq!(outcome("invalid_key"), 1.0, "{}", scraped.body);
    assert_eq!(outcome("busy") + outcome("wait_timed_out"), 0.0);
    let acquired = [claims.as_slice(), &[("outcome", "acquired")]].concat();
    let count = |name: &str, labels: &[(&str, &str)]| scrape.sum(&format!("{name}_count"), labels);
    assert_eq!(count(Metric::AcquireSeconds.name(), &acquired), 5.0);
    assert_eq!(count(Metric::HoldSeconds.name(), &claims), 5.0);
    // Durations are histograms with buckets, which replicas' scrapes add up, not summaries.
    let time_to_lock = scrape.buckets(Metric::AcquireSeconds.name(), &acquired);
    assert!(time_to_lock.quantile(0.5).is_some(), "{}", scraped.body);
    assert!(!scraped.body.contains("quantile="), "{}", scraped.body);
    // The seeding PUT took its lock too, under its own route.
    let seeding = [("group", "/coupons/{id}"), ("outcome", "acquired")];
    assert_eq!(scrape.sum(Metric::OutcomesTotal.name(), &seeding), 1.0);
    // One acquire and one release per lock, nothing waited, nothing still held.
    for op in ["acquire", "release"] {
        let call = [("backend", "memory"), ("op", op), ("result", "ok")];
        assert_eq!(
            scrape.sum(Metric::StoreCallsTotal.name(), &call),
            6.0,
            "{op}"
        );
    }
    assert_eq!(scrape.sum(Metric::Held.name(), &[]), 0.0);
    assert_eq!(scrape.sum(Metric::Waiters.name(), &[]), 0.0);
    let answered = |status| scrape.sum(RESPONSES_TOTAL, &[("route", CLAIM), ("status", status)]);
    assert_eq!(
        [
            answered("201"),
            answered("409"),
            answered("410"),
            answered("400")
        ],
        [3.0, 1.0, 1.0, 1.0]
    );
    assert!(
        !scraped.body.contains("u1") && !scraped.body.contains("c1"),
        "no label carries a key or a user"
    );
}

#[test]
fn the_docs_table_names_every_metric_with_its_type() {
    let docs = include_str!("../../../middleware/docs/OBSERVABILITY.md");
    let metrics = [
        (Metric::AcquireSeconds.name(), "histogram"),
        (Metric::WaitSeconds.name(), "histogram"),
        (Metric::HoldSeconds.name(), "histogram"),
        (Metric::OutcomesTotal.name(), "counter"),
        (Metric::RenewalsTotal.name(), "counter"),
        (Metric::Held.name(), "gauge"),
        (Metric::Waiters.name(), "gauge"),
        (Metric::StoreCallsTotal.name(), "counter"),
    ];
    for (name, kind) in metrics {
        let row = format!("| `{name}` | {kind} |");
        assert!(
            docs.contains(&row),
            "middleware/docs/OBSERVABILITY.md lacks the row {row}"
        );
    }
}
