//! Read-write locks and semaphores in Redis: `shared.lua`, and a scriptless fast path for an
//! uncontended writer.

use std::num::NonZeroU32;

use redis::{Cmd, FromRedisValue, Value};
use tokio::time::Instant;

use super::commands::{
    HolderRecord, ScriptArg, acquire_reply, answered_within_lease, fence_incr, millis,
    patience_arg, set_nx,
};
use super::keys::LockKey;
use super::{RedisBackend, RedisConnection};
use crate::backend::lock_shapes::WAITER_MARK_TTL;
use crate::backend::{
    Attempt, BackendError, FencingToken, Granted, Hold, LockRequest, Patience, Semaphores,
    SharedLocks, TokenLease,
};

/// A script's `{1, fence}` / `{0, wait}` answer as a grant to `request.token`, holding `hold`.
fn granted(
    reply: Vec<i64>,
    request: LockRequest,
    hold: Hold,
) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
    Ok(match acquire_reply(reply)? {
        Attempt::Acquired(fence) => Attempt::Acquired(Granted {
            lease: TokenLease::new(request.token, hold).fenced(fence),
            fence,
        }),
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    })
}

impl<C: RedisConnection> SharedLocks for RedisBackend<C> {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let args = [
            ScriptArg::Int(millis(request.ttl)),
            ScriptArg::Word(patience_arg(request.patience)),
            ScriptArg::Int(millis(WAITER_MARK_TTL)),
            ScriptArg::Word(request.holder),
        ];
        let reply = self.run_shared(name, "read", request.token, &args).await?;
        let taken = granted(reply, request, Hold::Read)?;
        self.acknowledged(&[name], taken).await
    }

    /// Like a mutex, a plain `SET NX PX` (readers hold the lock key too, so it fails while anybody
    /// holds the lock), pipelined with the fencing counter's `INCR` (trusted as in `take`) and a
    /// look at the waiting writers and readers' claims. Only a writer that finds writers or
    /// readers waiting sends a second command: it withdraws its own intent and has its release
    /// announced to those it held back, or gives the lock back when it is the turn of the
    /// writers that came before it or of the waiting readers. A busy writer that will ask again
    /// goes to `shared.lua`, which keeps its place in line; one that asks once only reads how long the lock is
    /// held. While this process has waiters for the lock (it is contended), a waiting writer asks
    /// `shared.lua` straight away: one round trip instead of a pipeline that fails first.
    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let taken = self.write(name, request).await?;
        self.acknowledged(&[name], taken).await
    }
}

impl<C: RedisConnection> RedisBackend<C> {
    /// [`SharedLocks::acquire_write`], before replicas acknowledge it.
    async fn write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let contended = self.room.has_waiters(name);
        if contended && request.patience != Patience::Once {
            return self.queue_writer(name, request).await;
        }
        match self.take_write(name, request).await? {
            Some(fence) => Ok(Attempt::Acquired(Granted {
                lease: TokenLease::new(request.token, Hold::Write).fenced(fence),
                fence,
            })),
            None if request.patience == Patience::Once => self.busy(name, request.patience).await,
            None => self.queue_writer(name, request).await,
        }
    }
}

impl<C: RedisConnection> RedisBackend<C> {
    /// The scriptless write acquire: `Some(fence)` when taken, `None` when busy.
    async fn take_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Option<Option<FencingToken>>, BackendError> {
        let (token, ttl) = (request.token, request.ttl);
        let mut writers = Cmd::with_capacity(2, 16 + name.len());
        writers.arg("HLEN").arg(LockKey::writers(name));
        let mut claims = Cmd::with_capacity(2, 16 + name.len());
        claims.arg("ZCARD").arg(LockKey::claims(name));
        let mut pipeline = redis::Pipeline::with_capacity(4);
        let record = HolderRecord {
            writer: true,
            ..HolderRecord::mutex(request)
        };
        pipeline.add_command(set_nx(name, record, ttl));
        if self.fencing {
            pipeline.add_command(fence_incr(name));
        }
        let sent = Instant::now();
        let replies: Vec<Value> = pipeline
            .add_command(writers)
            .add_command(claims)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(BackendError::new)?;
        let (taken, fence, writers, claims) = match &replies[..] {
            [taken, writers, claims] => (taken, None, writers, claims),
            [taken, fence, writers, claims] => (taken, Some(fence), writers, claims),
            _ => return Err(BackendError::new("unexpected reply to the write acquire")),
        };
        if matches!(taken, Value::Nil) {
            return Ok(None);
        }
        let fence = match fence {
            Some(fence) => {
                answered_within_lease(name, sent, ttl)?;
                let value = u64::from_redis_value_ref(fence).map_err(BackendError::new)?;
                super::commands::fence(value)
            }
            None => None,
        };
        let writers_wait = !matches!(writers, Value::Int(0));
        let readers_wait = !matches!(claims, Value::Int(0));
        if (writers_wait || readers_wait)
            && self.run_shared::<i64>(name, "wrote", token, &[]).await? == 0
        {
            return Ok(None);
        }
        Ok(Some(fence))
    }

    /// A writer that will ask again: `shared.lua` takes the lock, or queues its intent.
    async fn queue_writer(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let args = [
            ScriptArg::Int(millis(request.ttl)),
            ScriptArg::Int(millis(WAITER_MARK_TTL)),
            ScriptArg::Int(u64::from(self.fencing)),
            ScriptArg::Word(patience_arg(request.patience)),
            ScriptArg::Word(request.holder),
        ];
        let reply = self.run_shared(name, "write", request.token, &args).await?;
        granted(reply, request, Hold::Write)
    }
}

impl<C: RedisConnection> Semaphores for RedisBackend<C> {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let args = [
            ScriptArg::Int(millis(request.ttl)),
            ScriptArg::Int(u64::from(permits.get())),
            ScriptArg::Word(request.holder),
        ];
        let reply = self
            .run_shared(name, "permit", request.token, &args)
            .await?;
        let taken = granted(reply, request, Hold::Permit { permits })?;
        self.acknowledged(&[name], taken).await
    }
}
