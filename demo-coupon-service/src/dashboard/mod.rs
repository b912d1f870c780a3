//! The live dashboard at `GET /`: every coupon's stock, claims and oversell, and each
//! replica's answers and locks, updated twice a second.
//!
//! Each replica reads its own metrics every [`REPORT_EVERY`] and publishes a [`Report`] in the
//! coupon store; the page polls `GET /dashboard/stats`, which gathers the fresh reports of
//! every replica sharing the store and the summary of every coupon in it (the first
//! 60 in natural order: `x2` before `x11`).

use std::cmp::Ordering;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::AppState;
use crate::problem::Problem;
use crate::store::StoreError;
use crate::telemetry::Scrape;
pub use report::Report;
use report::{Totals, now_ms};

mod report;

/// How often a replica publishes its report.
pub const REPORT_EVERY: Duration = Duration::from_millis(500);

/// A report older than this is a replica that stopped.
const FRESH_FOR: Duration = Duration::from_secs(5);

/// A report older than this is deleted when a replica starts: its replica stopped long ago
/// (each start publishes under a new address; the store would keep them all).
pub const FORGOTTEN_AFTER: Duration = Duration::from_secs(60);

/// How many coupons the page shows at most; it says how many more there are.
const COUPONS_SHOWN: usize = 60;

/// `GET /`: the page.
pub async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

/// `GET /favicon.ico` (browsers ask for it whatever the page says) and `GET /favicon.svg`: a
/// padlock.
pub async fn icon() -> impl IntoResponse {
    let headers = [
        (header::CONTENT_TYPE, "image/svg+xml"),
        (header::CACHE_CONTROL, "max-age=86400"),
    ];
    (headers, include_str!("icon.svg"))
}

/// `GET /dashboard/stats`: every fresh replica report and the coupons they name.
pub async fn stats(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    let now = now_ms();
    let mut replicas: Vec<Report> = (published(&state).await?.into_iter())
        .filter(|report| report.age(now) <= FRESH_FOR)
        .collect();
    replicas.sort_by(|a, b| a.replica.cmp(&b.replica));
    let mut ids = state.store.coupon_ids().await?;
    ids.sort_by(|a, b| natural_order(a, b));
    let more = ids.len().saturating_sub(COUPONS_SHOWN);
    let mut coupons = Vec::with_capacity(ids.len() - more);
    for id in &ids[..ids.len() - more] {
        if let Some(summary) = state.store.summary(id).await? {
            coupons.push(json!({
                "id": id,
                "supply": summary.stock.supply,
                "remaining": summary.stock.remaining,
                "claimed": summary.claimed,
                "oversold": (summary.claimed - summary.stock.supply).max(0),
                "duplicate_claims": summary.duplicate_claims,
            }));
        }
    }
    Ok(Json(json!({
        "at_ms": now,
        "locking": state.locking.name(),
        "coupons": coupons,
        "more_coupons": more,
        "replicas": replicas,
    })))
}

/// `a` before `b` as people sort names: runs of digits by their number (`x2` before `x11`),
/// the rest by character.
fn natural_order(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        let (Some(x), Some(y)) = (a.chars().next(), b.chars().next()) else {
            return a.len().cmp(&b.len());
        };
        let order = if x.is_ascii_digit() && y.is_ascii_digit() {
            let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (m, n) = (digits(a), digits(b));
            let (left, right) = (
                a[..m].trim_start_matches('0'),
                b[..n].trim_start_matches('0'),
            );
            let order = (left.len().cmp(&right.len())).then_with(|| left.cmp(right));
            (a, b) = (&a[m..], &b[n..]);
            order
        } else {
            (a, b) = (&a[x.len_utf8()..], &b[y.len_utf8()..]);
            x.cmp(&y)
        };
        if order != Ordering::Equal {
            return order;
        }
    }
}

/// Every replica's report in the store.
async fn published(state: &AppState) -> Result<Vec<Report>, StoreError> {
    Ok((state.store.reports().await?.iter())
        .filter_map(|report| serde_json::from_str::<Report>(report).ok())
        .collect())
}

/// Deletes the reports older than [`FORGOTTEN_AFTER`].
async fn forget_stopped_replicas(state: &AppState) -> Result<(), StoreError> {
    let now = now_ms();
    let stopped: Vec<String> = (published(state).await?.into_iter())
        .filter(|report| report.age(now) > FORGOTTEN_AFTER)
        .map(|report| report.replica)
        .collect();
    state.store.forget_reports(&stopped).await
}

/// Forgets the replicas that stopped long ago, then publishes this replica's report every
/// [`REPORT_EVERY`] until the process ends; a store error is logged and the next report tried.
pub fn spawn_reporter(state: AppState, replica: String) {
    let Some(metrics) = state.metrics.clone() else {
        return;
    };
    tokio::spawn(async move {
        if let Err(error) = forget_stopped_replicas(&state).await {
            tracing::warn!(%error, "cannot forget the replicas that stopped long ago");
        }
        let mut previous = (Totals::default(), Instant::now());
        let mut ticks = tokio::time::interval(REPORT_EVERY);
        loop {
            ticks.tick().await;
            let scrape = Scrape::parse(&metrics.render());
            let totals = Totals::of(&scrape);
            let (then, at) = &previous;
            let report = Report::new(&replica, &scrape, &totals, (then, at.elapsed()));
            previous = (totals, Instant::now());
            let report = serde_json::to_string(&report).unwrap_or_default();
            if let Err(error) = state.store.publish_report(&replica, &report).await {
                tracing::warn!(%error, "cannot publish this replica's dashboard report");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_names_sort_by_their_value() {
        let mut ids = ["x11", "x7", "b", "x007", "a10b", "a9z", "x100", "x"];
        ids.sort_by(|a, b| natural_order(a, b));
        assert_eq!(ids, ["a9z", "a10b", "b", "x", "x7", "x007", "x11", "x100"]);
    }
}
