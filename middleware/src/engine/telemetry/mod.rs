//! What the engine reports: metrics through the [`metrics`] facade and a [`tracing`] span per
//! acquisition. The table of every metric, its labels and the span's fields (this page is
//! `docs/OBSERVABILITY.md`):
//!
#![doc = include_str!("../../../../docs/OBSERVABILITY.md")]

mod meters;
mod tally;

pub(crate) use meters::{Instruments, Meters, Outcome, Renewal, Shape, StoreOp};
pub(crate) use tally::Tally;

/// From asking for a lock to the answer (histogram, seconds).
pub const ACQUIRE_SECONDS: &str = "tower_lock_acquire_seconds";
/// From the first busy answer to the end of the wait (histogram, seconds).
pub const WAIT_SECONDS: &str = "tower_lock_wait_seconds";
/// From taking a lock to giving it back (histogram, seconds).
pub const HOLD_SECONDS: &str = "tower_lock_hold_seconds";
/// What became of each request for a lock and of each held lock (counter).
pub const OUTCOMES_TOTAL: &str = "tower_lock_outcomes_total";
/// Lease renewals by result (counter).
pub const RENEWALS_TOTAL: &str = "tower_lock_renewals_total";
/// Locks held right now (gauge).
pub const HELD: &str = "tower_lock_held";
/// Callers waiting for a lock right now (gauge).
pub const WAITERS: &str = "tower_lock_waiters";
/// The engine's calls to the store, by operation and result (counter).
pub const STORE_CALLS_TOTAL: &str = "tower_lock_store_calls_total";

/// Gives every metric of tower-lock its unit and help text in the installed recorder (an
/// exporter prints them, Prometheus as `# HELP` lines). Call it once, after installing the
/// recorder; the metrics are recorded without it too.
///
/// # Example
///
/// ```
/// // After, say, `metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()`:
/// tower_lock::telemetry::describe_metrics();
/// ```
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        ACQUIRE_SECONDS,
        Unit::Seconds,
        "From asking for a lock to the answer, waiting included"
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "From the first busy answer to the end of the wait"
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "From taking a lock to giving it back"
    );
    describe_counter!(
        OUTCOMES_TOTAL,
        "What became of each request for a lock and of each held lock"
    );
    describe_counter!(RENEWALS_TOTAL, "Lease renewals: ok, failed, refused");
    describe_gauge!(HELD, "Locks held right now");
    describe_gauge!(WAITERS, "Callers waiting for a lock right now");
    describe_counter!(
        STORE_CALLS_TOTAL,
        "The engine's calls to the lock store, by operation and result"
    );
}
