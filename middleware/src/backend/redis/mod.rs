//! The Redis backend: one round trip per operation, over a self-healing connection.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, FromRedisValue, IntoConnectionInfo, RedisError};

use super::{Acquire, AcquireMany, BackendError, Hold, LockBackend};
use crate::OwnerToken;
use crate::lease::drift_margin;
use crate::waiting::WaitingRoom;
use keys::{FenceCounter, LockKey};
use script::{LuaScript, Scripts};

mod announcements;
mod hash_slot;
mod keys;
mod script;

/// Locks in Redis, shared by every process that talks to the same server.
///
/// Each lock is one string key, `{<prefix><key>}`, holding the owner token with a `PX`
/// expiry, and nothing else: a released or expired lock leaves no key behind. The braces are a
/// hash tag (a lock's other keys, such as a read-write lock's readers, share it). While readers
/// hold a read-write lock, its key holds `readers` and expires with the last of them, so every
/// exclusive acquire, a writer's included, is the same plain `SET NX`.
///
/// An acquire is one round trip: `SET NX PX`, pipelined with the `INCR` of a fencing
/// counter. There is one counter per Redis Cluster hash slot, `tower-lock:fence:{<n>}` with
/// `<n>` chosen to hash to the lock's own slot, shared by every lock of that slot: at most
/// 16384 small keys in all, which never expire, so tokens keep increasing for as long as Redis
/// keeps its data. The token is only handed out when Redis answered within the lease, which
/// proves the `INCR` ran while the lock was held. A release is one `EVALSHA` of a
/// compare-and-delete script (loaded on first use and again after a server restart), sent with
/// the lock key alone unless somebody waits.
///
/// The connection is a redis-rs [`ConnectionManager`]: one multiplexed connection that
/// reconnects on its own after Redis restarts. While Redis is unreachable, calls fail (the
/// layer answers 503, or lets requests through with `fail_open()`).
///
/// Releases are announced with `PUBLISH` on the channel `{<prefix><key>}:free`, only when
/// somebody waits (the waiters mark the lock). When the lock's queue (`{<prefix><key>}:line`)
/// has a ticket that outlives the lease it asked for, the release hands the lock straight to
/// it and the announcement names the ticket and its fence: the waiter holds the lock on
/// hearing it, one round trip sooner than asking. Otherwise the announcement names the first
/// ticket, the only waiter that may take the lock next, or nobody. A backend made
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

/// How long to wait for a TCP connection to Redis before counting it as down.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest pause between two reconnection attempts, so a restarted Redis is picked up fast.
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// How long a waiting writer's intent bars new readers unless the writer renews it.
const WRITER_INTENT_TTL: Duration = Duration::from_secs(2);

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_max_delay(MAX_RECONNECT_DELAY)
}

impl RedisBackend {
    /// Connects to the Redis server at `url` (e.g. `redis://127.0.0.1:6379/0`).
    ///
    /// Fails when the server cannot be reached now; once connected, the backend reconnects by
    /// itself whenever the connection drops.
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Self, RedisError> {
        let client = Client::open(url)?;
        let manager = ConnectionManager::new_with_config(client.clone(), manager_config()).await?;
        let room = announcements::waiting_room(&client).await?;
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
            scripts: Arc::new(Scripts::new()),
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
    /// The connection the backend sends its commands on (a cheap clone). Give it to the rest of
    /// your Redis code, so that the lock's commands and yours travel together on one
    /// multiplexed connection instead of two.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis::RedisError> {
    /// let backend = tower_lock::RedisBackend::connect("redis://127.0.0.1:6379").await?;
    /// let mut connection = backend.connection();
    /// let stock: Option<i64> = redis::cmd("GET").arg("stock:42").query_async(&mut connection).await?;
    /// # Ok(()) }
    /// ```
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// The Redis key of lock `name` (the layer's prefix and the key, e.g. `lock:coupon:42`):
    /// `{lock:coupon:42}`. Its value is the holder's owner token.
    pub fn lock_key(name: &str) -> String {
        LockKey::lock(name).to_string()
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend").finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Acquires.
    ///
    /// One round trip: `SET NX PX`, with fencing pipelined with the `INCR` of the slot's
    /// fencing counter. (A busy attempt increments the counter too; tokens skip numbers but
    /// never go back.) Only a busy answer costs a second call, which marks the lock as waited
    /// for and reads its remaining lease.
    ///
    /// The two commands are not a transaction: Redis runs the `INCR` after the `SET`, and
    /// before it answers. When the answer arrives within the lease (by the lease's own
    /// reckoning, [`drift_margin`] included), the `INCR` ran while the lock was held, so every
    /// later holder's `INCR` runs after it: tokens increase in the order the lock was held.
    /// A later answer carries a token that a holder who took the expired lock meanwhile may
    /// have overtaken, so it is an error (the caller gives the lock back). A `MULTI` would make
    /// the pair atomic at twice the commands for Redis to run.
    async fn take(
        &self,
        name: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        let mut connection = self.connection.clone();
        let taken = if self.fencing {
            let sent = Instant::now();
            let (taken, fence): (Option<()>, u64) = redis::Pipeline::with_capacity(2)
                .add_command(set_nx(name, token, ttl))
                .add_command(fence_incr(name))
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?;
            if taken.is_some() {
                answered_within_lease(name, sent, ttl)?;
            }
            taken.map(|()| fence)
        } else {
            let taken: Option<()> = set_nx(name, token, ttl)
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?;
            taken.map(|()| 0)
        };
        if let Some(fence) = taken {
            return Ok(Acquire::Acquired { fence });
        }
        let busy = &self.scripts.busy;
        let mut call = busy.call(1, 0);
        call.arg(LockKey::lock(name));
        let pttl: i64 = busy.run(&call, &mut connection).await?;
        let holder_ttl = match pttl {
            // Released between the two commands: ask again at once.
            -2 => Some(Duration::ZERO),
            ms => u64::try_from(ms).ok().map(Duration::from_millis),
        };
        Ok(Acquire::Busy { holder_ttl })
    }

    /// Takes the write side of a read-write lock: like a mutex, a plain `SET NX PX` (readers
    /// hold the lock key too, so it fails while anybody holds the lock), pipelined with the
    /// fencing counter's `INCR` (trusted as in [`take`](Self::take)) and a look at the waiting
    /// writers' intent. Only a writer that finds its own intent standing (it waited) sends a
    /// second command, which withdraws the intent and has its release announced to the readers
    /// it held back; only a busy lock goes to `shared.lua`, which queues the intent. While this process has waiters
    /// for the lock (it is contended), a writer asks `shared.lua` straight away: one round trip
    /// instead of a transaction that fails first.
    async fn take_write(
        &self,
        name: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        let write_args = [
            millis(ttl),
            millis(WRITER_INTENT_TTL),
            u64::from(self.fencing),
        ];
        if self
            .room
            .as_ref()
            .is_some_and(|room| room.has_waiters(name))
        {
            return acquire_reply(self.run_shared(name, "write", token, &write_args).await?);
        }
        let mut intent = Cmd::with_capacity(2, 16 + name.len());
        intent.arg("GET").arg(LockKey::intent(name));
        let mut pipeline = redis::Pipeline::with_capacity(3);
        pipeline.add_command(set_nx(name, token, ttl));
        if self.fencing {
            pipeline.add_command(fence_incr(name));
        }
        let sent = Instant::now();
        let replies: Vec<redis::Value> = pipeline
            .add_command(intent)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)?;
        let (taken, fence, intent) = match &replies[..] {
            [taken, intent] => (taken, &redis::Value::Int(0), intent),
            [taken, fence, intent] => (taken, fence, intent),
            _ => return Err(BackendError::new("unexpected reply to the write acquire")),
        };
        if matches!(taken, redis::Value::Nil) {
            return acquire_reply(self.run_shared(name, "write", token, &write_args).await?);
        }
        if self.fencing {
            answered_within_lease(name, sent, ttl)?;
        }
        let fence = u64::from_redis_value_ref(fence).map_err(BackendError::new)?;
        let mut buf = [0; 32];
        if let redis::Value::BulkString(intent) = intent
            && intent[..] == *token.encode(&mut buf).as_bytes()
        {
            self.run_shared::<i64>(name, "wrote", token, &[]).await?;
        }
        Ok(Acquire::Acquired { fence })
    }

    /// Runs operation `op` of `shared.lua` on lock `name`.
    async fn run_shared<T: FromRedisValue>(
        &self,
        name: &str,
        op: &str,
        token: OwnerToken,
        args: &[u64],
    ) -> Result<T, BackendError> {
        let shared = &self.scripts.shared;
        let mut call = shared.call(4, 2 + args.len());
        call.arg(LockKey::lock(name))
            .arg(LockKey::shared(name))
            .arg(LockKey::intent(name))
            .arg(FenceCounter::of_lock(name));
        self.run_op(shared, call, (op, token), args).await
    }

    /// Runs operation `op` of `fair.lua` on lock `name`.
    async fn run_fair<T: FromRedisValue>(
        &self,
        name: &str,
        op: &str,
        token: OwnerToken,
        args: &[u64],
    ) -> Result<T, BackendError> {
        let fair = &self.scripts.fair;
        let mut call = fair.call(4, 2 + args.len());
        call.arg(LockKey::lock(name))
            .arg(FenceCounter::of_lock(name))
            .arg(LockKey::line(name))
            .arg(LockKey::tickets(name));
        self.run_op(fair, call, (op, token), args).await
    }

    /// Runs `release.lua` for lock `name`, with the keys of its line or without them.
    async fn run_release(
        &self,
        name: &str,
        token: OwnerToken,
        keys: ReleaseKeys,
    ) -> Result<i64, BackendError> {
        let mut buf = [0; 32];
        let release = &self.scripts.release;
        let mut call = match keys {
            ReleaseKeys::LockOnly => release.call(1, 1),
            ReleaseKeys::WithLine => release.call(4, 1),
        };
        call.arg(LockKey::lock(name));
        if keys == ReleaseKeys::WithLine {
            call.arg(LockKey::line(name))
                .arg(LockKey::tickets(name))
                .arg(FenceCounter::of_lock(name));
        }
        call.arg(token.encode(&mut buf));
        release.run(&call, &mut self.connection.clone()).await
    }

    /// Completes a `call` of a script that serves several operations (`shared.lua`,
    /// `fair.lua`), whose keys are in place: the operation, the owner token, then `args`.
    async fn run_op<T: FromRedisValue>(
        &self,
        script: &LuaScript,
        mut call: Cmd,
        (op, token): (&str, OwnerToken),
        args: &[u64],
    ) -> Result<T, BackendError> {
        let mut buf = [0; 32];
        call.arg(op).arg(token.encode(&mut buf)).arg(args);
        script.run(&call, &mut self.connection.clone()).await
    }
}

/// The keys a release passes: those of the lock's line are needed to hand the lock over.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReleaseKeys {
    /// The lock key alone: `release.lua` answers [`RELEASE_WAITED_FOR`] to a marked lock.
    LockOnly,
    /// Every key: `release.lua` hands a marked lock over or announces it.
    WithLine,
}

/// `release.lua`'s answer, called with the lock key alone, when the lock is marked as waited
/// for: it did nothing.
const RELEASE_WAITED_FOR: i64 = 2;

/// Whether an acquire of lock `name` sent at `sent` with `ttl`, and taken, came back while its
/// lease certainly ran (the lease's own reckoning): only then did the fencing `INCR` pipelined
/// after the `SET` run while the lock was held.
fn answered_within_lease(name: &str, sent: Instant, ttl: Duration) -> Result<(), BackendError> {
    let answered_in = sent.elapsed();
    if answered_in < ttl.saturating_sub(drift_margin(ttl)) {
        return Ok(());
    }
    Err(BackendError::new(format!(
        "Redis answered the acquire of {name} after {answered_in:?}, too late for its {ttl:?} \
         lease: the fencing token may be older than a later holder's"
    )))
}

/// `SET <lock> <token> NX PX <ttl>`: takes lock `name` if nobody holds it.
fn set_nx(name: &str, token: OwnerToken, ttl: Duration) -> Cmd {
    let mut buf = [0; 32];
    let mut set = Cmd::with_capacity(6, 64 + name.len());
    set.arg("SET")
        .arg(LockKey::lock(name))
        .arg(token.encode(&mut buf))
        .arg("NX")
        .arg("PX")
        .arg(millis(ttl));
    set
}

/// `INCR` of the fencing counter of lock `name`'s slot.
fn fence_incr(name: &str) -> Cmd {
    let mut incr = Cmd::with_capacity(2, 32);
    incr.arg("INCR").arg(FenceCounter::of_lock(name));
    incr
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
        self.take(key, token, ttl).await
    }

    async fn extend(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let mut buf = [0; 32];
        let extend = &self.scripts.extend;
        let mut call = extend.call(1, 2);
        call.arg(LockKey::lock(key))
            .arg(token.encode(&mut buf))
            .arg(millis(ttl));
        let extended: i64 = extend.run(&call, &mut self.connection.clone()).await?;
        Ok(extended == 1)
    }

    /// While no waiter of this process waits for the lock, the release script gets the lock
    /// key alone and deletes the lock if nobody marked it as waited for; a lock that waiters
    /// elsewhere marked costs a second call, with the keys of the lock's line, which hands it
    /// over or announces it. With local waiters, that call is the only one.
    async fn release(&self, key: &str, token: OwnerToken) -> Result<bool, BackendError> {
        let waited_for_here = self.room.as_ref().is_some_and(|room| room.has_waiters(key));
        if !waited_for_here {
            match self.run_release(key, token, ReleaseKeys::LockOnly).await? {
                RELEASE_WAITED_FOR => {}
                released => return Ok(released == 1),
            }
        }
        Ok(self.run_release(key, token, ReleaseKeys::WithLine).await? == 1)
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
        let many = &self.scripts.many;
        let mut call = many.call(2 * keys.len(), 2);
        for key in keys {
            call.arg(LockKey::lock(key)).arg(FenceCounter::of_lock(key));
        }
        call.arg(token.encode(&mut buf)).arg(millis(ttl));
        let reply: Vec<i64> = many.run(&call, &mut self.connection.clone()).await?;
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
        let reply = match hold {
            Hold::Exclusive => return self.take(key, token, ttl).await,
            Hold::Read => self.run_shared(key, "read", token, &[millis(ttl)]).await?,
            Hold::Permit { permits } => {
                let args = [millis(ttl), u64::from(permits)];
                self.run_shared(key, "permit", token, &args).await?
            }
            Hold::Write => return self.take_write(key, token, ttl).await,
        };
        acquire_reply(reply)
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
        let extended: i64 = self
            .run_shared(key, "extend", token, &[millis(ttl)])
            .await?;
        Ok(extended == 1)
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
        let released: i64 = self.run_shared(key, "release", token, &[]).await?;
        Ok(released == 1)
    }

    async fn acquire_fair(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        ticket_ttl: Duration,
    ) -> Result<Acquire, BackendError> {
        let args = [millis(ttl), millis(ticket_ttl), u64::from(self.fencing)];
        acquire_reply(self.run_fair(key, "acquire", token, &args).await?)
    }

    /// Withdraws the ticket; when a release handed the lock to it meanwhile, releases that too
    /// (passing it on to the next ticket).
    async fn leave_fair_queue(&self, key: &str, token: OwnerToken) -> Result<(), BackendError> {
        let handed: i64 = self.run_fair(key, "leave", token, &[]).await?;
        if handed == 1 {
            self.release(key, token).await?;
        }
        Ok(())
    }
}
