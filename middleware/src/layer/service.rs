//! [`LockService`]: find the key, take the lock, run the inner service under it, release it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::future::ResponseFuture;
use super::lock_layer::Config;
use super::problem::key_problem;
use crate::LockError;
use crate::backend::LockBackend;
use crate::engine::Ran;
use crate::key::KeyExtractor;

/// Runs the inner service under the request's lock. Built by [`LockLayer`](crate::LockLayer).
///
/// Locking happens in `call`, never in `poll_ready`: the key comes from the request.
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

/// Takes the request's lock with the layer's locker and runs `inner` under it; answers
/// instead of `inner` when the request has no valid key, the lock stays busy, the store is
/// down (unless the layer fails open) or the lease is lost (unless it lets handlers go on).
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
    let keys = match config.extractor.extract_keys(&parts) {
        Ok(keys) if keys.is_empty() => return inner.call(Request::from_parts(parts, body)).await,
        Ok(keys) => keys,
        Err(error) => {
            tracing::debug!(%error, "request has no valid lock key");
            return Ok(key_problem(&error));
        }
    };
    let ask = config.mode.ask_for(&parts);
    let acquisition = match config.locker.acquire(&keys, ask).await {
        Ok(acquisition) => acquisition,
        Err(LockError::StoreUnavailable(error)) if config.fail_open => {
            tracing::warn!(?keys, %error, "lock store unavailable; running unlocked (fail-open)");
            return inner.call(Request::from_parts(parts, body)).await;
        }
        Err(error) => return Ok(refuse(&config, error)),
    };
    parts.extensions.insert(acquisition.guard().clone());
    let call = inner.call(Request::from_parts(parts, body));
    match acquisition
        .run(call, config.locker.settings().on_lost)
        .await
    {
        Ran::Finished(response) => response,
        Ran::Aborted(error) => Ok(refuse(&config, error)),
    }
}

/// The layer's answer to `error`, with its busy status for a busy lock.
fn refuse<B: LockBackend, K, ResBody: From<String>>(
    config: &Config<B, K>,
    error: LockError,
) -> Response<ResBody> {
    let status = match error {
        LockError::Busy { .. } => config.busy_status,
        _ => error.status(),
    };
    if status.is_server_error() {
        tracing::warn!(%error, "answered {status}");
    }
    error.into_response_with_status(status)
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
