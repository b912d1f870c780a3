//! What the engine reports: metrics through the [`metrics`] facade (install any exporter — the
//! demo uses `metrics-exporter-prometheus`) and a [`tracing`] span per acquisition.
//!
//! Every backend is instrumented once, here in the engine. Without a recorder installed the
//! metrics cost a few label values per call; without a subscriber interested in `DEBUG`, the
//! span costs nothing.
//!
//! # Metrics
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `tower_lock_acquire_seconds` | histogram | `backend`, `shape`, `group`, `outcome` | from asking for a lock to the answer, waiting included |
//! | `tower_lock_wait_seconds` | histogram | `backend`, `shape`, `group`, `outcome` | from the first busy answer to the end of the wait (only acquisitions that waited) |
//! | `tower_lock_hold_seconds` | histogram | `backend`, `shape`, `group` | from taking a lock to giving it back |
//! | `tower_lock_outcomes_total` | counter | `backend`, `shape`, `group`, `outcome` | what became of each request for a lock, and of each held lock |
//! | `tower_lock_renewals_total` | counter | `backend`, `shape`, `group`, `result` | lease renewals: `ok`, `failed` (error or timeout; retried), `refused` (the store no longer held it) |
//! | `tower_lock_held` | gauge | `backend`, `shape`, `group` | locks held right now |
//! | `tower_lock_waiters` | gauge | `backend`, `shape`, `group` | callers waiting right now (after a busy answer, or lined up behind a waiter of their process) |
//! | `tower_lock_store_call_seconds` | histogram | `backend`, `op`, `result` | the engine's calls to the store: `op` = `acquire` (one per attempt), `extend`, `release`; `result` = `ok` (busy included), `error`, `timeout` |
//!
//! Label values, all bounded:
//!
//! * `backend`: [`LockBackend::store_kind`](crate::LockBackend::store_kind) — `memory`,
//!   `redis`, `postgres`, `postgres-advisory`, `mysql`, `mysql-nowait`, `etcd`, `zookeeper`.
//! * `shape`: `mutex`, `read`, `write`, `permit`, `many` (several keys at once).
//! * `group`: [`LockerBuilder::metrics_group`](crate::LockerBuilder::metrics_group) when set;
//!   else, behind the HTTP layer with axum, the route's pattern (`/coupons/{id}/claim`); else
//!   `default`. Never the key: a key per user or per order would make a series per key.
//! * `outcome`: `acquired`; `busy` (refused at once: the reject policy); `wait_timed_out`;
//!   `store_unavailable` (error or store timeout); `invalid_key`; `not_reentrant` (an upgrade
//!   or more keys asked under a held lock); `lease_lost` (a held lock's lease was lost);
//!   `fenced_write_refused` (the application's store refused a write with this lock's fence,
//!   reported by [`LockGuard::report_fenced_write_refused`](crate::LockGuard::report_fenced_write_refused)).
//!   A request covered by a lock its caller holds already asks nothing and is not counted.
//!
//! Call [`describe_metrics`] once after installing a recorder to give each metric its help text
//! and unit.
//!
//! # Tracing
//!
//! Each acquisition runs in a `DEBUG` span named `lock` with the fields `key` (the keys,
//! joined with `, `), `shape`, `wait` (`reject`, `notified`, `fair`, `polling`), and, once
//! answered, `attempts`, `outcome` and `fence`. Renewal failures, lost leases and store errors
//! are `WARN` events. No field carries a store address or credentials.

mod labels;
mod tally;

pub(crate) use labels::{DEFAULT_GROUP, Labels, Outcome, StoreOp};
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
/// The engine's calls to the store (histogram, seconds).
pub const STORE_CALL_SECONDS: &str = "tower_lock_store_call_seconds";

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
    describe_histogram!(
        STORE_CALL_SECONDS,
        Unit::Seconds,
        "The engine's calls to the lock store, by operation and result"
    );
}
