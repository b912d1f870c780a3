//! Distributed locks for Rust services: a Tower layer that runs each HTTP request under a lock,
//! and the lock engine behind it, usable from any code.
//!
//! For every request the layer extracts a lock key (`coupon:42`), takes the lock in a store
//! shared by all replicas, runs the handler while holding it, and releases it with an atomic
//! compare-and-delete afterwards — also when the client disconnects. Replicas that share the
//! store never run two requests on the same key at once, so "read the stock, check, write"
//! handlers cannot oversell. Background jobs and queue consumers take the same locks through
//! the engine.
//!
//! * [`LockLayer`] (with [`key`] extractors) puts the lock around HTTP handlers, which take it
//!   as a [`LockGuard`] argument ([`LockGuards`] for every lock of nested layers).
//! * [`Locker`] is the engine: [`lock`](Locker::lock), [`with_lock`](Locker::with_lock),
//!   [`read`](Locker::read)/[`write`](Locker::write), [`permit`](Locker::permit),
//!   [`lock_all`](Locker::lock_all). A [`HeldLock`] renews its lease every TTL/3, reports its
//!   loss ([`LockGuard::is_held`], [`LockGuard::lost`]), carries a fencing token
//!   ([`fencing`] shows how stores use it) and is released on drop.
//! * [`backend`] holds the contract every store implements, and the stores, each behind its
//!   feature: [`RedisBackend`] (`redis`; one node, `redis-cluster`, `redis-sentinel`) and
//!   [`RedlockBackend`] (`redis`), [`PostgresBackend`] and [`AdvisoryBackend`] (`postgres`),
//!   [`MysqlBackend`] and [`NowaitBackend`] (`mysql`), [`EtcdBackend`] (`etcd`) and
//!   [`ZookeeperBackend`] (`zookeeper`) share locks between processes; [`MemoryBackend`] keeps
//!   them in one process (the embedded default, for single instances and tests);
//!   [`backend::any::AnyBackend`] is whichever store a URL names, chosen at run time. A store
//!   with [`backend::Inspect`] answers an operator's questions ([`Locker::inspect`],
//!   [`Locker::force_release`]).
//!
//! | situation | the layer answers | the engine returns |
//! |---|---|---|
//! | lock busy (`reject()`, or the wait timed out) | 409, `Retry-After`, problem+json | [`LockError::Busy`] |
//! | no valid key | 400, problem+json naming what is missing | [`LockError::InvalidKey`] |
//! | store unreachable | 503, `Retry-After` (or the handler runs unlocked with `fail_open()`) | [`LockError::StoreUnavailable`] |
//! | lease lost while the work ran (`OnLost::Abort`) | 503, `Retry-After`, problem type `lock-lost` | [`LockError::LeaseLost`] |
//!
//! # The layer
//!
//! ```
//! use axum::{Router, body::Body, routing::post};
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//! use tower_lock::{LockLayer, Locker, MemoryBackend, key::KeyTemplate};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let locker = Locker::new(MemoryBackend::new());
//! let lock = LockLayer::new(locker, KeyTemplate::parse("coupon:{path id}").unwrap());
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
//! Handlers behind layers on different locks reach all of them through [`LockGuards`].
//!
//! # The engine, without HTTP
//!
//! ```
//! use std::time::Duration;
//! use tower_lock::{Locker, MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locker = Locker::builder(MemoryBackend::new())
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .build()?;
//!
//! // A nightly job that must not run twice at once, across every replica.
//! let rows = locker
//!     .with_lock("job:nightly-export", |lock| async move {
//!         assert!(lock.is_held());
//!         42 // ... export, writing with `lock.fence()` ...
//!     })
//!     .await?;
//! assert_eq!(rows, 42);
//! # Ok(()) }
//! ```
// The stores' links: to the item where its feature is built, else to the published docs.
#![cfg_attr(
    feature = "redis",
    doc = "[`RedisBackend`]: backend::redis::RedisBackend"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`RedisBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/redis/struct.RedisBackend.html"
)]
#![cfg_attr(
    feature = "redis",
    doc = "[`RedlockBackend`]: backend::redis::RedlockBackend"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`RedlockBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/redis/struct.RedlockBackend.html"
)]
#![cfg_attr(
    feature = "postgres",
    doc = "[`PostgresBackend`]: backend::postgres::PostgresBackend"
)]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`PostgresBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/postgres/struct.PostgresBackend.html"
)]
#![cfg_attr(
    feature = "postgres",
    doc = "[`AdvisoryBackend`]: backend::postgres::AdvisoryBackend"
)]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`AdvisoryBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/postgres/struct.AdvisoryBackend.html"
)]
#![cfg_attr(
    feature = "mysql",
    doc = "[`MysqlBackend`]: backend::mysql::MysqlBackend"
)]
#![cfg_attr(
    not(feature = "mysql"),
    doc = "[`MysqlBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/mysql/struct.MysqlBackend.html"
)]
#![cfg_attr(
    feature = "mysql",
    doc = "[`NowaitBackend`]: backend::mysql::NowaitBackend"
)]
#![cfg_attr(
    not(feature = "mysql"),
    doc = "[`NowaitBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/mysql/struct.NowaitBackend.html"
)]
#![cfg_attr(feature = "etcd", doc = "[`EtcdBackend`]: backend::etcd::EtcdBackend")]
#![cfg_attr(
    not(feature = "etcd"),
    doc = "[`EtcdBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/etcd/struct.EtcdBackend.html"
)]
#![cfg_attr(
    feature = "zookeeper",
    doc = "[`ZookeeperBackend`]: backend::zookeeper::ZookeeperBackend"
)]
#![cfg_attr(
    not(feature = "zookeeper"),
    doc = "[`ZookeeperBackend`]: https://docs.rs/tower-lock/latest/tower_lock/backend/zookeeper/struct.ZookeeperBackend.html"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// Whether the re-introduced bug `name` is switched on: only in a build with the `simulation`
/// feature (the simulator's), where `testing::mutants` switches one on by name; `false` in
/// every other build, which carries none of them.
#[cfg(feature = "simulation")]
macro_rules! mutant {
    ($name:literal) => {
        $crate::testing::mutants::active($name)
    };
}
#[cfg(not(feature = "simulation"))]
macro_rules! mutant {
    ($name:literal) => {
        false
    };
}

/// A point where a simulation may stall the task that reaches it (`testing::stalls`), as a GC
/// pause or a descheduled thread would; nothing in a build without the `simulation` feature.
#[cfg(feature = "simulation")]
macro_rules! stall_point {
    ($name:literal) => {
        $crate::testing::stalls::at($name).await
    };
}
#[cfg(not(feature = "simulation"))]
macro_rules! stall_point {
    ($name:literal) => {};
}

pub mod backend;
mod background;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod engine;
#[doc = include_str!("../docs/fencing.md")]
pub mod fencing {}
pub mod key;
mod layer;
#[cfg(test)]
mod test_support;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
mod token;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The guide's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/GUIDE.md")]
struct GuideDoctests;

#[cfg(feature = "redis")]
pub use backend::redis::RedisBackend;
pub use backend::{Ask, FencingToken, Hold, memory::MemoryBackend};
pub use engine::{
    ConfigError, HeldLock, LeaseLost, LockError, LockGuard, Locker, LockerBuilder, OnLost,
    telemetry,
};
#[cfg(feature = "axum")]
pub use layer::NoLockGuard;
pub use layer::{
    BodyError, LockGuards, LockLayer, LockService, Rejection, ResponseBody, ResponseFuture,
};
