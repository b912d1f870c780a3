//! How a Redis backend connects: to one node, to a Cluster, or on a connection of your own;
//! the connection settings every Redis connection of the crate shares.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
#[cfg(feature = "redis-cluster")]
use redis::cluster::ClusterClientBuilder;
#[cfg(feature = "redis-cluster")]
use redis::cluster_async::ClusterConnection;
use redis::{Client, ErrorKind, IntoConnectionInfo, RedisError};

#[cfg(feature = "redis-cluster")]
use super::ClusterLink;
use super::keys::LockKey;
use super::{RedisBackend, announcements};
use crate::backend::store_support::connect::{ConnectFailure, within};
use crate::backend::waiting::WaitingRoom;

/// How long to wait for a TCP connection to Redis before counting it as down.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest pause between two reconnection attempts, so a restarted Redis is picked up fast.
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(500);

pub(super) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_max_delay(MAX_RECONNECT_DELAY)
}

/// The settings of a connection that sends the locks' commands: one connection attempt per
/// reconnection, so that a refused connection fails the call at once instead of holding it
/// through a series of retries until the store timeout (the next call tries again), and no
/// limit of its own on how long an answer may take (the locker's store timeout bounds every
/// call, where the `redis` crate's default would cut answers off at 500 ms).
pub(super) fn commands_config() -> ConnectionManagerConfig {
    manager_config()
        .set_number_of_retries(0)
        .set_response_timeout(None)
}

impl RedisBackend<ConnectionManager> {
    /// Connects to the Redis server at `url` (e.g. `redis://127.0.0.1:6379/0`), with a second
    /// connection for release announcements.
    ///
    /// Fails when the server cannot be reached now; once connected, the backend reconnects by
    /// itself whenever a connection drops.
    ///
    /// The connection itself puts no limit on how long an answer may take: the
    /// [`Locker`](crate::Locker)'s store timeout (default 1 s) bounds every call, where the
    /// `redis` crate's own default would cut answers off at 500 ms whatever that timeout says.
    ///
    /// # Errors
    ///
    /// A URL that does not parse; a server that cannot be reached, or does not answer within
    /// 5 s (the error names its address).
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Self, RedisError> {
        choose_tls_crypto();
        let client = Client::open(url)?;
        let target = format!("Redis at {}", client.get_connection_info().addr());
        let connecting = async {
            let manager =
                ConnectionManager::new_with_config(client.clone(), commands_config()).await?;
            let room = announcements::waiting_room(&client).await?;
            Ok::<_, RedisError>(Self {
                room,
                ..Self::from_connection(manager)
            })
        };
        within(&target, connecting).await.map_err(unreachable)
    }

    /// Uses a connection manager you configured yourself (TLS, credentials, timeouts).
    /// A backend made this way hears no release announcements: its waiters retry on timers
    /// (in fair mode, still in arrival order).
    pub fn from_connection(connection: ConnectionManager) -> Self {
        Self::on(connection, WaitingRoom::silent())
    }

    /// The Redis key of lock `name` (the locker's prefix and the key, e.g. `lock:coupon:42`):
    /// `{lock:coupon:42}`, on one node and on a cluster alike. Its value is the holder's owner
    /// token.
    pub fn lock_key(name: &str) -> String {
        LockKey::lock(name).to_string()
    }
}

#[cfg(feature = "redis-cluster")]
impl RedisBackend<ClusterLink> {
    /// Connects to the Redis Cluster that `nodes` belong to (any of its nodes: the others are
    /// found through them), with a cluster connection of its own for release announcements.
    ///
    /// Every key of a lock lives in the lock's hash slot (its name in braces is the hash tag,
    /// and the fencing counter of that slot is chosen to hash there too), so each script runs
    /// on one shard. Each command goes straight to the master serving its slot, on a
    /// connection of its own to each master ([`ClusterLink`]), which follows `MOVED` and
    /// `ASK` redirections, slot migrations and failovers. Releases are announced with sharded
    /// pub/sub (`SPUBLISH`) on the lock's shard, and waiters subscribe there (`SSUBSCRIBE`,
    /// Redis 7 or later); a subscription the server drops when its slot moves is made again.
    /// Several keys in one slot are taken in one script; keys in different slots one by one, in
    /// sorted order, all or none.
    ///
    /// Redis Cluster replicates asynchronously: a master that fails over before its replica
    /// received a lock can grant that lock again (see the Redis store's page).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use tower_lock::{Locker, RedisBackend};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let nodes = ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"];
    /// let locker = Locker::new(RedisBackend::connect_cluster(nodes).await?);
    /// let held = locker.lock("coupon:42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Self, RedisError> {
        choose_tls_crypto();
        let nodes = nodes
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()?;
        let addresses: Vec<String> = nodes.iter().map(|node| node.addr().to_string()).collect();
        let target = format!("the Redis Cluster at {}", addresses.join(","));
        let connecting = async {
            let connection = ClusterLink::connect(nodes.clone()).await?;
            let room = announcements::cluster_waiting_room(nodes).await?;
            Ok::<_, RedisError>(Self::on(connection, room))
        };
        within(&target, connecting).await.map_err(unreachable)
    }
}

#[cfg(feature = "redis-cluster")]
impl RedisBackend<ClusterConnection> {
    /// Uses redis-rs's cluster connection, configured by you. A backend made this way hears no
    /// release announcements: its waiters retry on timers (in fair mode, still in arrival
    /// order); every command goes through that connection's one task, which costs the client
    /// more per lock than [`connect_cluster`](RedisBackend::connect_cluster)'s link.
    pub fn from_cluster_connection(connection: ClusterConnection) -> Self {
        Self::on(connection, WaitingRoom::silent())
    }
}

/// Gives rustls its crypto for `rediss://` connections (the `tls` feature): ring, unless the
/// process installed a provider of its own. rustls chooses by itself only when exactly one
/// provider is built, and an application with another TLS user may build two.
pub(super) fn choose_tls_crypto() {
    #[cfg(feature = "tls")]
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
}

/// A failed connect as the Redis error it was (its kind kept), naming what it tried to reach.
pub(super) fn unreachable(failure: ConnectFailure<RedisError>) -> RedisError {
    let kind = match &failure {
        ConnectFailure::Failed { error, .. } => error.kind(),
        ConnectFailure::Silent { .. } => ErrorKind::Io,
    };
    RedisError::from((kind, "lock store unreachable", failure.to_string()))
}

/// A cluster client's settings: connections given up on as fast as a node's, and no limit of
/// its own on how long an answer may take (the locker's store timeout bounds every call).
#[cfg(feature = "redis-cluster")]
pub(super) fn cluster_client(nodes: Vec<redis::ConnectionInfo>) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes)
        .connection_timeout(CONNECTION_TIMEOUT)
        .overall_response_timeout(None)
}
