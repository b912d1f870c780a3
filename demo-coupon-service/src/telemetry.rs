//! The demo's metrics: tower-lock's and its own answers, recorded by the Prometheus exporter,
//! served at `GET /metrics` and read back for the dashboard.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::AppState;

/// Every answer the service gives (counter; labels `route`, the matched pattern, and `status`).
pub const RESPONSES_TOTAL: &str = "demo_http_responses_total";

/// The buckets (seconds) of tower-lock's histograms: from half a millisecond to ten seconds, so
/// that replicas' time to lock adds up across them (a summary's quantiles would not).
pub const LOCK_SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The process's Prometheus recorder, tower-lock's durations as histograms with
/// [`LOCK_SECONDS_BUCKETS`]: installed as the global recorder the first time.
///
/// # Panics
///
/// If another global recorder was installed before (this process has one place that does).
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Prefix("tower_lock_".into()), LOCK_SECONDS_BUCKETS)
                .and_then(PrometheusBuilder::install_recorder)
                .expect("buckets are set, and no other metrics recorder is in the demo");
            tower_lock::telemetry::describe_metrics();
            metrics::describe_counter!(RESPONSES_TOTAL, "Answers by route and status");
            handle
        })
        .clone()
}

/// `GET /metrics`: every metric in the Prometheus text format; 404 when this app records none
/// (built for a test without [`AppState::with_metrics`]).
pub async fn metrics(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => crate::problem::Problem::NoSuchRoute.into_response(),
    }
}

/// Counts every answer by route and status.
pub async fn count_responses(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(RESPONSES_TOTAL, "route" => route, "status" => status).increment(1);
    response
}

/// One metric series read back from the text format: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The labels, by name.
    pub labels: HashMap<String, String>,
    /// The value.
    pub value: f64,
}

/// A scrape in the Prometheus text format, by metric name (summaries' `_sum` and `_count`
/// under their own names).
#[derive(Debug, Default, Clone)]
pub struct Scrape(HashMap<String, Vec<Series>>);

impl Scrape {
    /// Reads `text` (what `/metrics` answers); lines it cannot read are skipped.
    pub fn parse(text: &str) -> Self {
        let mut metrics: HashMap<String, Vec<Series>> = HashMap::new();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, parse_labels(labels.trim_end_matches('}'))),
                None => (series, HashMap::new()),
            };
            let series = Series { labels, value };
            metrics.entry(name.to_owned()).or_default().push(series);
        }
        Self(metrics)
    }

    /// The series of `name` whose labels include every one of `labels`.
    pub fn series<'a>(
        &'a self,
        name: &str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Series> {
        (self.0.get(name).into_iter().flatten()).filter(move |series| {
            (labels.iter()).all(|(key, value)| series.labels.get(*key).is_some_and(|v| v == value))
        })
    }

    /// The sum of the series of `name` with `labels`: 0 when there are none.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name, labels).map(|series| series.value).sum()
    }

    /// The largest value among the series of `name` with `labels`, if any.
    pub fn max(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.series(name, labels)
            .map(|series| series.value)
            .reduce(f64::max)
    }

    /// The histogram `name` with `labels`, summed over its other labels: its cumulative
    /// counts by upper bound (`le`), in increasing order, `+Inf` last.
    pub fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> Buckets {
        let mut counts: Vec<(f64, f64)> = Vec::new();
        for series in self.series(&format!("{name}_bucket"), labels) {
            let Some(bound) = series
                .labels
                .get("le")
                .and_then(|le| le.parse::<f64>().ok())
            else {
                continue;
            };
            match counts.iter_mut().find(|(known, _)| *known == bound) {
                Some((_, count)) => *count += series.value,
                None => counts.push((bound, series.value)),
            }
        }
        counts.sort_by(|a, b| a.0.total_cmp(&b.0));
        Buckets(counts)
    }
}

/// A histogram's cumulative counts by upper bound, in increasing order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Buckets(Vec<(f64, f64)>);

impl Buckets {
    /// What was counted since `earlier`, a reading of the same histogram.
    pub fn since(&self, earlier: &Self) -> Self {
        let before = |bound: f64| {
            (earlier.0.iter())
                .find(|(known, _)| *known == bound)
                .map_or(0.0, |(_, count)| *count)
        };
        Self(
            (self.0.iter())
                .map(|&(bound, count)| (bound, (count - before(bound)).max(0.0)))
                .collect(),
        )
    }

    /// The `q` quantile (0 to 1), interpolated within its bucket as Prometheus's
    /// `histogram_quantile` does; `None` when nothing was counted. One in the `+Inf` bucket
    /// is reported as the largest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.0.last().map(|(_, count)| *count)?;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut lower = (0.0, 0.0);
        for &(bound, count) in &self.0 {
            if count >= rank {
                if bound.is_infinite() {
                    return Some(lower.0);
                }
                let share = if count > lower.1 {
                    (rank - lower.1) / (count - lower.1)
                } else {
                    1.0
                };
                return Some(lower.0 + (bound - lower.0) * share);
            }
            lower = (bound, count);
        }
        Some(lower.0)
    }
}

/// `a="1",b="x\"y"` as a map.
fn parse_labels(text: &str) -> HashMap<String, String> {
    let mut labels = HashMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = at + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        labels.insert(key.trim_start_matches(',').to_owned(), value);
        rest = &after[end..];
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_is_read_back_by_name_and_labels() {
        let scrape = Scrape::parse(
            "# TYPE t counter\n\
             t{route=\"/a/{id}\",status=\"201\"} 3\n\
             t{route=\"/a/{id}\",status=\"409\"} 2\n\
             q{quantile=\"0.5\",x=\"a\\\"b\"} 0.25\n\
             g 7\n",
        );
        assert_eq!(scrape.sum("t", &[("route", "/a/{id}")]), 5.0);
        assert_eq!(scrape.sum("t", &[("status", "409")]), 2.0);
        assert_eq!(scrape.max("q", &[("x", "a\"b")]), Some(0.25));
        assert_eq!(scrape.sum("g", &[]), 7.0);
        assert_eq!(scrape.max("missing", &[]), None);
    }

    #[test]
    fn a_quantile_is_read_off_the_buckets_counted_in_between() {
        let scrape = |counts: [u32; 4]| {
            let bounds = ["0.001", "0.01", "0.1", "+Inf"];
            let lines: Vec<String> = (bounds.iter().zip(counts))
                .map(|(le, count)| format!("h_bucket{{o=\"a\",le=\"{le}\"}} {count}"))
                .collect();
            Scrape::parse(&lines.join("\n")).buckets("h", &[("o", "a")])
        };
        let (before, after) = (scrape([10, 10, 10, 10]), scrape([10, 20, 30, 30]));
        let window = after.since(&before);
        let close =
            |got: Option<f64>, expected: f64| got.is_some_and(|got| (got - expected).abs() < 1e-9);
        assert!(
            close(window.quantile(0.5), 0.01),
            "half of the 20 new ones by 10 ms"
        );
        assert!(
            close(window.quantile(0.75), 0.055),
            "the middle of the 10 ms – 100 ms bucket"
        );
        assert_eq!(
            before.since(&before).quantile(0.5),
            None,
            "nothing counted in between"
        );
        assert_eq!(
            scrape([0, 0, 0, 4]).quantile(0.99),
            Some(0.1),
            "past the last finite bound"
        );
    }
}
