//! Run each HTTP request under a distributed lock.
//!
//! tower-lock is a [Tower](https://docs.rs/tower) layer (it works with axum): for every
//! request it extracts a lock key (`coupon:42`), takes the lock in a shared store, runs the
//! handler while holding it, and releases it with an atomic compare-and-delete afterwards —
//! also when the client disconnects. Replicas that share the store never run two requests on
//! the same key at once, so "read the stock, check, write" handlers cannot oversell.
//!
//! * [`LockLayer`] configures it: key prefix, lease TTL, wait or reject when busy, backoff,
//!   fail-closed or fail-open, busy status.
//! * [`key`] finds the key: a path parameter, a header, a query parameter, a template joining
//!   them, or any closure.
//! * [`RedisBackend`] shares locks between processes; [`MemoryBackend`] keeps them in one
//!   process (the embedded default, for single instances and tests).
//! * Handlers see the held lock as a [`LockGuard`] in the request extensions: its key, whether
//!   the lease is still held, and its fencing token ([`fencing`] shows how stores use it).
//! * While the handler runs, the lease is renewed every TTL/3; a lost lease aborts the handler
//!   with 503, or lets it finish with [`OnLost::Continue`].
//!
//! | situation | answer |
//! |---|---|
//! | lock busy (`reject()`, or the wait timed out) | 409, `Retry-After`, problem+json |
//! | no valid key in the request | 400, problem+json naming what is missing |
//! | store unreachable | 503, `Retry-After` (or the handler runs unlocked with `fail_open()`) |
//! | lease lost while the handler ran (`OnLost::Abort`) | 503, `Retry-After`, problem type `lock-lost` |
//!
//! # Example
//!
//! ```
//! use axum::{Router, body::Body, routing::post};
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//! use tower_lock::{LockLayer, MemoryBackend, key::KeyTemplate};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let lock = LockLayer::new(MemoryBackend::new(), KeyTemplate::parse("coupon:{path id}").unwrap());
//! let app = Router::new()
//!     .route("/coupons/{id}/claim", post(|| async { "claimed" }))
//!     .route_layer(lock);
//!
//! let claim = Request::post("/coupons/42/claim").body(Body::empty()).unwrap();
//! let response = app.oneshot(claim).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! # }
//! ```
//!
//! With axum, apply the layer with `route_layer` or `Router::layer`, so it runs after routing
//! and sees path parameters. Two nested layers that resolve to the same lock for a request do
//! not wait for each other: the inner one sees the outer lock and passes the request through.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod acquire;
pub mod backend;
#[doc = include_str!("../../docs/fencing.md")]
pub mod fencing {}
mod error;
mod future;
mod guard;
pub mod key;
mod layer;
mod lease;
mod policy;
mod service;
#[cfg(test)]
mod shape_tests;
mod token;
#[cfg(test)]
mod wait_tests;
mod waiting;

#[cfg(feature = "redis")]
pub use backend::redis::RedisBackend;
pub use backend::{Acquire, AcquireMany, BackendError, Hold, LockBackend, memory::MemoryBackend};
pub use error::LockError;
pub use future::ResponseFuture;
pub use guard::LockGuard;
pub use layer::LockLayer;
pub use policy::{Backoff, BusyPolicy, LockMode, OnLost, WaitMode};
pub use service::LockService;
pub use token::OwnerToken;
