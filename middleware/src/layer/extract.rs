//! [`LockGuard`] and [`LockGuards`] as axum extractors, and [`NoLockGuard`], the answer when no
//! lock layer ran for the request.

use std::convert::Infallible;
use std::fmt;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;

use super::guards::LockGuards;
use super::rejection::problem;
use crate::engine::LockGuard;

/// A handler took a [`LockGuard`] or [`LockGuards`] but no [`LockLayer`](crate::LockLayer)
/// locked its request: the route has no lock layer, the request had no key, or the layer
/// failed open.
///
/// Answered 500 with an `application/problem+json` body of type `urn:tower-lock:not-locked`:
/// the application is wired wrong, the client can do nothing about it. A handler that may run
/// unlocked takes `Option<LockGuard>` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoLockGuard;

impl fmt::Display for NoLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the handler takes a LockGuard, but no lock layer locked this request; \
             apply a LockLayer to its route, or take Option<LockGuard>",
        )
    }
}

impl std::error::Error for NoLockGuard {}

impl IntoResponse for NoLockGuard {
    fn into_response(self) -> Response {
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        let detail = self.to_string();
        let answer = problem(
            status,
            "urn:tower-lock:not-locked",
            "handler not behind a lock",
            &detail,
        );
        answer.into_response()
    }
}

/// Implements both extractors for a type the layer puts in the request's extensions.
macro_rules! extract_from_extensions {
    ($locks:ty, $what:literal) => {
        #[doc = concat!($what, "; [`NoLockGuard`] (500) when no layer locked the request.")]
        impl<S: Send + Sync> FromRequestParts<S> for $locks {
            type Rejection = NoLockGuard;

            async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, NoLockGuard> {
                parts.extensions.get().cloned().ok_or(NoLockGuard)
            }
        }

        #[doc = concat!($what, ", or `None` when the request runs unlocked.")]
        impl<S: Send + Sync> OptionalFromRequestParts<S> for $locks {
            type Rejection = Infallible;

            async fn from_request_parts(
                parts: &mut Parts,
                _: &S,
            ) -> Result<Option<Self>, Infallible> {
                Ok(parts.extensions.get().cloned())
            }
        }
    };
}

extract_from_extensions!(LockGuard, "The innermost lock layer's guard");
extract_from_extensions!(LockGuards, "Every lock layer's guard");
