//! The connections the Redis backend sends its commands on: one Redis node's, or a Redis
//! Cluster's.

use redis::aio::{ConnectionLike, ConnectionManager};
#[cfg(feature = "redis-cluster")]
use redis::cluster_async::ClusterConnection;

/// A connection the Redis backend sends its commands on: a [`ConnectionManager`] (one Redis
/// node: `RedisBackend::connect`) or, with the `redis-cluster` feature, redis-rs's
/// `ClusterConnection` (Redis Cluster: `RedisBackend::connect_cluster`). Sealed: the backend
/// relies on how each one routes its commands.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static + sealed::Sealed {
    /// Whether the connection spans a cluster's shards: releases are then announced with
    /// sharded pub/sub (`SPUBLISH`, heard by `SSUBSCRIBE` on the lock's shard), and several keys
    /// in different hash slots are taken one by one.
    #[doc(hidden)]
    const SHARDED: bool;
}

impl RedisConnection for ConnectionManager {
    const SHARDED: bool = false;
}

#[cfg(feature = "redis-cluster")]
impl RedisConnection for ClusterConnection {
    const SHARDED: bool = true;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for redis::aio::ConnectionManager {}
    #[cfg(feature = "redis-cluster")]
    impl Sealed for redis::cluster_async::ClusterConnection {}
}
