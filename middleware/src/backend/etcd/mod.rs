//! The etcd backend (feature `etcd`): etcd's concurrency mutex, on the `etcd-client` crate.
//!
//! Every contender for a lock puts a key of its own under the lock's prefix
//! (`<namespace><name>/x/<owner token>`, `keys.rs`), bound to the process's session lease; the
//! key with the lowest create revision holds the lock, and that revision is its fencing token. etcd answers
//! only once a majority of its members has the write, so a lock survives the loss of any
//! minority of them.
//!
//! * **Acquire** is one transaction: if no key is under the prefix (nobody holds the lock or
//!   waits for it), put ours. A busy answer leaves nothing behind.
//! * **Waiting** ([`WaitQueue`]): a queued waiter's key stays, placed in line by its create
//!   revision, and watches only its predecessor's deletion (`watches.rs`): first come, first
//!   served across processes, and each release wakes one waiter.
//! * **Leases**: one etcd lease per backend (its session, `session.rs`), kept alive by one
//!   keep-alive stream, covers every key it holds; extending a lock reads its key (an
//!   operator may have deleted it) while the session is confirmed alive far enough ahead. If the cluster lets the session
//!   expire (the process was paused or cut off past its TTL), its keys are deleted, its locks
//!   pass on, and their extends report them lost. [`LockBackend::max_ttl`] is two thirds of the
//!   session's TTL.
//! * **Shapes** (`shared_holds.rs`): readers and permit holders put keys of their own beside the
//!   exclusive ones; see [`SharedLocks`](crate::backend::SharedLocks) and
//!   [`Semaphores`](crate::backend::Semaphores).
//! * **Release** deletes the key and says whether it was still the one granted (same create
//!   revision). Dropping the last clone of the backend revokes its session, freeing its locks.
//!   An abandoned attempt marks its token as given up in the transaction that deletes its keys,
//!   so a put of its still on the way lands nowhere.
//!
//! [`WaitQueue`]: crate::backend::WaitQueue
//! [`LockBackend::max_ttl`]: crate::backend::LockBackend::max_ttl

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnResponse,
};
use tokio::time::Instant;

use crate::backend::waiting::WaitingRoom;
use crate::backend::{BackendError, FencingToken, Granted, lease_deadline};
use crate::token::OwnerToken;
use keys::LockKeys;
use members::Members;
use session::Session;
use shared_holds::WriterPlaces;
use transactions::{first_under, in_creation_order, occupied, present, read, revision, vacant};
use watches::Watches;

mod inspection;
mod keys;
mod leader_change;
mod lock_backend;
mod members;
mod session;
mod settings;
mod shared_holds;
mod transactions;
mod wait_queue;
mod watches;

pub use settings::{DEFAULT_NAMESPACE, DEFAULT_SESSION_TTL, EtcdSettings};

/// Locks in etcd: a key per holder or waiter under the lock's prefix, the first by create
/// revision holding it; fenced by that revision; bound to one session lease per backend. See
/// the [module](self) docs.
///
/// Clones share the session, the watch stream and the waiting room.
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::etcd::EtcdBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = EtcdBackend::connect(["http://127.0.0.1:2379"]).await?;
/// let locker = Locker::builder(backend).build()?;
/// let held = locker.lock("coupon:42").await?;
/// let fence = held.guard().fence().expect("etcd fences every hold");
/// // ... write to the data store with `fence` ...
/// held.release().await?;
/// # let _ = fence;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

struct Inner {
    members: Arc<Members>,
    namespace: String,
    session: Arc<Session>,
    watches: Watches,
    room: Arc<WaitingRoom>,
    writers: WriterPlaces,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("namespace", &self.namespace)
            .field("members", &self.members)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// What the backend keeps of one hold: its key, the session lease it is bound to, and its
/// create revision (the fencing token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdLease {
    key: Vec<u8>,
    session: i64,
    revision: i64,
}

impl EtcdLease {
    /// The key that holds the lock.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The fencing token: the key's create revision.
    pub fn fence(&self) -> u64 {
        self.revision.unsigned_abs()
    }
}

impl EtcdBackend {
    /// Connects to the cluster at `endpoints` (`http://host:port`, or `host:port`) with the
    /// default [`EtcdSettings`], and starts the session.
    pub async fn connect<E: AsRef<str>>(endpoints: impl AsRef<[E]>) -> Result<Self, BackendError> {
        Self::connect_with(endpoints, EtcdSettings::default()).await
    }

    /// Connects to the cluster at `endpoints` with `settings`, and starts the session.
    ///
    /// The backend talks to one member at a time and moves to the next when it cannot be
    /// reached or has no leader (a member cut off from the majority answers so at once instead
    /// of waiting); connections are pinged, so a frozen member is noticed within seconds.
    /// Give every member's endpoint.
    pub async fn connect_with<E: AsRef<str>>(
        endpoints: impl AsRef<[E]>,
        settings: EtcdSettings,
    ) -> Result<Self, BackendError> {
        let options = ConnectOptions::new()
            .with_require_leader(true)
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let members = Arc::new(Members::connect(endpoints.as_ref(), &options).await?);
        let session = Session::start(Arc::clone(&members), settings.session_ttl).await?;
        let session = Arc::new(session);
        let (watches, room) = Watches::start(Arc::clone(&members), Arc::clone(&session));
        Ok(Self {
            inner: Arc::new(Inner {
                members,
                namespace: settings.namespace,
                session,
                watches,
                room,
                writers: WriterPlaces::default(),
            }),
        })
    }

    /// The session lease's TTL as the cluster granted it.
    pub fn session_ttl(&self) -> Duration {
        self.inner.session.ttl()
    }

    fn keys(&self, name: &str) -> LockKeys {
        LockKeys::new(&self.inner.namespace, name)
    }

    /// Runs `txn`, which must be safe to apply twice: sent again if a leader change may have
    /// lost it (`leader_change.rs`).
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, BackendError> {
        let call = |client: etcd_client::Client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        };
        let answered = self.inner.members.call_idempotent(call).await?;
        Ok(answered.answer)
    }

    /// Runs `txn` once: an answer lost with a leader is waited for until the store timeout.
    async fn txn_once(&self, txn: Txn) -> Result<TxnResponse, BackendError> {
        let call = |client: etcd_client::Client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        };
        self.inner.members.call(call).await
    }

    /// Whether `lease`'s key is still there, put when it was granted: an operator's release
    /// (`inspection.rs`) deletes it while the session lives on.
    async fn still_put(&self, lease: &EtcdLease) -> Result<bool, BackendError> {
        let call = |client: etcd_client::Client| {
            let key = lease.key.clone();
            async move {
                let options = GetOptions::new().with_keys_only();
                client.kv_client().get(key, Some(options)).await
            }
        };
        let answer = self.inner.members.call(call).await?;
        let held = answer.kvs().first();
        Ok(held.is_some_and(|kv| kv.create_revision() == lease.revision))
    }

    /// A key of ours for `token`, bound to the session's lease `session`.
    fn put(key: Vec<u8>, session: i64) -> TxnOp {
        Self::put_holding(key, session, Vec::new())
    }

    /// A key of ours that holds a lock or waits for it, bound to the session's lease `session`,
    /// with its holder's `record` (`inspection::record`) for an operator.
    fn put_holding(key: Vec<u8>, session: i64, record: Vec<u8>) -> TxnOp {
        TxnOp::put(key, record, Some(PutOptions::new().with_lease(session)))
    }

    /// The exclusive hold `lease`, granted by an attempt sent at `sent`, once the session
    /// vouches for it for `ttl`: the grant the engine gets, fenced by its create revision.
    async fn vouched(
        &self,
        lease: EtcdLease,
        sent: Instant,
        ttl: Duration,
    ) -> Result<Granted<EtcdLease>, BackendError> {
        let lease = self.vouch_for(lease, sent, ttl).await?;
        let fence = Some(FencingToken::new(lease.fence()));
        Ok(Granted { lease, fence })
    }

    /// `lease` once the session vouches for it for `ttl` from `sent`.
    async fn vouch_for(
        &self,
        lease: EtcdLease,
        sent: Instant,
        ttl: Duration,
    ) -> Result<EtcdLease, BackendError> {
        let term = self.inner.session.vouch(lease_deadline(sent, ttl)).await;
        if term.session != lease.session {
            return Err(session_expired());
        }
        Ok(lease)
    }

    /// No attempt of `token`'s was given up: its puts may land.
    fn not_given_up(&self, token: OwnerToken) -> Compare {
        let mark = keys::given_up(&self.inner.namespace, token);
        Compare::create_revision(mark, CompareOp::Equal, 0)
    }

    /// Whether nothing keeps `token` from holding `keys`' lock alone: no key under the lock
    /// (a holder, a place in line, a shared hold), and `token` has not given up.
    fn free_for_exclusive(&self, keys: &LockKeys, token: OwnerToken) -> [Compare; 2] {
        [vacant(keys.prefix()), self.not_given_up(token)]
    }

    /// `token` gave up on `name`: in one transaction, its keys there are deleted and its
    /// attempts marked as given up, so that a put of its still on the way does nothing.
    async fn give_up(&self, name: &str, token: OwnerToken) -> Result<(), BackendError> {
        self.inner.watches.forget(token);
        self.inner.writers.leave(token);
        let keys = self.keys(name);
        let ours = [
            keys.exclusive(token),
            keys.shared(token),
            keys.writer(token),
            keys.intent(token),
            keys.claim(token),
        ];
        let mark = keys::given_up(&self.inner.namespace, token);
        let session = self.inner.session.term().session;
        self.inner.session.bury(&mark);
        let deletion = self.inner.session.deleting(&ours);
        let mut txn = vec![Self::put(mark, session)];
        txn.extend(ours.into_iter().map(|key| TxnOp::delete(key, None)));
        self.txn(Txn::new().and_then(txn)).await?;
        deletion.done();
        Ok(())
    }

    /// Gives up `keys` and deletes them (the session's sweep does, if this cannot); the
    /// revision they were deleted at.
    async fn delete(&self, keys: &[Vec<u8>]) -> Result<i64, BackendError> {
        let deletion = self.inner.session.deleting(keys);
        let deletes: Vec<TxnOp> = keys
            .iter()
            .map(|key| TxnOp::delete(key.clone(), None))
            .collect();
        // Once: a second copy would answer a later revision than the deletion's.
        let deleted = revision(&self.txn_once(Txn::new().and_then(deletes)).await?)?;
        deletion.done();
        Ok(deleted)
    }
}

/// A grant whose session expired before it could be vouched for (its keys are gone with it).
fn session_expired() -> BackendError {
    BackendError::new("the etcd session expired while the lock was being taken")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_fences_with_its_create_revision() {
        let lease = EtcdLease {
            key: b"tower-lock/lock:k/token".to_vec(),
            session: 7,
            revision: 42,
        };
        assert_eq!(lease.fence(), 42);
        assert_eq!(lease.key(), b"tower-lock/lock:k/token");
    }

    #[test]
    fn the_default_session_lets_a_locker_keep_its_default_ttl() {
        assert_eq!(DEFAULT_SESSION_TTL * 2 / 3, Duration::from_secs(10));
    }
}
