//! What the engine reports: metrics through the [`metrics`] facade and a [`tracing`] span per
//! acquisition. The table of every metric, its labels and the span's fields (this page is
//! `middleware/docs/OBSERVABILITY.md`):
//!
#![doc = include_str!("../../../docs/OBSERVABILITY.md")]

mod meters;
mod tally;

pub(crate) use meters::{Instruments, Meters, Outcome, Renewal, Shape, StoreOp};
pub(crate) use tally::Tally;

/// One of tower-lock's metrics: its name in the recorder is [`name`](Self::name).
///
/// # Example
///
/// ```
/// use tower_lock::telemetry::Metric;
///
/// assert_eq!(Metric::WaitSeconds.name(), "tower_lock_wait_seconds");
/// assert!(Metric::ALL.iter().all(|metric| metric.name().starts_with("tower_lock_")));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Metric {
    /// From asking for a lock to the answer (histogram, seconds).
    AcquireSeconds,
    /// From the first busy answer to the end of the wait (histogram, seconds).
    WaitSeconds,
    /// From taking a lock to giving it back (histogram, seconds).
    HoldSeconds,
    /// What became of each request for a lock and of each held lock (counter).
    OutcomesTotal,
    /// Lease renewals by result (counter).
    RenewalsTotal,
    /// Locks held right now (gauge).
    Held,
    /// Callers waiting for a lock right now (gauge).
    Waiters,
    /// The engine's calls to the store, by operation and result (counter).
    StoreCallsTotal,
}

impl Metric {
    /// Every metric tower-lock records.
    pub const ALL: [Self; 8] = [
        Self::AcquireSeconds,
        Self::WaitSeconds,
        Self::HoldSeconds,
        Self::OutcomesTotal,
        Self::RenewalsTotal,
        Self::Held,
        Self::Waiters,
        Self::StoreCallsTotal,
    ];

    /// The metric's name, as exporters show it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::AcquireSeconds => "tower_lock_acquire_seconds",
            Self::WaitSeconds => "tower_lock_wait_seconds",
            Self::HoldSeconds => "tower_lock_hold_seconds",
            Self::OutcomesTotal => "tower_lock_outcomes_total",
            Self::RenewalsTotal => "tower_lock_renewals_total",
            Self::Held => "tower_lock_held",
            Self::Waiters => "tower_lock_waiters",
            Self::StoreCallsTotal => "tower_lock_store_calls_total",
        }
    }

    /// The help text an exporter prints.
    fn help(self) -> &'static str {
        match self {
            Self::AcquireSeconds => "From asking for a lock to the answer, waiting included",
            Self::WaitSeconds => "From the first busy answer to the end of the wait",
            Self::HoldSeconds => "From taking a lock to giving it back",
            Self::OutcomesTotal => "What became of each request for a lock and of each held lock",
            Self::RenewalsTotal => "Lease renewals: ok, failed, refused",
            Self::Held => "Locks held right now",
            Self::Waiters => "Callers waiting for a lock right now",
            Self::StoreCallsTotal => {
                "The engine's calls to the lock store, by operation and result"
            }
        }
    }
}

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
    for metric in Metric::ALL {
        let (name, help) = (metric.name(), metric.help());
        match metric {
            Metric::AcquireSeconds | Metric::WaitSeconds | Metric::HoldSeconds => {
                describe_histogram!(name, Unit::Seconds, help);
            }
            Metric::OutcomesTotal | Metric::RenewalsTotal | Metric::StoreCallsTotal => {
                describe_counter!(name, help);
            }
            Metric::Held | Metric::Waiters => describe_gauge!(name, help),
        }
    }
}
