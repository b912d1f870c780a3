//! The wait queue: a waiter's key stays under the lock's prefix, in line by its create
//! revision, and watches its predecessor (`watches.rs`). Its place needs no refreshing: it
//! lives as long as the session, or until the waiter leaves.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use tokio::time::Instant;

use super::{EtcdBackend, EtcdLease, first_under, read, revision};
use crate::OwnerToken;
use crate::backend::waiting::WaitingRoom;
use crate::backend::{BackendError, BoxFuture, LockRequest, QueuedAttempt, WaitQueue};

impl WaitQueue<EtcdLease> for EtcdBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.inner.room
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        _ticket_ttl: std::time::Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<EtcdLease>, BackendError>> {
        Box::pin(self.queued(name, request))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            self.inner.watches.forget(token);
            self.delete(self.keys(name).of(token)).await
        })
    }
}

impl EtcdBackend {
    /// Takes the lock if the caller's key is first in line; else puts the key in line (once)
    /// and watches its predecessor.
    async fn queued(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<QueuedAttempt<EtcdLease>, BackendError> {
        if let Some(handover) = self.inner.watches.waiting(name, request.token) {
            return Ok(QueuedAttempt::Queued {
                holder_ttl: None,
                handover,
            });
        }
        let keys = self.keys(name);
        let key = keys.of(request.token);
        let session = self.inner.session.term().lease;
        let newest_two = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                Self::put(key.clone(), session),
                first_under(keys.prefix()),
                TxnOp::get(keys.prefix(), Some(newest_two)),
            ])
            .or_else([TxnOp::get(key.clone(), None), first_under(keys.prefix())]);
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let mut read_at = revision(&answer)?;
        let holder = read(&answer, 1)?
            .into_iter()
            .next()
            .map(|kv| kv.key().to_vec());
        let (lease, predecessor) = if answer.succeeded() {
            let lease = EtcdLease {
                key,
                session,
                revision: read_at,
            };
            let predecessor = read(&answer, 2)?.into_iter().nth(1);
            (lease, predecessor.map(|kv| kv.key().to_vec()))
        } else {
            let Some(mine) = read(&answer, 0)?.into_iter().next() else {
                return Err(BackendError::new("etcd lost a key it had just compared"));
            };
            let lease = EtcdLease {
                key,
                session: mine.lease(),
                revision: mine.create_revision(),
            };
            (lease, None)
        };
        if holder.as_deref() == Some(lease.key.as_slice()) {
            let grant = self.vouched(lease, sent, request.ttl).await?;
            return Ok(QueuedAttempt::Acquired(grant));
        }
        let predecessor = match predecessor {
            Some(predecessor) => Some(predecessor),
            None => {
                let (at, predecessor) = self.predecessor(&keys, lease.revision).await?;
                read_at = at;
                predecessor
            }
        };
        let Some(predecessor) = predecessor else {
            // Everybody ahead left between the two reads.
            let grant = self.vouched(lease, sent, request.ttl).await?;
            return Ok(QueuedAttempt::Acquired(grant));
        };
        let behind_holder = holder.as_deref() == Some(predecessor.as_slice());
        let handover = lease.clone();
        self.inner.watches.watch(
            name,
            request.token,
            lease,
            predecessor,
            read_at + 1,
            behind_holder,
        );
        Ok(QueuedAttempt::Queued {
            holder_ttl: None,
            handover,
        })
    }

    /// The key just ahead of the one created at `revision` in `keys`' line, if any, and the
    /// revision it was read at.
    async fn predecessor(
        &self,
        keys: &super::LockKeys,
        revision: i64,
    ) -> Result<(i64, Option<Vec<u8>>), BackendError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let prefix = keys.prefix().to_vec();
        let call = |client: etcd_client::Client| {
            let (prefix, options) = (prefix.clone(), options.clone());
            async move { client.kv_client().get(prefix, Some(options)).await }
        };
        let mut answer = self.inner.members.call(call).await?;
        let read_at = answer
            .header()
            .map(|header| header.revision())
            .ok_or_else(|| BackendError::new("etcd answered a read without a header"))?;
        let predecessor = answer.take_kvs().into_iter().next();
        Ok((read_at, predecessor.map(|kv| kv.key().to_vec())))
    }
}
