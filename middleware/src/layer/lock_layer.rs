//! [`LockLayer`]: the builder, and the configuration its services share.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use tower_layer::Layer;

use super::mode::{Mode, safe_methods_read};
use super::rejection::Rejection;
use super::request_body::{DEFAULT_BODY_LIMIT, RequestBody};
use super::service::LockService;
use crate::backend::Ask;
use crate::backend::{LockBackend, Semaphores, SharedLocks};
use crate::engine::Locker;
use crate::key::KeyExtractor;

/// Runs each request under a distributed lock on the key its [`KeyExtractor`] finds: an
/// adapter of a [`Locker`] to HTTP.
///
/// The locker says how locks are taken — TTL, renewal, waiting, store timeout; its settings
/// were checked when it was built ([`LockerBuilder::build`](crate::LockerBuilder::build)), so
/// a layer never fails to apply. The layer adds what only HTTP needs: the lock's shape per
/// request, the answers, the request body. By default it answers a lock still busy after the
/// locker's wait with 409, and 503 when the store does not answer (fail closed).
///
/// Cloning the layer is cheap, as its configuration is shared.
///
/// # Applying it
///
/// * **axum, per route or for every route**: `Router::route_layer(lock)` or
///   `Router::layer(lock)`. The layer runs after routing, so keys may come from path
///   parameters (`{path id}`), and axum turns its response body into its own. The example
///   below.
/// * **Around a whole service** (a `Router` as one service, or any tower service): the layer
///   runs before routing, so keys come from headers or the query; a path key answers 500. Its
///   responses carry a [`ResponseBody`](crate::ResponseBody) (the lock is held until the body
///   ends), which `axum::serve` does not take as it is: map it into axum's `Body`.
///
/// ```no_run
/// use axum::{Router, ServiceExt, body::Body, routing::post};
/// use http::{Request, Response};
/// use tower::ServiceBuilder;
/// use tower_lock::{LockLayer, Locker, MemoryBackend, key::header};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let app = Router::new().route("/debit", post(|| async { "debited" }));
/// let lock = LockLayer::new(Locker::new(MemoryBackend::new()), header("x-account"));
/// let service = ServiceBuilder::new()
///     .map_response(|response: Response<_>| response.map(Body::new))
///     .layer(lock)
///     .service(app);
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// let service = ServiceExt::<Request<Body>>::into_make_service(service);
/// axum::serve(listener, service).await?;
/// # Ok(()) }
/// ```
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use tower_lock::{LockLayer, Locker, MemoryBackend, key::KeyTemplate};
///
/// let locker = Locker::builder(MemoryBackend::new())
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_millis(500))
///     .build()?;
/// let lock = LockLayer::new(locker, KeyTemplate::parse("coupon:{path id}")?);
///
/// let app: Router = Router::new()
///     .route("/coupons/{id}/claim", post(|| async { "claimed" }))
///     .route_layer(lock);
/// # Ok::<_, Box<dyn std::error::Error>>(())
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
}

/// An application's own answer to a rejection.
pub(crate) type Respond = Arc<dyn Fn(Rejection) -> Response<Bytes> + Send + Sync>;

impl<B: LockBackend, K: KeyExtractor> LockLayer<B, K> {
    /// A layer taking its locks with `locker` on the key `extractor` finds: the same locks,
    /// the same count of held locks, as code that locks without HTTP (background jobs) through
    /// the same locker.
    pub fn new(locker: Locker<B>, extractor: K) -> Self {
        Self {
            config: Arc::new(Config {
                locker,
                extractor: Arc::new(extractor),
                mode: Mode::Always(Ask::mutex()),
                fail_open: false,
                busy_status: StatusCode::CONFLICT,
                request_body: RequestBody::Read {
                    limit: DEFAULT_BODY_LIMIT,
                },
                on_rejection: None,
            }),
        }
    }
}

impl<B: LockBackend, K> LockLayer<B, K> {
    fn with(mut self, change: impl FnOnce(&mut Config<B, K>)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// The locker the layer takes its locks with.
    pub fn locker(&self) -> &Locker<B> {
        &self.config.locker
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
    /// use tower_lock::{LockLayer, Locker, MemoryBackend, Rejection, key::header};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let layer = LockLayer::new(locker, header("x-account")).on_rejection(
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
}

impl<B: SharedLocks, K> LockLayer<B, K> {
    /// Read-write mode: GET, HEAD and OPTIONS take a shared read lock, other methods an
    /// exclusive write lock. Many readers hold the key at once; a writer holds it alone, and
    /// once a writer waits, new readers queue behind it. Each reader's lease expires on its
    /// own, so a crashed reader blocks writers for at most its TTL. A fair locker's order
    /// is for mutexes: readers and writers wait as in notified mode.
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
    /// [`busy_status`](Self::busy_status) says (429 for a rate-style limit). A fair locker's
    /// order is for mutexes: permit holders wait as in notified mode.
    pub fn semaphore(self, permits: NonZeroU32) -> Self {
        self.with(|config| config.mode = Mode::Always(Ask::permit(permits)))
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

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, Arc::clone(&self.config))
    }
}
