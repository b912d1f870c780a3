use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequestParts, RawPathParams};
use http::request::Parts;

use super::{KeyError, KeyExtractor};

/// Takes the key from a path parameter of the matched axum route (percent-decoded).
///
/// The parameter is visible when the layer runs after routing: apply it with
/// `Router::route_layer` or `Router::layer`, or on a single method router. Around a whole
/// `Router` (e.g. `ServiceBuilder` on the outside) no route has matched yet, and every request
/// is answered 400 "path parameter is missing".
///
/// Built by [`path`].
#[derive(Clone, Debug)]
pub struct PathParam {
    name: String,
}

/// Locks on path parameter `name`, e.g. `path("id")` for the route `/coupons/{id}/claim`.
///
/// # Example
///
/// ```
/// use axum::{Router, routing::post};
/// use tower_lock::{LockLayer, MemoryBackend, key::path};
///
/// let app: Router = Router::new()
///     .route("/coupons/{id}/claim", post(|| async { "claimed" }))
///     .route_layer(LockLayer::new(MemoryBackend::new(), path("id")));
/// ```
pub fn path(name: impl Into<String>) -> PathParam {
    PathParam { name: name.into() }
}

impl PathParam {
    pub(super) fn read(&self, parts: &Parts) -> Result<String, KeyError> {
        let missing = || KeyError::MissingPathParam(self.name.clone());
        // axum keeps the matched parameters in a private extension that only its extractors
        // read; they need `&mut Parts`, so they run on a copy holding just the extensions.
        let mut scratch = http::Request::new(()).into_parts().0;
        scratch.extensions = parts.extensions.clone();
        let extraction = pin!(RawPathParams::from_request_parts(&mut scratch, &()));
        // The extractor never awaits: it is ready on its first poll.
        match extraction.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(params)) => params
                .iter()
                .find(|(name, _)| *name == self.name)
                .map(|(_, value)| value.to_owned())
                .ok_or_else(missing),
            Poll::Ready(Err(RawPathParamsRejection::InvalidUtf8InPathParam(_))) => {
                Err(KeyError::InvalidPathParam(self.name.clone()))
            }
            Poll::Ready(Err(_)) | Poll::Pending => Err(missing()),
        }
    }
}

impl KeyExtractor for PathParam {
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        self.read(parts).map(Some)
    }
}
