//! [`RedisBackend`] as a [`LockBackend`]: its mutexes (one name and several), and the extend,
//! release and abandon of every hold it grants.

use std::time::Duration;

use super::commands::{ScriptArg, fence, holder_ttl, millis, unexpected_reply};
use super::connection::RedisConnection;
use super::keys::{FenceCounter, LockKey};
use super::{RedisBackend, ReleaseKeys, in_one_slot};
use crate::backend::FencingToken;
use crate::backend::{
    Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, TokenLease, WaitQueue,
    acquire_one_by_one,
};

impl<C: RedisConnection> LockBackend for RedisBackend<C> {
    type Lease = TokenLease;

    fn store_kind(&self) -> &'static str {
        if C::SHARDED { "redis-cluster" } else { "redis" }
    }

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let taken = self.take(name, request).await?;
        self.acknowledged(&[name], taken).await
    }

    async fn released_by(
        &self,
        name: &str,
        lease: &TokenLease,
    ) -> Result<Option<String>, BackendError> {
        self.recorded_release(name, lease.token()).await
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let (token, ttl_ms) = (lease.token(), millis(ttl));
        if !lease.hold().is_exclusive() {
            let args = [ScriptArg::Int(ttl_ms)];
            let extended: i64 = self.run_shared(name, "extend", token, &args).await?;
            return self.renewal_acknowledged(name, extended == 1).await;
        }
        let mut buf = [0; 32];
        let extend = &self.scripts.extend;
        let mut call = extend.call(1, 3);
        call.arg(LockKey::lock(name))
            .arg(token.encode(&mut buf))
            .arg(ttl_ms)
            .arg(lease.fence().map_or(0, FencingToken::get));
        let extended: i64 = extend.run(&call, &mut self.connection.clone()).await?;
        self.renewal_acknowledged(name, extended == 1).await
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        if lease.hold().is_exclusive() {
            return self.release_exclusive(name, lease.token()).await;
        }
        let released: i64 = self.run_shared(name, "release", lease.token(), &[]).await?;
        Ok(released == 1)
    }

    /// Two calls, on a path taken only when something went wrong: the release script (a lock
    /// the attempt took is deleted, or handed on), then `shared.lua` (a shared hold, or a
    /// waiting writer's intent, is dropped).
    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        let token = request.token;
        self.run_release(name, token, ReleaseKeys::WithLine).await?;
        let _: i64 = self.run_shared(name, "abandon", token, &[]).await?;
        Ok(())
    }

    /// All or none in one script, on one Redis node — or on Redis Cluster when every name is
    /// in one hash slot; names in different slots are taken one by one in sorted order, all or
    /// none (a script cannot span slots).
    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<TokenLease>>>, BackendError> {
        if C::SHARDED && !in_one_slot(names) {
            return acquire_one_by_one(self, names, request).await;
        }
        let mut buf = [0; 32];
        let many = &self.scripts.many;
        let mut call = many.call(2 * names.len(), 4);
        for name in names {
            call.arg(LockKey::lock(name))
                .arg(FenceCounter::of_lock(name));
        }
        call.arg(request.token.encode(&mut buf))
            .arg(millis(request.ttl))
            .arg(u64::from(self.fencing))
            .arg(request.holder);
        let reply: Vec<i64> = many.run(&call, &mut self.connection.clone()).await?;
        let lease = TokenLease::new(request.token, Hold::Mutex);
        match reply.split_first() {
            Some((1, fences)) if fences.len() == names.len() => {
                let grants = (fences.iter())
                    .map(|&value| {
                        let fence = u64::try_from(value).ok().and_then(fence);
                        let lease = lease.fenced(fence);
                        Granted { lease, fence }
                    })
                    .collect();
                self.acknowledged(names, Attempt::Acquired(grants)).await
            }
            Some((0, [pttl])) => Ok(Attempt::Busy {
                holder_ttl: holder_ttl(*pttl),
            }),
            _ => Err(unexpected_reply(&reply)),
        }
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<TokenLease>> {
        Some(self)
    }
}
