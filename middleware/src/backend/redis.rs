//! The Redis backend: one script call per operation, over a self-healing connection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, IntoConnectionInfo, RedisError, Script};

use super::{Acquire, BackendError, FENCE_COUNTER_TTL, LockBackend};
use crate::OwnerToken;

/// Locks in Redis, shared by every process that talks to the same server.
///
/// Each lock is one string key, `{<prefix><key>}`, holding the owner token with a `PX`
/// expiry; its fencing counter is `{<prefix><key>}:fence`. The braces are a hash tag, so both
/// keys live on the same Redis Cluster slot and the scripts stay valid there. Acquire and
/// release are one script call (one round trip) each, sent with `EVALSHA` (the script is loaded
/// on first use and again after a server restart).
///
/// The connection is a redis-rs [`ConnectionManager`]: one multiplexed connection that
/// reconnects on its own after Redis restarts. While Redis is unreachable, calls fail (the
/// layer answers 503, or lets requests through with `fail_open()`).
///
/// # Example
///
/// ```no_run
/// use tower_lock::RedisBackend;
///
/// # async fn run() -> Result<(), redis::RedisError> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    connection: ConnectionManager,
    scripts: Arc<Scripts>,
}

struct Scripts {
    acquire: Script,
    extend: Script,
    release: Script,
}

/// How long to wait for a TCP connection to Redis before counting it as down.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest pause between two reconnection attempts, so a restarted Redis is picked up fast.
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(500);

impl RedisBackend {
    /// Connects to the Redis server at `url` (e.g. `redis://127.0.0.1:6379/0`).
    ///
    /// Fails when the server cannot be reached now; once connected, the backend reconnects by
    /// itself whenever the connection drops.
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Self, RedisError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_max_delay(MAX_RECONNECT_DELAY);
        let manager = ConnectionManager::new_with_config(Client::open(url)?, config).await?;
        Ok(Self::from_connection(manager))
    }

    /// Uses a connection manager you configured yourself (TLS, credentials, timeouts).
    pub fn from_connection(connection: ConnectionManager) -> Self {
        Self {
            connection,
            scripts: Arc::new(Scripts {
                acquire: Script::new(include_str!("lua/acquire.lua")),
                extend: Script::new(include_str!("lua/extend.lua")),
                release: Script::new(include_str!("lua/release.lua")),
            }),
        }
    }
}

impl RedisBackend {
    /// The Redis key of lock `name` (the layer's prefix and the key, e.g. `lock:coupon:42`):
    /// `{lock:coupon:42}`. Its value is the holder's owner token.
    pub fn lock_key(name: &str) -> String {
        lock_key(name)
    }

    /// The Redis key of lock `name`'s fencing counter: `{lock:coupon:42}:fence`. It holds the
    /// last fencing token issued for the lock, so a Lua script that writes on the lock's behalf
    /// can refuse a stale holder atomically: `GET` it and compare with the writer's token.
    pub fn fence_counter_key(name: &str) -> String {
        fence_key(name)
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend").finish_non_exhaustive()
    }
}

fn lock_key(name: &str) -> String {
    format!("{{{name}}}")
}

fn fence_key(name: &str) -> String {
    format!("{{{name}}}:fence")
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn unexpected_reply(reply: &[i64]) -> BackendError {
    BackendError::new(format!(
        "unexpected reply from the acquire script: {reply:?}"
    ))
}

impl LockBackend for RedisBackend {
    async fn acquire(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        let mut buf = [0; 32];
        let reply: Vec<i64> = self
            .scripts
            .acquire
            .key(lock_key(key))
            .key(fence_key(key))
            .arg(token.encode(&mut buf))
            .arg(millis(ttl))
            .arg(millis(FENCE_COUNTER_TTL))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)?;
        match reply[..] {
            [1, fence] => u64::try_from(fence)
                .map(|fence| Acquire::Acquired { fence })
                .map_err(|_| unexpected_reply(&reply)),
            [0, pttl] => Ok(Acquire::Busy {
                holder_ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            }),
            _ => Err(unexpected_reply(&reply)),
        }
    }

    async fn extend(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let mut buf = [0; 32];
        let extended: i64 = self
            .scripts
            .extend
            .key(lock_key(key))
            .arg(token.encode(&mut buf))
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)?;
        Ok(extended == 1)
    }

    async fn release(&self, key: &str, token: OwnerToken) -> Result<bool, BackendError> {
        let mut buf = [0; 32];
        let deleted: i64 = self
            .scripts
            .release
            .key(lock_key(key))
            .arg(token.encode(&mut buf))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)?;
        Ok(deleted == 1)
    }
}
