//! [`LockService`]: find the key, read the body, take the lock, then let the inner service run
//! under it until its response body ends.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::poll_fn;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::{BodyLock, BoxError, ResponseBody, release_logged};
use super::future::ResponseFuture;
use super::guards::LockGuards;
use super::lock_layer::Config;
use super::rejection::Rejection;
use crate::backend::LockBackend;
use crate::engine::{LockError, OnLost};
use crate::key::KeyExtractor;

/// Runs the inner service under the request's lock. Built by [`LockLayer`](crate::LockLayer).
///
/// Locking happens in `call`, never in `poll_ready`: the key comes from the request. The inner
/// service's readiness is awaited once the lock is held, so a request waiting for its lock
/// holds no slot of a concurrency limit or buffer below; `poll_ready` is therefore always
/// ready.
pub struct LockService<S, B: LockBackend, K> {
    inner: S,
    config: Arc<Config<B, K>>,
}

impl<S, B: LockBackend, K> LockService<S, B, K> {
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
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    #[inline]
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let inner = self.inner.clone();
        ResponseFuture::new(call_locked(Arc::clone(&self.config), inner, request))
    }
}

/// The pattern of the route that matched the request (`/coupons/{id}`), to group its lock's
/// metrics by; known behind an axum router.
fn route(parts: &http::request::Parts) -> Option<&str> {
    #[cfg(feature = "axum")]
    if let Some(path) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return Some(path.as_str());
    }
    #[cfg(not(feature = "axum"))]
    let _ = parts;
    None
}

/// Finds the request's key, reads its body, takes the lock with the layer's locker and runs
/// `inner` under it; the response body keeps the lock until it ends. Answers instead of
/// `inner` when the request has no valid key or readable body, the lock stays busy, the store
/// is down (unless the layer fails open) or the lease is lost (unless it lets handlers go on).
async fn call_locked<S, B, K, ReqBody, ResBody>(
    config: Arc<Config<B, K>>,
    inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    B: LockBackend,
    K: KeyExtractor,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (mut parts, body) = request.into_parts();
    let keys = match config.extractor.extract_keys(&parts) {
        Ok(keys) if keys.is_empty() => return call_unlocked(inner, parts, body).await,
        Ok(keys) => keys,
        Err(error) => {
            let ask = config.mode.ask_for(&parts);
            config.locker.count_invalid_key(ask, route(&parts));
            return Ok(config.refuse(error.into()));
        }
    };
    let body = match config.request_body.prepare(&parts.headers, body).await {
        Ok(body) => body,
        Err(error) => return Ok(config.refuse(error.into())),
    };
    let ask = config.mode.ask_for(&parts);
    let held = match config.locker.acquire(&keys, ask, route(&parts)).await {
        Ok(held) => held,
        Err(LockError::StoreUnavailable(error)) if config.fail_open => {
            tracing::warn!(?keys, %error, "lock store unavailable; running unlocked (fail-open)");
            return call_unlocked(inner, parts, body).await;
        }
        Err(error) => return Ok(config.refuse(error.into())),
    };
    let guard = held.guard();
    let guards = parts.extensions.remove::<LockGuards>().unwrap_or_default();
    parts.extensions.insert(guards.with_inner(guard));
    parts.extensions.insert(guard.clone());
    match held.run(call_ready(inner, parts, body)).await {
        Ok((Ok(response), held)) => {
            let abort_on_lost = config.locker.on_lost() == OnLost::Abort;
            let (parts, body) = response.into_parts();
            let held = Box::new(held) as Box<dyn BodyLock>;
            let body = ResponseBody::holding(body, held, abort_on_lost).await;
            Ok(Response::from_parts(parts, body))
        }
        Ok((Err(error), held)) => {
            release_logged(held).await;
            Err(error)
        }
        Err(error) => Ok(config.refuse(error.into())),
    }
}

/// Runs `inner` once it is ready.
async fn call_ready<S, ReqBody>(
    mut inner: S,
    parts: http::request::Parts,
    body: ReqBody,
) -> Result<S::Response, S::Error>
where
    S: Service<Request<ReqBody>>,
{
    poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(Request::from_parts(parts, body)).await
}

async fn call_unlocked<S, ReqBody, ResBody>(
    inner: S,
    parts: http::request::Parts,
    body: ReqBody,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let response = call_ready(inner, parts, body).await?;
    Ok(response.map(ResponseBody::unlocked))
}

impl<B: LockBackend, K> Config<B, K> {
    /// The layer's answer to `rejection`: its hook's, or the problem document with the busy
    /// status for a busy lock.
    fn refuse<ResBody>(&self, rejection: Rejection) -> Response<ResponseBody<ResBody>> {
        let status = match &rejection {
            Rejection::Lock(LockError::Busy { .. }) => self.busy_status,
            other => other.status(),
        };
        if status.is_server_error() {
            tracing::warn!(error = %rejection, "answered {status}");
        } else {
            tracing::debug!(error = %rejection, "answered {status}");
        }
        let response = match &self.on_rejection {
            Some(respond) => respond(rejection),
            None => rejection.into_response_with_status(status).map(Bytes::from),
        };
        response.map(ResponseBody::answer)
    }
}

impl<S: Clone, B: LockBackend, K> Clone for LockService<S, B, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, B: LockBackend + fmt::Debug, K> fmt::Debug for LockService<S, B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("config", &*self.config)
            .finish()
    }
}
