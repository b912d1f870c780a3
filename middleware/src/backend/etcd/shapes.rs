//! Read-write locks and semaphores. A shared hold (a reader, a permit) is a key under the lock's
//! `s/` prefix. A reader's is put only while no exclusive key (a holder, a place in line) and no
//! writer's intent is there; a reader that will wait leaves its claim on the next turn when busy,
//! in the same transaction. A writer takes the lock as a mutex does, when no exclusive and no
//! shared key is there, and no reader's claim unless its own intent stands; a writer that will wait
//! leaves its intent when readers alone keep it out (every reader that claimed the turn came in),
//! in the same transaction: it bars new readers while the writer waits, and goes when the writer
//! takes the lock (in that transaction too) or gives up. So readers that waited for a writer come
//! in before the next writer, and a writer that waited for readers before the readers after it.
//! Intents and claims hold no place in line: each process's waiting writers line up in its waiting
//! room, and a line in the store as well would make two orders that can disagree. A permit is held
//! by the first `permits` shared keys by create revision; an attempt that lands behind them deletes
//! its key again. Shared holds are not fenced.
//!
//! A reader, writer or permit holder that waits for announcements watches the lock's keys (or
//! the other permits) and asks again when one of them is deleted.

use std::num::NonZeroU32;

use etcd_client::{
    GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::Instant;

use super::watches::Watch;
use super::{EtcdBackend, EtcdLease, first_under, occupied, present, read, revision, vacant};
use crate::backend::{
    Attempt, BackendError, Granted, LockRequest, Patience, Semaphores, SharedLocks,
};

impl SharedLocks for EtcdBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let keys = self.keys(name);
        let (key, claim) = (keys.shared(request.token), keys.claim(request.token));
        let session = self.inner.session.term().lease;
        // Both branches read the key back: a first copy of this transaction may have put it,
        // and a put again keeps its create revision.
        let txn = Txn::new()
            .when([
                vacant(&keys.exclusive_prefix()),
                vacant(keys.intent_prefix()),
                self.not_given_up(request.token),
            ])
            .and_then([
                Self::put(key.clone(), session),
                TxnOp::delete(claim.clone(), None),
                TxnOp::get(key.clone(), None),
            ]);
        let leaves_claim = request.patience != Patience::Once;
        let txn = if leaves_claim {
            let leave_claim = Txn::new()
                .when([self.not_given_up(request.token)])
                .and_then([Self::put(claim.clone(), session)]);
            self.inner.session.own(&claim);
            txn.or_else([TxnOp::txn(leave_claim), TxnOp::get(key.clone(), None)])
        } else {
            txn.or_else([TxnOp::get(key.clone(), None)])
        };
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let read_at = revision(&answer)?;
        let Some(put) = last_read(&answer)?.first().map(KeyValue::create_revision) else {
            self.inner.session.disown(&key);
            return Ok(self.busy(name, request, keys.prefix().to_vec(), read_at));
        };
        self.inner.session.disown(&claim);
        if !answer.succeeded() && leaves_claim {
            // A first copy let the reader in; this one left a claim, which would hold writers back.
            self.txn(Txn::new().and_then([TxnOp::delete(claim, None)]))
                .await?;
        }
        self.shared_grant(key, session, put, sent, request).await
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let keys = self.keys(name);
        let (key, intent) = (keys.exclusive(request.token), keys.intent(request.token));
        let session = self.inner.session.term().lease;
        let take = || {
            [
                Self::put(key.clone(), session),
                TxnOp::delete(intent.clone(), None),
            ]
        };
        let leave_intent = Txn::new()
            .when([
                self.not_given_up(request.token),
                occupied(&keys.shared_prefix()),
                vacant(keys.claim_prefix()),
            ])
            .and_then([Self::put(intent.clone(), session)]);
        // Readers' claims hold back a writer, unless its intent bars readers already.
        let [free, not_given_up] = self.free_for_exclusive(&keys, request.token);
        let past_claims = Txn::new()
            .when([free, not_given_up, present(&intent)])
            .and_then(take())
            .or_else([TxnOp::txn(leave_intent)]);
        let [free, not_given_up] = self.free_for_exclusive(&keys, request.token);
        let mut txn = Txn::new()
            .when([free, not_given_up, vacant(keys.claim_prefix())])
            .and_then(take());
        // A writer that asks once leaves no intent, and passes no claim either. Read back when
        // busy: a first copy of this transaction may have put the key.
        let holder = first_under(keys.prefix());
        if request.patience == Patience::Once {
            txn = txn.or_else([holder]);
        } else {
            txn = txn.or_else([TxnOp::txn(past_claims), holder]);
            self.inner.session.own(&intent);
        }
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let read_at = revision(&answer)?;
        let put_at = if answer.succeeded() || nested_succeeded(&answer) {
            read_at
        } else {
            match last_read(&answer)?.first() {
                Some(first) if first.key() == key.as_slice() => first.create_revision(),
                _ => {
                    self.inner.session.disown(&key);
                    return Ok(self.busy(name, request, keys.prefix().to_vec(), read_at));
                }
            }
        };
        self.inner.session.disown(&intent);
        let lease = EtcdLease {
            key,
            session,
            revision: put_at,
        };
        Ok(Attempt::Acquired(
            self.vouched(lease, sent, request.ttl).await?,
        ))
    }
}

impl Semaphores for EtcdBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        self.permit(name, request, permits).await
    }
}

impl EtcdBackend {
    /// One of `permits`: the shared key is put while no exclusive key is under the lock, and
    /// kept only among the first `permits`.
    async fn permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let keys = self.keys(name);
        let key = keys.shared(request.token);
        let session = self.inner.session.term().lease;
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(i64::from(permits.get()))
            .with_keys_only();
        // Both branches read the permit holders: a first copy of this transaction may have put
        // the key, and a put again keeps its create revision.
        let holders = || TxnOp::get(keys.shared_prefix(), Some(first.clone()));
        let txn = Txn::new()
            .when([
                vacant(&keys.exclusive_prefix()),
                self.not_given_up(request.token),
            ])
            .and_then([Self::put(key.clone(), session), holders()])
            .or_else([holders()]);
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let read_at = revision(&answer)?;
        let ours = last_read(&answer)?.into_iter().find(|kv| kv.key() == key);
        match ours {
            Some(put) => {
                self.shared_grant(key, session, put.create_revision(), sent, request)
                    .await
            }
            None if answer.succeeded() => {
                let deleted_at = self.delete(&[key]).await?;
                Ok(self.busy(name, request, keys.shared_prefix(), deleted_at))
            }
            None => {
                self.inner.session.disown(&key);
                Ok(self.busy(name, request, keys.exclusive_prefix(), read_at))
            }
        }
    }

    /// The shared hold `key`, put at `revision`: granted once the session vouches for it.
    async fn shared_grant(
        &self,
        key: Vec<u8>,
        session: i64,
        revision: i64,
        sent: Instant,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let lease = EtcdLease {
            key,
            session,
            revision,
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

/// The keys the last operation of the branch `answer` took (a get) read.
fn last_read(answer: &TxnResponse) -> Result<Vec<KeyValue>, BackendError> {
    let last = answer.op_responses().len().saturating_sub(1);
    read(answer, last)
}

/// Whether the transaction `answer` answers took its first fallback: a transaction nested in
/// its `else` that succeeded.
fn nested_succeeded(answer: &TxnResponse) -> bool {
    matches!(answer.op_responses().first(), Some(TxnOpResponse::Txn(nested)) if nested.succeeded())
}
