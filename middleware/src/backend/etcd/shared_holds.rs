//! Read-write locks and semaphores. A shared hold (a reader, a permit) is a key under the lock's
//! `s/` prefix. A reader's is put only while no exclusive key (a holder, a place in line) and no
//! writer's intent is there; a reader that will wait leaves its claim on the next turn when busy,
//! in the same transaction.
//!
//! A writer takes the lock as a mutex does, when no exclusive and no shared key is there, no
//! reader's claim unless its own intent stands, and no other writer's place came before its
//! own. A writer that will wait keeps a place among the writers (`keys.rs`, put in its busy
//! transaction, until it takes the lock or gives up), so writers take turns across processes
//! in the order they came, as Curator's keep their nodes: a process whose run of holds ends
//! asks again behind the writers of the others that waited meanwhile. Only one writer of a
//! locker asks the store at a time (the others wait in its line, `engine/line/`), so each
//! process has at most one place per lock, and the store's order of processes never disagrees
//! with a process's own order of its writers. The first writer in line leaves its intent when
//! readers alone keep it out (every reader that claimed the turn came in), in the same
//! transaction: it bars new readers while the writer waits, and goes when the writer takes the
//! lock (in that transaction too) or gives up. So readers that waited for a writer come in
//! before the next writer, and a writer that waited for readers before the readers after it.
//! A permit is held by the first `permits` shared keys by create revision; an attempt that
//! lands behind them deletes its key again. Shared holds are not fenced.
//!
//! A reader or permit holder that waits for announcements watches the lock's keys (or the other
//! permits) and asks again when one of them is deleted; a writer watches the place of the
//! writer just before it, if any, else the holder's key (from its creation on, so that its
//! deletion is heard at once), else — behind readers — the lock's keys.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard};

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::time::Instant;

use super::watches::Watch;
use super::{
    EtcdBackend, EtcdLease, LockKeys, first_under, in_creation_order, occupied, present, read,
    revision, vacant,
};
use crate::backend::store_support::holder_record::record;
use crate::backend::{
    Attempt, BackendError, Granted, Hold, LockRequest, Patience, Semaphores, SharedLocks,
};
use crate::token::OwnerToken;

impl SharedLocks for EtcdBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let keys = self.keys(name);
        let (key, claim) = (keys.shared(request.token), keys.claim(request.token));
        let session = self.inner.session.term().session;
        // Both branches read the key back: a first copy of this transaction may have put it,
        // and a put again keeps its create revision.
        let txn = Txn::new()
            .when([
                vacant(&keys.exclusive_prefix()),
                vacant(keys.intent_prefix()),
                self.not_given_up(request.token),
            ])
            .and_then([
                Self::put_holding(key.clone(), session, record(&request, Hold::Read)),
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
            return Ok(self.busy(name, request, keys.prefix().to_vec(), true, None, read_at));
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
        let token = request.token;
        let (key, intent, place) = (
            keys.exclusive(token),
            keys.intent(token),
            keys.writer(token),
        );
        let session = self.inner.session.term().session;
        let turn = self.writers_turn(&keys, token);
        let take = || {
            [
                Self::put_holding(key.clone(), session, record(&request, Hold::Write)),
                TxnOp::delete(intent.clone(), None),
                TxnOp::delete(place.clone(), None),
            ]
        };
        let [free, not_given_up] = self.free_for_exclusive(&keys, token);
        let mut when = vec![free, not_given_up, vacant(keys.claim_prefix())];
        when.extend(turn.iter().cloned());
        let mut txn = Txn::new().when(when).and_then(take());
        // Read back when busy: a first copy of this transaction may have put the key.
        let holder = first_under(keys.prefix());
        if request.patience == Patience::Once {
            // A writer that asks once leaves no place and no intent, and passes no claim.
            txn = txn.or_else([holder]);
        } else {
            txn = txn.or_else([
                TxnOp::txn(self.past_claims_or_marks(&keys, token, session, &turn, take())),
                holder,
                TxnOp::get(keys.writer_prefix(), Some(in_creation_order())),
            ]);
            self.inner.session.own(&intent);
            self.inner.session.own(&place);
        }
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let read_at = revision(&answer)?;
        let holder_read = usize::from(request.patience != Patience::Once);
        let put_at = if answer.succeeded() || nested_succeeded(&answer) {
            read_at
        } else {
            let first = read(&answer, holder_read)?.into_iter().next();
            match first {
                Some(first) if first.key() == key.as_slice() => first.create_revision(),
                _ => {
                    self.inner.session.disown(&key);
                    let ahead = match request.patience {
                        Patience::Once => None,
                        _ => self
                            .inner
                            .writers
                            .read_line(token, &place, &read(&answer, 2)?),
                    };
                    let exclusive = keys.exclusive_prefix();
                    let (target, whole_prefix) = match (ahead, first) {
                        // The writer just before this one goes first: its place goes then.
                        (Some(ahead), _) => (ahead, false),
                        // The holder's key: watched from its creation, its deletion is heard at
                        // once (a watch from a past revision can lag by etcd's sync loop).
                        (None, Some(holder)) if holder.key().starts_with(&exclusive) => {
                            (holder.key().to_vec(), false)
                        }
                        // Readers, or claims: any of the lock's keys going.
                        _ => (keys.prefix().to_vec(), true),
                    };
                    return Ok(self.busy(name, request, target, whole_prefix, None, read_at));
                }
            }
        };
        self.inner.writers.leave(token);
        self.inner.session.disown(&intent);
        self.inner.session.disown(&place);
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

impl EtcdBackend {
    /// The comparisons that say no writer's place came before `token`'s: its place is there and
    /// every other was created after it, or — while it has none — there is none.
    fn writers_turn(&self, keys: &LockKeys, token: OwnerToken) -> Vec<Compare> {
        match self.inner.writers.place(token) {
            Some(created) => vec![
                present(&keys.writer(token)),
                Compare::create_revision(keys.writer_prefix(), CompareOp::Greater, created - 1)
                    .with_prefix(),
            ],
            None => vec![vacant(keys.writer_prefix())],
        }
    }

    /// A busy writer's fallback: past the readers' claims if its intent stands (`take`), else
    /// it keeps its place among the writers, and leaves its intent when it is the first of
    /// them and readers alone keep it out (every reader that claimed the turn came in).
    /// Neither is left once its key is there (a first copy of the transaction took the lock).
    fn past_claims_or_marks(
        &self,
        keys: &LockKeys,
        token: OwnerToken,
        session: i64,
        turn: &[Compare],
        take: [TxnOp; 3],
    ) -> Txn {
        let (key, intent, place) = (
            keys.exclusive(token),
            keys.intent(token),
            keys.writer(token),
        );
        let not_holding = Compare::version(key, CompareOp::Equal, 0);
        let leave_place = Txn::new()
            .when([
                self.not_given_up(token),
                not_holding.clone(),
                Compare::version(place.clone(), CompareOp::Equal, 0),
            ])
            .and_then([Self::put(place, session)]);
        let mut first_behind_readers = vec![
            self.not_given_up(token),
            not_holding,
            occupied(&keys.shared_prefix()),
            vacant(keys.claim_prefix()),
        ];
        first_behind_readers.extend(turn.iter().cloned());
        let leave_intent = Txn::new()
            .when(first_behind_readers)
            .and_then([Self::put(intent.clone(), session)]);
        // Readers' claims hold back a writer, unless its intent bars readers already.
        let [free, not_given_up] = self.free_for_exclusive(keys, token);
        let mut past_claims = vec![free, not_given_up, present(&intent)];
        past_claims.extend(turn.iter().cloned());
        Txn::new()
            .when(past_claims)
            .and_then(take)
            .or_else([TxnOp::txn(leave_place), TxnOp::txn(leave_intent)])
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
        let session = self.inner.session.term().session;
        let first = in_creation_order().with_limit(i64::from(permits.get()));
        // Both branches read the permit holders: a first copy of this transaction may have put
        // the key, and a put again keeps its create revision.
        let holders = || TxnOp::get(keys.shared_prefix(), Some(first.clone()));
        let txn = Txn::new()
            .when([
                vacant(&keys.exclusive_prefix()),
                self.not_given_up(request.token),
            ])
            .and_then([
                Self::put_holding(
                    key.clone(),
                    session,
                    record(&request, Hold::Permit { permits }),
                ),
                holders(),
            ])
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
                let deleted_at = self.delete(std::slice::from_ref(&key)).await?;
                Ok(self.busy(
                    name,
                    request,
                    keys.shared_prefix(),
                    true,
                    Some(key),
                    deleted_at,
                ))
            }
            None => {
                self.inner.session.disown(&key);
                Ok(self.busy(name, request, keys.exclusive_prefix(), true, None, read_at))
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

    /// A busy shared answer; a caller that listens for the release watches `blockers` (the
    /// keys under it, with `whole_prefix`) for a deletion after `read_at`, but its `own` key's.
    fn busy<T>(
        &self,
        name: &str,
        request: LockRequest,
        blockers: Vec<u8>,
        whole_prefix: bool,
        own: Option<Vec<u8>>,
        read_at: i64,
    ) -> Attempt<T> {
        if request.patience == Patience::Listens {
            self.inner.watches.watch(Watch {
                name: name.to_owned(),
                ticket: request.token,
                target: blockers,
                whole_prefix,
                read_at,
                own,
                place: None,
                hands_over: false,
            });
        }
        Attempt::Busy { holder_ttl: None }
    }
}

/// Where each waiting writer of this process stands among its lock's writers: the create
/// revision of its place, by owner token, as last read. A writer's turn is compared against it
/// (`writers_turn`); it goes when the writer takes the lock or gives up.
#[derive(Debug, Default)]
pub(super) struct WriterPlaces(Mutex<HashMap<OwnerToken, i64>>);

impl WriterPlaces {
    fn places(&self) -> MutexGuard<'_, HashMap<OwnerToken, i64>> {
        // Every update leaves the map consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The create revision of `token`'s place, as last read.
    fn place(&self, token: OwnerToken) -> Option<i64> {
        self.places().get(&token).copied()
    }

    /// Reads the lock's writers' places, `line` (in creation order): notes where `token`'s,
    /// the key `place`, stands, and answers the key of the place just before it — the last one
    /// while `token` has none.
    fn read_line(&self, token: OwnerToken, place: &[u8], line: &[KeyValue]) -> Option<Vec<u8>> {
        let ahead = match line.iter().position(|kv| kv.key() == place) {
            Some(at) => {
                self.places().insert(token, line[at].create_revision());
                at.checked_sub(1).map(|before| &line[before])
            }
            None => {
                self.leave(token);
                line.last()
            }
        };
        ahead.map(|kv| kv.key().to_vec())
    }

    /// `token` took the lock or gave up: it has no place.
    pub(super) fn leave(&self, token: OwnerToken) {
        self.places().remove(&token);
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
