//! The Redis backend: one round trip per operation, over a self-healing connection.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    Client, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisError, Script, Value,
};

use super::hash_slot::fence_counter_key;
use super::{Acquire, AcquireMany, BackendError, Hold, LockBackend};
use crate::OwnerToken;
use crate::waiting::{BoxFuture, Subscriptions, WaitingRoom};

/// Locks in Redis, shared by every process that talks to the same server.
///
/// Each lock is one string key, `{<prefix><key>}`, holding the owner token with a `PX`
/// expiry, and nothing else: a released or expired lock leaves no key behind. The braces are a
/// hash tag (a lock's other keys, such as a read-write lock's readers, share it).
///
/// An acquire is one round trip: `SET NX PX`, in a `MULTI` with the `INCR` of a fencing
/// counter. There is one counter per Redis Cluster hash slot, `tower-lock:fence:{<n>}` with
/// `<n>` chosen to hash to the lock's own slot, shared by every lock of that slot: at most
/// 16384 small keys in all, which never expire, so tokens keep increasing for as long as Redis
/// keeps its data. A release is one `EVALSHA` of a compare-and-delete script (loaded on first
/// use and again after a server restart).
///
/// The connection is a redis-rs [`ConnectionManager`]: one multiplexed connection that
/// reconnects on its own after Redis restarts. While Redis is unreachable, calls fail (the
/// layer answers 503, or lets requests through with `fail_open()`).
///
/// Releases are announced with `PUBLISH` on the channel `{<prefix><key>}:free`. A backend made
/// by [`connect`](Self::connect) keeps one more connection (RESP3) that subscribes to the
/// channels of the locks its waiters wait for, so waiters sleep until a release instead of
/// polling; it resubscribes by itself after a reconnect, and waiters retry on timers meanwhile.
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
    room: Option<Arc<WaitingRoom>>,
    fencing: bool,
}

struct Scripts {
    busy: Script,
    extend: Script,
    release: Script,
    fair: Script,
    shared: Script,
    many: Script,
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
        let client = Client::open(url)?;
        let manager = ConnectionManager::new_with_config(client.clone(), manager_config()).await?;
        let room = announcements(&client).await?;
        Ok(Self {
            room: Some(room),
            ..Self::from_connection(manager)
        })
    }

    /// Uses a connection manager you configured yourself (TLS, credentials, timeouts).
    /// Waiters of a backend made this way do not hear release announcements: they poll.
    pub fn from_connection(connection: ConnectionManager) -> Self {
        Self {
            connection,
            scripts: Arc::new(Scripts {
                busy: Script::new(include_str!("lua/busy.lua")),
                extend: Script::new(include_str!("lua/extend.lua")),
                release: Script::new(include_str!("lua/release.lua")),
                fair: Script::new(include_str!("lua/fair.lua")),
                shared: Script::new(include_str!("lua/shared.lua")),
                many: Script::new(include_str!("lua/many.lua")),
            }),
            room: None,
            fencing: true,
        }
    }

    /// Whether acquires issue fencing tokens (default `true`).
    ///
    /// Without fencing, an acquire is one plain `SET NX PX` (no transaction, no counter) and
    /// [`LockGuard::fence`](crate::LockGuard::fence) is 0: for users who do not write to
    /// stores that check tokens and want the cheapest lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis::RedisError> {
    /// let backend = tower_lock::RedisBackend::connect("redis://127.0.0.1:6379").await?.fencing(false);
    /// # Ok(()) }
    /// ```
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }
}

impl RedisBackend {
    /// The Redis key of lock `name` (the layer's prefix and the key, e.g. `lock:coupon:42`):
    /// `{lock:coupon:42}`. Its value is the holder's owner token.
    pub fn lock_key(name: &str) -> String {
        lock_key(name)
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

fn line_key(name: &str) -> String {
    format!("{{{name}}}:line")
}

fn tickets_key(name: &str) -> String {
    format!("{{{name}}}:tickets")
}

fn shared_key(name: &str) -> String {
    format!("{{{name}}}:shared")
}

fn intent_key(name: &str) -> String {
    format!("{{{name}}}:intent")
}

/// How long a waiting writer's intent bars new readers unless the writer renews it.
const WRITER_INTENT_TTL: Duration = Duration::from_secs(2);

/// Where releases of lock `name` are announced: its lock key followed by `:free` (the release
/// script derives it the same way).
fn channel(name: &str) -> String {
    format!("{{{name}}}:free")
}

fn name_of_channel(channel: &str) -> Option<&str> {
    channel.strip_prefix('{')?.strip_suffix("}:free")
}

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_max_delay(MAX_RECONNECT_DELAY)
}

/// Opens the subscriber connection (RESP3, so pushes arrive with the channel they belong to)
/// and the waiting room it feeds.
async fn announcements(client: &Client) -> Result<Arc<WaitingRoom>, RedisError> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let resp3 = Client::open(info.set_redis_settings(settings))?;
    let room_slot: Arc<OnceLock<Weak<WaitingRoom>>> = Arc::default();
    let deliver = {
        let room_slot = Arc::clone(&room_slot);
        move |push: PushInfo| {
            if let Some(room) = room_slot.get().and_then(Weak::upgrade) {
                route(&room, push);
            }
            Ok::<(), ()>(())
        }
    };
    let config = manager_config()
        .set_push_sender(deliver)
        .set_automatic_resubscription();
    let subscriber = ConnectionManager::new_with_config(resp3, config).await?;
    let room = WaitingRoom::remote(Subscriber(subscriber));
    room_slot.set(Arc::downgrade(&room)).ok();
    Ok(room)
}

/// Routes one push from the subscriber connection to the waiters of its lock.
fn route(room: &WaitingRoom, push: PushInfo) {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let name = push.data.first().and_then(text);
    let name = name.as_deref().and_then(name_of_channel);
    match (push.kind, name) {
        (PushKind::Message, Some(name)) => {
            let next = push.data.get(1).and_then(text);
            room.announce(name, next.as_deref().and_then(OwnerToken::parse));
        }
        (PushKind::Subscribe, Some(name)) => room.subscription_confirmed(name),
        (PushKind::Disconnection, _) => room.disconnected(),
        _ => {}
    }
}

/// How long a subscription command may take before the waiters poll instead.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

struct Subscriber(ConnectionManager);

impl Subscriptions for Subscriber {
    fn subscribe(&mut self, name: &str) -> BoxFuture<bool> {
        let (mut connection, channel) = (self.0.clone(), channel(name));
        Box::pin(async move {
            let subscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, connection.subscribe(&channel));
            matches!(subscribed.await, Ok(Ok(())))
        })
    }

    fn unsubscribe(&mut self, name: &str) -> BoxFuture<()> {
        let (mut connection, channel) = (self.0.clone(), channel(name));
        Box::pin(async move {
            let unsubscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, connection.unsubscribe(&channel));
            if !matches!(unsubscribed.await, Ok(Ok(()))) {
                tracing::debug!(channel, "unsubscribe failed; the next reconnect drops it");
            }
        })
    }
}

impl RedisBackend {
    /// Acquires; `waited_for` marks the lock so that its release is announced.
    ///
    /// One round trip: `SET NX PX`, with fencing in a `MULTI` with the `INCR` of the slot's
    /// fencing counter, so the token is issued atomically with the lock. (A busy attempt
    /// increments the counter too; tokens skip numbers but never go back.) Only a busy answer
    /// costs a second call, which marks the lock as waited for and reads its remaining lease.
    async fn take(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        waited_for: bool,
    ) -> Result<Acquire, BackendError> {
        let mut buf = [0; 32];
        let token = token.encode(&mut buf);
        let mark = if waited_for { "*" } else { "" };
        let lock = lock_key(key);
        let mut set = redis::cmd("SET");
        set.arg(&lock)
            .arg([token, mark].concat())
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        let mut connection = self.connection.clone();
        let taken = if self.fencing {
            let (taken, fence): (Option<()>, u64) = redis::pipe()
                .atomic()
                .add_command(set)
                .cmd("INCR")
                .arg(fence_counter_key(&lock))
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?;
            taken.map(|()| fence)
        } else {
            let taken: Option<()> = set
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?;
            taken.map(|()| 0)
        };
        if let Some(fence) = taken {
            return Ok(Acquire::Acquired { fence });
        }
        let pttl: i64 = self
            .scripts
            .busy
            .key(&lock)
            .invoke_async(&mut connection)
            .await
            .map_err(BackendError::new)?;
        let holder_ttl = match pttl {
            // Released between the two commands: ask again at once.
            -2 => Some(Duration::ZERO),
            ms => u64::try_from(ms).ok().map(Duration::from_millis),
        };
        Ok(Acquire::Busy { holder_ttl })
    }

    /// Runs one operation of a script that serves several (`fair.lua`, `shared.lua`): `keys`,
    /// then the operation, the owner token, the lock's channel, and `args`.
    async fn run_op(
        &self,
        script: &Script,
        keys: [String; 4],
        (key, op): (&str, &str),
        token: OwnerToken,
        args: &[u64],
    ) -> Result<Value, BackendError> {
        let mut buf = [0; 32];
        let mut invocation = script.prepare_invoke();
        for script_key in keys {
            invocation.key(script_key);
        }
        invocation
            .arg(op)
            .arg(token.encode(&mut buf))
            .arg(channel(key));
        for arg in args {
            invocation.arg(*arg);
        }
        invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)
    }

    async fn run_shared(
        &self,
        key: &str,
        op: &str,
        token: OwnerToken,
        args: &[u64],
    ) -> Result<Value, BackendError> {
        let lock = lock_key(key);
        let counter = fence_counter_key(&lock);
        let keys = [lock, shared_key(key), intent_key(key), counter];
        self.run_op(&self.scripts.shared, keys, (key, op), token, args)
            .await
    }

    async fn run_fair(
        &self,
        key: &str,
        op: &str,
        token: OwnerToken,
        args: &[u64],
    ) -> Result<Value, BackendError> {
        let lock = lock_key(key);
        let counter = fence_counter_key(&lock);
        let keys = [lock, counter, line_key(key), tickets_key(key)];
        self.run_op(&self.scripts.fair, keys, (key, op), token, args)
            .await
    }
}

/// Reads an acquire script's `{1, fence}` or `{0, wait ms}`.
fn acquire_reply(reply: Vec<i64>) -> Result<Acquire, BackendError> {
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
        self.take(key, token, ttl, false).await
    }

    async fn acquire_with_followers(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        self.take(key, token, ttl, true).await
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

    fn waiting_room(&self) -> Option<&Arc<WaitingRoom>> {
        self.room.as_ref()
    }

    /// All or none in one script, on one Redis node. (On Redis Cluster, whose scripts cannot
    /// span hash slots, take them one by one in sorted order: the trait's default.)
    async fn acquire_many(
        &self,
        keys: &[String],
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<AcquireMany, BackendError> {
        let mut buf = [0; 32];
        let mut invocation = self.scripts.many.prepare_invoke();
        for key in keys {
            let lock = lock_key(key);
            let counter = fence_counter_key(&lock);
            invocation.key(lock).key(counter);
        }
        invocation.arg(token.encode(&mut buf)).arg(millis(ttl));
        let reply: Vec<i64> = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)?;
        match reply.split_first() {
            Some((1, fences)) if fences.len() == keys.len() => Ok(AcquireMany::Acquired {
                fences: fences
                    .iter()
                    .map(|&fence| u64::try_from(fence).unwrap_or(0))
                    .collect(),
            }),
            Some((0, [pttl])) => Ok(AcquireMany::Busy {
                holder_ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            _ => Err(unexpected_reply(&reply)),
        }
    }

    async fn acquire_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> Result<Acquire, BackendError> {
        let (op, args) = match hold {
            Hold::Exclusive => return self.take(key, token, ttl, false).await,
            Hold::Read => ("read", vec![millis(ttl)]),
            Hold::Permit { permits } => ("permit", vec![millis(ttl), u64::from(permits)]),
            Hold::Write => ("write", vec![millis(ttl), millis(WRITER_INTENT_TTL)]),
        };
        let reply = self.run_shared(key, op, token, &args).await?;
        acquire_reply(redis::from_redis_value(reply).map_err(BackendError::new)?)
    }

    async fn extend_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> Result<bool, BackendError> {
        if hold.is_exclusive() {
            return self.extend(key, token, ttl).await;
        }
        let reply = self
            .run_shared(key, "extend", token, &[millis(ttl)])
            .await?;
        Ok(redis::from_redis_value::<i64>(reply).map_err(BackendError::new)? == 1)
    }

    async fn release_hold(
        &self,
        key: &str,
        token: OwnerToken,
        hold: Hold,
    ) -> Result<bool, BackendError> {
        if hold.is_exclusive() {
            return self.release(key, token).await;
        }
        let reply = self.run_shared(key, "release", token, &[]).await?;
        Ok(redis::from_redis_value::<i64>(reply).map_err(BackendError::new)? == 1)
    }

    async fn acquire_fair(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        ticket_ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        let args = [millis(ttl), millis(ticket_ttl)];
        let reply = self.run_fair(key, "acquire", token, &args).await?;
        acquire_reply(redis::from_redis_value(reply).map_err(BackendError::new)?)
    }

    async fn release_fair(&self, key: &str, token: OwnerToken) -> Result<bool, BackendError> {
        let reply = self.run_fair(key, "release", token, &[]).await?;
        Ok(redis::from_redis_value::<i64>(reply).map_err(BackendError::new)? == 1)
    }

    async fn leave_fair_queue(&self, key: &str, token: OwnerToken) -> Result<(), BackendError> {
        self.run_fair(key, "leave", token, &[]).await.map(drop)
    }
}
