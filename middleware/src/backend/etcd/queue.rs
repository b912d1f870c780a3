//! Places in line: a waiter's key (a queued ticket, or a writer's that waits) stays under the
//! lock's prefix, in line by its create revision, and watches its predecessor (`watches.rs`).
//! Its place needs no refreshing: it lives as long as the session, or until the waiter leaves.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use tokio::time::Instant;

use super::watches::Watch;
use super::{EtcdBackend, EtcdLease, LockKeys, first_under, read, revision};
use crate::OwnerToken;
use crate::backend::waiting::WaitingRoom;
use crate::backend::{BackendError, BoxFuture, Granted, LockRequest, QueuedAttempt, WaitQueue};

/// How a waiter in line hears that its predecessor left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Heed {
    /// It does not: it asks again on its own timer.
    Not,
    /// It is woken to ask again.
    Asks,
    /// It is woken, holding the lock when the predecessor held it (a queued ticket).
    TakesHandover,
}

/// Where an attempt in line stands.
pub(super) enum InLine {
    /// First in line: the lock is the caller's.
    Holds(Granted<EtcdLease>),
    /// Behind others, at this place.
    Waits(EtcdLease),
}

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
        Box::pin(async move {
            Ok(
                match self.in_line(name, request, Heed::TakesHandover).await? {
                    InLine::Holds(grant) => QueuedAttempt::Acquired(grant),
                    InLine::Waits(handover) => QueuedAttempt::Queued {
                        holder_ttl: None,
                        handover,
                    },
                },
            )
        })
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
    /// Takes the lock exclusively if the caller's key is first in line; else puts the key in
    /// line (once) and, as `heed` says, watches its predecessor.
    pub(super) async fn in_line(
        &self,
        name: &str,
        request: LockRequest,
        heed: Heed,
    ) -> Result<InLine, BackendError> {
        if heed != Heed::Not
            && let Some(place) = self.inner.watches.waiting(name, request.token)
        {
            return Ok(InLine::Waits(place));
        }
        let keys = self.keys(name);
        let key = keys.exclusive(request.token);
        let session = self.inner.session.term().lease;
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
        let (place, predecessor) = if answer.succeeded() {
            let place = EtcdLease {
                key,
                session,
                revision: read_at,
            };
            let predecessor = read(&answer, 2)?.into_iter().nth(1);
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
        if holder.as_deref() == Some(place.key.as_slice()) {
            return Ok(InLine::Holds(self.vouched(place, sent, request.ttl).await?));
        }
        if heed == Heed::Not {
            return Ok(InLine::Waits(place));
        }
        let predecessor = match predecessor {
            Some(predecessor) => Some(predecessor),
            None => {
                let (at, predecessor) = self.predecessor(&keys, place.revision).await?;
                read_at = at;
                predecessor
            }
        };
        let Some(predecessor) = predecessor else {
            // Everybody ahead left between the two reads.
            return Ok(InLine::Holds(self.vouched(place, sent, request.ttl).await?));
        };
        let behind_holder = holder.as_deref() == Some(predecessor.as_slice());
        self.inner.watches.watch(Watch {
            name: name.to_owned(),
            ticket: request.token,
            target: predecessor,
            whole_prefix: false,
            read_at,
            place: Some(place.clone()),
            hands_over: heed == Heed::TakesHandover && behind_holder,
        });
        Ok(InLine::Waits(place))
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
