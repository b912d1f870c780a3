//! [`LockLayer`]: the builder, and the configuration its services share.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tower_layer::Layer;

use super::mode::{Mode, safe_methods_read};
use super::service::LockService;
use crate::backend::{LockBackend, Semaphores, SharedLocks};
use crate::engine::Ask;
use crate::key::KeyExtractor;
use crate::{Locker, LockerBuilder, OnLost};

/// Runs each request under a distributed lock on the key its [`KeyExtractor`] finds: an
/// adapter of a [`Locker`] to HTTP.
///
/// Defaults (the locker's, see [`LockerBuilder`]): prefix `lock:`, lease TTL 10 s renewed
/// every TTL/3 while the handler runs, abort the handler with 503 if the lease is lost, wait up
/// to 3 s for a busy lock, then answer 409; answer 503 when the store does not answer within
/// 1 s (fail closed); keys up to 256 bytes.
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
pub struct LockLayer<B: LockBackend, K> {
    config: Arc<Config<B, K>>,
}

/// What every [`LockService`] of one layer shares.
pub(crate) struct Config<B: LockBackend, K> {
    pub(crate) locker: Locker<B>,
    pub(crate) extractor: Arc<K>,
    pub(crate) mode: Mode<B>,
    pub(crate) fail_open: bool,
    pub(crate) busy_status: StatusCode,
}

impl<B: LockBackend, K: KeyExtractor> LockLayer<B, K> {
    /// A layer locking in `backend` on the key `extractor` finds, with the defaults above.
    pub fn new(backend: B, extractor: K) -> Self {
        Self::from_locker(Locker::new(backend), extractor)
    }

    /// A layer taking its locks with `locker`, whose settings it starts from: the same locks,
    /// the same count of held locks, for HTTP and for code that locks without it (background
    /// jobs). A setting changed on the layer applies to the layer only.
    pub fn from_locker(locker: Locker<B>, extractor: K) -> Self {
        Self {
            config: Arc::new(Config {
                locker,
                extractor: Arc::new(extractor),
                mode: Mode::Mutex,
                fail_open: false,
                busy_status: StatusCode::CONFLICT,
            }),
        }
    }
}

impl<B: LockBackend, K> LockLayer<B, K> {
    fn with(mut self, change: impl FnOnce(&mut Config<B, K>)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Changes the locker's settings.
    ///
    /// # Panics
    ///
    /// When the locker refuses them, with its [`ConfigError`](crate::ConfigError)'s message.
    fn locking(self, change: impl FnOnce(LockerBuilder<B>) -> LockerBuilder<B>) -> Self {
        let locker = self
            .config
            .locker
            .reconfigured(change)
            .unwrap_or_else(|error| panic!("{error}"));
        self.with(|config| config.locker = locker)
    }

    /// The locker the layer takes its locks with.
    pub fn locker(&self) -> &Locker<B> {
        &self.config.locker
    }

    /// Prepended to every key to name the lock in the store (default `lock:`).
    ///
    /// # Panics
    ///
    /// When `prefix` contains `{`, `}` or an ASCII control character.
    pub fn prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.locking(|locker| locker.prefix(prefix))
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
        self.locking(|locker| locker.ttl(ttl))
    }

    /// Whether the lease is renewed every TTL/3 while the handler runs (default `true`).
    ///
    /// Each renewal is one owner-checked extend command; none is sent once the lock is
    /// released or the request dropped. Without renewal the lease simply ends after the TTL,
    /// and a slower handler loses its lock (see [`on_lost`](Self::on_lost)).
    pub fn renew(self, renew: bool) -> Self {
        self.locking(|locker| locker.renew(renew))
    }

    /// What happens to a handler whose lease is lost (default [`OnLost::Abort`]).
    pub fn on_lost(self, on_lost: OnLost) -> Self {
        self.locking(|locker| locker.on_lost(on_lost))
    }

    /// Answer busy at once when the lock is held.
    pub fn reject(self) -> Self {
        self.locking(LockerBuilder::reject)
    }

    /// Wait up to `timeout` for a held lock (default: 3 s), woken when its release is
    /// announced (backends without a wait queue poll). A zero timeout rejects at once.
    pub fn wait(self, timeout: Duration) -> Self {
        self.locking(|locker| locker.wait(timeout))
    }

    /// Wait up to `timeout` for a held lock by retrying on a timer with the
    /// [`backoff`](Self::backoff): no announcements needed.
    pub fn wait_polling(self, timeout: Duration) -> Self {
        self.locking(|locker| locker.wait_polling(timeout))
    }

    /// Serve waiters first come, first served across all processes, keeping the wait timeout.
    /// A waiter's ticket expires after `ticket_ttl` (3 s is a good start) unless refreshed, so
    /// a crashed waiter holds up the line at most that long. See [`LockerBuilder::fair`].
    ///
    /// # Panics
    ///
    /// When the backend has no wait queue, or `ticket_ttl` is shorter than 10 ms.
    pub fn fair(self, ticket_ttl: Duration) -> Self {
        self.locking(|locker| locker.fair(ticket_ttl))
    }

    /// The bounds of the exponential backoff with full jitter between polling attempts
    /// (default 10 ms to 250 ms). See [`LockerBuilder::backoff`].
    ///
    /// # Panics
    ///
    /// When `initial` is zero or larger than `max`.
    pub fn backoff(self, initial: Duration, max: Duration) -> Self {
        self.locking(|locker| locker.backoff(initial, max))
    }

    /// How long one store call may take before the store counts as unavailable (default 1 s).
    ///
    /// # Panics
    ///
    /// When `timeout` is zero.
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.locking(|locker| locker.store_timeout(timeout))
    }

    /// The longest key accepted, in bytes, the prefix not counted (default 256). Longer keys
    /// are answered 400.
    ///
    /// # Panics
    ///
    /// When the prefix and keys this long would not fit the backend's lock names.
    pub fn max_key_len(self, max: usize) -> Self {
        self.locking(|locker| locker.max_key_len(max))
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

    /// How many locks this layer's locker holds right now (each with its renewal). For
    /// metrics, and for tests that show nothing is left behind once requests finish.
    pub fn active_leases(&self) -> usize {
        self.config.locker.held_locks()
    }
}

impl<B: SharedLocks, K> LockLayer<B, K> {
    /// Read-write mode: GET, HEAD and OPTIONS take a shared read lock, other methods an
    /// exclusive write lock. Many readers hold the key at once; a writer holds it alone, and
    /// once a writer waits, new readers queue behind it. Each reader's lease expires on its
    /// own, so a crashed reader blocks writers for at most its TTL.
    pub fn read_write(self) -> Self {
        self.read_write_with(safe_methods_read())
    }

    /// Read-write mode where `is_read` decides which requests only read.
    pub fn read_write_by(
        self,
        is_read: impl Fn(&http::request::Parts) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.read_write_with(Arc::new(is_read))
    }

    fn read_write_with(self, is_read: super::mode::IsRead) -> Self {
        let (read, write) = (Ask::read(), Ask::write());
        self.with(|config| {
            config.mode = Mode::ReadWrite {
                is_read,
                read,
                write,
            };
        })
    }
}

impl<B: Semaphores, K> LockLayer<B, K> {
    /// Semaphore mode: at most `permits` requests per key run at once, across every process
    /// sharing the store — a cluster-wide concurrency limit (per tenant, per report). Each
    /// permit has its own token and lease, renewed like a lock's. Busy answers 409, or what
    /// [`busy_status`](Self::busy_status) says (429 for a rate-style limit).
    ///
    /// # Panics
    ///
    /// When `permits` is 0.
    pub fn semaphore(self, permits: u32) -> Self {
        let permits = std::num::NonZeroU32::new(permits)
            .unwrap_or_else(|| panic!("a semaphore needs at least one permit"));
        self.with(|config| config.mode = Mode::Semaphore(Ask::permit(permits)))
    }
}

impl<B: LockBackend, K> Clone for LockLayer<B, K> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<B: LockBackend, K> Clone for Config<B, K> {
    fn clone(&self) -> Self {
        Self {
            locker: self.locker.clone(),
            extractor: Arc::clone(&self.extractor),
            mode: self.mode.clone(),
            fail_open: self.fail_open,
            busy_status: self.busy_status,
        }
    }
}

impl<B: LockBackend + fmt::Debug, K> fmt::Debug for LockLayer<B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockLayer").field(&*self.config).finish()
    }
}

impl<B: LockBackend + fmt::Debug, K> fmt::Debug for Config<B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("locker", &self.locker)
            .field("mode", &self.mode)
            .field("fail_open", &self.fail_open)
            .field("busy_status", &self.busy_status)
            .finish_non_exhaustive()
    }
}

impl<S, B: LockBackend, K> Layer<S> for LockLayer<B, K> {
    type Service = LockService<S, B, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, Arc::clone(&self.config))
    }
}
