//! [`EtcdBackend`] as a [`LockBackend`]: its mutexes (one name and several), and the extend,
//! release and abandon of every hold it grants.

use std::time::Duration;

use etcd_client::{Compare, DeleteOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::keys::LockKeys;
use super::transactions::{first_under, put_by_us};
use super::{EtcdBackend, EtcdLease, session_expired};
use crate::backend::store_support::holder_record::record;
use crate::backend::{
    Attempt, BackendError, FencingToken, Granted, Hold, LockBackend, LockRequest, WaitQueue,
    lease_deadline,
};

/// How long an extend waits to read its key before the session's word alone decides.
const KEY_READ_PATIENCE: Duration = Duration::from_millis(500);

impl LockBackend for EtcdBackend {
    type Lease = EtcdLease;

    fn store_kind(&self) -> &'static str {
        "etcd"
    }

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<EtcdLease>>, BackendError> {
        let keys = self.keys(name);
        let key = keys.exclusive(request.token);
        let session = self.inner.session.term().session;
        // Read back when busy: a first copy of this transaction may have put it.
        let txn = Txn::new()
            .when(self.free_for_exclusive(&keys, request.token))
            .and_then([Self::put_holding(
                key.clone(),
                session,
                record(&request, Hold::Mutex),
            )])
            .or_else([first_under(keys.prefix())]);
        self.inner.session.own(&key);
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let Some(revision) = put_by_us(&answer, std::slice::from_ref(&key))? else {
            self.inner.session.disown(&key);
            return Ok(Attempt::Busy { holder_ttl: None });
        };
        let lease = EtcdLease {
            key,
            session,
            revision,
        };
        Ok(Attempt::Acquired(
            self.vouched(lease, sent, request.ttl).await?,
        ))
    }

    async fn extend(
        &self,
        _name: &str,
        lease: &EtcdLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let deadline = lease_deadline(Instant::now(), ttl);
        let read = tokio::time::timeout(KEY_READ_PATIENCE, self.still_put(lease));
        let (term, key) = tokio::join!(self.inner.session.vouch(deadline), read);
        // A key that cannot be read in time is not known gone: the session vouches alone, as
        // when the store is cut off.
        Ok(term.session == lease.session && !matches!(key, Ok(Ok(false))))
    }

    async fn release(&self, _name: &str, lease: &EtcdLease) -> Result<bool, BackendError> {
        // The key is the holder's alone (its token is in it, and a released hold's token is
        // never used again): a plain delete, which says whether it was still there.
        let deletion = self
            .inner
            .session
            .deleting(std::slice::from_ref(&lease.key));
        let call = |client: etcd_client::Client| {
            let key = lease.key.clone();
            let options = DeleteOptions::new().with_prev_key();
            async move { client.kv_client().delete(key, Some(options)).await }
        };
        let deleted = self.inner.members.call_idempotent(call).await?;
        deletion.done();
        match deleted.answer.prev_kvs().first() {
            Some(held) => Ok(held.create_revision() == lease.revision),
            // Sent twice: the first copy may have deleted it. Only the session's end deletes
            // a held key otherwise.
            None if deleted.resent => Ok(self.inner.session.term().session == lease.session),
            None => Ok(false),
        }
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.give_up(name, request.token).await
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        request: LockRequest,
    ) -> Result<Attempt<Vec<Granted<EtcdLease>>>, BackendError> {
        let session = self.inner.session.term().session;
        let locks: Vec<LockKeys> = names.iter().map(|name| self.keys(name)).collect();
        let ours: Vec<Vec<u8>> = locks
            .iter()
            .map(|keys| keys.exclusive(request.token))
            .collect();
        let vacancies: Vec<Compare> = locks
            .iter()
            .flat_map(|keys| self.free_for_exclusive(keys, request.token))
            .collect();
        let puts: Vec<TxnOp> = ours
            .iter()
            .map(|key| Self::put_holding(key.clone(), session, record(&request, Hold::Mutex)))
            .collect();
        // Read back when busy: a first copy of this transaction may have put them.
        let firsts: Vec<TxnOp> = locks
            .iter()
            .map(|keys| first_under(keys.prefix()))
            .collect();
        let txn = Txn::new().when(vacancies).and_then(puts).or_else(firsts);
        for key in &ours {
            self.inner.session.own(key);
        }
        let sent = Instant::now();
        let answer = self.txn(txn).await?;
        let revision = match put_by_us(&answer, &ours)? {
            Some(revision) => revision,
            None => {
                for key in &ours {
                    self.inner.session.disown(key);
                }
                return Ok(Attempt::Busy { holder_ttl: None });
            }
        };
        let term = self
            .inner
            .session
            .vouch(lease_deadline(sent, request.ttl))
            .await;
        if term.session != session {
            return Err(session_expired());
        }
        let grant = |key| {
            let lease = EtcdLease {
                key,
                session,
                revision,
            };
            let fence = Some(FencingToken::new(lease.fence()));
            Granted { lease, fence }
        };
        Ok(Attempt::Acquired(ours.into_iter().map(grant).collect()))
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<EtcdLease>> {
        Some(self)
    }

    fn max_ttl(&self) -> Option<Duration> {
        Some(self.inner.session.max_ttl())
    }
}
