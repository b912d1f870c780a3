//! The labels of one lock's metrics, and the recording of each metric under them.

use std::future::Future;
use std::time::Duration;

use metrics::{Label, SharedString, counter, gauge, histogram};
use tokio::time::error::Elapsed;
use tokio::time::{Instant, timeout};

use super::{
    ACQUIRE_SECONDS, HELD, HOLD_SECONDS, OUTCOMES_TOTAL, RENEWALS_TOTAL, STORE_CALL_SECONDS,
    WAIT_SECONDS, WAITERS,
};
use crate::backend::{BackendError, Hold};

/// The group of locks whose metrics are not grouped otherwise.
pub(crate) const DEFAULT_GROUP: &str = "default";

/// What became of a request for a lock, or of a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    WaitTimedOut,
    StoreUnavailable,
    InvalidKey,
    NotReentrant,
    LeaseLost,
    FencedWriteRefused,
    Cancelled,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Busy => "busy",
            Self::WaitTimedOut => "wait_timed_out",
            Self::StoreUnavailable => "store_unavailable",
            Self::InvalidKey => "invalid_key",
            Self::NotReentrant => "not_reentrant",
            Self::LeaseLost => "lease_lost",
            Self::FencedWriteRefused => "fenced_write_refused",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A call from the engine to the store.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StoreOp {
    Acquire,
    Extend,
    Release,
}

/// The labels every metric of one lock carries: its store, its shape and its group.
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    backend: &'static str,
    shape: &'static str,
    group: SharedString,
}

impl Labels {
    pub(crate) fn new(backend: &'static str, shape: &'static str, group: SharedString) -> Self {
        Self {
            backend,
            shape,
            group,
        }
    }

    /// The shape label of a lock of one name held as `hold`, or of several names (`many`).
    pub(crate) fn shape_of(hold: Hold, names: usize) -> &'static str {
        match hold {
            _ if names > 1 => "many",
            Hold::Mutex => "mutex",
            Hold::Read => "read",
            Hold::Write => "write",
            Hold::Permit { .. } => "permit",
        }
    }

    pub(crate) fn shape(&self) -> &'static str {
        self.shape
    }

    fn lock(&self) -> Vec<Label> {
        self.with(None)
    }

    fn with(&self, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
        let mut labels = Vec::with_capacity(4);
        labels.push(Label::from_static_parts("backend", self.backend));
        labels.push(Label::from_static_parts("shape", self.shape));
        labels.push(Label::new("group", self.group.clone()));
        if let Some((key, value)) = extra {
            labels.push(Label::from_static_parts(key, value));
        }
        labels
    }

    /// One more request or held lock ended as `outcome`.
    pub(crate) fn count(&self, outcome: Outcome) {
        counter!(
            OUTCOMES_TOTAL,
            self.with(Some(("outcome", outcome.as_str())))
        )
        .increment(1);
    }

    /// An acquisition answered `outcome` after `took`, of which it waited `waited`.
    pub(crate) fn answered(&self, outcome: Outcome, took: Duration, waited: Option<Duration>) {
        let labels = self.with(Some(("outcome", outcome.as_str())));
        if let Some(waited) = waited {
            histogram!(WAIT_SECONDS, labels.clone()).record(waited);
        }
        histogram!(ACQUIRE_SECONDS, labels.clone()).record(took);
        counter!(OUTCOMES_TOTAL, labels).increment(1);
    }

    /// A lock was given back after being held `held` (also when dropped or lost).
    pub(crate) fn released(&self, held: Duration) {
        let labels = self.lock();
        histogram!(HOLD_SECONDS, labels.clone()).record(held);
        gauge!(HELD, labels).decrement(1.0);
    }

    /// A lock was taken.
    pub(crate) fn taken(&self) {
        gauge!(HELD, self.lock()).increment(1.0);
    }

    /// A caller started (`+1.0`) or stopped (`-1.0`) waiting.
    pub(crate) fn waiters(&self, change: f64) {
        gauge!(WAITERS, self.lock()).increment(change);
    }

    /// A renewal ended as `result`: `ok`, `failed` or `refused`.
    pub(crate) fn renewal(&self, result: &'static str) {
        counter!(RENEWALS_TOTAL, self.with(Some(("result", result)))).increment(1);
    }

    /// Runs the store call `call` under `limit`, recording how long it took and how it ended.
    pub(crate) async fn store_call<T>(
        &self,
        op: StoreOp,
        limit: Duration,
        call: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<Result<T, BackendError>, Elapsed> {
        let sent = Instant::now();
        let answer = timeout(limit, call).await;
        let result = match &answer {
            Ok(Ok(_)) => "ok",
            Ok(Err(_)) => "error",
            Err(_) => "timeout",
        };
        self.record_store_call(op, result, sent.elapsed());
        answer
    }

    fn record_store_call(&self, op: StoreOp, result: &'static str, took: Duration) {
        let op = match op {
            StoreOp::Acquire => "acquire",
            StoreOp::Extend => "extend",
            StoreOp::Release => "release",
        };
        let labels = [("backend", self.backend), ("op", op), ("result", result)];
        histogram!(STORE_CALL_SECONDS, &labels).record(took);
    }
}
