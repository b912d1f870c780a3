//! [`LockService`]: acquire, run the inner service, release.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use tower_service::Service;

use crate::acquire::{NotObtained, acquire};
use crate::guard::{HeldLock, HeldLocks};
use crate::key::{KeyError, KeyExtractor, validate_key};
use crate::layer::Config;
use crate::{LockBackend, LockError, LockGuard, OwnerToken, ResponseFuture};

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
    let name = match lock_name(&config, &parts) {
        Ok(Some(name)) => name,
        Ok(None) => return inner.call(Request::from_parts(parts, body)).await,
        Err(error) => {
            tracing::debug!(%error, "request has no valid lock key");
            return Ok(LockError::InvalidKey(error).into_response());
        }
    };
    let held = parts.extensions.get::<HeldLocks>().cloned().unwrap_or_default();
    if held.holds(&name) {
        tracing::trace!(lock = name, "already held by an outer layer");
        return inner.call(Request::from_parts(parts, body)).await;
    }

    let token = OwnerToken::new();
    let fence = match acquire(&config.backend, &name, token, config.plan).await {
        Ok(fence) => fence,
        Err(NotObtained::Busy { holder_ttl }) => {
            let key = name[config.prefix.len()..].to_owned();
            tracing::debug!(lock = name, ?holder_ttl, "busy");
            return Ok(LockError::Busy { key, holder_ttl }
                .into_response_with_status(config.busy_status));
        }
        Err(NotObtained::StoreUnavailable) if config.fail_open => {
            tracing::warn!(lock = name, "lock store unavailable; running unlocked (fail-open)");
            return inner.call(Request::from_parts(parts, body)).await;
        }
        Err(NotObtained::StoreUnavailable) => {
            return Ok(LockError::StoreUnavailable.into_response());
        }
    };

    let guard = LockGuard::new(name, config.prefix.len(), token, fence);
    tracing::trace!(lock = guard.name(), fence, "acquired");
    let lock = HeldLock::new(
        Arc::clone(&config.backend),
        guard.clone(),
        config.plan.store_timeout,
    );
    parts.extensions.insert(held.with(guard.clone()));
    parts.extensions.insert(guard);
    let result = inner.call(Request::from_parts(parts, body)).await;
    lock.release().await;
    result
}

/// The request's full lock name (prefix and key), `None` when it is not locked.
fn lock_name<B, K: KeyExtractor>(
    config: &Config<B, K>,
    parts: &Parts,
) -> Result<Option<String>, KeyError> {
    let Some(key) = config.extractor.extract(parts)? else {
        return Ok(None);
    };
    validate_key(&key, config.max_key_len)?;
    Ok(Some(format!("{}{key}", config.prefix)))
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
