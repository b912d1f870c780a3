//! The live dashboard at `GET /`: every coupon's stock, claims and oversell, and each
//! replica's answers and locks, updated twice a second.
//!
//! Each replica reads its own metrics every [`REPORT_EVERY`] and publishes a [`Report`] in the
//! coupon store; the page polls `GET /dashboard/stats`, which gathers the fresh reports of
//! every replica sharing the store and the summary of every coupon they name.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::Html;
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

/// How many coupons a replica names in its report, latest first.
const COUPONS_KEPT: usize = 8;

/// The coupons created in this replica lately, latest first.
#[derive(Clone, Debug, Default)]
pub struct RecentCoupons(Arc<Mutex<VecDeque<String>>>);

impl RecentCoupons {
    /// Coupon `id` was created or reset.
    pub fn touched(&self, id: &str) {
        let mut recent = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        recent.retain(|known| known != id);
        recent.push_front(id.to_owned());
        recent.truncate(COUPONS_KEPT);
    }

    fn list(&self) -> Vec<String> {
        let recent = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        recent.iter().cloned().collect()
    }
}

/// `GET /`: the page.
pub async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

/// `GET /dashboard/stats`: every fresh replica report and the coupons they name.
pub async fn stats(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    let now = now_ms();
    let mut replicas: Vec<Report> = (published(&state).await?.into_iter())
        .filter(|report| report.age(now) <= FRESH_FOR)
        .collect();
    replicas.sort_by(|a, b| a.replica.cmp(&b.replica));
    let ids: BTreeSet<&str> = (replicas.iter())
        .flat_map(|report| report.coupons.iter().map(String::as_str))
        .collect();
    let mut coupons = Vec::with_capacity(ids.len());
    for id in ids {
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
        "replicas": replicas,
    })))
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
            let coupons = state.recent.list();
            let report = Report::new((&replica, coupons), &scrape, &totals, (then, at.elapsed()));
            previous = (totals, Instant::now());
            let report = serde_json::to_string(&report).unwrap_or_default();
            if let Err(error) = state.store.publish_report(&replica, &report).await {
                tracing::warn!(%error, "cannot publish this replica's dashboard report");
            }
        }
    });
}
