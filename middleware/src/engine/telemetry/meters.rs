//! The metric handles of a locker: registered with the recorder once per label set (a lock's
//! store, shape and group; a store call's operation and result) the first time each is
//! used, then kept, so that recording is a handle's update — nothing is allocated, and for
//! the locker's own group nothing looked up, per lock (without a recorder the handles do
//! nothing). No clock is read for them but when an acquisition starts and ends.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label, SharedString, counter, gauge, histogram};
use tokio::time::error::Elapsed;
use tokio::time::timeout;

use super::Metric;
use crate::backend::{BackendError, Hold};

/// The group of locks whose metrics are not grouped otherwise.
const DEFAULT_GROUP: &str = "default";

/// What became of a request for a lock, or of a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    WaitTimedOut,
    StoreUnavailable,
    Cancelled,
    InvalidKey,
    NotReentrant,
    LeaseLost,
    FencedWriteRefused,
}

const OUTCOMES: usize = 9;

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Busy => "busy",
            Self::WaitTimedOut => "wait_timed_out",
            Self::StoreUnavailable => "store_unavailable",
            Self::Cancelled => "cancelled",
            Self::InvalidKey => "invalid_key",
            Self::NotReentrant => "not_reentrant",
            Self::LeaseLost => "lease_lost",
            Self::FencedWriteRefused => "fenced_write_refused",
        }
    }
}

/// A lock's shape, as the `shape` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Mutex,
    Read,
    Write,
    Permit,
    /// Several keys at once.
    Many,
}

const SHAPES: usize = 5;

impl Shape {
    /// The shape of a lock of `names` names held as `hold`.
    pub(crate) fn of(hold: Hold, names: usize) -> Self {
        match hold {
            _ if names > 1 => Self::Many,
            Hold::Mutex => Self::Mutex,
            Hold::Read => Self::Read,
            Hold::Write => Self::Write,
            Hold::Permit { .. } => Self::Permit,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::Read => "read",
            Self::Write => "write",
            Self::Permit => "permit",
            Self::Many => "many",
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

/// How a store call ended.
#[derive(Clone, Copy, Debug)]
enum CallResult {
    Ok,
    Error,
    Timeout,
}

/// A renewal's result.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Renewal {
    Ok,
    /// An error or a timeout: retried.
    Failed,
    /// The store no longer held the lock.
    Refused,
}

/// Every metric handle of one locker.
#[derive(Debug)]
pub(crate) struct Instruments {
    backend: &'static str,
    /// The group chosen for the locker, if one was.
    chosen: Option<SharedString>,
    store: Arc<StoreMeters>,
    /// Per shape: the meters of the locker's own group (the chosen one, else `default`).
    own: [OnceLock<Meters>; SHAPES],
    /// Per route, per shape: the meters of a route's group (no group chosen).
    routes: RwLock<HashMap<Box<str>, [Option<Meters>; SHAPES]>>,
}

impl Instruments {
    /// The instruments of a locker on a store of kind `backend`, in group `chosen` if set.
    pub(crate) fn new(backend: &'static str, chosen: Option<SharedString>) -> Self {
        Self {
            backend,
            chosen,
            store: Arc::new(StoreMeters {
                backend,
                calls: Default::default(),
            }),
            own: Default::default(),
            routes: RwLock::default(),
        }
    }

    /// The meters of a lock of `shape`: in the locker's group when one was chosen, else in
    /// `route`'s, else in `default`.
    pub(crate) fn meters(&self, shape: Shape, route: Option<&str>) -> Meters {
        match route {
            Some(route) if self.chosen.is_none() => self.route_meters(shape, route),
            _ => {
                let own = &self.own[shape as usize];
                let group =
                    || (self.chosen.clone()).unwrap_or(SharedString::const_str(DEFAULT_GROUP));
                own.get_or_init(|| self.new_meters(shape, group())).clone()
            }
        }
    }

    fn route_meters(&self, shape: Shape, route: &str) -> Meters {
        let known = self.routes.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(meters) = known
            .get(route)
            .and_then(|shapes| shapes[shape as usize].as_ref())
        {
            return meters.clone();
        }
        drop(known);
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        let shapes = routes.entry(route.into()).or_default();
        let group = || SharedString::from(route.to_owned());
        (shapes[shape as usize].get_or_insert_with(|| self.new_meters(shape, group()))).clone()
    }

    fn new_meters(&self, shape: Shape, group: SharedString) -> Meters {
        Meters {
            lock: Arc::new(LockMeters {
                backend: self.backend,
                shape,
                group,
                outcomes: Default::default(),
                acquire: Default::default(),
                wait: Default::default(),
                renewals: Default::default(),
                hold: OnceLock::new(),
                held: OnceLock::new(),
                waiters: OnceLock::new(),
            }),
            store: Arc::clone(&self.store),
        }
    }
}

#[derive(Debug)]
struct StoreMeters {
    backend: &'static str,
    /// Per operation, per result.
    calls: [[OnceLock<Counter>; 3]; 3],
}

#[derive(Debug)]
struct LockMeters {
    backend: &'static str,
    shape: Shape,
    group: SharedString,
    outcomes: [OnceLock<Counter>; OUTCOMES],
    acquire: [OnceLock<Histogram>; OUTCOMES],
    wait: [OnceLock<Histogram>; OUTCOMES],
    renewals: [OnceLock<Counter>; 3],
    hold: OnceLock<Histogram>,
    held: OnceLock<Gauge>,
    waiters: OnceLock<Gauge>,
}

impl LockMeters {
    /// The lock's labels, and `extra`.
    fn labels(&self, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
        let mut labels = vec![
            Label::from_static_parts("backend", self.backend),
            Label::from_static_parts("shape", self.shape.as_str()),
            Label::new("group", self.group.clone()),
        ];
        labels.extend(extra.map(|(key, value)| Label::from_static_parts(key, value)));
        labels
    }

    fn by_outcome(&self, outcome: Outcome) -> Vec<Label> {
        self.labels(Some(("outcome", outcome.as_str())))
    }
}

/// The metric handles of one lock (its store, shape and group), and of its store's calls.
#[derive(Clone, Debug)]
pub(crate) struct Meters {
    lock: Arc<LockMeters>,
    store: Arc<StoreMeters>,
}

impl Meters {
    pub(crate) fn shape(&self) -> &'static str {
        self.lock.shape.as_str()
    }

    /// One more request or held lock ended as `outcome`.
    pub(crate) fn count(&self, outcome: Outcome) {
        let lock = &self.lock;
        let slot = &lock.outcomes[outcome as usize];
        (slot.get_or_init(|| counter!(Metric::OutcomesTotal.name(), lock.by_outcome(outcome))))
            .increment(1);
    }

    /// An acquisition answered `outcome` after `took`, of which it waited `waited`.
    pub(crate) fn answered(&self, outcome: Outcome, took: Duration, waited: Option<Duration>) {
        let lock = &self.lock;
        let index = outcome as usize;
        if let Some(waited) = waited {
            let wait = &lock.wait[index];
            (wait.get_or_init(|| histogram!(Metric::WaitSeconds.name(), lock.by_outcome(outcome))))
                .record(waited);
        }
        let acquire = &lock.acquire[index];
        (acquire
            .get_or_init(|| histogram!(Metric::AcquireSeconds.name(), lock.by_outcome(outcome))))
        .record(took);
        self.count(outcome);
    }

    fn held(&self) -> &Gauge {
        let lock = &self.lock;
        lock.held
            .get_or_init(|| gauge!(Metric::Held.name(), lock.labels(None)))
    }

    /// A lock was taken.
    pub(crate) fn taken(&self) {
        self.held().increment(1.0);
    }

    /// A lock was given back after being held `held` (also when dropped or lost).
    pub(crate) fn released(&self, held: Duration) {
        let lock = &self.lock;
        (lock
            .hold
            .get_or_init(|| histogram!(Metric::HoldSeconds.name(), lock.labels(None))))
        .record(held);
        self.held().decrement(1.0);
    }

    /// A caller started (`+1.0`) or stopped (`-1.0`) waiting.
    pub(crate) fn waiters(&self, change: f64) {
        let lock = &self.lock;
        (lock
            .waiters
            .get_or_init(|| gauge!(Metric::Waiters.name(), lock.labels(None))))
        .increment(change);
    }

    /// A renewal ended as `renewal`.
    pub(crate) fn renewal(&self, renewal: Renewal) {
        let result = match renewal {
            Renewal::Ok => "ok",
            Renewal::Failed => "failed",
            Renewal::Refused => "refused",
        };
        let lock = &self.lock;
        let slot = &lock.renewals[renewal as usize];
        let labels = || lock.labels(Some(("result", result)));
        (slot.get_or_init(|| counter!(Metric::RenewalsTotal.name(), labels()))).increment(1);
    }

    /// Runs the store call `call` under `limit`, counting how it ended.
    pub(crate) async fn store_call<T>(
        &self,
        op: StoreOp,
        limit: Duration,
        call: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<Result<T, BackendError>, Elapsed> {
        let answer = timeout(limit, call).await;
        let result = match &answer {
            Ok(Ok(_)) => CallResult::Ok,
            Ok(Err(_)) => CallResult::Error,
            Err(_) => CallResult::Timeout,
        };
        self.count_store_call(op, result);
        answer
    }

    fn count_store_call(&self, op: StoreOp, result: CallResult) {
        let store = &self.store;
        let slot = &store.calls[op as usize][result as usize];
        let register = || {
            let op = match op {
                StoreOp::Acquire => "acquire",
                StoreOp::Extend => "extend",
                StoreOp::Release => "release",
            };
            let result = match result {
                CallResult::Ok => "ok",
                CallResult::Error => "error",
                CallResult::Timeout => "timeout",
            };
            let labels = [("backend", store.backend), ("op", op), ("result", result)];
            counter!(Metric::StoreCallsTotal.name(), &labels)
        };
        slot.get_or_init(register).increment(1);
    }
}
