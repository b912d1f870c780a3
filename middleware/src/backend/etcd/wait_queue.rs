//! The wait queue: a queued waiter's key stays under the lock's `x/` prefix, in line by its
//! create revision, and watches its predecessor (`watches.rs`). The first key there holds the
//! lock once no shared hold is left (none can be added while an exclusive key waits). A place
//! needs no refreshing: it lives as long as the session, or until the waiter leaves.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::watches::Watch;
use super::{EtcdBackend, EtcdLease, LockKeys, first_under, read, revision};
use crate::backend::store_support::holder_record::record;
use crate::backend::waiting::WaitingRoom;
use crate::backend::{BackendError, Hold, LockRequest, QueuedAttempt, WaitQueue};
use crate::token::OwnerToken;

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
        Box::pin(self.in_line(name, request))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.give_up(name, token))
    }
}

impl EtcdBackend {
    /// Takes the lock if the caller's key is first in line and no shared hold is left; else
    /// puts the key in line (once) and watches what is ahead of it.
    async fn in_line(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<QueuedAttempt<EtcdLease>, BackendError> {
        if let Some(place) = self.inner.watches.waiting(name, request.token) {
            return Ok(QueuedAttempt::in_line_at(place));
        }
        let keys = self.keys(name);
        let (line, shared) = (keys.exclusive_prefix(), keys.shared_prefix());
        let key = keys.exclusive(request.token);
        let session = self.inner.session.term().session;
        let newest_two = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                self.not_given_up(request.token),
            ])
            .and_then([
                Self::put_holding(key.clone(), session, record(&request, Hold::Mutex)),
                first_under(&line),
                first_under(&shared),
                TxnOp::get(line.clone(), Some(newest_two)),
            ])
            .or_else([
                TxnOp::get(key.clone(), None),
                first_under(&line),
                first_under(&shared),
            ]);
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let mut read_at = revision(&answer)?;
        let first = read(&answer, 1)?
            .into_iter()
            .next()
            .map(|kv| kv.key().to_vec());
        let readers_in = !read(&answer, 2)?.is_empty();
        let (place, predecessor) = if answer.succeeded() {
            let place = EtcdLease {
                key,
                session,
                revision: read_at,
            };
            let predecessor = read(&answer, 3)?.into_iter().nth(1);
            (place, predecessor.map(|kv| kv.key().to_vec()))
        } else {
            let Some(mine) = read(&answer, 0)?.into_iter().next() else {
                return Err(BackendError::new("this attempt was given up"));
            };
            let place = EtcdLease {
                key,
                session: mine.lease(),
                revision: mine.create_revision(),
            };
            (place, None)
        };
        let first_in_line = first.as_deref() == Some(place.key.as_slice());
        let predecessor = match predecessor {
            Some(predecessor) => Some(predecessor),
            None if first_in_line => None,
            None => {
                let (at, predecessor) = self.predecessor(&keys, place.revision).await?;
                read_at = at;
                predecessor
            }
        };
        let watch = |target, whole_prefix, hands_over| Watch {
            name: name.to_owned(),
            ticket: request.token,
            target,
            whole_prefix,
            read_at,
            place: Some(place.clone()),
            hands_over,
            own: None,
        };
        let watch = match predecessor {
            // Readers that came in before the line formed are still inside.
            None if readers_in => watch(shared, true, false),
            None => {
                return Ok(QueuedAttempt::Acquired(
                    self.vouched(place, sent, request.ttl).await?,
                ));
            }
            Some(predecessor) => {
                let behind_holder = !readers_in && first.as_deref() == Some(predecessor.as_slice());
                watch(predecessor, false, behind_holder)
            }
        };
        self.inner.watches.watch(watch);
        Ok(QueuedAttempt::in_line_at(place))
    }

    /// The key just ahead of the one created at `revision` in `keys`' line, if any, and the
    /// revision it was read at.
    async fn predecessor(
        &self,
        keys: &LockKeys,
        revision: i64,
    ) -> Result<(i64, Option<Vec<u8>>), BackendError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let line = keys.exclusive_prefix();
        let call = |client: etcd_client::Client| {
            let (line, options) = (line.clone(), options.clone());
            async move { client.kv_client().get(line, Some(options)).await }
        };
        let mut answer = self.inner.members.call_idempotent(call).await?.answer;
        let read_at = answer
            .header()
            .map(|header| header.revision())
            .ok_or_else(|| BackendError::new("etcd answered a read without a header"))?;
        let predecessor = answer.take_kvs().into_iter().next();
        Ok((read_at, predecessor.map(|kv| kv.key().to_vec())))
    }
}
