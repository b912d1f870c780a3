//! [`LockLayer`]: the builder, and the configuration its services share.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use tower_layer::Layer;

use super::mode::{Mode, safe_methods_read};
use super::rejection::Rejection;
use super::request_body::{DEFAULT_BODY_LIMIT, RequestBody};
use super::service::LockService;
use crate::backend::{LockBackend, Semaphores, SharedLocks};
use crate::engine::Ask;
use crate::engine::{BusyPolicy, WaitMode};
use crate::key::KeyExtractor;
use crate::{ConfigError, Locker, LockerBuilder, OnLost};

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
    pub(crate) request_body: RequestBody,
    pub(crate) on_rejection: Option<Respond>,
    /// The first setting refused.
    pub(crate) invalid: Option<ConfigError>,
}

/// An application's own answer to a rejection.
pub(crate) type Respond = Arc<dyn Fn(Rejection) -> Response<Bytes> + Send + Sync>;

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
                request_body: RequestBody::Read {
                    limit: DEFAULT_BODY_LIMIT,
                },
                on_rejection: None,
                invalid: None,
            }),
        }
    }
}

impl<B: LockBackend, K> LockLayer<B, K> {
    fn with(mut self, change: impl FnOnce(&mut Config<B, K>)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Changes the locker's settings; a change the locker refuses is kept as the layer's
    /// [`error`](Self::validate), and the settings stay as they were.
    fn locking(self, change: impl FnOnce(LockerBuilder<B>) -> LockerBuilder<B>) -> Self {
        match self.config.locker.reconfigured(change) {
            Ok(locker) => self.with(|config| config.locker = locker),
            Err(error) => self.refused(error),
        }
    }

    /// Keeps `error` as the layer's first configuration error.
    fn refused(self, error: ConfigError) -> Self {
        self.with(|config| {
            config.invalid.get_or_insert(error);
        })
    }

    /// Whether the settings work together: `Err` with the first one refused — a value out of
    /// range (a TTL under 10 ms, a zero store timeout), or a combination that contradicts
    /// itself (fair and polling, fair and never waiting, fairness for shared holds).
    ///
    /// Settings are checked as they are made and never panic there; applying a layer whose
    /// settings were refused panics with this error's message (as tower-http's CORS layer
    /// does), so call this first to handle it as an error.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_lock::{ConfigError, LockLayer, MemoryBackend, key::header};
    ///
    /// let layer = LockLayer::new(MemoryBackend::new(), header("x-account"))
    ///     .fair(Duration::from_secs(3))
    ///     .wait_polling(Duration::from_secs(1));
    /// assert_eq!(layer.validate(), Err(ConfigError::FairPolling));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(error) = &self.config.invalid {
            return Err(error.clone());
        }
        let fair = matches!(
            self.config.locker.settings().policy,
            BusyPolicy::Wait {
                mode: WaitMode::Fair { .. },
                ..
            }
        );
        if fair && !matches!(self.config.mode, Mode::Mutex) {
            return Err(ConfigError::FairSharedHolds);
        }
        Ok(())
    }

    /// The locker the layer takes its locks with.
    pub fn locker(&self) -> &Locker<B> {
        &self.config.locker
    }

    /// Prepended to every key to name the lock in the store (default `lock:`).
    pub fn prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.locking(|locker| locker.prefix(prefix))
    }

    /// How long a lease lasts unless renewed (default 10 s).
    ///
    /// A lock is released as soon as its request finishes, and renewed every TTL/3 while it
    /// runs; the TTL bounds how long a crashed, paused or partitioned holder blocks the key.
    /// Without renewal, choose it longer than your slowest handler.
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

    /// How long to wait for a held lock (default: 3 s) before answering busy; a zero timeout
    /// rejects at once. It changes nothing else: waiters are woken when the release is
    /// announced (backends without a wait queue poll), or poll, or queue fairly, as
    /// [`wait_polling`](Self::wait_polling) and [`fair`](Self::fair) say.
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
    /// a crashed waiter holds up the line at most that long. See [`LockerBuilder::fair`]. For
    /// mutex layers on a backend with a wait queue, with a wait timeout, without polling:
    /// anything else is refused ([`validate`](Self::validate)).
    pub fn fair(self, ticket_ttl: Duration) -> Self {
        self.locking(|locker| locker.fair(ticket_ttl))
    }

    /// The bounds of the exponential backoff with full jitter between polling attempts
    /// (default 10 ms to 250 ms). See [`LockerBuilder::backoff`].
    pub fn backoff(self, initial: Duration, max: Duration) -> Self {
        self.locking(|locker| locker.backoff(initial, max))
    }

    /// How long one store call may take before the store counts as unavailable (default 1 s).
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.locking(|locker| locker.store_timeout(timeout))
    }

    /// The longest key accepted, in bytes, the prefix not counted (default 256). Longer keys
    /// are answered 400.
    pub fn max_key_len(self, max: usize) -> Self {
        self.locking(|locker| locker.max_key_len(max))
    }

    /// The `group` label of the layer's lock metrics, instead of the route's pattern (see
    /// [`LockerBuilder::metrics_group`] and [`telemetry`](crate::telemetry)).
    pub fn metrics_group(self, group: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.locking(|locker| locker.metrics_group(group))
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

    /// Read request bodies up to `limit` bytes (default 2 MiB, axum's default body limit)
    /// before taking the lock, and answer 413 past it.
    ///
    /// The body of a locked request is read whole before its lock is taken, so a client
    /// uploading slowly holds no lock meanwhile: how long a lock is held is up to the handler,
    /// not to the client's upload speed. The handler gets the body from memory.
    pub fn body_limit(self, limit: usize) -> Self {
        self.with(|config| config.request_body = RequestBody::Read { limit })
    }

    /// Hand request bodies to the handler unread, for streaming uploads (or bodies larger
    /// than memory should hold).
    ///
    /// The lock is then taken before the body is read and held while the handler reads it: a
    /// slow client holds the lock as long as its upload takes. Bound that with a timeout on
    /// the body (tower-http's `TimeoutBody`) below this layer.
    pub fn stream_request_body(self) -> Self {
        self.with(|config| config.request_body = RequestBody::Stream)
    }

    /// Answer rejections (busy, bad key, unreadable body, store down, lease lost) with
    /// `respond` instead of the default problem+json document ([`Rejection::into_response`]).
    ///
    /// # Example
    ///
    /// ```
    /// use http::Response;
    /// use tower_lock::{LockLayer, MemoryBackend, Rejection, key::header};
    ///
    /// let layer = LockLayer::new(MemoryBackend::new(), header("x-account")).on_rejection(
    ///     |rejection: Rejection| {
    ///         let mut response = Response::new(format!("try again later: {rejection}"));
    ///         *response.status_mut() = rejection.status();
    ///         response
    ///     },
    /// );
    /// ```
    pub fn on_rejection<F, R>(self, respond: F) -> Self
    where
        F: Fn(Rejection) -> Response<R> + Send + Sync + 'static,
        R: Into<Bytes>,
    {
        let respond: Respond = Arc::new(move |rejection| respond(rejection).map(Into::into));
        self.with(|config| config.on_rejection = Some(respond))
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
    pub fn semaphore(self, permits: u32) -> Self {
        match std::num::NonZeroU32::new(permits) {
            Some(permits) => {
                self.with(|config| config.mode = Mode::Semaphore(Ask::permit(permits)))
            }
            None => self.refused(ConfigError::NoPermits),
        }
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
            request_body: self.request_body,
            on_rejection: self.on_rejection.clone(),
            invalid: self.invalid.clone(),
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
            .field("request_body", &self.request_body)
            .field("on_rejection", &self.on_rejection.is_some())
            .finish_non_exhaustive()
    }
}

impl<S, B: LockBackend, K> Layer<S> for LockLayer<B, K> {
    type Service = LockService<S, B, K>;

    /// # Panics
    ///
    /// When a setting was refused: see [`validate`](LockLayer::validate).
    fn layer(&self, inner: S) -> Self::Service {
        if let Err(error) = self.validate() {
            panic!("invalid LockLayer settings: {error}");
        }
        LockService::new(inner, Arc::clone(&self.config))
    }
}
