//! [`LockService`]: acquire, run the inner service, release.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use tower_service::Service;

use crate::acquire::{NotObtained, acquire, acquire_all};
use crate::guard::{HeldLock, HeldLocks, Release};
use crate::key::{KeyError, KeyExtractor, validate_key};
use crate::layer::Config;
use crate::lease::{self, Lease};
use crate::{Hold, LockBackend, LockError, LockGuard, OnLost, OwnerToken, ResponseFuture};

/// Runs the inner service under the request's lock. Built by [`LockLayer`](crate::LockLayer).
///
/// Locking happens in `call`, never in `poll_ready`: the key comes from the request.
pub struct LockService<S, B, K> {
    inner: S,
    config: Arc<Config<B, K>>,
}

impl<S, B, K> LockService<S, B, K> {
    pub(crate) fn new(inner: S, config: Arc<Config<B, K>>) -> Self {
        Self { inner, config }
    }
}

impl<S, B, K, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S, B, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: LockBackend,
    K: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone is not ready; keep the instance `poll_ready` was called on.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(call_locked(Arc::clone(&self.config), ready, request))
    }
}

async fn call_locked<S, B, K, ReqBody, ResBody>(
    config: Arc<Config<B, K>>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    B: LockBackend,
    K: KeyExtractor,
    ResBody: From<String>,
{
    let (mut parts, body) = request.into_parts();
    let names = match lock_names(&config, &parts) {
        Ok(names) if names.is_empty() => {
            return inner.call(Request::from_parts(parts, body)).await;
        }
        Ok(names) => names,
        Err(error) => {
            tracing::debug!(%error, "request has no valid lock key");
            return Ok(LockError::InvalidKey(error).into_response());
        }
    };
    let held = parts
        .extensions
        .get::<HeldLocks>()
        .cloned()
        .unwrap_or_default();
    if names.iter().all(|name| held.holds(name)) {
        tracing::trace!(locks = ?names, "already held by an outer layer");
        return inner.call(Request::from_parts(parts, body)).await;
    }

    let token = OwnerToken::new();
    // Several keys are always taken exclusively, whatever the mode.
    let (hold, acquired) = match &names[..] {
        [name] => {
            let hold = config.mode.hold_for(&parts);
            let acquired = acquire(&config.backend, name, token, hold, config.plan).await;
            (hold, acquired.map(|(fence, sent)| (vec![fence], sent)))
        }
        _ => {
            let acquired = acquire_all(&config.backend, &names, token, config.plan).await;
            (Hold::Exclusive, acquired)
        }
    };
    let (fences, sent) = match acquired {
        Ok(acquired) => acquired,
        Err(NotObtained::Busy { holder_ttl }) => {
            let keys: Vec<&str> = names
                .iter()
                .map(|name| &name[config.prefix.len()..])
                .collect();
            let key = keys.join(", ");
            tracing::debug!(locks = ?names, ?holder_ttl, "busy");
            return Ok(
                LockError::Busy { key, holder_ttl }.into_response_with_status(config.busy_status)
            );
        }
        Err(NotObtained::StoreUnavailable) if config.fail_open => {
            tracing::warn!(
                locks = ?names,
                "lock store unavailable; running unlocked (fail-open)"
            );
            return inner.call(Request::from_parts(parts, body)).await;
        }
        Err(NotObtained::StoreUnavailable) => {
            return Ok(LockError::StoreUnavailable.into_response());
        }
    };

    let lease = Lease::new(sent, config.plan.ttl);
    let guard = LockGuard::new(names, config.prefix.len(), token, (fences, hold), lease);
    tracing::trace!(lock = guard.name(), fence = guard.fence(), "acquired");
    let release = Release {
        store_timeout: config.plan.store_timeout,
    };
    let lock = HeldLock::new(
        Arc::clone(&config.backend),
        guard.clone(),
        release,
        Arc::clone(&config.active),
    );
    parts.extensions.insert(held.with(guard.clone()));
    parts.extensions.insert(guard);
    let call = inner.call(Request::from_parts(parts, body));
    let ran = run_while_held(call, &*config.backend, lock.guard(), &config).await;
    lock.release().await;
    match ran {
        Ran::Finished(result) => result,
        Ran::Aborted { key } => Ok(LockError::LeaseLost { key }.into_response()),
    }
}

enum Ran<T> {
    Finished(T),
    Aborted { key: String },
}

/// Runs the handler while keeping its lease; when the lease is lost, aborts the handler (its
/// future is dropped on return) or lets it finish, as configured.
async fn run_while_held<F, B, K>(
    call: F,
    backend: &B,
    guard: &LockGuard,
    config: &Config<B, K>,
) -> Ran<F::Output>
where
    F: Future,
    B: LockBackend,
{
    let mut call = pin!(call);
    let because = tokio::select! {
        biased;
        output = &mut call => return Ran::Finished(output),
        because = lease::keep(backend, guard, config.lease_plan()) => because,
    };
    match config.on_lost {
        OnLost::Abort => {
            tracing::warn!(
                lock = guard.name(),
                ?because,
                "lock lost; aborting the request"
            );
            Ran::Aborted {
                key: guard.key().to_owned(),
            }
        }
        OnLost::Continue => {
            tracing::warn!(
                lock = guard.name(),
                ?because,
                "lock lost; the request goes on"
            );
            Ran::Finished(call.await)
        }
    }
}

/// The request's full lock names (prefix and key), sorted; none when it is not locked.
fn lock_names<B, K: KeyExtractor>(
    config: &Config<B, K>,
    parts: &Parts,
) -> Result<Vec<String>, KeyError> {
    let mut names = config
        .extractor
        .extract_keys(parts)?
        .into_iter()
        .map(|key| {
            validate_key(&key, config.max_key_len)?;
            let mut name = String::with_capacity(config.prefix.len() + key.len());
            name.push_str(&config.prefix);
            name.push_str(&key);
            Ok(name)
        })
        .collect::<Result<Vec<_>, _>>()?;
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

impl<S: Clone, B, K> Clone for LockService<S, B, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, B: fmt::Debug, K> fmt::Debug for LockService<S, B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("config", &*self.config)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::key::{KeyTemplate, header, path};
    use crate::{Acquire, BackendError, LockLayer, MemoryBackend};

    const TTL: Duration = Duration::from_secs(30);

    fn coupon_key() -> KeyTemplate {
        KeyTemplate::parse("coupon:{path id}").unwrap()
    }

    fn claim(id: &str) -> Request<Body> {
        Request::post(format!("/coupons/{id}/claim"))
            .body(Body::empty())
            .unwrap()
    }

    async fn send(app: &Router, request: Request<Body>) -> (StatusCode, http::HeaderMap, String) {
        let response = app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    /// A claim route whose handler counts its runs and answers with what it saw of its lock.
    fn claim_app(layer: LockLayer<MemoryBackend, KeyTemplate>, runs: Arc<AtomicUsize>) -> Router {
        Router::new()
            .route(
                "/coupons/{id}/claim",
                post(move |lock: Option<axum::Extension<LockGuard>>| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    lock.map(|axum::Extension(lock)| format!("{} {}", lock.name(), lock.fence()))
                        .unwrap_or_else(|| "unlocked".to_owned())
                }),
            )
            .route_layer(layer)
    }

    async fn hold(store: &MemoryBackend, name: &str) -> OwnerToken {
        let token = OwnerToken::new();
        let answer = store.acquire(name, token, TTL).await.unwrap();
        assert!(
            matches!(answer, Acquire::Acquired { .. }),
            "{name} should be free"
        );
        token
    }

    async fn is_free(store: &MemoryBackend, name: &str) -> bool {
        let token = OwnerToken::new();
        let answer = store.acquire(name, token, TTL).await.unwrap();
        store.release(name, token).await.unwrap();
        matches!(answer, Acquire::Acquired { .. })
    }

    #[tokio::test]
    async fn the_handler_runs_holding_the_lock_and_it_is_released_afterwards() {
        let store = MemoryBackend::new();
        let probe = store.clone();
        let app = Router::new()
            .route(
                "/coupons/{id}/claim",
                post(move || async move { is_free(&probe, "lock:coupon:7").await.to_string() }),
            )
            .route_layer(LockLayer::new(store.clone(), coupon_key()));

        let (status, _, body) = send(&app, claim("7")).await;

        assert_eq!((status, body.as_str()), (StatusCode::OK, "false"));
        assert!(is_free(&store, "lock:coupon:7").await);
    }

    #[tokio::test]
    async fn the_handler_sees_its_guard_with_key_and_fence() {
        let runs = Arc::new(AtomicUsize::new(0));
        let app = claim_app(LockLayer::new(MemoryBackend::new(), coupon_key()), runs);

        assert_eq!(send(&app, claim("7")).await.2, "lock:coupon:7 1");
        assert_eq!(send(&app, claim("7")).await.2, "lock:coupon:7 2");
    }

    #[tokio::test]
    async fn a_busy_lock_is_rejected_with_409_and_retry_after() {
        let store = MemoryBackend::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let app = claim_app(
            LockLayer::new(store.clone(), coupon_key()).reject(),
            runs.clone(),
        );
        hold(&store, "lock:coupon:7").await;

        let (status, headers, body) = send(&app, claim("7")).await;

        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(headers["retry-after"], "30");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert!(body.contains("resource is locked"), "{body}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        assert_eq!(
            send(&app, claim("8")).await.0,
            StatusCode::OK,
            "other keys are free"
        );
    }

    #[tokio::test]
    async fn the_busy_status_is_configurable() {
        let store = MemoryBackend::new();
        let layer = LockLayer::new(store.clone(), coupon_key())
            .reject()
            .busy_status(StatusCode::TOO_MANY_REQUESTS);
        let app = claim_app(layer, Arc::default());
        hold(&store, "lock:coupon:7").await;

        assert_eq!(
            send(&app, claim("7")).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_lock_once_it_is_released() {
        let store = MemoryBackend::new();
        let app = claim_app(
            LockLayer::new(store.clone(), coupon_key()).wait(Duration::from_secs(3)),
            Arc::default(),
        );
        let holder = hold(&store, "lock:coupon:7").await;
        let waiter = tokio::spawn({
            let app = app.clone();
            async move { send(&app, claim("7")).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());

        store.release("lock:coupon:7", holder).await.unwrap();
        let started = tokio::time::Instant::now();
        let (status, _, _) = waiter.await.unwrap();

        assert_eq!(status, StatusCode::OK);
        assert!(
            started.elapsed() <= Duration::from_millis(250),
            "the backoff ceiling"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gives_up_with_409_when_its_timeout_passes() {
        let store = MemoryBackend::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let app = claim_app(
            LockLayer::new(store.clone(), coupon_key()).wait(Duration::from_secs(2)),
            runs.clone(),
        );
        hold(&store, "lock:coupon:7").await;
        let started = tokio::time::Instant::now();

        let (status, headers, _) = send(&app, claim("7")).await;

        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(headers["retry-after"], "28");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_request_without_a_key_runs_unlocked() {
        let only_with_header =
            |parts: &Parts| Ok(parts.headers.get("x-lock").map(|_| "locked".to_owned()));
        let app = Router::new()
            .route(
                "/",
                post(|lock: Option<axum::Extension<LockGuard>>| async move {
                    lock.is_some().to_string()
                }),
            )
            .route_layer(LockLayer::new(MemoryBackend::new(), only_with_header));

        let plain = Request::post("/").body(Body::empty()).unwrap();
        let marked = Request::post("/")
            .header("x-lock", "1")
            .body(Body::empty())
            .unwrap();

        assert_eq!(send(&app, plain).await.2, "false");
        assert_eq!(send(&app, marked).await.2, "true");
    }

    #[tokio::test]
    async fn bad_keys_are_answered_400_and_the_handler_never_runs() {
        let runs = Arc::new(AtomicUsize::new(0));
        let app = claim_app(
            LockLayer::new(MemoryBackend::new(), coupon_key()),
            runs.clone(),
        );
        let cases = [
            ("a%7Bb%7D", "`{` or `}`"),
            ("a%01b", "control character"),
            (&"x".repeat(300), "is 307 bytes long; at most 256"),
        ];
        for (id, detail) in cases {
            let (status, headers, body) = send(&app, claim(id)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{id}");
            assert_eq!(headers["content-type"], "application/problem+json");
            assert!(body.contains(detail), "{body}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn the_key_limit_is_configurable() {
        let layer = LockLayer::new(MemoryBackend::new(), coupon_key()).max_key_len(10);
        let app = claim_app(layer, Arc::default());

        assert_eq!(send(&app, claim("123")).await.0, StatusCode::OK);
        assert_eq!(send(&app, claim("1234")).await.0, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn the_path_parameter_is_seen_under_router_layer_too() {
        let app = Router::new()
            .route("/coupons/{id}/claim", post(|| async { "claimed" }))
            .layer(LockLayer::new(MemoryBackend::new(), path("id")));

        assert_eq!(send(&app, claim("7")).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_layer_around_the_whole_router_reports_the_missing_path_parameter() {
        let router: Router =
            Router::new().route("/coupons/{id}/claim", post(|| async { "claimed" }));
        let app = ServiceBuilder::new()
            .layer(LockLayer::new(MemoryBackend::new(), path("id")))
            .service(router);

        let response = app.oneshot(claim("7")).await.unwrap();

        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("path parameter `id` is missing"));
    }

    #[tokio::test]
    async fn nested_layers_on_the_same_lock_pass_through() {
        let store = MemoryBackend::new();
        let app = Router::new()
            .route(
                "/coupons/{id}/claim",
                post(
                    |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                        lock.fence().to_string()
                    },
                ),
            )
            .route_layer(LockLayer::new(store.clone(), coupon_key()).reject())
            .layer(LockLayer::new(store.clone(), coupon_key()).reject());

        let (status, _, body) = send(&app, claim("7")).await;

        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "1"),
            "one acquire, by the outer layer"
        );
        assert!(is_free(&store, "lock:coupon:7").await);
    }

    #[tokio::test]
    async fn nested_layers_on_different_locks_take_both() {
        let store = MemoryBackend::new();
        let probe = store.clone();
        let app = Router::new()
            .route(
                "/coupons/{id}/claim",
                post(move || async move {
                    let tenant = is_free(&probe, "lock:tenant:acme").await;
                    let coupon = is_free(&probe, "lock:coupon:7").await;
                    format!("{tenant} {coupon}")
                }),
            )
            .route_layer(LockLayer::new(store.clone(), coupon_key()).reject())
            .layer(LockLayer::new(
                store.clone(),
                KeyTemplate::parse("tenant:{header x-tenant}").unwrap(),
            ));
        let request = Request::post("/coupons/7/claim")
            .header("x-tenant", "acme")
            .body(Body::empty())
            .unwrap();

        assert_eq!(send(&app, request).await.2, "false false");
        assert!(is_free(&store, "lock:tenant:acme").await);
        assert!(is_free(&store, "lock:coupon:7").await);
    }

    #[tokio::test]
    async fn the_lock_is_released_when_the_inner_service_fails() {
        let store = MemoryBackend::new();
        let failing =
            service_fn(|_: Request<Body>| async { Err::<http::Response<String>, _>("boom") });
        let service = ServiceBuilder::new()
            .layer(LockLayer::new(store.clone(), header("x-key")))
            .service(failing);
        let request = Request::post("/")
            .header("x-key", "a")
            .body(Body::empty())
            .unwrap();

        assert_eq!(service.oneshot(request).await.unwrap_err(), "boom");
        assert!(is_free(&store, "lock:a").await);
    }

    #[tokio::test]
    async fn a_dropped_request_releases_its_lock() {
        let store = MemoryBackend::new();
        let (entered, mut inside) = tokio::sync::mpsc::channel(1);
        let forever = service_fn(move |_: Request<Body>| {
            let entered = entered.clone();
            async move {
                entered.send(()).await.unwrap();
                std::future::pending::<Result<http::Response<String>, Infallible>>().await
            }
        });
        let service = ServiceBuilder::new()
            .layer(LockLayer::new(store.clone(), header("x-key")))
            .service(forever);
        let request = Request::post("/")
            .header("x-key", "a")
            .body(Body::empty())
            .unwrap();
        let in_flight = tokio::spawn(service.oneshot(request));
        inside.recv().await.unwrap();
        assert!(!is_free(&store, "lock:a").await);

        in_flight.abort();
        let _ = in_flight.await;
        tokio::task::yield_now().await;

        assert!(is_free(&store, "lock:a").await);
    }

    /// A store that is always down.
    #[derive(Debug)]
    struct DownBackend;

    impl LockBackend for DownBackend {
        async fn acquire(
            &self,
            _: &str,
            _: OwnerToken,
            _: Duration,
        ) -> Result<Acquire, BackendError> {
            Err(BackendError::new("connection refused"))
        }

        async fn extend(&self, _: &str, _: OwnerToken, _: Duration) -> Result<bool, BackendError> {
            Err(BackendError::new("connection refused"))
        }

        async fn release(&self, _: &str, _: OwnerToken) -> Result<bool, BackendError> {
            Err(BackendError::new("connection refused"))
        }
    }

    fn counting_app(layer: LockLayer<DownBackend, KeyTemplate>, runs: Arc<AtomicUsize>) -> Router {
        Router::new()
            .route(
                "/coupons/{id}/claim",
                post(move || async move { runs.fetch_add(1, Ordering::SeqCst).to_string() }),
            )
            .route_layer(layer)
    }

    #[tokio::test]
    async fn a_down_store_is_answered_503_and_the_handler_never_runs() {
        let runs = Arc::new(AtomicUsize::new(0));
        let app = counting_app(LockLayer::new(DownBackend, coupon_key()), runs.clone());

        let (status, headers, body) = send(&app, claim("7")).await;

        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers["retry-after"], "1");
        assert!(
            !body.contains("refused"),
            "internals stay in the logs: {body}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn fail_open_runs_the_handler_when_the_store_is_down() {
        let runs = Arc::new(AtomicUsize::new(0));
        let app = counting_app(
            LockLayer::new(DownBackend, coupon_key()).fail_open(),
            runs.clone(),
        );

        assert_eq!(send(&app, claim("7")).await.0, StatusCode::OK);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// A store that never answers.
    #[derive(Debug)]
    struct HangingBackend;

    impl LockBackend for HangingBackend {
        async fn acquire(
            &self,
            _: &str,
            _: OwnerToken,
            _: Duration,
        ) -> Result<Acquire, BackendError> {
            std::future::pending().await
        }

        async fn extend(&self, _: &str, _: OwnerToken, _: Duration) -> Result<bool, BackendError> {
            std::future::pending().await
        }

        async fn release(&self, _: &str, _: OwnerToken) -> Result<bool, BackendError> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_does_not_answer_is_unavailable_after_the_store_timeout() {
        let layer =
            LockLayer::new(HangingBackend, coupon_key()).store_timeout(Duration::from_millis(300));
        let app = Router::new()
            .route("/coupons/{id}/claim", post(|| async { "claimed" }))
            .route_layer(layer);
        let started = tokio::time::Instant::now();

        assert_eq!(
            send(&app, claim("7")).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }
}

#[cfg(test)]
mod lease_tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::key::header;
    use crate::{LockLayer, MemoryBackend};

    const TTL: Duration = Duration::from_millis(300);

    /// The memory backend, counting calls.
    type CountingBackend = crate::backend::CountingBackend<MemoryBackend>;

    fn counting() -> CountingBackend {
        CountingBackend::new(MemoryBackend::new())
    }

    fn request() -> Request<Body> {
        Request::post("/")
            .header("x-key", "a")
            .body(Body::empty())
            .unwrap()
    }

    async fn send(app: &Router) -> (StatusCode, String) {
        let response = app.clone().oneshot(request()).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// A route whose handler works for `work`, then answers whether it still held its lock.
    fn slow_app(
        layer: LockLayer<CountingBackend, crate::key::Header>,
        work: Duration,
        finished: Arc<AtomicBool>,
    ) -> Router {
        Router::new()
            .route(
                "/",
                post(
                    move |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                        tokio::time::sleep(work).await;
                        finished.store(true, Ordering::SeqCst);
                        lock.is_held().to_string()
                    },
                ),
            )
            .route_layer(layer)
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_running_three_ttls_keeps_its_lock_by_renewal() {
        let backend = counting();
        let layer = LockLayer::new(backend.clone(), header("x-key"))
            .ttl(TTL)
            .reject();
        let app = slow_app(layer, TTL * 3, Arc::default());
        let holder = tokio::spawn({
            let app = app.clone();
            async move { send(&app).await }
        });

        for _ in 0..8 {
            tokio::time::sleep(TTL / 3).await;
            assert_eq!(
                send(&app).await.0,
                StatusCode::CONFLICT,
                "the key stays locked"
            );
        }

        assert_eq!(holder.await.unwrap(), (StatusCode::OK, "true".to_owned()));
        assert!(backend.counts().extends >= 8, "renewed every TTL/3");
    }

    #[tokio::test(start_paused = true)]
    async fn without_renewal_a_slow_handler_loses_its_lock_and_is_aborted() {
        let backend = counting();
        let finished = Arc::new(AtomicBool::new(false));
        let layer = LockLayer::new(backend.clone(), header("x-key"))
            .ttl(TTL)
            .renew(false);
        let app = slow_app(layer.clone(), TTL * 2, finished.clone());

        let (status, body) = send(&app).await;
        tokio::time::sleep(TTL * 2).await;

        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("urn:tower-lock:lock-lost"), "{body}");
        assert!(
            !finished.load(Ordering::SeqCst),
            "no step after the loss ran"
        );
        assert_eq!(backend.counts().extends, 0);
        assert_eq!(layer.active_leases(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn with_on_lost_continue_the_handler_finishes_and_sees_the_loss() {
        let finished = Arc::new(AtomicBool::new(false));
        let layer = LockLayer::new(counting(), header("x-key"))
            .ttl(TTL)
            .renew(false)
            .on_lost(OnLost::Continue);
        let app = slow_app(layer, TTL * 2, finished.clone());

        assert_eq!(send(&app).await, (StatusCode::OK, "false".to_owned()));
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_taken_by_someone_else_is_lost_at_the_next_renewal() {
        let backend = counting();
        let store = backend.inner().clone();
        let finished = Arc::new(AtomicBool::new(false));
        let app = Router::new()
            .route(
                "/",
                post({
                    let finished = finished.clone();
                    move |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                        // Somebody deletes the lock and takes it: an operator, or a store failover.
                        store.release(lock.name(), lock.token()).await.unwrap();
                        store
                            .acquire(lock.name(), OwnerToken::new(), TTL * 10)
                            .await
                            .unwrap();
                        tokio::time::sleep(TTL).await;
                        finished.store(true, Ordering::SeqCst);
                    }
                }),
            )
            .route_layer(LockLayer::new(backend, header("x-key")).ttl(TTL));
        let started = tokio::time::Instant::now();

        let (status, _) = send(&app).await;

        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(started.elapsed(), TTL / 3, "found at the first renewal");
        assert!(!finished.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn no_renewal_is_sent_after_release_or_cancellation() {
        let backend = counting();
        let layer = LockLayer::new(backend.clone(), header("x-key")).ttl(TTL);
        let app = slow_app(layer.clone(), TTL, Arc::default());
        send(&app).await;
        let cancelled = tokio::spawn({
            let app = app.clone();
            async move { send(&app).await }
        });
        tokio::time::sleep(TTL / 2).await;
        cancelled.abort();
        let _ = cancelled.await;
        let extends = backend.counts().extends;

        tokio::time::sleep(TTL * 10).await;

        assert_eq!(backend.counts().extends, extends);
        assert_eq!(layer.active_leases(), 0);
    }
}
