//! [`LockLayer`]: the builder, and the configuration its services share.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::StatusCode;
use tower_layer::Layer;

use crate::acquire::AcquirePlan;
use crate::key::{DEFAULT_MAX_KEY_LEN, KeyExtractor};
use crate::lease::LeasePlan;
use crate::{Backoff, BusyPolicy, LockBackend, LockMode, LockService, OnLost, WaitMode};

/// Runs each request under a distributed lock on the key its [`KeyExtractor`] finds.
///
/// Defaults: prefix `lock:`, lease TTL 10 s renewed every TTL/3 while the handler runs, abort
/// the handler with 503 if the lease is lost, wait up to 3 s for a busy lock with
/// [`Backoff::default`], answer 409 when still busy, answer 503 when the store does not
/// answer within 1 s (fail closed), keys up to 256 bytes.
///
/// With axum, apply it with `route_layer` (or `Router::layer`) so that path parameters are
/// visible to the extractor; cloning the layer is cheap, as its configuration is shared.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use tower_lock::{LockLayer, MemoryBackend, key::KeyTemplate};
///
/// let lock = LockLayer::new(MemoryBackend::new(), KeyTemplate::parse("coupon:{path id}").unwrap())
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_millis(500));
///
/// let app: Router = Router::new()
///     .route("/coupons/{id}/claim", post(|| async { "claimed" }))
///     .route_layer(lock);
/// ```
pub struct LockLayer<B, K> {
    config: Arc<Config<B, K>>,
}

/// What every [`LockService`] of one layer shares.
pub(crate) struct Config<B, K> {
    pub(crate) backend: Arc<B>,
    pub(crate) extractor: Arc<K>,
    pub(crate) prefix: String,
    pub(crate) max_key_len: usize,
    pub(crate) plan: AcquirePlan,
    pub(crate) mode: LockMode,
    pub(crate) renew: bool,
    pub(crate) on_lost: OnLost,
    pub(crate) fail_open: bool,
    pub(crate) busy_status: StatusCode,
    /// Locks held right now by this layer's services.
    pub(crate) active: Arc<AtomicUsize>,
}

impl<B, K> Config<B, K> {
    pub(crate) fn lease_plan(&self) -> LeasePlan {
        LeasePlan {
            ttl: self.plan.ttl,
            renew: self.renew,
            store_timeout: self.plan.store_timeout,
        }
    }
}

impl<B: LockBackend, K: KeyExtractor> LockLayer<B, K> {
    /// A layer locking in `backend` on the key `extractor` finds, with the defaults above.
    pub fn new(backend: B, extractor: K) -> Self {
        Self {
            config: Arc::new(Config {
                backend: Arc::new(backend),
                extractor: Arc::new(extractor),
                prefix: "lock:".to_owned(),
                max_key_len: DEFAULT_MAX_KEY_LEN,
                plan: AcquirePlan {
                    ttl: Duration::from_secs(10),
                    policy: BusyPolicy::default(),
                    backoff: Backoff::default(),
                    store_timeout: Duration::from_secs(1),
                },
                mode: LockMode::Mutex,
                renew: true,
                on_lost: OnLost::default(),
                fail_open: false,
                busy_status: StatusCode::CONFLICT,
                active: Arc::default(),
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config<B, K>)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Prepended to every key to name the lock in the store (default `lock:`).
    ///
    /// # Panics
    ///
    /// When `prefix` contains `{`, `}` or an ASCII control character.
    pub fn prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        assert!(
            !prefix.contains(['{', '}']) && !prefix.bytes().any(|b| b.is_ascii_control()),
            "a lock prefix must not contain braces or control characters: {prefix:?}"
        );
        self.with(|config| config.prefix = prefix)
    }

    /// How long a lease lasts unless renewed (default 10 s).
    ///
    /// A lock is released as soon as its request finishes, and renewed every TTL/3 while it
    /// runs; the TTL bounds how long a crashed, paused or partitioned holder blocks the key.
    /// Without renewal, choose it longer than your slowest handler.
    ///
    /// # Panics
    ///
    /// When `ttl` is shorter than 10 ms.
    pub fn ttl(self, ttl: Duration) -> Self {
        assert!(
            ttl >= Duration::from_millis(10),
            "a lease TTL needs at least 10 ms"
        );
        self.with(|config| config.plan.ttl = ttl)
    }

    /// Read-write mode: GET, HEAD and OPTIONS take a shared read lock, other methods an
    /// exclusive write lock. Many readers hold the key at once; a writer holds it alone, and
    /// once a writer waits, new readers queue behind it. Each reader's lease expires on its
    /// own, so a crashed reader blocks writers for at most its TTL.
    pub fn read_write(self) -> Self {
        self.with(|config| config.mode = LockMode::read_write())
    }

    /// Read-write mode where `is_read` decides which requests only read.
    pub fn read_write_by(
        self,
        is_read: impl Fn(&http::request::Parts) -> bool + Send + Sync + 'static,
    ) -> Self {
        let is_read = Arc::new(is_read);
        self.with(|config| config.mode = LockMode::ReadWrite { is_read })
    }

    /// Semaphore mode: at most `permits` requests per key run at once, across every process
    /// sharing the store — a cluster-wide concurrency limit (per tenant, per report). Each
    /// permit has its own token and lease, renewed like a lock's. Busy answers 409, or what
    /// [`busy_status`](Self::busy_status) says (429 for a rate-style limit).
    ///
    /// # Panics
    ///
    /// When `permits` is 0.
    pub fn semaphore(self, permits: u32) -> Self {
        assert!(permits > 0, "a semaphore needs at least one permit");
        self.with(|config| config.mode = LockMode::Semaphore { permits })
    }

    /// Whether the lease is renewed every TTL/3 while the handler runs (default `true`).
    ///
    /// Each renewal is one owner-checked extend command; none is sent once the lock is
    /// released or the request dropped. Without renewal the lease simply ends after the TTL,
    /// and a slower handler loses its lock (see [`on_lost`](Self::on_lost)).
    pub fn renew(self, renew: bool) -> Self {
        self.with(|config| config.renew = renew)
    }

    /// What happens to a handler whose lease is lost (default [`OnLost::Abort`]).
    pub fn on_lost(self, on_lost: OnLost) -> Self {
        self.with(|config| config.on_lost = on_lost)
    }

    /// Answer busy at once when the lock is held.
    pub fn reject(self) -> Self {
        self.with(|config| config.plan.policy = BusyPolicy::Reject)
    }

    /// Wait up to `timeout` for a held lock (default: 3 s), woken when its release is
    /// announced ([`WaitMode::Notified`]). A zero timeout rejects at once.
    pub fn wait(self, timeout: Duration) -> Self {
        self.waiting(timeout, WaitMode::Notified)
    }

    /// Wait up to `timeout` for a held lock by retrying on a timer with the
    /// [`backoff`](Self::backoff) ([`WaitMode::Polling`]): no announcements needed.
    pub fn wait_polling(self, timeout: Duration) -> Self {
        self.waiting(timeout, WaitMode::Polling)
    }

    /// Serve waiters first come, first served across all processes ([`WaitMode::Fair`]),
    /// keeping the wait timeout. A waiter's ticket expires after `ticket_ttl` (3 s is a good
    /// start) unless refreshed, so a crashed waiter holds up the line at most that long.
    ///
    /// When `ticket_ttl` is a little over 1.5 × the lease TTL (the ticket is renewed every third of
    /// its TTL, so it always outlives a lease), a release hands the lock straight to the next
    /// waiter, one round trip sooner than the waiter asking for it; with shorter tickets the
    /// release names the next waiter, which then takes the lock.
    ///
    /// Waiters in notified mode queue in the same line (one ticket per process), but a
    /// request's first attempt and polling waiters do not: for strict order, make every layer
    /// locking the same keys fair.
    pub fn fair(self, ticket_ttl: Duration) -> Self {
        let timeout = match self.config.plan.policy {
            BusyPolicy::Wait { timeout, .. } => timeout,
            BusyPolicy::Reject => Duration::ZERO,
        };
        self.waiting(timeout, WaitMode::Fair { ticket_ttl })
    }

    fn waiting(self, timeout: Duration, mode: WaitMode) -> Self {
        self.with(|config| config.plan.policy = BusyPolicy::Wait { timeout, mode })
    }

    /// The bounds of the exponential backoff with full jitter between attempts while waiting
    /// (default 10 ms to 250 ms). See [`Backoff`].
    ///
    /// # Panics
    ///
    /// When `initial` is zero or larger than `max`.
    pub fn backoff(self, initial: Duration, max: Duration) -> Self {
        let backoff = Backoff::new(initial, max);
        self.with(|config| config.plan.backoff = backoff)
    }

    /// How long one store call may take before the store counts as unavailable (default 1 s).
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.with(|config| config.plan.store_timeout = timeout)
    }

    /// When the store is unavailable, run the handler without a lock instead of answering 503.
    ///
    /// Only for resources where availability matters more than mutual exclusion: while the
    /// store is down, concurrent requests on one key all run.
    pub fn fail_open(self) -> Self {
        self.with(|config| config.fail_open = true)
    }

    /// The status answered when the lock stays busy (default 409 Conflict).
    pub fn busy_status(self, status: StatusCode) -> Self {
        self.with(|config| config.busy_status = status)
    }

    /// The longest key accepted, in bytes, the prefix not counted (default 256). Longer keys
    /// are answered 400.
    pub fn max_key_len(self, max: usize) -> Self {
        self.with(|config| config.max_key_len = max)
    }
}

impl<B, K> LockLayer<B, K> {
    /// How many locks this layer's services hold right now (each with its renewal timer).
    /// For metrics, and for tests that show nothing is left behind once requests finish.
    pub fn active_leases(&self) -> usize {
        self.config.active.load(Ordering::Relaxed)
    }
}

impl<B, K> Clone for LockLayer<B, K> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<B, K> Clone for Config<B, K> {
    fn clone(&self) -> Self {
        Self {
            backend: Arc::clone(&self.backend),
            extractor: Arc::clone(&self.extractor),
            prefix: self.prefix.clone(),
            max_key_len: self.max_key_len,
            plan: self.plan,
            mode: self.mode.clone(),
            renew: self.renew,
            on_lost: self.on_lost,
            fail_open: self.fail_open,
            busy_status: self.busy_status,
            active: Arc::clone(&self.active),
        }
    }
}

impl<B: fmt::Debug, K> fmt::Debug for LockLayer<B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockLayer").field(&*self.config).finish()
    }
}

impl<B: fmt::Debug, K> fmt::Debug for Config<B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("backend", &self.backend)
            .field("prefix", &self.prefix)
            .field("max_key_len", &self.max_key_len)
            .field("plan", &self.plan)
            .field("mode", &self.mode)
            .field("renew", &self.renew)
            .field("on_lost", &self.on_lost)
            .field("fail_open", &self.fail_open)
            .field("busy_status", &self.busy_status)
            .finish_non_exhaustive()
    }
}

impl<S, B, K> Layer<S> for LockLayer<B, K> {
    type Service = LockService<S, B, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, Arc::clone(&self.config))
    }
}
