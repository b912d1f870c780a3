use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequestParts, MatchedPath, OriginalUri, RawPathParams};
use http::request::Parts;

use super::{KeyError, KeyExtractor};

/// Takes the key from a path parameter of the matched axum route (percent-decoded), named
/// after the resource it identifies: the path segment before the parameter.
///
/// | route | request | key |
/// |---|---|---|
/// | `/coupons/{id}/claim` | `/coupons/42/claim` | `coupons:42` |
/// | `/coupons/{id}` | `/coupons/42` | `coupons:42` (the same lock) |
/// | `/orders/{id}` | `/orders/42` | `orders:42` (another lock) |
/// | `/{id}` | `/42` | `id:42` (no segment before it: the parameter's name) |
///
/// For a name of your own, use a [`KeyTemplate`](super::KeyTemplate) such as
/// `coupon:{path id}`, whose placeholder is the bare value.
///
/// The parameter is visible when the layer runs after routing: apply it with
/// `Router::route_layer` or `Router::layer`, or on a single method router. A request that
/// matched no route passes through unlocked (axum's fallback answers it, 404 by default).
/// Around a whole `Router` (with `ServiceBuilder` on the outside) no route has matched yet:
/// every request is then answered 500 saying that the layer runs before routing.
///
/// Built by [`path`].
#[derive(Clone, Debug)]
pub struct PathParam {
    name: String,
}

/// Locks on path parameter `name`, scoped by the resource it names: `path("id")` on the route
/// `/coupons/{id}/claim` locks `coupons:42`.
///
/// # Example
///
/// ```
/// use axum::{Router, routing::post};
/// use tower_lock::{LockLayer, Locker, MemoryBackend, key::path};
///
/// let app: Router = Router::new()
///     .route("/coupons/{id}/claim", post(|| async { "claimed" }))
///     .route_layer(LockLayer::new(Locker::new(MemoryBackend::new()), path("id")));
/// ```
pub fn path(name: impl Into<String>) -> PathParam {
    PathParam { name: name.into() }
}

impl PathParam {
    /// The parameter's value; `None` when the request went through a router but matched no
    /// route.
    pub(super) fn read(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        if parts.extensions.get::<MatchedPath>().is_none() {
            return if parts.extensions.get::<OriginalUri>().is_some() {
                Ok(None)
            } else {
                Err(KeyError::BeforeRouting(self.name.clone()))
            };
        }
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
                .map(|(_, value)| Some(value.to_owned()))
                .ok_or_else(missing),
            Poll::Ready(Err(RawPathParamsRejection::InvalidUtf8InPathParam(_))) => {
                Err(KeyError::InvalidPathParam(self.name.clone()))
            }
            Poll::Ready(Err(_)) | Poll::Pending => Err(missing()),
        }
    }

    /// The resource the parameter names in `route`: the literal segment before it, else the
    /// parameter's name.
    fn resource<'a>(&'a self, route: &'a str) -> &'a str {
        let segments: Vec<&str> = route.split('/').collect();
        let is_param = |segment: &str| {
            let inner = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
            inner.is_some_and(|inner| inner.trim_start_matches('*') == self.name)
        };
        segments
            .iter()
            .position(|segment| is_param(segment))
            .and_then(|index| index.checked_sub(1))
            .map(|before| segments[before])
            .filter(|segment| !segment.is_empty() && !segment.contains(['{', '}']))
            .unwrap_or(&self.name)
    }
}

impl KeyExtractor for PathParam {
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        let Some(value) = self.read(parts)? else {
            return Ok(None);
        };
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map_or("", MatchedPath::as_str);
        Ok(Some(format!("{}:{value}", self.resource(route))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_is_the_segment_before_the_parameter() {
        let id = path("id");
        assert_eq!(id.resource("/coupons/{id}/claim"), "coupons");
        assert_eq!(id.resource("/api/v1/orders/{id}"), "orders");
        assert_eq!(path("rest").resource("/files/{*rest}"), "files");
    }

    #[test]
    fn without_a_literal_segment_before_it_the_parameter_names_the_resource() {
        let id = path("id");
        assert_eq!(id.resource("/{id}"), "id");
        assert_eq!(id.resource("/{tenant}/{id}"), "id");
    }
}
