//! Read-write locks and semaphores. A shared hold (a reader, a permit) is a key under the
//! lock's `s/` prefix, put only while no exclusive key (a holder, a writer waiting in line) is
//! under `x/`: a waiting writer bars new readers for as long as it waits, and no longer (its
//! key goes when it takes the lock or gives up). A writer that asks once takes the lock as a
//! mutex does; one that waits keeps its place in line (`queue.rs`) and holds the lock once
//! every key ahead of it, readers' included, is gone. A permit is held by the first `permits`
//! shared keys by create revision; an attempt that lands behind them deletes its key again.
//! Shared holds are not fenced.
//!
//! A reader or permit holder that waits for announcements watches what keeps it out — any
//! exclusive key, or any other permit — and asks again when one of them is deleted.

use std::num::NonZeroU32;

use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use tokio::time::Instant;

use super::queue::{Heed, InLine};
use super::watches::Watch;
use super::{EtcdBackend, EtcdLease, read, revision, vacant};
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, Patience, Semaphores, SharedLocks,
};

impl SharedLocks for EtcdBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        self.shared_hold(name, request, None).await
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let heed = match request.patience {
            Patience::Once => return self.acquire(name, request).await,
            Patience::Polls => Heed::Not,
            Patience::Listens => Heed::Asks,
        };
        Ok(match self.in_line(name, request, heed).await? {
            InLine::Holds(grant) => Attempt::Acquired(grant),
            InLine::Waits(_) => Attempt::Busy { holder_ttl: None },
        })
    }
}

impl Semaphores for EtcdBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        self.shared_hold(name, request, Some(permits)).await
    }
}

impl EtcdBackend {
    /// A read hold, or one of `permits`: the shared key is put while no exclusive key is
    /// under the lock; a permit keeps it only among the first `permits`.
    async fn shared_hold(
        &self,
        name: &str,
        request: LockRequest,
        permits: Option<NonZeroU32>,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let keys = self.keys(name);
        let key = keys.shared(request.token);
        let session = self.inner.session.term().lease;
        let mut then = vec![Self::put(key.clone(), session)];
        if let Some(permits) = permits {
            let first = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(i64::from(permits.get()))
                .with_keys_only();
            then.push(TxnOp::get(keys.shared_prefix(), Some(first)));
        }
        let txn = Txn::new()
            .when([
                vacant(&keys.exclusive_prefix()),
                self.not_given_up(request.token),
            ])
            .and_then(then);
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let read_at = revision(&answer)?;
        if !answer.succeeded() {
            self.inner.session.disown(&key);
            return Ok(self.busy(name, request, keys.exclusive_prefix(), read_at));
        }
        if permits.is_some() && !read(&answer, 1)?.iter().any(|kv| kv.key() == key) {
            let deleted_at = self.delete(&[key]).await?;
            return Ok(self.busy(name, request, keys.shared_prefix(), deleted_at));
        }
        let lease = EtcdLease {
            key,
            session,
            revision: read_at,
        };
        let lease = self.vouch_for(lease, sent, request.ttl).await?;
        Ok(Attempt::Acquired(Granted { lease, fence: None }))
    }

    /// A busy shared answer; a caller that listens for the release watches the keys under
    /// `blockers` for a deletion after `read_at`.
    fn busy<T>(
        &self,
        name: &str,
        request: LockRequest,
        blockers: Vec<u8>,
        read_at: i64,
    ) -> Attempt<T> {
        if request.patience == Patience::Listens {
            self.inner.watches.watch(Watch {
                name: name.to_owned(),
                ticket: request.token,
                target: blockers,
                whole_prefix: true,
                read_at,
                place: None,
                hands_over: false,
            });
        }
        Attempt::Busy { holder_ttl: None }
    }
}
