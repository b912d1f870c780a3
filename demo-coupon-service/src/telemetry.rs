//! The demo's metrics: tower-lock's and its own answers, recorded by the Prometheus exporter,
//! served at `GET /metrics` and read back for the dashboard.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::AppState;

/// Every answer the service gives (counter; labels `route`, the matched pattern, and `status`).
pub const RESPONSES_TOTAL: &str = "demo_http_responses_total";

/// The process's Prometheus recorder: installed as the global recorder the first time.
///
/// # Panics
///
/// If another global recorder was installed before (this process has one place that does).
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .install_recorder()
                .expect("no other metrics recorder in the demo");
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
}
