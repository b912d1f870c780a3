//! The Tower layer: each HTTP request runs under the lock its key names.
//!
//! * [`LockLayer`] configures it (the [`Locker`](crate::Locker) settings, the shape of lock per
//!   request, fail-open, the busy status, the request-body limit, the rejection hook) and builds
//!   a [`LockService`] per inner service.
//! * [`LockService::call`](tower_service::Service::call) finds the request's key with the
//!   layer's [`KeyExtractor`](crate::key::KeyExtractor), reads the request body, takes the lock
//!   through the engine, puts the [`LockGuard`](crate::LockGuard) in the request's extensions
//!   (and adds it to [`LockGuards`], which nested layers share), and runs the inner service
//!   (once it is ready) while the engine keeps the lease.
//! * Its [`ResponseFuture`] owns the lock while the inner service runs, its [`ResponseBody`]
//!   while the answer streams: the lock is released as the body ends, or in the background when
//!   either is dropped (the client went away, an outer timeout fired).
//! * Whatever stops a request is a [`Rejection`], answered as RFC 9457
//!   `application/problem+json` unless the layer's hook answers it.
//! * With the `axum` feature, handlers take the guards as extractors (`extract.rs`); without a
//!   lock the extraction answers `NoLockGuard`.
//!
//! The layer holds no lock logic of its own: everything but HTTP is the engine's.

mod body;
#[cfg(feature = "axum")]
mod extract;
mod future;
mod guards;
mod lock_layer;
mod mode;
mod rejection;
mod request_body;
mod service;
#[cfg(all(test, feature = "axum"))]
mod tests;

pub use body::ResponseBody;
#[cfg(feature = "axum")]
pub use extract::NoLockGuard;
pub use future::ResponseFuture;
pub use guards::LockGuards;
pub use lock_layer::LockLayer;
pub use rejection::Rejection;
pub use request_body::BodyError;
pub use service::LockService;
