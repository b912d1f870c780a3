//! The connections the Redis backend sends its commands on: one Redis node's, or a Redis
//! Cluster's.

#[cfg(feature = "redis-cluster")]
use super::ClusterLink;
use redis::aio::{ConnectionLike, ConnectionManager};

#[cfg(feature = "redis-sentinel")]
use super::SentinelConnection;

/// A connection the Redis backend sends its commands on: a [`ConnectionManager`] (one Redis
/// node: `RedisBackend::connect`), with the `redis-cluster` feature a `ClusterLink` (Redis
/// Cluster: `RedisBackend::connect_cluster`) or redis-rs's `ClusterConnection`
/// (`RedisBackend::from_cluster_connection`), or with the
/// `redis-sentinel` feature a `SentinelConnection` (the master Sentinels name:
/// `RedisBackend::connect_sentinel`). Sealed: the backend relies on how each one routes its
/// commands.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static + sealed::Sealed {
    /// Whether the connection spans a cluster's shards: releases are then announced with
    /// sharded pub/sub (`SPUBLISH`, heard by `SSUBSCRIBE` on the lock's shard), and several keys
    /// in different hash slots are taken one by one.
    #[doc(hidden)]
    const SHARDED: bool;

    /// A connection to one node that holds keys.
    #[doc(hidden)]
    type KeyNode: ConnectionLike + Clone + Send;

    /// The nodes whose keys together are the store's (a cluster's masters), in order of their
    /// addresses (`host:port`; one node: an empty address), each with a connection to it
    /// alone; `None` where the connection cannot address one node.
    #[doc(hidden)]
    fn key_nodes(&self) -> Option<Vec<(String, Self::KeyNode)>>;
}

impl RedisConnection for ConnectionManager {
    const SHARDED: bool = false;
    type KeyNode = Self;

    fn key_nodes(&self) -> Option<Vec<(String, Self)>> {
        Some(vec![(String::new(), self.clone())])
    }
}

#[cfg(feature = "redis-cluster")]
impl RedisConnection for ClusterLink {
    const SHARDED: bool = true;
    type KeyNode = ConnectionManager;

    fn key_nodes(&self) -> Option<Vec<(String, ConnectionManager)>> {
        Some(self.masters())
    }
}

/// redis-rs's cluster connection routes by key: it cannot be asked for one node's keys.
#[cfg(feature = "redis-cluster")]
impl RedisConnection for redis::cluster_async::ClusterConnection {
    const SHARDED: bool = true;
    type KeyNode = Self;

    fn key_nodes(&self) -> Option<Vec<(String, Self)>> {
        None
    }
}

#[cfg(feature = "redis-sentinel")]
impl RedisConnection for SentinelConnection {
    const SHARDED: bool = false;
    type KeyNode = Self;

    fn key_nodes(&self) -> Option<Vec<(String, Self)>> {
        Some(vec![(String::new(), self.clone())])
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for redis::aio::ConnectionManager {}
    #[cfg(feature = "redis-cluster")]
    impl Sealed for super::ClusterLink {}
    #[cfg(feature = "redis-cluster")]
    impl Sealed for redis::cluster_async::ClusterConnection {}
    #[cfg(feature = "redis-sentinel")]
    impl Sealed for super::SentinelConnection {}
}
