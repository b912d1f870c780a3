//! A replica's report for the dashboard: what it answered and how its locks fared over the
//! last interval, read off its own metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tower_lock::telemetry::Metric;

use crate::telemetry::{Buckets, RESPONSES_TOTAL, Scrape};

/// The claim route's pattern, as the `route` label of the demo's answers.
pub(crate) const CLAIM_ROUTE: &str = "/coupons/{id}/claim";

/// Running totals read off one scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Totals {
    /// Claim answers by status.
    claims: BTreeMap<String, f64>,
    acquired: f64,
    rejected: f64,
    /// Time to lock of the locks acquired.
    time_to_lock: Buckets,
}

impl Totals {
    pub(crate) fn of(scrape: &Scrape) -> Self {
        let mut claims = BTreeMap::new();
        for series in scrape.series(RESPONSES_TOTAL, &[("route", CLAIM_ROUTE)]) {
            if let Some(status) = series.labels.get("status") {
                *claims.entry(status.clone()).or_insert(0.0) += series.value;
            }
        }
        let outcome = |outcome| scrape.sum(Metric::OutcomesTotal.name(), &[("outcome", outcome)]);
        Self {
            claims,
            acquired: outcome("acquired"),
            rejected: outcome("busy") + outcome("wait_timed_out"),
            time_to_lock: scrape.buckets(Metric::AcquireSeconds.name(), &[("outcome", "acquired")]),
        }
    }

    fn claims(&self) -> f64 {
        self.claims.values().sum()
    }
}

/// One replica's latest report, as published in the coupon store.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// Which replica (its listening address).
    pub replica: String,
    /// When it was made, in ms since the Unix epoch.
    pub at_ms: u64,
    /// Claim answers by status, since the replica started.
    pub claims: BTreeMap<String, f64>,
    /// Claims answered per second over the last interval.
    pub claims_per_s: f64,
    /// Of the locks asked for over the last interval, the share refused (busy or wait timed out).
    pub rejection_ratio: f64,
    /// Time to lock (acquired), median and 99th percentile, in ms, over the recent window.
    pub lock_wait_p50_ms: Option<f64>,
    /// See `lock_wait_p50_ms`.
    pub lock_wait_p99_ms: Option<f64>,
    /// Locks held right now.
    pub held: f64,
    /// Callers waiting for a lock right now.
    pub waiters: f64,
}

impl Report {
    /// The report of `replica` from `scrape`, with rates against `previous` totals taken
    /// `interval` earlier.
    pub(crate) fn new(
        replica: &str,
        scrape: &Scrape,
        now: &Totals,
        (previous, interval): (&Totals, Duration),
    ) -> Self {
        let seconds = interval.as_secs_f64().max(1e-3);
        let asked = (now.acquired - previous.acquired) + (now.rejected - previous.rejected);
        let rejected = now.rejected - previous.rejected;
        let time_to_lock = now.time_to_lock.since(&previous.time_to_lock);
        let quantile = |q| time_to_lock.quantile(q).map(|seconds| seconds * 1000.0);
        Self {
            replica: replica.to_owned(),
            at_ms: now_ms(),
            claims: now.claims.clone(),
            claims_per_s: (now.claims() - previous.claims()) / seconds,
            rejection_ratio: if asked > 0.0 { rejected / asked } else { 0.0 },
            lock_wait_p50_ms: quantile(0.5),
            lock_wait_p99_ms: quantile(0.99),
            // `+ 0.0`: a gauge back at zero may sum to -0.0, which JSON would show as such.
            held: scrape.sum(Metric::Held.name(), &[]) + 0.0,
            waiters: scrape.sum(Metric::Waiters.name(), &[]) + 0.0,
        }
    }

    /// How old the report is at `now_ms` (ms since the Unix epoch).
    pub(crate) fn age(&self, now_ms: u64) -> Duration {
        Duration::from_millis(now_ms.saturating_sub(self.at_ms))
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_quantiles_are_taken_over_the_interval_in_ms() {
        let before = Scrape::parse(
            "demo_http_responses_total{route=\"/coupons/{id}/claim\",status=\"201\"} 10\n\
             tower_lock_outcomes_total{outcome=\"acquired\",group=\"g\"} 10\n",
        );
        let after = Scrape::parse(
            "demo_http_responses_total{route=\"/coupons/{id}/claim\",status=\"201\"} 30\n\
             demo_http_responses_total{route=\"/coupons/{id}/claim\",status=\"409\"} 20\n\
             demo_http_responses_total{route=\"/healthz\",status=\"200\"} 99\n\
             tower_lock_outcomes_total{outcome=\"acquired\",group=\"g\"} 40\n\
             tower_lock_outcomes_total{outcome=\"wait_timed_out\",group=\"g\"} 10\n\
             tower_lock_acquire_seconds_bucket{outcome=\"acquired\",le=\"0.001\"} 0\n\
             tower_lock_acquire_seconds_bucket{outcome=\"acquired\",le=\"0.003\"} 20\n\
             tower_lock_acquire_seconds_bucket{outcome=\"acquired\",le=\"0.5\"} 30\n\
             tower_lock_acquire_seconds_bucket{outcome=\"acquired\",le=\"+Inf\"} 30\n\
             tower_lock_held{group=\"g\"} 2\n\
             tower_lock_waiters{group=\"g\"} 5\n",
        );
        let (then, now) = (Totals::of(&before), Totals::of(&after));
        let report = Report::new("r1", &after, &now, (&then, Duration::from_secs(2)));
        assert_eq!(report.claims_per_s, 20.0);
        assert_eq!(report.rejection_ratio, 0.25);
        // 20 of 30 within (1 ms, 3 ms], 10 within (3 ms, 500 ms], interpolated as Prometheus does.
        let close =
            |ms: Option<f64>, expected: f64| ms.is_some_and(|ms| (ms - expected).abs() < 1e-6);
        assert!(
            close(report.lock_wait_p50_ms, 2.5),
            "{:?}",
            report.lock_wait_p50_ms
        );
        assert!(
            close(report.lock_wait_p99_ms, 485.09),
            "{:?}",
            report.lock_wait_p99_ms
        );
        assert_eq!((report.held, report.waiters), (2.0, 5.0));
        assert_eq!(report.claims.get("409"), Some(&20.0));
    }

    #[test]
    fn a_gauge_back_at_zero_reads_zero_not_minus_zero() {
        let scrape = Scrape::parse("tower_lock_held{group=\"g\"} -0\ntower_lock_waiters -0\n");
        let totals = Totals::of(&scrape);
        let report = Report::new("r1", &scrape, &totals, (&totals, Duration::from_secs(1)));
        let json = serde_json::to_value(&report).expect("a report is JSON");
        assert_eq!(
            (json["held"].to_string(), json["waiters"].to_string()),
            ("0.0".into(), "0.0".into())
        );
    }
}
