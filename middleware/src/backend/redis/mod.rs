//! The Redis backend: one round trip per operation, over a self-healing connection.

use std::fmt;
use std::sync::Arc;

#[cfg(feature = "redis-cluster")]
pub use cluster_link::ClusterLink;
use redis::FromRedisValue;
use redis::aio::ConnectionManager;
use tokio::time::Instant;

use super::waiting::WaitingRoom;
use super::{Attempt, BackendError, Granted, Hold, LockRequest, Patience, TokenLease};
use crate::token::OwnerToken;
use commands::{
    HolderRecord, ScriptArg, answered_within_lease, fence, fence_incr, holder_ttl, pttl, set_nx,
};
use keys::{FenceCounter, LockKey, ScriptKey};
use scripts::{LuaScript, Scripts};

use acks::ReplicaAcks;
pub use connection::RedisConnection;
pub use redlock::RedlockBackend;
#[cfg(feature = "redis-sentinel")]
pub use sentinel::SentinelConnection;

mod acks;
mod announcements;
#[cfg(feature = "redis-cluster")]
mod cluster_link;
#[cfg(feature = "redis-cluster")]
mod cluster_topology;
#[cfg(feature = "redis-cluster")]
mod command_slot;
mod commands;
mod connecting;
mod connection;
mod hash_slot;
mod inspection;
mod keys;
mod lock_backend;
mod redlock;
mod scripts;
#[cfg(feature = "redis-sentinel")]
mod sentinel;
mod shared_holds;
mod wait_queue;

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
/// somebody listens for them (listening waiters mark the lock). When the lock's queue
/// (`{<prefix><key>}:line`) has a ticket that outlives the lease it asked for, the release
/// hands the lock straight to it and the announcement names the ticket and its fence: nobody
/// else can take it, and the waiter, woken, asks and is given it. Otherwise the
/// announcement names the first ticket, the only waiter that may take the lock next, or
/// nobody. A backend made by [`connect`](Self::connect) keeps one more connection (RESP3) that
/// subscribes to the channels of the locks its waiters wait for, so waiters sleep until a
/// release instead of polling ([`LockBackend::wait_queue`]); it resubscribes by itself after a
/// reconnect, and waiters retry on timers meanwhile.
///
/// [`LockBackend::wait_queue`]: crate::backend::LockBackend::wait_queue
///
/// # Example
///
/// ```no_run
/// use tower_lock::{Locker, RedisBackend};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379").await?);
/// let held = locker.lock("coupon:42").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend<C: RedisConnection = ConnectionManager> {
    connection: C,
    scripts: Arc<Scripts>,
    room: Arc<WaitingRoom>,
    fencing: bool,
    /// Replicas that must have a lock before it counts as taken (`WAIT`).
    acks: Option<ReplicaAcks>,
}

impl<C: RedisConnection> RedisBackend<C> {
    /// A backend sending its commands on `connection`, its waiters in `room`.
    fn on(connection: C, room: Arc<WaitingRoom>) -> Self {
        Self {
            connection,
            scripts: Arc::new(Scripts::new(C::SHARDED)),
            room,
            fencing: true,
            acks: None,
        }
    }

    /// Whether exclusive holds get fencing tokens (default `true`).
    ///
    /// Without fencing, an acquire is one plain `SET NX PX` (no counter) and
    /// [`LockGuard::fence`](crate::LockGuard::fence) is `None`: for users who do not write to
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
    pub fn connection(&self) -> C {
        self.connection.clone()
    }
}

impl<C: RedisConnection> fmt::Debug for RedisBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("fencing", &self.fencing)
            .finish_non_exhaustive()
    }
}

impl<C: RedisConnection> RedisBackend<C> {
    /// Takes lock `name` exclusively.
    ///
    /// One round trip: `SET NX PX`, with fencing pipelined with the `INCR` of the slot's
    /// fencing counter. (A busy attempt increments the counter too; tokens skip numbers but
    /// never go back.) Only a busy answer costs a second call: for a caller that listens, one
    /// that marks the lock as waited for and reads its remaining lease; for the others, a
    /// plain `PTTL`.
    ///
    /// The two commands are not a transaction: Redis runs the `INCR` after the `SET`, and
    /// before it answers. When the answer arrives within the lease (by the lease's own
    /// reckoning, drift margin included), the `INCR` ran while the lock was held, so every
    /// later holder's `INCR` runs after it: tokens increase in the order the lock was held.
    /// A later answer carries a token that a holder who took the expired lock meanwhile may
    /// have overtaken, so it is an error (the caller gives the lock back). A `MULTI` would make
    /// the pair atomic at twice the commands for Redis to run.
    async fn take(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let (token, ttl) = (request.token, request.ttl);
        let mut connection = self.connection.clone();
        let taken = if self.fencing {
            let sent = Instant::now();
            let (taken, value): (Option<()>, u64) = redis::Pipeline::with_capacity(2)
                .add_command(set_nx(name, HolderRecord::mutex(request), ttl))
                .add_command(fence_incr(name))
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?;
            if taken.is_some() {
                answered_within_lease(name, sent, ttl)?;
            }
            taken.map(|()| fence(value))
        } else {
            let taken: Option<()> = set_nx(name, HolderRecord::mutex(request), ttl)
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?;
            taken.map(|()| None)
        };
        if let Some(fence) = taken {
            let lease = TokenLease::new(token, Hold::Mutex).fenced(fence);
            return Ok(Attempt::Acquired(Granted { lease, fence }));
        }
        self.busy(name, request.patience).await
    }

    /// The lock is busy: how long its holder has left, marking it as waited for when the
    /// caller listens for its release.
    async fn busy<T>(&self, name: &str, patience: Patience) -> Result<Attempt<T>, BackendError> {
        let mut connection = self.connection.clone();
        let pttl: i64 = if patience == Patience::Listens {
            let busy = &self.scripts.busy;
            let mut call = busy.call(1, 0);
            call.arg(LockKey::lock(name));
            busy.run(&call, &mut connection).await?
        } else {
            pttl(name)
                .query_async(&mut connection)
                .await
                .map_err(BackendError::new)?
        };
        Ok(Attempt::Busy {
            holder_ttl: holder_ttl(pttl),
        })
    }

    /// Runs operation `op` of `shared.lua` on lock `name`.
    async fn run_shared<T: FromRedisValue>(
        &self,
        name: &str,
        op: &str,
        token: OwnerToken,
        args: &[ScriptArg],
    ) -> Result<T, BackendError> {
        let keys = [
            LockKey::lock(name).into(),
            LockKey::shared(name).into(),
            LockKey::writers(name).into(),
            FenceCounter::of_lock(name).into(),
            LockKey::claims(name).into(),
            LockKey::holders(name).into(),
        ];
        self.run_op(&self.scripts.shared, &keys, (op, token), args)
            .await
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
            ReleaseKeys::WithLine => release.call(5, 1),
        };
        call.arg(LockKey::lock(name));
        if keys == ReleaseKeys::WithLine {
            call.arg(LockKey::line(name))
                .arg(LockKey::tickets(name))
                .arg(FenceCounter::of_lock(name))
                .arg(LockKey::claims(name));
        }
        call.arg(token.encode(&mut buf));
        release.run(&call, &mut self.connection.clone()).await
    }

    /// Releases `token`'s exclusive hold on `name`.
    ///
    /// While no waiter of this process waits for the lock, the release script gets the lock
    /// key alone and deletes the lock if nobody marked it as waited for; a lock that waiters
    /// elsewhere marked costs a second call, with the keys of the lock's line, which hands it
    /// over or announces it. With local waiters, that call is the only one.
    async fn release_exclusive(&self, name: &str, token: OwnerToken) -> Result<bool, BackendError> {
        let waited_for_here = self.room.has_waiters(name);
        if !waited_for_here {
            match self.run_release(name, token, ReleaseKeys::LockOnly).await? {
                RELEASE_WAITED_FOR => {}
                released => return Ok(released == 1),
            }
        }
        Ok(self.run_release(name, token, ReleaseKeys::WithLine).await? == 1)
    }

    /// Runs operation `op` of a script that serves several (`shared.lua`, `fair.lua`) on
    /// `keys`: the operation, the owner token, then `args`.
    async fn run_op<T: FromRedisValue>(
        &self,
        script: &LuaScript,
        keys: &[ScriptKey<'_>],
        (op, token): (&str, OwnerToken),
        args: &[ScriptArg],
    ) -> Result<T, BackendError> {
        let mut buf = [0; 32];
        let mut call = script.call(keys.len(), 2 + args.len());
        call.arg(keys).arg(op).arg(token.encode(&mut buf)).arg(args);
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

/// Whether every one of lock `names` lives in the same hash slot.
fn in_one_slot(names: &[&str]) -> bool {
    let mut slots = names.iter().map(|name| hash_slot::of_lock_key(name));
    let first = slots.next();
    slots.all(|slot| Some(slot) == first)
}
