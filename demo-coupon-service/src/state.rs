//! What the handlers share: the coupon store, how claims are locked, the claim's work.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tower_lock::MemoryBackend;
use tower_lock::backend::any::AnyBackend;

use crate::admin::AdminToken;
use crate::locking::Locking;
use crate::options::LockSettings;
use crate::store::{CouponStore, MemoryStore};

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Where coupons live.
    pub store: CouponStore,
    /// The locker claims are locked with.
    pub locking: Locking,
    /// The simulated work inside a claim.
    pub work: Duration,
    /// How claims are locked.
    pub lock: LockSettings,
    /// Whether claims and transfers retry on a version check instead of locking.
    pub optimistic: bool,
    /// The metrics recorder whose records `GET /metrics` serves (none: answered 404).
    pub metrics: Option<PrometheusHandle>,
    /// The token the operator's routes ask for (none: they are not served).
    pub admin_token: Option<AdminToken>,
}

impl AppState {
    /// The embedded mode: coupons and locks in this process (`lock: false` for the control).
    ///
    /// # Errors
    ///
    /// One line naming the lock setting refused and what would work.
    pub fn embedded(work: Duration, settings: LockSettings, lock: bool) -> Result<Self, String> {
        let locking = match lock {
            true => Locking::every_shape(AnyBackend::from(MemoryBackend::new()), &settings)?,
            false => Locking::Off,
        };
        Ok(Self {
            store: CouponStore::Memory(MemoryStore::default()),
            locking,
            work,
            lock: settings,
            optimistic: false,
            metrics: None,
            admin_token: None,
        })
    }

    /// This state recording into `metrics`, served at `GET /metrics` and reported to the
    /// dashboard.
    pub fn with_metrics(self, metrics: PrometheusHandle) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// This state serving the operator's routes to requests with `token`.
    pub fn with_admin_token(self, token: AdminToken) -> Self {
        Self {
            admin_token: Some(token),
            ..self
        }
    }

    /// Does the claim's simulated business work: sleeps `work`. Zero work takes no time at all
    /// (a zero-length sleep would still wait for the timer's next tick, about a millisecond).
    pub(crate) async fn simulate_work(&self) {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
    }
}
