//! [`LockGuard`]: what the code running under a lock sees of it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::held::{LeaseLost, LocalLease};
use super::names::LockNames;
use super::telemetry::Outcome;
use crate::backend::{FencingToken, Hold};

/// What the code running under a lock sees of it: its keys, the kind of hold, whether the
/// lease is still held, and its fencing tokens.
///
/// Handlers behind a [`LockLayer`](crate::LockLayer) take it as an argument (an axum extractor
/// with the `axum` feature; `Option<LockGuard>` where a request may run unlocked, or
/// `Extension<LockGuard>` from the request's extensions);
/// [`Locker::with_lock`](crate::Locker::with_lock) passes it to its work; a
/// [`HeldLock`](crate::HeldLock) dereferences to it. Clones are cheap and only
/// describe the lock: dropping one never releases anything.
///
/// While the lock is held, its lease is renewed every TTL/3. If a renewal finds the lock taken,
/// or no renewal is confirmed before the lease's local deadline (the store is down, the process
/// was paused), the lease is *lost*: [`is_held`](Self::is_held) turns false and
/// [`lost`](Self::lost) resolves.
///
/// # Example
///
/// ```
/// use axum::{Router, routing::post};
/// use tower_lock::{LockGuard, LockLayer, Locker, MemoryBackend, key::KeyTemplate};
///
/// async fn claim(lock: LockGuard) -> String {
///     // Pass the fence to the store you write to, so a stale holder's writes are refused.
///     let fence = lock.fence().map(|fence| fence.get());
///     format!("holding {} with fence {fence:?}", lock.key())
/// }
///
/// let key = KeyTemplate::parse("coupon:{path id}").unwrap();
/// let app: Router = Router::new()
///     .route("/coupons/{id}/claim", post(claim))
///     .route_layer(LockLayer::new(Locker::new(MemoryBackend::new()), key));
/// ```
#[derive(Clone)]
pub struct LockGuard {
    inner: Arc<GuardInfo>,
}

struct GuardInfo {
    names: LockNames,
    /// One per name, in the same order.
    fences: Vec<Option<FencingToken>>,
    hold: Hold,
    lease: LocalLease,
}

impl LockGuard {
    /// The guard of `names`, held as `hold` with `fences` (one per name).
    pub(crate) fn new(
        names: LockNames,
        (hold, fences): (Hold, Vec<Option<FencingToken>>),
        lease: LocalLease,
    ) -> Self {
        debug_assert_eq!(names.iter().len(), fences.len());
        Self {
            inner: Arc::new(GuardInfo {
                names,
                fences,
                hold,
                lease,
            }),
        }
    }

    /// The key, e.g. `coupon:42` (with several keys, the first).
    pub fn key(&self) -> &str {
        self.keys().next().unwrap_or_default()
    }

    /// Every key held, sorted: one, or several taken together.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.inner.names.keys()
    }

    /// The lock's full name in the store: the prefix and the key, e.g. `lock:coupon:42` (with
    /// several keys, the first).
    pub fn name(&self) -> &str {
        self.inner.names.first()
    }

    /// Every full lock name held, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.inner.names.iter()
    }

    /// What is held: the key alone ([`Hold::Mutex`], or [`Hold::Write`] on a read-write lock), a
    /// share of it ([`Hold::Read`]), or one of its permits ([`Hold::Permit`]).
    pub fn hold(&self) -> Hold {
        self.inner.hold
    }

    /// The fencing token (with several keys, the first key's): strictly larger than that of
    /// every earlier holder of this key. Only exclusive holds (mutex, writer) get one, on
    /// backends that fence.
    ///
    /// A store that remembers the largest token that has read a resource, and refuses writes
    /// carrying a smaller one, cannot be written by a holder whose lease ran out while it was
    /// paused (see [`fencing`](crate::fencing)).
    pub fn fence(&self) -> Option<FencingToken> {
        self.inner.fences.first().copied().flatten()
    }

    /// Every name's fencing token, in the order of [`names`](Self::names).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn fences(&self) -> &[Option<FencingToken>] {
        &self.inner.fences
    }

    /// The fencing token of `key`, one of [`keys`](Self::keys); `None` for another key.
    pub fn fence_of(&self, key: &str) -> Option<FencingToken> {
        let index = self.keys().position(|held| held == key)?;
        self.inner.fences.get(index).copied().flatten()
    }

    /// Whether the lease is still certainly held: not lost, not released, and its local
    /// deadline (last confirmed acquire or renewal + TTL, minus a drift margin) not passed.
    ///
    /// A `true` is no permission to write without a fence: the process can pause right after
    /// asking. Stores that matter should check [`fence`](Self::fence).
    pub fn is_held(&self) -> bool {
        self.inner.lease.is_held()
    }

    /// Resolves when the lease is lost — gone from the store, or its deadline passed
    /// without a confirmed renewal — and says why. It never resolves for a lock its holder
    /// released: race it against the work it protects.
    ///
    /// # Example
    ///
    /// Stop long work when the lock is lost (useful with `OnLost::Continue`):
    ///
    /// ```
    /// use tower_lock::LockGuard;
    ///
    /// async fn export(lock: LockGuard) -> Result<(), String> {
    ///     tokio::select! {
    ///         lost = lock.lost() => Err(format!("stopped: {lost}")),
    ///         () = tokio::time::sleep(std::time::Duration::from_millis(10)) => Ok(()),
    ///     }
    /// }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LeaseLost> + Send + 'static {
        self.inner.lease.lost()
    }

    /// Counts a write that the application's store refused because this lock's fence was
    /// stale (metric `tower_lock_outcomes_total` with `outcome="fenced_write_refused"`, see
    /// [`telemetry`](crate::telemetry)): the store kept out a holder whose lease had run out.
    /// Only the application can tell; call it where the refusal is seen.
    ///
    /// ```
    /// use tower_lock::LockGuard;
    ///
    /// fn save(lock: &LockGuard, accepted_by_store: bool) -> Result<(), &'static str> {
    ///     if !accepted_by_store {
    ///         lock.report_fenced_write_refused();
    ///         return Err("a newer holder wrote first");
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn report_fenced_write_refused(&self) {
        self.inner.lease.meters().count(Outcome::FencedWriteRefused);
        tracing::warn!(lock = self.name(), fence = ?self.fence(), "write refused: stale fence");
    }

    /// Whether `other` describes the same held lock (a clone of this guard).
    pub(crate) fn is_same_lock(&self, other: &LockGuard) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn lease(&self) -> &LocalLease {
        &self.inner.lease
    }

    pub(crate) fn lock_names(&self) -> &LockNames {
        &self.inner.names
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("hold", &self.hold())
            .field("fence", &self.fence())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
