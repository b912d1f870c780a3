//! The Redis backend's wait queue: `fair.lua`'s line of tickets, and the room that hears the
//! releases announced on the lock's channel.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::FromRedisValue;

use super::commands::{ScriptArg, acquire_reply, millis};
use super::keys::{FenceCounter, LockKey};
use super::{RedisBackend, RedisConnection};
use crate::backend::waiting::WaitingRoom;
use crate::backend::{
    Attempt, BackendError, Granted, Hold, LockRequest, QueuedAttempt, TokenLease, WaitQueue,
};
use crate::token::OwnerToken;

impl<C: RedisConnection> RedisBackend<C> {
    /// Runs operation `op` of `fair.lua` on lock `name`.
    async fn run_fair<T: FromRedisValue>(
        &self,
        name: &str,
        op: &str,
        token: OwnerToken,
        args: &[ScriptArg],
    ) -> Result<T, BackendError> {
        let keys = [
            LockKey::lock(name).into(),
            FenceCounter::of_lock(name).into(),
            LockKey::line(name).into(),
            LockKey::tickets(name).into(),
        ];
        self.run_op(&self.scripts.fair, &keys, (op, token), args)
            .await
    }

    async fn acquire_in_line(
        &self,
        name: &str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> Result<QueuedAttempt<TokenLease>, BackendError> {
        let args = [
            ScriptArg::Int(millis(request.ttl)),
            ScriptArg::Int(millis(ticket_ttl)),
            ScriptArg::Int(u64::from(self.fencing)),
            ScriptArg::Word(request.holder),
        ];
        let reply = self.run_fair(name, "acquire", request.token, &args).await?;
        let lease = TokenLease::new(request.token, Hold::Mutex);
        let taken = match acquire_reply(reply)? {
            Attempt::Acquired(fence) => Attempt::Acquired(Granted {
                lease: lease.fenced(fence),
                fence,
            }),
            Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
        };
        Ok(match self.acknowledged(&[name], taken).await? {
            Attempt::Acquired(grant) => QueuedAttempt::Acquired(grant),
            Attempt::Busy { holder_ttl } => QueuedAttempt::Queued {
                holder_ttl,
                handover: lease,
            },
        })
    }

    /// Withdraws the ticket; when a release handed the lock to it meanwhile, releases that too
    /// (passing it on to the next ticket).
    async fn leave_line(&self, name: &str, token: OwnerToken) -> Result<(), BackendError> {
        let handed: i64 = self.run_fair(name, "leave", token, &[]).await?;
        if handed == 1 {
            self.release_exclusive(name, token).await?;
        }
        Ok(())
    }
}

impl<C: RedisConnection> WaitQueue<TokenLease> for RedisBackend<C> {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<TokenLease>, BackendError>> {
        Box::pin(self.acquire_in_line(name, request, ticket_ttl))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.leave_line(name, token))
    }
}
